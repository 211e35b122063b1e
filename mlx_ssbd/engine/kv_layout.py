"""The left-padded KV layout of a batch of streams, over mlx-lm's ``BatchKVCache``: the one module
that reads or writes that cache's fields.

Contract: ``PaddedKV(layers, padding)`` holds one ``BatchKVCache`` per model layer, every row ending
at the same index ``end``, row b's first ``padding[b]`` columns padding. ``PaddedKV.merge(parked)``
builds one from rows that ``extract(b)`` took out (a list of one-row layers each);
``keep(indices)`` keeps those rows, in that order; ``take(indices)`` copies those rows out into a
layout of their own (one gather per layer and tensor, however many rows), and
``PaddedKV.concat(parts)`` puts layouts back together (each tensor written once), so rows that
leave and come back together cost a few operations, not a few per row. Before a model call
whose input row b is left padded by ``pads[b]``: ``drop_tails(drops)`` (row b loses its last
``drops[b]`` tokens: what every row loses is trimmed, a row that loses more is shifted right under
more padding, and columns that every row pads are cut off, so the cache does not grow with the
padding), then ``prepare(pads)`` hands the layers the padding, offsets and end the call starts from;
after it, ``advance(width)``.

``padding`` and ``end`` are mirrored on the host (given when a layout is made, never read back),
so neither a call's bookkeeping nor moving rows in and out makes a host sync. (mlx-lm's
``extract`` and ``filter`` read the padding back: a sync for each parked row of each layer, each
waiting for every call dispatched before it.)

What it touches of mlx-lm's cache (mlx-lm 0.32): ``merge`` and ``trim`` as they are,
and the fields ``keys``, ``values``, ``left_padding``, ``offset`` and ``_idx`` (private: the end
index, which has no public setter), each written only here; ``extract``, ``take`` and
``concat`` do what mlx-lm's ``extract``, ``filter`` and ``extend`` do, from the host's mirror.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache, dynamic_roll


class PaddedKV:
    """See the module docstring."""

    def __init__(self, layers: list[BatchKVCache], padding: list[int]):
        """``padding``: the layers' left padding, as the host knows it (``merge``)."""
        self.layers = layers
        self.padding = padding
        self.end = layers[0]._idx

    @classmethod
    def merge(cls, parked: list[list]) -> PaddedKV:
        """One layout holding the rows ``parked`` (each row: its one-row layers, as ``extract``
        gives them), in that order: mlx-lm's ``merge`` of each layer, every row right-aligned to
        the longest."""
        lengths = [row[0].size() for row in parked]
        merged = [BatchKVCache.merge([row[i] for row in parked]) for i in range(len(parked[0]))]
        return cls(merged, [max(lengths) - length for length in lengths])

    def extract(self, b: int) -> list[KVCache]:
        """Row ``b``'s keys and values, one single-stream cache per layer, copied out (the layout
        keeps them until ``keep`` drops the row)."""
        start, caches = self.padding[b], []
        for layer in self.layers:
            cache = KVCache()
            if layer.keys is not None:
                cache.keys = mx.contiguous(layer.keys[b : b + 1, :, start : self.end])
                cache.values = mx.contiguous(layer.values[b : b + 1, :, start : self.end])
                cache.offset = self.end - start
            caches.append(cache)
        return caches

    @classmethod
    def concat(cls, parts: list[PaddedKV]) -> PaddedKV:
        """One layout of every part's rows, part after part, each right-aligned to the latest end:
        each layer's keys and values written once into one new tensor (the room after the end is
        the largest any part has, so no part's next call must grow)."""
        if len(parts) == 1:
            return parts[0]
        end = max(part.end for part in parts)
        padding = [p + end - part.end for part in parts for p in part.padding]
        stored = [part for part in parts if part._stored]
        layers = [BatchKVCache(padding) for _ in parts[0].layers]
        if stored:
            size = end + max(part.layers[0].keys.shape[2] - part.end for part in stored)
            for i, layer in enumerate(layers):
                for name in ("keys", "values"):
                    like = getattr(stored[0].layers[i], name)
                    joined = mx.zeros((len(padding), like.shape[1], size, like.shape[3]), like.dtype)
                    b = 0
                    for part in parts:
                        tensor = getattr(part.layers[i], name)
                        if tensor is not None and part.end:
                            joined[b : b + len(part.padding), :, end - part.end : end] = tensor[
                                ..., : part.end, :
                            ]
                        b += len(part.padding)
                    setattr(layer, name, joined)
        left, offset = mx.array(padding), mx.array([end - p for p in padding])
        for layer in layers:
            layer.left_padding, layer.offset, layer._idx = left, offset, end
        return cls(layers, padding)

    def take(self, indices: list[int]) -> PaddedKV:
        """A new layout of rows ``indices``, in that order (copied out in one gather per layer and
        tensor; padding every taken row has is cut); this one is left as it is."""
        rows = mx.array(indices)
        padding = [self.padding[i] for i in indices]
        lowest = min(padding)
        padding = [p - lowest for p in padding]
        left, offset = mx.array(padding), self.layers[0].offset[rows]
        layers = []
        for layer in self.layers:
            taken = BatchKVCache(padding)
            if layer.keys is not None:
                taken.keys = layer.keys[rows][..., lowest:, :]
                taken.values = layer.values[rows][..., lowest:, :]
            taken.left_padding, taken.offset, taken._idx = left, offset, self.end - lowest
            layers.append(taken)
        return PaddedKV(layers, padding)

    def keep(self, indices: list[int]) -> None:
        """Keep rows ``indices``, in that order (padding every kept row has is cut)."""
        kept = self.take(indices)
        self.layers, self.padding, self.end = kept.layers, kept.padding, kept.end

    def drop_tails(self, drops: list[int]) -> None:
        """Row b loses its last ``drops[b]`` tokens; every row still ends at ``end``."""
        common = min(drops)
        if common:
            for layer in self.layers:
                layer.trim(common)
            self.end -= common
        shifts = [d - common for d in drops]
        if any(shifts) and self._stored:
            amounts = mx.array(shifts)[:, None]
            for layer in self.layers:
                layer.keys = dynamic_roll(layer.keys[..., : self.end, :], amounts, axis=2)
                layer.values = dynamic_roll(layer.values[..., : self.end, :], amounts, axis=2)
            self.padding = [p + s for p, s in zip(self.padding, shifts)]
        lowest = min(self.padding)
        if lowest and self._stored:
            for layer in self.layers:
                layer.keys = layer.keys[..., lowest : self.end, :]
                layer.values = layer.values[..., lowest : self.end, :]
            self.padding = [p - lowest for p in self.padding]
            self.end -= lowest

    def prepare(self, pads: list[int]) -> None:
        """The next call's input is left padded by ``pads[b]`` in row b: the layers take it as
        more padding, with every row's offset and the common end."""
        self.padding = [p + pad for p, pad in zip(self.padding, pads)]
        padding = mx.array(self.padding)
        offset = mx.array([self.end - p for p in self.padding])
        for layer in self.layers:
            layer.left_padding, layer.offset, layer._idx = padding, offset, self.end

    def advance(self, width: int) -> None:
        """A model call of ``width`` columns went through the layers."""
        self.end += width

    @property
    def _stored(self) -> bool:
        return self.layers[0].keys is not None
