"""Words of text written with or without spaces, for the rules that count or cut words.

Contract: ``words(text)`` is ``(units, dense)``: for text whose words are spaced, its words
(``str.split``); for text written without spaces (any wide character: Chinese, Japanese), its
characters, a run of Latin letters or digits as one, each keeping the spaces and the closing
punctuation after it (``dense`` True). ``join(units, dense)`` gives the text back, stripped
(spaced words joined by one space, dense units as they are). The segmenter counts and cuts
these units, and sentences are revealed a few of them at a time; subtitle lines break between
them. Wherever words are counted (``word_count``: the segmenter's length rule, the lag of
revealed sentences, the pace of ``--realtime`` input, the source's words in lagging metrics),
text without spaces counts ``CHARS_PER_WORD`` of its units a word (``units_per_word``). ``join_words`` makes text of a
recognizer's words (no space between Chinese or Japanese words).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

SPACED_WORD = re.compile(r"\S+")
DENSE_UNIT = re.compile(r"[0-9A-Za-z\u00C0-\u024F'’-]+\s*|\S\s*")  # a Latin word or one character
CHARS_PER_WORD = 2  # a count of words, in text written without spaces: characters, two a word
SENTENCE_END = tuple(".!?。！？…")  # a word ending in one of these may end a sentence
CLAUSE_END = tuple(",;:，；：、")  # ... a clause
CLOSING = (*SENTENCE_END, *CLAUSE_END, *"）」』】〉》”’)")  # belongs to the character before it


def is_dense(text: str) -> bool:
    """Whether ``text`` is written without spaces between words (it has a wide character)."""
    return any(map(_wide, text))


def words(
    text: str, before: tuple[str, ...] = CLOSING, after: tuple[str, ...] = ()
) -> tuple[list[str], bool]:
    """The module docstring's ``words``; in dense text a piece that starts with one of ``before``
    joins the piece before it, and one that ends with one of ``after`` the piece after it."""
    dense = is_dense(text)
    return list(iter_words(text, dense, before, after)), dense


def iter_words(
    text: str, dense: bool, before: tuple[str, ...] = CLOSING, after: tuple[str, ...] = ()
) -> Iterator[str]:
    """``words(text, before, after)[0]`` one at a time (a long text is never held twice), for text
    that is ``dense`` or not."""
    if not dense:
        yield from (match.group() for match in SPACED_WORD.finditer(text))
        return
    yield from attached((match.group() for match in DENSE_UNIT.finditer(text)), before, after)


def attached(pieces: Iterable[str], before: tuple[str, ...], after: tuple[str, ...]) -> Iterator[str]:
    """``pieces`` with each that starts with one of ``before`` joined to the piece before it, and
    each that ends with one of ``after`` to the piece after it."""
    unit = None
    for piece in pieces:
        if unit is not None and (piece.startswith(before) or unit.endswith(after)):
            unit += piece
            continue
        if unit is not None:
            yield unit
        unit = piece
    if unit is not None:
        yield unit


def units_per_word(dense: bool) -> int:
    """The units of ``words`` that count as one word: ``CHARS_PER_WORD`` in dense text, else 1."""
    return CHARS_PER_WORD if dense else 1


def word_count(text: str) -> float:
    """How many words ``text`` has as the rules count them (module docstring)."""
    units, dense = words(text)
    return len(units) / units_per_word(dense)


def join_words(texts: Iterable[str]) -> str:
    """Recognised words as text: one space between two words, none where a wide character meets
    the space (a recognizer gives Chinese and Japanese words without spaces between them)."""
    out = ""
    for text in texts:
        if out and text and not (_wide(out[-1]) or _wide(text[0])):
            out += " "
        out += text
    return out


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "WF"


def join(units: Sequence[str], dense: bool) -> str:
    return ("".join(units) if dense else " ".join(units)).strip()
