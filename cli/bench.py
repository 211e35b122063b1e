"""``mlx-ssbd bench``: every method on the same items in one run, with a report and plots."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from mlx_ssbd.evaluation.bench import (
    NoReferences,
    items_from_pairs,
    machine_info,
    make_configs,
    partials_items,
    run_bench,
    summarize,
)
from mlx_ssbd.evaluation.datasets import describe, load_pairs
from mlx_ssbd.evaluation.report import write_report
from mlx_ssbd.evaluation.scorers import COMET_PYTHON_ENV, DEFAULT_COMET, SEMSIM_LABEL, Comet, add_scores
from mlx_ssbd.evaluation.streams import DEFAULT_LAG, detect_format
from mlx_ssbd.live import scripts
from mlx_ssbd.live.methods import METHODS

import click

from .common import check_languages, load, user_errors, weights_option

UDHR_NOTE = "UDHR paragraphs (human translations; not FLORES; likely seen in training)"


def parse_list(kind, text: str, allowed=None, bounds=(0.0, 1.0), what="beta"):
    values = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            value = kind(raw)
        except ValueError:
            raise click.BadParameter(f"{raw!r} is not a valid {kind.__name__}") from None
        if allowed is not None and value not in allowed:
            raise click.BadParameter(f"unknown method {raw!r}; known: {', '.join(allowed)}")
        if kind in (float, int) and not bounds[0] <= value <= bounds[1]:
            raise click.BadParameter(f"{what} {value:g} is outside [{bounds[0]:g}, {bounds[1]:g}]")
        values.append(value)
    if not values:
        raise click.BadParameter("empty list")
    return values


def parse_words(text: str | None) -> tuple[int, int] | None:
    """``"10-25"`` -> (10, 25): keep segments whose source has that many words."""
    if text is None:
        return None
    low, sep, high = text.partition("-")
    if not (sep and low.strip().isdigit() and high.strip().isdigit()) or int(low) > int(high):
        raise click.BadParameter(f"{text!r} is not a word range like 10-25", param_hint="--words")
    return int(low), int(high)


def load_items(
    data: str,
    lag: int,
    limit: int | None,
    words: tuple[int, int] | None = None,
    *,
    source: str = "en",
    target: str = "de",
    flores_dir: str | None = None,
    refs: str | None = None,
):
    """The benchmark items of ``--data``: sentence pairs (a JSONL file, FLORES+, a sacrebleu test
    set: ``datasets.load_pairs``) revealed ``lag`` words at a time, or a file of ASR partials, with
    the references of a pairs file ``refs`` by segment id."""
    if Path(data).is_file() and detect_format(data) != "pairs":
        try:
            items = partials_items(data, refs)
        except NoReferences as error:
            raise click.UsageError(f"--refs {error}") from None
    elif refs is not None:
        raise click.UsageError("--refs gives ASR partials their references; sentence pairs carry their own")
    else:
        pairs = load_pairs(data, source, target, flores_dir=flores_dir)
        if words:
            pairs = [p for p in pairs if words[0] <= scripts.word_count(p.src) <= words[1]]
        items = items_from_pairs(pairs, lag)
    return items[:limit] if limit else items


def comet_options(command):
    """``--comet`` and ``--comet-python`` (COMET runs in an environment of its own)."""
    command = click.option(
        "--comet-python",
        default=None,
        metavar="PYTHON",
        envvar=COMET_PYTHON_ENV,
        show_envvar=True,
        help="The Python of an environment with unbabel-comet (it cannot share mlx-lm's).",
    )(command)
    return click.option(
        "--comet",
        "comet",
        default=None,
        metavar="MODEL|CKPT",
        help=f"Score final outputs with COMET: a hub name ({DEFAULT_COMET}, the paper's) or a local "
        "checkpoint (.../checkpoints/model.ckpt).",
    )(command)


DATA_HELP = (
    "Pairs JSONL {id,src,ref}, ASR partials JSONL {id,text,final}, flores[:dev|devtest] "
    "(FLORES+), or sacrebleu:NAME (a WMT test set, e.g. sacrebleu:wmt22)."
)


@click.command(short_help="Compare decoding methods on a data set (NE, speed, quality).")
@click.option("--data", required=True, help=DATA_HELP)
@click.option(
    "--flores-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="A local copy of FLORES+ (SPLIT/CODE.parquet or .jsonl). [default: $MLX_SSBD_FLORES, else the hub]",
)
@click.option(
    "--model", "-m", default=None, help="Model name, directory or HF id. [default: qwen2.5-coder-1.5b]"
)
@click.option("--source", "-s", default="en", show_default=True)
@click.option("--target", "-t", default="de", show_default=True)
@click.option(
    "--methods",
    default="rt,ssbd",
    show_default=True,
    help="Comma list of: " + "; ".join(f"{name}: {m.help}" for name, m in METHODS.items()) + ".",
)
@click.option(
    "--beta", "betas", default=None, help="One beta or a sweep: 0,0.1,0.2,0.5,1. [default: each method's own]"
)
@click.option(
    "--mask-k",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Draft mask-k (the paper's ablation).",
)
@click.option("--display-mask-k", type=click.IntRange(0), default=0, show_default=True)
@click.option(
    "--refs",
    type=click.Path(dir_okay=False),
    default=None,
    help="References for ASR partials: pairs JSONL {id,src,ref}, a segment's by its id.",
)
@click.option("--lag", type=click.IntRange(1), default=DEFAULT_LAG, show_default=True)
@click.option("--limit", type=click.IntRange(1), default=None, help="Use the first N items.")
@click.option(
    "--words",
    default=None,
    metavar="MIN-MAX",
    help="Only pairs whose source has MIN to MAX words (e.g. 10-25: ordinary sentences; Chinese or Japanese: "
    "two characters a word); before --limit.",
)
@click.option(
    "--word-s",
    type=click.FloatRange(0.0),
    default=0.3,
    show_default=True,
    help="Seconds per source word for lagging.",
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory (resumable)."
)
@click.option("--fresh", is_flag=True, help="Discard results already in --out.")
@click.option("--semsim", is_flag=True, help=f"Add a semantic similarity score ({SEMSIM_LABEL}).")
@comet_options
@click.option(
    "--temperature",
    "temperatures",
    default="0",
    show_default=True,
    help="0: greedy; > 0: sampling. A list (0,0.7) runs every method at each temperature.",
)
@click.option(
    "--top-p",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=1.0,
    show_default=True,
    help="Nucleus mass kept when sampling.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Sampling seed (each configuration's own PRNG)."
)
@click.option(
    "--data-note", default=None, help="What the data is, for the report. [default: from the file name]"
)
@click.option(
    "--agree",
    default="0",
    show_default=True,
    help="Stable-text agreement n, or a list (0,2): each n > 0 adds '-agree<n>' variants of the methods.",
)
@click.option(
    "--context",
    default="0",
    show_default=True,
    help="Context token budget, or a list (0,256): each > 0 adds '-ctx<n>' variants (items in document order).",
)
@weights_option
def bench(
    data,
    flores_dir,
    model,
    source,
    target,
    methods,
    betas,
    mask_k,
    display_mask_k,
    refs,
    lag,
    limit,
    words,
    word_s,
    out_dir,
    fresh,
    semsim,
    comet,
    comet_python,
    temperatures,
    top_p,
    seed,
    data_note,
    agree,
    context,
    weights,
):
    """Benchmark decoding policies on one data set, every method in one run.

    \b
    Writes to --out: results.jsonl (one record per update), summary.json, report.md
    (a table shaped like the paper's), speed_ne_vs_beta.png and update_latency.png.

    \b
    Example:
      mlx-ssbd bench --data udhr.en-de.jsonl -t de --methods rt,ssbd,cd \\
        --beta 0,0.1,0.2,0.3,0.5,1 --limit 10 --out results/de
    """
    method_list = parse_list(str, methods, list(METHODS))
    beta_list = parse_list(float, betas) if betas is not None else None
    temperature_list = parse_list(float, temperatures, bounds=(0.0, 10.0), what="temperature")
    check_languages(source, target)
    out = Path(out_dir)
    if fresh and out.exists():
        shutil.rmtree(out)
    with user_errors():
        items = load_items(
            data,
            lag,
            limit,
            parse_words(words),
            source=source,
            target=target,
            flores_dir=flores_dir,
            refs=refs,
        )
    if not items:
        raise click.ClickException(f"{data}: no items")

    # settings that do not go together (a ratio rule with sampling), before the model loads
    with user_errors():
        configs = make_configs(
            method_list,
            beta_list,
            draft_mask_k=mask_k,
            display_mask_k=display_mask_k,
            temperatures=temperature_list,
            top_p=top_p,
            seed=seed,
            agreements=parse_list(int, agree, bounds=(0, 64), what="agreement"),
            contexts=parse_list(int, context, bounds=(0, 100_000), what="context"),
        )
    loaded = load(model, weights=weights)
    translators = {
        label: loaded.translator(target, source_lang=source, config=config)
        for label, config in configs.items()
    }
    note = data_note or (UDHR_NOTE if "udhr" in str(Path(data).resolve()).lower() else describe(data))
    facts = {
        "data": portable(data),
        "data_name": describe(data),
        "data_note": note,
        "model": loaded.name,
        "source": source,
        "target": target,
        "configs": list(translators),
        "lag": lag,
        "display_mask_k": display_mask_k,
        "word_s": word_s,
        "items": len(items),
        "temperatures": temperature_list,
        "top_p": top_p,
        "seed": seed,
    }
    if words:  # only when set, so runs made before these options still resume
        facts["words"] = words
    if refs:
        facts["refs"] = portable(refs)
    if shown := len(next(iter(translators.values())).prompts.examples):  # the model's own (its card's)
        facts["examples"] = shown

    with click.progressbar(
        length=len(items),
        label="Benchmarking",
        file=sys.stderr,
        show_eta=True,
        item_show_func=lambda i: i.id if i else "",
    ) as bar:
        with user_errors():
            records = run_bench(
                translators, items, out, run_facts=facts, on_item=lambda item: bar.update(1, item)
            )

    summary = summarize(records, target_lang=target, word_s=word_s, labels=list(translators))
    summary.update(run=facts, machine=machine_info(), notes=[])
    add_scores(summary, records, semsim=semsim, comet=Comet(comet, python=comet_python) if comet else None)
    written = write_report(out, summary, records)
    click.echo((out / "report.md").read_text())
    click.echo(f"wrote {', '.join(['results.jsonl', *written])} to {out}", err=True)


def portable(path: str) -> str:
    """``path`` relative to the working directory when inside it (reports hold no machine paths)."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return path
