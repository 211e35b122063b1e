"""Matrix-vector products through the BLAS's sgemv on Linux CPUs (a part of the backend policy).

Contract: ``install(blas_path)`` is called by ``backend`` before the BLAS at ``blas_path`` is loaded
into the global symbol scope and before ``mlx.core`` is imported. If ``pip install`` built the shim
(``native/gemv_shim.c``, beside the CPU kernel, as ``libmlx_ssbd_gemv.so`` in this directory), it
loads it with ``RTLD_GLOBAL`` so that MLX's ``cblas_sgemm`` resolves to it, and hands it the BLAS's
own ``cblas_sgemm``/``cblas_sgemv``: one-row (and one-column) products go to sgemv, products of a
few rows by a transposed weight (a batched decode step) to the shim's own kernel, which reads the
weight once for all rows; everything else to sgemm unchanged. It compiles nothing, writes nothing
and never raises; it returns a ``GemvChoice`` saying what happened (not built, ``MLX_SSBD_GEMV=0``,
any failure: MLX keeps plain sgemm, only slower). ``MLX_SSBD_FEW_ROWS=N`` sets the most rows the
few-rows kernel takes (default 8; 1 turns it off, for comparisons; a value that is not a number is
named in the note and the default used); a shim built without OpenMP keeps it off (one thread).

Why: MLX's CPU backend calls sgemm for every fp32 matmul, also for a decode step's 1 x K times
K x N; OpenBLAS packs the whole weight for that and runs about 2.5x slower than sgemv on the same
product (benchmarks/engine/matmul_rows.py). A decode step of a dense model is almost only such
products (quantized layers go through the CPU kernel instead).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

GEMV_ENV = "MLX_SSBD_GEMV"
FEW_ROWS_ENV = "MLX_SSBD_FEW_ROWS"  # the most rows of a product sent to the few-rows kernel (1: none)
DEFAULT_FEW_ROWS = 8  # beyond, sgemm is as fast (benchmarks/engine/matmul_rows.py)
LIBRARY = Path(__file__).with_name("libmlx_ssbd_gemv.so")  # built by pip install (CMake), Linux only
NOT_BUILT = "not built (pip install builds it where it finds a C compiler)"


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
    raw, unreadable = os.environ.get(FEW_ROWS_ENV, str(DEFAULT_FEW_ROWS)), ""
    try:
        few = int(raw)
    except ValueError:
        few, unreadable = DEFAULT_FEW_ROWS, f" ({FEW_ROWS_ENV}={raw!r} is not a number: the default)"
    if not LIBRARY.is_file():
        return GemvChoice(False, NOT_BUILT)
    try:
        blas = ctypes.CDLL(blas_path)  # local: only to take its functions
        sgemm, sgemv = (
            ctypes.cast(getattr(blas, name), ctypes.c_void_p).value for name in ("cblas_sgemm", "cblas_sgemv")
        )
        shim = ctypes.CDLL(str(LIBRARY), mode=ctypes.RTLD_GLOBAL)
        threaded = bool(shim.mlx_ssbd_gemv_threaded())
        shim.mlx_ssbd_gemv_init(
            ctypes.c_void_p(sgemm), ctypes.c_void_p(sgemv), ctypes.c_int(few if threaded else 1)
        )
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


def calls() -> int:
    """Products the shim has sent to sgemv so far (0 when it is not installed)."""
    if _shim is None:
        return 0
    _shim.mlx_ssbd_gemv_calls.restype = ctypes.c_longlong
    return int(_shim.mlx_ssbd_gemv_calls())
