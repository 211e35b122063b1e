"""The biased acceptance rules: how many draft tokens one verify pass accepts, and what comes next.

Contract: ``decide(rows, draft, beta, sampler, rule)`` takes the m + 1 logit rows of a verify
pass (row i predicts draft[i]; row m the token after the draft) and returns ``[accepted,
next_token]`` as a lazy array, so that many streams' decisions share one host sync (``engine.run``).

Every rule accepts draft token y_i from the model's distribution p_i when the gap to the model's
own choice is small enough:

    accept_i  <=>  max(p_i) - p_i[y_i] <= absolute + relative * max(p_i)

with ties going to the draft; d = number of leading accepts; argmax p_d is the next token (the
correction when d < m, a free continuation when d == m). ``RULES`` names the two settings of
(absolute, relative) a bias beta gives; at beta = 0 both accept exactly the tokens greedy decoding
would produce:

* ``mixture`` (Zeng et al., SSBD): y_i is accepted while the biased distribution
  p'_i = (1 - beta) p_i + beta onehot(y_i) has y_i as its argmax, i.e. a gap of at most
  beta / (1 - beta) (beta = 1 accepts everything). The same absolute bound wherever the model is
  sure or unsure: where its top choice has 0.3, a draft token it gives 0.05 still passes.
* ``ratio``: y_i is accepted while p_i[y_i] >= (1 - beta) max(p_i), a gap of at most beta times the
  model's top probability: the bound shrinks where the model spreads its mass.

Neither materialises a mixture: one fused, compiled check and one host sync per pass.
``decide_rows(rows, items)`` makes many greedy decisions at once (the rows of one batched call, or
several streams' passes side by side), with exactly ``decide``'s arithmetic: one softmax over every
item's draft positions together, one argmax over each item's next position, however many there are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx

from .sampling import Sampler

RULES = ("mixture", "ratio")
DEFAULT_RULE = "mixture"


def accept_threshold(beta: float) -> float:
    """beta / (1 - beta): the largest gap max(p) - p[y] that still accepts y (``mixture``)."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    return math.inf if beta >= 1.0 else beta / (1.0 - beta)


def bounds(rule: str, beta: float) -> tuple[float, float]:
    """``(absolute, relative)`` of ``rule`` at ``beta``: y is accepted while the gap
    max(p) - p[y] is at most absolute + relative * max(p) (module docstring)."""
    if rule == "mixture":
        return accept_threshold(beta), 0.0
    if rule == "ratio":
        accept_threshold(beta)  # validates the range
        return 0.0, beta
    raise ValueError(f"unknown accept rule {rule!r}; known: {', '.join(RULES)}")


def accept_mask(probs: mx.array, draft: mx.array, threshold, relative=0.0) -> mx.array:
    """Per-position accept decisions: probs (m, V), draft (m,), threshold and relative scalars
    or (m,) -> (m,): accept where max(p) - p[y] <= threshold + relative * max(p)."""
    p_draft = mx.take_along_axis(probs, draft[:, None], axis=-1)[:, 0]  # (m,)
    p_max = probs.max(axis=-1)
    return (p_max - p_draft) <= threshold + relative * p_max


def _accept_and_next(logits: mx.array, draft: mx.array, thresholds: mx.array, relative: mx.array) -> mx.array:
    # logits (m + 1, V): row i predicts draft[i]; row m predicts the token after the draft.
    # draft, thresholds and relative (m + 1,) carry a padding entry for row m (threshold -1,
    # relative 0), which never accepts (gaps are >= 0); this keeps every shape input-derived for
    # shapeless compilation.
    probs = mx.softmax(logits.astype(mx.float32), axis=-1, precise=True)  # (m + 1, V)
    accepted = mx.cumprod(accept_mask(probs, draft, thresholds, relative).astype(mx.int32)).sum()
    next_token = mx.argmax(mx.take(logits, accepted, axis=0), axis=-1)
    return mx.stack([accepted, next_token.astype(mx.int32)])


_compiled: dict[int, object] = {}


def accept_and_next(
    logits: mx.array, draft: mx.array, thresholds: mx.array, relative: mx.array | None = None
) -> mx.array:
    """Compiled ``[accepted, next_token]``; see ``_accept_and_next`` for the arguments
    (``relative`` None: zeros, the ``mixture`` rule).

    One shapeless compilation per vocabulary size: shapeless tracing follows the draft length
    but silently reuses the first vocabulary size it saw (wrong tokens for a second model). MLX
    caches traces by the Python function, so each size gets its own function object (kept alive
    here, so its identity is never reused).
    """
    vocab = logits.shape[-1]
    if vocab not in _compiled:

        def accept_for_this_vocab(logits, draft, thresholds, relative):
            return _accept_and_next(logits, draft, thresholds, relative)

        _compiled[vocab] = mx.compile(accept_for_this_vocab, shapeless=True)
    if relative is None:
        relative = mx.zeros_like(thresholds)
    return _compiled[vocab](logits, draft, thresholds, relative)


def decide(
    rows: mx.array,
    draft: Sequence[int],
    beta: float,
    sampler: Sampler | None = None,
    rule: str = DEFAULT_RULE,
) -> mx.array:
    """``[accepted, next_token]`` (lazy) from the m + 1 logit rows of a verify pass.

    Greedy: ``rule`` at ``beta``, fused and compiled; with a sampler: biased speculative sampling
    (the ``mixture`` rule only).
    """
    if not draft:
        next_token = mx.argmax(rows[-1]) if sampler is None else sampler(rows[-1])
        return mx.stack([mx.array(0, dtype=mx.int32), next_token.astype(mx.int32)])
    padded = mx.array([*draft, 0], dtype=mx.uint32)
    if sampler is not None:
        if rule != "mixture":
            raise ValueError(f"sampling verifies drafts with the mixture rule only, not {rule!r}")
        return sampler.accept_and_next(rows, padded, beta)
    absolute, relative = bounds(rule, beta)
    # the row after the draft has threshold -1: it never accepts, so d counts draft tokens only
    thresholds = mx.array([absolute] * len(draft) + [-1.0], dtype=mx.float32)
    scales = mx.array([relative] * len(draft) + [0.0], dtype=mx.float32)
    return accept_and_next(rows, padded, thresholds, scales)


def decide_rows(rows: mx.array, items: Sequence[tuple[int, Sequence[int], float, str]]) -> mx.array:
    """``(len(items), 2)`` int32 ``[accepted, next_token]`` (lazy), greedy, for many decisions at
    once: ``rows`` (N, V) holds the logit rows of many verify passes and decode steps (a batched
    call's, flattened, or several passes' side by side); item ``(first, draft, beta, rule)`` is
    ``decide(rows[first : first + m + 1], draft, beta, rule=rule)`` with m = len(draft) (no draft:
    the argmax of row ``first``). The draft positions of all items share one softmax; the leading
    accepts of each are counted from a running count of rejections (the positions before an item's
    first rejection are those where the count still equals its value at the item's start)."""
    checks, ids, absolute, relative, edges = [], [], [], [], [0]  # item i's checks: edges[i]:edges[i + 1]
    firsts = []  # per item: the index of its first row (the row that predicts draft[0])
    for first, draft, beta, rule in items:
        firsts.append(first)
        if draft:
            a, r = bounds(rule, beta)
            checks += range(first, first + len(draft))
            ids += draft
            absolute += [a] * len(draft)
            relative += [r] * len(draft)
        edges.append(len(checks))
    if not checks:  # decode steps only: each one's row's argmax
        picked = rows if firsts == list(range(rows.shape[0])) else rows[mx.array(firsts, dtype=mx.int32)]
        next_token = mx.argmax(picked, axis=-1).astype(mx.int32)
        return mx.stack([mx.zeros_like(next_token), next_token], axis=1)
    firsts = mx.array(firsts, dtype=mx.int32)
    probs = mx.softmax(rows[mx.array(checks)].astype(mx.float32), axis=-1, precise=True)
    ok = accept_mask(probs, mx.array(ids, dtype=mx.uint32), mx.array(absolute), mx.array(relative))
    rejected = mx.cumsum((~ok).astype(mx.int32))  # rejections up to and including each check
    before = mx.concatenate([mx.zeros(1, dtype=mx.int32), rejected])  # ... before each check
    start, end = mx.array(edges[:-1]), mx.array(edges[1:])
    item_of = mx.array([i for i in range(len(items)) for _ in range(edges[i], edges[i + 1])])
    leading = (rejected == before[start][item_of]).astype(mx.int32)
    counted = mx.concatenate([mx.zeros(1, dtype=mx.int32), mx.cumsum(leading)])
    accepted = counted[end] - counted[start]
    next_token = mx.argmax(rows[firsts + accepted], axis=-1).astype(mx.int32)
    return mx.stack([accepted, next_token], axis=1)
