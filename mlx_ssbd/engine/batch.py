"""One persistent KV cache for many streams: a row each, kept across updates and decode steps.

Contract: ``BatchCache(model)`` holds one mlx-lm ``BatchKVCache`` per layer (left padded, every row
ending at the same index) for the streams that are running, and the KV of the others aside.
``join(cache)`` moves a stream's own ``TokenCache`` in and returns its ``BatchRow``; ``leave(row,
into=cache)`` moves it back out (keys, values and ids). ``feed`` (the ``engine`` feeder interface)
serves any subset of rows in one model call (or a few, on a CPU: below). A row stays in the batch
from call to call and from update to update while it has work; a row without a request in a call is
set aside (*parked*: its keys and values taken out of the batch) so that it costs the running rows
nothing, and comes back in (one ``extend``) with its next request. A ``BatchRow`` records exactly
the ids its row holds (``tokens``). ``trace``, when set, is told the shape of every batched model
call (``CallShape``: rows, width, context, logits), for measurements that cost the same model work
again alone.

How one call lines rows up: row b must end up holding ``Feed.ids``; it keeps the longest cached
prefix (at most ``len(ids) - Feed.logits``) and feeds the rest, F_b tokens. All rows feed the same
width W = max F_b, so a row with fewer new tokens re-feeds the last of its kept ones (or, when it
keeps nothing, is left padded in the input). Dropping a row's diverged tail is a right-shift of
that row alone (``dynamic_roll``) under a larger left padding; leading columns that every row pads
are cut off, so the cache does not grow with the padding.

With ``chunk``, no row feeds more than ``chunk`` tokens in one call: a long prompt or a long
verify pass is fed a chunk per call, its ``Fed`` saying ``done=False`` until the last (a verify
chunk's logits come back as ``Fed.piece``), so the call's width (its memory) stays bounded. Rows
share the call's width, and a row beside a long context attends over its padded length, so a long
feed costs the others dearly on a CPU (``benchmarks/service/attacks.py``). Hence, while more than
one stream is in the batch, a call is at most ``shared_chunk`` tokens wide (32; a feed of at most
that is *short* and goes whole), and in a call where another stream has a short feed (a decode
step, a caption's verify pass) a long feed takes only as many tokens as the widest short feed, at
least ``side_chunk`` (2): a decode step beside a long context then costs about twice what it costs
alone, not seven times. A stream alone in the batch goes ``chunk`` tokens at a time. And a *heavy*
row (its sequence at least ``heavy`` tokens, 512, and 4x the shortest in the call) joins only
one call in three beside lighter ones, sitting the others out parked (its ``Fed`` says ``fed=0,
done=False``, so the same request comes back), so that it slows their steps a third as often.

On a CPU a call costs in proportion to rows x width, padding included, plus a fixed part worth
a few tokens (``platform.backend.call_tokens``, 4): three decode steps padded to the width of a
fourth stream's 30-token verify pass cost some 120 tokens' worth where they cost 7 and the pass
34 in calls of their own. So where ``call_tokens`` is set, the rows of a ``feed`` are split into
the calls that cost least in all (rows by width, each call ``call_tokens`` plus rows x its
widest); rows of about one width share a call. On a GPU (None) every ``feed`` is one call.

Only full ``KVCache`` layers can be batched. A stream whose cache holds other layers (a hybrid
model's recurrent states, a sliding window) joins as a *solo* row: it keeps its own ``TokenCache``
(checkpoints and all) and is fed in a model call of its own in the same round, ``chunk`` tokens at
most, so every model runs in a batch with the same outputs as alone, hybrids at one call per stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache, dynamic_roll

from ..platform import backend
from .cache import TokenCache, common_prefix_len, input_ids, is_lazy, model_logits, resolved
from .update import Fed

PREFILL_CHUNK = 128  # prompt tokens a row feeds per call at most (the 1.5B: a few seconds on 2 CPU cores)
SHARED_CHUNK = 32  # ... while other streams share the batch (a feed of at most this is short)
SIDE_CHUNK = 2  # ... at least, in a call where another stream has a short feed
HEAVY = 512  # a row this long, and HEAVY_RATIO times the shortest beside it, joins one call in HEAVY_EVERY
HEAVY_RATIO = 4.0
HEAVY_EVERY = 3


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
        self.parked: list[KVCache] | None = cache.layers  # its layers while out of the batch
        self.rests = 0  # calls it sat out in a row (a heavy row joins one call in ``heavy_every``)


class SoloRow:
    """A stream whose cache cannot be batched: its own ``TokenCache``, fed on its own."""

    def __init__(self, cache: TokenCache, feeder: BatchCache):
        self.feeder = feeder
        self.cache = cache


class BatchCache:
    """See the module docstring."""

    def __init__(
        self,
        model,
        chunk: int | None = PREFILL_CHUNK,
        side_chunk: int = SIDE_CHUNK,
        shared_chunk: int = SHARED_CHUNK,
        heavy: int = HEAVY,
        heavy_ratio: float = HEAVY_RATIO,
        heavy_every: int = HEAVY_EVERY,
        call_tokens: int | None | str = "auto",
    ):
        if chunk is not None and chunk < 1 or min(side_chunk, shared_chunk, heavy_every) < 1:
            raise ValueError(
                "chunk, side_chunk, shared_chunk and heavy_every must be at least 1 (chunk may be "
                f"None), got {chunk}, {side_chunk}, {shared_chunk}, {heavy_every}"
            )
        self.model = model
        self.chunk = chunk
        self.shared_chunk = shared_chunk if chunk is None else min(shared_chunk, chunk)
        self.side_chunk = min(side_chunk, self.shared_chunk)
        self.heavy, self.heavy_ratio, self.heavy_every = heavy, heavy_ratio, heavy_every
        self.call_tokens = backend.call_tokens() if call_tokens == "auto" else call_tokens
        self._members: list[BatchRow] = []  # every row, in the batch or parked
        self.rows: list[BatchRow] = []  # the rows in the batch, in batch order
        self.layers: list[BatchKVCache] | None = None
        self._padding: list[int] = []  # left padding per row (mirrors every layer's)
        self._end = 0  # the common end index of every row (every layer's ``_idx``)
        self.trace: Callable[[CallShape], None] | None = None  # told each batched call's shape

    # -- streams joining and leaving ---------------------------------------------------------

    def join(self, cache: TokenCache) -> BatchRow | SoloRow:
        """Take over ``cache``'s keys and values as a new (parked) row; ``cache`` is left empty.
        A cache with layers other than ``KVCache`` becomes a ``SoloRow`` (module docstring)."""
        if not all(type(layer) is KVCache for layer in cache.layers):
            row = SoloRow(cache, self)
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
            return
        if row.parked is None:
            self._park([row])
        into.layers, into.tokens = row.parked, list(resolved(row.tokens))
        self._members.remove(row)

    def _park(self, rows: list[BatchRow]) -> None:
        """Take ``rows`` out of the batch, keeping their keys and values aside."""
        for row in rows:
            index = self.rows.index(row)
            row.parked = [layer.extract(index) for layer in self.layers]
        keep = [i for i, row in enumerate(self.rows) if row.parked is None]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.layers, self._padding, self._end = None, [], 0
            return
        for layer in self.layers:
            layer.filter(mx.array(keep))  # also cuts the padding every remaining row has
        self._read_layout()

    def _unpark(self, rows: list[BatchRow]) -> None:
        """Bring parked ``rows`` back into the batch (one ``extend`` per layer)."""
        incoming = [BatchKVCache.merge([row.parked[i] for row in rows]) for i in range(len(rows[0].parked))]
        if self.layers is None:
            self.layers = incoming
        else:
            for layer, other in zip(self.layers, incoming):
                layer.extend(other)
        for row in rows:
            row.parked = None
        self.rows += rows
        self._read_layout()

    def _read_layout(self) -> None:
        """Mirror the layers' padding and end after mlx-lm changed them (one small host sync)."""
        layer = self.layers[0]
        self._padding = [int(p) for p in layer.left_padding.tolist()]
        self._end = layer._idx

    # -- the engine's feeder interface ----------------------------------------------------------

    def feed(self, feeds) -> list[Fed]:
        """One model call for ``[(row, Feed)]`` (and one per solo row); returns a ``Fed`` per feed."""
        if len({id(row) for row, _ in feeds}) != len(feeds) or any(
            row not in self._members for row, _ in feeds
        ):
            raise ValueError("each feed must name a distinct row of this batch")
        batched = [(row, feed) for row, feed in feeds if isinstance(row, BatchRow)]
        resting = self._resting(batched)
        running = [(row, feed) for row, feed in batched if id(row) not in resting]
        answers = {}
        for group in self._groups(running):
            answers.update(
                zip((id(row) for row, _ in group), self._feed_batch(group, self._call_chunk(group)))
            )
        for row, feed in batched:
            if id(row) in resting:  # nothing fed: the same request comes back next call
                answers[id(row)] = Fed(
                    mx.zeros((1, 1)), self._plan(row, feed, None)[0], 0, done=False, calls=0
                )
        for row, feed in feeds:
            if isinstance(row, SoloRow):  # a call of its own: only ``chunk`` bounds it
                chunk = self._row_chunk(self._new(row, feed), self.chunk)
                answers[id(row)] = row.cache.feed([(row.cache, feed)], chunk=chunk)[0]
        return [answers[id(row)] for row, _ in feeds]

    def _resting(self, feeds) -> set[int]:
        """The rows that sit this call out: a *heavy* row (its sequence at least ``heavy`` tokens
        and ``heavy_ratio`` times the shortest in the call) joins one call in ``heavy_every``: its
        padded length makes a lighter row's step cost 2-3x what it costs alone, so it gets about
        its share of the model's time, and the lighter rows' steps stay near their own cost."""
        if len(feeds) < 2:
            return set()
        lengths = {id(row): len(feed.ids) for row, feed in feeds}
        shortest = min(lengths.values())
        resting = set()
        for row, feed in feeds:  # (a feed that rebuilds from nothing never rests: it must go as asked)
            length = lengths[id(row)]
            if feed.reuse and length > shortest and length >= max(self.heavy, self.heavy_ratio * shortest):
                row.rests = (row.rests + 1) % self.heavy_every
                if row.rests:
                    resting.add(id(row))
        return resting

    def _groups(self, feeds) -> list[list]:
        """The model calls that serve ``feeds``: one, unless ``call_tokens`` says a call's fixed
        cost is small next to the padding it would take (a CPU). Then the rows, by the tokens
        each feeds (within ``shared_chunk``), are split into the calls that cost least in all,
        each call costing ``call_tokens`` plus its rows x its widest row's tokens: a decode step
        is not padded to the width of another stream's verify pass."""
        if self.call_tokens is None or len(feeds) < 2:
            return [feeds] if feeds else []
        bound = self.shared_chunk if self.chunk is not None else None
        new = [self._new(row, feed) for row, feed in feeds]
        sized = sorted(
            ((max(1, n if bound is None else min(n, bound)), i) for i, n in enumerate(new)),
            key=lambda x: x[0],
        )
        order = [feeds[i] for _, i in sized]
        widths = [w for w, _ in sized]
        best, cut = [0] + [None] * len(order), [0] * (len(order) + 1)
        for end in range(1, len(order) + 1):
            for start in range(end):
                cost = best[start] + self.call_tokens + (end - start) * widths[end - 1]
                if best[end] is None or cost < best[end]:
                    best[end], cut[end] = cost, start
        groups, end = [], len(order)
        while end:
            groups.append(order[cut[end] : end])
            end = cut[end]
        return groups

    def _call_chunk(self, feeds) -> int | None:
        """The most any row feeds in this call (the module docstring says why)."""
        if self.chunk is None:
            return None
        new = [self._new(row, feed) for row, feed in feeds]
        short = [n for n in new if n <= self.shared_chunk]
        if short and len(short) < len(new):
            return max(self.side_chunk, *short)
        batched = [row for row in self._members if isinstance(row, BatchRow)]
        return self.shared_chunk if len(batched) > 1 else self.chunk

    @staticmethod
    def _new(row, feed) -> int:
        """The tokens ``feed`` asks ``row`` to take in: its ids past the longest cached prefix."""
        if not feed.reuse:
            return len(feed.ids)
        tokens = row.tokens if isinstance(row, BatchRow) else row.cache.tokens
        known = feed.ids[:-1] if is_lazy(feed.ids) else feed.ids
        return len(feed.ids) - common_prefix_len(resolved(tokens), known)

    @staticmethod
    def _row_chunk(new: int, limit: int | None) -> int | None:
        """The chunk for one row's ``new`` tokens in this call: a feed within the limit goes whole."""
        if limit is None or new <= limit:
            return None
        return limit

    def _feed_batch(self, feeds, limit: int | None) -> list[Fed]:
        """One model call for the batched rows' ``[(row, Feed)]``."""
        wanted = {id(row): feed for row, feed in feeds}
        idle = [row for row in self.rows if id(row) not in wanted]
        if idle:
            self._park(idle)
        back = [row for row, _ in feeds if row.parked is not None]
        if back:
            self._unpark(back)
        plans = [self._plan(row, wanted[id(row)], limit) for row in self.rows]
        width = max(len(new) for _, new, _ in plans)
        asked = sum(len(new) for _, new, _ in plans)
        inputs, drops, pads, kept = [], [], [], []
        for row, (keep, new, source) in zip(self.rows, plans):
            refeed = min(keep, width - len(new))
            keep -= refeed
            new = [*source[keep : keep + refeed], *new]
            pads.append(width - len(new))
            drops.append(len(row.tokens) - keep)
            kept.append(keep)
            inputs.append(input_ids(new, pad=pads[-1]))
            row.tokens[keep:] = new
        self._drop_tails(drops)
        self._padding = [p + pad for p, pad in zip(self._padding, pads)]
        self._sync_layers()
        done = {id(row): len(row.tokens) == len(wanted[id(row)].ids) for row in self.rows}
        # a partial row's logits among those its feed asks for (a chunk of a long verify pass)
        piece = {
            id(row): max(0, len(row.tokens) - (len(feed.ids) - feed.logits))
            for row, feed in feeds
            if not done[id(row)]
        }
        last = max([feed.logits for row, feed in feeds if done[id(row)]] + list(piece.values()) + [1])
        if self.trace is not None:
            self.trace(CallShape(len(self.rows), width, self._end, last, asked))
        logits = model_logits(self.model, mx.stack(inputs), self.layers, last)
        self._end += width
        index = {id(row): b for b, row in enumerate(self.rows)}
        answers = []
        for row, feed in feeds:
            b = index[id(row)]
            if done[id(row)]:
                answers.append(Fed(logits[b, last - feed.logits :], kept[b], width - pads[b]))
            else:  # a chunk of a long feed: the last logits keep the call's work evaluated
                part = logits[b, last - piece[id(row)] :] if piece[id(row)] else None
                answers.append(Fed(logits[b, -1:], kept[b], width - pads[b], done=False, piece=part))
        return answers

    def _plan(self, row: BatchRow, feed, limit: int | None) -> tuple[int, list, Sequence]:
        """(tokens kept, tokens to feed this call, the sequence they come from) for one row: at
        most the call's chunk of new tokens."""
        resolved(row.tokens)
        ids = list(feed.ids)
        known = ids[:-1] if is_lazy(ids) else ids
        keep = min(common_prefix_len(row.tokens, known), max(0, len(ids) - feed.logits)) if feed.reuse else 0
        new = len(ids) - keep
        limit = self._row_chunk(new, limit)
        if limit is not None and new > limit:
            new = limit
        return keep, ids[keep : keep + new], ids

    # -- bookkeeping of the left-padded layout ------------------------------------------------

    def _drop_tails(self, drops: list[int]) -> None:
        """Drop the last ``drops[b]`` tokens of each row b (keeping every row's end aligned)."""
        common = min(drops)
        if common:
            for layer in self.layers:
                layer.trim(common)
            self._end -= common
        shifts = [d - common for d in drops]
        if any(shifts) and self.layers[0].keys is not None:
            amounts = mx.array(shifts)
            for layer in self.layers:
                layer.keys = dynamic_roll(layer.keys[..., : self._end, :], amounts[:, None], axis=2)
                layer.values = dynamic_roll(layer.values[..., : self._end, :], amounts[:, None], axis=2)
            self._padding = [p + s for p, s in zip(self._padding, shifts)]
        self._cut_common_padding()

    def _cut_common_padding(self) -> None:
        lowest = min(self._padding)
        if lowest and self.layers[0].keys is not None:
            for layer in self.layers:
                layer.keys = layer.keys[..., lowest : self._end, :]
                layer.values = layer.values[..., lowest : self._end, :]
            self._padding = [p - lowest for p in self._padding]
            self._end -= lowest

    def _sync_layers(self) -> None:
        padding = mx.array(self._padding)
        offset = mx.array([self._end - p for p in self._padding])
        for layer in self.layers:
            layer.left_padding, layer.offset, layer._idx = padding, offset, self._end
