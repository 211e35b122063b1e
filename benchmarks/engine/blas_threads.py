"""OpenBLAS's threads beside the quantized kernel: one thread against OpenBLAS's default, in one run.

A model whose quantized layers run through mlx-ssbd's CPU kernel still calls BLAS for attention's
small products. OpenBLAS's pthread build keeps its idle workers spinning after each call, on the
cores the kernel's OpenMP threads need; so while a model runs through the kernel mlx-ssbd gives
OpenBLAS one thread (``platform.backend.quiet_blas_workers``). This measures what that buys on a
real model: a decode step and a 16-token verify pass (``evaluation.passes``) after the short
prompt and after a talk-length context (``--contexts``: OpenBLAS spreads attention's products over
its threads only once the context is long), rounds alternating between one thread and OpenBLAS's
default, medians of each. Needs Debian's OpenBLAS as the BLAS.

    python -m benchmarks.engine.blas_threads --model qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import statistics

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option, whole_numbers
from mlx_ssbd.evaluation.passes import pass_timings
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.platform import backend


def measure(args) -> dict:
    if backend.BLAS.name != "openblas":  # a report that says so, so that a whole run goes on
        return {"blas": backend.BLAS.name, "note": f"BLAS here is {backend.BLAS.name}, not OpenBLAS: "
                "its threads are left alone, nothing to compare."}  # fmt: skip
    loaded = load_model(args.model)
    backend.quiet_blas_workers(False)
    default_threads = backend.blas_threads()
    settings = ("one", "default")
    rows = []
    for context in args.contexts:
        times: dict[str, dict[int, list[float]]] = {s: {1: [], 16: []} for s in settings}
        cached = 0
        for _ in range(args.rounds):
            for setting in settings:
                backend.quiet_blas_workers(setting == "one")
                cached, medians = pass_timings(loaded, [1, 16], args.repeats, context=context or None)
                for n, seconds in medians.items():
                    times[setting][n].append(1000 * seconds)
        medians_ms = {s: {n: statistics.median(v) for n, v in t.items()} for s, t in times.items()}
        rows.append({"cached_tokens": cached, "times_ms": times, "medians_ms": medians_ms})
    backend.quiet_blas_workers(True)
    return {
        "model": args.model,
        "weights": loaded.weights,
        "default_threads": default_threads,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "contexts": rows,
    }


def render(result: dict) -> list[str]:
    if "note" in result:
        return [result["note"]]
    threads = result["default_threads"]
    lines = [
        f"{machine_line(result['machine'])} {result['model']}, {result['weights']}. {result['rounds']} rounds "
        f"alternating one thread and OpenBLAS's default ({threads}); medians of "
        f"{result['repeats']} passes a round, then over rounds.",
        "",
    ]
    cells = []
    for row in result["contexts"]:
        one, default, cached = row["medians_ms"]["one"], row["medians_ms"]["default"], row["cached_tokens"]
        cells += [
            (cached, "1 (mlx-ssbd's setting)", f"{one[1]:.1f}", f"{one[16]:.1f}"),
            (cached, f"{threads} (OpenBLAS's default)", f"{default[1]:.1f}", f"{default[16]:.1f}"),
            (cached, "default / one", f"{default[1] / one[1]:.2f}x", f"{default[16] / one[16]:.2f}x"),
        ]
    header = ["cached tokens", "OpenBLAS threads", "decode step ms", "16-token verify ms"]
    return lines + markdown_table(header, cells)


BENCHMARK = Benchmark(
    "blas_threads",
    "OpenBLAS threads beside the quantized kernel",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-1.5b"),
        option("--rounds", type=int, default=6),
        option("--repeats", type=int, default=5, help="passes of each size timed per round"),
        option(
            "--contexts",
            type=whole_numbers(0, "token counts"),
            default="0,400",
            help="cached tokens before the passes (0: the prompt alone)",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
