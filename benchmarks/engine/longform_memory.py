"""Long-form memory: many segments through one translator, memory sampled along the way.

A captioning session runs for hours: one model, one system-prompt cache, thousands of updates.
This replays a stream of ASR partials (cycled until ``--updates`` is reached) through one
``StreamTranslator`` and records, every ``--every`` updates, the process RSS, MLX's active memory
and the KV cache's size in tokens and bytes. Flat lines mean nothing accumulates per update.

    python -m benchmarks.engine.longform_memory --model qwen2.5-coder-0.5b --updates 1000 --out DIR
"""

from __future__ import annotations

import itertools
import json
import resource
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first, before mlx.core)
from benchmarks.common import DATA, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd import method_config, stream_translate
from mlx_ssbd.evaluation.report import pyplot, save_figure
from mlx_ssbd.evaluation.streams import read_partials
from mlx_ssbd.models.loading import load_model

import mlx.core as mx


def rss_mb() -> float:
    """Current resident memory (Linux /proc); the peak from getrusage elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def measure(args) -> dict:
    loaded = load_model(args.model)
    translator = loaded.translator("de", config=method_config("ssbd", beta=0.2))
    partials = list(read_partials(args.data))
    stream = itertools.chain.from_iterable(itertools.repeat(partials))
    samples, start = [], time.perf_counter()
    for n, update in enumerate(stream_translate(translator, stream), 1):
        if n % args.every == 0 or n == 1:
            samples.append(
                {
                    "update": n,
                    "caption": update.caption,
                    "rss_mb": round(rss_mb(), 1),
                    "mlx_active_mb": round(mx.get_active_memory() / 2**20, 1),
                    "kv_tokens": len(translator.cache),
                    "kv_mb": round(translator.cache.nbytes / 2**20, 2),
                    "elapsed_s": round(time.perf_counter() - start, 1),
                }
            )
            print(json.dumps(samples[-1]), flush=True)
        if n >= args.updates:
            break
    first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
    return {
        "model": loaded.name,
        "updates": args.updates,
        "data": relative(args.data),
        "samples": samples,
        "rss_growth_mb_after_warmup": round(last["rss_mb"] - first["rss_mb"], 1),
        "mlx_active_growth_mb_after_warmup": round(last["mlx_active_mb"] - first["mlx_active_mb"], 1),
    }


def render(result: dict) -> list[str]:
    return [
        f"{machine_line(result['machine'])} {result['model']}, SSBD (β = 0.2), the partials of "
        f"`{result['data']}` over and over for {result['updates']} updates. After the first sample: process RSS "
        f"grew {result['rss_growth_mb_after_warmup']} MB, MLX's active memory "
        f"{result['mlx_active_growth_mb_after_warmup']} MB (plot: `longform_memory.png`).",
        "",
        *markdown_table(
            ["update", "caption", "RSS MB", "MLX active MB", "KV tokens", "KV MB", "elapsed s"],
            [
                (
                    s["update"],
                    s["caption"],
                    s["rss_mb"],
                    s["mlx_active_mb"],
                    s["kv_tokens"],
                    s["kv_mb"],
                    s["elapsed_s"],
                )
                for s in result["samples"]
            ],
        ),
    ]


def plot(result: dict, out: Path) -> None:
    samples = result["samples"]
    plt = pyplot()
    if plt is None:
        return
    x = [s["update"] for s in samples]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(x, [s["rss_mb"] for s in samples], label="process RSS (MB)")
    ax.plot(x, [s["mlx_active_mb"] for s in samples], label="MLX active memory (MB)")
    ax.set_xlabel("updates")
    ax.set_ylabel("MB")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title("Memory over a long captioning session", fontsize=10)
    save_figure(plt, fig, out / "longform_memory.png")


BENCHMARK = Benchmark(
    "longform_memory",
    "Memory over a long captioning session",
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--data", default=str(DATA / "talks" / "talk-partials.jsonl")),
        option("--updates", type=int, default=1000),
        option("--every", type=int, default=50),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
