"""Real-time replay of a long ASR-like stream: do captions keep up with speech?

Builds a synthetic ASR stream from the UDHR English paragraphs (lower-cased, mostly unpunctuated,
words at ~2.5 words/s with jitter, a partial every 0.3-1.0 s, recent words misheard or missing and
corrected later, an ASR ``final`` only every 45-90 s) and replays it in real time into a
``LiveSession`` (latest partial wins, automatic segments) for each method, one after another in
one process. Records every caption event; reports caption lag behind speech (event time minus the
speech time of the newest word it translates), its growth (mean of the last 5 minutes over the
first 5; of the last third over the first third when the speech is shorter than 15 minutes),
p50/p95, the share of partials coalesced, forward passes, and document chrF++ of the committed
captions against the German UDHR text (or the references of ``--data``); plots lag over
time.

    python -m benchmarks.live.live_replay --model qwen2.5-coder-0.5b --minutes 10 --methods rt,ssbd --out DIR
    python -m benchmarks.live.live_replay --never-final --words 5000 --model qwen2.5-coder-0.5b --out DIR

``--never-final``: one ASR segment of N words that never says final and has no punctuation,
replayed as fast as the engine goes (every partial translated: the worst case for cost growth);
reports the update time of the first and last 100 updates.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (loads the BLAS before mlx.core)
from benchmarks.common import chrf, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.partials import DATA, asr_partials, speech
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import (
    CaptionCommit,
    LiveSession,
    SessionError,
)
from mlx_ssbd.live.source import Word
from mlx_ssbd.models.loading import load_model


def replay(
    translator, partials, segmenter: SegmenterConfig, *, realtime: bool
) -> tuple[list[dict], LiveSession]:
    """Push partials at their emission times (or at once); return every event's record and the session."""
    session = LiveSession(translator, segmenter=segmenter, latest_wins=realtime)

    def feed():
        for due, partial in partials:
            if realtime:
                time.sleep(max(0.0, due - session.now()))
            session.push(partial)
        session.close()

    threading.Thread(target=feed, daemon=True).start()
    records = []
    for event in session.run():
        if isinstance(event, SessionError):
            records.append({"type": "error", "message": event.message, "at": event.at})
            continue
        u = event.update
        record = {
            "type": "commit" if isinstance(event, CaptionCommit) else "update",
            "caption": event.caption,
            "at": round(event.at, 3),
            "speech_end": event.speech_end,
            "source": u.source,
            "output": u.output,
            "display": u.display,
            "stable": u.stable,
            "wall_s": round(u.stats.wall_s, 4),
            "passes": u.stats.forward_passes,
            "output_tokens": u.stats.output_tokens,
        }
        record["coalesced"] = event.coalesced
        if isinstance(event, CaptionCommit):
            record["reason"] = event.reason
        records.append(record)
    return records, session


def lag_summary(records: list[dict], session: LiveSession, partials: int, minutes: float) -> dict:
    timed = [r for r in records if r["type"] in ("update", "commit") and r["speech_end"] is not None]
    lags = [r["at"] - r["speech_end"] for r in timed]
    end = max(r["speech_end"] for r in timed)
    window = min(300.0, end / 3)  # two windows that do not overlap, whatever the length
    first = [r["at"] - r["speech_end"] for r in timed if r["speech_end"] <= window]
    last = [r["at"] - r["speech_end"] for r in timed if r["speech_end"] >= end - window]
    commits = [r for r in records if r["type"] == "commit"]
    quantile = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]
    updates = [r for r in records if r["type"] in ("update", "commit")]
    return {
        "partials": partials,
        "updates": len(updates),
        "coalesced": sum(r.get("coalesced", 0) for r in records),
        "repeated": session.repeated + session.unchanged,
        "coalesced_share": sum(r.get("coalesced", 0) for r in records) / partials,
        "commits": len(commits),
        "commit_reasons": {
            k: sum(r["reason"] == k for r in commits) for k in sorted({r["reason"] for r in commits})
        },
        "errors": sum(r["type"] == "error" for r in records),
        "lag_p50_s": statistics.median(lags),
        "lag_p95_s": quantile(lags, 0.95),
        "lag_max_s": max(lags),
        "lag_within_3s": sum(lag <= 3.0 for lag in lags) / len(lags),
        # the talk's final caption: when it was ready after the speech's last word
        "lag_final_s": max(timed, key=lambda r: r["at"])["at"] - end,
        "lag_window_s": window,
        "lag_mean_first_s": statistics.mean(first),
        "lag_mean_last_s": statistics.mean(last),
        "lag_growth": statistics.mean(last) / statistics.mean(first),
        "passes_per_update": sum(r["passes"] for r in updates) / len(updates),
        "update_wall_p50_s": statistics.median(r["wall_s"] for r in updates),
        **throughput(records),
        "speech_minutes": minutes,
    }


def throughput(records: list[dict]) -> dict:
    """What the engine had to produce and what it cost: output tokens of the committed captions
    per source word, forward passes, and busy seconds per pass."""
    events = [r for r in records if r["type"] in ("update", "commit")]
    commits = [r for r in events if r["type"] == "commit"]
    tokens, words = sum(r["output_tokens"] for r in commits), sum(len(r["source"].split()) for r in commits)
    passes, busy = sum(r["passes"] for r in events), sum(r["wall_s"] for r in events)
    return {
        "commit_words": words,
        "commit_output_tokens": tokens,
        "tokens_per_word": tokens / words,
        "forward_passes": passes,
        "busy_s": busy,
        "s_per_pass": busy / passes,
    }


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, records in results.items():
        timed = [r for r in records if r["type"] in ("update", "commit") and r["speech_end"] is not None]
        ax.plot(
            [r["speech_end"] / 60 for r in timed],
            [r["at"] - r["speech_end"] for r in timed],
            lw=1,
            label=label,
        )
    ax.set_xlabel("speech time (min)")
    ax.set_ylabel("caption lag behind speech (s)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def title(result: dict) -> str:
    kind = "Never-final stream" if result["run"]["never_final"] else "Real-time replay of a long ASR stream"
    return f"{kind}: `{result['run']['model']}`"


def render(result: dict) -> list[str]:
    """The report: one row per method."""
    facts, summary, m = result["run"], result["methods"], result["machine"]
    where = f"{machine_line(m)} {m['device']}, {m['compute_dtype']}"
    if facts["never_final"]:
        return [
            f"One ASR segment that never says final, no punctuation, every {facts['stride']}th partial of a "
            f"re-decoding ASR, every one translated (not real time). {where}.",
            "",
            *markdown_table(
                ["method", "words", "updates", "commits", "errors", "update s, first 100", "update s, last 100",
                 "last/first"],
                [
                    (k, s["words"], s["updates"], s["commits"], s["errors"], f"{s['update_wall_mean_first100_s']:.3f}",
                     f"{s['update_wall_mean_last100_s']:.3f}", f"{s['ratio_last_first']:.2f}")
                    for k, s in summary.items()
                ],
            ),
        ]  # fmt: skip
    rows = [
        (k, f"{s['speech_minutes']:.1f}", s["partials"], f"{100 * s['coalesced_share']:.0f}%", s["updates"],
         s["commits"], f"{s['lag_p50_s']:.2f}", f"{s['lag_p95_s']:.2f}", f"{s['lag_max_s']:.1f}",
         f"{100 * s['lag_within_3s']:.0f}%", f"{s['lag_final_s']:.2f}", f"{s['lag_mean_first_s']:.2f}",
         f"{s['lag_mean_last_s']:.2f}", f"{s['lag_growth']:.2f}", f"{s['passes_per_update']:.1f}",
         f"{s['chrf++_doc']:.1f}")
        for k, s in summary.items()
    ]  # fmt: skip
    return [
        f"Latest partial wins, automatic segments ({facts['segmenter']}). Lag = time a caption event was ready "
        f"minus the speech time of the newest word it translates; final caption: when the talk's last caption "
        f"was ready after its last word; the first and last windows are the first and "
        f"last 5 minutes of speech, or thirds of a shorter one. {where}. Data: {facts['data']}. chrF++ on "
        "the whole document (committed captions against the German text; the source is lower-cased and mostly "
        "unpunctuated, so the numbers are low for every method).",
        "",
        *markdown_table(
            ["method", "speech min", "partials", "coalesced", "updates", "commits", "lag p50 s", "lag p95 s",
             "lag max s", "lag <= 3 s", "final caption s", "mean lag first window", "mean lag last window",
             "last/first", "passes/update", "chrF++ doc"],
            rows,
        ),
        "",
        "![caption lag](lag.png)",
    ]  # fmt: skip


def measure(args) -> dict | None:
    if args.throughput:
        for path in sorted(args.out.glob("events-*.jsonl")):
            records = [json.loads(line) for line in path.read_text().splitlines()]
            print(json.dumps({path.stem: throughput(records)}))
        return None

    rng = random.Random(args.seed)
    pairs = [
        json.loads(line)
        for path in args.data or [DATA]
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    needed = args.words if args.never_final else int(args.minutes * 60 * args.wps)
    words, reference = speech(pairs, needed, args.wps, rng)
    if args.never_final:
        words = [Word(w.text.rstrip("."), w.start, w.end) for w in words]
    partials = asr_partials(words, rng, never_final=args.never_final)
    partials = partials[:: args.stride] + ([partials[-1]] if (len(partials) - 1) % args.stride else [])
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = load_model(args.model)
    segmenter = SegmenterConfig()
    results, summary = {}, {}
    for method in args.methods.split(","):
        translator = loaded.translator("de", config=method_config(method))
        translator.update("warm up the model", final=True)
        print(
            f"{method}: replaying {len(partials)} partials ({words[-1].end / 60:.1f} min of speech)...",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        records, session = replay(translator, partials, segmenter, realtime=not args.never_final)
        results[method] = records
        (args.out / f"events-{method}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        )
        if args.never_final:
            updates = [r for r in records if r["type"] in ("update", "commit")]
            first, last = updates[:100], updates[-100:]
            summary[method] = {
                "words": len(words),
                "partials": len(partials),
                "updates": len(updates),
                "commits": sum(r["type"] == "commit" for r in records),
                "errors": sum(r["type"] == "error" for r in records),
                "update_wall_mean_first100_s": statistics.mean(r["wall_s"] for r in first),
                "update_wall_mean_last100_s": statistics.mean(r["wall_s"] for r in last),
                "ratio_last_first": statistics.mean(r["wall_s"] for r in last)
                / statistics.mean(r["wall_s"] for r in first),
                "run_s": time.perf_counter() - started,
            }
        else:
            commits = [r["output"] for r in records if r["type"] == "commit"]
            summary[method] = {
                **lag_summary(records, session, len(partials), words[-1].end / 60),
                "chrf++_doc": chrf(commits, reference),
                "run_s": time.perf_counter() - started,
            }
        print(json.dumps({method: summary[method]}, indent=1), file=sys.stderr, flush=True)
    facts = {
        "model": loaded.name,
        "seed": args.seed,
        "wps": args.wps,
        "stride": args.stride,
        "never_final": args.never_final,
        "segmenter": segmenter.__dict__,
        "data": (
            f"sentences of {', '.join(relative(path) for path in args.data)}"
            if args.data
            else "UDHR English paragraphs (benchmarks/data/udhr/en-de.jsonl)"
        )
        + ", lower-cased, mostly unpunctuated; their German references as the document reference",
    }
    if not args.never_final:
        plot(results, args.out / "lag.png", f"Caption lag behind speech, real-time replay, {args.model}")
    return {"run": facts, "methods": summary}


BENCHMARK = Benchmark(
    "live_replay",
    title,
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--methods", default="rt,ssbd", help="comma-separated methods (mlx_ssbd METHODS)"),
        option("--minutes", type=float, default=10.0, help="speech to replay"),
        option("--wps", type=float, default=2.5, help="speaking rate, words per second"),
        option(
            "--never-final", action="store_true", help="one endless unpunctuated segment, as fast as possible"
        ),
        option("--words", type=int, default=5000, help="words for --never-final"),
        option("--stride", type=int, default=1, help="replay every Nth partial only (and the last)"),
        option("--seed", type=int, default=0),
        option(
            "--data",
            type=Path,
            action="append",
            help="sentence pairs JSONL {src, ref} spoken in order (repeatable); default: the UDHR paragraphs",
        ),
        option(
            "--throughput",
            action="store_true",
            help="only print throughput() for the events-*.jsonl in --out",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
