"""Subtitle cues: committed captions as SubRip (SRT) or WebVTT text.

Contract: ``cue(kind, number, start, end, text)`` is one cue ("" for an empty caption), with the
text on one line and at least ``MIN_CUE_S`` on screen; ``document(kind, captions)`` a whole file
(WebVTT with its header) from ``(start, end, text)`` triples, numbered from 1 (SRT only).

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

MIN_CUE_S = 1.0  # a subtitle cue shows for at least this long
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
    text = " ".join(text.split())  # one line, no blank line inside a cue
    if not text:
        return ""
    text = escape(kind, text)
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


def document(kind: str, captions: Iterable[tuple[float, float, str]]) -> str:
    """A whole subtitle file; empty captions are skipped and do not take a number."""
    cues = [(start, end, text) for start, end, text in captions if text.strip()]
    return header(kind) + "".join(cue(kind, n, *c) for n, c in enumerate(cues, 1))
