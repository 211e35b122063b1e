"""The platform layer does nothing behind a user's back: ``import mlx_ssbd`` compiles nothing and
writes nothing; the decode kernel is built by the command line and loaded by later imports."""

import os
import subprocess
import sys

from mlx_ssbd.platform import backend

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
    env, home, mark = fresh_home(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert not mark.exists(), "a compiler ran at import"
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []
    if backend.BLAS.name == "openblas" and os.environ.get("MLX_SSBD_GEMV", "1") != "0":
        assert result.stdout.startswith("False not built"), result.stdout


@pytest.mark.skipif(backend.BLAS.name != "openblas", reason="the decode kernel serves OpenBLAS only")
@pytest.mark.slow
def test_the_command_line_builds_the_kernel_once_and_imports_load_it(tmp_path):
    """``mlx-ssbd doctor --build`` (as any first ``mlx-ssbd`` run) builds it into the cache; a
    later import loads it, without a compiler."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env["MLX_SSBD_HOME"] = str(tmp_path / "cache")
    built = subprocess.run(
        [sys.executable, "-m", "mlx_ssbd_cli", "doctor", "--build"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0 and "decode kernel" in built.stdout, built.stderr
    assert list((tmp_path / "cache" / "native").glob("libmlx_ssbd_gemv-*.so"))
    no_compiler, _, mark = fresh_home(tmp_path / "later")
    no_compiler["MLX_SSBD_HOME"] = env["MLX_SSBD_HOME"]
    loaded = subprocess.run(
        [sys.executable, "-c", PROBE], env=no_compiler, capture_output=True, text=True, timeout=300
    )
    assert loaded.stdout.startswith("True one-row fp32 products through sgemv"), loaded.stdout + loaded.stderr
    assert not mark.exists()


@pytest.mark.skipif(backend.BLAS.name != "openblas", reason="the decode kernel serves OpenBLAS only")
@pytest.mark.slow
def test_the_first_command_run_builds_the_kernel_and_runs_with_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env["MLX_SSBD_HOME"] = str(tmp_path / "cache")
    first = subprocess.run(
        [sys.executable, "-m", "mlx_ssbd_cli", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr
    assert "building the decode kernel" in first.stderr
    assert "one-row fp32 products through sgemv" in first.stdout  # the restarted process loaded it
