"""Many streams in one batched forward give each stream exactly its single-stream output."""

import random

from mlx_ssbd import StreamTranslator, TranslatorConfig
from mlx_ssbd.engine.batch import BatchCache
from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.lookahead import Lookahead
from mlx_ssbd.engine.update import Feed
from mlx_ssbd.live.multistream import MultiStreamTranslator

import mlx.core as mx
import pytest
from test_translator import SMALL, random_stream
from tiny import tiny_model


def make(model, tok, **cfg):
    return StreamTranslator(
        model,
        tok,
        family="chatml",
        source_lang="en",
        target_lang="de",
        config=TranslatorConfig(**{**SMALL, **cfg}),
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "cfg",
    [
        dict(policy="ssbd", beta=0.0),
        dict(policy="ssbd", beta=0.3),
        dict(policy="rt"),
        dict(policy="cd"),
        dict(policy="ssbd", beta=0.3, temperature=1.0, top_p=0.9),
        dict(policy="rt", temperature=0.8),
        dict(policy="ssbd", beta=0.0, lookahead=Lookahead(resync=True, ngram_drafts=True)),
        dict(policy="ssbd", beta=0.3, lookahead=Lookahead(resync=True, ngram_drafts=True), temperature=1.0),
        dict(policy="ssbd", beta=0.5, accept_rule="ratio"),
    ],
)
def test_batched_streams_equal_single_streams(tok, arch, cfg):
    assert_batched_equals_single(tok, arch, cfg)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(policy="ssbd", beta=0.3),
        dict(policy="ssbd", beta=0.3, lookahead=Lookahead(resync=True)),
        dict(policy="rt", temperature=0.8),
    ],
)
def test_batched_streams_equal_single_streams_pipelined(tok, cfg, monkeypatch):
    monkeypatch.setenv("MLX_SSBD_PIPELINE", "1")
    assert_batched_equals_single(tok, "qwen2", cfg)


@pytest.mark.parametrize("cfg", [dict(policy="ssbd", beta=0.3), dict(policy="rt", temperature=0.8)])
def test_batched_streams_equal_single_streams_in_one_call_a_round(tok, cfg, monkeypatch):
    """Where a call's fixed cost is large next to padding (a GPU), every round is one call."""
    monkeypatch.setattr("mlx_ssbd.platform.backend.call_tokens", lambda: None)
    assert_batched_equals_single(tok, "qwen2", cfg)


def test_rows_feeding_very_different_widths_go_in_separate_calls():
    """With a call's fixed cost worth ``call_tokens`` tokens (a CPU), three decode steps beside a
    16-token feed go in a call of their own rather than padded to 16 (4 + 3 + 4 + 16 tokens'
    worth against 4 + 4 x 16); feeds of about one width share a call. Each row's logits are
    those it gets alone."""
    model = tiny_model("qwen2", seed=8)
    batch = BatchCache(model, chunk=64, shared_chunk=16, call_tokens=4)
    calls = []
    batch.trace = calls.append
    rows = [batch.join(TokenCache(model)) for _ in range(4)]
    starts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], list(range(20, 36))]
    batch.feed([(row, Feed(ids, 1)) for row, ids in zip(rows[:3], starts)])
    assert [(c.rows, c.width) for c in calls] == [(3, 4)]  # 4 + 3 x 4: less than any split
    calls.clear()
    steps = [[*ids, 1] for ids in starts[:3]]
    fed = batch.feed([*((row, Feed(ids, 1)) for row, ids in zip(rows, steps)), (rows[3], Feed(starts[3], 2))])
    assert sorted((c.rows, c.width) for c in calls) == [(1, 16), (3, 1)]
    for ids, answer, wanted in zip([*steps, starts[3]], fed, [1, 1, 1, 2]):
        alone = TokenCache(model)
        want = alone.feed([(alone, Feed(ids, wanted))])[0].logits
        assert mx.allclose(answer.rows(wanted), want, atol=1e-4, rtol=1e-4).item()


@pytest.mark.parametrize("cfg", [dict(policy="ssbd", beta=0.3), dict(policy="rt", temperature=0.8)])
def test_batched_streams_equal_single_streams_while_heavy_rows_rest(tok, cfg):
    """Rows longer than the shortest in a call join every other call (here every longer row is
    heavy): the outputs are still each stream's own."""
    rests = assert_batched_equals_single(tok, "qwen2", cfg, heavy=1)
    assert rests > 0


def assert_batched_equals_single(tok, arch, cfg, heavy=None):
    """Batched outputs equal each stream's own (both made under the same backend policy); with
    ``heavy``, rows rest as heavy ones do; returns how many times a row rested."""
    model = tiny_model(arch, seed=8)
    rng = random.Random(5)
    n = 4
    streams = [
        [(p, i == len(ps) - 1) for i, p in enumerate(ps)] for ps in (random_stream(rng) for _ in range(n))
    ]
    streams[1] = streams[1][:2]  # streams of different lengths: some sit out later steps
    batched = MultiStreamTranslator([make(model, tok, **cfg, seed=i) for i in range(n)], chunk=None)
    rests = 0
    if heavy is not None:
        planner = batched.batch.planner
        planner.heavy, planner.heavy_ratio = heavy, 1.0
        plan = planner.plan

        def counted(requests, members):
            nonlocal rests
            chosen = plan(requests, members)
            rests += len(chosen.resting)
            return chosen

        planner.plan = counted
    alone = [make(model, tok, **cfg, seed=i) for i in range(n)]
    greedy = [make(model, tok, **{**cfg, "temperature": 0.0}) for _ in range(n)]
    differs = False  # sampling is really exercised: some output differs from greedy decoding
    for step in range(max(len(s) for s in streams)):
        sources = [s[step] if step < len(s) else None for s in streams]
        results = batched.update(sources)
        for i, item in enumerate(sources):
            if item is None:
                assert results[i] is None
                continue
            single = alone[i].update(item[0], final=item[1])
            assert results[i].output_ids == single.output_ids, (i, step)
            assert results[i].stats.accepted == single.stats.accepted
            # counted per job by the runner
            assert results[i].stats.forward_passes == single.stats.forward_passes
            if cfg.get("temperature"):
                differs |= single.output_ids != greedy[i].update(item[0], final=item[1]).output_ids
    assert differs or not cfg.get("temperature")
    for tr in list(batched.translators):
        assert_row_holds_its_tokens(batched, tr)
    return rests


def assert_row_holds_its_tokens(batched, tr):
    """Leaving the batch hands back KV equal to a fresh forward over the recorded ids."""
    batched.remove(tr)
    tokens = list(tr.cache.tokens)
    assert tr.cache.layers[0].offset == len(tokens) and -1 not in tokens
    fresh = TokenCache(tr.model)
    expected = fresh.forward([*tokens, 7])[-1]
    got = tr.cache.forward([7])[-1]
    assert mx.allclose(expected, got, atol=1e-4).item()


def test_resync_proposals_run_batched(tok):
    """Resync proposals really happen in batched steps, so the equality above covers them (the
    n-gram kind is checked batched in test_lookahead's copy-through test)."""
    model = tiny_model("qwen2", seed=21)
    rng = random.Random(99)
    streams = [random_stream(rng) for _ in range(6)]
    batched = MultiStreamTranslator(
        [make(model, tok, policy="ssbd", beta=0.0, lookahead=Lookahead(resync=True)) for _ in streams]
    )
    proposals = accepted = 0
    for step in range(max(map(len, streams))):
        sources = [(s[step], step == len(s) - 1) if step < len(s) else None for s in streams]
        for result in batched.update(sources):
            if result:
                proposals += result.stats.proposals
                accepted += result.stats.resynced
    assert proposals > 0 and accepted > 0


def test_streams_join_and_leave_between_updates(tok):
    """A stream that joins with a filled cache, and one that leaves mid-segment, keep producing
    exactly what they produce alone."""
    model = tiny_model("qwen2", seed=3)
    rng = random.Random(9)
    streams = [random_stream(rng) for _ in range(3)]
    alone = [make(model, tok, policy="ssbd", beta=0.3) for _ in range(3)]
    mine = [make(model, tok, policy="ssbd", beta=0.3) for _ in range(3)]
    expect = lambda i, step: alone[i].update(streams[i][step]).output_ids
    assert mine[2].update(streams[2][0]).output_ids == expect(2, 0)  # stream 2 starts alone
    batched = MultiStreamTranslator(mine[:2])
    for step in range(len(streams[0]) - 1):
        if step == 1:
            batched.add(mine[2])  # joins with its cache and draft
        if step == 2:
            batched.remove(mine[0])  # leaves, goes on alone
            assert mine[0].update(streams[0][step]).output_ids == expect(0, step)
        sources = [
            (streams[i][step + (i == 2)], False) for i, tr in enumerate(mine) if tr in batched.translators
        ]
        results = batched.update(sources)
        ids = [i for i, tr in enumerate(mine) if tr in batched.translators]
        for i, result in zip(ids, results):
            assert result.output_ids == expect(i, step + (i == 2)), (i, step)


def test_batched_mode_runs_a_sliding_window_on_its_own_and_refuses_what_it_cannot_batch(tok):
    model = tiny_model("qwen2")
    window = lambda: StreamTranslator(
        model,
        tok,
        family="chatml",
        source_lang="en",
        target_lang="de",
        max_kv_size=64,
    )
    alone, mine = window(), window()
    multi = MultiStreamTranslator([mine, make(model, tok)])  # a model call of its own in each round
    for prefix in ["so today", "so today I want", "so we made it"]:
        assert (
            multi.update([(prefix, False), (prefix, False)])[0].output_ids == alone.update(prefix).output_ids
        )
    with pytest.raises(ValueError, match="share one model"):
        MultiStreamTranslator([make(model, tok), make(tiny_model("qwen2", seed=1), tok)])
    multi = MultiStreamTranslator([make(model, tok), make(model, tok)])
    with pytest.raises(ValueError, match="stream 1: source is empty"):
        multi.update([("so today", False), ("  ", False)])
    assert multi.update([("so today", False), None])[0].output_ids  # still usable


@pytest.mark.parametrize(
    "cfg", [dict(policy="ssbd", beta=0.3, lookahead=Lookahead(resync=True)), dict(policy="rt")]
)
def test_updates_join_while_others_are_under_way(tok, cfg):
    """Continuous batching: each stream submits its next source as soon as its last update ended,
    at staggered rounds, so updates start while others are mid-way; every stream still gets
    exactly its own outputs, and a short update can end before a longer one begun earlier."""
    model = tiny_model("qwen2", seed=8)
    rng = random.Random(11)
    streams = [random_stream(rng) for _ in range(4)]
    batched = MultiStreamTranslator([make(model, tok, **cfg) for _ in streams])
    got: list[list] = [[] for _ in streams]
    joined_mid_way = overtaken = 0
    started: dict[int, int] = {}
    for rounds in range(10_000):
        for i, tr in enumerate(batched.translators):
            if rounds >= 3 * i and i not in started and len(got[i]) < len(streams[i]):
                step = len(got[i])
                joined_mid_way += batched.busy
                started[i] = rounds

                def done(update, i=i):
                    nonlocal overtaken
                    overtaken += any(s < started[i] for j, s in started.items() if j != i)
                    del started[i]
                    got[i].append(update.output_ids)

                batched.submit(tr, streams[i][step], step == len(streams[i]) - 1, done)
        if not batched.busy:
            if all(len(g) == len(s) for g, s in zip(got, streams)):
                break
            continue
        batched.round()
    for i, stream in enumerate(streams):
        alone = make(model, tok, **cfg)
        assert got[i] == [
            alone.update(text, final=n == len(stream) - 1).output_ids for n, text in enumerate(stream)
        ], i
    assert joined_mid_way > 0 and overtaken > 0
    with pytest.raises(ValueError, match="under way"):
        batched.submit(batched.translators[0], "so today", False, print)
        batched.submit(batched.translators[0], "so today we", False, print)


def test_a_stream_removed_mid_update_abandons_it(tok):
    """``remove`` during an update abandons it (no ``done``); the translator is as before that
    update, its KV handed back consistent: alone, it goes on exactly as a stream that never
    began the abandoned update."""
    model = tiny_model("qwen2", seed=8)
    rng = random.Random(4)
    stream = random_stream(rng)
    mine, ref = make(model, tok, policy="ssbd", beta=0.3), make(model, tok, policy="ssbd", beta=0.3)
    other = make(model, tok, policy="ssbd", beta=0.3)
    batched = MultiStreamTranslator([mine, other])
    assert (
        batched.update([(stream[0], False), ("so today", False)])[0].output_ids
        == ref.update(stream[0]).output_ids
    )
    ended = []
    batched.submit(mine, stream[1], False, ended.append)
    batched.submit(other, "so today we talk", False, ended.append)
    batched.round()  # its verify pass is fed (the draft in its KV), not yet decided
    batched.remove(mine)
    while batched.busy:
        batched.round()
    assert len(ended) == 1 and ended[0].source == "so today we talk"
    for text in stream[1:]:
        assert mine.update(text).output_ids == ref.update(text).output_ids


def test_a_batched_rt_nocache_stream_recomputes_everything_as_alone(tok):
    """RT without a prefix cache keeps no KV from one update to the next, in a batch as alone
    (the batch once kept its row's KV while the translator cleared an empty cache of its own)."""
    model = tiny_model("qwen2", seed=5)
    sources = ["so today", "so today we talk", "so today we talk about rules"]
    alone = make(model, tok, policy="rt-nocache")
    expected = [alone.update(s) for s in sources]
    batched = make(model, tok, policy="rt-nocache")
    batch = MultiStreamTranslator([batched])
    got = [batch.update([(s, False)])[0] for s in sources]
    assert [u.output for u in got] == [u.output for u in expected]
    assert [u.stats.reused_tokens for u in got] == [u.stats.reused_tokens for u in expected] == [0, 0, 0]
    assert [u.stats.tokens_fed for u in got] == [u.stats.tokens_fed for u in expected]


def test_a_translator_in_a_batch_updates_on_its_own_row(tok):
    """``update()`` on a translator that joined a batch runs on its row (reusing its KV), not on
    the empty cache it left behind; its outputs are those of a translator alone."""
    model = tiny_model("qwen2", seed=6)
    alone, member = make(model, tok, policy="ssbd", beta=0.3), make(model, tok, policy="ssbd", beta=0.3)
    other = make(model, tok, policy="rt")
    batch = MultiStreamTranslator([member, other])
    first = batch.update([("so today we", False), ("why we made", False)])[0]
    assert first.output == alone.update("so today we").output
    direct = member.update("so today we talk")
    assert direct.output == alone.update("so today we talk").output
    assert direct.stats.reused_tokens > 0 and len(member.cache) == 0  # its KV is in the batch row
    after = batch.update([("so today we talk about rules", True), None])[0]
    assert after.output == alone.update("so today we talk about rules", final=True).output


def test_a_translator_attaches_to_one_batch_at_a_time_and_detaches_with_its_kv(tok):
    model = tiny_model("qwen2", seed=6)
    translator, alone = make(model, tok, policy="ssbd", beta=0.3), make(model, tok, policy="ssbd", beta=0.3)
    translator.update("so today we")
    alone.update("so today we")
    held = list(translator.cache.tokens)
    batch = MultiStreamTranslator([translator])
    with pytest.raises(ValueError, match="already in a batch"):
        translator.attach(MultiStreamTranslator(model=model).batch)
    assert len(translator.cache) == 0 and translator.row.tokens == held
    batch.remove(translator)  # detaches: the KV is the translator's own again
    assert translator.row is translator.cache and translator.cache.tokens == held
    after = translator.update("so today we talk")
    assert after.output == alone.update("so today we talk").output and after.stats.reused_tokens > 0


@pytest.mark.parametrize("cfg", [dict(policy="ssbd", beta=0.3), dict(policy="rt")])
def test_the_batch_tells_the_shape_of_every_model_call(tok, cfg):
    """``BatchCache.trace`` hears of each batched call: its rows are the passes the updates
    count, its new tokens at most what they fed (refeeds aside) and the rest of rows x width is
    padding; a call attends over what the batch held before it (nothing, for the first)."""
    model = tiny_model("qwen2", seed=3)
    streams = [["so today", "so today we talk"], ["hello", "hello there, friends"], ["we", "we made it"]]
    batched = MultiStreamTranslator([make(model, tok, **cfg) for _ in streams])
    calls, updates = [], []
    batched.batch.trace = calls.append
    for step in range(2):
        for update in batched.update([(s[step], step == 1) for s in streams]):
            updates.append(update)
    assert calls[0].context == 0 and calls[0].rows == len(streams)
    assert sum(c.rows for c in calls) == sum(u.stats.forward_passes for u in updates)
    assert sum(c.new for c in calls) <= sum(u.stats.tokens_fed for u in updates)
    assert sum(u.stats.tokens_fed for u in updates) <= sum(c.rows * c.width for c in calls)
    assert all(1 <= c.logits <= c.width and c.new <= c.rows * c.width for c in calls)
    assert any(c.context > 0 for c in calls)


def test_the_runner_adds_up_the_parts_of_its_rounds_when_asked(tok):
    """``Runner.phases``: off by default; when set, every part of a round is timed, each nested
    part (the host sync, the dispatch) within the part that holds it, all within the wall."""
    import time

    model = tiny_model("qwen2", seed=3)
    batched = MultiStreamTranslator([make(model, tok, policy="ssbd", beta=0.3) for _ in range(2)])
    assert batched.runner.phases is None
    batched.update([("so today", False), ("hello", False)])  # nothing recorded, nothing fails
    batched.runner.phases = phases = {}
    start = time.perf_counter()
    batched.update([("so today we talk", True), ("hello there, friends", True)])
    wall = time.perf_counter() - start
    assert set(phases) == {"decide", "sync", "feed", "dispatch", "advance", "done"}
    assert 0 < phases["sync"] <= phases["decide"] and 0 < phases["dispatch"] <= phases["feed"]
    assert phases["decide"] + phases["feed"] + phases["advance"] + phases["done"] <= wall


@pytest.mark.parametrize("policy", ["rt", "ssbd"])
def test_no_batched_call_or_cache_operation_has_a_zero_size_operand(tok, policy, monkeypatch):
    """A GPU backend launches a kernel per operation, and an empty one is a known way to break a
    CUDA graph: 8 streams that join, pause and end at different steps never hand the model, the
    batch's KV cache or its row shifts an empty array."""
    from mlx_ssbd.engine import batch, kv_layout

    from mlx_lm.models.cache import BatchKVCache

    empty, seen = [], set()

    def watched(name, fn):
        def call(*args, **kwargs):
            seen.add(name)
            result = fn(*args, **kwargs)
            for value in (*args, *kwargs.values(), *(result if isinstance(result, tuple) else (result,))):
                if isinstance(value, mx.array) and value.size == 0:
                    empty.append((name, value.shape))
            return result

        return call

    monkeypatch.setattr(BatchKVCache, "update_and_fetch", watched("cache", BatchKVCache.update_and_fetch))
    monkeypatch.setattr(kv_layout, "dynamic_roll", watched("shift", kv_layout.dynamic_roll))
    monkeypatch.setattr(batch, "model_logits", watched("model", batch.model_logits))
    model = tiny_model("qwen2", seed=3)
    rng = random.Random(11)
    streams = [
        [(p, i == len(ps) - 1) for i, p in enumerate(ps)] for ps in (random_stream(rng) for _ in range(8))
    ]
    batched = MultiStreamTranslator([make(model, tok, policy=policy, beta=0.3) for _ in streams])
    for step in range(max(map(len, streams)) + 2):
        # stream i starts at step i % 3, so rows join and leave in every round
        batched.update(
            [s[step - i % 3] if 0 <= step - i % 3 < len(s) else None for i, s in enumerate(streams)]
        )
    assert seen == {"cache", "shift", "model"}  # rows were shifted, so the shifts were watched too
    assert not empty, empty
