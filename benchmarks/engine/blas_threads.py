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

import argparse
import json
import statistics
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from mlx_ssbd.evaluation.bench import cpu_model, machine_info
from mlx_ssbd.evaluation.passes import pass_timings
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.platform import backend


def token_counts(text: str) -> list[int]:
    """``--contexts``: comma-separated token counts, each 0 or more."""
    try:
        counts = [int(c) for c in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts (0 or more), got {text!r}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5, help="passes of each size timed per round")
    parser.add_argument(
        "--contexts",
        type=token_counts,
        default="0,400",
        help="cached tokens before the passes (0: the prompt alone)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if backend.BLAS.name != "openblas":  # a report that says so, so that a whole run goes on
        note = (
            f"BLAS here is {backend.BLAS.name}, not OpenBLAS: its threads are left alone, nothing to compare."
        )
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "blas_threads.json").write_text(json.dumps({"blas": backend.BLAS.name, "note": note}))
        (args.out / "blas_threads.md").write_text(
            f"# OpenBLAS threads beside the quantized kernel\n\n{note}\n"
        )
        print(note)
        return

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
    result = {
        "model": args.model,
        "weights": loaded.weights,
        "default_threads": default_threads,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "contexts": rows,
        "machine": machine_info(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "blas_threads.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# OpenBLAS threads beside the quantized kernel",
        "",
        f"{cpu_model()}, {result['machine']['cpus']} CPUs, MLX {result['machine']['mlx_version']}, "
        f"BLAS {result['machine']['blas']}; {args.model}, {loaded.weights}. {args.rounds} rounds "
        f"alternating one thread and OpenBLAS's default ({default_threads}); medians of "
        f"{args.repeats} passes a round, then over rounds.",
        "",
        "| cached tokens | OpenBLAS threads | decode step ms | 16-token verify ms |",
        "|---|---|---|---|",
    ]
    for row in rows:
        one, default, cached = row["medians_ms"]["one"], row["medians_ms"]["default"], row["cached_tokens"]
        lines += [
            f"| {cached} | 1 (mlx-ssbd's setting) | {one[1]:.1f} | {one[16]:.1f} |",
            f"| {cached} | {default_threads} (OpenBLAS's default) | {default[1]:.1f} | {default[16]:.1f} |",
            f"| {cached} | default / one | {default[1] / one[1]:.2f}x | {default[16] / one[16]:.2f}x |",
        ]
    (args.out / "blas_threads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
