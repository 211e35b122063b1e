"""``GET /v1/sessions/{id}/events``: Server-Sent Events for a session's viewers, bounded.

Contract: ``Viewers(max_total, max_per_session)`` counts the viewers on the event loop (``enter``
refuses beyond either bound); ``viewer_response(scheduler, sid, viewers, options)`` is the SSE
response of a viewer counted by ``enter``, which leaves the count when the response ends however
it ends. It carries one language of the session (``target``: the viewer's ``?lang=``). Its body:
the captions committed so far (from the store; after ``Last-Event-ID`` for a viewer that
reconnects: every commit carries ``id:`` = its caption number), then the session's live events
from the store's bus, wherever the session runs, until ``session.closed`` (at once for an ended
session; a detached one is waited for: it may be resumed on any replica). Each viewer reads from its own
``outbox.Outbox``: a slow viewer loses live updates first; one that falls ``max_outbox`` commits
behind gets an ``error`` event (``too_slow``) and its stream ends (it may reconnect: the replay
has every commit). After ``keepalive_s`` without an event a comment line is sent, so that proxies
keep a silent stream open. A store that cannot be read gives an ``error`` event
(``store_unavailable``) and the end of the stream; so does a bus that lost events
(``events_interrupted``): the browser reconnects (``retry:`` 1 s) and is replayed what it missed.
A live commit past a gap (commits of another replica whose events were lost while the store was
gone) is preceded by the missing ones from the store, waited for a few seconds while that
replica's journal writes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from starlette.responses import StreamingResponse

from . import events
from .events import sse
from .options import ServiceOptions
from .outbox import Outbox, Overflow
from .scheduler import Scheduler

log = logging.getLogger(__name__)
RECONNECT_MS = 1000  # how soon a browser reconnects a dropped stream (SSE ``retry:``)
GAP_WAIT_S = 10.0  # commits missing before a live one are waited for this long in the store
GAP_POLL_S = 0.5


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


def viewer_response(
    scheduler: Scheduler,
    sid: str,
    viewers: Viewers,
    options: ServiceOptions,
    target: str,
    last_event_id: str | None = None,
) -> StreamingResponse:
    return _Counted(
        _viewer_events(scheduler, sid, options, target, _caption_number(last_event_id)),
        lambda: viewers.leave(sid),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


MAX_CAPTION = 2**31 - 1  # caption numbers are far below; a larger id is not one of ours


def _caption_number(last_event_id: str | None) -> int:
    """The caption a reconnecting viewer saw last (-1: none, or an id that is not ours)."""
    try:
        number = int(last_event_id or -1)
    except ValueError:
        return -1
    return number if 0 <= number <= MAX_CAPTION else -1


INTERRUPTED = {"type": "bus.interrupted"}  # the bus lost events: the viewer must reconnect


async def _viewer_events(scheduler: Scheduler, sid: str, options: ServiceOptions, target: str, after: int):
    """SSE lines (module docstring)."""
    loop, outbox = asyncio.get_running_loop(), Outbox(options.max_outbox)

    def viewer(event: dict | None) -> None:
        loop.call_soon_threadsafe(outbox.put, INTERRUPTED if event is None else event)

    scheduler.bus.subscribe(sid, viewer)  # before the replay, so no commit falls in between
    try:
        yield f"retry: {RECONNECT_MS}\n\n"
        replayed = after
        try:
            stored, info = await asyncio.to_thread(_replay, scheduler, sid, after, target)
        except Exception as error:
            log.error("the transcript of %s could not be read: %s", sid, error)
            yield sse(
                events.error_event(
                    "store_unavailable", "the transcript store cannot be read; try again later"
                )
            )
            return
        for caption in stored:
            yield sse(events.stored_commit_event(caption), caption.caption)
            replayed = caption.caption
        if scheduler.find(sid) is None and (info is None or info.state == "ended"):
            yield sse(events.closed_event(sid, info.reason if info else None))
            return
        while True:
            try:
                event = await asyncio.wait_for(outbox.get(), timeout=options.keepalive_s)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"
                continue
            except Overflow as slow:
                yield sse(events.error_event("too_slow", f"this viewer fell behind ({slow}); reconnect"))
                return
            if event.get("target", target) != target:
                continue  # another language of the session
            if event is INTERRUPTED:
                yield sse(
                    events.error_event(
                        "events_interrupted",
                        "the events of other replicas were interrupted; "
                        "reconnect (with Last-Event-ID) for what you missed",
                    )
                )
                return
            if event["type"] == "translation.commit":
                if event["caption"] <= replayed:
                    continue
                if event["caption"] > replayed + 1 and scheduler.store is not None:
                    async for line, number in _fill(scheduler, sid, target, replayed, event["caption"]):
                        yield line
                        replayed = number
                replayed = event["caption"]
                yield sse(event, event["caption"])
            else:
                yield sse(event)
            if event["type"] == "session.closed":
                return
    finally:
        scheduler.bus.unsubscribe(sid, viewer)
        outbox.close()


async def _fill(scheduler: Scheduler, sid: str, target: str, after: int, before: int):
    """The commits between ``after`` and ``before`` that this viewer has not seen, from the store:
    another replica's commits whose events were lost while the store (the bus between replicas)
    was gone, written by that replica's journal once it is back. Waited for ``GAP_WAIT_S`` at most;
    what the store still lacks then was never kept, and the viewer goes on without it."""
    deadline = time.monotonic() + GAP_WAIT_S
    while after + 1 < before:
        try:
            stored, _ = await asyncio.to_thread(_replay, scheduler, sid, after, target)
        except Exception as error:
            log.error("the transcript of %s could not be read: %s", sid, error)
            stored = []
        for caption in stored:
            if caption.caption < before:
                yield sse(events.stored_commit_event(caption), caption.caption), caption.caption
                after = caption.caption
        if after + 1 >= before or time.monotonic() >= deadline:
            return
        await asyncio.sleep(GAP_POLL_S)


def _replay(scheduler: Scheduler, sid: str, after: int, target: str):
    """The captions in ``target`` committed after ``after`` and the stored session (None without a store)."""
    if scheduler.store is None:
        return [], None
    return scheduler.store.captions(sid, after, target), scheduler.store.session(sid)
