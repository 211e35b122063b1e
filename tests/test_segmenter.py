"""Automatic segmentation of ASR partials (pure logic: no model)."""

import random

from mlx_ssbd.live.segmenter import Segmenter, SegmenterConfig, is_sentence_end
from mlx_ssbd.live.source import SourcePartial, Word

import pytest

OFF = dict(sentence_end=False, max_words=0, pause_s=None)


def feed(segmenter, texts, *, segment="a", now=0.0):
    jobs = []
    for i, text in enumerate(texts):
        jobs += segmenter.feed(SourcePartial(text, segment_id=segment), now + i)
    return jobs


def test_stable_sentence_end_commits_there_and_the_rest_stays_live():
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    jobs = feed(seg, ["hello world. how", "hello world. how are"])
    assert [(j.text, j.final, j.reason) for j in jobs] == [
        ("hello world. how", False, ""),  # nothing is stable after one partial
        ("hello world.", True, "sentence"),
        ("how are", False, ""),
    ]


def test_sentence_end_in_the_changing_tail_is_not_committed():
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    jobs = feed(seg, ["we went home.", "we went home to"])  # "home." was revised: not stable
    assert not any(j.final for j in jobs)


def test_several_stable_sentences_become_several_captions():
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    jobs = feed(seg, ["one. two! three", "one. two! three four"])
    assert [j.text for j in jobs if j.final] == ["one.", "two!"]


@pytest.mark.parametrize(
    "word,end",
    [
        ("Mr.", False),
        ("e.g.", False),
        ("J.", False),
        ("3.5", False),
        ("rules.", True),
        ("why?", True),
        ("好。", True),
    ],
)
def test_sentence_end_words(word, end):
    assert is_sentence_end(word) is end


def test_no_ends_a_sentence_unless_a_number_follows():
    assert is_sentence_end("no.", "So") and not is_sentence_end("No.", "5") and not is_sentence_end("no.")
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    jobs = feed(seg, ["at first they said no. So we", "at first they said no. So we decided"])
    assert [j.text for j in jobs if j.final] == ["at first they said no."]
    jobs = feed(
        Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True})), ["room No. 5 is", "room No. 5 is free"]
    )
    assert not any(j.final for j in jobs)


def test_long_unpunctuated_stream_is_cut_without_losing_or_repeating_a_word():
    rng = random.Random(3)
    words = [rng.choice(["alpha", "beta", "gamma,", "delta", "omega"]) for _ in range(400)]
    seg = Segmenter(SegmenterConfig(max_words=20, pause_s=None))
    jobs, shown = [], 0
    while shown < len(words):
        shown = min(len(words), shown + rng.randint(1, 4))
        partial = list(words[:shown])
        if rng.random() < 0.2:
            partial[-1] = "misheard"  # the newest word is revised by the next partial
        jobs += seg.feed(SourcePartial(" ".join(partial), segment_id="never-final"), shown)
    jobs += seg.flush()
    commits = [j for j in jobs if j.final]
    assert len(commits) >= 400 // 20
    assert all(len(j.text.split()) <= 20 for j in commits)
    assert {j.reason for j in commits[:-1]} == {"length"}
    committed = " ".join(j.text for j in commits).split()
    assert committed[:-1] == words[: len(committed) - 1]  # every word once, in order
    # live text never holds more than max_words + one partial's growth
    assert max(len(j.text.split()) for j in jobs if not j.final) <= 20 + 4


def test_length_cut_prefers_a_clause_mark():
    seg = Segmenter(SegmenterConfig(sentence_end=False, max_words=10, pause_s=None))
    text = "a b c d e f, g h i j k l m"
    jobs = feed(seg, [text, text + " n"])
    assert [j.text for j in jobs if j.final] == ["a b c d e f,"]


# Partials of one ASR sentence that heard no sentence end between two spoken ones (Whisper tiny.en
# on a recording of the held-out talk, benchmarks/data/asr-partials).
NURSES = [
    "Go after noon, my name is Amanda and I wear Canada nurse at the Children's Hospital for the next 20 minutes.",
    "Go after noon, my name is Amanda and I wear Canada nurse at the Children's Hospital for the next 20 minutes"
    " I will explain how.",
    "Go after noon, my name is Amanda and I wear Canada nurse at the Children's Hospital for the next 20 minutes"
    " I will explain how we change the way.",
]


def test_a_long_sentence_is_cut_where_a_clause_opens_not_at_the_unstable_edge():
    """Without a sentence end, more than ``max_words`` live words are cut before the last word
    that opens a clause ("I" after "minutes"; never between "and" and "I"), and not at the
    last stable word while the words after it still change ("... for the next 20")."""
    jobs = feed(Segmenter(SegmenterConfig(pause_s=None, language="en")), NURSES)
    commits = [(j.text, j.reason) for j in jobs if j.final]
    assert commits == [(NURSES[0][:-1], "length")]  # "... for the next 20 minutes"
    assert jobs[-1].text == "I will explain how we change the way." and not jobs[-1].final
    # A language without opener words waits for max_words stable words: no cut at "20".
    jobs = feed(Segmenter(SegmenterConfig(pause_s=None)), NURSES)
    assert [j.text.split()[-1] for j in jobs if j.final] == ["explain"]  # the 24th word


def test_a_capitalised_opener_is_a_sentence_end_the_asr_missed():
    text = "We bought 20 new computers, but we forgot that someone has to maintain them After six months half of them"
    stream = [text + " were", text + " were broken and we had to"]
    jobs = feed(Segmenter(SegmenterConfig(pause_s=None, language="en")), stream)
    assert [j.text for j in jobs if j.final] == [text[: text.index(" After")]]
    # A capitalised word that opens no clause (a name) is no cut; nor is anything without the
    # source language: both wait for more stable words.
    named = [t.replace("After", "Amanda") for t in stream]
    assert not any(j.final for j in feed(Segmenter(SegmenterConfig(pause_s=None, language="en")), named))
    assert not any(j.final for j in feed(Segmenter(SegmenterConfig(pause_s=None)), stream))


def test_length_cuts_use_the_source_languages_openers():
    words = (
        "eins zwei drei vier fünf sechs sieben acht neun zehn und dann elf zwölf dreizehn vierzehn".split()
    )
    text = " ".join(words)
    jobs = feed(Segmenter(SegmenterConfig(max_words=12, pause_s=None, language="de")), [text, text + " x"])
    assert [j.text for j in jobs if j.final] == [" ".join(words[:10])]  # before "und dann"
    # English openers mean nothing in German: the cut waits and falls at max_words.
    jobs = feed(Segmenter(SegmenterConfig(max_words=12, pause_s=None, language="en")), [text, text + " x"])
    assert [j.text for j in jobs if j.final] == [" ".join(words[:12])]


def test_text_without_spaces_is_cut_at_its_sentence_ends_and_by_length_in_characters():
    """Chinese and Japanese partials have no spaces: their characters are the words."""
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    stream = [
        "今天天气很好。明天",
        "今天天气很好。明天会下雨。我们用 GPU",
        "今天天气很好。明天会下雨。我们用 GPU 训练",
    ]
    jobs = feed(seg, stream) + seg.flush()
    commits = [(j.text, j.reason) for j in jobs if j.final]
    assert commits == [
        ("今天天气很好。", "sentence"),
        ("明天会下雨。", "sentence"),
        ("我们用 GPU 训练", "end"),
    ]
    # max_words 5 is 10 characters: a long clause is cut after its last comma past a third
    text = "我们今天讨论新的规则，这些规则是大家一起制定的"
    seg = Segmenter(SegmenterConfig(sentence_end=False, max_words=5, pause_s=None))
    jobs = feed(seg, [text, text + "。"]) + seg.flush()
    commits = [j.text for j in jobs if j.final]
    assert commits[0] == "我们今天讨论新的规则，" and all(len(c) <= 11 for c in commits)
    assert "".join(commits) == text + "。"  # every character once, in order


def test_pause_commits_the_live_text_once():
    seg = Segmenter(SegmenterConfig(**{**OFF, "pause_s": 2.0}))
    seg.feed(SourcePartial("so today", segment_id="a"), 10.0)
    assert seg.next_due() == 12.0
    assert seg.due(11.9) == []
    jobs = seg.due(12.0)
    assert [(j.text, j.final, j.reason) for j in jobs] == [("so today", True, "pause")]
    assert seg.due(20.0) == [] and seg.next_due() is None
    # the speaker goes on in the same ASR segment: only the new words are live
    assert [j.text for j in seg.feed(SourcePartial("so today we", segment_id="a"), 21.0)] == ["we"]


def test_segment_change_and_final_commit_and_unchanged_partials_cost_nothing():
    seg = Segmenter(SegmenterConfig(**OFF))
    jobs = seg.feed(SourcePartial("so today", segment_id="a"), 0)
    assert seg.feed(SourcePartial("so today", segment_id="a"), 1) == []  # repeated partial
    jobs += seg.feed(SourcePartial("we made", segment_id="b"), 2)
    jobs += seg.feed(SourcePartial("we made it", final=True, segment_id="b"), 3)
    jobs += seg.feed(SourcePartial("we made it", segment_id="b"), 4)  # same id after final: a new segment
    assert [(j.text, j.final, j.reason) for j in jobs] == [
        ("so today", False, ""),
        ("so today", True, "segment"),
        ("we made", False, ""),
        ("we made it", True, "final"),
        ("we made it", False, ""),
    ]
    assert [j.text for j in seg.flush()] == ["we made it"]


def test_final_partial_shorter_than_the_committed_words_still_closes_the_caption():
    seg = Segmenter(SegmenterConfig(**OFF))
    seg.feed(SourcePartial("so today we", segment_id="a"), 0)
    jobs = seg.feed(SourcePartial("so", final=True, segment_id="a"), 1)
    assert [(j.text, j.final) for j in jobs] == [("so", True)]


def test_job_times_from_word_timestamps_or_interpolated():
    words = tuple(Word(w, i * 0.5, i * 0.5 + 0.4) for i, w in enumerate("one. two three".split()))
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    seg.feed(SourcePartial("one. two three", segment_id="a", words=words), 0)
    jobs = seg.feed(SourcePartial("one. two three", segment_id="a", words=words), 1)
    assert [(j.text, j.start, j.end) for j in jobs] == [("one.", 0.0, 0.4), ("two three", 0.5, 1.4)]
    # Chinese: the recognizer's words hold several characters, each a word here, sharing its time
    words = (Word("今天", 0.0, 0.4), Word("很好。", 0.5, 1.1), Word("明天", 1.5, 1.9), Word("下雨", 2.0, 2.4))
    text = "今天很好。明天下雨"
    seg = Segmenter(SegmenterConfig(**{**OFF, "sentence_end": True}))
    seg.feed(SourcePartial(text, segment_id="z", words=words), 0)
    jobs = seg.feed(SourcePartial(text, segment_id="z", words=words), 1)
    assert [(j.text, j.start, j.end) for j in jobs] == [("今天很好。", 0.0, 1.1), ("明天下雨", 1.5, 2.4)]
    seg = Segmenter(SegmenterConfig(**OFF))
    (job,) = seg.feed(SourcePartial("a b c d", segment_id="x", start=10.0, end=12.0), 0)
    assert (job.start, job.end) == (10.0, 12.0)
    (job,) = Segmenter(SegmenterConfig(**OFF)).feed(SourcePartial("a b", segment_id="y"), 0)
    assert (job.start, job.end) == (None, None)


@pytest.mark.parametrize(
    "bad", [dict(max_words=2), dict(max_words=-1), dict(pause_s=0), dict(stable_partials=0)]
)
def test_bad_config_is_refused(bad):
    with pytest.raises(ValueError):
        SegmenterConfig(**bad)
