"""A client's caption session in the service: its settings, its live session, its readers.

Contract: ``ServiceSession`` is made by ``scheduler.Scheduler.open``. The web server's thread may
change ``settings`` (or ``resume`` another session) before the first source and ``push`` text; the
speech worker ``hear``-s partials; the scheduler's thread (the model's) calls ``emit`` with the
``LiveSession``'s events: each becomes protocol JSON (``protocol``) sent to the client (``send``)
and published on the store's bus (``store.bus``) for every viewer on every replica, and a commit
goes through the ``journal.Journal`` into the transcript store before anyone sees it, then to the
session's push targets (``pushes.Pushes``, started with its translators, finished at its end;
their reports go to the client only, as ``push.status``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from ..live.glossary import Glossary
from ..live.methods import method_config
from ..live.segmenter import SegmenterConfig
from ..live.session import CaptionCommit, CaptionUpdate, LiveSession
from ..live.source import SourcePartial
from ..live.translator import StreamTranslator
from . import events, protocol
from .journal import Journal
from .protocol import Settings
from .pushes import Pushes
from .store import Caption, SessionInfo
from .store.bus import LocalBus

log = logging.getLogger(__name__)


class ServiceSession:
    """One client's session: its settings, its live session, where its events go (the client
    and any viewers), where its commits are kept."""

    def __init__(
        self,
        sid: str,
        settings: Settings,
        send: Callable[[dict], None],
        segmenter: SegmenterConfig,
        journal: Journal,
        bus: LocalBus,
        resume_token: str = "",
        pushes: Pushes | None = None,
    ):
        self.id = sid
        self.resume_token = resume_token  # the client's secret for a later resume: never published
        self.settings = settings
        self.send = send
        self.journal = journal
        self.bus = bus
        self.live = LiveSession(None, segmenter=segmenter)
        # seconds added to the recognizer's times (a resumed session goes on from its last caption)
        self.offset = 0.0
        # per target language; built on the scheduler thread
        self.translators: dict[str, StreamTranslator] = {}
        self.input: str | None = None  # "text" (source.update) or "audio" (PCM frames): the first decides
        self.method_chosen = False  # the client named a method or β (or the session was resumed)
        self.discarded = False
        self.reason = "closed"  # what session.closed will say
        self.failed = False  # it cannot go on: closed at the next round, its queued sources dropped
        self.pushes = pushes
        self.pusher = None  # its push targets' ``push.delivery.Pusher``, from its first source
        self.wall_origin = 0.0  # Unix time of the session clock's 0 (the time words were spoken)

    def build_translators(self, loaded) -> dict[str, StreamTranslator]:
        """One translator per target language, with the settings in force (``loaded``: a
        ``models.loading.LoadedModel``); the scheduler's thread, at the session's first source."""
        s = self.settings
        config = replace(method_config(s.method, beta=s.beta), display_mask_k=s.mask_k)
        glossary = Glossary(s.glossary) if s.glossary else None
        # examples not set: the model's own; set ({} for "none"): those
        shown = {} if s.examples is None else {"examples": Glossary(s.examples)}
        for target in s.targets:
            self.translators[target] = loaded.translator(
                target, source_lang=s.source, config=config, glossary=glossary, **shown
            )
        if s.push and self.pushes is not None and self.pusher is None:
            self.wall_origin = time.time() - self.live.now()
            self.pusher = self.pushes.open(
                s.push_specs(), lambda report: self.send(events.push_event(report))
            )
        return self.translators

    def publish(self, event: dict, *, to_client: bool = True, to_viewers: bool = True) -> None:
        """Send ``event`` to the client (unless it went away) and the viewers."""
        if to_client:
            self.send(event)
        if to_viewers:
            self.bus.publish(self.id, event)

    def record_end(self, ended: bool) -> None:
        """The store learns this session ended, or (``ended`` False) that no replica serves it
        now: it is detached and may be resumed. A failing store costs only the state's news.
        Its push targets get what waits (in the background)."""
        if self.pusher is not None:
            self.pushes.finish(self.pusher)
            self.pusher = None
        if self.journal.store is None:
            return
        try:
            if ended:
                self.journal.store.end_session(self.id, self.reason)
            else:
                self.journal.store.detach(self.id)
        except Exception as error:
            log.error("session %s: its end could not be recorded: %s", self.id, error)

    def resume(self, info: SessionInfo, resume_token: str) -> None:
        """Become the stored session ``info`` (claimed by this replica with ``resume_token``),
        before the first source: its id, token, settings, caption numbers and clock go on."""
        self.id, self.settings, self.resume_token = (
            info.session,
            Settings.from_dict(info.settings),
            resume_token,
        )
        self.offset = info.next_start
        self.live.resume(info.captions, info.next_start)

    def hear(self, partial: SourcePartial, heard: float) -> None:
        """A recognizer's partial (audio times from this connection's first audio), recognised
        when ``heard`` seconds of audio had come: the clock of the session's pause rule."""
        if self.offset and partial.start is not None and partial.end is not None:
            shift = self.offset
            partial = replace(
                partial,
                start=partial.start + shift,
                end=partial.end + shift,
                words=tuple(replace(w, start=w.start + shift, end=w.end + shift) for w in partial.words),
            )
        self.live.push(partial, at=heard)
        self.publish(events.transcription_event(partial))

    @property
    def started(self) -> bool:
        """A source has come (text or audio): the settings are fixed."""
        return self.input is not None

    def begin(self, kind: str) -> None:
        """A source has come, ``kind`` "text" or "audio": the first fixes the settings, and the
        segmenter learns the source language."""
        if self.input is None:
            self.live.set_language(self.settings.source)
        self.input = kind

    def push(self, message: protocol.SourceMessage) -> None:
        self.begin("text")
        self.live.push(
            SourcePartial(message.text, message.final, message.segment, message.start, message.end)
        )

    def emit(self, event) -> None:
        """A ``LiveSession`` event out; a commit is in the store before anyone sees it (or, when the
        store fails, the client is told first and the journal keeps it)."""
        if isinstance(event, CaptionUpdate):
            self.publish(events.update_event(event.segment, event))
        elif isinstance(event, CaptionCommit):
            caption = Caption(
                event.caption,
                event.segment,
                event.text,
                event.source,
                event.start,
                event.end,
                event.reason,
                event.target,
            )
            stored = self.journal.write(self.id, caption)
            if not stored:
                kept = (
                    "it is kept in memory and written when the store is back"
                    if self.journal.kept
                    else f"{self.journal.max_waiting} captions wait already: this one is not kept"
                )
                self.send(
                    events.error_event(
                        "store_failed",
                        f"caption {event.caption} ({event.target}) could not "
                        f"be written to the transcript store ({self.journal.error}); {kept}",
                    )
                )
            self.publish(events.commit_event(event.segment, event, stored=stored))
            if self.pusher is not None:
                lang = event.target or self.settings.target
                self.pusher.submit(
                    lang, event.text, spoken_at=self.wall_origin + event.start, caption=event.caption
                )
        else:
            self.send(events.error_event("translation_failed", event.message))
