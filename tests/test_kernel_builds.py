"""The quantized kernel built for other CPUs computes the bits this CPU's builds compute.

tests/kernel_bits.cpp runs the kernel's source (mlx_ssbd/platform/native/qmm_kernel.h) on fixed
pseudo-random inputs, every bit width, group size and scale type, 1 to 17 rows, 37 and 48 weight
rows (4-bit and 8-bit codes: a last band of 5 rows, and whole bands also as repacked at load, which
must give the same bits), and prints a digest of the outputs. It is compiled here for this
machine's baseline and for aarch64: the NEON build, by GCC's cross compiler and by Clang (the
compiler of Apple's tools), run under QEMU's user-mode emulation (directly on an aarch64 machine).
The digests must be the same. The aarch64 tests need qemu-user, g++-aarch64-linux-gnu and clang,
and say so when they skip.
"""

import os
import shutil
import subprocess
from pathlib import Path

import mlx
import pytest

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "mlx_ssbd" / "platform" / "native"
DRIVER = ROOT / "tests" / "kernel_bits.cpp"
SYSROOT = Path("/usr/aarch64-linux-gnu")
FLAGS = ["-O3", "-std=c++20", "-ffp-contract=off", "-Wno-psabi", f"-I{NATIVE}"]  # as CMakeLists.txt builds
NATIVE_ARM = os.uname().machine == "aarch64"

# The builds compared: this machine's portable one (SSE2 on x86-64: the other x86-64 builds are
# compared with it through MLX by tests/test_quantized_kernel.py), and aarch64's by GCC and Clang.
COMPILERS = {
    "portable": ["g++"],
    "gcc-aarch64": ["g++", "-fopenmp"] if NATIVE_ARM else ["aarch64-linux-gnu-g++", "-fopenmp"],
    "clang-aarch64": ["clang++"] if NATIVE_ARM else ["clang++", "--target=aarch64-linux-gnu"],
}
CROSS_PACKAGES = "qemu-user, g++-aarch64-linux-gnu and clang"


def missing_tools(name):
    tools = [COMPILERS[name][0]]
    if name != "portable" and not NATIVE_ARM:
        tools += ["qemu-aarch64", "aarch64-linux-gnu-g++"]  # clang takes GCC's aarch64 sysroot
    return [tool for tool in tools if shutil.which(tool) is None]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    """Each build that this machine has the tools for, compiled side by side: name -> binary."""
    out = tmp_path_factory.mktemp("kernel_bits")
    running = {
        name: subprocess.Popen(
            [
                *compiler,
                *FLAGS,
                "-DQMM_NS=generic",
                str(DRIVER),
                str(NATIVE / "pool.cpp"),
                str(NATIVE / "op_clock.cpp"),  # the pool times its loops there
                "-o",
                str(out / name),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, compiler in COMPILERS.items()
        if not missing_tools(name)
    }
    built = {}
    for name, process in running.items():
        _, errors = process.communicate(timeout=600)
        assert process.returncode == 0, f"{name}: {errors[-3000:]}"
        built[name] = out / name
    return built


def digest(binaries, name):
    if name not in binaries:
        pytest.skip(f"to run the {name} build here: {', '.join(missing_tools(name))} ({CROSS_PACKAGES})")
    command = [str(binaries[name])]
    if name != "portable" and not NATIVE_ARM:
        command = ["qemu-aarch64", "-L", str(SYSROOT), *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    namespace, products, value = result.stdout.split()
    assert (namespace, int(products)) == ("generic", 1080)
    return value


def test_gcc_s_aarch64_neon_build_gives_this_machine_s_bits(binaries):
    """GCC's aarch64 build (NEON, with OpenMP)."""
    assert digest(binaries, "gcc-aarch64") == digest(binaries, "portable")


def test_clang_s_aarch64_neon_build_gives_this_machine_s_bits(binaries):
    """Clang's aarch64 build (NEON, without OpenMP, as Apple's clang builds it)."""
    assert digest(binaries, "clang-aarch64") == digest(binaries, "portable")


@pytest.mark.parametrize(
    "source",
    [
        "qmm.cpp",
        "layers.cpp",
        "attention.cpp",
        "silu.cpp",
        "qmm_generic.cpp",
        "logits.cpp",
        "pool.cpp",
        "op_clock.cpp",
    ],
)
def test_the_extension_s_sources_compile_for_aarch64(source, tmp_path):
    """The whole extension (the small operations' NEON lanes too) compiles for aarch64 against the
    MLX headers, without a warning. (It is not linked: there is no aarch64 MLX library here.)"""
    if missing_tools("clang-aarch64"):
        pytest.skip(f"to compile for aarch64 here: {CROSS_PACKAGES}")
    include = Path(mlx.__path__[0]) / "include"
    command = [
        *COMPILERS["clang-aarch64"],
        *FLAGS,
        "-O1",
        "-Wall",
        f"-I{include}",
        "-c",
        "-fPIC",
        str(NATIVE / source),
    ]
    result = subprocess.run(
        [*command, "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr[-3000:]
