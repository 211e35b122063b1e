"""Quantized layers on the CPU through mlx-ssbd's own kernel (a part of the backend policy).

Contract: ``route_quantized_layers(model)``: on the CPU backend, every affine ``QuantizedLinear``
(and the ``as_linear`` of a quantized tied embedding) of ``model`` runs its product through the
kernel; on a GPU, or without the kernel, nothing changes (MLX's own ``quantized_matmul`` runs).
Returns the number of layers routed, and sets the BLAS threads for what runs
(``backend.quiet_blas_workers``: the last model routed decides); ``stored_parameters(model)`` names
the routed layers' scales and biases, which the kernel reads as stored (fp32, fp16 or bf16) and so
need no cast. ``dequantize_layers(model)`` replaces quantized layers by dense ones (the
``MLX_SSBD_WEIGHTS=dense`` comparison path). The kernel is the native extension
(``extension.kernel()``), built by ``pip install``; nothing here loads it at import time.

Why: MLX's CPU ``quantized_matmul`` is a single-threaded loop, 10-20x slower than fp32 BLAS for
one row and 40x for 16-64 rows (benchmarks/engine/quantized_kernel.py); the kernel multiplies the
stored codes by x rounded to int8 per block of 32 (as llama.cpp does): a decode step several times
faster than fp32 BLAS on the dequantized weights (benchmarks/engine/quantized_weights.py), with 1/6
of the memory.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .backend import is_gpu, quiet_blas_workers
from .extension import kernel

SUPPORTED_BITS = (2, 3, 4, 5, 6, 8)


def _routable(layer) -> bool:
    return getattr(layer, "mode", "affine") == "affine" and layer.bits in SUPPORTED_BITS


def _product(layer, x, bias=None):
    """``x @ W.T`` (``+ bias``) for a quantized layer's weight W, through the kernel."""
    return kernel().quantized_matmul(
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
