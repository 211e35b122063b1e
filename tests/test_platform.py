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


IDLE_PROBE = """
import time
import mlx_ssbd
import mlx.core as mx
import mlx.nn as nn
from mlx_ssbd.platform.extension import kernel
from mlx_ssbd.platform.quantized import route_quantized_layers

if kernel() is None:
    print("no-kernel")
    raise SystemExit
model = nn.Sequential(nn.Linear(1024, 2048))
nn.quantize(model, group_size=32, bits=4)
assert route_quantized_layers(model) == 1
x = mx.random.normal((16, 1024))
idle = 0.0
for _ in range(12):  # a product on the kernel's threads, then 50 ms with nothing to do
    mx.eval(model(x))
    start = time.process_time()
    time.sleep(0.05)
    idle += time.process_time() - start
print(idle)
"""


def _without_thread_waits(**env) -> dict:
    """This process's environment with no thread-wait setting of its own, and ``env`` added."""
    return {**{k: v for k, v in os.environ.items() if k not in backend.THREAD_WAIT_NAMES}, **env}


def _idle_cpu_s(probe: str = IDLE_PROBE, **env) -> float | None:
    """The CPU seconds ``probe``'s idle gaps burnt, None where it found nothing to measure."""
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=_without_thread_waits(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return None if out.stdout.strip().startswith("no-") else float(out.stdout)


def test_idle_kernel_threads_sleep_instead_of_spinning_beside_busy_processes():
    """The kernel's pool spins a few milliseconds after a product, then sleeps: over twelve idle gaps
    of 50 ms beside two busy loops its threads burn a small part of the CPU that a pool spinning
    through the gaps would take from the busy processes (CPU time, not wall time)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        ours = _idle_cpu_s()
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    if ours is None:
        pytest.skip("the CPU kernel is not built here")
    gaps = 12 * 0.05  # a thread spinning through them burns up to this much
    assert ours < 0.25 * gaps, f"idle threads burnt {ours:.3f} s of CPU in {gaps:.1f} s of idle gaps"


OPENBLAS_IDLE_PROBE = """
import time
import mlx_ssbd
import mlx.core as mx
from mlx_ssbd.platform import backend

if backend.BLAS.name != "openblas" or (backend.blas_threads() or 1) < 2:
    print("no-openblas-threads")
    raise SystemExit
a, b = mx.random.normal((512, 512)), mx.random.normal((512, 512))
mx.eval(a, b)
idle = 0.0
for _ in range(12):  # an fp32 product on OpenBLAS's threads, then 50 ms with nothing to do
    mx.eval(a @ b)
    start = time.process_time()
    time.sleep(0.05)
    idle += time.process_time() - start
print(idle)
"""


def test_idle_openblas_workers_sleep_instead_of_yielding_in_a_loop():
    """OpenBLAS's pthread workers (fp32 products: a dense model) go to sleep soon after a product
    with the platform's setting; with OpenBLAS's own (2^28 cycles) they yield in a loop through
    the idle gaps. CPU time, not wall time."""
    ours = _idle_cpu_s(OPENBLAS_IDLE_PROBE)
    if ours is None:
        pytest.skip("OpenBLAS with more than one thread is not what MLX uses here")
    spinning = _idle_cpu_s(OPENBLAS_IDLE_PROBE, OPENBLAS_THREAD_TIMEOUT="28")  # OpenBLAS's own default
    assert spinning > 0.02, f"the default wait burnt only {spinning:.4f} s in 12 idle gaps"
    assert ours < 0.5 * spinning, f"idle workers burnt {ours:.3f} s of CPU (default: {spinning:.3f} s)"


def test_thread_waits_are_set_before_any_runtime_loads_and_a_users_choice_is_kept():
    names = ("GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OPENBLAS_THREAD_TIMEOUT")
    probe = f"import os, mlx_ssbd; print(*(os.environ.get(name) for name in {names!r}))"

    def run(**env):
        return subprocess.run(
            [sys.executable, "-c", probe],
            env=_without_thread_waits(**env),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()

    ours = [backend.THREAD_WAITS[name] for name in names]
    assert run() == ours
    assert run(GOMP_SPINCOUNT="5") == ["5", *ours[1:]]
    assert run(OPENBLAS_THREAD_TIMEOUT="20") == [*ours[:2], "20"]
    assert run(OMP_WAIT_POLICY="ACTIVE") == ["None"] * 3  # a wait policy of the user's: hands off
