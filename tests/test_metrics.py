"""Metrics on hand-computed examples."""

from mlx_ssbd.evaluation.metrics import (
    erasure,
    laal,
    lagging,
    ne_tokenizer,
    normalized_erasure,
    paired_chrf_delta,
    quality,
    ratio,
)

import pytest


def test_normalized_erasure_on_a_table1_like_stream():
    # Updates of one segment (en->de), tokenized:
    outputs = [
        "Heute".split(),
        "Heute möchte ich".split(),  # extends: erases 0
        "Heute will ich über".split(),  # LCP 1 with the previous 3 tokens: erases 2
        "Heute will ich über Regeln sprechen .".split(),  # extends: erases 0
    ]
    assert erasure(outputs) == 2
    assert normalized_erasure(outputs) == pytest.approx(2 / 7)


def test_ne_edge_cases():
    assert normalized_erasure([]) == 0.0
    assert normalized_erasure([["a", "b"], []]) == 0.0
    assert normalized_erasure([["a", "b", "c"], ["x"]]) == 3.0  # everything erased, final length 1


def test_acceptance_ratios():
    # A/D = accepted / draft, A/O = accepted / output, summed over updates.
    accepted, draft, output = 8 + 3, 10 + 4, 12 + 9
    assert ratio(accepted, draft) == pytest.approx(11 / 14)
    assert ratio(accepted, output) == pytest.approx(11 / 21)
    assert ratio(1, 0) is None


def test_laal_hand_computed():
    # Two updates: 3 then 6 source words (1 s per word), engine walls 1 s and 2 s.
    # Displays [a b] then [a c d]: 'a' is stable from update 0, 'c' and 'd' from update 1.
    # Ideal delays 3, 6, 6; rate = 6 s / 3 tokens = 2; tau = 2 (6 >= 6): (3 + (6 - 2)) / 2 = 3.5.
    # Computation-aware: done = 3 + 1 = 4, max(6, 4) + 2 = 8: delays 4, 8, 8: (4 + (8 - 2)) / 2 = 5.
    lag = lagging([["a", "b"], ["a", "c", "d"]], [3, 6], [1.0, 2.0], word_s=1.0)
    assert lag.laal_s == pytest.approx(3.5)
    assert lag.laal_ca_s == pytest.approx(5.0)


def test_laal_uses_the_longer_of_hypothesis_and_reference():
    # rate = 6 / max(3, 6) = 1: delays 3, 6 -> (3 + (6 - 1)) / 2 = 4.
    assert laal([3.0, 6.0, 6.0], 6.0, 3, 6) == pytest.approx(4.0)


def test_flicker_free_stream_has_source_paced_lagging():
    # Output only grows; every token appears at the update that added it, no compute time.
    displays = [["a"], ["a", "b"], ["a", "b", "c"]]
    lag = lagging(displays, [1, 2, 3], [0.0, 0.0, 0.0], word_s=1.0)
    # delays 1, 2, 3; rate 1: (1 + 1 + 1) / 3 = 1.
    assert lag.laal_s == pytest.approx(1.0) == lag.laal_ca_s


def test_ne_tokenizers_by_language():
    assert ne_tokenizer("de")[0] == "13a"
    name, tokenize = ne_tokenizer("zh")
    assert name == "zh" and tokenize("你好世界") == ["你", "好", "世", "界"]
    with pytest.raises(ValueError, match="unknown-tok"):
        ne_tokenizer("de", "unknown-tok")


def test_quality_reports_signatures():
    q = quality(["Alle Menschen sind frei."], ["Alle Menschen sind frei."], "de")
    assert q["bleu"] == pytest.approx(100.0) and q["chrf"] == pytest.approx(100.0)
    assert "tok:13a" in q["bleu_signature"] and "nw:2" in q["chrf_signature"]


def test_the_paired_chrf_difference_is_sacrebleus_on_every_sample():
    from sacrebleu.metrics import CHRF

    refs = ["Alle Menschen sind frei geboren.", "Heute reden wir über Regeln.", "Das Wetter ist gut."]
    ours = ["Alle Menschen sind frei geboren.", "Heute sprechen wir über Regeln.", "Das Wetter ist schön."]
    theirs = ["Alle Menschen sind geboren.", "Heute reden wir über Regeln.", "Wetter gut."]
    corpus = lambda hyps: CHRF(word_order=2).corpus_score(hyps, [refs]).score
    change, low, high = paired_chrf_delta(ours, theirs, refs, resamples=200)
    assert change == round(corpus(ours) - corpus(theirs), 2) and low <= change <= high and low < high
    assert paired_chrf_delta(ours, ours, refs, resamples=50) == (0.0, 0.0, 0.0)
