"""What a decision over logit rows needs, per row: the largest logit, the first index holding it
(the greedy token) and softmax's normaliser (a part of the backend policy).

Contract: ``logit_stats(logits, rows, sums=True)`` takes logits ``(N, V)`` and the indices of the
rows wanted, ``rows`` (K,), and returns ``(largest, total, best)``, each ``(K,)`` and lazy: for
row ``rows[k]``, its largest logit (fp32), the sum over the row of ``exp(logit - largest)`` (fp32;
zeros unless ``sums``) and the first index of the largest (uint32), so that the row's softmax is
``exp(logit - largest) / total`` and its greedy token ``best``. On the CPU backend with the native
extension (``extension.kernel()``) it is one operation that reads each chosen row twice; elsewhere
(a GPU, or no extension) MLX's own ``max``, ``argmax`` and ``exp`` of the gathered rows. The two
agree to fp32 rounding (tests/test_logit_stats.py); each row's result depends on that row alone.

Why: MLX's CPU backend computes ``exp`` one element at a time through libm's ``expf``: its
softmax over the 15 checked rows of a 16-token verify pass with a 152k-token vocabulary takes
about 30x as long as this whole decision on a 2-core EPYC (``benchmarks/engine/verify_cost.py``
times both ways on the same logits).
"""

from __future__ import annotations

import mlx.core as mx

from .backend import is_gpu
from .extension import kernel


def logit_stats(logits: mx.array, rows: mx.array, sums: bool = True) -> tuple[mx.array, mx.array, mx.array]:
    """See the module docstring."""
    logits = logits.astype(mx.float32)
    module = None if is_gpu() else kernel()
    if module is not None:
        largest, total, best = module.logit_stats(logits, rows, sums=sums)
        return largest, total, best
    picked = logits[rows]
    largest = picked.max(axis=-1)
    best = mx.argmax(picked, axis=-1).astype(mx.uint32)
    total = mx.exp(picked - largest[:, None]).sum(axis=-1) if sums else mx.zeros_like(largest)
    return largest, total, best
