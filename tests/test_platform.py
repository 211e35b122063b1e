"""The platform layer does nothing behind a user's back: ``import mlx_ssbd`` and the command line
compile nothing and write nothing; the native code is built by ``pip install`` and loaded from the
package."""

import os
import subprocess
import sys

from mlx_ssbd.platform import backend, gemv
from mlx_ssbd.platform.info import backend_info

import pytest

PROBE = (
    "import mlx_ssbd; from mlx_ssbd.platform import backend; print(backend.GEMV.active, backend.GEMV.note)"
)


def fresh_home(tmp_path):
    """An environment with an empty HOME and cache, and a C compiler that only leaves a mark."""
    home, bin_dir, mark = tmp_path / "home", tmp_path / "bin", tmp_path / "compiler-ran"
    home.mkdir(parents=True)
    bin_dir.mkdir(parents=True)
    for name in ("cc", "gcc", "clang"):
        fake = bin_dir / name
        fake.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MLX_SSBD_HOME", "XDG_CACHE_HOME", "CC")}
    env.update(HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return env, home, mark


def test_importing_the_library_compiles_nothing_and_writes_nothing(tmp_path):
    """In a fresh home with no working compiler, an import writes nothing and loads the sgemv shim
    that pip built, as this process did."""
    env, home, mark = fresh_home(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert not mark.exists(), "a compiler ran at import"
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []
    assert result.stdout.strip() == f"{backend.GEMV.active} {backend.GEMV.note}"


@pytest.mark.slow
def test_the_command_line_compiles_nothing_and_writes_nothing(tmp_path):
    env, home, mark = fresh_home(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "mlx_ssbd_cli", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert not mark.exists(), "a compiler ran"
    assert f"gemv           {backend_info().gemv}" in result.stdout


def test_pip_install_built_the_sgemv_shim():
    """On Linux with a C compiler (CI has one) the shim comes with the install, beside the kernel."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the shim serves OpenBLAS on Linux only")
    if not gemv.LIBRARY.is_file() and not os.environ.get("CI"):
        pytest.skip(f"not built here: {gemv.NOT_BUILT}")
    assert gemv.LIBRARY.is_file(), f"{gemv.LIBRARY} missing: the install did not build the shim"
    if backend.BLAS.name == "openblas" and os.environ.get(gemv.GEMV_ENV, "1") != "0":
        assert backend.GEMV.active, backend.GEMV.note
