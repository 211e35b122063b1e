"""The ``doctor`` matmul probe under each BLAS, alternating, in fresh processes.

Each choice is a value of ``$MLX_SSBD_BLAS`` (``openblas``, ``mkl``, ``none`` or a library path,
e.g. cmeel-openblas's ``libopenblas.so.0`` from ``pip download cmeel-openblas``); every round runs
each choice once in its own process (the BLAS is chosen at import), so the choices share the
machine's conditions. Writes ``blas_probe.json`` and ``blas_probe.md``.

    python -m benchmarks.engine.blas_probe --choices openblas,mkl,none --rounds 3 --out DIR
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option

PROBE = (
    "import mlx_ssbd; from mlx_ssbd.platform.backend import BLAS; from mlx_ssbd_cli.doctor import matmul_probe; "
    "import json; print(json.dumps([BLAS.name, matmul_probe(2.0)]))"
)


def measure(args) -> dict:
    choices = args.choices.split(",")
    labels = args.labels.split(",") if args.labels else choices
    runs = {label: [] for label in labels}
    for _ in range(args.rounds):
        for label, choice in zip(labels, choices):
            out = subprocess.run(
                [sys.executable, "-c", PROBE],
                env={**os.environ, "MLX_SSBD_BLAS": choice},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            name, gflops = json.loads(out.strip().splitlines()[-1])
            runs[label].append({"loaded": name, "gflops": round(gflops, 1)})
            print(label, name, round(gflops, 1), flush=True)
    return {"rounds": args.rounds, "runs": runs}


def render(result: dict) -> list[str]:
    return [
        f"{machine_line(result['machine'])} {result['rounds']} rounds, every choice once per round in its "
        "own process.",
        "",
        *markdown_table(
            ["BLAS", "loaded as", "each round", "median"],
            [
                (label, r[0]["loaded"], " / ".join(str(x["gflops"]) for x in r),
                 f"{statistics.median(x['gflops'] for x in r):.1f}")
                for label, r in result["runs"].items()
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "blas_probe",
    "BLAS: the doctor matmul probe (fp32 1024x1024, GFLOP/s)",
    measure,
    render,
    options=(
        option("--choices", default="openblas,mkl,none", help="comma-separated $MLX_SSBD_BLAS values"),
        option("--labels", default=None, help="comma-separated names for the report (default: the choices)"),
        option("--rounds", type=int, default=3),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
