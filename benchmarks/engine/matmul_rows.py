"""Where a multi-token pass's time goes on this CPU: one weight product at 1..32 rows, sgemm vs sgemv.

A forward pass is almost only products of the token rows with the weights. This times one such
product, rows (M x 1536) @ weight.T (1536 x 8960: an MLP weight of the 1.5B), in MLX, three ways:
plain sgemm (``MLX_SSBD_GEMV=0``), the shim with one-row products through sgemv only
(``MLX_SSBD_FEW_ROWS=1``), and the shim as it ships (2-8 rows through its few-rows kernel); set per
process (the shim is chosen at import); rounds alternate them so all share the machine's
conditions. Writes ``matmul_rows.json`` and ``.md``.

    python -m benchmarks.engine.matmul_rows --out DIR
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option

PROBE = """
import json, statistics, sys, time
import mlx_ssbd
from mlx_ssbd.platform.info import backend_info
import mlx.core as mx
weight = mx.random.normal((8960, 1536)); mx.eval(weight)
out = {"gemv": backend_info().gemv, "ms": {}}
for m in [int(v) for v in sys.argv[1].split(",")]:
    rows = mx.random.normal((m, 1536)); mx.eval(rows)
    times = []
    for _ in range(15):
        start = time.perf_counter(); mx.eval(rows @ weight.T); times.append(time.perf_counter() - start)
    out["ms"][m] = 1000 * statistics.median(times)
print(json.dumps(out))
"""


def measure(args) -> dict:
    modes = {
        "sgemm only": {"MLX_SSBD_GEMV": "0"},
        "sgemv, 1 row": {"MLX_SSBD_GEMV": "1", "MLX_SSBD_FEW_ROWS": "1"},
        "shim": {"MLX_SSBD_GEMV": "1", "MLX_SSBD_FEW_ROWS": "8"},
    }
    runs: dict[str, list[dict]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, env in modes.items():
            text = subprocess.run(
                [sys.executable, "-c", PROBE, args.rows],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs[name].append(json.loads(text.strip().splitlines()[-1]))
            print(name, runs[name][-1], flush=True)
    rows = [int(v) for v in args.rows.split(",")]
    median = {
        name: {str(m): statistics.median(r["ms"][str(m)] for r in rs) for m in rows}
        for name, rs in runs.items()
    }
    return {"rounds": args.rounds, "runs": runs, "median_ms": median}


def render(result: dict) -> list[str]:
    median = result["median_ms"]
    one = median["shim"]["1"]
    return [
        f"{machine_line(result['machine'])} The shim as it ships: {result['runs']['shim'][0]['gemv']}.",
        "",
        *markdown_table(
            ["rows", "sgemm only, ms", "sgemv for 1 row, else sgemm, ms", "shim (few-rows kernel), ms",
             "shim: x one row"],
            [
                (m, f"{median['sgemm only'][m]:.2f}", f"{median['sgemv, 1 row'][m]:.2f}", f"{median['shim'][m]:.2f}",
                 f"{median['shim'][m] / one:.2f}")
                for m in median["shim"]
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "matmul_rows",
    lambda r: f"One weight product, rows x 1536 @ 1536 x 8960 fp32 (median of {r['rounds']} rounds x 15)",
    measure,
    render,
    options=(option("--rows", default="1,2,3,4,8,16,32"), option("--rounds", type=int, default=3)),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
