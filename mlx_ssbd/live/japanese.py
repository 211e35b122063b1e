"""Japanese phrases (bunsetsu): where a Japanese subtitle line may break, from MeCab's words.

Contract: ``is_japanese(text)`` tells Japanese from Chinese: whether ``text`` has kana.
``phrases(text)`` is ``text`` cut into its phrases, which joined give ``text`` back
exactly (each keeps the spaces after it), or None where MeCab with its IPA dictionary
(``mecab-python3`` and ``ipadic``: ``pip install 'mlx-ssbd[ja]'``) is not installed or cannot read
the text. A phrase is a content word with the words that lean on it: a new one begins at each
word except a particle, an auxiliary verb, a suffix, a dependent word (非自立), punctuation other
than an opening bracket, a noun right after a noun (a compound stays whole), and a verb right after
a noun that takes する (発表/し/た is one phrase); a prefix or an opening bracket joins the word after
it. The tagger is made at the first call and kept (its parses one at a time: any thread may
call); nothing is loaded at import.
"""

from __future__ import annotations

import functools
import threading

KANA = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))  # hiragana, katakana, half-width katakana
_PARSING = threading.Lock()  # one tagger, shared: MeCab does not promise that one tagger is thread-safe
LEANING_POS = frozenset({"助詞", "助動詞"})  # parts of speech that join the phrase before them
LEANING_SUBPOS = frozenset({"接尾", "非自立"})  # ... and second-level parts of speech


def is_japanese(text: str) -> bool:
    return any(low <= ord(ch) <= high for ch in text for low, high in KANA)


def phrases(text: str) -> list[str] | None:
    """The module docstring's ``phrases``."""
    tagger = _tagger()
    if tagger is None:
        return None
    out: list[str] = []
    at, previous, opens = 0, None, False  # where the next word starts; the last word's tags
    with _PARSING:
        parsed = tagger.parse(text)
    for line in parsed.splitlines():
        surface, _, features = line.partition("\t")
        if not features:  # EOS
            continue
        start = _skip_spaces(text, at)
        if not text.startswith(surface, start):
            return None  # the tagger changed the text: no phrases rather than wrong ones
        tags = features.split(",")
        if out:  # the spaces before the word stay with the phrase before it
            out[-1], at = out[-1] + text[at:start], start
        word = text[at : start + len(surface)]
        if out and (opens or _leans(tags, previous)):
            out[-1] += word
        else:
            out.append(word)
        at, previous = start + len(surface), tags
        opens = tags[0] == "接頭詞" or tags[1] == "括弧開"
    if text[at:].strip():
        return None
    if out:
        out[-1] += text[at:]
    return out


def _leans(tags: list[str], previous: list[str] | None) -> bool:
    """Whether a word with MeCab's ``tags`` joins the phrase of the word before it."""
    if tags[0] in LEANING_POS or tags[1] in LEANING_SUBPOS:
        return True
    if tags[0] == "記号":
        return tags[1] not in ("括弧開", "アルファベット")
    if previous is None or previous[0] != "名詞" or previous[1] == "非自立":
        return False
    return tags[0] == "名詞" or (tags[0] == "動詞" and previous[1] == "サ変接続")


def _skip_spaces(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


@functools.cache
def _tagger():
    """MeCab's tagger with the IPA dictionary, or None where they are not installed."""
    try:
        import ipadic
        import MeCab
    except ImportError:
        return None
    try:
        return MeCab.Tagger(ipadic.MECAB_ARGS)
    except RuntimeError:
        return None
