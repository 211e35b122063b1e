"""Biased speculative sampling: at beta = 0 the output distribution is plain sampling's
(a statistical test on a tiny model against exact marginals); at beta > 0 it is the mixture."""

import math

from mlx_ssbd.engine.cache import TokenCache
from mlx_ssbd.engine.sampling import Sampler, sampling_probs
from mlx_ssbd.engine.update import Job, run

import mlx.core as mx
import numpy as np
import pytest
from tiny import byte_tokenizer, tiny_model

N = 3000
TEMPERATURE, TOP_P = 1.0, 0.95


def chi2_critical(dof: int, z: float = 3.09) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.09: alpha = 0.001)."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def assert_matches(samples, expected, what):
    counts = np.bincount(samples, minlength=len(expected)).astype(float)
    exp = expected * len(samples)
    big = exp >= 5
    assert counts[exp == 0].sum() == 0, f"{what}: sampled a token of probability 0"
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(exp[big], exp[~big].sum())
    keep = exp > 0
    chi2 = (((obs - exp) ** 2)[keep] / exp[keep]).sum()
    dof = keep.sum() - 1
    assert chi2 < chi2_critical(dof), f"{what}: chi2 {chi2:.1f} >= {chi2_critical(dof):.1f} (dof {dof})"


@pytest.fixture(scope="module")
def setup():
    tok = byte_tokenizer()
    model = tiny_model("qwen2", seed=4, logit_scale=3.0)
    prompt = tok.encode(
        "<|im_start|>user\nso today<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    logits = TokenCache(model).forward(prompt)[-1]
    p1 = np.array(sampling_probs(logits, TEMPERATURE, TOP_P), dtype=np.float64)
    # Exact second-token marginal: sum_a p1(a) p(. | prompt, a), all a in one batch.
    support = np.nonzero(p1)[0]
    batch = mx.array([prompt + [int(a)] for a in support])
    second = sampling_probs(model(batch)[:, -1], TEMPERATURE, TOP_P)
    p2 = (p1[support, None] * np.array(second, dtype=np.float64)).sum(0)
    draft = [int(np.argsort(-p1)[1]), int(np.argsort(-p1)[0])]  # a likely but not top first token
    return model, prompt, draft, p1 / p1.sum(), p2 / p2.sum()


def sample_two(model, prompt, draft, beta, seed):
    sampler = Sampler(TEMPERATURE, TOP_P, seed=seed)
    cache = TokenCache(model)
    firsts, seconds, accepted = [], [], 0
    for _ in range(N):  # the engine's update: verify the draft, then sample the rest
        job = Job(
            head=prompt, locked=(), draft=draft, beta=beta, max_new=2, stops=lambda t: None, sampler=sampler
        )
        outcome = run(cache, [(cache, job)])[0]
        accepted += outcome.accepted
        firsts.append(outcome.output[0])
        seconds.append(outcome.output[1])
    return np.array(firsts), np.array(seconds), accepted


@pytest.mark.slow
def test_beta0_sampling_equals_plain_sampling(setup):
    model, prompt, draft, p1, p2 = setup
    firsts, seconds, accepted = sample_two(model, prompt, draft, 0.0, seed=1)
    assert accepted > 0  # the draft path was exercised, not only the residual
    assert_matches(firsts, p1, "first token")
    assert_matches(seconds, p2, "second token")


@pytest.mark.slow
def test_biased_sampling_follows_the_mixture(setup):
    model, prompt, draft, p1, _ = setup
    beta = 0.4
    firsts, _, _ = sample_two(model, prompt, draft, beta, seed=2)
    mixture = (1 - beta) * p1
    mixture[draft[0]] += beta
    assert_matches(firsts, mixture, "first token under bias")
    with pytest.raises(AssertionError):
        assert_matches(firsts, p1, "must differ from plain sampling")


def test_top_p_keeps_the_nucleus():
    probs = np.array(sampling_probs(mx.array(np.log([0.5, 0.3, 0.15, 0.05])), 1.0, 0.8))
    np.testing.assert_allclose(probs, [0.5 / 0.8, 0.3 / 0.8, 0, 0], atol=1e-6)


def test_bad_sampling_settings():
    with pytest.raises(ValueError, match="temperature"):
        Sampler(temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        Sampler(top_p=0)
