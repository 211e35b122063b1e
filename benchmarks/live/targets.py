"""Several caption languages from one talk: what 1, 2, 3 and 4 target languages cost.

One ASR-like stream (``live_replay``: UDHR English at ~2.5 words/s, partials every 0.3-1.0 s) goes
through one ``LiveSession`` whose translators are the first N of de, fr, ja, es: every job is
translated into each language as rows of the same batched forward passes. For each model and N,
in one process, one after another:

* **wall time**: the first ``--partials`` partials, every one translated (no partial skipped), as
  fast as the engine goes; the ratio to N = 1 is what the extra languages cost;
* **lag**: ``--seconds`` of speech replayed in real time (latest partial wins, as live captions
  run): caption lag behind speech (event time minus the speech time of the newest word it
  translates), p50 and p95 over every language's events.

    python -m benchmarks.live.targets --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.live_replay import replay
from benchmarks.live.partials import DATA, asr_partials, speech
from mlx_ssbd.evaluation.report import pyplot, save_figure
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.models.loading import load_model

LANGUAGES = ("de", "fr", "ja", "es")


def stream(seconds: float, seed: int):
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    rng = random.Random(seed)
    words, _ = speech(pairs, int(seconds * 2.5) + 20, 2.5, rng)
    return [(t, p) for t, p in asr_partials(words, rng) if t <= seconds]


def languages_run(loaded, n: int, partials_fast, partials_live, method: str) -> dict:
    def translators():
        return {lang: loaded.translator(lang, config=method_config(method)) for lang in LANGUAGES[:n]}

    segmenter = SegmenterConfig(pause_s=None)
    started = time.perf_counter()
    records, _ = replay(translators(), partials_fast, segmenter, realtime=False)
    wall = time.perf_counter() - started
    live, _ = replay(translators(), partials_live, SegmenterConfig(), realtime=True)
    lags = sorted(
        r["at"] - r["speech_end"] for r in live if r["type"] != "error" and r["speech_end"] is not None
    )
    return {
        "targets": n,
        "wall_s": round(wall, 2),
        "updates": sum(r["type"] != "error" for r in records),
        "errors": sum(r["type"] == "error" for r in records + live),
        "lag_p50_s": round(statistics.median(lags), 2),
        "lag_p95_s": round(lags[int(0.95 * (len(lags) - 1))], 2),
    }


def measure(args) -> dict:
    models, counts = args.models.split(","), [int(n) for n in args.partials.split(",")]
    live = stream(args.seconds, 7)
    results = {"method": args.method, "seconds": args.seconds, "models": {}}
    for model, count in zip(models, counts):
        loaded = load_model(model)
        fast = stream(600, 3)[:count]
        rows = [languages_run(loaded, n, fast, live, args.method) for n in range(1, len(LANGUAGES) + 1)]
        for row in rows:
            row["wall_ratio"] = round(row["wall_s"] / rows[0]["wall_s"], 2)
        results["models"][model] = {"partials": count, "rows": rows}
        del loaded
    return results


def render(result: dict) -> list[str]:
    return [
        f"{machine_line(result['machine'])} Method {result['method']}; languages added in the order "
        f"{', '.join(LANGUAGES)}. Wall: the first partials of an ASR-like stream, every one translated into every "
        f"language, as fast as it goes; lag: {result['seconds']:g} s of speech in real time, latest partial wins "
        "(p50/p95 over every language's events). See the script's docstring.",
        "",
        *markdown_table(
            ["model", "languages", "wall s (partials)", "wall vs 1 language", "lag p50 s", "lag p95 s"],
            [
                (model, row["targets"], f"{row['wall_s']} ({data['partials']})", f"{row['wall_ratio']}x",
                 row["lag_p50_s"], row["lag_p95_s"])
                for model, data in result["models"].items()
                for row in data["rows"]
            ],
        ),
    ]  # fmt: skip


def plot(results: dict, out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for model, data in results["models"].items():
        ax.plot(
            [r["targets"] for r in data["rows"]],
            [r["wall_ratio"] for r in data["rows"]],
            marker="o",
            label=model,
        )
    ax.plot([1, 4], [1, 4], linestyle=":", color="grey", label="each language alone, one after another")
    ax.set_xlabel("target languages")
    ax.set_ylabel("wall time vs 1 language")
    ax.set_xticks([1, 2, 3, 4])
    ax.legend(fontsize=8)
    save_figure(plt, fig, out / "targets.png")


BENCHMARK = Benchmark(
    "targets",
    "Several caption languages from one talk",
    measure,
    render,
    plot=plot,
    options=(
        option("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"),
        option("--method", default="ssbd"),
        option("--partials", default="60,30", help="partials translated for the wall time, per model"),
        option("--seconds", type=float, default=60.0, help="speech replayed in real time for the lag"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
