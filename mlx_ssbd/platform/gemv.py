"""Matrix-vector products through the BLAS's sgemv on Linux CPUs (a part of the backend policy).

Contract: ``build()`` compiles ``gemv_shim.c`` with the system C compiler into the user cache
directory (once per source, flags and CPU); only the command line calls it (``mlx-ssbd doctor
--build``, or any ``mlx-ssbd`` command on its first run), never an ``import``. ``install(blas_path)``
is called by ``backend`` before the BLAS at ``blas_path`` is loaded into the global symbol scope and
before ``mlx.core`` is imported: if the shim is built, it loads it with ``RTLD_GLOBAL`` so that
MLX's ``cblas_sgemm`` resolves to it, and hands it the BLAS's own ``cblas_sgemm``/``cblas_sgemv``:
one-row (and one-column) products go to sgemv, products of a few rows by a transposed weight (a
batched decode step) to the shim's own kernel, which reads the weight once for all rows;
everything else to sgemm unchanged. It compiles nothing, writes nothing and never raises; it
returns a ``GemvChoice`` saying what happened (not built, ``MLX_SSBD_GEMV=0``, any failure: MLX
keeps plain sgemm, only slower). ``MLX_SSBD_FEW_ROWS=N`` sets the most rows the few-rows kernel
takes (default 8; 1 turns it off, for comparisons; a value that is not a number is named in the
note and the default used).

Why: MLX's CPU backend calls sgemm for every fp32 matmul, also for a decode step's 1 x K times
K x N; OpenBLAS packs the whole weight for that and runs about 2.5x slower than sgemv on the same
product (benchmarks/engine/matmul_rows.py). A decode step is almost only such products.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .paths import cache_home

GEMV_ENV = "MLX_SSBD_GEMV"
FEW_ROWS_ENV = "MLX_SSBD_FEW_ROWS"  # the most rows of a product sent to the few-rows kernel (1: none)
DEFAULT_FEW_ROWS = 8  # beyond, sgemm is as fast (benchmarks/engine/matmul_rows.py)
SOURCE = Path(__file__).with_name("gemv_shim.c")
FLAGS = ("-O3", "-march=native", "-fopenmp")  # the library is built where it runs, cached per CPU
PLAIN_FLAGS = ("-O2",)  # where the compiler takes neither
NOT_BUILT = "not built yet (mlx-ssbd doctor --build)"


@dataclass(frozen=True)
class GemvChoice:
    active: bool
    note: str
    buildable: bool = False  # it would be active once built


_shim = None  # the loaded shim (kept alive; ``calls()`` reads its counter)


def install(blas_path: str) -> GemvChoice:
    """See the module docstring."""
    global _shim
    if os.environ.get(GEMV_ENV, "1").strip() == "0":
        return GemvChoice(False, f"{GEMV_ENV}=0")
    raw, unreadable = os.environ.get(FEW_ROWS_ENV, str(DEFAULT_FEW_ROWS)), ""
    try:
        few = int(raw)
    except ValueError:
        few, unreadable = DEFAULT_FEW_ROWS, f" ({FEW_ROWS_ENV}={raw!r} is not a number: the default)"
    tuned, plain = _target(FLAGS), _target(PLAIN_FLAGS)
    built = tuned if tuned.exists() else plain if plain.exists() else None
    if built is None:
        return GemvChoice(False, NOT_BUILT, buildable=True)
    threaded = built == tuned
    if not threaded:
        few = 1
    try:
        blas = ctypes.CDLL(blas_path)  # local: only to take its functions
        sgemm, sgemv = (
            ctypes.cast(getattr(blas, name), ctypes.c_void_p).value for name in ("cblas_sgemm", "cblas_sgemv")
        )
        shim = ctypes.CDLL(str(built), mode=ctypes.RTLD_GLOBAL)
        shim.mlx_ssbd_gemv_init(ctypes.c_void_p(sgemm), ctypes.c_void_p(sgemv), ctypes.c_int(few))
    except (OSError, AttributeError) as error:
        return GemvChoice(False, f"sgemv shim not used: {error}")
    _shim = shim
    if not threaded:
        kernel = "no few-rows kernel (built without OpenMP)"
    elif few < 2:
        kernel = f"no few-rows kernel ({FEW_ROWS_ENV}={few})"
    else:
        kernel = f"2-{few} rows through the few-rows kernel{unreadable}"
    return GemvChoice(True, f"one-row fp32 products through sgemv, {kernel}")


def build() -> tuple[Path | None, str]:
    """Compile the shim (if not built yet) for this source, CPU and compiler: ``(library, note)``,
    the library None when there is no C compiler or the build fails. A compiler without OpenMP
    (or ``-march=native``) gets a plain ``-O2`` build, whose few-rows kernel would run on one
    thread: ``install`` turns it off."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler (cc) to build the sgemv shim: plain sgemm"
    try:
        try:
            return _compiled(compiler, FLAGS), f"built with {' '.join(FLAGS)}"
        except subprocess.CalledProcessError:
            return _compiled(compiler, PLAIN_FLAGS), f"built with {' '.join(PLAIN_FLAGS)} (no OpenMP)"
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"the sgemv shim could not be built: {error}"


def calls() -> int:
    """Products the shim has sent to sgemv so far (0 when it is not installed)."""
    if _shim is None:
        return 0
    _shim.mlx_ssbd_gemv_calls.restype = ctypes.c_longlong
    return int(_shim.mlx_ssbd_gemv_calls())


def _cpu_id() -> bytes:
    """What the build is tuned for (``-march=native``): the architecture and the CPU's flags."""
    flags = b""
    with contextlib.suppress(OSError):
        flags = next(
            (
                line
                for line in Path("/proc/cpuinfo").read_bytes().splitlines()
                if line.startswith((b"flags", b"Features"))
            ),
            b"",
        )
    return platform.machine().encode() + flags


def _target(flags: tuple[str, ...]) -> Path:
    """Where the shim built with ``flags`` for this source and CPU lives."""
    tag = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode() + _cpu_id()).hexdigest()[:16]
    return cache_home() / "native" / f"libmlx_ssbd_gemv-{tag}.so"


def _compiled(compiler: str, flags: tuple[str, ...]) -> Path:
    target = _target(flags)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run(
            [compiler, *flags, "-shared", "-fPIC", "-o", str(built), str(SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        os.replace(built, target)  # atomic: concurrent processes may build it too
    return target
