"""Automatic segments: turn ASR partials into translator jobs, committing without ``final``.

Contract: ``Segmenter.feed(partial, now)`` takes one ASR partial (the full current text of an ASR
segment, as ``SourcePartial``) and returns the jobs it implies, in order: a ``CaptionSource(text,
final)`` is one translator update of the *live* source, the words of the ASR segment not
committed yet (a caption's source at one moment, and whether it commits).
``Segmenter.due(now)`` returns the jobs a pause implies; ``Segmenter.flush()`` those that end the
input. Pure logic: no model, no threads, time comes in as ``now`` (seconds).

Rules (``SegmenterConfig``), checked on every partial, on the live words only:

* ``final: true`` or a new segment id: the live words are committed (the last partial of a
  segment is always translated as final).
* Sentence end: a live word that ends in ``. ! ? 。 ！ ？ …`` (not a known abbreviation) and is
  *stable*, the same word at the same position in the last ``stable_partials`` partials, ends a
  caption there. Several stable sentences become several captions.
* Length: when more than ``max_words`` words are live, the stable ones are committed, cut after
  the last stable ``, ; :`` if one lies past ``max_words // 3`` words, else after
  ``max_words`` stable words at most.
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
from .source import SourcePartial

SENTENCE_END = tuple(".!?。！？…")
CLAUSE_END = tuple(",;:，；：、")
ABBREVIATIONS = frozenset("mr. mrs. ms. dr. prof. st. vs. etc. e.g. i.e. no. fig. approx. jr. sr.".split())


@dataclass(frozen=True)
class SegmenterConfig:
    """When a live segment is committed without ``final``; see the module docstring.

    Attributes:
        sentence_end: commit at stable sentence-final punctuation. Default True.
        max_words: commit stable words once more than this many are live; 0: never. Default 24.
        pause_s: commit when the live text has not changed for this long; None: never.
            Default 2.0.
        stable_partials: partials a word must stay the same in to count as stable. Default 2.
    """

    sentence_end: bool = True
    max_words: int = 24
    pause_s: float | None = 2.0
    stable_partials: int = 2

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


def is_sentence_end(word: str) -> bool:
    return word.endswith(SENTENCE_END) and word.lower() not in ABBREVIATIONS and not _initial(word)


def _initial(word: str) -> bool:  # "J." in "J. Smith"
    return len(word) == 2 and word[0].isalpha() and word[1] == "."


@dataclass
class _Open:
    """State of the current ASR segment."""

    id: object = None
    committed: int = 0  # words of this ASR segment already committed
    history: list[list[str]] = field(default_factory=list)  # recent partials' words
    live: str = ""  # the last live text handed out (uncommitted), "" if none
    changed_at: float = 0.0
    # per word of the last partial
    times: list[tuple[float | None, float | None]] = field(default_factory=list)


_ENDED = object()  # segment id after a final partial: any next id starts a new segment


class Segmenter:
    """Stateful splitter of one ASR stream into translator jobs; see the module docstring."""

    def __init__(self, config: SegmenterConfig = SegmenterConfig()):
        self.config = config
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
        words = partial.text.split()
        seg.times = _word_times(partial, len(words))
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
        text = " ".join(live)
        if text != seg.live:
            seg.live, seg.changed_at = text, now
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
                cut = next((i + 1 for i, w in enumerate(live) if is_sentence_end(w)), None)
                reason = "sentence"
            if cut is None and cfg.max_words and len(words) - seg.committed > cfg.max_words and live:
                cut, reason = _length_cut(live, cfg.max_words), "length"
            if cut is None:
                return jobs
            jobs.append(self._job(live[:cut], seg.committed, True, reason))
            seg.committed += cut
            seg.live = ""

    def _commit_live(self, reason: str) -> CaptionSource:
        seg = self._seg
        words = seg.live.split()
        job = self._job(words, seg.committed, True, reason)
        seg.committed += len(words)
        seg.live = ""
        return job

    def _job(self, words: Sequence[str], first: int, final: bool, reason: str = "") -> CaptionSource:
        times = self._seg.times
        last = first + len(words) - 1
        start = times[first][0] if first < len(times) else None
        end = times[last][1] if 0 <= last < len(times) else None
        return CaptionSource(" ".join(words), final, reason if final else "", start, end, self._seg.id)


def _length_cut(live: list[str], max_words: int) -> int:
    """Where to cut an over-long stable run: after a clause mark past a third, else at max."""
    limit = min(len(live), max_words)
    for i in range(limit - 1, max_words // 3 - 1, -1):
        if live[i].endswith(CLAUSE_END):
            return i + 1
    return limit


def _word_times(partial: SourcePartial, n: int) -> list[tuple[float | None, float | None]]:
    """(start, end) audio seconds of each word of ``partial``: its word timestamps when they
    match its words, else its start/end interpolated by position, else unknown."""
    if partial.words and len(partial.words) == n:
        return [(w.start, w.end) for w in partial.words]
    if partial.start is None or partial.end is None or n == 0:
        return [(None, None)] * n
    step = (partial.end - partial.start) / n
    return [(partial.start + i * step, partial.start + (i + 1) * step) for i in range(n)]
