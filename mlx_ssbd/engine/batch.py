"""One persistent KV cache for many streams: a row each, kept across updates and decode steps.

Contract: ``BatchCache(model)`` holds the streams that are running in one left-padded batch KV
cache (``kv_layout.PaddedKV``: mlx-lm's ``BatchKVCache`` per layer, every row ending at the same
index), and the KV of the others aside.
``join(cache)`` moves a stream's own ``TokenCache`` in and returns its ``BatchRow``; ``leave(row,
into=cache)`` moves it back out (keys, values and ids). ``feed`` (the ``engine`` feeder interface)
serves any subset of rows in one model call (or a few, on a CPU: below). A row stays in the batch
from call to call and from update to update while it has work; a row without a request in a call is
set aside (*parked*: its keys and values taken out of the batch) so that it costs the running rows
nothing, and comes back in with its next request. Rows parked in one call are set aside together
(``Aside``: one copy per layer for all of them) and come back as a block when they return
together (as streams whose updates end in one round do at their next ones). A ``BatchRow``
records exactly the ids its row holds (``tokens``). ``trace``, when set, is told the shape of
every batched model call (``CallShape``: rows, width, context, logits), for measurements that cost
the same model work again alone.

How one call lines rows up: row b must end up holding ``Feed.ids``; it keeps the longest cached
prefix (at most ``len(ids) - Feed.logits``) and feeds the rest, F_b tokens. All rows feed the same
width W = max F_b, so a row with fewer new tokens re-feeds the last of its kept ones (or, when it
keeps nothing, is left padded in the input). Dropping a row's diverged tail is a right-shift of
that row alone under a larger left padding; leading columns that every row pads are cut off, so the
cache does not grow with the padding (``PaddedKV.drop_tails``).

What each row feeds in a call, which rows sit a call out and which rows share a call is the
round's *plan*, made by a ``planner.Planner`` (chunks of a long prompt or verify pass, heavy rows
resting, rows of very different widths in separate calls on a CPU): ``BatchCache(model, ...)``
takes its settings. A row fed only a chunk gets ``Fed.done`` False until its last chunk (a verify
chunk's logits come back as ``Fed.piece``); a resting row gets ``fed=0, done=False``, so the same
request comes back.

Only full ``KVCache`` layers can be batched. A stream whose cache holds other layers (a hybrid
model's recurrent states, a sliding window) joins as a *solo* row: it keeps its own ``TokenCache``
(checkpoints and all) and is fed in a model call of its own in the same round, ``chunk`` tokens at
most, so every model runs in a batch with the same outputs as alone, hybrids at one call per stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .cache import TokenCache, held_prefix, input_ids, is_lazy, model_logits, resolved
from .kv_layout import PaddedKV
from .planner import PREFILL_CHUNK, Planner, Request, chunk_for
from .requests import Fed


@dataclass(frozen=True)
class CallShape:
    """One batched model call as the model sees it (``BatchCache.trace``): enough to cost the same
    model work again alone (``benchmarks/engine/capacity.py``)."""

    rows: int  # rows in the call
    width: int  # tokens each row feeds (the widest row's new tokens; the others refeed or pad)
    context: int  # cached positions every row attends over before the call (left padding included)
    logits: int  # positions whose logits the call returns per row
    new: int  # tokens the rows asked to take in; rows x width less this is refeeds and padding


class BatchRow:
    """One stream's row: the ids it holds, and the ``feeder`` that serves it (its ``BatchCache``;
    a ``TokenCache`` is its own feeder)."""

    def __init__(self, cache: TokenCache, feeder: BatchCache):
        self.feeder = feeder
        self.tokens = list(cache.tokens)
        # out of the batch: its own layers, or the rows set aside with it (None: in the batch)
        self.parked: list[KVCache] | Aside | None = cache.layers


class Aside:
    """Rows parked together: their keys and values in one layout, copied out of the batch in one
    gather per layer (every row of the batch: its layout as it is); they come back as a block
    (``PaddedKV.concat``; alone: as it is), or those that return without the others are copied
    out again. Holds at most twice the keys of the rows still in it. On a CPU, where a round's rows
    of very different widths go in separate calls, each call's rows so go aside and come back
    without a copy."""

    def __init__(self, kv: PaddedKV, rows: list[BatchRow]):
        self.kv, self.rows = kv, list(rows)  # a row that has left is None in ``rows``

    def back(self, rows: list[BatchRow]) -> tuple[PaddedKV, list[BatchRow]]:
        """The layout of ``rows`` (some of these, which leave it), and the rows in its order."""
        if len(rows) == len(self.rows) and None not in self.rows:  # all of them: as they are
            return self.kv, self.rows
        part = self.kv.take([self.rows.index(row) for row in rows])
        self._drop(rows)
        return part, rows

    def extract(self, row: BatchRow) -> list[KVCache]:
        """``row``'s own layers, copied out; it leaves."""
        layers = self.kv.extract(self.rows.index(row))
        self._drop([row])
        return layers

    def _drop(self, rows: list[BatchRow]) -> None:
        gone = {id(row) for row in rows}
        self.rows = [None if row is None or id(row) in gone else row for row in self.rows]
        still = [i for i, row in enumerate(self.rows) if row is not None]
        if still and 2 * len(still) <= len(self.rows):  # at most half of it still here: copied out smaller
            self.kv, self.rows = self.kv.take(still), [self.rows[i] for i in still]
        elif not still:
            self.kv, self.rows = None, []


class SoloRow:
    """A stream whose cache cannot be batched: its own ``TokenCache``, fed on its own."""

    def __init__(self, cache: TokenCache, feeder: BatchCache):
        self.feeder = feeder
        self.cache = cache


class BatchCache:
    """See the module docstring."""

    def __init__(self, model, chunk: int | None = PREFILL_CHUNK, **planning):
        """``chunk`` and ``planning``: the settings of the round's ``planner.Planner``."""
        self.model = model
        self.planner = Planner(chunk, **planning)
        self._members: list[BatchRow | SoloRow] = []  # every row, in the batch or parked, and solo
        self._solo = 0  # how many of them are solo rows
        self.rows: list[BatchRow] = []  # the rows in the batch, in batch order
        self.kv: PaddedKV | None = None  # the running rows' keys and values (None: no row runs)
        self.trace: Callable[[CallShape], None] | None = None  # told each batched call's shape

    # -- streams joining and leaving ---------------------------------------------------------

    def join(self, cache: TokenCache) -> BatchRow | SoloRow:
        """Take over ``cache``'s keys and values as a new (parked) row; ``cache`` is left empty.
        A cache with layers other than ``KVCache`` becomes a ``SoloRow`` (module docstring)."""
        if not all(type(layer) is KVCache for layer in cache.layers):
            row = SoloRow(cache, self)
            self._solo += 1
        else:
            row = BatchRow(cache, self)  # holds the layers, parked
            cache.clear()
        self._members.append(row)
        return row

    def leave(self, row: BatchRow | SoloRow, into: TokenCache) -> None:
        """Move ``row`` out into ``into`` (its keys, values and ids)."""
        if isinstance(row, SoloRow):
            if into is not row.cache:
                into.layers, into.tokens, into.checkpoints = (
                    row.cache.layers,
                    row.cache.tokens,
                    row.cache.checkpoints,
                )
            self._members.remove(row)
            self._solo -= 1
            return
        if row.parked is None:
            self._park([row])
        layers = row.parked.extract(row) if isinstance(row.parked, Aside) else row.parked
        into.layers, into.tokens = layers, list(resolved(row.tokens))
        row.parked = layers
        self._members.remove(row)

    def _park(self, rows: list[BatchRow]) -> None:
        """Take ``rows`` out of the batch together (``Aside``), keeping their keys and values."""
        if len(rows) == len(self.rows):  # every row: the layout itself goes aside, as it is
            aside, rows = Aside(self.kv, self.rows), self.rows
        else:
            index = {id(row): b for b, row in enumerate(self.rows)}
            aside = Aside(self.kv.take([index[id(row)] for row in rows]), rows)
        for row in rows:
            row.parked = aside
        keep = [i for i, row in enumerate(self.rows) if row.parked is None]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.kv = None
            return
        self.kv.keep(keep)

    def _unpark(self, rows: list[BatchRow]) -> None:
        """Bring parked ``rows`` back into the batch: those parked together as a block, those
        that joined on their own merged, all in one ``PaddedKV.concat``."""
        alone = [row for row in rows if not isinstance(row.parked, Aside)]
        parts, order = ([PaddedKV.merge([row.parked for row in alone])], alone) if alone else ([], [])
        asides = {}
        for row in rows:
            if isinstance(row.parked, Aside):
                asides.setdefault(id(row.parked), (row.parked, []))[1].append(row)
        for aside, back in asides.values():
            part, back = aside.back(back)
            parts.append(part)
            order += back
        self.kv = PaddedKV.concat(([self.kv] if self.kv is not None else []) + parts)
        for row in order:
            row.parked = None
        self.rows += order

    # -- the engine's feeder interface ----------------------------------------------------------

    def feed(self, feeds) -> list[Fed]:
        """One model call for ``[(row, Feed)]`` (and one per solo row); returns a ``Fed`` per feed."""
        named = {id(row) for row, _ in feeds}
        if len(named) != len(feeds) or not named <= {id(row) for row in self._members}:
            raise ValueError("each feed must name a distinct row of this batch")
        batched, cached, requests, solo = {}, {}, [], []
        for row, feed in feeds:
            held = cached[id(row)] = self._cached(row, feed)  # valid till the row is fed
            if isinstance(row, BatchRow):
                batched[id(row)] = feed
                requests.append(Request(row, len(feed.ids), len(feed.ids) - held, feed.reuse))
            else:
                solo.append((row, feed))
        plan = self.planner.plan(requests, members=len(self._members) - self._solo)
        answers = {}
        for rows, limit in plan.calls:
            fed = self._feed_batch([(row, batched[id(row)]) for row in rows], limit, cached)
            answers.update(zip(map(id, rows), fed))
        for row in plan.resting:  # nothing fed: the same request comes back next call
            kept = self._plan(batched[id(row)], cached[id(row)], None)[0]
            answers[id(row)] = Fed(mx.zeros((1, 1)), kept, 0, done=False, calls=0)
        for row, feed in solo:  # a call of its own: only ``chunk`` bounds it
            chunk = chunk_for(len(feed.ids) - cached[id(row)], self.planner.chunk)
            answers[id(row)] = row.cache.feed([(row.cache, feed)], chunk=chunk)[0]
        return [answers[id(row)] for row, _ in feeds]

    @staticmethod
    def _cached(row, feed) -> int:
        """How many leading ``feed.ids`` ``row``'s cache holds (0 when the feed may not reuse it)."""
        if not feed.reuse:
            return 0
        return held_prefix(row.tokens if isinstance(row, BatchRow) else row.cache.tokens, feed.ids, feed.held)

    def _feed_batch(self, feeds, limit: int | None, cached: dict[int, int]) -> list[Fed]:
        """One model call for the batched rows' ``[(row, Feed)]``; ``cached``: by ``id(row)``, how
        many leading ids of its feed its cache holds (``_cached``)."""
        wanted = {id(row): feed for row, feed in feeds}
        idle = [row for row in self.rows if id(row) not in wanted]
        if idle:
            self._park(idle)
        back = [row for row, _ in feeds if row.parked is not None]
        if back:
            self._unpark(back)
        plans = [self._plan(wanted[id(row)], cached[id(row)], limit) for row in self.rows]
        width = max(len(new) for _, new, _ in plans)
        asked = sum(len(new) for _, new, _ in plans)
        inputs, drops, pads, kept = [], [], [], []
        for row, (keep, new, source) in zip(self.rows, plans):
            refeed = min(keep, width - len(new))
            if refeed:
                keep -= refeed
                new = [*source[keep : keep + refeed], *new]
            pads.append(width - len(new))
            drops.append(len(row.tokens) - keep)
            kept.append(keep)
            inputs.append(new)
            row.tokens[keep:] = new
        self.kv.drop_tails(drops)
        self.kv.prepare(pads)
        # rows done (holding all of their feed's ids), and for the others (a chunk of a long
        # verify pass) their logits among those their feed asks for
        piece = {}
        for row, feed in feeds:
            if len(row.tokens) < len(feed.ids):
                piece[id(row)] = max(0, len(row.tokens) - (len(feed.ids) - feed.logits))
        last = max([feed.logits for row, feed in feeds if id(row) not in piece] + [*piece.values(), 1])
        if self.trace is not None:
            self.trace(CallShape(len(self.rows), width, self.kv.end, last, asked))
        logits = model_logits(self.model, batch_input(inputs, pads), self.kv.layers, last)
        self.kv.advance(width)
        index = {id(row): b for b, row in enumerate(self.rows)}
        answers = []
        for row, _ in feeds:
            b = index[id(row)]
            if id(row) not in piece:  # its logits: its row's last ones in the call's (``Fed.rows``)
                answers.append(Fed(None, kept[b], width - pads[b], batch=(logits, b)))
            else:  # a chunk of a long feed: the last logits keep the call's work evaluated
                part = logits[b, last - piece[id(row)] :] if piece[id(row)] else None
                answers.append(Fed(logits[b, -1:], kept[b], width - pads[b], done=False, piece=part))
        return answers

    @staticmethod
    def _plan(feed, cached: int, limit: int | None) -> tuple[int, Sequence, Sequence]:
        """(tokens kept, tokens to feed this call, the sequence they come from) for one row whose
        cache holds ``cached`` leading ids of ``feed``: at most the call's chunk of new tokens."""
        ids = feed.ids
        keep = min(cached, max(0, len(ids) - feed.logits))
        new = len(ids) - keep
        limit = chunk_for(new, limit)
        if limit is not None and new > limit:
            new = limit
        return keep, ids[keep : keep + new], ids


def batch_input(rows: list[Sequence], pads: list[int]) -> mx.array:
    """``(B, W)`` uint32 model input: row b is ``pads[b]`` zeros, then ``rows[b]``; one array made
    from the host's ids, unless a row ends in a lazy token (``cache.input_ids``)."""
    if any(is_lazy(ids) for ids in rows):
        return mx.stack([input_ids(ids, pad=pad) for ids, pad in zip(rows, pads)])
    return mx.array([[0] * pad + [int(t) for t in ids] for ids, pad in zip(rows, pads)], dtype=mx.uint32)
