"""Subtitle cues: committed captions as SubRip (SRT) or WebVTT text.

Contract: ``layout(text)`` lays a caption out as the usual subtitle conventions have it: cues of
at most ``CUE_LINES`` (2) lines of at most ``LINE_CHARS`` (42) characters, or
``DENSE_LINE_CHARS`` (16) in Chinese and ``JAPANESE_LINE_CHARS`` (13) in Japanese, which are
written without spaces (``line_chars_of``). A caption longer
than a cue becomes several: a cue ends where a sentence ends, sentences that fit together share
one, and a sentence longer than a cue is split into as few cues as it needs (with the sentences
before it in its cue where that takes no more), of lengths as even as they can be, ending after
other punctuation where some falls near there. A cue's lines are balanced, a break after
punctuation preferred; a word longer than a line has a line of its own. Text without spaces
breaks between characters and keeps Japanese line-breaking rules (``NO_LINE_START``,
``NO_LINE_END``); Japanese breaks between phrases instead where MeCab is installed (the ``ja``
extra; ``japanese.phrases``), and between the characters of a phrase only where it is longer than
a line.
``lines(text, width)`` cuts text into lines of at most ``width`` characters, each filled in
turn, at the same breaks (a word longer than a line cut into pieces): for platforms that take
lines, not cues. ``Cues(kind)`` turns consecutive captions into numbered cues (``add(start, end, text)``): each
caption laid out and its time shared among its cues by their characters, every cue at least
``MIN_CUE_S`` on screen and never starting before the previous one ends. ``cue(kind, number,
start, end, text)`` is one cue ("" for an empty caption), its lines as given; ``document(kind,
captions)`` a whole file (WebVTT with its header) from ``(start, end, text)`` triples, numbered
from 1 (SRT only).

Whatever the model writes, the file stays valid and shows the text as written: WebVTT cue text
escapes ``&``, ``<`` and ``>`` as character references (so ``-->`` cannot end up in a cue); SRT has
no escapes, so a ``-->`` in the text becomes ``->``, a ``<`` that would open a formatting tag
becomes the look-alike ``‹`` (U+2039) and a ``{`` that would open an override tag (``{\an8}``,
which moves the cue) becomes ``｛`` (U+FF5B). In both, the invisible controls that reorder text
(bidi embeddings, overrides and isolates: U+202A-U+202E, U+2066-U+2069) are dropped, so a cue
cannot show its words in another order than written. Times must be finite (``ValueError``
otherwise).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from . import japanese, scripts

MIN_CUE_S = 1.0  # a subtitle cue shows for at least this long
LINE_CHARS = 42  # characters of a subtitle line at most, in text whose words are spaced
DENSE_LINE_CHARS = 16  # ... in Chinese, written without spaces
JAPANESE_LINE_CHARS = 13  # ... in Japanese
CUE_LINES = 2  # lines of a cue at most
SENTENCE_MARKS = scripts.SENTENCE_END  # a cue ends best after these
BREAK_AFTER = (*scripts.SENTENCE_END, *scripts.CLAUSE_END)  # ... or these; a line too
# In text written without spaces: what never starts a line (closing punctuation, small kana, the
# long-vowel mark), and what never ends one (opening brackets).
NO_LINE_START = (*scripts.CLOSING, *"ーぁぃぅぇぉっゃゅょァィゥェォッャュョ")
NO_LINE_END = tuple("（「『【〈《“‘(")
BALANCED_UNITS = 400  # a run of words (or characters) longer than this is cut as each cue fills
KINDS = {"srt": (",", "", True), "vtt": (".", "WEBVTT\n\n", False)}  # separator, header, numbered


SRT_TAG = re.compile(r"<(?=[A-Za-z/!])")  # what an SRT player would read as the start of a tag
SRT_OVERRIDE = re.compile(r"\{(?=\\)")  # the start of an SSA override tag, {\an8}, that players apply
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])  # dropped by str.translate


def timestamp(seconds: float, separator: str) -> str:
    """``HH:MM:SS,mmm`` (SRT, separator ",") or ``HH:MM:SS.mmm`` (WebVTT, ".")."""
    if not math.isfinite(seconds):
        raise ValueError(f"a subtitle time must be finite, got {seconds}")
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def header(kind: str) -> str:
    return KINDS[kind][1]


def cue(kind: str, number: int, start: float, end: float, text: str) -> str:
    separator, _, numbered = KINDS[kind]
    lines = [" ".join(line.split()) for line in text.splitlines()]  # no blank line inside a cue
    text = "\n".join(escape(kind, line) for line in lines if line)
    if not text:
        return ""
    end = max(end, start + MIN_CUE_S)
    label = f"{number}\n" if numbered else ""
    return f"{label}{timestamp(start, separator)} --> {timestamp(end, separator)}\n{text}\n\n"


def escape(kind: str, text: str) -> str:
    """``text`` as cue text: escaped (WebVTT), or the nearest that SRT can hold (module docstring)."""
    text = text.translate(BIDI_CONTROLS)
    if kind == "vtt":
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    while "-->" in text:
        text = text.replace("-->", "->")
    return SRT_OVERRIDE.sub("\uff5b", SRT_TAG.sub("\u2039", text))


def document(
    kind: str,
    captions: Iterable[tuple[float, float, str]],
    line_chars: int | None = None,
    lines: int = CUE_LINES,
) -> str:
    """A whole subtitle file; empty captions are skipped and do not take a number."""
    cues = Cues(kind, line_chars, lines)
    return header(kind) + "".join(cues.add(*caption) for caption in captions)


class Cues:
    """Numbered cues of consecutive captions (module docstring); ``line_chars`` and ``lines`` as
    ``layout`` takes them."""

    def __init__(self, kind: str, line_chars: int | None = None, lines: int = CUE_LINES):
        self.kind, self.line_chars, self.lines = kind, line_chars, lines
        self.count = 0
        self.end = 0.0  # of the last cue: a cue never starts before it (ASR word times may overlap)

    def add(self, start: float, end: float, text: str) -> str:
        """The cues of one caption shown from ``start`` to ``end`` ("" for an empty one)."""
        texts = layout(text, self.line_chars, self.lines)
        total, shown, out = sum(map(len, texts)), 0, []
        for piece in texts:
            at = max(start + (end - start) * shown / total, self.end)
            shown += len(piece)
            until = start + (end - start) * shown / total
            written = cue(self.kind, self.count + 1, at, until, piece)
            if written:
                self.count, self.end = self.count + 1, max(until, at + MIN_CUE_S)
                out.append(written)
        return "".join(out)


def layout(text: str, line_chars: int | None = None, lines: int = CUE_LINES) -> list[str]:
    """``text`` as the texts of consecutive cues, lines joined by newlines (module docstring):
    lines of at most ``line_chars`` characters (None: ``line_chars_of(text)``; 0: each caption
    one cue on one line), at most ``lines`` a cue."""
    limit = line_chars_of(text) if line_chars is None else line_chars
    units, dense = _units(text, limit)
    if not units:
        return []
    if limit == 0:
        return [_join(units, dense)]
    cues: list[list[str]] = []
    whole = False  # whether the last cue holds whole sentences only
    for sentence in _sentences(units):
        if whole and _fitting(cues[-1] + sentence, dense, limit, lines) == len(cues[-1]) + len(sentence):
            cues[-1] += sentence
        elif _fitting(sentence, dense, limit, lines) == len(sentence):
            cues.append(sentence)
            whole = True
        else:  # split it, with the last cue's sentences where that takes no more cues
            if whole and _cue_count(cues[-1] + sentence, dense, limit, lines) <= _cue_count(
                sentence, dense, limit, lines
            ):
                sentence = cues.pop() + sentence
            ends = _cue_ends(sentence, dense, limit, lines)
            cues += [sentence[a:b] for a, b in zip([0, *ends], ends)]
            whole = False
    return ["\n".join(_balanced(cue, dense, limit, lines)) for cue in cues]


def _sentences(units: list[str]) -> list[list[str]]:
    """``units`` cut after each one that ends a sentence."""
    out: list[list[str]] = [[]]
    for unit in units:
        out[-1].append(unit)
        if unit.rstrip().endswith(SENTENCE_MARKS):
            out.append([])
    return [sentence for sentence in out if sentence]


def _cue_ends(units: list[str], dense: bool, limit: int, lines: int) -> list[int]:
    """Where the cues of a sentence (or a few) too long for one end: as few cues as it needs, their
    lengths as even as they can be, a cue that ends after punctuation worth 10 characters (the
    least total of each cue's distance from the even length, less its worth). A run longer than
    ``BALANCED_UNITS`` (no caption is) is cut as each cue fills."""
    filled = _filled_ends(units, dense, limit, lines)
    count, need = len(units), len(filled)
    if need == 1 or count > BALANCED_UNITS:
        return filled
    sizes = [len(unit) if dense else len(unit) + 1 for unit in units]  # a word and its space
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)
    target = starts[-1] / need
    most = [_fitting(units[i:], dense, limit, lines) for i in range(count)]

    def cost(i: int, j: int) -> float:
        worth = 10 if units[j - 1].rstrip().endswith(BREAK_AFTER) else 0
        return abs(starts[j] - starts[i] - target) - worth

    # best[i]: the least cost of units[i:] in the cues left, and their ends; one cue more a round
    best: dict[int, tuple[float, tuple[int, ...]]] = {count: (0.0, ())}
    for _ in range(need):
        best = {
            i: min(
                (cost(i, j) + best[j][0], (j, *best[j][1]))
                for j in range(i + 1, i + most[i] + 1)
                if j in best
            )
            for i in range(count)
            if any(j in best for j in range(i + 1, i + most[i] + 1))
        }
    return list(best[0][1])


def _filled_ends(units: list[str], dense: bool, limit: int, lines: int) -> list[int]:
    """Where the cues of ``units`` end when each is filled in turn."""
    ends = [0]
    while ends[-1] < len(units):
        ends.append(ends[-1] + _fitting(units[ends[-1] :], dense, limit, lines))
    return ends[1:]


def _cue_count(units: list[str], dense: bool, limit: int, lines: int) -> int:
    return len(_filled_ends(units, dense, limit, lines))


def lines(text: str, width: int) -> list[str]:
    """The module docstring's ``lines``."""
    units, dense = _units(text, width)
    pieces = [piece for unit in units for piece in _pieces(unit, width)]
    ends = _filled_ends(pieces, dense, width, 1)
    return [_join(pieces[a:b], dense) for a, b in zip([0, *ends], ends)]


def _pieces(unit: str, width: int) -> list[str]:
    """``unit`` in pieces of at most ``width`` characters (the last keeps its trailing spaces)."""
    word = unit.strip()
    if len(word) <= width:
        return [unit]
    cuts = [word[i : i + width] for i in range(0, len(word), width)]
    return [*cuts[:-1], cuts[-1] + unit[len(unit.rstrip()) :]]


def line_chars_of(text: str) -> int:
    """The longest line for ``text``'s script (module docstring)."""
    if not scripts.is_dense(text):
        return LINE_CHARS
    return JAPANESE_LINE_CHARS if japanese.is_japanese(text) else DENSE_LINE_CHARS


def _units(text: str, limit: int) -> tuple[list[str], bool]:
    """The pieces a line may break between, and whether the text is written without spaces: its
    words (``scripts.words``), or there its characters, or the phrases of Japanese where MeCab
    finds them (a phrase longer than ``limit`` in its characters); what may not start a line
    joined to the piece before it and an opening bracket to the piece after it (Japanese
    line-breaking rules)."""
    units, dense = scripts.words(text, NO_LINE_START, NO_LINE_END)
    if not dense or not limit or not japanese.is_japanese(text) or (found := japanese.phrases(text)) is None:
        return units, dense
    units = []
    for phrase in scripts.attached(found, NO_LINE_START, NO_LINE_END):
        if len(phrase.strip()) > limit:
            units += scripts.iter_words(phrase, True, NO_LINE_START, NO_LINE_END)
        else:
            units.append(phrase)
    return units, True


_join = scripts.join


def _fitting(units: list[str], dense: bool, limit: int, lines: int) -> int:
    """How many of ``units`` one cue holds: as many as fill ``lines`` lines of ``limit``
    characters (the spaces between them counted), each line filled in turn (at least one unit)."""
    used, line = 1, []
    for i, unit in enumerate(units):
        grown = [*line, unit]
        if line and len(_join(grown, dense)) > limit:
            used, grown = used + 1, [unit]
            if used > lines:
                return i
        line = grown
    return len(units)


def _balanced(units: list[str], dense: bool, limit: int, lines: int) -> list[str]:
    """``units`` (that fit) on as few lines as they need, of the most even lengths, a line that
    ends in punctuation worth 6 characters less."""
    if len(_join(units, dense)) <= limit or lines == 1 or len(units) == 1:
        return [_join(units, dense)]
    best: tuple[float, list[str]] | None = None
    for cut in range(1, len(units)):
        top, rest = _join(units[:cut], dense), units[cut:]
        if len(top) > limit and cut > 1:
            break
        below = (
            _balanced(rest, dense, limit, lines - 1)
            if _fitting(rest, dense, limit, lines - 1) == len(rest)
            else None
        )
        if below is None:
            continue
        cost = max(len(top), *map(len, below)) - (6 if top.endswith(BREAK_AFTER) else 0)
        if best is None or cost < best[0]:
            best = (cost, [top, *below])
    return best[1] if best is not None else [_join(units, dense)]
