"""What the platform layer chose, in one record: for ``doctor`` and benchmark reports.

Contract: ``backend_info()`` reads the choices of ``backend`` (BLAS, sgemv shim, device, dtype)
and ``extension`` (the CPU kernel) and returns them as a ``BackendInfo``; it changes nothing.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import mlx.core as mx

from . import backend
from .extension import kernel_status


@dataclass(frozen=True)
class BackendInfo:
    """What the backend policy chose; printed by ``doctor`` and stored in benchmark summaries."""

    platform: str
    device: str
    mlx_version: str
    blas: str
    blas_path: str | None
    blas_note: str
    gemv: str
    compute_dtype: str
    quantized_kernel: str
    thread_waits: str
    weights: str

    def to_dict(self) -> dict:
        return asdict(self)


def backend_info() -> BackendInfo:
    gpu = backend.is_gpu()
    dtype = "model's own dtype" if gpu else "float32 (quantized layers stay quantized)"
    kernel = "MLX's quantized_matmul (GPU)" if gpu else "CPU kernel " + kernel_status()
    gemv = backend.GEMV
    return BackendInfo(
        platform=sys.platform,
        device=str(mx.default_device()),
        mlx_version=getattr(mx, "__version__", "unknown"),
        blas=backend.BLAS.name,
        blas_path=backend.BLAS.path,
        blas_note=backend.BLAS.note,
        gemv=gemv.note if gemv.active else f"off ({gemv.note})",
        compute_dtype=dtype,
        quantized_kernel=kernel,
        thread_waits=backend.thread_waits(),
        weights="auto loads them {}: {}".format(*backend.auto_weights()),
    )
