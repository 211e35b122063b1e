"""Decode speed with the kernel built at import (a revision before) and by the command line (now).

Each side gets a fresh cache directory (the prepared models linked in): before, ``import mlx_ssbd``
compiled the sgemv shim into it; now ``mlx-ssbd doctor --build`` does. Then
``benchmarks/verify_cost.py`` (a decode step, and passes of a few tokens) runs on each side in
turn, ``--runs`` times, and the medians are compared.

    python benchmarks/kernel_before_after.py --before 8f72d1e --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def side(scratch: Path, name: str, code: Path, models: Path) -> dict:
    """A fresh cache with the kernel built as that revision builds it; the env to run it."""
    home = scratch / f"home-{name}"
    home.mkdir()
    (home / "models").symlink_to(models)
    env = {**os.environ, "MLX_SSBD_HOME": str(home), "PYTHONPATH": str(code)}
    build = (
        [sys.executable, "-c", "import mlx_ssbd"]
        if name == "before"
        else [sys.executable, "-m", "mlx_ssbd_cli", "doctor", "--build"]
    )
    subprocess.run(build, env=env, check=True, capture_output=True, cwd=code)
    built = sorted(p.name for p in (home / "native").glob("*.so"))
    return {"env": env, "built": built}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a revision that built the kernel at import")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    from mlx_ssbd.platform.paths import cache_home

    models = cache_home() / "models"
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        worktree = scratch / "before-tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), args.before],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            sides = {
                "before": side(scratch, "before", worktree, models),
                "after": side(scratch, "after", ROOT, models),
            }
            runs: dict[str, list[dict]] = {"before": [], "after": []}
            for i in range(args.runs):
                for name, s in sides.items():
                    out = scratch / f"{name}-{i}"
                    subprocess.run(
                        [
                            sys.executable,
                            str(ROOT / "benchmarks" / "verify_cost.py"),
                            "--model",
                            args.model,
                            "--sizes",
                            "1,2,8,16",
                            "--repeats",
                            "15",
                            "--out",
                            str(out),
                        ],
                        env=s["env"],
                        check=True,
                        capture_output=True,
                        cwd=scratch,
                    )
                    runs[name].append(json.loads((out / "verify_cost.json").read_text()))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True
            )
    median = {
        name: {n: statistics.median(1000 * r["pass_s"][n] for r in rs) for n in ("1", "2", "8", "16")}
        for name, rs in runs.items()
    }
    result = {
        "model": args.model,
        "before": args.before,
        "runs": args.runs,
        "built": {name: s["built"] for name, s in sides.items()},
        "gemv": {name: rs[0]["machine"]["gemv"] for name, rs in runs.items()},
        "median_ms": median,
        "machine": runs["after"][0]["machine"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel_before_after.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# The decode kernel built at import ({args.before}) and by the command line ({args.model})",
        "",
        f"Medians of {args.runs} `verify_cost.py` runs per side, taken in turn (15 repeats each). Kernel: before "
        f"`{result['built']['before']}`, after `{result['built']['after']}`; shim: {result['gemv']['after']}.",
        "",
        "| tokens in one pass | before, ms | after, ms | after / before |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {median['before'][n]:.1f} | {median['after'][n]:.1f} "
        f"| {median['after'][n] / median['before'][n]:.2f} |"
        for n in ("1", "2", "8", "16")
    ]
    (args.out / "kernel_before_after.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
