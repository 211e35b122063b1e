"""Prompt prefixes shared between streams: the keys and values of a prompt's shared prefix (the
instruction and the example translations), computed once per prefix and copied into each new
stream's cache, so a stream that starts (a service session, each of its languages) does not
prefill them again.

Contract: ``Prefixes(capacity)``; ``seed(cache, ids, compute=True)`` brings an empty
``TokenCache`` whose layers are all plain ``KVCache`` (any other cache is left as it is) to hold
``ids``: from the stored keys and values when ``ids`` were seeded before, else (with ``compute``)
by feeding them (``PREFILL_CHUNK`` tokens a model call, as a stream's own prompt) and storing what
the cache then holds; without ``compute`` an unknown prefix is left to the stream's first update
(a service whose other sessions are running feeds it in the batched rounds, beside them, rather
than stopping them for the prefill). Returns how many of ``ids`` the cache holds. The
``capacity`` prefixes seeded last are kept (each costs what its tokens' KV costs). A seeded cache
gets array objects of its own over the stored data: MLX arrays are values, so its later writes
never reach the store or another stream. ``computed`` and ``copied`` count the prefixes fed and
those taken from the store; ``health()`` says so with the prefixes kept and their bytes (plain
numbers, safe to read from another thread).

A prefix fed on its own, rather than as the start of a stream's first update, holds the same
tokens; its keys and values may differ in the last bits where model calls of other widths round
differently (as a prompt fed in chunks of another size does).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from ..platform.backend import on_generation_stream
from .cache import TokenCache
from .planner import PREFILL_CHUNK


class Prefixes:
    """See the module docstring."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self._stored: OrderedDict[tuple[int, ...], list[tuple[mx.array, mx.array]]] = OrderedDict()
        self.computed = 0
        self.copied = 0
        self.bytes = 0  # of the keys and values kept

    def health(self) -> dict:
        return {
            "kept": len(self._stored),
            "bytes": self.bytes,
            "computed": self.computed,
            "copied": self.copied,
        }

    def seed(self, cache: TokenCache, ids: Sequence[int], compute: bool = True) -> int:
        """See the module docstring."""
        ids = tuple(int(i) for i in ids)
        if not ids or cache.tokens or not all(type(layer) is KVCache for layer in cache.layers):
            return 0
        stored = self._stored.get(ids)
        if stored is None and not compute:
            return 0
        if stored is None:
            with on_generation_stream():
                for start in range(0, len(ids), PREFILL_CHUNK):  # as a stream's prompt is fed
                    part = list(ids[start : start + PREFILL_CHUNK])
                    mx.eval(cache.forward(part, logits_from=len(part) - 1))
                stored = [
                    (
                        mx.contiguous(layer.keys[..., : len(ids), :]),
                        mx.contiguous(layer.values[..., : len(ids), :]),
                    )
                    for layer in cache.layers
                ]
                mx.eval(stored)
            self._stored[ids] = stored
            self.bytes += _nbytes(stored)
            if len(self._stored) > self.capacity:
                self.bytes -= _nbytes(self._stored.popitem(last=False)[1])
            self.computed += 1
            return len(ids)
        self._stored.move_to_end(ids)
        for layer, (keys, values) in zip(cache.layers, stored):
            layer.keys, layer.values, layer.offset = keys[...], values[...], len(ids)
        cache.tokens = list(ids)
        self.copied += 1
        return len(ids)


def _nbytes(stored: list[tuple[mx.array, mx.array]]) -> int:
    return sum(keys.nbytes + values.nbytes for keys, values in stored)
