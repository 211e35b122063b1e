"""The CPU kernel's products before and after a change of its sources, in one process, taken in turn.

Whole-model timings on a shared 2-core machine vary by 10-40% from run to run, so a change of a
few percent in the kernel's products cannot be seen in them. This builds the kernel's sources of
two revisions (``mlx_ssbd/platform/native``: ``--before``, default HEAD, and ``--after``, default
the working tree) into one program, each in a namespace of its own (``kernel_ab/variant.cpp``),
and times the default model's products with both, alternating product by product
(``kernel_ab/ab.cpp``): random codes and fp16 scales and biases, 4-bit and 8-bit weights in bands
of 16 rows as a routed layer holds them, read from memory (copies that outweigh the last-level
cache), one row of x (a decode step) and 16 (a verify pass). It reports each side's median, their
ratio, and whether both sides' outputs have the same bits. Built with this machine's C++ compiler
(``$CXX``, else ``c++`` or ``g++``) and the flags the after side's CMakeLists.txt gives each
instruction set this CPU has (AVX-512 with VNNI and VBMI, AVX2); both sides share the after
side's thread pool (``pool.cpp``, with the clock it reports its loops to). x86-64 Linux only.

    python -m benchmarks.engine.kernel_ab --before HEAD~1 --out benchmarks/results/DIR/kernel-ab
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.common import REPO, machine_line
from benchmarks.harness import Benchmark, markdown_table, option

NATIVE = "mlx_ssbd/platform/native"
HARNESS = Path(__file__).resolve().parent / "kernel_ab"
# instruction set: the /proc/cpuinfo flags it needs (its compiler flags: the kernel's CMakeLists.txt)
PATHS = {
    "avx512": {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512vbmi"},
    "avx2": {"avx2", "fma", "f16c"},
}
# The default model's (qwen2.5-coder-1.5b, as prepared) product shapes: name: (N, K, bits)
SHAPES = {
    "gate-up": (8960, 1536, 4),
    "q-o": (1536, 1536, 4),
    "down-4bit": (1536, 8960, 4),
    "down-8bit": (1536, 8960, 8),
    "output": (151936, 1536, 8),
}


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_flags(native: Path, path: str) -> list[str]:
    """The compiler flags the kernel's CMake build (``native``'s CMakeLists.txt) gives the sources
    it builds for ``path``: its C++ standard, the extension's options, OpenMP and that instruction
    set's own."""
    text = (native / "CMakeLists.txt").read_text()
    standard = re.search(r"set\(CMAKE_CXX_STANDARD (\d+)\)", text)
    common = re.search(r"target_compile_options\(_qmm PRIVATE ([^)]*)\)", text)
    own = re.search(rf"qmm_{path}\.cpp\s+PROPERTIES\s+COMPILE_OPTIONS\s+\"([^\"]*)\"", text)
    if not (standard and common and own):
        raise SystemExit(
            f"kernel_ab: {native / 'CMakeLists.txt'} does not give the flags for {path} as expected"
        )
    return [f"-std=c++{standard[1]}", *common[1].split(), "-fopenmp", *own[1].split(";")]


def short(revision: str) -> str:
    """``revision``'s short commit hash."""
    done = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or revision


def sources(revision: str | None, into: Path) -> Path:
    """The kernel's source folder of ``revision`` (None: this working tree's own)."""
    if revision is None:
        return REPO / NATIVE
    archive = subprocess.run(["git", "archive", revision, NATIVE], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"{revision}: not a revision of this repository ({archive.stderr.decode().strip()})")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / NATIVE


def run(command: list[str]) -> str:
    """``command``'s output; its error output as the message where it fails."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kernel_ab: {Path(command[0]).name} failed:\n{done.stderr.strip()}")
    return done.stdout


def build(before: Path, after: Path, flags: list[str], into: Path) -> Path:
    """The timing program for one instruction set, both sides built in."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or "g++"
    objects = []
    for side, folder in (("va", before), ("vb", after)):
        obj = into / f"{side}.o"
        command = [
            compiler,
            *flags,
            f"-DQMM_NS={side}",
            f"-I{folder}",
            "-c",
            str(HARNESS / "variant.cpp"),
            "-o",
            str(obj),
        ]
        run(command)
        objects.append(str(obj))
    program = into / "ab"
    link = [
        compiler,
        *flags,
        f"-I{after}",
        str(HARNESS / "ab.cpp"),
        *objects,
        str(after / "pool.cpp"),
        *(
            [str(after / "op_clock.cpp")] if (after / "op_clock.cpp").exists() else []
        ),  # the pool times its loops
        "-o",
        str(program),
        "-lpthread",
    ]
    run(link)
    return program


def measure(args) -> dict:
    if platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").exists():
        raise SystemExit("kernel_ab: x86-64 Linux only")
    unknown = [p for p in args.paths.split(",") if p not in PATHS] + [
        p for p in args.products.split(",") if p not in SHAPES
    ]
    if unknown:
        raise SystemExit(
            f"kernel_ab: unknown {', '.join(unknown)} (paths: {', '.join(PATHS)}; products: {', '.join(SHAPES)})"
        )
    have = cpu_flags()
    paths = [p for p in args.paths.split(",") if PATHS[p] <= have]
    if not paths:
        raise SystemExit(f"kernel_ab: this CPU has none of {args.paths}")
    if args.reps < 1:
        raise SystemExit("kernel_ab: --reps must be at least 1")
    after_revision = args.after or None
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for side in ("before", "after", *paths):
            (scratch / side).mkdir()
        before = sources(args.before, scratch / "before")
        after = sources(after_revision, scratch / "after")
        for path in paths:
            print(f"== building both sides for {path}", flush=True)
            program = build(before, after, cmake_flags(after, path), scratch / path)
            for name in args.products.split(","):
                n, k, bits = SHAPES[name]
                for m in (1, 16):
                    out = run([str(program), str(m), str(n), str(k), str(bits), str(args.reps)])
                    timing = json.loads(out.strip().splitlines()[-1])
                    row = {"path": path, "product": name, "rows": m, "n": n, "k": k, "bits": bits, **timing}
                    print(row, flush=True)
                    rows.append(row)
    return {
        "before": short(args.before),
        "after": short(after_revision) if after_revision else "the working tree",
        "reps": args.reps,
        "threads": os.environ.get("OMP_NUM_THREADS", "all cores"),
        "rows": rows,
    }


def render(result: dict) -> list[str]:
    lines = [
        f"{machine_line(result['machine'])} Before: the kernel's sources at {result['before']}; after: "
        f"{result['after']}. The default model's products on random weights read from memory, both "
        f"sides in one program, alternating; medians of {result['reps']} products each, threads: "
        f"{result['threads']}.",
        "",
    ]
    lines += markdown_table(
        [
            "instructions",
            "product",
            "rows of x",
            "N x K, bits",
            "before ms",
            "after ms",
            "after / before",
            "same bits",
        ],
        [
            (
                r["path"],
                r["product"],
                r["rows"],
                f"{r['n']} x {r['k']}, {r['bits']}",
                f"{r['before_s'] * 1e3:.3f}",
                f"{r['after_s'] * 1e3:.3f}",
                f"{r['after_s'] / r['before_s']:.3f}",
                "yes" if r["same_bits"] else "**no**",
            )
            for r in result["rows"]
        ],
    )
    return lines


BENCHMARK = Benchmark(
    name="kernel-ab",
    title="The CPU kernel's products, before and after",
    measure=measure,
    render=render,
    options=(
        option("--before", default="HEAD", help="revision of the kernel's sources before (default HEAD)"),
        option("--after", default="", help="revision after (default: the working tree)"),
        option("--paths", default="avx512,avx2", help="instruction sets to build for (those this CPU has)"),
        option("--reps", type=int, default=41, help="products timed per side and shape"),
        option(
            "--products",
            default=",".join(SHAPES),
            help="which of the default model's products (default: all)",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
