"""Sources of source-text updates: lag-k word reveal of sentences, ASR partials, files and stdin.

Contract: every reader yields ``SourcePartial``s lazily, line by line, so a consumer can translate
(and write out) each update before the next line is read; a bad line raises ``StreamError``
naming the file and line number only when it is reached. Formats:

* sentence pairs, JSONL ``{"id", "src", "ref"}`` (``ref`` optional): each ``src`` is revealed
  ``lag`` words at a time (the paper's lag-k simulation, k = 3 by default), the last update final;
* ASR partials, JSONL ``{"id", "text", "final"}``: a partial may grow, shrink or revise earlier
  words; a segment ends at ``final: true`` or when ``id`` changes. Optional ``start``/``end``
  (audio seconds) and ``words`` (``[{"word", "start", "end"}]``) time the captions;
* whisper_streaming / SimulStreaming ASR output, JSONL ``{"start", "end", "text", "is_final"}``:
  each line *appends* newly confirmed text (``words`` optional); ``is_final: true`` ends a segment;
* confirmed/unconfirmed, JSONL ``{"text", "unconfirmed_text"}`` (``is_final`` optional): ``text``
  is the confirmed part, which only grows (given whole or as the newly confirmed piece), and
  ``unconfirmed_text`` the revisable rest; the source is both together;
* plain text: each non-empty line is one sentence revealed ``lag`` words at a time; a line of
  more than ``LONG_LINE_WORDS`` words is cut into pieces of at most that many (after its last
  sentence end in the piece's second half, when there is one), each revealed as a sentence of its
  own, so an update's cost stays flat however long a line runs. Text written without spaces
  (Chinese, Japanese) counts ``scripts.CHARS_PER_WORD`` characters a word (``scripts.words``).

Any input streams through in bounded memory: lines are read in pieces of at most
``LINE_PIECE_BYTES`` (``lines.read_lines``: a longer plain-text line is cut at a space), and a
JSONL line longer than that is refused with its line number.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..live import scripts
from ..live.segmenter import is_sentence_end
from ..live.source import SourcePartial, Word
from .lines import LINE_PIECE_BYTES, LinePiece, StreamError, read_lines

DEFAULT_LAG = 3
LONG_LINE_WORDS = 96  # a plain-text line longer than this is revealed in pieces of at most this many


@dataclass(frozen=True)
class Pair:
    """A source sentence with its optional reference translation."""

    id: str
    src: str
    ref: str | None = None


def lag_updates(text: str, lag: int = DEFAULT_LAG, segment_id: str | None = None) -> list[SourcePartial]:
    """Reveal ``text`` ``lag`` words at a time (text written without spaces: ``lag`` times
    ``scripts.CHARS_PER_WORD`` characters); the last update is the full text, final."""
    if not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be a positive integer, got {lag!r}")
    words, dense = scripts.words(text)
    if not words:
        raise ValueError("cannot stream an empty sentence")
    step = lag * scripts.units_per_word(dense)
    cuts = list(range(step, len(words), step)) + [len(words)]
    return [
        SourcePartial(scripts.join(words[:n], dense), final=n == len(words), segment_id=segment_id)
        for n in cuts
    ]


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


def _objects(lines: Lines, name: str) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for each non-blank line; a line that ``read_lines`` gave in
    pieces (longer than ``LINE_PIECE_BYTES``) is refused."""
    for number, line in lines:
        if isinstance(line, LinePiece):
            raise StreamError(f"{name}:{number}: a JSON line longer than {LINE_PIECE_BYTES >> 20} MiB")
        if line.strip():
            yield number, _json_object(name, number, line)


def parse_pairs(lines: Lines, name: str) -> Iterator[tuple[int, Pair]]:
    """(line number, Pair) from JSONL lines of ``{"id", "src", "ref"}``; blank lines skipped."""
    for number, obj in _objects(lines, name):
        src = _field(obj, "src", str, name, number)
        if not src.strip():
            raise StreamError(f"{name}:{number}: field 'src' is empty")
        ident = _field(obj, "id", (str, int), name, number, required=False)
        ref = _field(obj, "ref", str, name, number, required=False)
        yield number, Pair(str(ident if ident is not None else number), src, ref)


def _timing(obj: dict, name: str, number: int) -> dict:
    """Optional ``start``/``end`` seconds and ``words`` timestamps of one JSONL line."""
    start = _field(obj, "start", (int, float), name, number, required=False)
    end = _field(obj, "end", (int, float), name, number, required=False)
    words = []
    for item in _field(obj, "words", list, name, number, required=False) or []:
        if not isinstance(item, dict):
            raise StreamError(f"{name}:{number}: each of 'words' must be an object")
        text = item.get("word", item.get("text"))
        w_start, w_end = item.get("start"), item.get("end")
        if not isinstance(text, str) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) for t in (w_start, w_end)
        ):
            raise StreamError(
                f"{name}:{number}: each of 'words' needs 'word' (str), 'start' and 'end' (numbers)"
            )
        words += [Word(piece, float(w_start), float(w_end)) for piece in text.split()]
    return {
        "start": None if start is None else float(start),
        "end": None if end is None else float(end),
        "words": tuple(words),
    }


def parse_partials(lines: Lines, name: str) -> Iterator[SourcePartial]:
    """ASR partials from JSONL lines of ``{"id", "text", "final"}`` (+ optional timing)."""
    for number, obj in _objects(lines, name):
        text = _field(obj, "text", str, name, number)
        final = _field(obj, "final", bool, name, number, required=False) or False
        ident = _field(obj, "id", (str, int), name, number)
        if not text.strip():
            raise StreamError(f"{name}:{number}: field 'text' is empty")
        yield SourcePartial(text, final=final, segment_id=str(ident), **_timing(obj, name, number))


def partial_json(update: SourcePartial) -> dict:
    """One ASR partial as the JSONL object ``parse_partials`` reads back (``listen --asr-only``)."""
    obj = {"id": update.segment_id, "text": update.text, "final": update.final}
    if update.start is not None and update.end is not None:
        obj.update(start=round(update.start, 3), end=round(update.end, 3))
    if update.words:
        obj["words"] = [
            {"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3)} for w in update.words
        ]
    return obj


def parse_whisper(lines: Lines, name: str) -> Iterator[SourcePartial]:
    """whisper_streaming chunks ``{"start", "end", "text", "is_final"}``, each appending
    confirmed text to the current segment; yields the segment's whole text so far."""
    segment, texts, words, start = 0, [], [], None
    for number, obj in _objects(lines, name):
        text = _field(obj, "text", str, name, number)
        final = _field(obj, "is_final", bool, name, number, required=False) or False
        timing = _timing(obj, name, number)
        if text.strip():
            texts.append(text.strip())
            words += timing["words"]
            start = timing["start"] if start is None else start
        if texts and (text.strip() or final):
            yield SourcePartial(
                " ".join(texts),
                final=final,
                segment_id=f"w{segment}",
                start=start,
                end=timing["end"],
                words=tuple(words),
            )
        if final:
            segment, texts, words, start = segment + 1, [], [], None


def parse_confirmed(lines: Lines, name: str) -> Iterator[SourcePartial]:
    """``{"text", "unconfirmed_text"}`` lines: source = confirmed text + unconfirmed rest."""
    segment, confirmed = 0, ""
    for number, obj in _objects(lines, name):
        text = _field(obj, "text", str, name, number).strip()
        rest = (_field(obj, "unconfirmed_text", str, name, number, required=False) or "").strip()
        final = _field(obj, "is_final", bool, name, number, required=False) or False
        if confirmed and text.startswith(confirmed):
            confirmed = text  # given whole
        elif text:
            confirmed = f"{confirmed} {text}".strip()  # given as the newly confirmed piece
        source = f"{confirmed} {rest}".strip()
        if source:
            yield SourcePartial(source, final=final, segment_id=f"c{segment}", **_timing(obj, name, number))
        if final:
            segment, confirmed = segment + 1, ""


def _checked(check, text: str, where: str) -> None:
    if check is not None:
        try:
            check(text)
        except ValueError as error:
            raise StreamError(f"{where}: {error}") from None


def parse_text(lines: Lines, name: str, lag: int = DEFAULT_LAG, check=None) -> Iterator[SourcePartial]:
    """Plain text: each non-empty line is a sentence revealed ``lag`` words at a time, a long one
    in pieces (module docstring), each with a segment id of its own (``line7``, ``line7.2``, ...).

    ``check(sentence)``, if given, vets each sentence (or piece) before its first update (e.g. that
    it fits the model's context), so an impossible one fails at once rather than after many updates.
    """
    lines = iter(lines)
    for number, piece in lines:
        for k, sentence in enumerate(_long_line_pieces(_line_units(piece, lines), LONG_LINE_WORDS), 1):
            text = "".join(sentence).strip()
            _checked(check, text, f"{name}:{number}")
            yield from lag_updates(text, lag, segment_id=f"line{number}" + (f".{k}" if k > 1 else ""))


def _line_units(piece: str, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[str, float]]:
    """The words of the line that starts with ``piece`` (``scripts.words``: in text written without
    spaces, its characters), each with the one space that follows it in the line (if any) and what
    it counts as a word; further pieces of the line are taken from ``lines`` as they are needed
    (never a line ahead: a live stdin line is read as soon as it arrives)."""
    while True:
        dense = scripts.is_dense(piece)
        size = 1 / scripts.units_per_word(dense)
        for unit in scripts.iter_words(piece, dense):
            yield (unit.rstrip() + " " if not dense or unit[-1].isspace() else unit), size
        if not isinstance(piece, LinePiece) or (item := next(lines, None)) is None:
            return
        piece = item[1]


def _long_line_pieces(units: Iterator[tuple[str, float]], max_words: int) -> Iterator[list[str]]:
    """The units of one line (``_line_units``) in pieces of at most ``max_words`` words: a piece
    ends after its last sentence end past ``max_words / 2`` words, else before the unit that would
    take it past ``max_words``; a line of at most ``max_words`` words is one piece (none for a
    blank line)."""
    piece: list[str] = []
    counted: list[float] = []  # words up to and including each unit of the piece
    for unit, size in units:
        piece.append(unit)
        counted.append((counted[-1] if counted else 0) + size)
        if counted[-1] > max_words:
            cut = next(
                (
                    i + 1
                    for i in range(len(piece) - 2, -1, -1)
                    if counted[i] >= max_words / 2 and is_sentence_end(piece[i].strip(), piece[i + 1].strip())
                ),
                len(piece) - 1,
            )
            yield piece[:cut]
            piece, counted = piece[cut:], [c - counted[cut - 1] for c in counted[cut:]]
    if piece:
        yield piece


def pair_updates(
    pairs: Iterable[tuple[int, Pair]], lag: int = DEFAULT_LAG, check=None, name: str = ""
) -> Iterator[SourcePartial]:
    """Lag-k updates for (line number, Pair) items, as ``parse_pairs`` yields them."""
    for number, pair in pairs:
        _checked(check, pair.src, f"{name}:{number}")
        yield from lag_updates(pair.src, lag, segment_id=pair.id)


def _display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def read_pairs(path: str) -> Iterator[tuple[int, Pair]]:
    return parse_pairs(read_lines(path), _display_name(path))


def read_partials(path: str) -> Iterator[SourcePartial]:
    return parse_partials(read_lines(path), _display_name(path))


def read_text(path: str, lag: int = DEFAULT_LAG, check=None) -> Iterator[SourcePartial]:
    return parse_text(read_lines(path), _display_name(path), lag, check)


INPUT_KINDS = ("auto", "text", "partials", "whisper", "confirmed", "pairs")


def open_updates(
    path: str, *, lag: int = DEFAULT_LAG, kind: str = "auto", check=None
) -> Iterator[SourcePartial]:
    """Source updates from a file or stdin (``-``) of any supported kind, read lazily.

    ``kind="auto"`` decides by the first non-empty line: a JSON object with ``src`` is pairs,
    one with ``unconfirmed_text`` is confirmed/unconfirmed, one with ``text`` and ``id`` is ASR
    partials, one with ``text`` and ``is_final`` or ``start`` is whisper_streaming output, anything
    else plain text.

    Raises:
        StreamError: unreadable input (named, with line numbers), or no non-empty line at all.
    """
    name = _display_name(path)
    lines = read_lines(path)
    first = _first_line(lines, name)
    if kind == "auto":
        kind = _guess_kind(name, *first)
    lines = itertools.chain([first], lines)
    if kind == "pairs":
        return pair_updates(parse_pairs(lines, name), lag, check, name)
    if kind == "partials":
        return parse_partials(lines, name)
    if kind == "whisper":
        return parse_whisper(lines, name)
    if kind == "confirmed":
        return parse_confirmed(lines, name)
    if kind == "text":
        return parse_text(lines, name, lag, check)
    raise ValueError(f"unknown input kind {kind!r}; known: {', '.join(INPUT_KINDS)}")


def _guess_kind(name: str, number: int, line: str) -> str:
    if not line.lstrip().startswith("{"):
        return "text"
    obj = _json_object(name, number, line)
    if "src" in obj:
        return "pairs"
    if "unconfirmed_text" in obj:
        return "confirmed"
    if "text" in obj and "id" not in obj and ("is_final" in obj or "start" in obj):
        return "whisper"
    if "text" in obj:
        return "partials"
    raise StreamError(f"{name}:{number}: expected fields 'src' (pairs) or 'text' (ASR partials)")


def detect_format(path: str) -> str:
    """ "pairs", "partials" or "text", judged by the first non-empty line of ``path``."""
    name = _display_name(path)
    return _guess_kind(name, *_first_line(read_lines(path), name))


def _first_line(lines: Iterator[tuple[int, str]], name: str) -> tuple[int, str]:
    """(number, text) of the first non-blank line, read from ``lines``."""
    first = next(((n, line) for n, line in lines if line.strip()), None)
    if first is None:
        raise StreamError(f"{name}: no input (empty file or only blank lines)")
    return first
