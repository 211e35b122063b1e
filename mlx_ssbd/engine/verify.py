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

Neither materialises a mixture, nor a softmax: p_max and p[y] come from each row's largest logit
and softmax's normaliser (``platform.logit_stats``), one host sync per pass. Greedy decisions are
all made by ``decide_rows(rows, items)``, many at once (the rows of one batched call, or several
streams' passes side by side; ``decide`` is one item of it): each row's statistics are read in one
operation for every item, however many there are.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import mlx.core as mx

from ..platform.logit_stats import logit_stats
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


def within_bound(p_max, p_draft, absolute, relative=0.0):
    """The rule's test: max(p) - p[y] <= absolute + relative * max(p) (arrays or scalars)."""
    return (p_max - p_draft) <= absolute + relative * p_max


def accept_mask(probs: mx.array, draft: mx.array, threshold, relative=0.0) -> mx.array:
    """Per-position accept decisions from probabilities: probs (m, V), draft (m,), threshold and
    relative scalars or (m,) -> (m,) (``within_bound``)."""
    p_draft = mx.take_along_axis(probs, draft[:, None], axis=-1)[:, 0]  # (m,)
    return within_bound(probs.max(axis=-1), p_draft, threshold, relative)


def decide(
    rows: mx.array,
    draft: Sequence[int],
    beta: float,
    sampler: Sampler | None = None,
    rule: str = DEFAULT_RULE,
) -> mx.array:
    """``[accepted, next_token]`` (lazy) from the m + 1 logit rows of a verify pass (m = len(draft);
    without a draft, the last row's next token).

    Greedy: ``rule`` at ``beta`` (``decide_rows``); with a sampler: biased speculative sampling
    (the ``mixture`` rule only).
    """
    if sampler is None:
        return decide_rows(rows, [(rows.shape[0] - len(draft) - 1, draft, beta, rule)])[0]
    if not draft:
        return mx.stack([mx.array(0, dtype=mx.int32), sampler(rows[-1]).astype(mx.int32)])
    if rule != "mixture":
        raise ValueError(f"sampling verifies drafts with the mixture rule only, not {rule!r}")
    return sampler.accept_and_next(rows, mx.array([*draft, 0], dtype=mx.uint32), beta)


def decide_rows(rows: mx.array, items: Sequence[tuple[int, Sequence[int], float, str]]) -> mx.array:
    """``(len(items), 2)`` int32 ``[accepted, next_token]`` (lazy), greedy, for many decisions at
    once: ``rows`` (N, V) holds the logit rows of many verify passes and decode steps (a batched
    call's, flattened, or several passes' side by side); item ``(first, draft, beta, rule)`` is
    decided from ``rows[first : first + m + 1]`` with m = len(draft) (no draft: the greedy token
    of row ``first``).

    The rows of every item are read once together (``platform.logit_stats``: each row's largest
    logit, its first index and, when some item has a draft, softmax's normaliser), so p_max
    and p[y] come from the logits without a softmax over the vocabulary. A draft token with the
    row's largest logit is always accepted (so at beta = 0 exactly the greedy tokens are); another
    is accepted when the rule's bound is positive and holds (``within_bound``). The leading
    accepts of each item are counted from a running count of rejections (the rows before an
    item's first rejection are those where the count still equals its value at the item's start;
    the row after each draft never accepts)."""
    picked, starts = [], []  # the rows read, item after item; where each item's begin in ``picked``
    tokens, absolute, relative, checked, item_of = [], [], [], [], []  # per picked row
    for i, (first, draft, beta, rule) in enumerate(items):
        starts.append(len(picked))
        item_of += [i] * (len(draft) + 1)
        picked += range(first, first + len(draft) + 1)
        a, r = bounds(rule, beta) if draft else (0.0, 0.0)
        tokens += [*draft, 0]
        absolute += [a] * len(draft) + [0.0]
        relative += [r] * len(draft) + [0.0]
        checked += [True] * len(draft) + [False]
    any_draft = len(picked) > len(items)
    largest, total, best = logit_stats(rows, mx.array(picked, dtype=mx.int32), sums=any_draft)
    start = mx.array(starts, dtype=mx.int32)
    if not any_draft:  # decode steps only: each one's greedy token
        return mx.stack([mx.zeros(len(items), dtype=mx.int32), best.astype(mx.int32)], axis=1)
    vocab = rows.shape[-1]
    at = mx.array([row * vocab + token for row, token in zip(picked, tokens)], dtype=mx.uint32)
    last = mx.array([*starts[1:], len(picked)], dtype=mx.int32) - 1
    return _counted(
        largest,
        total,
        best,
        mx.take(rows.reshape(-1), at).astype(mx.float32),
        mx.array(absolute, dtype=mx.float32),
        mx.array(relative, dtype=mx.float32),
        mx.array(checked),
        start,
        last,
        mx.array(item_of),
    )


@functools.partial(mx.compile, shapeless=True)
def _counted(largest, total, best, logit, absolute, relative, checked, start, last, item_of):
    """``decide_rows``'s ``[accepted, next_token]`` per item from its rows' statistics (one
    compiled graph for every number of rows and items): row j's draft token, of logit
    ``logit[j]``, is accepted where ``checked[j]`` and it holds the largest logit or the rule's
    positive bound holds; item i's rows run from ``start[i]`` to ``last[i]``."""
    p_max = 1.0 / total
    bound = absolute + relative * p_max
    biased = within_bound(p_max, mx.exp(logit - largest) * p_max, bound) & (bound > 0)
    rejects = (~(checked & ((logit >= largest) | biased))).astype(mx.int32)
    rejected = mx.cumsum(rejects)  # rejections up to and including each row
    before = rejected - rejects  # ... before each row
    leading = (rejected == before[start][item_of]).astype(mx.int32)  # no rejection yet in its item
    counted = mx.cumsum(leading)
    accepted = counted[last] - (counted - leading)[start]
    return mx.stack([accepted, best[start + accepted].astype(mx.int32)], axis=1)
