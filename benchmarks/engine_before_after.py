"""The one-engine change measured in one run: streams one after another and batched, before/after.

Checks out ``--before`` (a git revision with the old per-update merge/extract batching and the
old single-stream decode loop) into a temporary worktree and runs ``benchmarks/multistream.py``
from it and from this tree, alternately for each stream count, on the same model and data. So the
single-stream ratio (after / before, 1 stream, sequential) and the batched throughputs come from
the same run on the same machine.

    python benchmarks/engine_before_after.py --before 44de22a --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from mlx_ssbd.evaluation.bench import machine_info
from mlx_ssbd.evaluation.report import pyplot, save_figure

ROOT = Path(__file__).resolve().parent.parent


def multistream(tree: Path, args, streams: int, out: Path) -> list[dict]:
    """Rows of ``multistream.py`` run from ``tree`` (its own ``mlx_ssbd`` first on the path)."""
    command = [
        sys.executable,
        str(tree / "benchmarks" / "multistream.py"),
        "--model",
        args.model,
        "--items",
        str(args.items),
        "--methods",
        args.method,
        "--streams",
        str(streams),
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(command, check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    return json.loads((out / "multistream.json").read_text())["rows"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the old engine")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--method", default="ssbd")
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), args.before],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for streams in (int(n) for n in args.streams.split(",")):
                for impl, tree in (("before", old), ("after", ROOT)):
                    for row in multistream(tree, args, streams, Path(scratch) / f"{impl}-{streams}"):
                        rows.append({"impl": impl, **row})
                        print(json.dumps(rows[-1]), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    write(args, rows)


def write(args, rows: list[dict]) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    pick = lambda impl, mode, n: next(
        r for r in rows if (r["impl"], r["mode"], r["streams"]) == (impl, mode, n)
    )
    counts = sorted({r["streams"] for r in rows})
    single = (
        pick("after", "sequential", 1)["output_tok_per_s"]
        / pick("before", "sequential", 1)["output_tok_per_s"]
    )
    result = {
        "model": args.model,
        "method": args.method,
        "items": args.items,
        "before": args.before,
        "single_stream_after_over_before": round(single, 3),
        "rows": rows,
        "machine": machine_info(),
    }
    (args.out / "engine_before_after.json").write_text(json.dumps(result, indent=2))
    m = result["machine"]
    lines = [
        f"# One engine, before ({args.before}) and after: {args.model}, {args.method}, "
        f"{args.items} UDHR paragraphs, lag 3",
        "",
        f"{m['device']}, {m['compute_dtype']}, BLAS {m['blas']}, {m['cpus']} CPUs; one run, the two "
        "implementations alternating per stream count. Output tokens per second over all streams; "
        "sequential: the streams' updates one after another; batched: one forward per step.",
        "",
        "| streams | sequential before | sequential after | batched before | batched after | "
        "batched after x sequential after | batched after / before | median latency after s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in counts:
        sb, sa = pick("before", "sequential", n), pick("after", "sequential", n)
        bb, ba = pick("before", "batched", n), pick("after", "batched", n)
        lines.append(
            f"| {n} | {sb['output_tok_per_s']} | {sa['output_tok_per_s']} | {bb['output_tok_per_s']} | "
            f"{ba['output_tok_per_s']} | {ba['output_tok_per_s'] / sa['output_tok_per_s']:.2f} | "
            f"{ba['output_tok_per_s'] / bb['output_tok_per_s']:.2f} | {ba['median_update_latency_s']} |"
        )
    lines += ["", f"Single stream (sequential, 1 stream), after / before: **{single:.2f}x**.", ""]
    (args.out / "engine_before_after.md").write_text("\n".join(lines))
    print("\n".join(lines))
    plot(rows, counts, args.out / "engine_before_after.png")


def plot(rows, counts, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for impl, mode, style in (
        ("before", "batched", "o--"),
        ("after", "batched", "o-"),
        ("before", "sequential", "s--"),
        ("after", "sequential", "s-"),
    ):
        ys = [
            next(
                r["output_tok_per_s"] for r in rows if (r["impl"], r["mode"], r["streams"]) == (impl, mode, n)
            )
            for n in counts
        ]
        ax.plot(counts, ys, style, label=f"{mode} {impl}")
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("output tokens / s (all streams)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(plt, fig, path)


if __name__ == "__main__":
    main()
