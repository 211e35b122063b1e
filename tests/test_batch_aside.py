"""Rows parked together (``engine.batch.Aside``): set aside in one copy, back as a block or a few
at a time, or leaving the batch, each row keeps exactly its own keys and values."""

from mlx_ssbd.engine.batch import Aside, BatchCache
from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.update import Feed

import mlx.core as mx
from tiny import tiny_model

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15], [16, 17]]


def alone_logits(model, ids: list[int]) -> mx.array:
    cache = TokenCache(model)
    return cache.feed([(cache, Feed(ids, 1))])[0].logits


def close(a: mx.array, b: mx.array) -> bool:
    return mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()


def test_rows_parked_together_come_back_and_leave_with_their_own_keys():
    model = tiny_model("qwen2", seed=8)
    batch = BatchCache(model, call_tokens=None)
    rows = [batch.join(TokenCache(model)) for _ in PROMPTS]
    held = [list(ids) for ids in PROMPTS]
    batch.feed([(row, Feed(ids, 1)) for row, ids in zip(rows, held)])
    held[0].append(1)
    batch.feed([(rows[0], Feed(held[0], 1))])  # the other four sit it out: parked together
    aside = rows[1].parked
    assert isinstance(aside, Aside) and all(row.parked is aside for row in rows[1:])
    # two of them come back without the others (copied out of it), beside the running row
    for b in (0, 1, 2):
        held[b].append(2 + b)
    fed = batch.feed([(rows[b], Feed(held[b], 1)) for b in (0, 1, 2)])
    for b, answer in zip((0, 1, 2), fed):
        assert close(answer.rows(1), alone_logits(model, held[b])), b
    assert rows[3].parked is aside and rows[4].parked is aside and aside.rows == [rows[3], rows[4]]
    # one leaves with its own keys; the last comes back on its own
    out = TokenCache(model)
    batch.leave(rows[3], into=out)
    assert out.tokens == held[3]
    assert close(out.feed([(out, Feed([*held[3], 9], 1))])[0].logits, alone_logits(model, [*held[3], 9]))
    held[4].append(7)
    (answer,) = batch.feed([(rows[4], Feed(held[4], 1))])
    assert close(answer.rows(1), alone_logits(model, held[4]))
    assert all(row.parked is not aside for row in rows)  # nothing refers to it any more


def test_a_block_parked_together_comes_back_as_it_is():
    """All of an aside's rows back at once: its layout joins the batch as it is (no copy out); and
    all of the batch's rows set aside take its layout as it is."""
    model = tiny_model("qwen2", seed=8)
    batch = BatchCache(model, call_tokens=None)
    rows = [batch.join(TokenCache(model)) for _ in PROMPTS[:3]]
    batch.feed([(row, Feed(ids, 1)) for row, ids in zip(rows, PROMPTS)])
    batch.feed([(rows[0], Feed([*PROMPTS[0], 1], 1))])
    aside, running = rows[1].parked, batch.kv
    batch._park([rows[0]])  # every row of the batch: its layout goes aside as it is
    assert batch.kv is None and rows[0].parked.kv is running
    keys = aside.kv.layers[0].keys
    batch._unpark([rows[2], rows[1]])
    assert batch.kv.layers[0].keys is keys and batch.rows == [rows[1], rows[2]]  # its order, its arrays
