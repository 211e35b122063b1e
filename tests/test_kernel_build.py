"""How the CPU kernel is built and found: ``pip install`` without a compiler still succeeds (and
builds nothing), an unchanged kernel source is not compiled again, and without the kernel its
status says why."""

import os
import shutil
import subprocess
from pathlib import Path

from mlx_ssbd.platform import extension, quantized

import pytest

NATIVE = Path(quantized.__file__).with_name("native")


def test_status_says_when_the_kernel_is_missing(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_kernel(name, globals=None, locals=None, fromlist=(), level=0):
        if fromlist and "_qmm" in fromlist:
            raise ImportError("no module named _qmm")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_kernel)
    module, status = extension._load()
    assert module is None and "not built" in status and "slower" in status
    monkeypatch.setenv(extension.QMM_ENV, "0")
    assert extension._load()[0] is None


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake on PATH")
def test_without_a_compiler_the_build_succeeds_and_builds_nothing(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"))
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(NATIVE),
            "-B",
            str(tmp_path / "build"),
            f"-DPython_EXECUTABLE={os.sys.executable}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "no C++ compiler found" in result.stderr
    build = subprocess.run(
        ["cmake", "--build", str(tmp_path / "build")], capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0
    assert not list((tmp_path / "build").rglob("_qmm*.so"))


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake on PATH")
def test_an_unchanged_kernel_is_installed_as_built_and_a_changed_one_is_compiled(tmp_path):
    """pip builds in a fresh directory each time: where the source tree holds the last build's
    library and its stamp names exactly this build's inputs, CMake installs that library instead of
    compiling (configured here only); a changed source, or MLX_SSBD_REBUILD, compiles again."""
    platform = tmp_path / "mlx_ssbd" / "platform"
    shutil.copytree(NATIVE, platform / "native")

    def configure(name, *options):
        result = subprocess.run(
            ["cmake", "-S", str(platform / "native"), "-B", str(tmp_path / name), *options,
             f"-DPython_EXECUTABLE={os.sys.executable}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        if "nanobind or MLX's CMake package not found" in result.stderr:
            pytest.skip("nanobind is not installed (the test extra has it)")
        return result.stdout

    assert "building the CPU kernel" in configure("first")
    stamp = (tmp_path / "first" / "_qmm.stamp").read_text().split()
    assert len(stamp) == 2 and stamp[1].startswith("_qmm")  # the inputs' digest, the library's name
    shutil.copy(tmp_path / "first" / "_qmm.stamp", platform)  # what an editable install leaves
    (platform / stamp[1]).write_bytes(b"the last build")
    assert "installing that build" in configure("again")
    assert "building the CPU kernel" in configure("forced", "-DMLX_SSBD_REBUILD=ON")
    with open(platform / "native" / "qmm.cpp", "a") as source:
        source.write("// changed\n")
    assert "building the CPU kernel" in configure("changed")
