"""Throughput and per-update latency against the number of concurrent streams, RT and SSBD.

A captioning service translating N talks at once: the same paragraphs (lag-k word reveal) are
split round-robin over N streams. For every method the baseline is ``sequential``: one
``StreamTranslator`` per stream, each update run on its own (what a service without batching
does). ``batched`` runs ``MultiStreamTranslator``: one batched forward per step for all streams
with an update. Reports total output tokens per second, updates per second, and the latency a
viewer sees per update (for batched: the wall time of the step that produced it; for sequential:
the update's own time plus the updates of the other streams queued before it in the same round).

    python -m benchmarks.engine.multistream --model qwen2.5-coder-1.5b --methods rt,ssbd --streams 1,2,4 --out DIR
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA, data_pairs, machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.bench import items_from_pairs
from mlx_ssbd.evaluation.report import pyplot, save_figure
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.multistream import MultiStreamTranslator
from mlx_ssbd.models.loading import load_model


def lanes_for(items, n_streams: int) -> list[list[tuple[str, bool]]]:
    lanes = [[] for _ in range(n_streams)]
    for index, item in enumerate(items):
        lanes[index % n_streams].extend((u.text, u.final) for u in item.updates)
    return lanes


def streams_run(loaded, items, n_streams: int, method: str, beta: float, target: str, batched: bool) -> dict:
    lanes = lanes_for(items, n_streams)
    translators = [
        loaded.translator(target, config=method_config(method, beta=beta)) for _ in range(n_streams)
    ]
    multi = MultiStreamTranslator(translators) if batched else None

    def step(sources):
        """Results of one round, and each result's latency as the viewer sees it."""
        if multi is not None:
            t0 = time.perf_counter()
            results = multi.update(sources)
            return results, [time.perf_counter() - t0] * len(results)
        results, latencies, queued = [], [], 0.0
        for tr, source in zip(translators, sources):
            t0 = time.perf_counter()
            results.append(tr.update(source[0], final=source[1]) if source else None)
            queued += time.perf_counter() - t0
            latencies.append(queued)
        return results, latencies

    step([lane[0] if lane else None for lane in lanes])  # warm-up round (not timed)
    for tr in translators:
        tr.reset()
    latencies, tokens, updates = [], 0, 0
    start = time.perf_counter()
    for index in range(max(len(lane) for lane in lanes)):
        results, waits = step([lane[index] if index < len(lane) else None for lane in lanes])
        for result, wait in zip(results, waits):
            if result is not None:
                latencies.append(wait)
                tokens += result.stats.output_tokens
                updates += 1
    wall = time.perf_counter() - start
    latencies.sort()
    return {
        "method": method,
        "mode": "batched" if batched else "sequential",
        "streams": n_streams,
        "updates": updates,
        "wall_s": round(wall, 2),
        "output_tok_per_s": round(tokens / wall, 2),
        "updates_per_s": round(updates / wall, 3),
        "median_update_latency_s": round(statistics.median(latencies), 3),
        "p90_update_latency_s": round(latencies[int(0.9 * (len(latencies) - 1))], 3),
    }


def measure(args) -> dict:
    pairs = data_pairs(args.data, args.items)
    loaded = load_model(args.model)
    items = items_from_pairs(pairs, lag=3)
    counts = [int(s) for s in args.streams.split(",")]
    rows = []
    for method in args.methods.split(","):
        runs = [(max(counts), False)] + [(n, True) for n in counts]  # sequential baseline, then batched
        for n, batched in runs:
            rows.append(streams_run(loaded, items, n, method, args.beta, args.target, batched))
            print(json.dumps(rows[-1]), flush=True)
    base = {r["method"]: r for r in rows if r["mode"] == "sequential"}
    for row in rows:
        row["throughput_vs_sequential"] = round(
            row["output_tok_per_s"] / base[row["method"]]["output_tok_per_s"], 2
        )
    return {"model": loaded.name, "beta": args.beta, "items": args.items, "rows": rows}


def render(result: dict) -> list[str]:
    machine = result["machine"]
    return [
        f"{machine_line(machine)} {machine['device']}, {machine['compute_dtype']}. sequential: one translator "
        "per stream, updates run one after another; batched: one forward per step for all streams. Latency: "
        "what a viewer of one stream waits per update.",
        "",
        *markdown_table(
            ["method", "mode", "streams", "output tok/s", "x sequential", "updates/s", "median latency s", "p90 s"],
            [
                (r["method"], r["mode"], r["streams"], r["output_tok_per_s"], r["throughput_vs_sequential"],
                 r["updates_per_s"], r["median_update_latency_s"], r["p90_update_latency_s"])
                for r in result["rows"]
            ],
        ),
    ]  # fmt: skip


def plot(result: dict, out: Path) -> None:
    rows = result["rows"]
    plt = pyplot()
    if plt is None:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for method, colour in zip(
        dict.fromkeys(r["method"] for r in rows), ("tab:gray", "tab:blue", "tab:green")
    ):
        batched = [r for r in rows if r["method"] == method and r["mode"] == "batched"]
        sequential = next(r for r in rows if r["method"] == method and r["mode"] == "sequential")
        n = [r["streams"] for r in batched]
        ax1.plot(n, [r["output_tok_per_s"] for r in batched], "o-", color=colour, label=f"{method} batched")
        ax1.axhline(sequential["output_tok_per_s"], color=colour, ls=":", lw=1, label=f"{method} sequential")
        ax2.plot(
            n, [r["median_update_latency_s"] for r in batched], "o-", color=colour, label=f"{method} batched"
        )
        ax2.plot(
            [sequential["streams"]],
            [sequential["median_update_latency_s"]],
            "x",
            color=colour,
            ms=9,
            label=f"{method} sequential",
        )
    for ax, ylabel in ((ax1, "total output tokens/s"), (ax2, "median update latency (s)")):
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    fig.suptitle("Many streams: throughput and latency", fontsize=10)
    save_figure(plt, fig, out / "multistream.png")


BENCHMARK = Benchmark(
    "multistream",
    lambda r: f"Concurrent streams ({r['model']}, {r['items']} UDHR paragraphs, lag 3, SSBD β={r['beta']})",
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-1.5b"),
        option("--data", default=str(DATA / "udhr" / "en-de.jsonl")),
        option("--target", default="de"),
        option("--items", type=int, default=4),
        option("--methods", default="rt,ssbd"),
        option("--streams", default="1,2,4"),
        option("--beta", type=float, default=0.2),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
