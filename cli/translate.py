"""``mlx-ssbd translate``: one-shot translation, or live captions from a stream."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import click

from mlx_ssbd import DEFAULT_BETA, StreamTranslator, stream_translate
from mlx_ssbd.streams import DEFAULT_LAG, INPUT_KINDS, open_updates
from mlx_ssbd.translator import METHODS, SourceUpdate, method_config

from .common import beta_option, check_languages, load, user_errors
from .live import make_sink

STREAM_METHODS = tuple(m for m in METHODS if m != "rt-nocache")


def paced(updates: Iterator[SourceUpdate], words_per_second: float) -> Iterator[SourceUpdate]:
    """Delay simulated updates as if the words were spoken at ``words_per_second``."""
    shown = 0
    for update in updates:
        words = len(update.text.split())
        time.sleep(max(0, words - shown) / words_per_second)
        shown = 0 if update.final else words
        yield update


def run_stream(translator: StreamTranslator, updates: Iterator[SourceUpdate], sink) -> int:
    """Feed updates to the translator and the sink. Returns the number of committed segments.

    On any error or Ctrl-C the open segment's latest translation is committed first, so nothing
    that was produced is lost; then the error propagates.
    """
    pending, committed = None, 0
    try:
        for update in stream_translate(translator, updates):
            sink.update(update)
            if update.final:
                sink.commit(update.output)
                committed += 1
                pending = None
            else:
                pending = update
    finally:
        if pending is not None and pending.output:
            sink.commit(pending.output)
        sink.close()
    return committed


@click.command()
@click.argument("text", required=False)
@click.option("--stream", "stream_path", metavar="FILE|-",
              help="Stream source updates from FILE (text lines, ASR-partial or pair JSONL), or - for stdin.")
@click.option("--model", "-m", default=None, help="Model name, local mlx-lm directory or HF id. [default: qwen2.5-coder-1.5b]")
@click.option("--source", "-s", default="en", show_default=True, help="Source language (ISO code).")
@click.option("--target", "-t", default="de", show_default=True, help="Target language (ISO code).")
@click.option("--method", type=click.Choice(STREAM_METHODS), default="ssbd", show_default=True)
@beta_option(default=DEFAULT_BETA)
@click.option("--mask-k", type=click.IntRange(0), default=0, show_default=True,
              help="Hide the last k tokens of a non-final caption (display only).")
@click.option("--lag", type=click.IntRange(1), default=DEFAULT_LAG, show_default=True,
              help="Words revealed per update when streaming text lines or pairs.")
@click.option("--input", "input_kind", type=click.Choice(INPUT_KINDS), default="auto", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["auto", "live", "text", "jsonl"]), default="auto",
              show_default=True, help="auto: live view on a terminal, plain text when piped.")
@click.option("--temperature", type=click.FloatRange(0.0), default=0.0, show_default=True,
              help="0 decodes greedily; > 0 samples (biased speculative sampling of drafts).")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option("--realtime", is_flag=True, help="Pace simulated streams at --wps words per second.")
@click.option("--wps", type=click.FloatRange(0.1), default=2.5, show_default=True, help="Words per second for --realtime.")
def translate(text, stream_path, model, source, target, method, beta, mask_k, lag, input_kind, fmt,
              temperature, top_p, seed, realtime, wps):
    """Translate TEXT, or stream live captions from a file or stdin.

    \b
    Examples:
      mlx-ssbd translate "So today I want to talk about rules." -t de
      mlx-ssbd translate --stream talk.txt -t zh --mask-k 2
      asr-tool | mlx-ssbd translate --stream - --input partials --format jsonl
    """
    if (text is None) == (stream_path is None):
        raise click.UsageError("give either TEXT or --stream FILE")
    check_languages(source, target)
    loaded = load(model)
    config = method_config(method, beta=beta, display_mask_k=mask_k, temperature=temperature, top_p=top_p, seed=seed)
    translator = StreamTranslator(
        loaded.model, loaded.tokenizer, family=loaded.family, source_lang=source, target_lang=target,
        config=config,
    )
    if text is not None:
        with user_errors():
            click.echo(translator.update(text, final=True).output)
        return

    sink = make_sink(fmt)
    try:
        with user_errors():
            updates = open_updates(stream_path, lag=lag, kind=input_kind, check=translator.check)
            if realtime:
                updates = paced(updates, wps)
            run_stream(translator, updates, sink)
    except KeyboardInterrupt:
        click.echo("interrupted: the committed translations are above", err=True)
        sys.exit(130)
