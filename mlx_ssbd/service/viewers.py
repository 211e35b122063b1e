"""``GET /v1/sessions/{id}/events``: Server-Sent Events for a session's viewers, bounded.

Contract: ``Viewers(max_total, max_per_session)`` counts the viewers on the event loop (``enter``
refuses beyond either bound); ``viewer_response(scheduler, sid, viewers, options)`` is the SSE
response of a viewer counted by ``enter``, which leaves the count when the response ends however
it ends. Its body:
the captions committed so far (from the store), then the session's live events until
``session.closed`` (at once for an ended session). Each viewer reads from its own
``outbox.Outbox``: a slow viewer loses live updates first; one that falls ``max_outbox`` commits
behind gets an ``error`` event (``too_slow``) and its stream ends (it may reconnect: the replay
has every commit). After ``keepalive_s`` without an event a comment line is sent, so that proxies
keep a silent stream open. A store that cannot be read gives an ``error`` event
(``store_unavailable``) and the end of the stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from starlette.responses import StreamingResponse

from . import protocol
from .protocol import sse
from .options import ServiceOptions
from .outbox import Outbox, Overflow
from .scheduler import Scheduler

log = logging.getLogger(__name__)


class Viewers:
    """See the module docstring (the event loop's thread only)."""

    def __init__(self, max_total: int, max_per_session: int):
        self.max_total, self.max_per_session = max_total, max_per_session
        self._count: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self._count.values())

    def enter(self, sid: str) -> str | None:
        """Count a viewer of ``sid``; the reason it is refused, or None."""
        if self.total >= self.max_total:
            return f"the server has its maximum of {self.max_total} viewers"
        if self._count[sid] >= self.max_per_session:
            return f"this session has its maximum of {self.max_per_session} viewers"
        self._count[sid] += 1
        return None

    def leave(self, sid: str) -> None:
        self._count[sid] -= 1
        if self._count[sid] <= 0:
            del self._count[sid]


class _Counted(StreamingResponse):
    """A streaming response that calls ``on_end`` once it is over (sent, failed or cut)."""

    def __init__(self, body, on_end, **kwargs):
        super().__init__(body, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()


def viewer_response(scheduler: Scheduler, sid: str, viewers: Viewers, options: ServiceOptions) -> StreamingResponse:
    return _Counted(_viewer_events(scheduler, sid, options), lambda: viewers.leave(sid),
                    media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _viewer_events(scheduler: Scheduler, sid: str, options: ServiceOptions):
    """SSE lines (module docstring)."""
    loop, outbox = asyncio.get_running_loop(), Outbox(options.max_outbox)
    session = scheduler.find(sid)

    def viewer(event):
        loop.call_soon_threadsafe(outbox.put, event)

    if session is not None:
        session.watch(viewer)  # before the replay, so no commit falls in between
    try:
        replayed = -1
        try:
            stored = await asyncio.to_thread(scheduler.store.captions, sid) if scheduler.store is not None else []
        except Exception as error:  # noqa: BLE001 (the store is down: say so, end the stream)
            log.error("the transcript of %s could not be read: %s", sid, error)
            yield sse(protocol.error_event("store_unavailable", "the transcript store cannot be read; try again later"))
            return
        for caption in stored:
            yield sse(protocol.stored_commit_event(caption))
            replayed = caption.caption
        if session is None:
            yield sse(protocol.closed_event(sid))
            return
        while True:
            try:
                event = await asyncio.wait_for(outbox.get(), timeout=options.keepalive_s)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"
                continue
            except Overflow as slow:
                yield sse(protocol.error_event("too_slow", f"this viewer fell behind ({slow}); reconnect"))
                return
            if event["type"] == "translation.commit" and event["caption"] <= replayed:
                continue
            yield sse(event)
            if event["type"] == "session.closed":
                return
    finally:
        if session is not None:
            session.unwatch(viewer)
        outbox.close()
