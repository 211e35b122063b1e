"""Subtitle cues laid out as the usual conventions have them (pure logic: no model)."""

import io

from mlx_ssbd.live import japanese, subtitles
from mlx_ssbd.live.subtitles import Cues, layout

import pytest

CAPTION = (
    "Guten Tag, mein Name ist Amanda und ich bin Krankenschwester im Kinderkrankenhaus für die "
    "nächsten 20 Minuten. Ich werde erklären, wie wir die Planung unserer Nachtschichten geändert haben."
)


def test_a_long_caption_becomes_cues_of_two_lines_of_42_characters_that_end_after_a_sentence():
    cues = layout(CAPTION)
    assert len(cues) == 3
    lines = [line for cue in cues for line in cue.split("\n")]
    assert all(len(cue.split("\n")) <= 2 for cue in cues) and max(map(len, lines)) <= 42
    assert " ".join(lines).split() == CAPTION.split()  # every word once, in order
    assert cues[1].endswith("Minuten.")  # a cue ends after a sentence that ends past its first third
    top, bottom = cues[2].split("\n")
    assert abs(len(top) - len(bottom)) <= 10  # balanced lines


def test_short_sentences_share_a_cue_and_a_short_one_joins_a_long_sentences_first_cue():
    assert layout("Ja. Nein. Vielleicht morgen.") == ["Ja. Nein. Vielleicht morgen."]
    text = "Ja. Das Problem war nicht die Arbeit, sondern dass niemand wusste, wie die Planung funktioniert."
    cues = layout(text)
    assert len(cues) == 2 and cues[0].startswith("Ja. Das") and " ".join(cues).split() == text.split()


def test_short_captions_stay_one_line_and_zero_keeps_every_caption_whole():
    assert layout("Danke schön.") == ["Danke schön."]
    assert layout("  ") == []
    assert layout(CAPTION, 0) == [CAPTION]
    long_word = "Donaudampfschifffahrtsgesellschaftskapitän"
    assert layout(f"{long_word} ist da", 20) == [f"{long_word}\nist da"]  # a line of its own


def test_a_caption_of_any_length_is_laid_out_within_the_limits():
    words = [f"wort{i % 7}" for i in range(5000)]  # past the balancing's reach: cut as cues fill
    cues = layout(" ".join(words))
    lines = [line for cue in cues for line in cue.split("\n")]
    assert max(map(len, lines)) <= 42 and all(len(cue.split("\n")) <= 2 for cue in cues)
    assert " ".join(lines).split() == words


def test_chinese_wraps_at_16_characters_never_before_closing_punctuation():
    text = "今天我想谈谈新的规则。我们一起制定了这些规则，也会谈到 GPU 的问题。"
    cues = layout(text)
    lines = [line for cue in cues for line in cue.split("\n")]
    assert max(map(len, lines)) <= 16 and all(len(cue.split("\n")) <= 2 for cue in cues)
    mixed = "我们 用 GPU 和 Transformer 训练 一个 很大 的 模型。"  # the spaces count towards a line too
    assert max(len(line) for cue in layout(mixed, 18) for line in cue.split("\n")) <= 18
    wide = "今天我想和大家一起谈谈我们在去年冬天共同制定的这些新规则。"  # 29 characters: one cue, not Japanese's 13
    assert layout(wide) == ["今天我想和大家一起谈谈我们在\n去年冬天共同制定的这些新规则。"]
    assert not any(line.startswith(("。", "，")) for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert any("GPU" in line for line in lines)  # a Latin word is not split


JAPANESE = "今日は新しい規則について話したいと思います。皆さんと一緒に作りました、GPU の話もします。"


@pytest.mark.parametrize("mecab", [True, False])
def test_japanese_wraps_at_13_characters_never_before_closing_punctuation(monkeypatch, mecab):
    if mecab:
        pytest.importorskip("MeCab")
    else:
        monkeypatch.setattr(japanese, "phrases", lambda text: None)  # as without the ja extra
    cues = layout(JAPANESE)
    lines = [line for cue in cues for line in cue.split("\n")]
    assert max(map(len, lines)) <= 13 and all(len(cue.split("\n")) <= 2 for cue in cues)
    assert not any(line.startswith(("。", "、")) for line in lines)
    assert "".join(lines).replace(" ", "") == JAPANESE.replace(" ", "")
    assert any("GPU" in line for line in lines)  # a Latin word is not split
    wide = "私たちは去年の冬に皆さんと一緒にこの新しい規則を作りました。"  # 30 characters: one cue at 16
    cues = layout(wide)
    assert len(cues) == 2 and max(len(line) for cue in cues for line in cue.split("\n")) <= 13
    narrow = layout("彼は「ありがとうございます」と言いました。ちょっとコーヒーを飲みましょう。", 3) + layout(
        "あ「い」", 2
    )
    lines = [line for cue in narrow for line in cue.split("\n")]
    assert not any(line.endswith("「") or line.startswith(("」", "ー", "ょ", "っ")) for line in lines)


def test_japanese_lines_break_between_phrases_where_mecab_is_installed():
    pytest.importorskip("MeCab")
    text = (
        "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。"
        "人間は、理性と良心とを授けられており、互いに同胞の精神をもって行動しなければならない。"
    )
    found = japanese.phrases(text)
    assert "".join(found) == text and "行動しなければならない。" in found
    ends = {len("".join(found[:i])) for i in range(len(found) + 1)}  # where a phrase ends
    cues = layout(text)
    lines = [line for cue in cues for line in cue.split("\n")]
    assert max(map(len, lines)) <= 13 and "".join(lines) == text
    assert {len("".join(lines[:i])) for i in range(len(lines) + 1)} <= ends  # no phrase cut
    # a phrase longer than a line is cut between its characters
    long_word = "自然言語処理技術研究開発部門"  # one compound noun, 14 characters
    assert len(japanese.phrases(long_word + "です。")) == 1
    lines = [line for cue in layout(long_word + "です。") for line in cue.split("\n")]
    assert max(map(len, lines)) <= 13 and "".join(lines) == long_word + "です。"


def test_japanese_phrases_keep_the_text_and_its_spaces():
    pytest.importorskip("MeCab")
    assert japanese.phrases("東京大学の研究者が発表した。") == ["東京大学の", "研究者が", "発表した。"]
    assert japanese.phrases(" 今日は GPU で「規則」を話します。 ") == [
        " 今日は ",
        "GPU で",
        "「規則」を",
        "話します。 ",
    ]
    assert japanese.phrases("") == [] and japanese.is_japanese("です") and not japanese.is_japanese("今天")


def test_a_captions_cues_share_its_time_in_order_each_shown_long_enough():
    cues = Cues("srt")
    text = cues.add(10.0, 19.0, CAPTION) + cues.add(18.5, 19.0, "Danke.")
    import srt

    parsed = list(srt.parse(text))
    times = [(c.start.total_seconds(), c.end.total_seconds()) for c in parsed]
    assert [c.index for c in parsed] == [1, 2, 3, 4]
    assert times[0][0] == 10.0 and times[2][1] == 19.0  # the caption's time, shared by its cues
    assert all(a[1] <= b[0] for a, b in zip(times, times[1:]))  # in order, never overlapping
    assert all(end - start >= subtitles.MIN_CUE_S - 1e-3 for start, end in times[3:])
    assert [c.content for c in parsed[:3]] == layout(CAPTION)


@pytest.mark.parametrize("kind", ["srt", "vtt"])
def test_a_document_of_long_captions_parses_with_two_line_cues(kind):
    import srt
    import webvtt

    body = subtitles.document(kind, [(0.0, 8.0, CAPTION), (8.0, 9.0, "")])
    if kind == "srt":
        texts = [c.content for c in srt.parse(body)]
    else:
        texts = [c.text for c in webvtt.from_buffer(io.StringIO(body))]
    assert texts == layout(CAPTION)
