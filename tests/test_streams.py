"""Stream readers: lag-k reveal, partials, plain text, bad input with line numbers."""

import tracemalloc

from mlx_ssbd.evaluation import lines as text_lines
from mlx_ssbd.evaluation import streams
from mlx_ssbd.evaluation.streams import (
    LONG_LINE_WORDS,
    StreamError,
    detect_format,
    lag_updates,
    read_pairs,
    read_partials,
    read_text,
)
from mlx_ssbd.live import scripts

import pytest


def test_lag3_reveal():
    ups = lag_updates("a b c d e f g", 3, "s1")
    assert [u.text for u in ups] == ["a b c", "a b c d e f", "a b c d e f g"]
    assert [u.final for u in ups] == [False, False, True] and ups[0].segment_id == "s1"
    assert [u.text for u in lag_updates("a b c", 3)] == ["a b c"]
    with pytest.raises(ValueError, match="lag"):
        lag_updates("a", 0)


def test_text_without_spaces_is_revealed_two_characters_a_word():
    ups = lag_updates("今天天气很好，明天会下雨。", 1)
    assert [u.text for u in ups] == [
        "今天",
        "今天天气",
        "今天天气很好，",
        "今天天气很好，明天",
        "今天天气很好，明天会下",
        "今天天气很好，明天会下雨。",
    ]
    assert [u.text for u in lag_updates("用 GPU 训练", 1)] == ["用 GPU", "用 GPU 训练"]  # a Latin word is one


def test_partials_may_shrink_and_revise(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"id": 1, "text": "so to", "final": false}\n\n{"id": 1, "text": "so", "final": false}\n'
        '{"id": 1, "text": "so today", "final": true}\n'
    )
    ups = list(read_partials(str(f)))
    assert [u.text for u in ups] == ["so to", "so", "so today"] and ups[-1].final and ups[0].segment_id == "1"


@pytest.mark.parametrize(
    "content,match",
    [
        (b'{"id": 1, "text": "a"}\n{"id": 1}\n', ":2: missing field 'text'"),
        (b'{"id": 1, "text": 5}\n', ":1: field 'text' must be str, got int"),
        (b'{"id": 1, "text": "a", "final": "yes"}\n', ":1: field 'final' must be bool"),
        (b'{"id": 1, "text": "a"}\n{oops\n', ":2: malformed JSON"),
        (b"[1, 2]\n", ":1: expected a JSON object"),
        (b'{"id": 1, "text": "a"}\n\xff\xfe\n', ":2: invalid UTF-8"),
        (b"\x00\x01\x02", ":1: binary data"),
    ],
)
def test_bad_partials_name_the_line(tmp_path, content, match):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    with pytest.raises(StreamError, match=match):
        list(read_partials(str(f)))


def test_updates_before_a_bad_line_are_yielded_first(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": 1, "text": "good"}\n{"id": 1, "text": 3}\n')
    stream = read_partials(str(f))
    assert next(stream).text == "good"
    with pytest.raises(StreamError, match=":2:"):
        next(stream)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(StreamError, match="no such file"):
        list(read_text(str(tmp_path / "nope.txt")))
    with pytest.raises(StreamError, match="is a directory"):
        list(read_text(str(tmp_path)))


def test_plain_text_skips_blank_lines(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("one two three four\n\n   \nfive\n")
    ups = list(read_text(str(f), lag=3))
    assert [(u.text, u.final) for u in ups] == [
        ("one two three", False),
        ("one two three four", True),
        ("five", True),
    ]


def test_pairs_and_format_detection(tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_text('{"id": "x", "src": "Hello there", "ref": "Hallo"}\n{"src": "No ref"}\n')
    pairs = [p for _, p in read_pairs(str(f))]
    assert pairs[0].ref == "Hallo" and pairs[1].ref is None and pairs[1].id == "2"
    assert detect_format(str(f)) == "pairs"
    g = tmp_path / "empty.jsonl"
    g.write_text("\n")
    with pytest.raises(StreamError, match="empty file"):
        detect_format(str(g))


def _lines(*objs):
    import json

    return "".join(json.dumps(o) + "\n" for o in objs)


def test_whisper_streaming_chunks_append_until_is_final(tmp_path):
    from mlx_ssbd.evaluation.streams import open_updates

    f = tmp_path / "asr.jsonl"
    f.write_text(
        _lines(
            {"start": 0.0, "end": 1.2, "text": " So today", "is_final": False, "emission_time": 1.5},
            {
                "start": 1.2,
                "end": 2.0,
                "text": " I want",
                "is_final": False,
                "words": [
                    {"word": " I", "start": 1.2, "end": 1.4},
                    {"word": " want", "start": 1.5, "end": 2.0},
                ],
            },
            {"start": 2.0, "end": 2.6, "text": " to talk.", "is_final": True},
            {"start": 3.0, "end": 3.5, "text": "Thanks", "is_final": True},
        )
    )
    assert detect_format(str(f)) == "whisper"
    ups = list(open_updates(str(f)))
    assert [(u.text, u.final, u.segment_id, u.start, u.end) for u in ups] == [
        ("So today", False, "w0", 0.0, 1.2),
        ("So today I want", False, "w0", 0.0, 2.0),
        ("So today I want to talk.", True, "w0", 0.0, 2.6),
        ("Thanks", True, "w1", 3.0, 3.5),
    ]
    assert [(w.text, w.start) for w in ups[1].words] == [("I", 1.2), ("want", 1.5)]


def test_confirmed_text_given_whole_or_as_pieces(tmp_path):
    from mlx_ssbd.evaluation.streams import open_updates

    f = tmp_path / "c.jsonl"
    f.write_text(
        _lines(
            {"text": "", "unconfirmed_text": "so to"},
            {"text": "so", "unconfirmed_text": "today we"},
            {"text": "so today", "unconfirmed_text": "we made"},  # confirmed part given whole
            {"text": "we", "unconfirmed_text": "made it"},  # ... or only the newly confirmed piece
            {"text": "made it", "unconfirmed_text": "", "is_final": True},
            {"text": "next", "unconfirmed_text": "one"},
        )
    )
    assert detect_format(str(f)) == "confirmed"
    ups = list(open_updates(str(f)))
    assert [(u.text, u.final, u.segment_id) for u in ups] == [
        ("so to", False, "c0"),
        ("so today we", False, "c0"),
        ("so today we made", False, "c0"),
        ("so today we made it", False, "c0"),
        ("so today we made it", True, "c0"),
        ("next one", False, "c1"),
    ]


def test_partials_with_timing_and_bad_word_timestamps(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        _lines(
            {
                "id": 1,
                "text": "so today",
                "start": 0.5,
                "end": 1.5,
                "words": [
                    {"word": "so", "start": 0.5, "end": 0.8},
                    {"text": "today", "start": 0.9, "end": 1.5},
                ],
            }
        )
    )
    (u,) = read_partials(str(f))
    assert (u.start, u.end, [w.text for w in u.words]) == (0.5, 1.5, ["so", "today"])
    f.write_text(_lines({"id": 1, "text": "a"}, {"id": 1, "text": "so", "words": [{"word": "so"}]}))
    with pytest.raises(StreamError, match=r"p.jsonl:2: each of 'words' needs"):
        list(read_partials(str(f)))
    f.write_text(_lines({"id": 1, "text": "so", "start": "zero"}))
    with pytest.raises(StreamError, match=r"p.jsonl:1: field 'start' must be int or float"):
        list(read_partials(str(f)))


def test_a_long_line_is_revealed_in_pieces_cut_after_a_sentence_end(tmp_path):
    words = [f"w{i}" for i in range(LONG_LINE_WORDS * 2 + 10)]
    words[LONG_LINE_WORDS - 11] += "."  # a sentence end in the first piece's second half
    f = tmp_path / "long.txt"
    f.write_text("short line here\n" + " ".join(words) + "\n")
    ups = list(read_text(str(f)))
    finals = [u for u in ups if u.final]
    assert [u.segment_id for u in finals] == ["line1", "line2", "line2.2", "line2.3"]
    assert finals[1].text.split()[-1] == words[LONG_LINE_WORDS - 11]  # cut after the sentence end
    assert " ".join(u.text for u in finals[1:]) == " ".join(words)  # nothing lost, nothing doubled
    assert all(len(u.text.split()) <= LONG_LINE_WORDS for u in ups)


def test_a_long_line_without_spaces_is_revealed_in_pieces_of_two_characters_a_word(tmp_path):
    """Chinese: a line of 300 characters (150 words as they are counted) comes in two pieces, cut
    after a "。", each revealed two characters a word; the spaces around a Latin word are kept."""
    line = "我们今天用 GPU 训练模型。" * 20  # 15 characters a sentence, 300 in all
    f = tmp_path / "zh.txt"
    f.write_text(line + "\n")
    ups = list(read_text(str(f), lag=1))
    finals = [u for u in ups if u.final]
    assert [u.segment_id for u in finals] == ["line1", "line1.2"]
    assert all(u.text.endswith("。") for u in finals)
    assert "".join(u.text for u in finals) == line  # nothing lost, nothing doubled
    assert all(scripts.word_count(u.text) <= LONG_LINE_WORDS for u in ups)
    assert [u.text for u in ups[:3]] == ["我们", "我们今天", "我们今天用 GPU"]


def test_lines_longer_than_a_read_piece_are_cut_at_spaces_and_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(text_lines, "LINE_PIECE_BYTES", 64)
    text = " ".join(f"wörd{i}" for i in range(100))
    f = tmp_path / "t.txt"
    f.write_text(text + "\nnext\n" + "é" * 100 + "\n")
    lines = list(text_lines.read_lines(str(f)))
    assert {n for n, _ in lines} == {1, 2, 3}
    assert " ".join(p.strip() for n, p in lines if n == 1).split() == text.split()
    assert "".join(p for n, p in lines if n == 3) == "é" * 100  # no character split in two
    with pytest.raises(StreamError, match=":1: a JSON line longer than"):
        list(
            streams.parse_partials(iter([(1, text_lines.LinePiece('{"id": 1,')), (1, ' "text": "a"}')]), "x")
        )


def test_a_huge_line_streams_in_bounded_memory(tmp_path):
    """A 4 MB line without punctuation: the first update comes at once, and reading all of it
    holds a few pieces, never every prefix of the line."""
    f = tmp_path / "huge.txt"
    with open(f, "w") as out:
        for i in range(400_000):
            out.write(f"word{i % 1000} ")
    tracemalloc.start()
    try:
        updates = read_text(str(f))
        assert next(updates).text == "word0 word1 word2"
        count = 1 + sum(1 for _ in updates)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count >= 400_000 // 3
    assert peak < 3 * text_lines.LINE_PIECE_BYTES + (4 << 20), f"peak {peak / 2**20:.1f} MiB"


def test_a_line_is_revealed_before_the_next_is_read():
    """Live stdin: a line's updates come as soon as it has arrived, never after a read ahead."""

    def lines():
        yield 1, "so today I want"
        raise AssertionError("read a line ahead")

    updates = streams.parse_text(lines(), "<stdin>")
    assert [next(updates).text, next(updates).text] == ["so today I", "so today I want"]
