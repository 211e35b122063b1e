"""Models whose cache cannot be trimmed (hybrids with recurrent layers, sliding windows) keep
SSBD's reuse through checkpoints: tiny random models of every cache kind mlx-lm has."""

import random

from mlx_ssbd import MultiStreamTranslator
from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.checkpoints import Checkpoints

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache
from test_translator import make, random_stream
from tiny import HYBRIDS, tiny_model

RECURRENT = [arch for arch in HYBRIDS if arch != "gemma3_text"]


@pytest.fixture(scope="module", params=HYBRIDS)
def hybrid(request):
    return request.param, tiny_model(request.param, seed=5)


def streams(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [random_stream(rng) for _ in range(count)]


def run(tr, stream_list) -> list:
    """Every update of every stream (the last prefix of each final)."""
    return [
        tr.update(prefix, final=i == len(prefixes) - 1)
        for prefixes in stream_list
        for i, prefix in enumerate(prefixes)
    ]


def rebuilding(tr):
    """``tr`` with checkpoints off: every divergence rebuilds its cache (the behaviour without them)."""
    tr.cache.checkpoints = None
    return tr


def test_every_cache_kind_is_present(hybrid):
    arch, model = hybrid
    kinds = {type(layer) for layer in model.make_cache()}
    assert kinds & {ArraysCache, RotatingKVCache}, arch
    assert TokenCache(model).checkpoints is not None


@pytest.mark.parametrize("policy", ["ssbd", "rt"])
def test_checkpointed_outputs_equal_rebuilt_outputs_and_nothing_is_rebuilt(hybrid, tok, policy):
    arch, model = hybrid
    data = streams(seed=3, count=4)
    checkpointed = run(make(model, tok, policy=policy, beta=0.2), data)
    rebuilt = run(rebuilding(make(model, tok, policy=policy, beta=0.2)), data)
    assert [u.output_ids for u in checkpointed] == [u.output_ids for u in rebuilt]
    assert sum(u.stats.cache_rebuilds for u in checkpointed) == 0, arch
    assert sum(u.stats.cache_rebuilds for u in rebuilt) > 0
    assert sum(u.stats.tokens_fed for u in checkpointed) < sum(u.stats.tokens_fed for u in rebuilt) / 2


@pytest.mark.parametrize("arch", RECURRENT)
def test_beta0_ssbd_equals_rt_token_for_token(arch, tok):
    model = tiny_model(arch, seed=5)
    data = streams(seed=4, count=5)
    rt = run(make(model, tok, policy="rt"), data)
    ssbd = run(make(model, tok, policy="ssbd", beta=0.0), data)
    assert [u.output_ids for u in ssbd] == [u.output_ids for u in rt]
    assert any(u.stats.draft_tokens for u in ssbd)  # a draft was verified, not only decoded again


def test_a_wrapped_sliding_window_stays_consistent(tok):
    """Past its size a window cannot be trimmed: the cache goes back to a checkpoint, and what it
    records matches what every layer holds (exactness to RT is not claimed past the window: a
    multi-token pass sees more keys than single steps, see test_translator)."""
    model = tiny_model("gemma3_text", seed=5)
    tr = make(model, tok, policy="ssbd", beta=0.2)
    for prefix in ["so today", "so today I want", "so we", "so we made it"]:
        assert tr.update(prefix).output_ids
        assert all(layer.offset == len(tr.cache.tokens) for layer in tr.cache.layers)
    assert len(tr.cache.tokens) > 32 and tr.cache.rebuilds == 0


def test_one_stream_equals_the_same_stream_in_a_batch(hybrid, tok):
    arch, model = hybrid
    data = streams(seed=6, count=3)
    alone = [run(make(model, tok, policy="ssbd", beta=0.2), [prefixes]) for prefixes in data]
    mine = [make(model, tok, policy="ssbd", beta=0.2) for _ in data]
    batched = MultiStreamTranslator(mine, chunk=64)
    longest = max(len(prefixes) for prefixes in data)
    together = [[] for _ in data]
    for step in range(longest):
        sources = [(p[step], step == len(p) - 1) if step < len(p) else None for p in data]
        for i, update in enumerate(batched.update(sources)):
            if update is not None:
                together[i].append(update)
    for i in range(len(data)):
        assert [u.output_ids for u in together[i]] == [u.output_ids for u in alone[i]], (arch, i)
        # chunks: more passes
        assert [u.stats.tokens_fed for u in together[i]] == [u.stats.tokens_fed for u in alone[i]]
    batched.remove(mine[0])  # leaves with its cache and checkpoints: goes on alone
    assert mine[0].update("so we").output_ids and mine[0].cache.checkpoints is not None


def test_restore_goes_to_the_nearest_checkpoint_at_or_before_and_forgets_later_ones():
    model = tiny_model("qwen3_5", seed=2)
    cache = TokenCache(model)
    ids = list(range(10, 70))
    cache.forward(ids, marks=(20, 40, 50))
    assert cache.checkpoints.positions == [20, 40, 50] and cache.forward_calls == 4
    assert cache.checkpoints.nbytes > 0 and cache.nbytes > cache.checkpoints.nbytes
    assert cache.rewind(45) == 40  # no checkpoint at 45: back to 40, never to a wrong state
    assert cache.checkpoints.positions == [20, 40] and len(cache.tokens) == 40
    assert all(layer.offset == 40 for layer in cache.layers if isinstance(layer, KVCache))
    rows = cache.forward(ids[40:])  # feeding on from the checkpoint = feeding all at once
    fresh = TokenCache(model)
    whole = fresh.forward(ids)[40:]
    assert mx.abs(rows - whole).max().item() < 1e-3
    assert cache.rewind(5) == 0 and cache.rebuilds == 1  # nothing saved that early: rebuilt


def test_checkpoints_are_bounded_and_a_restored_state_is_not_changed_by_what_follows():
    model = tiny_model("mamba2", seed=2)
    cache = TokenCache(model)
    cache.checkpoints = Checkpoints(limit=3)
    ids = list(range(10, 40))
    cache.forward(ids, marks=(5, 10, 15, 20, 25))
    assert cache.checkpoints.positions == [15, 20, 25]  # the oldest went first
    first = cache.forward(ids[:1], logits_from=0)
    cache.rewind(20)
    again = cache.forward(ids[20:21])  # restored at 20, then fed: the saved copy is untouched
    cache.rewind(20)
    assert 20 in cache.checkpoints
    assert mx.abs(cache.forward(ids[20:21]) - again).max().item() == 0
    assert first.shape == again.shape
