"""The left-padded KV layout of a batch of streams, over mlx-lm's ``BatchKVCache``: the one module
that reads or writes that cache's fields.

Contract: ``PaddedKV(layers, padding)`` holds one ``BatchKVCache`` per model layer, every row ending
at the same index ``end``, row b's first ``padding[b]`` columns padding. ``PaddedKV.merge(parked)``
builds one from rows that ``extract(b)`` took out (a list of one-row layers each); ``add(parked)``
adds such rows after its own; ``keep(indices)`` keeps those rows, in that order. Before a model call
whose input row b is left padded by ``pads[b]``: ``drop_tails(drops)`` (row b loses its last
``drops[b]`` tokens: what every row loses is trimmed, a row that loses more is shifted right under
more padding, and columns that every row pads are cut off, so the cache does not grow with the
padding), then ``prepare(pads)`` hands the layers the padding, offsets and end the call starts from;
after it, ``advance(width)``.

``padding`` and ``end`` are mirrored on the host (given when a layout is made, never read back),
so neither a call's bookkeeping nor moving rows in and out makes a host sync. (mlx-lm's
``extract`` and ``filter`` read the padding back: a sync for each parked row of each layer, each
waiting for every call dispatched before it.)

What it touches of mlx-lm's cache (mlx-lm 0.32): ``merge``, ``extend`` and ``trim`` as they are,
and the fields ``keys``, ``values``, ``left_padding``, ``offset`` and ``_idx`` (private: the end
index, which has no public setter), each written only here; ``extract`` and ``keep`` do what
mlx-lm's ``extract`` and ``filter`` do, from the host's mirror.
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

    @staticmethod
    def _merged(parked: list[list]) -> tuple[list[BatchKVCache], list[int]]:
        """mlx-lm's ``merge`` of each layer's rows, and the rows' padding: each is right-aligned
        to the longest."""
        lengths = [row[0].size() for row in parked]
        merged = [BatchKVCache.merge([row[i] for row in parked]) for i in range(len(parked[0]))]
        return merged, [max(lengths) - length for length in lengths]

    @classmethod
    def merge(cls, parked: list[list]) -> PaddedKV:
        """One layout holding the rows ``parked`` (each row: its one-row layers, as ``extract``
        gives them), in that order."""
        return cls(*cls._merged(parked))

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

    def add(self, parked: list[list]) -> None:
        """Add the rows ``parked`` (as for ``merge``) after these: both right-aligned to the
        later end (mlx-lm's ``extend``)."""
        merged, padding = self._merged(parked)
        end, stored = merged[0]._idx, self._stored or merged[0].keys is not None
        for layer, more in zip(self.layers, merged):
            layer.extend(more)
        if not stored:  # two empty caches: the paddings side by side, the end as it was
            self.padding += padding
            return
        top = max(self.end, end)
        self.padding = [p + top - self.end for p in self.padding] + [p + top - end for p in padding]
        self.end = top

    def keep(self, indices: list[int]) -> None:
        """Keep rows ``indices``, in that order (padding every kept row has is cut)."""
        rows = mx.array(indices)
        padding = [self.padding[i] for i in indices]
        lowest = min(padding)
        self.padding = [p - lowest for p in padding]
        left, offset = mx.array(self.padding), self.layers[0].offset[rows]
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys = layer.keys[rows][..., lowest:, :]
                layer.values = layer.values[rows][..., lowest:, :]
            layer.left_padding, layer.offset, layer._idx = left, offset, self.end - lowest
        self.end -= lowest

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
