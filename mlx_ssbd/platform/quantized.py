"""Quantized layers on the CPU through mlx-ssbd's own kernel (a part of the backend policy).

Contract: ``kernel()`` returns the native extension ``mlx_ssbd.platform._qmm`` once it has passed a
self-check against ``mx.quantized_matmul``, or None; ``kernel_status()`` says which, and why not
(not built: the install found no compiler; built against another MLX; ``MLX_SSBD_QMM=0``). The
extension is built by ``pip install`` (CMake through scikit-build-core); nothing here compiles,
writes or loads anything at import time.

``route_quantized_layers(model)``: on the CPU backend, every affine ``QuantizedLinear`` (and the
``as_linear`` of a quantized tied embedding) of ``model`` runs its product through the kernel;
on a GPU, or without the kernel, nothing changes (MLX's own ``quantized_matmul`` runs). Returns
the number of layers routed, and sets the BLAS threads for what runs (``backend.quiet_blas_workers``:
the last model routed decides); ``stored_parameters(model)`` names the routed layers' scales and
biases, which the kernel reads as stored (fp32, fp16 or bf16) and so need no cast.
``dequantize_layers(model)`` replaces quantized layers by dense ones (the
``MLX_SSBD_WEIGHTS=dense`` comparison path). ``rounded_activations(x)`` is x as the kernel
multiplies it (the kernel's contract, for tests).

Why: MLX's CPU ``quantized_matmul`` is a single-threaded loop, 10-20x slower than fp32 BLAS for
one row and 40x for 16-64 rows (benchmarks/engine/quantized_kernel.py); the kernel multiplies the
stored codes by x rounded to int8 per block of 32 (as llama.cpp does), which is 2x faster than
fp32 BLAS on the dequantized weight for a decode step, with 1/6 of the memory.
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn

from .backend import is_gpu, quiet_blas_workers

QMM_ENV = "MLX_SSBD_QMM"
SUPPORTED_BITS = (2, 3, 4, 5, 6, 8)

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
    threads = "OpenMP" if _qmm.openmp else "1 thread"
    return _qmm, f"on ({_qmm.simd_path()}, {threads}, built against mlx {_qmm.mlx_version})"


def rounded_activations(x):
    """``x`` as the kernel multiplies it: rounded to int8 steps per block of 32 values of its last
    axis (step = the block's largest magnitude / 127, ties to even)."""
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    amax = mx.max(mx.abs(blocks), axis=-1, keepdims=True)
    inverse = mx.where(amax > 0, 127.0 / mx.where(amax > 0, amax, 1.0), 0.0)
    return (mx.round(blocks * inverse) * (amax / 127.0)).reshape(x.shape)


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
        from .layers import default_inverse_frequencies  # layers routes through this module

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


def _routable(layer) -> bool:
    return getattr(layer, "mode", "affine") == "affine" and layer.bits in SUPPORTED_BITS


def _product(layer, x, bias=None):
    """``x @ W.T`` (``+ bias``) for a quantized layer's weight W, through the kernel."""
    return _state["module"].quantized_matmul(
        x, layer["weight"], layer["scales"], layer["biases"], layer.group_size, layer.bits, bias=bias
    )


class CpuQuantizedLinear(nn.QuantizedLinear):
    """A ``QuantizedLinear`` whose product runs through the kernel (same parameters, same result).
    With fp32 x (the CPU's compute dtype) the kernel adds the bias itself, in fp32 as the separate
    addition would (the same bits, one graph node fewer)."""

    def __call__(self, x):
        bias = self["bias"] if "bias" in self else None
        if bias is None or x.dtype == mx.float32:
            return _product(self, x, bias)
        return _product(self, x) + bias


class CpuQuantizedEmbedding(nn.QuantizedEmbedding):
    """A ``QuantizedEmbedding`` whose ``as_linear`` (a tied output layer) runs through the kernel;
    its rows are dequantized in fp32 (the CPU's compute dtype) whatever its scales are stored in."""

    def __call__(self, x):
        return mx.dequantize(
            self["weight"][x],
            scales=self["scales"][x].astype(mx.float32),
            biases=self["biases"][x].astype(mx.float32),
            group_size=self.group_size,
            bits=self.bits,
        )

    def as_linear(self, x):
        return _product(self, x)


def route_quantized_layers(model) -> int:
    """See the module docstring."""
    if is_gpu() or kernel() is None:
        quiet_blas_workers(False)
        return 0
    routed = 0
    for _, module in model.named_modules():
        if type(module) is nn.QuantizedLinear and _routable(module):
            module.__class__ = CpuQuantizedLinear
            routed += 1
        elif type(module) is nn.QuantizedEmbedding and _routable(module):
            module.__class__ = CpuQuantizedEmbedding
            routed += 1
    quiet_blas_workers(routed > 0)
    return routed


def stored_parameters(model) -> set[str]:
    """Paths of the parameters the kernel reads in their stored dtype: the scales and biases of
    every routed layer (fp16 scales halve what a decode step reads beside the 4-bit codes)."""
    return {
        f"{name}.{leaf}"
        for name, module in model.named_modules()
        if type(module) in (CpuQuantizedLinear, CpuQuantizedEmbedding)
        for leaf in ("scales", "biases")
    }


def dequantize_layers(model, dtype=None) -> int:
    """Replace every quantized linear layer and embedding of ``model`` by a dense one (in ``dtype``,
    else the scales' dtype), one layer at a time so only one dense copy is ever made; the count."""
    from mlx.utils import tree_unflatten

    dense = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            weight = mx.dequantize(
                module["weight"], module["scales"], module["biases"], module.group_size, module.bits
            )
            weight = weight.astype(dtype) if dtype is not None else weight
            mx.eval(weight)
            if isinstance(module, nn.QuantizedEmbedding):
                layer = nn.Embedding(*weight.shape)
            else:
                layer = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
                if "bias" in module:
                    layer.bias = module["bias"]
            layer.weight = weight
            dense.append((name, layer))
    if dense:
        model.update_modules(tree_unflatten(dense))
    mx.clear_cache()  # the quantized arrays just freed: give their memory back
    return len(dense)
