"""A session's events on their way to its viewers: publish once, delivered to every subscriber.

Contract: ``LocalBus`` delivers in this process: ``publish(sid, event)`` calls every
``subscribe``-d callback of ``sid`` at once, on the publisher's thread (callbacks must be quick
and thread-safe: a viewer's puts the event on its event loop). A backend that carries events
between replicas (``postgres.PostgresBus``) extends it and calls ``interrupted()`` when it lost
events it cannot deliver: every callback then gets ``None`` (a viewer ends its stream, and
reconnects with ``Last-Event-ID`` to be replayed what it missed).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

Subscriber = Callable[[dict | None], None]


class LocalBus:
    """See the module docstring."""

    def __init__(self):
        self._subscribers: dict[str, list[Subscriber]] = defaultdict(list)
        self._lock = threading.Lock()

    def subscribe(self, sid: str, callback: Subscriber) -> None:
        with self._lock:
            self._subscribers[sid].append(callback)

    def unsubscribe(self, sid: str, callback: Subscriber) -> None:
        with self._lock:
            if callback in self._subscribers.get(sid, ()):
                self._subscribers[sid].remove(callback)
                if not self._subscribers[sid]:
                    del self._subscribers[sid]

    def publish(self, sid: str, event: dict) -> None:
        self.deliver(sid, event)

    def deliver(self, sid: str, event: dict | None) -> None:
        """Call ``sid``'s subscribers with ``event`` (in this process)."""
        with self._lock:
            callbacks = list(self._subscribers.get(sid, ()))
        for callback in callbacks:
            callback(event)

    def watched(self) -> set[str]:
        """The sessions with subscribers here."""
        with self._lock:
            return set(self._subscribers)

    def interrupted(self) -> None:
        for sid in self.watched():
            self.deliver(sid, None)

    def close(self) -> None:
        """Stop carrying events (a local bus has nothing to stop)."""
