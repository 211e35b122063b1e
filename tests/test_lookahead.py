"""Resync and n-gram pool drafts (source, earlier outputs): proposals, and losslessness at beta = 0."""

import functools

from mlx_ssbd import StreamTranslator, method_config
from mlx_ssbd.engine.lookahead import History, Lookahead, Proposal, Proposer, find_last, find_unique

import pytest
from test_translator import SMALL, assert_same_outputs_on_random_streams
from tiny import tiny_model


def test_find_unique_and_last():
    assert find_unique([5, 1, 2, 7, 8], [1, 2]) == 3
    assert find_unique([1, 2, 9, 1, 2], [1, 2]) is None  # ambiguous: no resync
    assert find_unique([1, 2, 9, 1, 2], [1, 2], start=2) == 5
    assert find_last([1, 2, 9, 1, 2, 4], [1, 2]) == 5
    assert find_last([3, 4], [1, 2]) is None


def test_resync_proposes_the_rest_of_the_old_draft():
    # Old draft "a b c d e f"; the update diverged at 1 and decoded "a x c d": rejoin at "e f".
    p = Proposer(old_draft=[1, 2, 3, 4, 5, 6])
    assert p([1, 9, 3, 4], accepted=1) == Proposal([5, 6], "resync")
    assert p([1, 2], accepted=2) is None  # "a b" is in the old draft only before position 2


def test_resync_may_anchor_on_the_last_token_where_the_last_two_do_not():
    # Old draft "a b c d e"; the output "x y c": "y c" is not in it, "c" is, once: rejoin at "d e".
    one_too = (2, 1)
    assert Proposer(old_draft=[1, 2, 3, 4, 5], anchors=one_too)([8, 9, 3], 0) == Proposal([4, 5], "resync")
    assert Proposer(old_draft=[1, 2, 3, 4, 5])([8, 9, 3], accepted=0) is None  # the default: two tokens
    assert Proposer(old_draft=[3, 1, 3, 5], anchors=one_too)([8, 3], accepted=0) is None  # "c" twice
    # the last two tokens first: "a c" occurs once, "c" twice
    assert Proposer(old_draft=[3, 7, 1, 3, 9], anchors=one_too)([1, 3], 0) == Proposal([9], "resync")
    # an anchor that ends the old draft has nothing to propose, and costs no attempt
    at_end = Proposer(old_draft=[1, 2, 3], anchors=one_too, max_attempts=1)
    assert at_end([9, 3], accepted=0) is None and at_end.attempts == 0


def test_ngram_proposes_source_continuations_and_attempts_are_capped():
    p = Proposer(pools=[[40, 41, 42, 43, 44]], max_attempts=2)
    assert p([7, 41, 42], 0) == Proposal([43, 44], "ngram")
    assert p([41, 42], 0).tokens == [43, 44]
    assert p([41, 42], 0) is None  # capped


def test_pools_are_searched_in_order_and_guesses_are_cut_to_pool_len():
    p = Proposer(pools=[[1, 2], [5, 1, 2, 8, 9, 10], [1, 2, 7]], pool_len=2, max_attempts=9)
    assert p([4, 1, 2], 0).tokens == [8, 9]  # the first pool ends at the match: the next one with a follower
    assert p([9, 10], 0) is None  # in no pool
    resync_first = Proposer(old_draft=[3, 1, 2, 6], pools=[[1, 2, 7]])
    assert resync_first([1, 2], 0) == Proposal([6], "resync")


def test_history_keeps_the_newest_outputs_of_the_segment_then_of_committed_segments():
    h = History(keep=2)
    h.seen([1, 2])
    h.seen([1, 2])  # repeated: nothing new
    h.seen([1, 2, 3])
    h.seen([])
    assert h.pools() == [(1, 2, 3), (1, 2)]
    h.commit([1, 2, 3, 4])
    assert h.pools() == [(1, 2, 3, 4)]  # the segment's live outputs go with it
    for output in ([7], [8], [9]):
        h.commit(output)
    h.seen([5])
    assert h.pools() == [(5,), (9,), (8,)]
    h.drop_segment()  # an abandoned segment (``StreamTranslator.reset``)
    assert h.pools() == [(9,), (8,)]


def translator(model, tok, method: str, **settings) -> StreamTranslator:
    """A translator of ``method`` (the small test budget) on a tiny model."""
    return StreamTranslator(
        model,
        tok,
        family="chatml",
        source_lang="en",
        target_lang="de",
        config=method_config(method, **SMALL, **settings),
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("method", ["ssbd", "ssbd-ngram", "ssbd-pool", "ssbd-final0", "ssbd-steady"])
def test_lookahead_at_beta0_is_token_identical_to_rt(tok, arch, method):
    model = tiny_model(arch, seed=21)
    make = functools.partial(translator, model, tok)
    stats = assert_same_outputs_on_random_streams(make("rt"), make(method, beta=0.0), streams=25, seed=99)
    proposed = sum(s.proposals for s in stats)
    accepted = sum(s.resynced + s.ngram_accepted for s in stats)
    assert proposed > 0 and accepted > 0
    # each proposal's pass is counted with its width: the decoded token and at least one proposed
    assert all(
        len(s.proposal_widths) == s.proposals and min(s.proposal_widths, default=2) >= 2 for s in stats
    )


def test_history_proposals_alone_are_accepted_and_lossless(tok):
    """Pools of earlier outputs only (no source): a random model repeats its own n-grams, so
    proposals from them are accepted, and the outputs still equal RT's at beta = 0."""
    model = tiny_model("qwen2", seed=21)
    make = functools.partial(translator, model, tok)
    pooled = make("ssbd", beta=0.0, lookahead=Lookahead(history_drafts=True, ngram_len=2))
    stats = assert_same_outputs_on_random_streams(make("rt"), pooled, streams=25, seed=99)
    assert sum(s.ngram_accepted for s in stats) > 0
    assert pooled.proposals.history.committed  # the session's committed outputs are pools


def test_pool_guesses_at_their_own_beta_leave_a_biased_update_unchanged(tok):
    """ssbd-pool checks its guesses at beta 0: at beta 0.3 its outputs are the paper's SSBD's at 0.3
    (ssbd-plain), token for token, while the guesses are accepted (fewer passes for the same text)."""
    model = tiny_model("qwen2", seed=21)
    make = functools.partial(translator, model, tok)
    stats = assert_same_outputs_on_random_streams(
        make("ssbd-plain", beta=0.3), make("ssbd-pool", beta=0.3), streams=25, seed=7
    )
    assert sum(s.ngram_accepted for s in stats) > 0


def test_pool_guesses_carry_pool_beta_and_resync_the_update_s():
    p = Proposer(old_draft=[3, 1, 2, 6], pools=[[8, 9, 5]], pool_beta=0.0)
    assert p([1, 2], 0).beta is None  # resync: checked with the update's beta
    assert p([8, 9], 0) == Proposal([5], "ngram", 0.0)
    assert Proposer(pools=[[8, 9, 5]])([8, 9], 0).beta is None


def test_lookahead_settings_are_checked():
    with pytest.raises(ValueError, match="ngram_len"):
        Lookahead(ngram_len=0)
    with pytest.raises(ValueError):
        Lookahead(ngram_beta=1.5)
    for anchors in ((), (0,), (2, "1")):
        with pytest.raises(ValueError, match="resync_anchors"):
            Lookahead(resync=True, resync_anchors=anchors)
    assert not Lookahead().proposes and Lookahead(resync=True).proposes


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="unknown method 'turbo'"):
        method_config("turbo")


def greedy(model, prompt, n):
    """n greedy tokens after ``prompt``, one plain forward each (independent of the engine)."""
    from mlx_ssbd.engine.cache import TokenCache

    cache, out = TokenCache(model), []
    logits = cache.forward(prompt)[-1]
    for _ in range(n):
        out.append(int(logits.argmax().item()))
        logits = cache.forward([out[-1]])[-1]
    return out


def copy_job(prompt, proposal_source):
    from mlx_ssbd.engine.update import Job

    return Job(
        head=prompt,
        locked=(),
        draft=[],
        beta=0.0,
        max_new=40,
        stops=lambda t: None,
        proposer=Proposer(pools=[proposal_source], max_attempts=10),
    )


@pytest.mark.parametrize("batched", [False, True])
def test_copy_through_proposals_reproduce_greedy_with_fewer_passes(tok, batched):
    """With the greedy output itself as the 'source', n-gram proposals must be accepted and the
    result must equal plain greedy decoding token for token, alone and in a batch of two streams
    (the second one proposing nothing)."""
    from mlx_ssbd.engine.batch import BatchCache
    from mlx_ssbd.engine.cache import TokenCache
    from mlx_ssbd.engine.update import run

    model = tiny_model("qwen2", seed=5)
    prompts = [
        tok.encode(f"<|im_start|>user\n{t}<|im_end|>\n", add_special_tokens=False) for t in ("so today", "we")
    ]
    references = [greedy(model, p, 40) for p in prompts]
    jobs = [copy_job(prompts[0], references[0]), copy_job(prompts[1], [])]
    if batched:
        feeder = BatchCache(model)
        rows = [feeder.join(TokenCache(model)) for _ in jobs]
    else:
        jobs, feeder = jobs[:1], TokenCache(model)
        rows = [feeder]
    outcomes = run(feeder, list(zip(rows, jobs)))
    for outcome, reference in zip(outcomes, references):
        assert outcome.output == reference
    assert outcomes[0].proposed["ngram"] > 0 and outcomes[0].proposals > 0
    assert outcomes[0].passes < 40  # fewer passes than one per token


def test_one_table_names_every_method():
    """METHODS is the one vocabulary: the four policies are its plain entries, every other entry
    is a policy plus features, and every name builds a config with its own description."""
    from mlx_ssbd import METHODS, POLICIES

    assert POLICIES == ("rt", "rt-nocache", "ssbd", "cd")
    for name, method in METHODS.items():
        config = method_config(name)
        assert config.policy == method.policy in POLICIES and method.about
        assert all(getattr(config, key) == value for key, value in method.features)
