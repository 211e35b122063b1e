"""The acceptance rules of the verify step: each accepts exactly what its definition says, and
every rule at beta = 0 is greedy decoding (RT token for token)."""

import random
from fractions import Fraction

from mlx_ssbd import StreamTranslator
from mlx_ssbd.engine.verify import RULES, bounds, decide
from mlx_ssbd.live.methods import COMMIT_BETA, COMMIT_BETAS, DEFAULT_METHOD, TranslatorConfig, method_config

import mlx.core as mx
import numpy as np
import pytest
from test_translator import SMALL, assert_same_outputs_on_random_streams, random_stream
from tiny import byte_tokenizer, tiny_model


def definition(rule: str, p: np.ndarray, y: int, beta: str) -> bool:
    """Each rule as written in ``engine.verify``, in exact rationals."""
    b, probs = Fraction(beta), [Fraction(float(v)) for v in p]
    if rule == "mixture":  # argmax of (1 - b) p + b onehot(y) is y, ties to the draft
        mixed = [(1 - b) * v for v in probs]
        mixed[y] += b
        return mixed[y] >= max(mixed)
    if rule == "ratio":  # p[y] >= (1 - b) max p
        return probs[y] >= (1 - b) * max(probs)
    raise AssertionError(rule)


def fused_decisions(rule: str, probs: np.ndarray, draft: np.ndarray, beta: str) -> int:
    """Leading accepts of ``decide`` on logits whose softmax is ``probs``."""
    rows = mx.log(mx.array(np.vstack([probs, probs[-1:]])))
    return decide(rows, draft.tolist(), float(beta), rule=rule).tolist()[0]


@pytest.mark.parametrize(
    "p_max,p_draft,beta,mixture,ratio",
    [
        (0.6, 0.34, "0.2", False, False),  # gap 0.26: over 0.25, and 0.34 < 0.8 * 0.6
        (0.6, 0.36, "0.2", True, False),  # gap 0.24 passes the mixture; the ratio wants 0.48
        (0.3, 0.06, "0.2", True, False),  # an unsure model: 0.06 passes the mixture's 0.25 gap
        (0.3, 0.25, "0.2", True, True),  # 0.25 >= 0.8 * 0.3
        (0.5, 0.25, "0.5", True, True),  # exactly at both bounds: ties go to the draft
        (0.5, 0.5, "0", True, True),  # a tie with the top choice at beta 0
        (0.5, 0.25, "0", False, False),
    ],
)
def test_each_rule_accepts_what_its_definition_says_on_hand_made_probabilities(
    p_max, p_draft, beta, mixture, ratio
):
    rest = 1.0 - p_max - p_draft  # spread thinly, below both
    probs = np.array([[p_max, p_draft, *[rest / 10] * 10]])
    for rule, expected in (("mixture", mixture), ("ratio", ratio)):
        assert definition(rule, probs[0], 1, beta) == expected, rule
        assert fused_decisions(rule, probs, np.array([1]), beta) == int(expected), rule


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("beta", ["0", "0.2", "0.5", "1"])
def test_the_decision_equals_the_definition_on_random_logits(rule, beta):
    rng = np.random.default_rng(int(float(beta) * 10) + len(rule))
    for _ in range(30):
        logits = rng.normal(size=(12, 40)) * rng.uniform(0.5, 4)
        probs = np.array(
            mx.softmax(mx.array(logits, dtype=mx.float32), axis=-1, precise=True), dtype=np.float64
        )
        order = np.argsort(-probs, axis=-1)
        choice = rng.integers(0, 3, size=12)
        draft = np.where(
            choice == 0, order[:, 0], np.where(choice == 1, order[:, 1], rng.integers(0, 40, 12))
        )
        accepts = [definition(rule, p, y, beta) for p, y in zip(probs, draft)]
        leading = next((i for i, a in enumerate(accepts) if not a), len(accepts))
        assert fused_decisions(rule, probs.astype(np.float32), draft, beta) == leading


def test_a_draft_token_near_the_top_passes_with_a_bias_and_never_without():
    probs = np.array([[0.5, 0.4, 0.1, 0.0]] * 3, dtype=np.float32)
    rows = mx.log(mx.array(np.vstack([probs, probs[-1:]])))
    for rule in RULES:  # draft token 1 (p 0.4 of 0.5) passes both rules at beta 0.5, never at beta 0
        assert decide(rows, [1, 1, 1], 0.5, rule=rule).tolist() == [3, 0]
        assert decide(rows, [1, 1, 1], 0.0, rule=rule).tolist() == [0, 0]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_at_beta0_is_token_identical_to_rt(arch, rule):
    model, tok = tiny_model(arch, seed=7), byte_tokenizer()
    make = lambda **cfg: StreamTranslator(
        model,
        tok,
        family="chatml",
        source_lang="en",
        target_lang="de",
        config=TranslatorConfig(**{**SMALL, **cfg}),
    )
    stats = assert_same_outputs_on_random_streams(
        make(policy="rt"), make(beta=0.0, accept_rule=rule), streams=30, seed=4321
    )
    assert sum(s.accepted for s in stats) > 0 and sum(s.draft_tokens - s.accepted for s in stats) > 0


def test_rule_settings_are_checked():
    assert method_config("ssbd-ratio", beta=0.5).accept_rule == "ratio"
    with pytest.raises(ValueError, match="accept rule"):
        TranslatorConfig(accept_rule="median")
    with pytest.raises(ValueError, match="greedy"):
        TranslatorConfig(accept_rule="ratio", temperature=0.7)
    with pytest.raises(ValueError, match="beta"):
        bounds("ratio", 1.5)


def test_a_commit_into_a_language_of_commit_betas_runs_at_its_own_bias():
    """Into a language ``COMMIT_BETAS`` names the default's commits run at that bias (Chinese: 0,
    so they are exactly RT's), its live updates at its beta; into another language at
    ``COMMIT_BETA``; a ``final_beta`` given holds in every language; ``ssbd-steady`` commits at
    its live beta but into such a language at its bias."""
    lang, commit = next(iter(COMMIT_BETAS.items()))
    model, tok = tiny_model("qwen2", seed=7), byte_tokenizer()

    def into(target, method=DEFAULT_METHOD, **cfg):
        config = method_config(method, **{**SMALL, "beta": 0.5, **cfg})
        return StreamTranslator(
            model, tok, family="chatml", source_lang="en", target_lang=target, config=config
        )

    tr, rt = into(lang), into(lang, "rt")
    rng, differs = random.Random(11), False
    for _ in range(8):
        prefixes = random_stream(rng)
        for i, prefix in enumerate(prefixes):
            final = i == len(prefixes) - 1
            update, plain = tr.update(prefix, final=final), rt.update(prefix, final=final)
            assert update.stats.beta == (commit if final else 0.5)
            if final and commit == 0.0:
                assert update.output_ids == plain.output_ids
            differs |= update.output_ids != plain.output_ids
    assert differs  # the live updates really were biased
    default = method_config(DEFAULT_METHOD)
    assert (
        default.beta_for(True, "de") == COMMIT_BETA and default.beta_for(True, f" {lang.upper()}") == commit
    )
    assert default.beta_for(False, lang) == default.beta  # a live update: the method's beta
    assert method_config(DEFAULT_METHOD, final_beta=0.15).beta_for(True, lang) == 0.15
    steady = method_config("ssbd-steady")  # commits at its live beta, but into lang at lang's
    assert steady.beta_for(True, "de") == steady.beta and steady.beta_for(True, lang) == commit
    with pytest.raises(ValueError, match="pairs"):
        TranslatorConfig(final_betas=(("zh",),))
    with pytest.raises(ValueError, match="lowercase"):
        TranslatorConfig(final_betas=(("ZH", 0.0),))
    with pytest.raises(ValueError, match="beta"):
        TranslatorConfig(final_betas=(("zh", 1.5),))
