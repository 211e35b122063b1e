"""Checkpoints of the cache layers that cannot be trimmed, so a rewind goes back to a saved point.

A full KV cache (``KVCache``) forgets its last tokens by trimming. Recurrent layers (mlx-lm's
``ArraysCache``: the linear attention of Qwen3.5 and Qwen3-Next, LFM2's short convolutions, Mamba's
SSM state, the hybrids built of them) hold one state summing up every token so far, and a sliding
window (``RotatingKVCache``) past its size has overwritten its oldest keys: neither can be trimmed.
Without a saved point, a cache holding such a layer is rebuilt from nothing at every divergence.

Contract: ``Checkpoints.save(position, layers)`` keeps a copy of every untrimmable layer at
``position`` (the number of tokens the cache then holds); trimmable layers keep nothing.
``restore(n, layers, length)`` goes back to the highest checkpoint at or before ``n`` in a cache of
``length`` tokens: it returns ``(position, layers)``, the untrimmable layers replaced by copies of
their saved state and the others trimmed by ``length - position``, or None when no checkpoint is at
or before ``n`` or a layer trims short (the caller then rebuilds). Checkpoints past the position
a cache is rewound to are forgotten (``forget_after``): the tokens they summed are gone. At most
``limit`` checkpoints are kept, the least recently saved, marked again or restored going first; ``nbytes``
counts
their arrays.

The copies are exact (the same arrays), so feeding on from a restored checkpoint gives the logits
that feeding everything from the start would have given (up to the floating-point rounding of the
different call shapes, as any chunked prefill).
"""

from __future__ import annotations

import copy

import mlx.core as mx
from mlx_lm.models.cache import ConcatenateKVCache, KVCache, QuantizedKVCache, _BaseCache

TRIMMABLE = (KVCache, QuantizedKVCache, ConcatenateKVCache)  # trimmed to any length, always
LIMIT = 8  # checkpoints kept per cache: an update marks at most 4 (see ``engine.update.Job.marks``)


def needs_checkpoints(layers) -> bool:
    """Some layer cannot always be trimmed (a recurrent state, a sliding window)."""
    return not all(isinstance(layer, TRIMMABLE) for layer in layers)


def _clone(value):
    """A copy of a cache layer (or part of one) that later in-place updates of ``value`` leave
    alone: new array objects (mlx-lm's rotating window writes into its arrays in place)."""
    if isinstance(value, mx.array):
        return mx.array(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, _BaseCache):
        twin = copy.copy(value)
        for name, attribute in vars(value).items():
            setattr(twin, name, _clone(attribute))
        return twin
    return value


def _nbytes(value) -> int:
    if isinstance(value, mx.array):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, _BaseCache):
        return sum(_nbytes(v) for v in vars(value).values())
    return 0


class Checkpoints:
    """Saved states of one cache's untrimmable layers; see the module docstring."""

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._saved: dict[int, list] = {}  # position -> per layer: its copy, or None (trimmed instead)

    def __len__(self) -> int:
        return len(self._saved)

    def __contains__(self, position: int) -> bool:
        return position in self._saved

    @property
    def positions(self) -> list[int]:
        return sorted(self._saved)

    def save(self, position: int, layers) -> None:
        """Keep the untrimmable layers' state at ``position`` (a position saved before is only
        marked as recently used: its state is the same)."""
        if position in self._saved:
            self.touch([position])
            return
        self._saved[position] = [None if isinstance(layer, TRIMMABLE) else _clone(layer) for layer in layers]
        while len(self._saved) > self.limit:
            del self._saved[next(iter(self._saved))]

    def touch(self, positions) -> None:
        """Mark the saved ones among ``positions`` as recently used (kept longest)."""
        for position in positions:
            if position in self._saved:
                self._saved[position] = self._saved.pop(position)

    def restore(self, n: int, layers, length: int) -> tuple[int, list] | None:
        """Go back to the highest checkpoint at or before ``n``; see the module docstring."""
        below = [p for p in self._saved if p <= n]
        if not below:
            return None
        position = max(below)
        saved = self._saved[position] = self._saved.pop(position)
        drop = length - position
        restored = []
        for layer, copy_ in zip(layers, saved):
            if copy_ is None:
                if layer.trim(drop) != drop:
                    return None
                restored.append(layer)
            else:
                restored.append(_clone(copy_))
        self.forget_after(position)
        return position, restored

    def forget_after(self, n: int) -> None:
        """Forget the checkpoints past position ``n``."""
        for position in [p for p in self._saved if p > n]:
            del self._saved[position]

    def clear(self) -> None:
        self._saved.clear()

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(layer) for saved in self._saved.values() for layer in saved if layer is not None)
