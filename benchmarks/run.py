"""Regenerate every current result from the current commit: one command, one results folder.

    python -m benchmarks.run                 # the current results, into benchmarks/results/DATE-KIND
    python -m benchmarks.run --long          # every step, at the larger sizes
    python -m benchmarks.run --list          # the steps, each with its time estimate
    python -m benchmarks.run --quick         # every step at a small size (a smoke run, not a result)
    python -m benchmarks.run --only service  # one group (engine, quality, live, service) or step
    python -m benchmarks.run --out DIR --label quiet

A run (about 2 hours on 2 cores) refreshes the main results at sizes that fit that: the
kernel and a verify pass, a busy machine, the engine's capacity, SSBD against RT, live lag, the
service under load, attack and a store outage, push targets; ``--long`` (about 10 hours) runs
every step, some at larger sizes (more streams, configurations, minutes of speech), among them the
steps only it runs (the weights against fp32 and llama.cpp, the memory of a long session, more
quality sets and the paper's grid, speech, caption languages, glossaries, the other service
runs). A long run into a folder that a run of the same day filled keeps the reports already there
(``--out`` for a new one).
The steps, their arguments and estimates are ``benchmarks.steps``. Steps run one after another
(timings are only compared within one step), all from one commit: a
working tree with uncommitted changes is refused (except with ``--quick``). A step whose report is
already in the folder is skipped, so an interrupted run is simply started again. At the end the
folder's reports are collected into its ``RESULTS.md`` (``tools.collect``) and the results page is
written again (``tools.results_page``: each step's newest run on each kind of machine, so this
run's on this one; with ``--quick`` it is not). Needs the models prepared
(``mlx-ssbd models prepare qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``) and the extras
``.[test,serve,asr,semsim,postgres,plots,ja]``; the llama.cpp step runs only where
``llama-cpp-python`` is installed. Estimates are minutes on the 2-core development VM (the engine
group's from a run of its default sizes: 30 minutes in all).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.common import REPO, RESULTS, relative
from benchmarks.steps import STEPS, Step


def machine_kind() -> str:
    """The machine a results folder is named after (the results page shows each kind's newest
    run): OS, architecture, then the GPU's name, or the cores and the CPU's family where that
    tells runs apart (``linux-x86_64-2cpu-epyc``, ``-2cpu-epyc-vnni`` for an EPYC with AVX-512 VNNI,
    ``-2cpu-vnni`` for such a Xeon)."""

    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")

    base = f"{platform.system().lower()}-{platform.machine()}"
    if on_gpu():
        name = child_says("import mlx_ssbd, mlx.core as mx; print(mx.device_info()['device_name'])")
        return f"{base}-{slug(name).removeprefix('nvidia-').removeprefix('apple-')}"
    model = child_says("from mlx_ssbd.evaluation.bench import cpu_model; print(cpu_model())")
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        flags = []
    vnni = "avx512_vnni" in flags
    family = (
        ("epyc-vnni" if vnni else "epyc")
        if "EPYC" in model
        else "vnni"
        if vnni
        else "xeon"
        if "Xeon" in model
        else slug(model)
    )
    return f"{base}-{os.cpu_count()}cpu-{family[:24]}"


# The CPU families ``machine_kind`` names, the longest first (``folder_kind`` tells them from a label).
CPU_FAMILIES = ("epyc-vnni", "epyc", "vnni", "xeon")


def folder_kind(name: str) -> str:
    """The machine kind a results folder's name (``DATE-KIND[-LABEL]``) gives, its label left out:
    ``2026-11-30-linux-x86_64-2cpu-epyc-vnni-rejoin`` -> ``linux-x86_64-2cpu-epyc-vnni``. A kind
    that names a CPU model or a GPU (families this cannot tell from a label) keeps the whole name."""
    rest = name[len("YYYY-MM-DD-") :]
    cpus = re.match(r"[a-z]+-[a-z0-9_]+-\d+cpu", rest)
    if cpus:
        for family in CPU_FAMILIES:
            kind = f"{cpus.group(0)}-{family}"
            if rest == kind or rest.startswith(f"{kind}-"):
                return kind
    return rest


def default_out(label: str | None) -> Path:
    name = f"{datetime.date.today():%Y-%m-%d}-{machine_kind()}" + (f"-{label}" if label else "")
    return RESULTS / name


def chosen(only: str | None, size: str) -> list[tuple[Step, tuple[str, ...], float]]:
    """``(step, ARGS, minutes)`` of each step of a run of ``size`` (``--only``: one group or step)."""
    steps = [s for s in STEPS if only in (None, s.group, s.name)]
    if not steps:
        groups = sorted({s.group for s in STEPS})
        raise SystemExit(f"--only {only!r}: no such group ({', '.join(groups)}) or step (see --list)")
    if only == steps[0].name and steps[0].sized(size) is None:
        raise SystemExit(f"{only} is a step of the long run only: add --long")
    return [(s, *sized) for s in steps if (sized := s.sized(size)) is not None]


def child_says(code: str) -> str:
    """What ``python -c code`` prints, run from the repository: this process imports no MLX."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()


def dirty() -> bool:
    """The code that would run has uncommitted changes (``evaluation.bench.code_commit``)."""
    return child_says("from mlx_ssbd.evaluation.bench import code_commit; print(code_commit())").endswith(
        "+dirty"
    )


def on_gpu() -> bool:
    """MLX's default device here is a GPU."""
    return (
        child_says("import mlx_ssbd; from mlx_ssbd.platform.backend import is_gpu; print(is_gpu())") == "True"
    )


def done(step: Step, out: Path) -> bool:
    return any((out / step.name).glob(step.report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (default: benchmarks/results/DATE-MACHINE)")
    parser.add_argument(
        "--label", help="why the run was made, appended to the default folder's name after the machine"
    )
    parser.add_argument("--only", help="one group or step")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a result")
    parser.add_argument(
        "--long", action="store_true", help="every step, at the larger sizes (~10 hours on 2 cores)"
    )
    parser.add_argument("--list", action="store_true", help="list the steps and their estimates, run nothing")
    args = parser.parse_args()
    if args.quick and args.long:
        parser.error("--quick and --long: one size at a time")
    steps = chosen(args.only, "quick" if args.quick else "long" if args.long else "default")
    label = "-".join(part for part in (args.label, "quick" if args.quick else None) if part)
    out = args.out or default_out(label or None)
    if args.list:
        total, width = 0.0, max(len(s.name) for s, _, _ in steps)
        for s, given, minutes in steps:
            total += minutes
            shown = " ".join(relative(a) if a.startswith(str(REPO)) else a for a in given)
            print(f"{s.group:8} {s.name:{width}} ~{minutes:4g} min  python -m {s.module} {shown}")
        gpu = sum(minutes for s, _, minutes in steps if s.gpu)
        print(
            f"{'':8} {'total':{width}} ~{total:4g} min"
            + (f" (GPU steps ~{gpu:g} min of it: skipped on a CPU)" if gpu else "")
        )
        return
    if not args.quick and dirty():
        raise SystemExit(
            "the working tree has uncommitted changes: a run's results come from one commit, so commit "
            "or stash them first (--quick, a smoke run, runs anyway)"
        )
    out.mkdir(parents=True, exist_ok=True)
    for i, (step, given, minutes) in enumerate(steps, 1):
        if done(step, out):
            print(f"[{i}/{len(steps)}] {step.name}: done already", file=sys.stderr)
            continue
        if step.gpu and not on_gpu():
            print(
                f"[{i}/{len(steps)}] {step.name}: skipped (a GPU's measurement; here: CPU)", file=sys.stderr
            )
            continue
        if step.needs and importlib.util.find_spec(step.needs) is None:
            print(f"[{i}/{len(steps)}] {step.name}: skipped ({step.needs} is not installed)", file=sys.stderr)
            continue
        print(f"[{i}/{len(steps)}] {step.name} (~{minutes:g} min)", file=sys.stderr, flush=True)
        command = [sys.executable, "-m", step.module, *given, "--out", str(out / step.name)]
        subprocess.run(command, cwd=REPO, check=True)
    subprocess.run([sys.executable, "-m", "benchmarks.tools.collect", str(out)], cwd=REPO, check=True)
    if not args.quick and args.only is None:
        subprocess.run([sys.executable, "-m", "benchmarks.tools.results_page"], cwd=REPO, check=True)
    print(f"done: {relative(out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
