"""One benchmark before and after a change: two commits, one run, the sides taken in turn.

Checks out ``--before`` and ``--after`` (git revisions; ``--after`` defaults to the working tree)
into temporary worktrees and runs the same benchmark module of *this* checkout against each side's
``mlx_ssbd`` (``PYTHONPATH``: a copy of this ``benchmarks`` package, then the side's tree), ``--runs``
times, alternating, so machine drift hits both alike. Each run writes into ``OUT/{side}-{i}``.
Then every number the module's JSON report holds on both sides (dotted paths; ``machine`` and
lists of rows left out) is summarised in ``OUT/compare.json`` and ``OUT/compare.md``: the median
over runs per side and after / before.

    python -m benchmarks.compare.run --before 5aa40f3 --after HEAD --runs 3 --out DIR -- \
        benchmarks.engine.verify_cost --model qwen2.5-coder-0.5b --sizes 1,16

The module must take ``--out DIR`` (it is appended) and write one ``*.json`` report there. A
fresh worktree has no built CPU kernel (``pip install`` builds it): where a side's kernel sources
(``mlx_ssbd/platform/native``) are those of this checkout, this checkout's build is copied in;
otherwise the side's own sources are built with CMake (a few minutes), and where that fails the
side runs without a kernel; ``compare.json`` says which (``kernel``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import REPO


@contextlib.contextmanager
def checkout(revision: str | None, scratch: Path, name: str) -> Iterator[Path]:
    """A worktree of ``revision`` (None: the working tree itself), removed afterwards."""
    if revision is None:
        yield REPO
        return
    tree = scratch / name
    added = subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), revision], cwd=REPO, capture_output=True, text=True
    )
    if added.returncode != 0:
        raise SystemExit(f"--{name} {revision}: not a revision of this repository ({added.stderr.strip()})")
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)


NATIVE = "mlx_ssbd/platform/native"  # the kernel's sources (and the sgemv shim's)


def side_kernel(tree: Path, revision: str | None, build: Path) -> str:
    """Give ``tree`` a built CPU kernel: this checkout's where their kernel sources are the same,
    else one built from ``tree``'s own sources with CMake in ``build`` (as ``pip install`` builds it:
    the same CMakeLists, a Release build). Says which; a side whose build fails runs without one."""
    if revision is None:
        return "this checkout's build"
    built = sorted((REPO / "mlx_ssbd" / "platform").glob("_qmm*.so"))
    same = subprocess.run(["git", "diff", "--quiet", revision, "--", NATIVE], cwd=REPO, capture_output=True)
    if built and same.returncode == 0:
        libraries = [*built, *(REPO / "mlx_ssbd" / "platform").glob("libmlx_ssbd_gemv.so")]
        how = "this checkout's build (same kernel sources)"
    else:
        print(
            f"== building {revision}'s CPU kernel (its sources differ from this checkout's)", file=sys.stderr
        )
        configure = ["cmake", "-S", str(tree / NATIVE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"]
        steps = [
            [*configure, f"-DPython_EXECUTABLE={sys.executable}"],
            ["cmake", "--build", str(build), "-j"],
        ]
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode != 0:
                return f"none (its kernel did not build: `{' '.join(step[:2])}` failed): MLX's own quantized_matmul"
        libraries = [*build.glob("_qmm*.so"), *build.glob("libmlx_ssbd_gemv.so")]
        if not any(library.name.startswith("_qmm") for library in libraries):
            return "none (its build made no kernel: no C++ compiler?): MLX's own quantized_matmul"
        how = "built from its own sources"
    for library in libraries:
        shutil.copy2(library, tree / "mlx_ssbd" / "platform" / library.name)
    return how


def side_env(tree: Path, scratch: Path) -> dict:
    """Run this checkout's benchmarks against ``tree``'s mlx_ssbd."""
    package = scratch / "bench" / "benchmarks"
    if not package.exists():
        shutil.copytree(REPO / "benchmarks", package, ignore=shutil.ignore_patterns("results", "__pycache__"))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(tree)])}


def numbers(report, prefix: str = "") -> dict[str, float]:
    """Every number in a JSON report by dotted path; ``machine`` and lists left out."""
    if isinstance(report, bool):
        return {}
    if isinstance(report, int | float):
        return {prefix: float(report)}
    if isinstance(report, dict):
        found = {}
        for key, value in report.items():
            if key != "machine":
                found.update(numbers(value, f"{prefix}.{key}" if prefix else str(key)))
        return found
    return {}


def summarize(reports: dict[str, list[dict]]) -> list[dict]:
    """Per dotted path present on both sides: the medians and after / before."""
    sides = {side: [numbers(r) for r in runs] for side, runs in reports.items()}
    paths = sorted(set.intersection(*(set(run) for runs in sides.values() for run in runs)))
    rows = []
    for path in paths:
        before = statistics.median(run[path] for run in sides["before"])
        after = statistics.median(run[path] for run in sides["after"])
        rows.append(
            {"value": path, "before": before, "after": after, "ratio": after / before if before else None}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the before side")
    parser.add_argument(
        "--after", default=None, help="git revision of the after side (default: the working tree)"
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("module", nargs=argparse.REMAINDER, help="-- MODULE ARGS...")
    args = parser.parse_args()
    command = args.module[1:] if args.module[:1] == ["--"] else args.module
    if not command or args.runs < 1:
        parser.error("give a benchmark module after --, and --runs of at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    reports: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as trees:
        scratch = Path(tmp)
        envs, kernel = {}, {}
        for side, rev in (("before", args.before), ("after", args.after)):
            tree = trees.enter_context(checkout(rev, scratch, side))
            kernel[side] = side_kernel(tree, rev, scratch / f"build-{side}")
            envs[side] = side_env(tree, scratch)
        for i in range(args.runs):
            for side, env in envs.items():
                out = (args.out / f"{side}-{i}").resolve()
                print(f"== {side} {i + 1}/{args.runs}: {' '.join(command)}", file=sys.stderr, flush=True)
                subprocess.run(
                    [sys.executable, "-m", *command, "--out", str(out)], env=env, cwd=scratch, check=True
                )
                reports[side].append(json.loads(next(out.glob("*.json")).read_text()))
    rows = summarize(reports)
    result = {
        "module": command,
        "before": args.before,
        "after": args.after or "working tree",
        "runs": args.runs,
        "kernel": kernel,
        "rows": rows,
    }
    (args.out / "compare.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# `{command[0]}` before ({args.before}) and after ({result['after']})",
        "",
        f"`{' '.join(command)}`, {args.runs} runs per side taken in turn; medians over runs. CPU kernel: "
        f"before {kernel['before']}; after {kernel['after']}.",
        "",
        "| value | before | after | after / before |",
        "|---|---|---|---|",
    ]
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(f"| {r['value']} | {r['before']:.4g} | {r['after']:.4g} | {ratio} |")
    (args.out / "compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
