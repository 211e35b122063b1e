"""The fused accept rule against the explicit biased mixture, one pass's decision from its logits, and
many decisions made at once (``decide_rows``, the runner's grouping of a round's decisions)."""

import random
from fractions import Fraction

from mlx_ssbd.engine.requests import Fed
from mlx_ssbd.engine.update import Job
from mlx_ssbd.engine.update import run as engine_run
from mlx_ssbd.engine.verify import accept_mask, accept_threshold, decide, decide_rows

import mlx.core as mx
import numpy as np
import pytest

BETAS = ["0", "0.2", "0.5", "1"]


def explicit_accept(probs: np.ndarray, draft: np.ndarray, beta: str) -> list[bool]:
    """argmax of p' = (1 - beta) p + beta onehot(y) is y (ties go to the draft), in exact rationals."""
    b = Fraction(beta)
    out = []
    for p, y in zip(probs, draft):
        mixed = [(1 - b) * Fraction(float(v)) for v in p]
        mixed[y] += b
        out.append(mixed[y] >= max(mixed))
    return out


def fused(probs: np.ndarray, draft: np.ndarray, beta: str) -> list[bool]:
    thr = mx.array(accept_threshold(float(beta)), dtype=mx.float32)
    return accept_mask(mx.array(probs), mx.array(draft), thr).tolist()


@pytest.mark.parametrize("beta", BETAS)
def test_fused_rule_equals_mixture_argmax_on_random_logits(beta):
    rng = np.random.default_rng(int(float(beta) * 10))
    for _ in range(20):
        logits = rng.normal(size=(16, 50)).astype(np.float32) * rng.uniform(0.5, 4)
        probs = np.array(mx.softmax(mx.array(logits), axis=-1, precise=True))
        # Drafts mixing the argmax, the runner-up and random tokens.
        order = np.argsort(-probs, axis=-1)
        choice = rng.integers(0, 3, size=16)
        draft = np.where(
            choice == 0, order[:, 0], np.where(choice == 1, order[:, 1], rng.integers(0, 50, 16))
        )
        assert fused(probs, draft, beta) == explicit_accept(probs, draft, beta)


@pytest.mark.parametrize(
    "beta,p_max,p_draft,expected",
    [
        ("0", 0.5, 0.5, True),  # exact tie with the argmax: goes to the draft
        ("0", 0.5, 0.25, False),
        ("0.2", 0.5, 0.25, True),  # gap 0.25 == 0.2/0.8: at the threshold
        ("0.2", 0.5, 0.25 - 2**-20, False),  # just past it
        ("0.5", 1.0, 0.0, True),  # gap 1 == 0.5/0.5
        ("1", 1.0, 0.0, True),
    ],
)
def test_ties_at_the_threshold(beta, p_max, p_draft, expected):
    rest = 1.0 - p_max - p_draft
    probs = np.array([[p_max, p_draft, rest, 0.0]], dtype=np.float32)
    draft = np.array([1])
    assert explicit_accept(probs, draft, beta) == [expected]
    assert fused(probs, draft, beta) == [expected]


def test_threshold_rejects_out_of_range_beta():
    with pytest.raises(ValueError, match="beta"):
        accept_threshold(1.5)
    with pytest.raises(ValueError, match="beta"):
        accept_threshold(-0.1)


@pytest.mark.parametrize("beta", [0.0, 0.2, 1.0])
def test_accept_count_and_next_token_from_logits(beta):
    rng = np.random.default_rng(3)
    for m in (1, 5, 17):
        logits = rng.normal(size=(m + 1, 40)).astype(np.float32) * 3
        draft = rng.integers(0, 40, size=m)
        draft[: m // 2] = logits[: m // 2].argmax(-1)  # a greedy-agreeing head
        got_d, got_next = decide(mx.array(logits), draft.tolist(), beta).tolist()
        probs = np.array(mx.softmax(mx.array(logits), axis=-1, precise=True))
        accepts = explicit_accept(probs[:m], draft, str(beta))
        d = next((i for i, a in enumerate(accepts) if not a), m)
        assert got_d == d
        assert got_next == int(logits[d].argmax())
        if beta == 1.0:
            assert got_d == m


def test_decisions_follow_the_vocabulary_size():
    """Vocabularies of any size (whole sets of 16 lanes or not), one after another: the greedy
    token is the first index of the largest logit, a tie included."""
    rng = np.random.default_rng(5)
    for vocab in (262, 40, 262, 97, 16, 1):
        logits = rng.normal(size=(4, vocab)).astype(np.float32)
        logits[1, vocab // 2 :] = logits[1].max() + 1  # a tie at the top: the first index wins
        for row in range(4):
            assert decide(mx.array(logits[: row + 1]), [], 0.2).tolist() == [0, int(logits[row].argmax())]
        greedy = logits.argmax(-1).tolist()
        assert decide(mx.array(logits[:3]), greedy[:2], 0.0).tolist() == [2, greedy[2]]


def test_rows_of_a_batched_call_are_decided_as_each_alone():
    """``decide_rows`` gives every row what ``decide`` gives it alone: drafts of every length
    (none, a decode step, included), both rules, betas from 0 to 1, rows in any order."""
    rng = np.random.default_rng(11)
    B, P, V = 7, 9, 60
    logits = mx.array(rng.normal(size=(B, P, V)).astype(np.float32) * 3)
    greedy = np.array(logits).argmax(-1)
    items = []
    for b, m in zip([3, 0, 6, 1, 5, 2, 4, 0], [0, 8, 3, 1, 0, 5, 2, 4]):
        rows = np.array(logits[b, P - m - 1 :])
        draft = rng.integers(0, V, size=m)
        agree = int(rng.integers(0, m + 1))
        draft[:agree] = greedy[b, P - m - 1 : P - m - 1 + agree]  # a greedy-agreeing head
        runner_up = np.argsort(-rows, axis=-1)[:, 1]
        draft[agree : agree + 1] = runner_up[agree : agree + 1]  # then a near miss, where one fits
        beta, rule = float(rng.choice([0.0, 0.2, 0.5, 1.0])), str(rng.choice(["mixture", "ratio"]))
        items.append((b, draft.tolist(), beta, rule))
    # the call's rows flattened: item b's pass is its last m + 1 positions
    firsts = [(b + 1) * P - len(draft) - 1 for b, draft, _, _ in items]
    got = decide_rows(logits.reshape(B * P, V), [(f, *item[1:]) for f, item in zip(firsts, items)]).tolist()
    for (b, draft, beta, rule), pair in zip(items, got):
        assert pair == decide(logits[b, P - len(draft) - 1 :], draft, beta, rule=rule).tolist()
    assert any(0 < accepted < len(draft) for (_, draft, _, _), (accepted, _) in zip(items, got))
    # decode steps alone: every row's, or some rows' in any order
    flat = logits.reshape(B * P, V)
    for rows in (list(range(B * P)), [5, 2, 40, 2]):
        steps = decide_rows(flat, [(r, [], 0.2, "mixture") for r in rows]).tolist()
        assert steps == [[0, int(np.array(flat[r]).argmax())] for r in rows]
    # passes of their own, side by side (as several streams' chunked passes are decided)
    passes = [logits[b, P - len(draft) - 1 :] for b, draft, _, _ in items]
    ends = np.cumsum([p.shape[0] for p in passes])
    side = [(int(end) - len(d) - 1, d, beta, rule) for end, (_, d, beta, rule) in zip(ends, items)]
    assert decide_rows(mx.concatenate(passes), side).tolist() == got


class OwnLogits:
    """A feeder whose every answer is logits of its own, as a verify pass fed in chunks gets (no
    batched call to decide from): row i of a feed is a fixed random function of the ids before it."""

    VOCAB = 40

    def feed(self, feeds):
        return [
            Fed(mx.stack([self.row(feed.ids[:n]) for n in range(len(feed.ids) - feed.logits + 1, len(feed.ids) + 1)]),
                0, len(feed.ids))
            for _, feed in feeds
        ]  # fmt: skip

    def row(self, ids) -> mx.array:
        seed = hash(tuple(int(t) for t in ids)) % 2**31  # ints hash alike in every process
        return mx.array(np.random.default_rng(seed).normal(size=self.VOCAB).astype(np.float32) * 3)

    def greedy(self, ids: list, n: int) -> list:
        for _ in range(n):
            ids = [*ids, int(mx.argmax(self.row(ids)).item())]
        return ids[-n:] if n else []


def test_decisions_over_logits_of_their_own_are_made_together_as_each_alone():
    """Several streams deciding in one round over logits of their own (a pass fed in chunks) are
    decided together (one ``decide_rows``); each gets what it gets alone: drafts of different
    lengths, partly accepted, both rules, beta 0 to 0.5, and the decode steps after them."""
    feeder, rng = OwnLogits(), random.Random(5)
    jobs = []
    for i in range(5):
        head = [1, 2, 3 + i]
        agree, length = rng.randint(0, 4), rng.randint(0, 7)
        draft = (feeder.greedy(head, agree) + [rng.randrange(OwnLogits.VOCAB) for _ in range(length)])[
            :length
        ]
        beta, rule = rng.choice([0.0, 0.2, 0.5]), rng.choice(["mixture", "ratio"])
        jobs.append(Job(head, [], draft, beta, max_new=len(draft) + 3, stops=lambda t: None, rule=rule))
    together = engine_run(feeder, [(object(), job) for job in jobs])
    for job, outcome in zip(jobs, together):
        alone = engine_run(feeder, [(object(), job)])[0]
        assert (outcome.output, outcome.accepted) == (alone.output, alone.accepted)
    assert any(0 < o.accepted < len(job.draft) for job, o in zip(jobs, together))  # partial accepts


def test_a_decode_step_is_one_request_that_names_what_the_cache_holds(monkeypatch):
    """After the verify pass (a feed, then its decision), each decoded token costs one request: a
    feed answered with its decision, whose ``held`` counts every id but the new token."""
    from mlx_ssbd.engine import update

    seen, original = [], update.update_requests

    def recorded(job):
        requests, answer = original(job), None
        while True:
            try:
                request = requests.send(answer)
            except StopIteration as end:
                return end.value
            seen.append((request, list(getattr(request, "ids", ()))))  # ids as asked (a job's own list)
            answer = yield request

    monkeypatch.setattr(update, "update_requests", recorded)
    feeder, head = OwnLogits(), [1, 2, 3]
    draft = [*feeder.greedy(head, 2), (feeder.greedy(head, 3)[-1] + 1) % OwnLogits.VOCAB]
    job = Job(head, [], draft, 0.0, max_new=8, stops=lambda t: None)
    outcome = engine_run(feeder, [(object(), job)])[0]
    assert (outcome.output, outcome.accepted) == (feeder.greedy(head, 8), 2)
    (verify, _), (decision, _), *steps = seen
    assert isinstance(verify, update.Feed) and verify.decide is None and isinstance(decision, update.Decide)
    assert len(steps) == 8 - 2 - 1  # the last token is decided by the step before it
    assert all(isinstance(s, update.Feed) and s.decide is not None for s, _ in steps)
    assert [ids for _, ids in steps] == [[*head, *outcome.output[: n + 1]] for n in range(2, 7)]
    assert [s.held for s, ids in steps] == [len(ids) - 1 for _, ids in steps]
