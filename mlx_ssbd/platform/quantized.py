"""Quantized layers on the CPU through mlx-ssbd's own kernel (a part of the backend policy).

Contract: ``route_quantized_layers(model)``: on the CPU backend, every affine ``QuantizedLinear``
(and the ``as_linear`` of a quantized tied embedding) of ``model`` runs its product through the
kernel; on a GPU, or without the kernel, nothing changes (MLX's own ``quantized_matmul`` runs).
Returns the number of layers routed, and sets the BLAS threads for what runs
(``backend.quiet_blas_workers``: the last model routed decides). The weight, scales and biases of a
routed layer with 4, 5, 6 or 8-bit codes (an embedding: 4 or 8 bits; and a multiple of 16 rows)
are repacked in bands of 16 rows (``repack_bands``: the same shapes and dtypes, another order; 5
and 6-bit codes first each block's bits in a band's order, the kernel's ``band_codes``), the
layout the kernel's products read; the layer's ``banded`` says so, and nothing but the kernel (and
a banded embedding's own lookup) may read them after (``as_stored(layer, leaf)`` gives MLX's
layout back). ``stored_parameters(model)`` names the routed layers' scales and biases, which the
kernel reads as stored (fp32, fp16 or bf16) and so need no cast. ``dequantize_layers(model)``
replaces quantized layers by dense ones (the ``MLX_SSBD_WEIGHTS=dense`` comparison path). The
kernel is the native extension (``extension.kernel()``), built by ``pip install``; nothing here
loads it at import time.

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


BAND = 16  # weight rows in a band
BANDED_BITS = (4, 5, 6, 8)  # the code widths the kernel multiplies in bands


def _product(layer, x, bias=None):
    """``x @ W.T`` (``+ bias``) for a quantized layer's weight W, through the kernel."""
    return kernel().quantized_matmul(
        x,
        layer["weight"],
        layer["scales"],
        layer["biases"],
        layer.group_size,
        layer.bits,
        bias=bias,
        banded=layer.banded,
    )


def _bandable(layer) -> bool:
    # A banded embedding looks its rows up in the bands (``_rows``): whole words of codes, so 4 or 8 bits.
    widths = (4, 8) if isinstance(layer, nn.QuantizedEmbedding) else BANDED_BITS
    return layer.bits in widths and layer["weight"].shape[0] % BAND == 0


def repack_bands(a: mx.array) -> mx.array:
    """A layer's codes (or its scales, or biases), [N, C], in bands of 16 rows: the same shape and
    dtype, its elements read as [N / 16, C, 16] (band i, column j, lane c: row 16 * i + c's column
    j), so that 16 rows' words of one block, or scales of one group, lie side by side."""
    rows, columns = a.shape
    return mx.contiguous(a.reshape(rows // BAND, BAND, columns).swapaxes(1, 2)).reshape(rows, columns)


def _bands(a: mx.array) -> mx.array:
    """A banded array as [N / 16, C, 16]: band, column, lane."""
    rows, columns = a.shape
    return a.reshape(rows // BAND, columns, BAND)


def unpack_bands(a: mx.array) -> mx.array:
    """The inverse of ``repack_bands``: a banded array in MLX's layout again."""
    return mx.contiguous(_bands(a).swapaxes(1, 2)).reshape(a.shape)


LEAVES = ("weight", "scales", "biases")  # a quantized layer's arrays


def band_leaf(leaf: str, a: mx.array, bits: int) -> mx.array:
    """A quantized layer's ``leaf`` (one of ``LEAVES``) ``a`` of ``bits``-bit codes in bands, as a
    routed layer holds it (codes of 5 or 6 bits first in a band's order: the kernel's ``band_codes``)."""
    return repack_bands(kernel().band_codes(a, bits) if leaf == "weight" else a)


def _band(layer) -> None:
    """Repack a routed layer's weight, scales and biases in bands, in place of the stored ones (one
    array at a time: the memory of one array more at most)."""
    for leaf in LEAVES:
        layer[leaf] = band_leaf(leaf, layer[leaf], layer.bits)
        mx.eval(layer[leaf])
    layer.banded = True


def as_stored(layer, leaf: str) -> mx.array:
    """A quantized layer's ``leaf`` (weight, scales or biases) in MLX's layout, banded or not."""
    if not getattr(layer, "banded", False):
        return layer[leaf]
    a = unpack_bands(layer[leaf])
    return kernel().band_codes(a, layer.bits, inverse=True) if leaf == "weight" else a


def _rows(layer, leaf: str, ids: mx.array) -> mx.array:
    """Rows ``ids`` of a layer's ``leaf`` as stored in MLX's layout, whether it is banded or not."""
    a = layer[leaf]
    return _bands(a)[ids // BAND, :, ids % BAND] if layer.banded else a[ids]


class CpuQuantizedLinear(nn.QuantizedLinear):
    """A ``QuantizedLinear`` whose product runs through the kernel (same parameters, same result).
    With fp32 x (the CPU's compute dtype) the kernel adds the bias itself, in fp32 as the separate
    addition would (the same bits, one graph node fewer)."""

    banded = False  # its weight, scales and biases in bands (``_band``)

    def __call__(self, x):
        bias = self["bias"] if "bias" in self else None
        if bias is None or x.dtype == mx.float32:
            return _product(self, x, bias)
        return _product(self, x) + bias


class CpuQuantizedEmbedding(nn.QuantizedEmbedding):
    """A ``QuantizedEmbedding`` whose ``as_linear`` (a tied output layer) runs through the kernel;
    its rows are dequantized in fp32 (the CPU's compute dtype) whatever its scales are stored in,
    read from the bands where it is banded."""

    banded = False

    def __call__(self, x):
        return mx.dequantize(
            _rows(self, "weight", x),
            scales=_rows(self, "scales", x).astype(mx.float32),
            biases=_rows(self, "biases", x).astype(mx.float32),
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
            if _bandable(module):
                _band(module)
            routed += 1
        elif type(module) is nn.QuantizedEmbedding and _routable(module):
            module.__class__ = CpuQuantizedEmbedding
            if _bandable(module):
                _band(module)
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
