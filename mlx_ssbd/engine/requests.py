"""The requests an update makes of the runner, and the feeder's answer to a feed (``update``).

Contract: ``Feed``, ``Sync`` and ``Decide`` are what ``update.update_requests`` yields (their
meaning: ``update``'s docstring); ``Fed`` is a feeder's answer to one ``Feed`` (``cache.TokenCache``
and ``batch.BatchCache`` make them). Plain data, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from .verify import DEFAULT_RULE

# The requests and answers below are made a few times per stream per round: slotted, not frozen
# (a frozen dataclass costs about 3x as much to build); none is changed once made, but for the
# rows of a ``Feed.decide``, which the runner fills in.


@dataclass(slots=True)
class Decide:
    """Request: ``verify.decide(rows, draft, beta, sampler, rule)``, evaluated; answered with
    ``(accepted, next_token)`` (accepted 0 without a draft). ``rows`` None: the logits of the
    ``Feed`` that carries it (``Feed.decide``)."""

    rows: mx.array | None
    draft: Sequence[int] = ()
    beta: float = 0.0
    sampler: object = None
    rule: str = DEFAULT_RULE


@dataclass(slots=True)
class Feed:
    """Request: the cache must hold ``ids``; answer the last ``logits`` positions' logits. With
    ``reuse`` False, no cached token is kept: all of ``ids`` is fed again. ``held``: the cache is
    known to hold the first ``held`` ids (the job's previous feed): the feeder compares only the
    rest with what it holds, so a decode step costs the same at any context length. ``ids`` may be
    the job's own list, changed after the answer: a feeder keeps no reference to it. With
    ``decide``, the answer is that decision over the fed logits instead (a decode step: one
    request, one resume of the job, per token)."""

    ids: Sequence[int]
    logits: int
    reuse: bool = True
    marks: tuple[int, ...] = ()  # positions worth a checkpoint where the cache cannot be trimmed
    held: int = 0
    decide: Decide | None = None  # answer with this decision over the fed logits (its rows: those)


@dataclass(slots=True)
class Sync:
    """Request: evaluate ``value``; answered with ``value.tolist()``."""

    value: mx.array


@dataclass(slots=True)
class Fed:
    """A feeder's answer to one ``Feed``."""

    logits: mx.array | None  # the last ``Feed.logits`` positions' logits (lazy); None: in ``batch``
    reused: int  # tokens whose KV came from the cache
    fed: int  # tokens this stream sent through the model in the call
    rebuilt: bool = False  # the cache could not be trimmed and was rebuilt from nothing
    done: bool = True  # False: only a chunk of a long feed went in; the rest comes in the next calls
    calls: int = 1  # model calls it took (more where it left checkpoints, see ``Feed.marks``)
    piece: mx.array | None = None  # done False: the chunk's logits among the last Feed.logits, if any
    # the row ``batch[1]`` of a batched call's logits ``batch[0]`` (B, positions, vocab): the
    # decisions of many rows take one op on that array (``Decide``), so a row's own logits are
    # taken out of it only where they are needed (``rows``)
    batch: tuple[mx.array, int] | None = None

    def rows(self, wanted: int) -> mx.array:
        """The logits of the last ``wanted`` positions fed (the feed's ``logits``)."""
        if self.logits is not None:
            return self.logits
        call, b = self.batch
        return call[b] if wanted == call.shape[1] else call[b, call.shape[1] - wanted :]
