"""The left-padded KV layout of a batch of streams, over mlx-lm's ``BatchKVCache``: the one module
that reads or writes that cache's fields.

Contract: ``PaddedKV(layers)`` holds one ``BatchKVCache`` per model layer, every row ending at the
same index ``end``, row b's first ``padding[b]`` columns padding; ``padding`` and ``end`` are
mirrored on the host, so a call's bookkeeping needs no host sync. ``PaddedKV.merge(parked)`` builds
one from rows that ``extract(b)`` took out (a list of one-row layers each); ``add(parked)`` adds
such rows after its own; ``keep(indices)`` keeps those rows, in that order. Before a model call
whose input row b is left padded by ``pads[b]``: ``drop_tails(drops)`` (row b loses its last
``drops[b]`` tokens: what every row loses is trimmed, a row that loses more is shifted right under
more padding, and columns that every row pads are cut off, so the cache does not grow with the
padding), then ``prepare(pads)`` hands the layers the padding, offsets and end the call starts
from; after it, ``advance(width)``.

What it touches of mlx-lm's cache (mlx-lm 0.32): ``extract``, ``merge``, ``extend``, ``filter`` and
``trim`` as they are, and the fields ``keys``, ``values``, ``left_padding``, ``offset`` and
``_idx`` (private: the end index, which has no public setter), each written only here.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, dynamic_roll


class PaddedKV:
    """See the module docstring."""

    def __init__(self, layers: list[BatchKVCache]):
        self.layers = layers
        self.padding: list[int] = []
        self.end = 0
        self._read()

    @staticmethod
    def _merged(parked: list[list]) -> list[BatchKVCache]:
        return [BatchKVCache.merge([row[i] for row in parked]) for i in range(len(parked[0]))]

    @classmethod
    def merge(cls, parked: list[list]) -> PaddedKV:
        """One layout holding the rows ``parked`` (each row: its one-row layers, as ``extract``
        gives them), in that order."""
        return cls(cls._merged(parked))

    def extract(self, b: int) -> list:
        """Row ``b``'s keys and values, one single-stream cache per layer (the layout keeps them
        until ``keep`` drops the row)."""
        return [layer.extract(b) for layer in self.layers]

    def add(self, parked: list[list]) -> None:
        """Add the rows ``parked`` (as for ``merge``) after these."""
        for layer, more in zip(self.layers, self._merged(parked)):
            layer.extend(more)
        self._read()

    def keep(self, indices: list[int]) -> None:
        """Keep rows ``indices``, in that order (padding every kept row has is cut)."""
        for layer in self.layers:
            layer.filter(mx.array(indices))
        self._read()

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

    def _read(self) -> None:
        """Mirror the padding and end after mlx-lm changed them (one small host sync)."""
        self.padding = [int(p) for p in self.layers[0].left_padding.tolist()]
        self.end = self.layers[0]._idx
