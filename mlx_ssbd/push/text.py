"""Caption text in the shapes platforms take: lines of bounded length, and CEA-608's characters.

Contract: pure functions. ``cut_lines(text, width)`` cuts a caption into lines of at most
``width`` characters where subtitle lines break (``live.subtitles.lines``: between words; in
Chinese between characters, in Japanese between phrases where MeCab finds them; a word longer than
a line is cut into pieces). ``cea608(text)`` keeps the characters that
CEA-608 line-21 captions can show (what OBS's ``SendStreamCaption`` encodes) and spells the other
Latin letters without their accents (``ł`` and friends that have no decomposition are dropped).
"""

from __future__ import annotations

import unicodedata

from ..live import subtitles

# CEA-608's basic set (ASCII, with its own glyphs at a few codes), its special characters and its
# extended Western European sets (Spanish, French, Portuguese, German, Danish).
CEA608_CHARS = frozenset(
    " !\"#$%&'()+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz"
    "áéíóúçñÑ÷█"  # the basic set's own glyphs
    "®°½¿™¢£♪àèâêîôû"  # special characters
    "ÁÉÓÚÜü‘¡*’—©℠•“”ÀÂÇÈÊËëÎÏïÔÙùÛ«»"  # extended: Spanish, French
    "ÃãÍÌìÒòÕõ{}\\^_|~ÄäÖöß¥¤¦ÅåØø┌┐└┘"  # extended: Portuguese, German, Danish
)


def cut_lines(text: str, width: int) -> list[str]:
    """``text`` (whitespace collapsed) in lines of at most ``width`` characters (module docstring)."""
    return subtitles.lines(text, width)


def cea608(text: str) -> str:
    """``text`` in CEA-608's characters: accents it lacks are dropped from their letters, typographic
    quotes and dashes it lacks become plain ones, anything else is left out."""
    out = []
    for ch in text:
        if ch in CEA608_CHARS:
            out.append(ch)
            continue
        ch = {"\u201e": "\u201c", "\u2013": "-", "\u00a0": " ", "\u2026": "..."}.get(ch, ch)
        base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
        out.append("".join(c for c in base if c in CEA608_CHARS) if ch.isprintable() else "")
    return "".join(out)
