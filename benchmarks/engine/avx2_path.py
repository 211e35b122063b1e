"""The quantized path against fp32 BLAS on an AVX2 CPU, emulated on this one.

Many x86-64 CPUs have AVX2 but not AVX-512 (AMD before Zen 4, Intel client CPUs): there the
kernel runs its AVX2 build and fp32 BLAS its AVX2 code. This script measures that pairing on the
machine it runs on, each in a process of its own: the kernel's AVX2 build
(``MLX_SSBD_QMM_SIMD=avx2``) against the same layers dequantized to fp32 with MKL held to AVX2
(``MKL_ENABLE_INSTRUCTIONS=AVX2``), beside the widest path of each (what this CPU runs by
itself). Where the CPU has AVX-VNNI (Intel's client CPUs from Alder Lake on have it without
AVX-512) it also runs the kernel's AVX-VNNI build (``MLX_SSBD_QMM_SIMD=avxvnni``) against the same
fp32 AVX2 code (fp32 products gain nothing from VNNI). It reports a decode step and passes of 16
and 64 tokens (``evaluation.passes``, the timing of ``quantized_weights.py``). The cores, caches
and memory stay this machine's: an emulation of the instruction sets, not of an AVX2 machine.
Every build of the kernel gives the same bits (tested), so the translations, and their chrF++,
are those of ``quantized_weights.py``.

    python -m benchmarks.engine.avx2_path --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \\
        --out benchmarks/results/DIR/avx2-path
"""

from __future__ import annotations

import json

from benchmarks.common import child_json, machine_line, pass_ratios, pass_times
from benchmarks.harness import Benchmark, markdown_table, option

# (label, weights, environment): the kernel's path or the BLAS's instruction set
PATHS = (
    ("quantized, widest", "quantized", {}),
    ("dense, widest", "dense", {}),
    ("quantized, AVX2", "quantized", {"MLX_SSBD_QMM_SIMD": "avx2"}),
    ("dense, AVX2", "dense", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
    ("quantized, AVX-VNNI", "quantized", {"MLX_SSBD_QMM_SIMD": "avxvnni"}),
)
# (instructions, quantized row, dense row) of the ratio table
PAIRS = (
    ("widest", "quantized, widest", "dense, widest"),
    ("AVX2", "quantized, AVX2", "dense, AVX2"),
    ("AVX2 + AVX-VNNI", "quantized, AVX-VNNI", "dense, AVX2"),
)


def measure(model: str, repeats: int) -> dict:
    """In this process: the model's pass timings and what ran them."""
    import mlx_ssbd  # noqa: F401  (backend policy first)
    from mlx_ssbd.evaluation.passes import pass_timings
    from mlx_ssbd.models.loading import load_model
    from mlx_ssbd.platform import extension
    from mlx_ssbd.platform.info import backend_info

    loaded = load_model(model)
    _, timings = pass_timings(loaded, (1, 16, 64), repeats)
    ours = extension.kernel()
    return {
        "model": loaded.name,
        "weights": loaded.weights,
        "kernel_path": ours.simd_path() if ours is not None else None,
        "blas": backend_info().blas,
        "passes_s": {str(n): round(t, 5) for n, t in timings.items()},
    }


def render(result: dict) -> list[str]:
    lines = [
        f"{machine_line(result['machine'])} "
        "AVX2: the kernel's AVX2 build (`MLX_SSBD_QMM_SIMD=avx2`) and MKL held to AVX2 "
        "(`MKL_ENABLE_INSTRUCTIONS=AVX2`) on this machine's cores and memory; AVX-VNNI: the kernel's "
        "AVX-VNNI build (`MLX_SSBD_QMM_SIMD=avxvnni`, where this CPU has it); widest: what this CPU runs "
        f"by itself. Medians of {result['repeats']} passes each, one run.",
        "",
    ]
    passes = ["decode step", "16-token pass", "64-token pass"]
    lines += markdown_table(
        ["model", "path", "kernel", *(f"{p} ms" for p in passes)],
        [
            (
                r["model"],
                r["path"],
                r["kernel_path"] if r["weights"] != "dense" else "-",
                pass_times(r["passes_s"]),
            )
            for r in result["rows"]
        ],
    )
    by = {(r["model"], r["path"]): r for r in result["rows"]}
    ratios = [
        (model, isa, pass_ratios(by[model, dense]["passes_s"], by[model, quantized]["passes_s"]))
        for model in dict.fromkeys(r["model"] for r in result["rows"])
        for isa, quantized, dense in PAIRS
        if (model, quantized) in by and (model, dense) in by
    ]
    header = ["model", "instructions", "decode step: dense / quantized", *passes[1:]]
    return [*lines, "", *markdown_table(header, ratios)]


def run(args) -> dict:
    rows = []
    for model in args.models.split(","):
        for label, weights, env in PATHS:
            args_ = ["--child", model, "--repeats", str(args.repeats)]
            measured = child_json(
                __spec__.name, args_, {"MLX_SSBD_WEIGHTS": weights, **env}, f"{model} {label}"
            )
            if "avxvnni" in env.values() and measured["kernel_path"] != "avxvnni":
                print(
                    f"{model} {label}: this CPU has no AVX-VNNI (the kernel ran {measured['kernel_path']}): left out"
                )
                continue
            row = {**measured, "path": label}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"rows": rows, "repeats": args.repeats}


BENCHMARK = Benchmark(
    "avx2_path",
    "The quantized path against fp32 BLAS on an AVX2 CPU (emulated)",
    run,
    render,
    options=(
        option("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"),
        option("--repeats", type=int, default=5),
    ),
    about=__doc__,
    child=lambda args: measure(args.child, args.repeats),
)

if __name__ == "__main__":
    BENCHMARK.main()
