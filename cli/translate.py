"""``mlx-ssbd translate``: one-shot translation, or live captions from a stream."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator

from mlx_ssbd.evaluation.lines import check_stream_path
from mlx_ssbd.evaluation.streams import DEFAULT_LAG, INPUT_KINDS, detect_format, open_updates
from mlx_ssbd.live import scripts
from mlx_ssbd.live.methods import DEFAULT_AGREEMENT, METHODS, method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import (
    CaptionCommit,
    CaptionUpdate,
    LiveSession,
    SessionError,
)
from mlx_ssbd.live.source import SourcePartial

import click

from .common import (
    caption_options,
    check_examples_source,
    check_languages,
    cue_chars_option,
    load,
    note_uncovered,
    user_errors,
    weights_option,
)
from .push import PushSink, push_option, push_specs
from .sinks import SINK_FORMATS, make_sink

STREAM_METHODS = tuple(m for m in METHODS if m != "rt-nocache")


def paced(updates: Iterator[SourcePartial], words_per_second: float) -> Iterator[SourcePartial]:
    """Deliver updates in real time: at their ASR ``end`` time when they have one, else as if the
    words were spoken at ``words_per_second``."""
    t0, spoken, shown = time.monotonic(), 0.0, 0
    for update in updates:
        if update.end is not None:
            due = update.end
        else:
            words = scripts.word_count(update.text)
            spoken += max(0, words - shown) / words_per_second
            shown = 0 if update.final else words
            due = spoken
        time.sleep(max(0.0, due - (time.monotonic() - t0)))
        yield update


def run_stream(
    session: LiveSession,
    updates: Iterator[SourcePartial] | Iterator[tuple[float, SourcePartial | None]],
    sink,
) -> int:
    """Push ``updates`` into the session from a reader thread while this thread runs the model
    and writes the session's events to ``sink``. Returns the number of committed captions.
    Updates are partials (timed by their arrival) or ``(heard, partial or None)`` pairs on the
    input's own clock (``StreamingRecognizer.timed``).

    A bad input line ends the input: what was live is committed, every event is written, then
    the error is raised. On Ctrl-C the open caption's latest translation is written as committed.
    """
    failure: list[BaseException] = []

    def read() -> None:
        try:
            for update in updates:
                if session.closed:
                    return
                if isinstance(update, SourcePartial):
                    session.push(update)
                elif update[1] is None:
                    session.tick(update[0])
                else:
                    session.push(update[1], at=update[0])
        except BaseException as error:  # StreamError or any reader failure: reported below
            failure.append(error)
        finally:
            session.close()

    threading.Thread(target=read, name="mlx-ssbd-reader", daemon=True).start()
    committed, latest = 0, None
    try:
        for event in session.run():
            if isinstance(event, SessionError):  # end the input; what is open still commits
                failure.insert(0, ValueError(event.message))
                session.close()
                continue
            if isinstance(event, CaptionCommit):
                sink.commit(event)
                committed, latest = committed + 1, None
            else:
                sink.update(event)
                latest = event
    except KeyboardInterrupt:
        if latest is not None and latest.update.output:
            sink.commit(_as_commit(latest, session.now()))
        raise
    finally:
        sink.close()
    if failure:
        raise failure[0]
    return committed


def _as_commit(event: CaptionUpdate, now: float) -> CaptionCommit:
    """The open caption's latest translation, committed as it stands (on Ctrl-C)."""
    u = event.update
    return CaptionCommit(
        event.caption,
        event.seq + 1,
        u.output,
        u.source,
        event.pushed_at,
        now,
        "clock",
        "interrupted",
        u,
        0,
        event.speech_end,
        now,
    )


@click.command()
@click.argument("text", required=False)
@click.option(
    "--stream",
    "stream_path",
    metavar="FILE|-",
    help="Stream source partials from FILE (text lines, ASR-partial or pair JSONL), or - for stdin.",
)
@click.option(
    "--model",
    "-m",
    default=None,
    help="Model name, local mlx-lm directory or HF id. [default: qwen2.5-coder-1.5b]",
)
@click.option("--source", "-s", default="en", show_default=True, help="Source language (ISO code).")
@caption_options(STREAM_METHODS)
@click.option(
    "--lag",
    type=click.IntRange(1),
    default=DEFAULT_LAG,
    show_default=True,
    help="Words revealed per update when streaming text lines or pairs.",
)
@click.option(
    "--input",
    "input_kind",
    type=click.Choice(INPUT_KINDS),
    default="auto",
    show_default=True,
    help="What --stream reads: plain text, ASR partials, whisper_streaming output, confirmed/unconfirmed "
    "JSONL or sentence pairs (auto: the first line decides).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SINK_FORMATS),
    default="auto",
    show_default=True,
    help="auto: live view on a terminal, plain text when piped; srt/vtt: subtitle cues.",
)
@click.option(
    "--temperature",
    type=click.FloatRange(0.0),
    default=0.0,
    show_default=True,
    help="0 decodes greedily; > 0 samples (biased speculative sampling of drafts).",
)
@click.option(
    "--top-p",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=1.0,
    show_default=True,
    help="With --temperature > 0: sample from the smallest set of tokens whose probabilities add up to P.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option(
    "--realtime",
    is_flag=True,
    help="Replay a file in real time (ASR 'end' times, else --wps); implies --latest-wins.",
)
@click.option(
    "--wps",
    type=click.FloatRange(0.1),
    default=2.5,
    show_default=True,
    help="Words per second for --realtime (Chinese, Japanese: two characters a word).",
)
@click.option(
    "--latest-wins/--every-partial",
    default=None,
    help="Translate only the newest partial when the engine is busy. "
    "[default: on for stdin and --realtime, off for files]",
)
@click.option(
    "--agree",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help=f"Lock caption text once it stood in N consecutive updates "
    f"(LocalAgreement-N; {DEFAULT_AGREEMENT} is usual); 0: off.",
)
@click.option(
    "--auto-commit/--no-auto-commit",
    default=True,
    show_default=True,
    help="Commit without 'final': at stable sentence ends, after --max-words, after --pause.",
)
@click.option(
    "--pause",
    type=click.FloatRange(0.0),
    default=SegmenterConfig.pause_s,
    show_default=True,
    help="Commit when the source has not changed for this many seconds (0: never; live input only).",
)
@push_option
@click.option(
    "--push-stable",
    is_flag=True,
    help="With --agree: push the open caption's locked words as they lock (less delay), not only commits.",
)
@cue_chars_option
@weights_option
def translate(
    text,
    stream_path,
    model,
    source,
    target,
    max_targets,
    glossary,
    examples,
    output,
    method,
    beta,
    mask_k,
    lag,
    input_kind,
    fmt,
    cue_chars,
    temperature,
    top_p,
    seed,
    realtime,
    wps,
    latest_wins,
    agree,
    auto_commit,
    max_words,
    pause,
    context_tokens,
    push,
    push_stable,
    weights,
):
    """Translate TEXT, or stream live captions from a file or stdin.

    \b
    Examples:
      mlx-ssbd translate "So today I want to talk about rules." -t de
      mlx-ssbd translate --stream talk.txt -t zh --mask-k 2
      asr-tool | mlx-ssbd translate --stream - --input partials --format jsonl
      mlx-ssbd translate --stream asr.jsonl --realtime --format srt > captions.srt
      mlx-ssbd translate --stream talk.txt -t de,fr,ja --format srt -o talk.{lang}.srt
      mlx-ssbd translate --stream - -t de,fr --push zoom=https://wmcapi.zoom.us/closedcaption?...
    """
    if (text is None) == (stream_path is None):
        raise click.UsageError("give either TEXT or --stream FILE")
    targets = check_languages(source, target, max_targets)
    check_examples_source(examples, source)
    note_uncovered(targets, glossary, examples)
    pushes = push_specs(push, targets)
    if pushes and stream_path is None:
        raise click.UsageError("--push sends live captions: use it with --stream")
    if push_stable and not (pushes and agree):
        raise click.UsageError("--push-stable pushes the words --agree N locks: give --push and --agree")
    with user_errors():  # a wrong path, an empty or binary file, or settings that do not go together
        if stream_path is not None:  # ... all before the model loads
            check_stream_path(stream_path)
            if stream_path != "-":  # (stdin is not read ahead: a live ASR may not have spoken yet)
                detect_format(stream_path)
        config = method_config(
            method,
            beta=beta,
            display_mask_k=mask_k,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            agreement=agree,
            context_tokens=context_tokens,
        )
    loaded = load(model, weights=weights)
    shown = {} if examples is None else {"examples": examples}  # not given: the model's own
    translators = {
        lang: loaded.translator(lang, source_lang=source, config=config, glossary=glossary, **shown)
        for lang in targets
    }
    translator = translators[targets[0]]
    if text is not None:
        with user_errors():
            for lang, each in translators.items():
                click.echo(("" if len(targets) == 1 else f"{lang}: ") + each.update(text, final=True).output)
        return

    live_input = stream_path == "-" or realtime
    if latest_wins is None:
        latest_wins = live_input
    try:
        with user_errors():
            segmenter = SegmenterConfig(
                sentence_end=auto_commit,
                max_words=max_words if auto_commit else 0,
                pause_s=pause if auto_commit and live_input and pause > 0 else None,
            )
            # Without automatic commits a whole line is one segment: vet it before its first update.
            check = None if segmenter.max_words else translator.check
            updates = open_updates(stream_path, lag=lag, kind=input_kind, check=check)
            if realtime:
                updates = paced(updates, wps)
            sink = make_sink(fmt, targets, output, cue_chars)
            if pushes:
                sink = PushSink(sink, pushes, targets, stable=push_stable)
            run_stream(LiveSession(translators, segmenter=segmenter, latest_wins=latest_wins), updates, sink)
    except KeyboardInterrupt:
        click.echo("interrupted: the committed translations are above", err=True)
        sys.stdout.flush()
        # Not sys.exit: the stdin reader thread may still be blocked in a read, and MLX then
        # aborts in its teardown now and then (SIGABRT instead of 130). Everything is flushed.
        os._exit(130)
