"""Stream readers: lag-k reveal, partials, plain text, bad input with line numbers."""

import pytest

from mlx_ssbd.streams import StreamError, detect_format, lag_updates, read_pairs, read_partials, read_text


def test_lag3_reveal():
    ups = lag_updates("a b c d e f g", 3, "s1")
    assert [u.text for u in ups] == ["a b c", "a b c d e f", "a b c d e f g"]
    assert [u.final for u in ups] == [False, False, True] and ups[0].segment_id == "s1"
    assert [u.text for u in lag_updates("a b c", 3)] == ["a b c"]
    with pytest.raises(ValueError, match="lag"):
        lag_updates("a", 0)


def test_partials_may_shrink_and_revise(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": 1, "text": "so to", "final": false}\n\n{"id": 1, "text": "so", "final": false}\n'
                 '{"id": 1, "text": "so today", "final": true}\n')
    ups = list(read_partials(str(f)))
    assert [u.text for u in ups] == ["so to", "so", "so today"] and ups[-1].final and ups[0].segment_id == "1"


@pytest.mark.parametrize("content,match", [
    (b'{"id": 1, "text": "a"}\n{"id": 1}\n', ":2: missing field 'text'"),
    (b'{"id": 1, "text": 5}\n', ":1: field 'text' must be str, got int"),
    (b'{"id": 1, "text": "a", "final": "yes"}\n', ":1: field 'final' must be bool"),
    (b'{"id": 1, "text": "a"}\n{oops\n', ":2: malformed JSON"),
    (b'[1, 2]\n', ":1: expected a JSON object"),
    (b'{"id": 1, "text": "a"}\n\xff\xfe\n', ":2: invalid UTF-8"),
    (b'\x00\x01\x02', ":1: binary data"),
])
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
    assert [(u.text, u.final) for u in ups] == [("one two three", False), ("one two three four", True), ("five", True)]


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
