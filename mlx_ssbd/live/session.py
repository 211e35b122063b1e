"""A live caption session: ASR partials in from any thread, caption events out, never behind.

Contract (threads, not asyncio): ``push(partial)`` and ``close()`` may be called from any thread,
such as an ASR callback; they return at once and never touch MLX. ``push`` runs the ``segmenter``
(automatic commits) and queues the jobs. ``run()`` is the engine: the thread that iterates it
runs the model, taking jobs in order and yielding ``CaptionUpdate``, ``CaptionCommit`` and
``SessionError`` events; it ends after ``close()`` once every queued job is done. With
``latest_wins`` (the default) a queued live update is *replaced* by a newer job of the same
caption, a live one or its commit, so the engine always translates the newest partial and skips
the ones in between (counted as ``coalesced``). Commits are never skipped or merged: the last
partial of every caption is translated as final. A live text equal to the one just translated costs no forward pass. A job
the translator rejects (``ValueError``, e.g. too long for the context) becomes a
``SessionError``; the session goes on.

Why the caller's thread runs the model: on Linux (MLX 0.32, CPU) a process that ran MLX work in
a second Python thread aborts at exit now and then ("terminate called without an active
exception"), so the model stays on the thread the program chooses, usually the main one.

Times (``at``) are seconds on the session clock, from its creation. A commit's ``start``/``end``
are the ASR's audio times when it gave them (``timed_by="asr"``), else the session-clock times of
the caption's first partial and of its commit (``timed_by="clock"``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .segmenter import Job, Segmenter, SegmenterConfig
from .translator import SourceUpdate, StreamTranslator, Update


@dataclass(frozen=True)
class CaptionUpdate:
    """A new translation of the open caption."""

    caption: int  # index of the caption (committed segment) in this session
    seq: int  # running number of this session's events
    update: Update  # stable / unstable / display text, stats
    coalesced: int  # partials skipped (latest partial wins) since the previous update
    pushed_at: float  # when the translated partial was pushed
    speech_end: float | None  # audio time of its last word, when the ASR gave it
    at: float  # when the translation was ready


@dataclass(frozen=True)
class CaptionCommit:
    """A finished caption: its text will never change."""

    caption: int
    seq: int
    text: str
    source: str
    start: float
    end: float
    timed_by: str  # "asr" or "clock"
    reason: str  # final | segment | sentence | length | pause | end
    update: Update  # the final update (stats)
    coalesced: int  # live updates of this caption skipped right before the commit
    speech_end: float | None
    at: float


@dataclass(frozen=True)
class SessionError:
    """A job the translator rejected; the session goes on."""

    seq: int
    message: str
    at: float


Event = CaptionUpdate | CaptionCommit | SessionError


@dataclass
class _Queued:
    job: Job
    pushed_at: float
    first_pushed: float  # push time of the oldest partial this one replaced (or its own)
    coalesced: int = 0


class LiveSession:
    """One live caption stream over a translator; see the module docstring.

    Args:
        translator: the ``StreamTranslator`` (used by the engine thread only).
        segmenter: automatic-commit rules. Default ``SegmenterConfig()``.
        latest_wins: skip queued live updates superseded by newer ones. Default True; False
            translates every partial (benchmarks of every-partial semantics).
        clock: a monotonic clock in seconds. Default ``time.monotonic``.
    """

    def __init__(self, translator: StreamTranslator, *, segmenter: SegmenterConfig = SegmenterConfig(),
                 latest_wins: bool = True, clock: Callable[[], float] = time.monotonic):
        self.translator = translator
        self.latest_wins = latest_wins
        self._clock = clock
        self._t0 = clock()
        self._segmenter = Segmenter(segmenter)
        self._cond = threading.Condition()
        self._jobs: deque[_Queued] = deque()
        self._closed = False
        self._seq = 0
        self.coalesced = 0  # total partials skipped
        self.unchanged = 0  # live texts equal to the previous one, skipped without a forward pass

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def repeated(self) -> int:
        """Partials that changed nothing (the ASR repeated itself): no job, no forward pass."""
        return self._segmenter.repeats

    def now(self) -> float:
        """Seconds on the session clock."""
        return self._clock() - self._t0

    # -- input (any thread) ----------------------------------------------------------------

    def push(self, partial: SourceUpdate) -> None:
        """Queue an ASR partial; returns at once. Ignored after ``close``."""
        with self._cond:
            if self._closed:
                return
            now = self.now()
            for job in self._segmenter.feed(partial, now):
                self._queue(job, now)
            self._cond.notify()

    def close(self) -> None:
        """End of input: commit what is live; ``run()`` ends when the queue is done."""
        with self._cond:
            if self._closed:
                return
            now = self.now()
            for job in self._segmenter.flush():
                self._queue(job, now)
            self._closed = True
            self._cond.notify()

    def _queue(self, job: Job, now: float) -> None:
        last = self._jobs[-1] if self._jobs else None
        # A queued live job belongs to the open caption, so a newer live job or that caption's
        # commit supersedes it.
        if self.latest_wins and last is not None and not last.job.final:
            self._jobs[-1] = _Queued(job, now, last.first_pushed, last.coalesced + 1)  # the newer partial wins
            self.coalesced += 1
        else:
            self._jobs.append(_Queued(job, now, now))

    # -- the engine (the caller's thread) ----------------------------------------------------

    def _next(self) -> _Queued | None:
        with self._cond:
            while not self._jobs:
                if self._closed:
                    return None
                due = self._segmenter.next_due()
                wait = None if due is None else max(0.0, due - self.now())
                if wait is None or wait > 0:
                    self._cond.wait(wait)
                now = self.now()
                for job in self._segmenter.due(now):
                    self._queue(job, now)
            return self._jobs.popleft()

    def run(self) -> Iterator[Event]:
        """Translate queued jobs as they come, yielding events, until closed and drained."""
        caption, last_text, opened_at = 0, None, None
        while (item := self._next()) is not None:
            job = item.job
            if opened_at is None:
                opened_at = item.first_pushed
            if not job.final and job.text == last_text:
                self.unchanged += 1
                continue
            try:
                update = self.translator.update(job.text, final=job.final)
            except ValueError as error:
                yield SessionError(self._next_seq(), str(error), self.now())
                continue
            at = self.now()
            if job.final:
                timed = job.start is not None and job.end is not None
                start, end = (job.start, job.end) if timed else (opened_at, at)
                yield CaptionCommit(caption, self._next_seq(), update.output, job.text, start, end,
                                    "asr" if timed else "clock", job.reason, update, item.coalesced, job.end, at)
                caption, last_text, opened_at = caption + 1, None, None
            else:
                last_text = job.text
                yield CaptionUpdate(caption, self._next_seq(), update, item.coalesced, item.pushed_at,
                                    job.end, at)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq - 1
