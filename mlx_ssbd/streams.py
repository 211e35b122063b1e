"""Sources of source-text updates: lag-k word reveal of sentences, ASR partials, files and stdin.

Contract: every reader yields ``SourceUpdate``s lazily, line by line, so a consumer can translate
(and write out) each update before the next line is read; a bad line raises ``StreamError``
naming the file and line number only when it is reached. Formats:

* sentence pairs, JSONL ``{"id", "src", "ref"}`` (``ref`` optional): each ``src`` is revealed
  ``lag`` words at a time (the paper's lag-k simulation, k = 3 by default), the last update final;
* ASR partials, JSONL ``{"id", "text", "final"}``: a partial may grow, shrink or revise earlier
  words; a segment ends at ``final: true`` or when ``id`` changes;
* plain text: each non-empty line is one sentence revealed ``lag`` words at a time.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .translator import SourceUpdate

DEFAULT_LAG = 3


class StreamError(ValueError):
    """A stream cannot be read: the message names the file and line."""


@dataclass(frozen=True)
class Pair:
    """A source sentence with its optional reference translation."""

    id: str
    src: str
    ref: str | None = None


def lag_updates(text: str, lag: int = DEFAULT_LAG, segment_id: str | None = None) -> list[SourceUpdate]:
    """Reveal ``text`` ``lag`` words at a time; the last update is the full text, final."""
    if not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be a positive integer, got {lag!r}")
    words = text.split()
    if not words:
        raise ValueError("cannot stream an empty sentence")
    cuts = list(range(lag, len(words), lag)) + [len(words)]
    return [
        SourceUpdate(" ".join(words[:n]), final=n == len(words), segment_id=segment_id) for n in cuts
    ]


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file, or stdin for ``-``, read lazily."""
    if path == "-":
        stream = sys.stdin.buffer
        name = "<stdin>"
    else:
        p = Path(path)
        if not p.exists():
            raise StreamError(f"{path}: no such file")
        if p.is_dir():
            raise StreamError(f"{path}: is a directory, expected a text or JSONL file")
        stream = open(p, "rb")
        name = path
    try:
        for number, raw in enumerate(stream, 1):
            if b"\x00" in raw:
                raise StreamError(f"{name}:{number}: binary data (NUL byte), expected UTF-8 text")
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise StreamError(f"{name}:{number}: invalid UTF-8 ({error.reason})") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _json_object(name: str, number: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        raise StreamError(f"{name}:{number}: malformed JSON ({error.msg})") from None
    if not isinstance(obj, dict):
        raise StreamError(f"{name}:{number}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _field(obj: dict, key: str, kind, name: str, number: int, required: bool = True):
    if key not in obj:
        if required:
            raise StreamError(f"{name}:{number}: missing field {key!r}")
        return None
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        wanted = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise StreamError(f"{name}:{number}: field {key!r} must be {wanted}, got {type(value).__name__}")
    return value


Lines = Iterable[tuple[int, str]]


def parse_pairs(lines: Lines, name: str) -> Iterator[tuple[int, Pair]]:
    """(line number, Pair) from JSONL lines of ``{"id", "src", "ref"}``; blank lines skipped."""
    for number, line in lines:
        if not line.strip():
            continue
        obj = _json_object(name, number, line)
        src = _field(obj, "src", str, name, number)
        if not src.strip():
            raise StreamError(f"{name}:{number}: field 'src' is empty")
        ident = _field(obj, "id", (str, int), name, number, required=False)
        ref = _field(obj, "ref", str, name, number, required=False)
        yield number, Pair(str(ident if ident is not None else number), src, ref)


def parse_partials(lines: Lines, name: str) -> Iterator[SourceUpdate]:
    """ASR partials from JSONL lines of ``{"id", "text", "final"}``."""
    for number, line in lines:
        if not line.strip():
            continue
        obj = _json_object(name, number, line)
        text = _field(obj, "text", str, name, number)
        final = _field(obj, "final", bool, name, number, required=False) or False
        ident = _field(obj, "id", (str, int), name, number)
        if not text.strip():
            raise StreamError(f"{name}:{number}: field 'text' is empty")
        yield SourceUpdate(text, final=final, segment_id=str(ident))


def _checked(check, text: str, where: str) -> None:
    if check is not None:
        try:
            check(text)
        except ValueError as error:
            raise StreamError(f"{where}: {error}") from None


def parse_text(lines: Lines, name: str, lag: int = DEFAULT_LAG, check=None) -> Iterator[SourceUpdate]:
    """Plain text: each non-empty line is a sentence revealed ``lag`` words at a time.

    ``check(line)``, if given, vets the whole line before its first update (e.g. that it fits
    the model's context), so an impossible line fails at once rather than after many updates.
    """
    for number, line in lines:
        if line.strip():
            _checked(check, line, f"{name}:{number}")
            yield from lag_updates(line, lag, segment_id=f"line{number}")


def pair_updates(
    pairs: Iterable[tuple[int, Pair]], lag: int = DEFAULT_LAG, check=None, name: str = ""
) -> Iterator[SourceUpdate]:
    """Lag-k updates for (line number, Pair) items, as ``parse_pairs`` yields them."""
    for number, pair in pairs:
        _checked(check, pair.src, f"{name}:{number}")
        yield from lag_updates(pair.src, lag, segment_id=pair.id)


def _display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def read_pairs(path: str) -> Iterator[tuple[int, Pair]]:
    return parse_pairs(read_lines(path), _display_name(path))


def read_partials(path: str) -> Iterator[SourceUpdate]:
    return parse_partials(read_lines(path), _display_name(path))


def read_text(path: str, lag: int = DEFAULT_LAG, check=None) -> Iterator[SourceUpdate]:
    return parse_text(read_lines(path), _display_name(path), lag, check)


INPUT_KINDS = ("auto", "text", "partials", "pairs")


def open_updates(path: str, *, lag: int = DEFAULT_LAG, kind: str = "auto", check=None) -> Iterator[SourceUpdate]:
    """Source updates from a file or stdin (``-``) of any supported kind, read lazily.

    ``kind="auto"`` decides by the first non-empty line: a JSON object with ``src`` is pairs,
    one with ``text`` is ASR partials, anything else plain text.

    Raises:
        StreamError: unreadable input (named, with line numbers), or no non-empty line at all.
    """
    name = _display_name(path)
    lines = read_lines(path)
    first = next(((n, line) for n, line in lines if line.strip()), None)
    if first is None:
        raise StreamError(f"{name}: no input (empty file or only blank lines)")
    if kind == "auto":
        kind = _guess_kind(name, *first)
    lines = itertools.chain([first], lines)
    if kind == "pairs":
        return pair_updates(parse_pairs(lines, name), lag, check, name)
    if kind == "partials":
        return parse_partials(lines, name)
    if kind == "text":
        return parse_text(lines, name, lag, check)
    raise ValueError(f"unknown input kind {kind!r}; known: {', '.join(INPUT_KINDS)}")


def _guess_kind(name: str, number: int, line: str) -> str:
    if not line.lstrip().startswith("{"):
        return "text"
    obj = _json_object(name, number, line)
    if "src" in obj:
        return "pairs"
    if "text" in obj:
        return "partials"
    raise StreamError(f"{name}:{number}: expected fields 'src' (pairs) or 'text' (ASR partials)")


def detect_format(path: str) -> str:
    """"pairs", "partials" or "text", judged by the first non-empty line of ``path``."""
    first = next(((n, line) for n, line in read_lines(path) if line.strip()), None)
    if first is None:
        raise StreamError(f"{_display_name(path)}: empty file")
    return _guess_kind(_display_name(path), *first)
