"""One scheduler owns the model and runs every live session's next update in batched steps.

Contract: ``Scheduler(loaded)`` is driven by ``run()`` on the thread that owns the model (the
main thread: see ``live.session`` on MLX and threads); ``open``, ``wake``, ``discard``,
``interleave`` and ``stop`` may be called from any thread (the web server's) and never touch MLX.
``interleave(fn)`` runs other model work (a chat completion) on the model's thread: ``fn()`` is a
generator doing one model call per step, stepped between the sessions' batched rounds (one step per
``caption_rounds`` rounds while some session's update is under way, every loop otherwise), so a
long chat answer shares the model with live sessions instead of holding them, and captions come
first; such works run one at a time, in the order they came. Each session is a
``live.session.LiveSession`` (latest partial wins, automatic segments, a final update is never
dropped) whose jobs the scheduler takes without waiting. Batching is continuous: every round is
ONE batched forward (``MultiStreamTranslator.step``) for all updates under way, and a session
whose source changed joins at the next round instead of waiting for the others' updates to end;
a session runs one update at a time (its next job is taken when the last one ended, so the latest
partial wins). Outputs equal each session alone. Events go to the session's ``send`` callback as
protocol JSON (``protocol``), from the scheduler thread, and to the session's viewers (SSE); a
commit is written to the ``store.TranscriptStore`` before it is sent to anyone.

Sessions join the batch when their first job comes (their translator is built then, with the
settings in force) and leave it when they are closed and drained, or discarded (a client that
went away: its queued jobs are dropped, its update under way is abandoned, its KV freed at the
next round).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import replace

from ..live.multistream import MultiStreamTranslator
from ..live.segmenter import SegmenterConfig
from ..live.session import CaptionCommit, CaptionUpdate, LiveSession
from ..live.translator import SourceUpdate, StreamTranslator, method_config
from . import protocol
from .protocol import Settings
from .store import Caption, TranscriptStore

DEFAULT_MAX_SESSIONS = 8
DEFAULT_CAPTION_ROUNDS = 4  # batched caption rounds per step of interleaved work (measured: README)


class ServiceSession:
    """One client's session: its settings, its live session, where its events go (the client
    and any viewers), where its commits are kept."""

    def __init__(self, sid: str, settings: Settings, send: Callable[[dict], None], segmenter: SegmenterConfig,
                 store: TranscriptStore | None):
        self.id = sid
        self.settings = settings
        self.send = send
        self.store = store
        self.live = LiveSession(None, segmenter=segmenter)
        self.translator: StreamTranslator | None = None  # built on the scheduler thread
        self.input: str | None = None  # "text" (source.update) or "audio" (PCM frames): the first decides
        self.discarded = False
        self._viewers: list[Callable[[dict], None]] = []
        self._lock = threading.Lock()

    def watch(self, viewer: Callable[[dict], None]) -> None:
        """Copy this session's events to ``viewer`` (any thread) from now on."""
        with self._lock:
            self._viewers.append(viewer)

    def unwatch(self, viewer: Callable[[dict], None]) -> None:
        with self._lock:
            if viewer in self._viewers:
                self._viewers.remove(viewer)

    def publish(self, event: dict, *, to_client: bool = True) -> None:
        """Send ``event`` to every viewer and (unless it went away) the client."""
        with self._lock:
            viewers = list(self._viewers)
        for send in ([self.send] if to_client else []) + viewers:
            send(event)

    @property
    def started(self) -> bool:
        """A source has come (text or audio): the settings are fixed."""
        return self.input is not None

    def push(self, message: protocol.SourceMessage) -> None:
        self.input = "text"
        self.live.push(SourceUpdate(message.text, message.final, message.segment, message.start, message.end))

    def emit(self, event) -> None:
        """A ``LiveSession`` event out; a commit is in the store before anyone sees it."""
        if isinstance(event, CaptionUpdate):
            self.publish(protocol.update_event(event.segment, event))
        elif isinstance(event, CaptionCommit):
            if self.store is not None:
                self.store.add_caption(self.id, Caption(event.caption, event.segment, event.text, event.source,
                                                        event.start, event.end, event.reason))
            self.publish(protocol.commit_event(event.segment, event))
        else:
            self.send(protocol.error_event("translation_failed", event.message))


class Scheduler:
    """See the module docstring.

    Args:
        loaded: a ``models.loading.LoadedModel``.
        max_sessions: open sessions at most (``open`` returns None beyond).
        segmenter: automatic-commit rules for every session.
        store: where committed captions are kept (None: nowhere).
        caption_rounds: batched rounds of the sessions per step of interleaved work while some
            session's update is under way (1: they alternate; more: captions first).
    """

    def __init__(self, loaded, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 segmenter: SegmenterConfig = SegmenterConfig(), store: TranscriptStore | None = None,
                 caption_rounds: int = DEFAULT_CAPTION_ROUNDS):
        if caption_rounds < 1:
            raise ValueError(f"caption_rounds must be at least 1, got {caption_rounds}")
        self.loaded = loaded
        self.caption_rounds = caption_rounds
        self._rounds = 0  # batched rounds since interleaved work last stepped
        self.store = store
        self.max_sessions = max_sessions
        self.segmenter = segmenter
        self.batch = MultiStreamTranslator(model=loaded.model)
        self._cond = threading.Condition()
        self._sessions: list[ServiceSession] = []
        self._calls: list[tuple[Callable[[], Generator], Future]] = []  # not started yet
        self._work: list[tuple[Generator, Future]] = []  # started, the first one stepped (model thread)
        self._stopping = False

    # -- any thread ------------------------------------------------------------------------

    def open(self, send: Callable[[dict], None], settings: Settings = Settings()) -> ServiceSession | None:
        """A new session, or None when ``max_sessions`` are open."""
        with self._cond:
            if len(self._sessions) >= self.max_sessions:
                return None
            session = ServiceSession(f"sess_{uuid.uuid4().hex[:16]}", settings, send, self.segmenter, self.store)
            self._sessions.append(session)
        if self.store is not None:
            self.store.open_session(session.id, self.loaded.name, settings.to_dict())
        return session

    def find(self, sid: str) -> ServiceSession | None:
        """The open session with this id, if any."""
        with self._cond:
            return next((s for s in self._sessions if s.id == sid), None)

    def close(self, session: ServiceSession) -> None:
        """The client ends the session: the open caption is committed, then ``session.closed``."""
        session.live.close()
        self.wake()

    def discard(self, session: ServiceSession) -> None:
        """The client went away: drop the session and its queued work."""
        session.discarded = True
        session.live.close()
        self.wake()

    def interleave(self, fn: Callable[[], Generator]) -> Future:
        """Run the generator ``fn()`` on the model's thread, one step per round (module
        docstring); its return value or exception comes back through the returned future."""
        future: Future = Future()
        with self._cond:
            self._calls.append((fn, future))
            self._cond.notify()
        return future

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    @property
    def open_sessions(self) -> int:
        with self._cond:
            return len(self._sessions)

    # -- the model's thread ------------------------------------------------------------------

    def run(self) -> None:
        """Serve until ``stop()``."""
        while True:
            with self._cond:
                if self._stopping:
                    return
                sessions, calls, self._calls = list(self._sessions), self._calls, []
            for fn, future in calls:
                self._start_work(fn, future)
            self._retire(sessions)
            self._admit(sessions)
            if self.batch.busy:
                self.batch.step()
                self._rounds += 1
            if self._work and (self._rounds >= self.caption_rounds or not self.batch.busy):
                self._step_work()
                self._rounds = 0
            if self.batch.busy or self._work:
                continue
            with self._cond:
                if not self._stopping and not self._calls:
                    self._cond.wait(self._idle_wait(sessions))

    def _start_work(self, fn: Callable[[], Generator], future: Future) -> None:
        if future.set_running_or_notify_cancel():
            try:
                self._work.append((fn(), future))
            except Exception as error:  # handed to the caller, which answers the client
                future.set_exception(error)

    def _step_work(self) -> None:
        """One step of the oldest interleaved work; its future gets its end."""
        steps, future = self._work[0]
        try:
            next(steps)
            return
        except StopIteration as end:
            future.set_result(end.value)
        except Exception as error:  # handed to the caller, which answers the client
            future.set_exception(error)
        self._work.pop(0)

    def _idle_wait(self, sessions) -> float:
        """Seconds until some session's pause rule may commit (at most 1)."""
        waits = [due - s.live.now() for s in sessions if (due := s.live.next_due()) is not None]
        return max(0.0, min([1.0, *waits]))

    def _retire(self, sessions) -> None:
        for session in sessions:
            if session.discarded or (session.live.done and not self._busy(session)):
                if session.translator is not None:
                    self.batch.remove(session.translator)  # frees its KV; abandons its update under way
                with self._cond:
                    self._sessions.remove(session)
                session.publish({"type": "session.closed", "session": session.id}, to_client=not session.discarded)

    def _admit(self, sessions) -> None:
        """Start the next job of every session that has none under way."""
        for session in sessions:
            if self._busy(session) or session.discarded or (item := session.live.take()) is None:
                continue
            try:
                self.batch.submit(self._translator(session), item.job.text, item.job.final,
                                  functools.partial(self._ended, session, item))
            except ValueError as error:
                self._ended(session, item, error)

    def _busy(self, session: ServiceSession) -> bool:
        """An update of ``session`` is under way in the batch."""
        return session.translator is not None and self.batch.running(session.translator)

    @staticmethod
    def _ended(session: ServiceSession, item, outcome) -> None:
        if not session.discarded:
            session.emit(session.live.result(item, outcome))

    def _translator(self, session: ServiceSession) -> StreamTranslator:
        """The session's translator, built and joined to the batch on its first job."""
        if session.translator is None:
            s = session.settings
            config = replace(method_config(s.method, beta=s.beta), display_mask_k=s.mask_k)
            session.translator = StreamTranslator(self.loaded.model, self.loaded.tokenizer, family=self.loaded.family,
                                                  source_lang=s.source, target_lang=s.target, config=config)
            self.batch.add(session.translator)
            if self.store is not None:
                self.store.open_session(session.id, self.loaded.name, s.to_dict())  # the settings used
        return session.translator
