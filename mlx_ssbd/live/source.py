"""What flows into a live translation: source partials (an ASR's partials, or text revealed a few
words at a time) and the timed words they may carry.

Contract: frozen dataclasses, no logic; every producer (``evaluation.streams``, ``asr``, the
service) builds them and every consumer (``segmenter``, ``session``, the translator) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    """A recognised word with its audio times in seconds (from an ASR's word timestamps)."""

    text: str
    start: float
    end: float

    def shared(self, pieces: list[str]) -> list[Word]:
        """``pieces`` of this word as words, its time shared out among them by position."""
        step = (self.end - self.start) / max(len(pieces), 1)
        return [Word(p, self.start + i * step, self.start + (i + 1) * step) for i, p in enumerate(pieces)]


@dataclass(frozen=True)
class SourcePartial:
    """One partial of a source stream: the current source prefix and whether it is final.

    ``start``/``end`` (audio seconds) and ``words`` (word timestamps) are optional ASR timing.
    """

    text: str
    final: bool = False
    segment_id: str | None = None
    start: float | None = None
    end: float | None = None
    words: tuple[Word, ...] = ()
