"""mlx-ssbd's native extension: loaded once, checked against MLX, or None.

Contract: ``kernel()`` returns the native extension ``mlx_ssbd.platform._qmm`` once it has passed a
self-check against MLX's own operations (``mx.quantized_matmul``, sigmoid, ``mx.fast.rope``,
``mx.fast.rms_norm``), or None; ``kernel_status()`` says which, and why not (not built: the install
found no compiler; built against another MLX; ``MLX_SSBD_QMM=0``). The extension is built by ``pip
install`` (CMake through scikit-build-core); nothing here compiles, writes or loads anything at
import time. Its users: ``quantized`` (products of quantized layers) and ``layers`` (RoPE, norms,
SwiGLU, attention). ``rounded_activations(x)`` is x as the kernel multiplies it (the kernel's
contract, for tests; ``block=`` another block size, for benchmarks); ``default_inverse_frequencies``
are RoPE's, as ``mx.fast.rope`` computes them.
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np

QMM_ENV = "MLX_SSBD_QMM"

_state: dict = {}


def kernel():
    """The checked native extension, or None (see ``kernel_status``)."""
    if "module" not in _state:
        _state["module"], _state["status"] = _load()
    return _state["module"]


def kernel_status() -> str:
    kernel()
    return _state["status"]


def _load():
    if os.environ.get(QMM_ENV, "1").strip() == "0":
        return None, f"off ({QMM_ENV}=0): MLX's own quantized_matmul, single-threaded and slow on the CPU"
    try:
        from . import _qmm
    except ImportError as error:
        return None, (
            "not built (the install found no C++ compiler or CMake failed: "
            f"{error.__class__.__name__}); quantized layers use MLX's own kernel, several times "
            "slower on the CPU. Install g++ and reinstall mlx-ssbd to build it."
        )
    running = getattr(mx, "__version__", "unknown")
    if _qmm.mlx_version != running:
        return None, (
            f"built against mlx {_qmm.mlx_version}, running mlx {running}: reinstall mlx-ssbd "
            "(pip install --force-reinstall --no-deps mlx-ssbd) to rebuild it; meanwhile MLX's own "
            "quantized kernel runs (slower)"
        )
    try:
        problem = _self_check(_qmm)
    except (TypeError, RuntimeError, ValueError) as error:
        problem = str(error).splitlines()[0]
    if problem:
        return None, f"failed its self-check ({problem}); MLX's own quantized kernel runs (slower)"
    count = _qmm.threads()
    threads = f"{count} thread{'s' if count > 1 else ''}"
    return _qmm, f"on ({_qmm.simd_path()}, {threads}, built against mlx {_qmm.mlx_version})"


def rounded_activations(x, block: int = 32):
    """``x`` as the kernel multiplies it: rounded to int8 steps per block of 32 values of its last
    axis (step = the block's largest magnitude / 127, ties to even). Another ``block`` rounds it
    with one step per that many values instead (the last block of the axis may be shorter): what a
    kernel with such steps would multiply."""
    size = x.shape[-1]
    pad = -size % block
    padded = mx.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]) if pad else x
    blocks = padded.reshape(*padded.shape[:-1], -1, block)
    amax = mx.max(mx.abs(blocks), axis=-1, keepdims=True)
    inverse = mx.where(amax > 0, 127.0 / mx.where(amax > 0, amax, 1.0), 0.0)
    rounded = (mx.round(blocks * inverse) * (amax / 127.0)).reshape(padded.shape)
    return rounded[..., :size] if pad else rounded


def _self_check(module) -> str:
    """Compare the kernel with ``mx.quantized_matmul`` on x rounded as the kernel rounds it, and
    ``silu_mul``, ``rope`` and ``rms_norm`` with MLX's own."""
    with mx.stream(mx.cpu):
        w = mx.random.normal((24, 64), key=mx.random.key(0))
        x = mx.random.normal((3, 64), key=mx.random.key(1))
        q, s, b = mx.quantize(w, group_size=32, bits=4)
        want = mx.quantized_matmul(rounded_activations(x), q, s, b, transpose=True, group_size=32, bits=4)
        err = mx.max(mx.abs(module.quantized_matmul(x, q, s, b, 32, 4) - want)).item()
        if err >= 1e-4:
            return f"quantized_matmul: max difference {err:.3g}"
        gate = x * 8  # sigmoid's tails too
        want = gate * mx.sigmoid(gate) * x
        err = mx.max(mx.abs(module.silu_mul(gate, x) - want) / (mx.abs(want) + 1e-30)).item()
        if err >= 1e-5:
            return f"silu_mul: max relative difference {err:.3g}"
        heads = x.reshape(1, 3, 1, 64)
        inverse = default_inverse_frequencies(64, 10000.0)
        got = module.rope(heads, 64, traditional=False, inv_freqs=inverse, scale=1.0, offset=mx.array(9))
        want = mx.fast.rope(heads, 64, traditional=False, base=10000.0, scale=1.0, offset=9)
        err = mx.max(mx.abs(got - want)).item()
        if err >= 1e-5:
            return f"rope: max difference {err:.3g}"
        want = mx.fast.rms_norm(x, w[0], 1e-6)
        err = mx.max(mx.abs(module.rms_norm(x, w[0], 1e-6) - want)).item()
    return "" if err < 1e-5 else f"rms_norm: max difference {err:.3g}"


def default_inverse_frequencies(dims: int, base: float) -> mx.array:
    """``exp(-i log(base) / (dims / 2))`` for i < dims / 2, as ``mx.fast.rope`` computes them (its
    step ``log(base) / (dims / 2)`` rounded to fp32 first, MLX's ``exp``)."""
    half = dims // 2
    step = np.float32(np.log(np.float64(base))) / np.float32(half)  # fp32 as MLX's float log
    return mx.exp(mx.arange(0, -half, -1, dtype=mx.float32) * mx.array(step, dtype=mx.float32))
