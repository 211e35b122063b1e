"""Flicker, acceptance, speed, latency and quality metrics for streaming re-translation.

Contract: pure functions over per-update records; nothing here runs a model.

* Normalized erasure (Arivazhagan et al. 2020; the SSBD paper's NE):
  NE = sum_i (|Y_{i-1}| - |LCP(Y_{i-1}, Y_i)|) / |Y_final| over one segment's updates, on text
  tokenized by ``ne_tokenizer`` (sacrebleu's 13a, zh or ja-mecab; the paper's flores101
  SentencePiece model cannot be downloaded everywhere, so reports name the tokenizer used).
* A/D = accepted / draft tokens; A/O = accepted / output tokens (model tokens, summed).
* TPS = output tokens / generation wall time (the paper's definition, summed over updates).
* Latency: LAAL (Papi et al. 2022, "Over-Generation Cannot Be Rewarded") applied to
  re-translation as in StreamLAAL (Papi et al. 2024): the delay of final target token j is the
  time of the first update from which the displayed text keeps final tokens 1..j unchanged to
  the end (Arivazhagan et al. 2020's stabilization time). Source word w arrives at
  ``w * word_s`` seconds; computation-aware times add the engine's wall time, processing
  updates in order: done_u = max(arrival_u, done_{u-1}) + wall_u. Then
  LAAL = 1/tau * sum_{j<=tau} (d_j - (j-1) * T_src / max(|Y|, |Y*|)), tau the first j with
  d_j >= T_src (or |Y|), T_src the arrival time of the full source.
* Quality: corpus BLEU and chrF++ (sacrebleu); a method's chrF++ against a baseline's on the same
  sentences with a 95% interval from a paired bootstrap over the sentences (``paired_chrf_delta``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Tokenize = Callable[[str], list[str]]


def common_prefix(a: Sequence, b: Sequence) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def erasure(outputs: Sequence[Sequence]) -> int:
    """Total tokens erased across consecutive outputs of one segment."""
    return sum(len(prev) - common_prefix(prev, cur) for prev, cur in zip(outputs, outputs[1:]))


def normalized_erasure(outputs: Sequence[Sequence]) -> float:
    """NE of one segment: erased tokens / final length (0 for an empty final output)."""
    if not outputs or not outputs[-1]:
        return 0.0
    return erasure(outputs) / len(outputs[-1])


def ne_tokenizer_name(target_lang: str) -> str:
    return {"zh": "zh", "ja": "ja-mecab"}.get(target_lang, "13a")


def ne_tokenizer(target_lang: str, name: str | None = None) -> tuple[str, Tokenize]:
    """(name, tokenize) for NE on ``target_lang``: 13a, zh, ja-mecab, or any sacrebleu name.

    Raises:
        ValueError: the tokenizer cannot be built (e.g. ja-mecab without ``mlx-ssbd[ja]``,
            flores101 without its downloadable model).
    """
    from sacrebleu.metrics.bleu import _get_tokenizer

    name = name or ne_tokenizer_name(target_lang)
    try:
        tokenizer = _get_tokenizer(name)()
    except Exception as error:  # missing optional packages or downloads raise various types
        hint = " (pip install 'mlx-ssbd[ja]')" if name == "ja-mecab" else ""
        raise ValueError(f"cannot build the {name!r} tokenizer{hint}: {error}") from error
    return name, lambda text: tokenizer(text.strip()).split()


@dataclass(frozen=True)
class Lagging:
    laal_s: float  # source-time only (ideal engine)
    laal_ca_s: float  # computation-aware


def _stable_from(displays: Sequence[Sequence[str]], final: Sequence[str]) -> list[int]:
    """For each final token j, the first update index from which displays keep final[:j+1]."""
    first = [len(displays) - 1] * len(final)
    for j in range(len(final)):
        u = len(displays) - 1
        while u > 0 and len(displays[u - 1]) > j and common_prefix(displays[u - 1], final) > j:
            u -= 1
        first[j] = u
    return first


def laal(delays: Sequence[float], source_time: float, hyp_len: int, ref_len: int | None = None) -> float:
    """LAAL over per-token delays (seconds), Papi et al. 2022."""
    if not delays:
        return 0.0
    rate = source_time / max(hyp_len, ref_len or 0, 1)
    total, tau = 0.0, 0
    for j, d in enumerate(delays):
        total += d - j * rate
        tau += 1
        if d >= source_time:
            break
    return total / tau


def lagging(
    displays: Sequence[Sequence[str]],
    source_words: Sequence[float],
    walls: Sequence[float],
    *,
    word_s: float,
    ref_len: int | None = None,
) -> Lagging:
    """LAAL of one segment, without and with computation; see the module docstring."""
    arrivals = [w * word_s for w in source_words]
    done, clock = [], 0.0
    for arrival, wall in zip(arrivals, walls):
        clock = max(arrival, clock) + wall
        done.append(clock)
    final = displays[-1]
    stable = _stable_from(displays, final)
    source_time = arrivals[-1]
    ideal = laal([arrivals[u] for u in stable], source_time, len(final), ref_len)
    aware = laal([done[u] for u in stable], source_time, len(final), ref_len)
    return Lagging(ideal, aware)


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def quality(hyps: Sequence[str], refs: Sequence[str], target_lang: str) -> dict:
    """Corpus BLEU and chrF++ with sacrebleu signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    tokenize = ne_tokenizer_name(target_lang)
    try:
        bleu = BLEU(tokenize=tokenize)
        bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    except Exception:  # ja-mecab missing: fall back to character tokenization, named in the signature
        bleu = BLEU(tokenize="char")
        bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf = CHRF(word_order=2)
    chrf_score = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": round(bleu_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": round(chrf_score.score, 2),
        "chrf_signature": str(chrf.get_signature()),
    }


def paired_chrf_delta(
    outputs: Sequence[str], baseline: Sequence[str], refs: Sequence[str], resamples: int = 1000, seed: int = 0
) -> tuple[float, float, float]:
    """Corpus chrF++ of ``outputs`` minus that of ``baseline`` (the same sentences, ``refs``), and
    the 2.5th and 97.5th percentile of that difference over ``resamples`` paired bootstrap samples
    (the sentences drawn with replacement, the same draw for both). Each sample's scores come from
    the sentences' chrF++ statistics summed, as sacrebleu's own significance tests compute them:
    the corpus score of the sample's sentences, without extracting n-grams again."""
    import numpy as np
    from sacrebleu.metrics import CHRF

    metric = CHRF(word_order=2)
    ours = np.asarray(metric._extract_corpus_statistics(list(outputs), [list(refs)]))
    theirs = np.asarray(metric._extract_corpus_statistics(list(baseline), [list(refs)]))

    def delta(sample: list[int]) -> float:
        score = lambda stats: metric._compute_score_from_stats(stats[sample].sum(axis=0)).score
        return score(ours) - score(theirs)

    rng = random.Random(seed)
    indices = range(len(refs))
    deltas = sorted(delta([rng.choice(indices) for _ in indices]) for _ in range(resamples))
    return (
        round(float(delta(list(indices))), 2),
        round(float(deltas[int(0.025 * resamples)]), 2),
        round(float(deltas[int(0.975 * resamples) - 1]), 2),
    )
