"""Sampling (temperature, top-p) and biased speculative sampling of a draft.

Contract: a ``Sampler`` turns logits into the sampling distribution (``probs``) and draws tokens
with its own PRNG key (no global random state); decode and verify use the same ``probs`` so both
sample from exactly the same distribution.

Biased speculative sampling (the sampling form of SSBD): draft token y_i is accepted with
probability p'_i(y_i) = (1 - beta) p_i(y_i) + beta. At the first rejection the token is drawn
from the residual max(0, p'_i - onehot(y_i)), normalised, which is p_i without y_i. So the output
follows p' = (1 - beta) p + beta onehot(y); at beta = 0 it follows p exactly, as plain sampling
does (speculative sampling with a one-hot draft distribution).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx


def sampling_probs(logits: mx.array, temperature: float, top_p: float) -> mx.array:
    """softmax(logits / T), restricted to the smallest set of tokens with mass >= top_p."""
    probs = mx.softmax(logits.astype(mx.float32) / temperature, axis=-1, precise=True)
    if top_p >= 1.0:
        return probs
    order = mx.argsort(-probs, axis=-1)
    sorted_probs = mx.take_along_axis(probs, order, axis=-1)
    before = mx.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of the tokens ranked above
    keep_sorted = before < top_p
    keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
    kept = mx.where(keep, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


@dataclass
class Sampler:
    """Draws tokens; ``temperature`` > 0. Keyword ``seed`` makes runs reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    _key: mx.array = field(init=False, repr=False)

    def __post_init__(self):
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        self._key = mx.random.key(self.seed)

    def key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub

    def probs(self, logits: mx.array) -> mx.array:
        return sampling_probs(logits, self.temperature, self.top_p)

    def __call__(self, logits: mx.array) -> mx.array:
        """One token from logits ``(V,)`` (lazy)."""
        return mx.random.categorical(mx.log(self.probs(logits)), key=self.key())

    def accept_and_next(self, logits: mx.array, draft: mx.array, beta) -> mx.array:
        """``[accepted, next_token]`` by biased speculative sampling.

        logits (m + 1, V); draft (m + 1,): the m draft tokens and a padding entry; beta a float or
        one bias per row (m + 1,).
        """
        m = draft.shape[0] - 1
        probs = self.probs(logits)  # (m + 1, V)
        p_draft = mx.take_along_axis(probs, draft[:, None], axis=-1)[:, 0]
        u = mx.random.uniform(shape=(m + 1,), key=self.key())
        accept = u < (1.0 - beta) * p_draft + beta
        accept = mx.logical_and(accept, mx.arange(m + 1) < m)  # the padding row never accepts
        accepted = mx.cumprod(accept.astype(mx.int32)).sum()
        row = mx.take(probs, accepted, axis=0)
        rejected = mx.where(accepted < m, mx.take(draft, accepted).astype(mx.int32), -1)
        residual = mx.where(mx.arange(row.shape[0]) == rejected, 0.0, row)
        next_token = mx.random.categorical(mx.log(residual), key=self.key())
        return mx.stack([accepted, next_token.astype(mx.int32)])
