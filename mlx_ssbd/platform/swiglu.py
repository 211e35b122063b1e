"""SwiGLU on the CPU through mlx-ssbd's native extension (a part of the backend policy).

Contract: ``route_swiglu(model)``: on the CPU backend, with the native extension loaded and
checked (``quantized.kernel()``), every mlx-lm model module that ``model``'s layers come from and
that calls mlx-lm's ``swiglu`` calls the extension's ``silu_mul`` instead (gate and up of one
shape; anything else still goes to mlx-lm's); returns the number of modules routed. On a GPU, or
without the extension, nothing changes and it returns 0. The routing is per model architecture,
for the whole process (the CPU backend is chosen once per process).

Why: MLX's CPU backend on Linux computes sigmoid one element at a time through libm's ``expf``,
about 5 ms of a decode step of the default model (28 MLPs of 8960 values); ``silu_mul`` computes
``gate * sigmoid(gate) * up`` 16 lanes at a time, within a few ulp of MLX's result
(``benchmarks/engine/quantized_kernel.py`` times both).
"""

from __future__ import annotations

import sys

from mlx_lm.models import activations

from .backend import is_gpu
from .quantized import kernel


def _silu_mul(gate, up):
    if gate.shape != up.shape:
        return activations.swiglu(gate, up)
    return kernel().silu_mul(gate, up)


def route_swiglu(model) -> int:
    """See the module docstring."""
    if is_gpu() or kernel() is None:
        return 0
    routed = 0
    for name in {type(module).__module__ for _, module in model.named_modules()}:
        namespace = sys.modules.get(name)
        if namespace is not None and getattr(namespace, "swiglu", None) is activations.swiglu:
            namespace.swiglu = _silu_mul
            routed += 1
    return routed
