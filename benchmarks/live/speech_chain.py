"""Speech to captions: end-to-end latency and where the compute goes, SSBD against RT.

UDHR English paragraphs are spoken by espeak-ng (a synthetic voice: clearer than a person in a
room, so the ASR errs less than it would on real speech) into one recording. Each method replays
it in real time through the chain ``mlx-ssbd listen --pace realtime`` runs: Whisper tiny.en
(faster-whisper, the buffer re-decoded every ``--step`` s, words confirmed by LocalAgreement-2)
-> ``LiveSession`` (latest partial wins) -> the translator; one method after another in one
process, on the same cores. Reported per method:

* latency from speech to screen: for each caption event, the time it was shown minus the audio
  time of the newest word it translates (the ASR's wait for two agreeing decodes included); for
  each commit, shown minus the end of its sentence's last word; p50 / p95 / max;
* the split of compute: seconds of ASR decoding and of translation, against the wall;
* document chrF++ of the committed captions against the German UDHR text, and against the
  model's own translation of the written English paragraphs (what the ASR and live segmentation
  cost in quality).

Then the recording as fast as possible: recognised in one pass (``listen FILE``), and through the
live policy (``--pace fast``, every partial translated, or commits only): wall time against the
speech's length, and quality.

    python -m benchmarks.live.speech_chain --model qwen2.5-coder-0.5b --paragraphs 6 --methods rt,ssbd --out DIR
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (loads the BLAS before mlx.core)
from benchmarks.common import chrf, machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.partials import DATA
from mlx_ssbd.asr.audio import Replay, read_audio, synthesize
from mlx_ssbd.asr.recognizer import get_asr_card, load_recognizer
from mlx_ssbd.asr.streaming import OnePass, StreamingConfig, StreamingRecognizer
from mlx_ssbd.evaluation.report import pyplot, save_figure
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import CaptionCommit, LiveSession, SessionError
from mlx_ssbd.models.loading import load_model


def recognise(recognizer, samples, step_s: float, realtime: bool, push=None, one_pass: bool = False) -> dict:
    """The recording through the streaming recognizer (or in one pass); each partial with the time
    it came out (seconds from the first sample's playback), handed to ``push`` as it comes."""
    asr = OnePass(recognizer) if one_pass else StreamingRecognizer(recognizer, StreamingConfig(step_s=step_s))
    replay = Replay(samples, step_s, realtime)
    timed = []
    for partial in asr.run(replay):
        timed.append((time.monotonic() - replay.started_at, partial))
        if push is not None:
            push(partial)
    return {"partials": timed, "asr": asr, "started_at": replay.started_at}


def translate_live(loaded, method: str, feed, *, realtime: bool, live_updates: bool = True) -> dict:
    """A ``LiveSession`` fed by ``feed(session)`` on a thread (which closes it), translated here;
    every event's record, times on the feed's clock (``feed`` returns its start, monotonic)."""
    translator = loaded.translator("de", config=method_config(method))
    segmenter = SegmenterConfig(pause_s=SegmenterConfig.pause_s if realtime else None)
    session = LiveSession(translator, segmenter=segmenter, latest_wins=True, live_updates=live_updates)
    session_t0 = time.monotonic() - session.now()
    fed = {}

    def run_feed():
        try:
            fed.update(feed(session))
        finally:
            session.close()

    thread = threading.Thread(target=run_feed, daemon=True)
    started = time.monotonic()
    thread.start()
    events = [e for e in session.run() if not isinstance(e, SessionError)]
    wall = time.monotonic() - started
    thread.join()
    zero = fed["started_at"] - session_t0  # the feed's time 0 on the session clock
    records = [
        {
            "type": "commit" if isinstance(e, CaptionCommit) else "update",
            "shown_s": round(e.at - zero, 3),
            "pushed_s": round(e.pushed_at - zero, 3),
            "speech_end": e.speech_end,
            "source": e.update.source,
            "output": e.update.output,
            "wall_s": round(e.update.stats.wall_s, 4),
            "passes": e.update.stats.forward_passes,
        }
        for e in events
    ]
    return {
        "records": records,
        "wall_s": wall,
        "fed": fed,
        "coalesced": session.coalesced,
        "unshown": session.unshown,
    }


def chain(
    loaded,
    recognizer,
    samples,
    method: str,
    *,
    realtime: bool,
    step_s: float,
    live_updates: bool = True,
    one_pass: bool = False,
) -> dict:
    """ASR and translation together on the same cores, as ``listen`` runs them."""

    def feed(session):
        return recognise(recognizer, samples, step_s, realtime, session.push, one_pass)

    return translate_live(loaded, method, feed, realtime=realtime, live_updates=live_updates)


def replay_partials(loaded, method: str, timed) -> dict:
    """Translation alone: the partials of an ASR-only run pushed at the times they came out."""

    def feed(session):
        started = time.monotonic()
        for due, partial in timed:
            time.sleep(max(0.0, started + due - time.monotonic()))
            session.push(partial)
        return {"started_at": started}

    return translate_live(loaded, method, feed, realtime=True)


def revisions(partials) -> int:
    """Live partials that are not a prefix of the next partial of the same segment (the ASR took words back)."""
    return sum(
        a.segment_id == b.segment_id and not a.final and not b.text.startswith(a.text)
        for a, b in zip(partials, partials[1:])
    )


def lag_stats(lags: list[float], name: str) -> dict:
    if not lags:
        return {}
    return {
        f"{name}_p50_s": round(statistics.median(lags), 3),
        f"{name}_p95_s": round(sorted(lags)[min(len(lags) - 1, int(0.95 * len(lags)))], 3),
        f"{name}_max_s": round(max(lags), 3),
    }


def summarize(
    run: dict, reference: str, text_translation: str, spoken: str, asr_run: dict | None = None
) -> dict:
    """Latencies (speech -> screen, ASR alone, translation alone, commits), compute and quality of one run."""
    asr_run = asr_run or run["fed"]
    asr, timed = asr_run["asr"], asr_run["partials"]
    timed_records = [r for r in run["records"] if r["speech_end"] is not None]
    commits = [r for r in run["records"] if r["type"] == "commit"]
    texts = [r["output"] for r in commits]
    return {
        **lag_stats([r["shown_s"] - r["speech_end"] for r in timed_records], "lag"),
        **lag_stats(
            [r["shown_s"] - r["speech_end"] for r in commits if r["speech_end"] is not None], "commit_lag"
        ),
        **lag_stats([r["shown_s"] - r["pushed_s"] for r in run["records"]], "translation_lag"),
        **lag_stats([t - p.end for t, p in timed if p.end is not None], "asr_lag"),
        "asr_s": round(asr.asr_s, 2),
        "asr_passes": asr.passes,
        "audio_s": round(asr.audio_s, 2),
        "translation_s": round(sum(r["wall_s"] for r in run["records"]), 2),
        "wall_s": round(run["wall_s"], 2),
        "realtime_factor": round(asr.audio_s / run["wall_s"], 3),
        "partials": len(timed),
        "revised_partials": revisions([p for _, p in timed]),
        "coalesced": run["coalesced"],
        "unshown": run["unshown"],
        "events": len(run["records"]),
        "commits": len(commits),
        "forward_passes": sum(r["passes"] for r in run["records"]),
        # ASR finals vs the text spoken
        "heard_chrf": round(chrf([p.text for _, p in timed if p.final], spoken), 2),
        "chrf_vs_reference": round(chrf(texts, reference), 2),
        "chrf_vs_text_translation": round(chrf(texts, text_translation), 2),
        "commit_texts": texts,
        "lags": [round(r["shown_s"] - r["speech_end"], 3) for r in timed_records],
        "lag_times": [r["speech_end"] for r in timed_records],
    }


def translate_text(loaded, sources: list[str]) -> list[str]:
    translator = loaded.translator("de", config=method_config("rt"))
    return [translator.update(src, final=True).output for src in sources]


def plot(result: dict, out: Path) -> None:
    live, facts = result["live"], result["facts"]
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for label, row in live.items():
        ax.plot(
            row["lag_times"],
            row["lags"],
            "o",
            ms=3,
            alpha=0.8,
            label=f"{label} (p50 {row['lag_p50_s']:.1f} s)",
        )
    ax.set_xlabel("speech time of the newest word shown (s)")
    ax.set_ylabel("speech -> screen (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(f"speech -> captions, {facts['model']}, {facts['audio_s']:.0f} s of speech", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(plt, fig, out / PLOT)


def _lags(r: dict, name: str) -> str:
    return f"{r[name + '_p50_s']:.1f} / {r[name + '_p95_s']:.1f}"


PLOT = "speech_chain.png"


def render(result: dict) -> list[str]:
    facts, a, live, offline = result["facts"], result["asr_alone"], result["live"], result["offline"]
    lines = [
        f"{machine_line(result['machine'])} {result['machine']['compute_dtype']}. ASR: {facts['asr']}, "
        f"re-decoded every {facts['step_s']} s. "
        f"{facts['paragraphs']} UDHR paragraphs, {facts['words']} words, voice {facts['voice']}; one run per row, "
        "in one process, one after another.",
        "",
        f"ASR alone, in real time: {a['asr_passes']} decodes, {a['asr_s']:.1f} s of compute for "
        f"{a['audio_s']:.1f} s of speech; a partial comes out p50 / p95 {_lags(a, 'asr_lag')} s after the end of "
        f"its last word; {a['partials']} partials, {a['revised_partials']} of them revised by the next; what it "
        f"heard scores chrF++ {a['heard_chrf']:.1f} against the text spoken.",
        "",
        "Latency p50 / p95 in seconds. *speech -> screen*: a caption event's time minus the audio time of the "
        "newest word it shows; *translation*: minus the time its partial came out of the ASR; *commit*: a "
        "committed caption's time minus its last word's end.",
        "",
    ]
    lines += markdown_table(
        ["run", "speech -> screen", "translation", "commit", "max", "ASR s", "translation s", "forward passes",
         "chrF++ vs ref", "chrF++ vs text translation"],
        [
            (label, _lags(r, "lag"), _lags(r, "translation_lag"), _lags(r, "commit_lag"), f"{r['lag_max_s']:.1f}",
             f"{r['asr_s']:.1f}", f"{r['translation_s']:.1f}", r["forward_passes"], f"{r['chrf_vs_reference']:.1f}",
             f"{r['chrf_vs_text_translation']:.1f}")
            for label, r in live.items()
        ],
    )  # fmt: skip
    lines += [
        "",
        "*alone*: the partials of the ASR-alone run replayed into the translator at the times they came "
        "out (what a machine where ASR and translation do not share cores would see, e.g. the LLM on a GPU); "
        "*with ASR*: both on the same 2 cores, as `listen --pace realtime` runs.",
        "",
        f"![speech to screen, every caption event]({PLOT})",
        "",
        f"The model's translation of the written paragraphs scores chrF++ {result['text_chrf']:.1f} against the "
        "reference.",
        "",
        "## The recording as fast as possible",
        "",
    ]
    return lines + markdown_table(
        ["run", "ASR s (decodes)", "translation s", "wall s", "speech s / wall s", "heard: chrF++ vs the text spoken",
         "chrF++ vs ref", "chrF++ vs text translation"],
        [
            (label, f"{r['asr_s']:.1f} ({r['asr_passes']})", f"{r['translation_s']:.1f}", f"{r['wall_s']:.1f}",
             f"{r['realtime_factor']:.2f}", f"{r['heard_chrf']:.1f}", f"{r['chrf_vs_reference']:.1f}",
             f"{r['chrf_vs_text_translation']:.1f}")
            for label, r in offline.items()
        ],
    )  # fmt: skip


def measure(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)

    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()][: args.paragraphs]
    text = " ".join(p["src"] for p in pairs)
    reference = " ".join(p["ref"] for p in pairs)
    with tempfile.TemporaryDirectory() as tmp:
        samples = read_audio(synthesize(text, f"{tmp}/talk.wav"))
    loaded, recognizer = load_model(args.model), load_recognizer()
    text_translation = " ".join(translate_text(loaded, [p["src"] for p in pairs]))
    text_chrf = chrf([text_translation], reference)
    log = lambda message: print(message, file=sys.stderr, flush=True)
    log(f"text translation: chrF++ {text_chrf:.1f}")

    asr_run = recognise(recognizer, samples, args.step, realtime=True)
    asr_alone = summarize(
        {"records": [], "wall_s": len(samples) / 16000, "coalesced": 0, "unshown": 0, "fed": asr_run},
        reference,
        text_translation,
        text,
    )
    log(f"ASR alone: {asr_alone['asr_s']} s in {asr_alone['asr_passes']} decodes")
    live = {}
    for method in args.methods.split(","):
        for label, run in (
            (f"{method}, alone", lambda method=method: replay_partials(loaded, method, asr_run["partials"])),
            (
                f"{method}, with ASR",
                lambda method=method: chain(
                    loaded, recognizer, samples, method, realtime=True, step_s=args.step
                ),
            ),
        ):
            live[label] = summarize(
                run(), reference, text_translation, text, asr_run if "alone" in label else None
            )
            log(f"{label}: lag p50 {live[label]['lag_p50_s']} s, p95 {live[label]['lag_p95_s']} s")
    offline = {
        "one pass (`listen FILE`)": chain(
            loaded, recognizer, samples, "ssbd", realtime=False, step_s=args.step, one_pass=True
        )
    }
    for method in args.methods.split(","):
        offline[f"{method}, live policy as fast as it goes (`--pace fast`)"] = chain(
            loaded, recognizer, samples, method, realtime=False, step_s=args.step
        )
    offline["ssbd, live policy, commits only (`--pace fast --commits-only`)"] = chain(
        loaded, recognizer, samples, "ssbd", realtime=False, step_s=args.step, live_updates=False
    )
    for label, run in offline.items():
        offline[label] = summarize(run, reference, text_translation, text)
        log(f"{label}: {offline[label]['realtime_factor']}x real time")

    facts = {
        "model": loaded.name,
        "asr": get_asr_card(None).name + " (faster-whisper, int8, greedy)",
        "audio_s": len(samples) / 16000,
        "step_s": args.step,
        "paragraphs": len(pairs),
        "words": len(text.split()),
        "voice": "espeak-ng en-us, 150 words/min",
    }
    result = {
        "facts": facts,
        "text_translation": text_translation,
        "text_chrf": text_chrf,
        "asr_alone": asr_alone,
        "live": live,
        "offline": offline,
    }
    return result


BENCHMARK = Benchmark(
    "speech_chain",
    lambda r: (
        f"Speech to captions ({r['facts']['model']}, {r['facts']['audio_s']:.0f} s of espeak-ng speech)"
    ),
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--paragraphs", type=int, default=6),
        option("--methods", default="rt,ssbd"),
        option("--step", type=float, default=1.0),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
