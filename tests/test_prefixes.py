"""Shared prompt prefixes: computed once, copied into each new stream, never written through."""

import random

from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.prefixes import Prefixes

import mlx.core as mx
from test_multistream import make
from test_translator import random_stream
from tiny import tiny_model


def test_a_seeded_stream_skips_the_prefix_and_translates_as_one_that_fed_it(tok):
    """The first stream's prefix is fed and stored, the second's copied from the store: its first
    update reuses the whole prefix; both translate a stream exactly as an unseeded translator
    does, and their later writes leave the store as it was."""
    model = tiny_model("qwen2", seed=8)
    stream = random_stream(random.Random(3))
    prefixes = Prefixes()
    fed, copied, plain = (make(model, tok, policy="ssbd", beta=0.3) for _ in range(3))
    prefix = fed.prompts.prefix
    assert prefixes.seed(fed.cache, prefix) == len(prefix) and prefixes.computed == 1
    stored = [mx.array(keys) for keys, _ in prefixes._stored[tuple(prefix)]]
    assert prefixes.seed(copied.cache, prefix) == len(prefix) and prefixes.copied == 1
    assert copied.cache.tokens == list(prefix)
    first = copied.update(stream[0])
    assert first.stats.reused_tokens >= len(prefix)
    expected = [plain.update(text).output_ids for text in stream]
    assert [first.output_ids] + [copied.update(text).output_ids for text in stream[1:]] == expected
    assert [fed.update(text).output_ids for text in stream] == expected
    for before, (keys, _) in zip(stored, prefixes._stored[tuple(prefix)]):
        assert mx.array_equal(before, keys)


def test_only_an_empty_cache_of_plain_layers_is_seeded_and_the_last_prefixes_are_kept(tok):
    """A cache that holds tokens, or a rotating window, is left as it is, and so is one whose
    prefix is unknown when it may not be computed; beyond ``capacity`` the prefix seeded longest
    ago is dropped."""
    model = tiny_model("qwen2", seed=8)
    prefixes = Prefixes(capacity=2)
    used = TokenCache(model)
    used.forward([1, 2, 3])
    assert prefixes.seed(used, [4, 5]) == 0 and used.tokens == [1, 2, 3]
    assert prefixes.seed(TokenCache(model, max_kv_size=64), [4, 5]) == 0
    assert prefixes.seed(TokenCache(model), [4, 5], compute=False) == 0 and prefixes.computed == 0
    for ids in ([4, 5], [6, 7], [4, 5], [8, 9]):
        prefixes.seed(TokenCache(model), ids)
    assert list(prefixes._stored) == [(4, 5), (8, 9)] and (prefixes.computed, prefixes.copied) == (3, 1)
    kept = sum(k.nbytes + v.nbytes for stored in prefixes._stored.values() for k, v in stored)
    assert prefixes.health() == {"kept": 2, "bytes": kept, "computed": 3, "copied": 1} and kept > 0
