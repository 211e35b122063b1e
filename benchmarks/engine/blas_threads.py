"""OpenBLAS's threads beside the quantized kernel: one thread against OpenBLAS's default, in one run.

A model whose quantized layers run through mlx-ssbd's CPU kernel still calls BLAS for attention's
small products. OpenBLAS's pthread build keeps its idle workers spinning after each call, on the
cores the kernel's OpenMP threads need; so while a model runs through the kernel mlx-ssbd gives
OpenBLAS one thread (``platform.backend.quiet_blas_workers``). This measures what that buys on a
real model: a decode step and a 16-token verify pass after a 150-token prompt, rounds alternating
between one thread and OpenBLAS's default, medians of each. Needs Debian's OpenBLAS as the BLAS.

    python -m benchmarks.engine.blas_threads --model qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from mlx_ssbd.evaluation.bench import cpu_model, machine_info
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.platform import backend

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="decode steps timed per round")
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
    model = loaded.model
    backend.quiet_blas_workers(False)
    default_threads = backend.blas_threads()
    cache = make_prompt_cache(model)
    mx.eval(model(mx.arange(150)[None] % 1000, cache=cache))

    def step_ms() -> float:
        start = time.perf_counter()
        for _ in range(args.steps):
            mx.eval(model(mx.array([[7]]), cache=cache))
            for layer in cache:
                layer.trim(1)
        return 1000 * (time.perf_counter() - start) / args.steps

    def verify_ms() -> float:
        start = time.perf_counter()
        mx.eval(model(mx.arange(16)[None] + 5, cache=cache))
        for layer in cache:
            layer.trim(16)
        return 1000 * (time.perf_counter() - start)

    times: dict[str, dict[str, list[float]]] = {s: {"step": [], "verify": []} for s in ("one", "default")}
    for _ in range(args.rounds):
        for setting in ("one", "default"):
            backend.quiet_blas_workers(setting == "one")
            step_ms()  # warm-up after the switch
            times[setting]["step"].append(step_ms())
            times[setting]["verify"].append(verify_ms())
    backend.quiet_blas_workers(True)
    medians = {s: {k: statistics.median(v) for k, v in t.items()} for s, t in times.items()}
    result = {
        "model": args.model,
        "weights": loaded.weights,
        "default_threads": default_threads,
        "rounds": args.rounds,
        "times_ms": times,
        "medians_ms": medians,
        "machine": machine_info(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "blas_threads.json").write_text(json.dumps(result, indent=2))
    one, default = medians["one"], medians["default"]
    lines = [
        "# OpenBLAS threads beside the quantized kernel",
        "",
        f"{cpu_model()}, {result['machine']['cpus']} CPUs, MLX {result['machine']['mlx_version']}, "
        f"BLAS {result['machine']['blas']}; {args.model}, {loaded.weights}. After a 150-token prompt; "
        f"{args.rounds} alternating rounds, medians.",
        "",
        "| OpenBLAS threads | decode step ms | 16-token verify ms |",
        "|---|---|---|",
        f"| 1 (mlx-ssbd's setting) | {one['step']:.1f} | {one['verify']:.1f} |",
        f"| {default_threads} (OpenBLAS's default) | {default['step']:.1f} | {default['verify']:.1f} |",
        f"| default / one | {default['step'] / one['step']:.2f}x | {default['verify'] / one['verify']:.2f}x |",
    ]
    (args.out / "blas_threads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
