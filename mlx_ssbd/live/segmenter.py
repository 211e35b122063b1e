"""Automatic segments: turn ASR partials into translator jobs, committing without ``final``.

Contract: ``Segmenter.feed(partial, now)`` takes one ASR partial (the full current text of an ASR
segment, as ``SourcePartial``) and returns the jobs it implies, in order: a ``CaptionSource(text,
final)`` is one translator update of the *live* source, the words of the ASR segment not
committed yet (a caption's source at one moment, and whether it commits).
``Segmenter.due(now)`` returns the jobs a pause implies; ``Segmenter.flush()`` those that end the
input. Pure logic: no model, no threads, time comes in as ``now`` (seconds).

Rules (``SegmenterConfig``), checked on every partial, on the live words only (``scripts.words``:
in text written without spaces, Chinese and Japanese, each character is a word, and the length
rule's ``max_words`` counts two of them a word):

* ``final: true`` or a new segment id: the live words are committed (the last partial of a
  segment is always translated as final).
* Sentence end: a live word that ends in ``. ! ? 。 ！ ？ …`` (not a known abbreviation) and is
  *stable*, the same word at the same position in the last ``stable_partials`` partials, ends a
  caption there. Several stable sentences become several captions.
* Length: when more than ``max_words`` words are live, the stable ones are cut, the caption at
  least ``max_words // 3`` and at most ``max_words`` words long: before the last capitalised
  word that opens a clause (a sentence end the ASR missed: "maintain them After six months"),
  else after the last ``, ; :``, else before the last word that opens a clause ("and",
  "because", "we"; the source language's, when ``language`` names one that has them). With
  none of these, the cut waits for ``max_words`` stable words and falls there: never at the
  unstable edge of the speech, where a sentence end may still come.
* Pause: when the live text has not changed for ``pause_s`` seconds, it is committed.

A committed word never comes back: later partials of the same ASR segment are read from the
first word after the committed ones (by position; revisions of committed words are ignored). So
an update's cost stays flat however long a never-final stream runs.

Timing: a job carries the audio times (seconds) of its first and last word when the ASR gives
them: word timestamps if present, else the partial's ``start``/``end`` interpolated by word
position; ``None`` without timestamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.cache import common_prefix_len
from . import scripts
from .scripts import CLAUSE_END, SENTENCE_END
from .source import SourcePartial

ABBREVIATIONS = frozenset("mr. mrs. ms. dr. prof. st. vs. etc. e.g. i.e. no. fig. approx. jr. sr.".split())
# Words that open a clause, lower-cased, by source language: conjunctions, subordinators and
# subject pronouns that are nothing else (no "you", "it", "that": objects and articles too).
CLAUSE_OPENERS = {
    "en": "and but or so because although though while whereas which who whose where when whenever "
    "if unless until since before after once then i we they he she",
    "de": "und aber oder denn sondern weil obwohl wenn ob dass damit bevor nachdem sobald dann ich wir er",
    "fr": "et mais ou donc car parce puisque quand lorsque si alors qui où je nous ils elles il elle on",
    "es": "y pero o porque aunque mientras cuando si donde entonces luego yo nosotros ellos ellas él ella",
}


@dataclass(frozen=True)
class SegmenterConfig:
    """When a live segment is committed without ``final``; see the module docstring.

    Attributes:
        sentence_end: commit at stable sentence-final punctuation. Default True.
        max_words: commit stable words once more than this many are live; 0: never. Default 24.
        pause_s: commit when the live text has not changed for this long; None: never.
            Default 2.0.
        stable_partials: partials a word must stay the same in to count as stable. Default 2.
        language: the source's ISO 639-1 code: a length cut prefers to fall before the words
            that open a clause in it (``CLAUSE_OPENERS``: en, de, fr, es); None or another
            language: after clause marks only. Default None (a ``LiveSession`` sets its
            translators' source language).
    """

    sentence_end: bool = True
    max_words: int = 24
    pause_s: float | None = 2.0
    stable_partials: int = 2
    language: str | None = None

    def __post_init__(self):
        if not isinstance(self.max_words, int) or self.max_words < 0:
            raise ValueError(f"max_words must be a non-negative integer, got {self.max_words!r}")
        if self.max_words and self.max_words < 3:
            raise ValueError(f"max_words must be 0 (off) or at least 3, got {self.max_words}")
        if self.pause_s is not None and self.pause_s <= 0:
            raise ValueError(f"pause_s must be > 0 or None, got {self.pause_s}")
        if not isinstance(self.stable_partials, int) or self.stable_partials < 1:
            raise ValueError(f"stable_partials must be a positive integer, got {self.stable_partials!r}")


@dataclass(frozen=True)
class CaptionSource:
    """One translator update of the open caption: its live source text, whether it commits, and
    why (named apart from ``engine.update.Job``, the engine's view of an update)."""

    text: str
    final: bool
    reason: str = ""  # for commits: final | segment | sentence | length | pause | end
    start: float | None = None  # audio time of the first word (s), when known
    end: float | None = None  # audio time of the last word (s), when known
    segment_id: str | None = None  # the ASR segment the words came from


def is_sentence_end(word: str, next_word: str | None = None) -> bool:
    """Whether ``word`` ends a sentence. "no." does when ``next_word`` is given and is not a
    number ("they said no. So" against "room No. 5")."""
    if not word.endswith(SENTENCE_END) or _initial(word):
        return False
    if word.lower() == "no.":
        return next_word is not None and not next_word[:1].isdigit()
    return word.lower() not in ABBREVIATIONS


def _initial(word: str) -> bool:  # "J." in "J. Smith"
    return len(word) == 2 and word[0].isalpha() and word[1] == "."


@dataclass
class _Open:
    """State of the current ASR segment."""

    id: object = None
    committed: int = 0  # words of this ASR segment already committed
    history: list[list[str]] = field(default_factory=list)  # recent partials' words
    live: str = ""  # the last live text handed out (uncommitted), "" if none
    live_words: list[str] = field(default_factory=list)  # its words
    dense: bool = False  # written without spaces (scripts.words: its words are characters)
    changed_at: float = 0.0
    # per word of the last partial
    times: list[tuple[float | None, float | None]] = field(default_factory=list)


_ENDED = object()  # segment id after a final partial: any next id starts a new segment


class Segmenter:
    """Stateful splitter of one ASR stream into translator jobs; see the module docstring."""

    def __init__(self, config: SegmenterConfig = SegmenterConfig()):
        self.config = config
        self._openers = frozenset(CLAUSE_OPENERS.get(config.language or "", "").split())
        self._seg = _Open(id=_ENDED)
        self.repeats = 0  # partials that changed nothing (no job)

    def feed(self, partial: SourcePartial, now: float) -> list[CaptionSource]:
        """The jobs one partial implies (possibly none: an unchanged partial costs nothing)."""
        jobs: list[CaptionSource] = []
        seg = self._seg
        if partial.segment_id != seg.id:  # never equal to _ENDED
            if seg.live:
                jobs.append(self._commit_live("segment"))
            self._seg = seg = _Open(id=partial.segment_id, changed_at=now)
        words, seg.dense = scripts.words(partial.text)
        seg.times = _word_times(partial, len(words), seg.dense)
        seg.history = [*seg.history, words][-self.config.stable_partials :]
        if partial.final:
            live = words[seg.committed :]
            if live:
                jobs.append(self._job(live, seg.committed, True, "final"))
            elif seg.live:  # the final partial shrank below what was committed: close the caption
                jobs.append(self._commit_live("final"))
            self._seg = _Open(id=_ENDED)
            return jobs
        jobs += self._cuts(words)
        live = words[seg.committed :]
        text = scripts.join(live, seg.dense)
        if text != seg.live:
            seg.live, seg.live_words, seg.changed_at = text, live, now
            if live:
                jobs.append(self._job(live, seg.committed, False))
        self.repeats += not jobs
        return jobs

    def due(self, now: float) -> list[CaptionSource]:
        """Jobs for a pause: the live text committed if unchanged for ``pause_s``."""
        seg, pause = self._seg, self.config.pause_s
        if seg.live and pause is not None and now - seg.changed_at >= pause:
            return [self._commit_live("pause")]
        return []

    def next_due(self) -> float | None:
        """When ``due`` may next return a job (session clock), or None."""
        if self._seg.live and self.config.pause_s is not None:
            return self._seg.changed_at + self.config.pause_s
        return None

    def flush(self) -> list[CaptionSource]:
        """End of input: commit whatever is live."""
        jobs = [self._commit_live("end")] if self._seg.live else []
        self._seg = _Open(id=_ENDED)
        return jobs

    # -- helpers ---------------------------------------------------------------------------

    def _stable_words(self, words: list[str]) -> int:
        history = self._seg.history
        if len(history) < self.config.stable_partials:
            return 0
        n = len(words)
        for other in history[:-1]:
            n = min(n, common_prefix_len(words, other))
        return n

    def _cuts(self, words: list[str]) -> list[CaptionSource]:
        seg, cfg = self._seg, self.config
        stable = self._stable_words(words)
        jobs = []
        while True:
            live = words[seg.committed : stable]  # the stable live words
            cut, reason = None, ""
            if cfg.sentence_end:
                ahead = words[seg.committed + 1 :] + [None]  # each live word's next word, if heard
                cut = next((i + 1 for i, w in enumerate(live) if is_sentence_end(w, ahead[i])), None)
                reason = "sentence"
            most = cfg.max_words * scripts.units_per_word(seg.dense)
            if cut is None and most and len(words) - seg.committed > most and live:
                cut, reason = _length_cut(live, most, self._openers), "length"
            if cut is None:
                return jobs
            jobs.append(self._job(live[:cut], seg.committed, True, reason))
            seg.committed += cut
            seg.live, seg.live_words = "", []

    def _commit_live(self, reason: str) -> CaptionSource:
        seg = self._seg
        words = seg.live_words
        job = self._job(words, seg.committed, True, reason)
        seg.committed += len(words)
        seg.live, seg.live_words = "", []
        return job

    def _job(self, words: Sequence[str], first: int, final: bool, reason: str = "") -> CaptionSource:
        times = self._seg.times
        last = first + len(words) - 1
        start = times[first][0] if first < len(times) else None
        end = times[last][1] if 0 <= last < len(times) else None
        text = scripts.join(words, self._seg.dense)
        return CaptionSource(text, final, reason if final else "", start, end, self._seg.id)


def _length_cut(live: list[str], max_words: int, openers: frozenset[str]) -> int | None:
    """Where to cut an over-long run of stable words (the module docstring's length rule), or
    None to wait for more."""
    limit = min(len(live), max_words)
    cuts = range(limit, max_words // 3 - 1, -1)  # the caption is live[:cut], longest first

    def opens(i: int) -> bool:  # live[i] opens a clause and the word before it does not
        return _bare(live[i]) in openers and _bare(live[i - 1]) not in openers

    rules = (
        lambda c: c < len(live) and live[c][:1].isupper() and live[c] != "I" and opens(c),
        lambda c: live[c - 1].endswith(CLAUSE_END),
        lambda c: c < len(live) and opens(c),
    )
    for rule in rules:
        cut = next((c for c in cuts if c > 0 and rule(c)), None)
        if cut is not None:
            return cut
    return max_words if len(live) >= max_words else None


def _bare(word: str) -> str:
    return word.strip("\"'“”‘’«»¿¡(").lower()


def _word_times(partial: SourcePartial, n: int, dense: bool) -> list[tuple[float | None, float | None]]:
    """(start, end) audio seconds of each of the ``n`` words of ``partial``: its word timestamps
    when they match its words (in text written without spaces, each recognised word's time shared
    by its characters), else its start/end interpolated by position, else unknown."""
    if partial.words and dense:
        times = [
            (p.start, p.end) for w in partial.words for p in w.shared(list(scripts.iter_words(w.text, True)))
        ]
        if len(times) == n:
            return times
    if partial.words and len(partial.words) == n:
        return [(w.start, w.end) for w in partial.words]
    if partial.start is None or partial.end is None or n == 0:
        return [(None, None)] * n
    step = (partial.end - partial.start) / n
    return [(partial.start + i * step, partial.start + (i + 1) * step) for i in range(n)]
