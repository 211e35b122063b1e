"""A client's caption session in the service: its settings, its live session, its readers.

Contract: ``ServiceSession`` is made by ``scheduler.Scheduler.open``. The web server's thread may
change ``settings`` before the first source, ``push`` text, ``watch``/``unwatch`` viewers; the
scheduler's thread (the model's) calls ``emit`` with the ``LiveSession``'s events: each becomes
protocol JSON (``protocol``) sent to the client (``send``) and to every viewer, and a commit goes
through the ``journal.Journal`` into the transcript store before anyone sees it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..live.segmenter import SegmenterConfig
from ..live.session import CaptionCommit, CaptionUpdate, LiveSession
from ..live.source import SourceUpdate
from ..live.translator import StreamTranslator
from . import protocol
from .journal import Journal
from .protocol import Settings
from .store import Caption


class ServiceSession:
    """One client's session: its settings, its live session, where its events go (the client
    and any viewers), where its commits are kept."""

    def __init__(self, sid: str, settings: Settings, send: Callable[[dict], None], segmenter: SegmenterConfig,
                 journal: Journal):
        self.id = sid
        self.settings = settings
        self.send = send
        self.journal = journal
        self.live = LiveSession(None, segmenter=segmenter)
        self.translator: StreamTranslator | None = None  # built on the scheduler thread
        self.input: str | None = None  # "text" (source.update) or "audio" (PCM frames): the first decides
        self.discarded = False
        self.reason = "closed"  # what session.closed will say
        self.failed = False  # it cannot go on: closed at the next round, its queued jobs dropped
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
        """A ``LiveSession`` event out; a commit is in the store before anyone sees it (or, when the
        store fails, the client is told first and the journal keeps it)."""
        if isinstance(event, CaptionUpdate):
            self.publish(protocol.update_event(event.segment, event))
        elif isinstance(event, CaptionCommit):
            caption = Caption(event.caption, event.segment, event.text, event.source, event.start, event.end,
                              event.reason)
            stored = self.journal.write(self.id, caption)
            if not stored:
                self.send(protocol.error_event("store_failed", f"caption {event.caption} could not be written to the "
                                               f"transcript store ({self.journal.error}); it is kept in memory and "
                                               "written when the store is back"))
            self.publish(protocol.commit_event(event.segment, event, stored=stored))
        else:
            self.send(protocol.error_event("translation_failed", event.message))
