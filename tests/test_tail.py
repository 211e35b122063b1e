"""Tail guesses from a draft model: lossless at beta = 0 (and equal to plain SSBD at beta > 0),
fewer passes when the guess holds, batched = single, clear errors."""

import random
from dataclasses import replace

from mlx_ssbd import StreamTranslator, method_config
from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.tail import TailDrafter
from mlx_ssbd.engine.update import Job, run
from mlx_ssbd.live.multistream import MultiStreamTranslator

import pytest
from test_lookahead import greedy
from test_translator import SMALL, assert_same_outputs_on_random_streams, random_stream
from tiny import bpe_tokenizer, tiny_model


def make(model, tok, method, draft=None, **settings):
    config = method_config(method, **{**SMALL, **{k: v for k, v in settings.items() if k != "tail_guess"}})
    if "tail_guess" in settings:
        config = replace(config, tail_guess=settings["tail_guess"])
    tr = StreamTranslator(
        model,
        tok,
        family="chatml",
        source_lang="en",
        target_lang="de",
        config=config,
        draft_model=(draft, tok) if draft is not None else None,
    )
    if tr.proposals.drafter is not None:
        tr.proposals.drafter.min_prob = 0.0  # random tiny models: guess every time
    return tr


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("method", ["ssbd-tail"])
def test_tail_guesses_at_beta0_are_token_identical_to_rt(tok, arch, method):
    model, drafter = tiny_model(arch, seed=7), tiny_model(arch, seed=8)  # a drafter that is often wrong
    stats = assert_same_outputs_on_random_streams(
        make(model, tok, "rt"), make(model, tok, method, drafter, beta=0.0), streams=25, seed=3
    )
    # guesses were rejected too
    assert sum(s.tail_guessed for s in stats) > sum(s.tail_accepted for s in stats)


def test_a_good_drafter_saves_passes_and_changes_nothing_at_beta_above_0(tok):
    """With the model itself as drafter every guess is the greedy continuation: the outputs equal
    plain SSBD's at the same beta (the guess is checked at beta = 0, after the biased draft), and
    the model makes fewer passes."""
    model = tiny_model("qwen2", seed=7)
    plain, tail = make(model, tok, "ssbd", beta=0.3), make(model, tok, "ssbd-tail", model, beta=0.3)
    rng = random.Random(11)
    passes = {"plain": 0, "tail": 0}
    for _ in range(15):
        prefixes = random_stream(rng)
        for i, prefix in enumerate(prefixes):
            final = i == len(prefixes) - 1
            a, b = plain.update(prefix, final=final), tail.update(prefix, final=final)
            assert a.output_ids == b.output_ids
            passes["plain"] += a.stats.forward_passes
            passes["tail"] += b.stats.forward_passes
            assert b.stats.draft_model_passes >= 1 or b.stats.unchanged or b.stats.tail_guessed == 0
    assert passes["tail"] < passes["plain"] * 0.8, passes


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("guess_kind", ["greedy", "wrong", "half"])
def test_a_drafted_tail_equals_plain_greedy_decoding(tok, batched, guess_kind):
    """Engine level: whatever the guess, the output is greedy decoding's, token for token."""
    from mlx_ssbd.engine.batch import BatchCache

    model = tiny_model("llama", seed=5)
    prompt = tok.encode("<|im_start|>user\nso today<|im_end|>\n", add_special_tokens=False)
    reference = greedy(model, prompt, 20)
    guess = {
        "greedy": reference[3:9],
        "wrong": [(t + 1) % 256 for t in reference[3:9]],
        "half": [*reference[3:6], (reference[6] + 1) % 256, *reference[7:9]],
    }[guess_kind]
    job = Job(
        head=prompt, locked=(), draft=reference[:3], beta=0.0, max_new=20, stops=lambda t: None, guess=guess
    )
    if batched:
        store = BatchCache(model)
        row = store.join(TokenCache(model))
    else:
        store = row = TokenCache(model)
    outcome = run(store, [(row, job)])[0]
    assert outcome.output == reference
    assert outcome.accepted == 3
    assert outcome.guess_accepted == {"greedy": 6, "wrong": 0, "half": 3}[guess_kind]
    assert outcome.passes == 1 + 17 - outcome.guess_accepted - 1  # verify pass, then one step per token


def test_the_drafter_continues_the_big_models_draft_and_keeps_stop_tokens(tok):
    model = tiny_model("qwen2", seed=5)
    prompt = tok.encode("<|im_start|>user\nso today<|im_end|>\n", add_special_tokens=False)
    reference = greedy(model, prompt, 12)
    stop = reference[7]
    drafter = TailDrafter(model, lambda t: () if t == stop else None, max_len=6, min_prob=0.0)
    assert drafter.guess(prompt, reference[:4]) == reference[4:8]  # ends with the raw stop token
    assert drafter.guess(prompt, []) == reference[:6]  # an empty draft: a guess from scratch
    assert drafter.cache.tokens[: len(prompt)] == prompt  # its cache keeps the prompt
    drafter.min_prob = 1.01  # no token is that sure: no guess
    assert drafter.guess(prompt, reference[:4]) == []


def test_batched_streams_with_tail_guesses_equal_single_streams(tok):
    model, drafter = tiny_model("qwen2", seed=7), tiny_model("qwen2", seed=8)
    rng = random.Random(6)
    streams = [random_stream(rng) for _ in range(3)]
    batched = MultiStreamTranslator([make(model, tok, "ssbd-tail", drafter, beta=0.3) for _ in streams])
    alone = [make(model, tok, "ssbd-tail", drafter, beta=0.3) for _ in streams]
    for step in range(max(len(s) for s in streams)):
        sources = [(s[step], step == len(s) - 1) if step < len(s) else None for s in streams]
        for i, (result, item) in enumerate(zip(batched.update(sources), sources)):
            if item is not None:
                assert result.output_ids == alone[i].update(item[0], final=item[1]).output_ids


def test_tail_guess_needs_a_draft_model_with_the_same_vocabulary(tok):
    model = tiny_model("qwen2", seed=7)
    with pytest.raises(ValueError, match="needs a draft model"):
        make(model, tok, "ssbd-tail")
    with pytest.raises(ValueError, match="vocabulary"):
        StreamTranslator(
            model,
            tok,
            family="chatml",
            source_lang="en",
            target_lang="de",
            config=method_config("ssbd-tail"),
            draft_model=(model, bpe_tokenizer()),
        )


def test_sampling_with_a_tail_guess_runs(tok):
    model = tiny_model("qwen2", seed=7)
    tr = make(model, tok, "ssbd-tail", model, beta=0.2, temperature=0.8, seed=1)
    for prefix in ["so today", "so today I want", "so today I want to talk"]:
        assert tr.update(prefix).output_ids
