"""A live caption session: ASR partials in from any thread, caption events out, never behind.

Contract (threads, not asyncio): ``push(partial)`` and ``close()`` may be called from any thread,
such as an ASR callback; they return at once and never touch MLX. ``push`` runs the ``segmenter``
(automatic commits) and queues caption sources (``segmenter.CaptionSource``: a text to translate,
live or final). ``run()`` is the engine: the thread that iterates it runs the model, taking them in
order and yielding ``CaptionUpdate``, ``CaptionCommit`` and ``SessionError`` events; it ends after
``close()`` once every queued source is translated. A scheduler serving many sessions instead
calls ``take()`` (the next source, never waiting) and hands the translation back to ``result()``
for the event. With ``latest_wins`` (the default) a queued live source is *replaced* by a newer
source of the same caption, a live one or its commit, so the engine always translates the newest
partial and skips the ones in between (counted as ``coalesced``). Commits are never skipped or
merged: the last partial of every caption is translated as final. A live text equal to the one
just translated costs no forward pass. A source the translator rejects (``ValueError``, e.g. too
long for the context) becomes a ``SessionError``; the session goes on.

Why the caller's thread runs the model: on Linux (MLX 0.32, CPU) a process that ran MLX work in
a second Python thread aborts at exit now and then ("terminate called without an active
exception"), so the model stays on the thread the program chooses, usually the main one.

Times (``at``) are seconds on the session clock, from its creation. A commit's ``start``/``end``
are the ASR's audio times when it gave them (``timed_by="asr"``), else the session-clock times of
the caption's first partial and of its commit (``timed_by="clock"``).

The segmenter's pause rule reads the *input's* clock, never how long the model took. For text
partials that is their arrival on the session clock, and a pause is judged when the next partial
arrives (and while the engine waits). Speech brings its own: ``push(partial, at)`` with the seconds
of audio heard when the partial was recognised, and ``tick(at)`` when more audio was heard and the
text did not change; from the first such time on, the pause rule reads only these times, and only
a ``tick`` (the same words, heard again later) can find a pause. Either way the rule never reads
how long the model took, so the same input gives the same commits on a fast machine and a slow one.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from .records import Update
from .segmenter import CaptionSource, Segmenter, SegmenterConfig
from .source import SourcePartial
from .translator import StreamTranslator


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
    segment: str | None = None  # the ASR segment id of its words
    target: str | None = None  # its language, when a session has several


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
    segment: str | None = None
    pushed_at: float | None = None  # when its last partial was pushed
    target: str | None = None  # its language, when a session has several


@dataclass(frozen=True)
class SessionError:
    """A source the translator rejected; the session goes on."""

    seq: int
    message: str
    at: float


Event = CaptionUpdate | CaptionCommit | SessionError


@dataclass
class _Queued:
    source: CaptionSource
    pushed_at: float
    first_pushed: float  # push time of the oldest partial this one replaced (or its own)
    coalesced: int = 0
    caption: int = -1  # the caption it belongs to (set when taken)
    opened_at: float | None = None  # push time of that caption's first partial (set when taken)


class LiveSession:
    """One live caption stream over a translator; see the module docstring.

    Args:
        translator: the ``StreamTranslator`` (used by the engine thread only, in ``run``), or
            several keyed by target language: every source is translated into each, as rows of one
            batched forward per round (``multistream``), and ``run`` yields each language's event
            (``target``) in the order given; None when a scheduler translates the sources (``take``
            / ``result``).
        segmenter: automatic-commit rules. Default ``SegmenterConfig()``; without a
            ``language``, the translators' source language.
        latest_wins: skip queued live updates superseded by newer ones. Default True; False
            translates every partial (benchmarks of every-partial semantics).
        clock: a monotonic clock in seconds. Default ``time.monotonic``.
        live_updates: translate live (non-final) sources. Default True; False translates commits
            only (a recording captioned to a subtitle file: nobody sees the live updates), and
            counts the dropped ones as ``unshown``.
    """

    def __init__(
        self,
        translator: StreamTranslator | dict[str, StreamTranslator] | None,
        *,
        segmenter: SegmenterConfig = SegmenterConfig(),
        latest_wins: bool = True,
        clock: Callable[[], float] = time.monotonic,
        live_updates: bool = True,
    ):
        self.translators = (
            translator
            if isinstance(translator, dict)
            else {translator.target_lang: translator}
            if translator is not None
            else {}
        )
        self.latest_wins = latest_wins
        self.live_updates = live_updates
        self._clock = clock
        self._t0 = clock()
        if segmenter.language is None and self.translators:
            segmenter = replace(segmenter, language=next(iter(self.translators.values())).source_lang)
        self._segmenter = Segmenter(segmenter)
        self._cond = threading.Condition(threading.RLock())  # re-entrant: _next() calls take()
        self._queued: deque[_Queued] = deque()
        self._closed = False
        self._seq = 0
        self._caption = 0  # index of the open caption
        self._last_text: str | None = None  # the open caption's last translated live text
        self._opened_at: float | None = None  # push time of the open caption's first partial
        self._heard: float | None = None  # the input's own clock (speech: audio heard), once it gives one
        self.coalesced = 0  # total partials skipped
        self.unchanged = 0  # live texts equal to the previous one, skipped without a forward pass
        self.unshown = 0  # live sources dropped because ``live_updates`` is off

    @property
    def closed(self) -> bool:
        return self._closed

    def resume(self, caption: int, at: float) -> None:
        """Go on from an earlier session: the next caption is number ``caption`` and the session
        clock reads ``at`` seconds now (before the first push)."""
        with self._cond:
            self._caption = caption
            self._t0 = self._clock() - at

    def set_language(self, code: str) -> None:
        """The source's language (ISO 639-1), where the segmenter cuts long speech; before the
        first push (a session whose translators come later)."""
        with self._cond:
            self._segmenter = Segmenter(replace(self._segmenter.config, language=code))

    @property
    def repeated(self) -> int:
        """Partials that changed nothing (the ASR repeated itself): nothing queued, no forward pass."""
        return self._segmenter.repeats

    def now(self) -> float:
        """Seconds on the session clock."""
        return self._clock() - self._t0

    # -- input (any thread) ----------------------------------------------------------------

    def push(self, partial: SourcePartial, at: float | None = None) -> None:
        """Queue an ASR partial; returns at once. Ignored after ``close``. ``at``: the input's own
        time of it (speech: seconds of audio heard when it was recognised); None: its arrival."""
        with self._cond:
            if self._closed:
                return
            now, heard = self.now(), self._input_time(at)
            # A text partial arriving after a pause commits the pause first. A recognizer's new
            # text says nothing of a pause: the speech changed somewhere since its last step.
            pause = self._segmenter.due(heard) if self._heard is None else []
            for source in [*pause, *self._segmenter.feed(partial, heard)]:
                self._queue(source, now)
            self._cond.notify()

    def tick(self, at: float) -> None:
        """The input's own clock reads ``at`` and its text has not changed (speech: this much audio
        heard, the words as before): a pause may commit now. Ignored after ``close``."""
        with self._cond:
            if self._closed:
                return
            now = self.now()
            for source in self._segmenter.due(self._input_time(at)):
                self._queue(source, now)
            self._cond.notify()

    def _input_time(self, at: float | None) -> float:
        """The time the segmenter reads for an input given at ``at`` (None: arriving now)."""
        if at is not None:
            self._heard = at if self._heard is None else max(self._heard, at)
        return self._heard if self._heard is not None else self.now()

    def close(self) -> None:
        """End of input: commit what is live; ``run()`` ends when the queue is done."""
        with self._cond:
            if self._closed:
                return
            now = self.now()
            for source in self._segmenter.flush():
                self._queue(source, now)
            self._closed = True
            self._cond.notify()

    def _queue(self, source: CaptionSource, now: float) -> None:
        last = self._queued[-1] if self._queued else None
        # A queued live source belongs to the open caption, so a newer live source or that caption's
        # commit supersedes it.
        if self.latest_wins and last is not None and not last.source.final:
            # the newer partial wins
            self._queued[-1] = _Queued(source, now, last.first_pushed, last.coalesced + 1)
            self.coalesced += 1
        else:
            self._queued.append(_Queued(source, now, now))

    # -- the engine (the caller's thread) ----------------------------------------------------

    def take(self) -> _Queued | None:
        """The next source to translate, without waiting (None: nothing to do now). A live text
        equal to the one just translated is dropped here (counted as ``unchanged``)."""
        with self._cond:
            now = self.now()
            if self._heard is None:  # arrival times: waiting is the speaker's pause too
                for source in self._segmenter.due(now):
                    self._queue(source, now)
            while self._queued:
                item = self._queued.popleft()
                if not item.source.final and not self.live_updates:
                    self.unshown += 1
                    continue
                if not item.source.final and item.source.text == self._last_text:
                    self.unchanged += 1
                    continue
                if self._opened_at is None:
                    self._opened_at = item.first_pushed
                item.caption, item.opened_at = self._caption, self._opened_at
                if item.source.final:  # the caption is committed by this source, whatever comes of it
                    self._caption, self._last_text, self._opened_at = self._caption + 1, None, None
                else:
                    self._last_text = item.source.text
                return item
            return None

    @property
    def pending_finals(self) -> int:
        """Commits queued and not yet taken."""
        with self._cond:
            return sum(item.source.final for item in self._queued)

    @property
    def done(self) -> bool:
        """Closed and every source taken."""
        with self._cond:
            return self._closed and not self._queued

    def next_due(self) -> float | None:
        """Session-clock time when a pause may commit the open caption, if any (None also when
        the input brings its own clock: only its next input or ``tick`` can)."""
        with self._cond:
            return self._segmenter.next_due() if self._heard is None else None

    def _next(self) -> _Queued | None:
        with self._cond:
            while (item := self.take()) is None:
                if self._closed:
                    return None
                due = self.next_due()
                wait = None if due is None else max(0.0, due - self.now())
                if wait is None or wait > 0:
                    self._cond.wait(wait)
            return item

    def result(self, item: _Queued, outcome: Update | ValueError, target: str | None = None) -> Event:
        """The event for a taken source's translation (or the translator's rejection of it); a
        session with several target languages calls it once per language (``target``)."""
        source = item.source
        with self._cond:
            at, seq = self.now(), self._next_seq()
        if isinstance(outcome, ValueError):
            return SessionError(seq, str(outcome), at)
        if not source.final:
            return CaptionUpdate(
                item.caption,
                seq,
                outcome,
                item.coalesced,
                item.pushed_at,
                source.end,
                at,
                source.segment_id,
                target,
            )
        timed = source.start is not None and source.end is not None
        start, end = (source.start, source.end) if timed else (item.opened_at, at)
        return CaptionCommit(
            item.caption,
            seq,
            outcome.output,
            source.text,
            start,
            end,
            "asr" if timed else "clock",
            source.reason,
            outcome,
            item.coalesced,
            source.end,
            at,
            source.segment_id,
            item.pushed_at,
            target,
        )

    def run(self) -> Iterator[Event]:
        """Translate queued sources as they come, yielding events, until closed and drained."""
        if len(self.translators) > 1:
            yield from self._run_batched()
            return
        ((target, translator),) = self.translators.items()
        while (item := self._next()) is not None:
            try:
                update = translator.update(item.source.text, final=item.source.final)
            except ValueError as error:
                update = error
            yield self.result(item, update, target)

    def _run_batched(self) -> Iterator[Event]:
        """``run`` with several target languages: each source in every language, in one batched
        forward per round."""
        from .multistream import MultiStreamTranslator

        batch = MultiStreamTranslator(list(self.translators.values()))
        try:
            while (item := self._next()) is not None:
                outcomes: dict[str, Update | ValueError] = {}
                for target, translator in self.translators.items():
                    try:
                        batch.submit(
                            translator,
                            item.source.text,
                            item.source.final,
                            functools.partial(outcomes.__setitem__, target),
                        )
                    except ValueError as error:
                        outcomes[target] = error
                while batch.busy:
                    batch.round()
                for target in self.translators:
                    yield self.result(item, outcomes[target], target)
        finally:
            for translator in self.translators.values():
                batch.remove(translator)  # each translator keeps its KV

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq - 1
