"""A decode step and a 16-token pass on a quiet machine and beside busy processes, by thread-wait policy.

A caption machine runs other work beside the model (OBS, a browser, Zoom, Whisper). Idle threads
that spin-wait (the OpenMP runtimes' between parallel regions; the CPU kernel's pool for a few
milliseconds after a product) take the cores the working ones need beside busy processes. The
policies below set the OpenMP runtimes' and OpenBLAS's waits; the kernel's pool (``pool.h``)
waits the same under each, so on a quantized model they show whether anything else still spins.
This measures, for each model, in a process of its own per policy: a decode step and a 16-token
pass (``evaluation.passes``) on the quiet machine, then beside ``--busy`` processes that each spin
a core (``while True: pass``), rounds alternating between the policies:

* ``mlx-ssbd``: what ``platform.backend`` sets (short spin-waits, ``THREAD_WAITS``);
* ``runtime defaults``: libgomp's, libiomp5's and OpenBLAS's own (``GOMP_SPINCOUNT=300000``,
  ``KMP_BLOCKTIME=200``, ``OPENBLAS_THREAD_TIMEOUT=28``, the values they use when nothing is set);
* ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep at once).

The figure that matters is busy / quiet of the same policy (two busy processes on two cores: the
fair share is 2x) and each policy's quiet time against the runtime defaults' quiet time. Beside
it, where the model runs through the CPU kernel: the share of its threads' time in the kernel's
loops that they spent without a CPU (``kernel().loop_times()``), quiet and busy: how much of the
slowdown is the kernel's threads waiting for a core the busy processes hold.

    python -m benchmarks.engine.busy_machine --models qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.common import child_json, machine_line
from benchmarks.harness import Benchmark, markdown_table, option

POLICIES = (
    ("mlx-ssbd", {}),
    (
        "runtime defaults",
        {"GOMP_SPINCOUNT": "300000", "KMP_BLOCKTIME": "200", "OPENBLAS_THREAD_TIMEOUT": "28"},
    ),
    ("passive", {"OMP_WAIT_POLICY": "PASSIVE"}),
)
SIZES = (1, 16)


def without_cpu(loaded, repeats: int) -> dict[str, float] | None:
    """{N: the share of the kernel's threads' time in its loops that they had no CPU for, over
    passes of N tokens (None: no product that size was shared out)} (``passes.pass_breakdown``),
    or None where the kernel does not run."""
    from mlx_ssbd.evaluation.passes import pass_breakdown

    split = pass_breakdown(loaded, SIZES, repeats)
    if split is None:
        return None
    loops = {n: b["loops_s"] for n, b in split.items()}
    return {str(n): round(1 - t["cpu_s"] / t["wall_s"], 4) if t["wall_s"] else None for n, t in loops.items()}


def measure(model: str, repeats: int, busy: int) -> dict:
    """In this process: quiet pass timings, then the same beside ``busy`` spinning processes."""
    import mlx_ssbd  # noqa: F401  (backend policy first)
    from mlx_ssbd.evaluation.passes import pass_timings
    from mlx_ssbd.models.loading import load_model
    from mlx_ssbd.platform import backend

    loaded = load_model(model)
    pass_timings(loaded, SIZES, 2)  # warm up
    _, quiet = pass_timings(loaded, SIZES, repeats)
    quiet_waits = without_cpu(loaded, repeats)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(1.0)  # the spinners are running
        _, loaded_ = pass_timings(loaded, SIZES, repeats)
        busy_waits = without_cpu(loaded, repeats)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    return {
        "model": loaded.name,
        "thread_waits": backend.thread_waits(),
        "quiet_s": {str(n): round(t, 5) for n, t in quiet.items()},
        "busy_s": {str(n): round(t, 5) for n, t in loaded_.items()},
        "quiet_without_cpu": quiet_waits,
        "busy_without_cpu": busy_waits,
    }


def render(result: dict) -> list[str]:
    lines = [
        f"{machine_line(result['machine'])} Each policy in a process of its own; quiet, then beside "
        f"{result['busy']} processes that each spin a core; medians over {result['rounds']} alternating "
        f"rounds of the medians of {result['repeats']} passes each, one run.",
        "",
    ]
    cells = []
    for model in dict.fromkeys(r["model"] for r in result["rows"]):
        rows = {r["policy"]: r for r in result["rows"] if r["model"] == model}
        defaults = rows["runtime defaults"]["quiet_ms"]["1"]
        for policy, r in rows.items():
            q, b = r["quiet_ms"], r["busy_ms"]
            cells.append(
                (
                    model,
                    f"{policy} (`{r['thread_waits']}`)",
                    f"{q['1']:.1f}",
                    f"{b['1']:.1f}",
                    f"{b['1'] / q['1']:.2f}x",
                    f"{q['1'] / defaults:.2f}x",
                    f"{q['16']:.1f}",
                    f"{b['16']:.1f}",
                    f"{b['16'] / q['16']:.2f}x",
                )
            )
    header = [
        "model",
        "thread waits",
        "decode quiet ms",
        "decode busy ms",
        "busy / quiet",
        "quiet / defaults' quiet",
        "16-token quiet ms",
        "16-token busy ms",
        "busy / quiet",
    ]
    return lines + markdown_table(header, cells) + waiting_lines(result)


def waiting_lines(result: dict) -> list[str]:
    """The kernel's threads without a CPU, quiet and busy (none: no lines, the kernel did not run
    or the report predates the measurement)."""
    rows = [r for r in result["rows"] if r.get("quiet_without_cpu") and r.get("busy_without_cpu")]
    if not rows:
        return []

    def share(r, kind, n):
        value = r[f"{kind}_without_cpu"][str(n)]
        return "-" if value is None else f"{100 * value:.1f}%"

    return [
        "",
        "The kernel's threads in its parallel loops: the share of their time there that they had no CPU "
        "for (another thread or process held their core), medians over the rounds.",
        "",
        *markdown_table(
            ["model", "thread waits", "decode quiet", "decode busy", "16-token quiet", "16-token busy"],
            [
                (
                    r["model"],
                    r["policy"],
                    share(r, "quiet", 1),
                    share(r, "busy", 1),
                    share(r, "quiet", 16),
                    share(r, "busy", 16),
                )
                for r in rows
            ],
        ),
    ]


def median_share(shares) -> float | None:
    """The median of the rounds' shares that were measured (None: none was)."""
    measured = [s for s in shares if s is not None]
    return round(statistics.median(measured), 4) if measured else None


def run(args) -> dict:
    from mlx_ssbd.platform.backend import THREAD_WAIT_NAMES

    for name in THREAD_WAIT_NAMES:  # each child gets its policy's settings alone
        os.environ.pop(name, None)
    rows = []
    for model in args.models.split(","):
        runs: dict[str, list[dict]] = {name: [] for name, _ in POLICIES}
        for _ in range(args.rounds):
            for name, env in POLICIES:
                child_args = ["--child", model, "--repeats", str(args.repeats), "--busy", str(args.busy)]
                runs[name].append(child_json(__spec__.name, child_args, env, f"{model} {name}"))
        for name, measured in runs.items():
            row = {
                "model": measured[0]["model"],
                "policy": name,
                "thread_waits": measured[0]["thread_waits"],
                "runs": measured,
                **{
                    f"{kind}_ms": {
                        str(n): round(1000 * statistics.median(r[f"{kind}_s"][str(n)] for r in measured), 2)
                        for n in SIZES
                    }
                    for kind in ("quiet", "busy")
                },
                **{
                    f"{kind}_without_cpu": measured[0][f"{kind}_without_cpu"]
                    and {
                        str(n): median_share(r[f"{kind}_without_cpu"][str(n)] for r in measured)
                        for n in SIZES
                    }
                    for kind in ("quiet", "busy")
                },
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    return {"rows": rows, "repeats": args.repeats, "rounds": args.rounds, "busy": args.busy}


BENCHMARK = Benchmark(
    "busy_machine",
    "A decode step and a 16-token pass beside busy processes",
    run,
    render,
    options=(
        option("--models", default="qwen2.5-coder-1.5b"),
        option("--repeats", type=int, default=5, help="passes of each size timed per measurement"),
        option("--rounds", type=int, default=3, help="alternating rounds over the policies"),
        option("--busy", type=int, default=2, help="processes spinning a core beside the model"),
    ),
    about=__doc__,
    child=lambda args: measure(args.child, args.repeats, args.busy),
)

if __name__ == "__main__":
    BENCHMARK.main()
