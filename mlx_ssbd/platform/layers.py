"""A decoder's small operations on the CPU through mlx-ssbd's native extension (a part of the backend
policy).

Contract: ``route_layers(model)``: on the CPU backend, with the native extension loaded and checked
(``extension.kernel()``):
- every ``nn.RoPE`` and mlx-lm ``Llama3RoPE`` of ``model`` rotates fp32 input with the extension's
  ``rope``, and every ``nn.RMSNorm`` normalises fp32 input with its ``rms_norm`` (other dtypes go
  to MLX's ``mx.fast`` as before);
- every mlx-lm model module that ``model``'s layers come from and that calls mlx-lm's ``swiglu``
  calls the extension's ``silu_mul`` instead (gate and up of one shape; anything else still goes
  to mlx-lm's), and one that calls mlx-lm's ``scaled_dot_product_attention`` calls the
  extension's ``attention`` for fp32 queries, keys and values without attention sinks (a
  quantized KV cache, sinks or other dtypes still go to mlx-lm's); this routing is per model
  architecture, for the whole process (the CPU backend is chosen once per process).
Returns the number of layers and modules routed; on a GPU, or without the extension, nothing
changes and it returns 0. Results are within a few ulp of MLX's (tests/test_layers.py).

Why: MLX's CPU backend has no kernel of its own for RoPE or RMSNorm: each call is a graph of 15-20
or 6 small operations, each a task handed to MLX's stream thread, about 6 ms of a decode step of
the default model; and it computes sigmoid one element at a time through libm's ``expf``, about
5 ms more in its 28 MLPs; attention is a graph of its own that copies the keys and values once
per group of query heads. Each of these is one operation in the extension
(``benchmarks/engine/quantized_kernel.py`` times both ways).
"""

from __future__ import annotations

import sys

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base
from mlx_lm.models.rope_utils import Llama3RoPE

from .backend import is_gpu
from .extension import default_inverse_frequencies, kernel


def _rotate(module, x, offset, scale: float) -> mx.array:
    offset = offset if isinstance(offset, mx.array) else mx.array(offset, dtype=mx.int32)
    return kernel().rope(
        x,
        module.dims,
        traditional=module.traditional,
        inv_freqs=module._inverse_freqs,
        scale=scale,
        offset=offset,
    )


class CpuRoPE(nn.RoPE):
    """An ``nn.RoPE`` whose fp32 rotations run as one native operation."""

    def __call__(self, x, offset: int = 0):
        if x.dtype != mx.float32:
            return super().__call__(x, offset)
        return _rotate(self, x, offset, self.scale)


class CpuLlama3RoPE(Llama3RoPE):
    """mlx-lm's ``Llama3RoPE`` (frequencies of its own, scale 1) as one native operation."""

    def __call__(self, x, offset: int = 0):
        if x.dtype != mx.float32:
            return super().__call__(x, offset)
        return _rotate(self, x, offset, 1.0)


class CpuRMSNorm(nn.RMSNorm):
    """An ``nn.RMSNorm`` whose fp32 normalisation runs as one native operation."""

    def __call__(self, x):
        if x.dtype != mx.float32:
            return super().__call__(x)
        return kernel().rms_norm(x, self["weight"], self.eps)


def _silu_mul(gate, up):
    if gate.shape != up.shape:
        return activations.swiglu(gate, up)
    return kernel().silu_mul(gate, up)


def _attention(queries, keys, values, cache, scale: float, mask, sinks=None):
    plain = sinks is None and not hasattr(cache, "bits")
    if not plain or any(a.dtype != mx.float32 for a in (queries, keys, values)):
        return base.scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks)
    if isinstance(mask, mx.array):
        return kernel().attention(queries, keys, values, scale=scale, mask_mode="array", mask=mask)
    return kernel().attention(queries, keys, values, scale=scale, mask_mode=mask or "")


ROUTED_FUNCTIONS = {
    "swiglu": (activations.swiglu, _silu_mul),
    "scaled_dot_product_attention": (base.scaled_dot_product_attention, _attention),
}


def route_layers(model) -> int:
    """See the module docstring."""
    if is_gpu() or kernel() is None:
        return 0
    routed = 0
    with mx.stream(mx.cpu):
        for _, module in model.named_modules():
            if type(module) is nn.RoPE:
                module.__class__ = CpuRoPE
                module._inverse_freqs = default_inverse_frequencies(module.dims, module.base)
                mx.eval(module._inverse_freqs)
            elif type(module) is Llama3RoPE:
                module.__class__ = CpuLlama3RoPE
                module._inverse_freqs = mx.reciprocal(module._freqs.astype(mx.float32))
                mx.eval(module._inverse_freqs)
            elif type(module) is nn.RMSNorm:
                module.__class__ = CpuRMSNorm
            else:
                continue
            routed += 1
    for name in {type(module).__module__ for _, module in model.named_modules()}:
        namespace = sys.modules.get(name)
        for function, (theirs, ours) in ROUTED_FUNCTIONS.items():
            if namespace is not None and getattr(namespace, function, None) is theirs:
                setattr(namespace, function, ours)
                routed += 1
    return routed
