"""The batch's bookkeeping. Its left-padded KV layout (``engine.kv_layout.PaddedKV``): rows moved
in and out (one by one, or copied out and back together), tails dropped and calls made keep the
host's mirror of every row's padding and of the end equal to what the layers hold, keep each row's
keys and values, and make no host sync. The prefix match it runs on every row a round
(``engine.cache.common_prefix_len``, ``held_prefix``)."""

import copy
import random

from mlx_ssbd.engine.cache import common_prefix_len, held_prefix
from mlx_ssbd.engine.kv_layout import PaddedKV

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

LAYERS, HEADS, DIM = 2, 2, 4
EMPTY = np.zeros((HEADS, 0, DIM), np.float32)


def stream_layers(length: int, seed: int) -> list[KVCache]:
    """One stream's own cache: ``length`` random positions in each layer (values = keys + 1)."""
    layers = []
    for i in range(LAYERS):
        cache = KVCache()
        if length:
            keys = mx.random.normal((1, HEADS, length, DIM), key=mx.random.key(100 * seed + i))
            cache.update_and_fetch(keys, keys + 1)
        layers.append(cache)
    return layers


def contents(layers: list[KVCache]) -> list[np.ndarray]:
    """Each layer's keys as (heads, positions, size)."""
    return [np.array(layer.keys[0, :, : layer.offset, :]) if layer.offset else EMPTY for layer in layers]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def assert_mirrored(kv: PaddedKV, rows: list[list[np.ndarray]]) -> None:
    """The mirror is what the layers hold, and row b holds ``rows[b]`` (per layer)."""
    assert len(kv.padding) == len(rows)
    for layer in kv.layers:
        assert layer.left_padding.tolist() == kv.padding and layer._idx == kv.end
        assert layer.offset.tolist() == [kv.end - p for p in kv.padding]
    for b, expected in enumerate(rows):
        assert same(contents(kv.extract(b)), expected)
        if kv.layers[0].keys is not None:  # as mlx-lm's own extract gives them
            assert same(contents(kv.extract(b)), contents([layer.extract(b) for layer in kv.layers]))


@pytest.fixture
def no_host_sync(monkeypatch):
    """Within ``with no_host_sync():`` a host sync (reading an array, evaluating one) raises."""
    import contextlib

    def refuse(*args, **kwargs):
        raise AssertionError("a host sync")

    @contextlib.contextmanager
    def guard():
        with monkeypatch.context() as patch:
            for name in ("tolist", "item", "__int__", "__bool__", "__index__", "__float__"):
                patch.setattr(mx.array, name, refuse)
            patch.setattr(mx, "eval", refuse)
            yield

    return guard


@pytest.mark.parametrize("seed", range(12))
def test_rows_moved_in_and_out_keep_their_keys_and_the_mirror(seed, no_host_sync):
    rng = random.Random(seed)
    made = iter(range(10_000))

    def new_rows(n):
        parked = [stream_layers(rng.choice([0, 1, 3, 7, 12]), next(made)) for _ in range(n)]
        return parked, [contents(layers) for layers in parked]

    parked, rows = new_rows(rng.randint(1, 4))
    with no_host_sync():
        kv = PaddedKV.merge(parked)
    assert_mirrored(kv, rows)
    for _ in range(12):
        action = rng.choice(["add", "keep", "take", "call"])
        if action == "add":
            parked, more = new_rows(rng.randint(1, 3))
            with no_host_sync():
                kv = PaddedKV.concat([kv, PaddedKV.merge(parked)])
            rows += more
        elif action == "take":  # rows copied out together, then all back beside new ones, in any order
            indices = rng.sample(range(len(rows)), rng.randint(1, len(rows)))
            parked, more = new_rows(rng.randint(0, 2))
            with no_host_sync():
                aside = kv.take(indices)
                parts = [(kv, rows), (aside, [rows[b] for b in indices])]
                parts += [(PaddedKV.merge(parked), more)] if parked else []
                rng.shuffle(parts)
                kv = PaddedKV.concat([part for part, _ in parts])
            assert_mirrored(aside, [rows[b] for b in indices])
            rows = [row for _, held in parts for row in held]
        elif action == "keep":
            indices = rng.sample(range(len(rows)), rng.randint(1, len(rows)))
            with no_host_sync():
                extracted = [kv.extract(b) for b in indices]
                kv.keep(indices)
            assert all(same(contents(layers), rows[b]) for layers, b in zip(extracted, indices))
            rows = [rows[b] for b in indices]
        else:  # a model call, as the batch makes one: tails dropped, then `width` new positions a row
            drops = (
                [rng.randint(0, min(2, row[0].shape[1])) for row in rows]
                if kv.layers[0].keys is not None
                else None
            )
            width = rng.randint(1, 3)
            with no_host_sync():
                if drops:
                    kv.drop_tails(drops)
                kv.prepare([0] * len(rows))
            new = mx.random.normal((len(rows), HEADS, width, DIM), key=mx.random.key(next(made)))
            for layer in kv.layers:
                layer.update_and_fetch(new, new + 1)
            kv.advance(width)
            rows = [
                [np.concatenate([layer[:, : layer.shape[1] - (drops[b] if drops else 0)], np.array(new[b])], axis=1)
                 for layer in row]
                for b, row in enumerate(rows)
            ]  # fmt: skip
        assert_mirrored(kv, rows)


def test_keep_is_mlx_lm_filter_without_its_sync():
    parked = [stream_layers(length, seed) for seed, length in enumerate([5, 2, 9])]
    ours, theirs = PaddedKV.merge(parked), PaddedKV.merge(copy.deepcopy(parked))
    ours.keep([2, 1])
    for layer, reference in zip(ours.layers, theirs.layers):
        reference.filter(mx.array([2, 1]))
        assert layer.left_padding.tolist() == reference.left_padding.tolist() == [0, 7]
        assert layer._idx == reference._idx == 9 and layer.offset.tolist() == reference.offset.tolist()
        assert mx.array_equal(layer.keys[..., :9, :], reference.keys[..., :9, :])


def test_common_prefix_len_is_the_first_difference():
    rng = random.Random(5)
    for _ in range(3000):
        a = [rng.randint(0, 2) for _ in range(rng.randint(0, 40))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 2) for _ in range(rng.randint(0, 6))]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        text_a, text_b = ("".join(map(str, s)) for s in (a, b))
        assert (
            common_prefix_len(a, b)
            == common_prefix_len(tuple(b), a)
            == common_prefix_len(text_a, text_b)
            == first
        )


def test_held_prefix_compares_only_past_what_the_cache_is_known_to_hold():
    rng = random.Random(6)
    for _ in range(2000):
        tokens = [rng.randint(0, 2) for _ in range(rng.randint(0, 30))]
        ids = tokens[: rng.randint(0, len(tokens))] + [rng.randint(0, 2) for _ in range(rng.randint(0, 6))]
        first = common_prefix_len(tokens, ids)
        for held in {0, rng.randint(0, first), first}:
            assert held_prefix(list(tokens), ids, held) == first
        if ids:  # a lazy last id (a pipelined step's) is never held
            lazy = [*ids[:-1], mx.array(ids[-1])]
            assert held_prefix(list(tokens), lazy, rng.randint(0, first)) == min(first, len(ids) - 1)
    assert held_prefix([1, 2, 3], [1, 2, 3, 4], held=3) == 3  # a decode step: nothing compared
    assert held_prefix([1, 2, mx.array(3)], [1, 2, 3, 4], held=2) == 3  # a lazy cached token resolved
