"""What every benchmark shares: the repository, its data, repository-relative names, chrF++.

Contract: constants and pure functions; nothing runs at import.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "benchmarks" / "data"
RESULTS = REPO / "benchmarks" / "results"  # one folder per run of benchmarks.run


def relative(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it, else its file name: reports
    name no machine's absolute paths."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return Path(path).name


def data_pairs(path: str | Path, limit: int | None = None) -> list:
    """The first ``limit`` (all: None) source/reference pairs of a data file (``read_pairs``): a
    step reads them before it loads a model, so a file it cannot read fails it at once."""
    from mlx_ssbd.evaluation.streams import read_pairs

    return [pair for _, pair in read_pairs(str(path))][: limit or None]


def p50_p95(values, digits: int = 2) -> dict:
    """``{"p50_s", "p95_s", "n"}`` of ``values`` (seconds): the median and the nearest-rank 95th
    percentile (None when there are none)."""
    values = sorted(values)
    if not values:
        return {"p50_s": None, "p95_s": None, "n": 0}
    return {
        "p50_s": round(statistics.median(values), digits),
        "p95_s": round(values[math.ceil(0.95 * len(values)) - 1], digits),
        "n": len(values),
    }


def chrf(commits: list[str], reference: str) -> float:
    """Document chrF++ of the committed captions (joined) against one reference text."""
    from sacrebleu.metrics import CHRF

    return CHRF(word_order=2).corpus_score([" ".join(commits)], [[reference]]).score


def child_json(module: str, args: list[str], env: dict[str, str], what: str) -> dict:
    """Run ``python -m module args`` from the repository with ``env`` added to this process's
    environment (a measurement in a process of its own) and return the JSON of its last output
    line; a failed child stops the benchmark with its stderr, naming ``what``."""
    child = subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**os.environ, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        raise SystemExit(f"{what} failed:\n{child.stderr[-2000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def machine_line(machine: dict) -> str:
    """A report's opening words on the machine (``evaluation.bench.machine_info``): CPU, cores,
    MLX and BLAS."""
    m = machine
    return (
        f"{m.get('cpu_model', '')}, {m.get('cpus', '')} CPUs, MLX {m.get('mlx_version', '')}, "
        f"BLAS {m.get('blas', '')}."
    )


def pass_times(passes: dict) -> str:
    """Table cells: the decode step and the 16- and 64-token passes in ms (``passes_s``)."""
    return " | ".join(f"{1000 * passes[n]:.1f}" for n in ("1", "16", "64"))


def pass_ratios(dense: dict, quantized: dict) -> str:
    """Table cells: dense / quantized time of the decode step and the 16- and 64-token passes
    (``passes_s`` of ``evaluation.passes.pass_timings``, keyed "1", "16", "64")."""
    return " | ".join(f"{dense[n] / quantized[n]:.2f}x" for n in ("1", "16", "64"))
