"""Matrix-vector products through the BLAS's sgemv on Linux CPUs (a part of the backend policy).

Contract: ``install(blas_path)`` is called by ``backend`` before the BLAS at ``blas_path`` is loaded
into the global symbol scope and before ``mlx.core`` is imported. It compiles ``gemv_shim.c``
(once, cached by its hash under the user cache directory) with the system C compiler, loads it with
``RTLD_GLOBAL`` so that MLX's ``cblas_sgemm`` resolves to it, and hands it the BLAS's own
``cblas_sgemm``/``cblas_sgemv``: one-row (and one-column) products go to sgemv, everything else to
sgemm unchanged. It returns a ``GemvChoice`` saying what happened; it never raises: without a
compiler, with ``MLX_SSBD_GEMV=0`` or on any failure MLX keeps plain sgemm (only slower).

Why: MLX's CPU backend calls sgemm for every fp32 matmul, also for a decode step's 1 x K times
K x N; OpenBLAS packs the whole weight for that and runs about 2.5x slower than sgemv on the same
product (benchmarks/matmul_rows.py). A decode step is almost only such products.
"""

from __future__ import annotations

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
SOURCE = Path(__file__).with_name("gemv_shim.c")


@dataclass(frozen=True)
class GemvChoice:
    active: bool
    note: str


_shim = None  # the loaded shim (kept alive; ``calls()`` reads its counter)


def install(blas_path: str) -> GemvChoice:
    """See the module docstring."""
    global _shim
    if os.environ.get(GEMV_ENV, "1").strip() == "0":
        return GemvChoice(False, f"{GEMV_ENV}=0")
    try:
        blas = ctypes.CDLL(blas_path)  # local: only to take its functions
        sgemm, sgemv = (ctypes.cast(getattr(blas, name), ctypes.c_void_p).value
                        for name in ("cblas_sgemm", "cblas_sgemv"))
        library = _build()
        if library is None:
            return GemvChoice(False, "no C compiler (cc) to build the sgemv shim: plain sgemm")
        shim = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        shim.mlx_ssbd_gemv_init(ctypes.c_void_p(sgemm), ctypes.c_void_p(sgemv))
    except (OSError, AttributeError, subprocess.SubprocessError) as error:
        return GemvChoice(False, f"sgemv shim not used: {error}")
    _shim = shim
    return GemvChoice(True, "one-row fp32 products through sgemv")


def calls() -> int:
    """Products the shim has sent to sgemv so far (0 when it is not installed)."""
    if _shim is None:
        return 0
    _shim.mlx_ssbd_gemv_calls.restype = ctypes.c_longlong
    return int(_shim.mlx_ssbd_gemv_calls())


def _build() -> Path | None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None
    source = SOURCE.read_bytes()
    tag = hashlib.sha256(source + platform.machine().encode()).hexdigest()[:16]
    target = cache_home() / "native" / f"libmlx_ssbd_gemv-{tag}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(SOURCE)],
                       check=True, capture_output=True, timeout=120)
        os.replace(built, target)  # atomic: concurrent processes may build it too
    return target
