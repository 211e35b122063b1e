"""The biased acceptance rule: how many draft tokens one verify pass accepts, and what comes next.

Contract: ``decide(rows, draft, beta, sampler)`` takes the m + 1 logit rows of a verify pass (row
i predicts draft[i]; row m the token after the draft) and returns ``[accepted, next_token]`` as a
lazy array, so that many streams' decisions share one host sync (``engine.run``).

The rule (Zeng et al., SSBD): with p_i the model's distribution for draft position i and draft
token y_i, the biased distribution is p'_i = (1 - beta) p_i + beta onehot(y_i); y_i is accepted
while argmax p'_i == y_i. Without materialising p'_i this is

    accept_i  <=>  max(p_i) - p_i[y_i] <= beta / (1 - beta)      (beta = 1 accepts everything)

with ties going to the draft. d = number of leading accepts; argmax p_d is the next token (the
correction when d < m, a free continuation when d == m). beta = 0 accepts exactly the tokens
greedy decoding would produce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx

from .sampling import Sampler


def accept_threshold(beta: float) -> float:
    """beta / (1 - beta): the largest gap max(p) - p[y] that still accepts y."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    return math.inf if beta >= 1.0 else beta / (1.0 - beta)


def accept_mask(probs: mx.array, draft: mx.array, threshold) -> mx.array:
    """Per-position accept decisions: probs (m, V), draft (m,), threshold scalar or (m,) -> (m,)."""
    p_draft = mx.take_along_axis(probs, draft[:, None], axis=-1)[:, 0]  # (m,)
    return (probs.max(axis=-1) - p_draft) <= threshold


def _accept_and_next(logits: mx.array, draft: mx.array, thresholds: mx.array) -> mx.array:
    # logits (m + 1, V): row i predicts draft[i]; row m predicts the token after the draft.
    # draft (m + 1,) and thresholds (m + 1,) carry a padding entry for row m with threshold -1,
    # which never accepts (gaps are >= 0); this keeps every shape input-derived for shapeless
    # compilation.
    probs = mx.softmax(logits.astype(mx.float32), axis=-1, precise=True)  # (m + 1, V)
    accepted = mx.cumprod(accept_mask(probs, draft, thresholds).astype(mx.int32)).sum()
    next_token = mx.argmax(mx.take(logits, accepted, axis=0), axis=-1)
    return mx.stack([accepted, next_token.astype(mx.int32)])


_compiled: dict[int, object] = {}


def accept_and_next(logits: mx.array, draft: mx.array, thresholds: mx.array) -> mx.array:
    """Compiled ``[accepted, next_token]``; see ``_accept_and_next`` for the arguments.

    One shapeless compilation per vocabulary size: shapeless tracing follows the draft length
    but silently reuses the first vocabulary size it saw (wrong tokens for a second model). MLX
    caches traces by the Python function, so each size gets its own function object (kept alive
    here, so its identity is never reused).
    """
    vocab = logits.shape[-1]
    if vocab not in _compiled:

        def accept_for_this_vocab(logits, draft, thresholds):
            return _accept_and_next(logits, draft, thresholds)

        _compiled[vocab] = mx.compile(accept_for_this_vocab, shapeless=True)
    return _compiled[vocab](logits, draft, thresholds)


def decide(rows: mx.array, draft: Sequence[int], beta: float, sampler: Sampler | None = None,
           tail: int = 0) -> mx.array:
    """``[accepted, next_token]`` (lazy) from the m + 1 logit rows of a verify pass.

    Greedy: the fused biased rule (compiled); with a sampler: biased speculative sampling. The last
    ``tail`` draft tokens (a guessed tail, see ``engine.tail``) are verified at beta = 0, losslessly.
    """
    if not draft:
        next_token = mx.argmax(rows[-1]) if sampler is None else sampler(rows[-1])
        return mx.stack([mx.array(0, dtype=mx.int32), next_token.astype(mx.int32)])
    padded = mx.array([*draft, 0], dtype=mx.uint32)
    head = len(draft) - tail
    if sampler is not None:
        betas = mx.array([beta] * head + [0.0] * (tail + 1), dtype=mx.float32) if tail else beta
        return sampler.accept_and_next(rows, padded, betas)
    thresholds = mx.array([accept_threshold(beta)] * head + [0.0] * tail + [-1.0],
                          dtype=mx.float32)
    return accept_and_next(rows, padded, thresholds)
