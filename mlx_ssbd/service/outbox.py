"""A bounded queue of events for one reader (a WebSocket client or an SSE viewer).

Contract: ``Outbox(limit)`` lives on the event loop: ``put`` and ``get`` are called there only
(the model's thread posts with ``loop.call_soon_threadsafe(outbox.put, event)``). It holds at most
``limit`` events. When a slow reader lets it fill, the oldest *live* event (``translation.update``,
``transcription.update``: each is superseded by the next) is dropped to make room, and counted in
``dropped``; every other event (commits, errors, ``session.closed``) is never dropped. If the
queue is full of those, the reader is too far behind to be served: the outbox *overflows*
(``overflowed`` is set, later ``put``s are ignored, ``get`` raises ``Overflow``, ``on_overflow``
is called once) and its owner closes the connection with a reason. ``close()`` makes later
``put``s no-ops and ``get`` raise ``Overflow`` (the reader is gone).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

LIVE_EVENTS = frozenset({"translation.update", "transcription.update"})
DEFAULT_LIMIT = 256


class Overflow(Exception):
    """The reader fell ``limit`` events behind with none left to drop."""


class Outbox:
    """See the module docstring."""

    def __init__(self, limit: int = DEFAULT_LIMIT, on_overflow: Callable[[], None] | None = None):
        if limit < 1:
            raise ValueError(f"an outbox holds at least 1 event, got {limit}")
        self.limit = limit
        self.on_overflow = on_overflow
        self.dropped = 0
        self.overflowed = False
        self._events: deque[dict] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._events)

    def put(self, event: dict) -> None:
        if self._closed or self.overflowed:
            return
        if len(self._events) >= self.limit and not self._drop_live():
            self.overflowed = True
            if self.on_overflow is not None:
                self.on_overflow()
        else:
            self._events.append(event)
        self._ready.set()

    def _drop_live(self) -> bool:
        for index, queued in enumerate(self._events):
            if queued.get("type") in LIVE_EVENTS:
                del self._events[index]
                self.dropped += 1
                return True
        return False

    async def get(self) -> dict:
        """The next event, waiting for one; raises ``Overflow`` once the outbox overflowed."""
        while True:
            if self.overflowed:
                raise Overflow(f"more than {self.limit} events waiting to be read")
            if self._closed:
                raise Overflow("the outbox is closed")
            if self._events:
                return self._events.popleft()
            self._ready.clear()
            await self._ready.wait()

    def close(self) -> None:
        self._closed = True
        self._events.clear()
        self._ready.set()
