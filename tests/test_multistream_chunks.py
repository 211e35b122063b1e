"""Long feeds in a batch: a long prompt or verify pass goes a chunk per call beside other streams'
steps, and every stream still gets exactly its single-stream output."""

import dataclasses
import random

from mlx_ssbd.engine.batch import BatchCache
from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.update import Feed
from mlx_ssbd.live.multistream import MultiStreamTranslator

import mlx.core as mx
import pytest
from test_multistream import make
from test_translator import random_stream
from tiny import tiny_model


def test_a_long_prompt_is_fed_a_chunk_per_round_while_others_decode(tok):
    """One stream's long source is fed ``chunk`` tokens per round (one pass each) while a short
    stream's update runs through its rounds beside it and ends first; both get the outputs they
    get alone, and no round feeds a row more than a chunk (plus the logits it asked for)."""
    model = tiny_model("qwen2", seed=8)
    long_source = " ".join(["so today we talk about the new rules"] * 12)  # ~450 byte tokens
    batched = MultiStreamTranslator([make(model, tok, policy="rt") for _ in range(2)], chunk=32)
    widths = []
    feed = batched.batch.feed
    batched.batch.feed = lambda feeds: widths.append(max(len(f.ids) for _, f in feeds)) or feed(feeds)
    ended = []
    long_tr, short_tr = batched.translators
    batched.submit(long_tr, long_source, True, lambda u: ended.append(("long", u)))
    batched.round()
    batched.submit(short_tr, "so today", True, lambda u: ended.append(("short", u)))
    while batched.busy:
        batched.round()
    assert [name for name, _ in ended] == ["short", "long"]  # the short update did not wait for the prompt
    outputs = {name: update for name, update in ended}
    for name, source in (("long", long_source), ("short", "so today")):
        alone = make(model, tok, policy="rt").update(source, final=True)
        assert outputs[name].output_ids == alone.output_ids, name
    prompt = len(long_tr.prompts.build(long_source).ids)
    assert outputs["long"].stats.forward_passes >= prompt // 32  # a pass per chunk
    assert outputs["long"].stats.tokens_fed >= prompt


def test_a_long_prompt_feeds_a_small_chunk_while_other_streams_share_the_batch():
    """Alone in the batch, a long prompt goes ``chunk`` tokens a call; once another stream is in it,
    ``shared_chunk``; beside a short feed (a decode step, a short verify pass), only as many as the
    widest short feed takes, at least ``side_chunk``, so that call costs about what it costs alone
    (where every round is one call: a GPU)."""
    model = tiny_model("qwen2", seed=8)
    batch = BatchCache(model, chunk=64, shared_chunk=16, side_chunk=4, call_tokens=None)
    long_row = batch.join(TokenCache(model))
    prompt = list(range(10, 410))
    alone = batch.feed([(long_row, Feed(prompt, 1))])[0]
    assert (alone.fed, alone.done) == (64, False)
    short_row = batch.join(TokenCache(model))
    assert batch.feed([(long_row, Feed(prompt, 1))])[0].fed == 16  # another stream shares the batch
    assert batch.feed([(short_row, Feed([5, 6, 7], 1))])[0].done  # a short feed goes whole
    beside = batch.feed([(long_row, Feed(prompt, 1)), (short_row, Feed([5, 6, 7, 8], 1))])
    assert (beside[0].fed, beside[0].done) == (4, False) and beside[1].done  # the call is 4 wide
    verify = batch.feed([(long_row, Feed(prompt, 1)), (short_row, Feed([5, 6, 7, 8, *range(30, 42)], 12))])
    assert (verify[0].fed, verify[1].fed) == (12, 12)  # beside a 12-token verify pass: the call's width
    both_long = batch.feed([(long_row, Feed(prompt, 1)), (short_row, Feed([5, 6, 7, 8, *prompt], 1))])
    assert [f.fed for f in both_long] == [16, 16]  # no short feed in the call: the shared chunk
    batch.leave(short_row, into=TokenCache(model))
    assert batch.feed([(long_row, Feed(prompt, 1))])[0].fed == 64  # alone again
    for bad in ({"chunk": 0}, {"side_chunk": 0}, {"shared_chunk": 0}, {"heavy_every": 0}):
        with pytest.raises(ValueError, match="must be at least 1"):
            BatchCache(model, **bad)


def test_a_long_verify_pass_is_fed_a_chunk_per_call_its_logits_in_pieces():
    """A feed asking for the logits of many tokens (a verify pass of a long draft) beside a decode
    step goes ``side_chunk`` tokens a call too (in one call a round: a GPU), until what is left fits
    one ``chunk``; the pieces of logits it gets back, in order, are the logits the whole pass gives
    alone."""
    model = tiny_model("qwen2", seed=8)
    ids = list(range(10, 110))
    ref = TokenCache(model)
    want = ref.feed([(ref, Feed(ids, 40))])[0].logits
    batch = BatchCache(model, chunk=16, side_chunk=4, call_tokens=None)
    long_row, short_row = batch.join(TokenCache(model)), batch.join(TokenCache(model))
    short = [5, 6, 7]
    batch.feed([(short_row, Feed(short, 1))])
    request, pieces, calls = Feed(ids, 40), [], 0
    while True:
        short.append(len(short) + 5)
        fed, step = batch.feed([(long_row, request), (short_row, Feed(short, 1))])
        calls += 1
        assert step.done
        if fed.done:
            assert fed.fed <= 16  # the last 16 go whole
            pieces.append(fed.rows(request.logits))
            break
        assert fed.fed <= 4 and step.fed <= 4  # the decode step's call stays 4 wide
        if fed.piece is not None:
            pieces.append(fed.piece)
            request = dataclasses.replace(request, logits=request.logits - fed.piece.shape[0], reuse=True)
    got = mx.concatenate(pieces)
    assert calls == (100 - 16) // 4 + 1 and got.shape == want.shape
    assert mx.array_equal(mx.argmax(got, -1), mx.argmax(want, -1)).item()
    assert mx.allclose(got, want, atol=1e-4, rtol=1e-4).item()


@pytest.mark.parametrize("policy", ["ssbd", "rt"])
def test_streams_with_long_drafts_chunked_equal_single_streams(tok, policy):
    """With a small chunk every verify pass of a long draft is fed over several rounds beside the
    other streams' steps; each stream's outputs are still its own alone."""
    model = tiny_model("qwen2", seed=8)
    rng = random.Random(11)
    streams = [random_stream(rng) for _ in range(3)]
    batched = MultiStreamTranslator([make(model, tok, policy=policy, beta=0.3) for _ in range(3)], chunk=4)
    alone = [make(model, tok, policy=policy, beta=0.3) for _ in range(3)]
    chunked = 0
    for step in range(max(len(s) for s in streams)):
        sources = [(s[step], step == len(s) - 1) if step < len(s) else None for s in streams]
        for i, (result, item) in enumerate(zip(batched.update(sources), sources)):
            if item is None:
                continue
            single = alone[i].update(item[0], final=item[1])
            assert result.output_ids == single.output_ids, (i, step)
            assert result.stats.accepted == single.stats.accepted
            chunked += result.stats.forward_passes > single.stats.forward_passes
    assert chunked  # some verify pass really went in several calls


def test_the_planner_rests_heavy_rows_splits_calls_by_width_and_bounds_chunks():
    """The round's plan alone, no model: a heavy row joins one call in ``heavy_every``; on a CPU
    (``call_tokens``) three decode steps and a long feed go in two calls, each bounded by the
    shared chunk; in one call a round (a GPU) the long feed takes only the side chunk."""
    from mlx_ssbd.engine.planner import Planner, Request

    class Row:  # a handle: the planner keeps weak references to rows
        pass

    steps, wide = [Row() for _ in range(3)], Row()
    requests = [*(Request(row, 40, 1) for row in steps), Request(wide, 70, 30)]
    cpu = Planner(chunk=64, shared_chunk=16, side_chunk=4, call_tokens=4)
    plan = cpu.plan(requests, members=4)
    assert plan.resting == [] and sorted((len(rows), limit) for rows, limit in plan.calls) == [
        (1, 16),
        (3, 16),
    ]
    gpu = Planner(chunk=64, shared_chunk=16, side_chunk=4, call_tokens=None)
    assert gpu.plan(requests, members=4).calls == [([*steps, wide], 4)]
    assert gpu.plan(requests[:1], members=1).calls == [([steps[0]], 64)]  # alone: the whole chunk
    heavy = Planner(heavy=100, heavy_ratio=4.0, heavy_every=3, call_tokens=None)
    long = Request(wide, 600, 1)
    rested = [heavy.plan([Request(steps[0], 40, 1), long], members=2).resting for _ in range(6)]
    assert rested == [[wide], [wide], [], [wide], [wide], []]
    assert heavy.plan([Request(steps[0], 40, 1), Request(wide, 600, 600, reuse=False)], 2).resting == []


def test_the_cpu_split_by_width_costs_least():
    """On a CPU the rows go in the calls that cost least in all (each ``call_tokens`` plus its rows
    x its widest row's tokens): checked against every way to cut the rows, sorted by width."""
    import random

    from mlx_ssbd.engine.planner import Planner, Request

    class Row:
        pass

    def least(widths, call_tokens):  # the best cost over every cut of the sorted widths
        widths, best = sorted(widths), [0]
        for end in range(1, len(widths) + 1):
            best.append(min(best[s] + call_tokens + (end - s) * widths[end - 1] for s in range(end)))
        return best[-1]

    rng = random.Random(7)
    for _ in range(300):
        call_tokens = rng.choice([1, 4, 12, 40])
        planner = Planner(chunk=64, shared_chunk=16, call_tokens=call_tokens)
        requests = [
            Request(Row(), 100, rng.choice([1, 1, 1, 2, 3, 5, 16, 30])) for _ in range(rng.randint(2, 24))
        ]
        calls = planner.plan(requests, members=len(requests)).calls
        assert sorted(id(row) for rows, _ in calls for row in rows) == sorted(id(r.row) for r in requests)
        width = {id(r.row): min(r.new, 16) for r in requests}
        cost = sum(call_tokens + len(rows) * max(width[id(row)] for row in rows) for rows, _ in calls)
        assert cost == least(width.values(), call_tokens)
