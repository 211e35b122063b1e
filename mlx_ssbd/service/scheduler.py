"""One scheduler owns the model and runs every live session's next update in batched rounds.

Contract: ``Scheduler(loaded)`` is driven by ``run()`` on the thread that owns the model (the
main thread: see ``live.session`` on MLX and threads); ``open``, ``wake``, ``discard``,
``interleave`` and ``stop`` may be called from any thread (the web server's) and never touch MLX.
``interleave(fn)`` runs other model work (a chat completion, ``works``) on the model's thread, one
step per ``caption_rounds`` rounds while a session's update is under way: captions come first.
Each session is a ``live.session.LiveSession`` (latest partial wins, automatic segments, a final
update is never dropped). Batching is continuous: a round (``MultiStreamTranslator.round``) serves
every update under way in one batched model call (a few on a CPU, ``engine.planner``), a changed
source joins at the next round, a session runs one update at a time, and outputs equal each
session alone. Events go to the session's ``send`` callback (``events``) and to its viewers through
the store's bus, a commit only once the ``store.base.TranscriptStore`` holds it. ``meter``
(``meter.BusyMeter``) times all of ``run()``'s work but its idle waits (``/health``'s load).
``resume(session, sid, token)`` makes a new connection's session go on as a stored one.

Sessions join the batch when their first source comes (then their translators are built, one per
target language, a row of the batch each, its cache seeded with its prompt's shared prefix from
``prefixes``, computed once for every session when none runs: a source goes to every row, the next
once all are done) and leave it when they are closed and drained, or discarded (a client that
went away: its queued sources are dropped, its update under way is abandoned, its KV freed at the
next round).
``session.closed`` carries why: ``closed`` (the client asked), ``idle``, ``shutdown`` (the drain),
``error`` (the session could not go on). The store records the end (``closed``, ``idle``,
``error``: viewers get ``session.closed``); a session drained or whose client went away is
*detached* instead: its viewers stay, and any replica may resume it.

Failures stay with their session: a source the translator refuses is an ``error`` event and the
session goes on; any other exception while serving one session (a tokenizer error, a bug) is
logged, sent as an ``internal_error`` event, and that session is closed; an exception in a batched
round closes the sessions in the batch and the scheduler goes on with a fresh batch. A commit that
the store cannot take is sent with ``stored: false`` after an ``error`` event (``store_failed``),
kept in memory by the ``journal`` and written when the store is back (then the client gets
``transcript.stored``). ``drain(timeout_s)`` (SIGTERM) stops taking sessions and chat work,
commits every open caption, closes every session with reason ``shutdown`` and makes ``run()``
return, within ``timeout_s``.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Generator
from concurrent.futures import Future

from ..engine.prefixes import Prefixes
from ..live.multistream import MultiStreamTranslator
from ..live.segmenter import SegmenterConfig
from ..live.translator import StreamTranslator
from . import events, protocol
from .journal import Journal
from .meter import BusyMeter
from .protocol import Settings
from .pushes import Pushes
from .session import ServiceSession
from .store import NotResumable, SessionInfo, TranscriptStore
from .store.bus import LocalBus
from .works import Busy, Works

log = logging.getLogger(__name__)
DEFAULT_MAX_SESSIONS = 8
DEFAULT_CAPTION_ROUNDS = 4  # caption rounds per step of interleaved work (service/load.py --chat-tokens)
DEFAULT_MAX_CALLS = 8  # interleaved works (chat completions) waiting or under way
DEFAULT_MAX_PENDING_FINALS = 16  # a session's commits waiting to be translated
DEFAULT_DRAIN_S = 30.0


class Scheduler:
    """See the module docstring.

    Args:
        loaded: a ``models.loading.LoadedModel``.
        max_sessions: open sessions at most (``open`` raises ``Busy`` beyond).
        segmenter: automatic-commit rules for every session.
        store: where committed captions are kept (None: nowhere).
        caption_rounds: batched rounds per step of interleaved work while captions wait.
        max_calls: interleaved works waiting or under way at most (then ``interleave`` is ``Busy``).
        max_pending_finals: a session's commits waiting at most (then ``push`` is ``Busy``).
    """

    def __init__(
        self,
        loaded,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        segmenter: SegmenterConfig = SegmenterConfig(),
        store: TranscriptStore | None = None,
        caption_rounds: int = DEFAULT_CAPTION_ROUNDS,
        max_calls: int = DEFAULT_MAX_CALLS,
        max_pending_finals: int = DEFAULT_MAX_PENDING_FINALS,
    ):
        self.loaded = loaded
        self.store = store
        self.bus = store.bus if store is not None else LocalBus()
        self.journal = Journal(store)
        self.max_sessions = max_sessions
        self.max_pending_finals = max_pending_finals
        self.segmenter = segmenter
        self.batch = MultiStreamTranslator(model=loaded.model)
        self.prefixes = Prefixes()  # the prompts' shared prefixes, computed once for every session
        self._cond = threading.Condition()
        self._resuming = threading.Lock()
        self._sessions: list[ServiceSession] = []
        self.works = Works(max_calls, caption_rounds)  # chat completions (interleaved work)
        self.pushes = Pushes()  # sessions' push targets (Zoom, YouTube, Teams, OBS)
        self.meter = BusyMeter()  # the model thread's share of time at work (``/health``'s load)
        self._stopping = False
        self._drain_until: float | None = None  # monotonic deadline once draining

    # -- any thread ------------------------------------------------------------------------

    def open(self, send: Callable[[dict], None], settings: Settings = Settings()) -> ServiceSession:
        """A new session, recorded in the store.

        Raises:
            Busy: ``max_sessions`` are open, or the server is shutting down.
            Exception: the store's, when it cannot record the session (the session is not opened).
        """
        with self._cond:
            if self._drain_until is not None:
                raise Busy("the server is shutting down", shutdown=True)
            if len(self._sessions) >= self.max_sessions:
                raise Busy(
                    f"the server is serving its maximum of {self.max_sessions} sessions; try again later"
                )
            session = ServiceSession(
                f"sess_{uuid.uuid4().hex[:16]}",
                settings,
                send,
                self.segmenter,
                self.journal,
                self.bus,
                resume_token=secrets.token_urlsafe(24),
                pushes=self.pushes,
            )
            self._sessions.append(session)
        if self.store is not None:
            try:
                self.store.open_session(
                    session.id, self.loaded.name, settings.to_dict(), session.resume_token
                )
            except Exception:
                with self._cond:
                    self._sessions.remove(session)
                raise
        return session

    def resume(self, session: ServiceSession, sid: str, resume_token: str) -> SessionInfo:
        """``session`` (new, no source yet) goes on as the stored session ``sid``, whose resume
        token is ``resume_token``; the placeholder it was opened as is forgotten. Any thread but
        the model's (it waits on the store).

        Raises:
            NotResumable: no such session or another token (``not_found``), an ended one
                (``session_ended``), or one served now (``session_live``).
            Exception: the store's, when it cannot be reached.
        """
        if self.store is None:
            raise NotResumable("not_found", "this server keeps no sessions (no store): nothing to resume")
        if sid == session.id:
            raise NotResumable("session_live", "this is the session of this connection")
        with self._resuming:  # one claim at a time here, so two connections cannot both resume it
            info = self.store.claim(sid, resume_token, served_here=self.find(sid) is not None)
            placeholder = session.id
            with self._cond:
                session.resume(info, resume_token)
        try:
            self.store.forget(placeholder)
        except Exception as error:
            log.warning("the replaced session %s could not be removed: %s", placeholder, error)
        return info

    def push(self, session: ServiceSession, message: protocol.SourceMessage) -> None:
        """Queue a client's source text for ``session``.

        Raises:
            Busy: ``max_pending_finals`` of its commits wait already (the message is not queued).
        """
        if session.live.pending_finals >= self.max_pending_finals:
            raise Busy(
                f"{session.live.pending_finals} captions wait to be translated; the limit is "
                f"{self.max_pending_finals}: this source.update is refused"
            )
        session.push(message)
        self.wake()

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
        docstring); its return value or exception comes back through the returned future.

        Raises:
            Busy: ``max_calls`` works wait or run already, or the server is shutting down.
        """
        with self._cond:
            if self._drain_until is not None:
                raise Busy("the server is shutting down", shutdown=True)
            future = self.works.submit(fn)
            self._cond.notify()
        return future

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def stop(self) -> None:
        """Return from ``run()`` at its next loop, whatever is under way."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def drain(self, timeout_s: float = DEFAULT_DRAIN_S) -> None:
        """Finish and return from ``run()`` (module docstring); a second call stops at once."""
        with self._cond:
            if self._drain_until is not None:
                self._stopping = True
            self._drain_until = time.monotonic() + timeout_s
            self._cond.notify()

    @property
    def draining(self) -> bool:
        return self._drain_until is not None

    @property
    def open_sessions(self) -> int:
        with self._cond:
            return len(self._sessions)

    @property
    def completions(self) -> int:
        """Interleaved works (chat completions) queued or running."""
        with self._cond:
            return len(self.works)

    # -- the model's thread ------------------------------------------------------------------

    def run(self) -> None:
        """Serve until ``stop()``, or until a ``drain()`` has ended every session and work."""
        while True:
            with self.meter.working():  # all but the idle wait below
                with self._cond:
                    if self._stopping:
                        break
                    sessions, waiting = list(self._sessions), self.works.take_waiting()
                    draining = self._drain_until
                self.works.start(waiting)
                if draining is not None and self._drained(sessions, draining):
                    break
                self.journal.catch_up(sessions)  # before a session retires, so its client hears of it
                self._retire(sessions)
                self._admit(sessions)
                if self.batch.busy:
                    self._round()
                self.works.advance(captions_waiting=self.batch.busy)
                if self.batch.busy or self.works.running:
                    continue
            with self._cond:
                if not self._stopping and not self.works.waiting:
                    self._cond.wait(self._idle_wait(sessions))
        self.journal.catch_up([], last=True)
        self.pushes.close()

    def _drained(self, sessions: list[ServiceSession], deadline: float) -> bool:
        """Close every session for the drain; True once nothing is left, or at the deadline."""
        for session in sessions:
            if not session.live.closed:
                session.reason = "shutdown"
                session.live.close()  # its open caption is committed by the rounds to come
        if not sessions and not self.works.running:
            return True
        if time.monotonic() < deadline:
            return False
        unfinished = (len(sessions), len(self.works.running))
        log.warning("drain timeout: %d session(s) and %d completion(s) ended unfinished", *unfinished)
        for session in sessions:
            session.record_end(ended=False)
            session.publish(
                events.closed_event(session.id, "shutdown"),
                to_client=not session.discarded,
                to_viewers=False,
            )
        self.works.abandon(Busy("the server shut down before the completion ended", shutdown=True))
        return True

    def _round(self) -> None:
        """One batched round; if it fails, the sessions in the batch are closed and a fresh batch
        serves the others (the failed one's state is unknown)."""
        try:
            self.batch.round()
        except Exception as error:
            log.exception("a batched round failed; closing the sessions in it")
            with self._cond:
                members = [s for s in self._sessions if s.translators]
            self.batch = MultiStreamTranslator(model=self.loaded.model)
            for session in members:
                session.translators = {}
                self._fail(session, error)

    def _fail(self, session: ServiceSession, error: BaseException) -> None:
        """``session`` cannot go on: tell its client; it is closed at the next round."""
        if session.failed:
            return
        session.failed, session.reason = True, "error"
        session.live.close()
        session.send(
            events.error_event(
                "internal_error",
                "this session failed and is closed (an error on the "
                "server, in its log; nothing committed is lost)",
            )
        )

    def _idle_wait(self, sessions) -> float:
        """Seconds until some session's pause rule may commit, or the store is retried, or the
        drain ends (at most 1)."""
        waits = [due - s.live.now() for s in sessions if (due := s.live.next_due()) is not None]
        return max(0.0, min([1.0, *waits]))

    def _retire(self, sessions) -> None:
        for session in sessions:
            if session.discarded or session.failed or (session.live.done and not self._busy(session)):
                for translator in session.translators.values():
                    self.batch.remove(translator)  # frees its KV; abandons its update under way
                with self._cond:
                    self._sessions.remove(session)
                ended = not session.discarded and session.reason != "shutdown"
                session.record_end(ended)
                session.publish(
                    events.closed_event(session.id, session.reason),
                    to_client=not session.discarded,
                    to_viewers=ended,
                )

    def _admit(self, sessions) -> None:
        """Start the next update of every session that has none under way."""
        for session in sessions:
            if (
                self._busy(session)
                or session.discarded
                or session.failed
                or (item := session.live.take()) is None
            ):
                continue
            try:
                translators = self._translators(session)
            except Exception as error:
                log.exception("session %s: its translators could not be built", session.id)
                self._fail(session, error)
                continue
            for target, translator in translators.items():  # one row per language, in the same rounds
                try:
                    self.batch.submit(
                        translator,
                        item.source.text,
                        item.source.final,
                        functools.partial(self._ended, session, item, target),
                    )
                except ValueError as error:
                    self._ended(session, item, target, error)
                except Exception as error:
                    log.exception("session %s: an update could not start", session.id)
                    self._fail(session, error)
                    break

    def _busy(self, session: ServiceSession) -> bool:
        """An update of ``session`` (in any of its languages) is under way in the batch."""
        return any(self.batch.running(translator) for translator in session.translators.values())

    def _ended(self, session: ServiceSession, item, target: str, outcome) -> None:
        if session.discarded:
            return
        try:
            session.emit(session.live.result(item, outcome, target))
        except Exception as error:
            log.exception("session %s: its event could not be sent", session.id)
            self._fail(session, error)

    def _translators(self, session: ServiceSession) -> dict[str, StreamTranslator]:
        """The session's translators, one per target language, built and joined to the batch on
        its first source."""
        if not session.translators:
            for translator in session.build_translators(self.loaded).values():
                # computed once per prompt while no session runs (else fed in the rounds, beside them)
                self.prefixes.seed(translator.cache, translator.prompts.prefix, compute=not self.batch.busy)
                self.batch.add(translator)
            if self.store is not None:
                try:
                    self.store.open_session(session.id, self.loaded.name, session.settings.to_dict())
                except Exception as error:
                    log.error("session %s: its settings could not be recorded: %s", session.id, error)
        return session.translators
