"""The service's push targets: one push thread for every session's Zoom, YouTube, Teams and OBS.

Contract: ``Pushes`` is owned by the scheduler. ``open(specs, report)`` (a session's first source,
on the model's thread) starts the session's ``push.delivery.Pusher`` on the one push thread,
started at the first use; ``finish(pusher)`` (the session's end) lets its queues drain for
``drain_s`` in the background and adds its counts to the totals; ``health()`` is what ``/health``
reports of them (no URL, no secret); ``close()`` (the scheduler's end) waits ``CLOSE_WAIT_S`` at
most for the drains under way, then stops the push thread.
Nothing here waits on a network: a dead target costs the model, the viewers and the transcript
nothing.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable

from ..push.delivery import DeliveryLimits, Pusher, PushHub, PushReport
from ..push.spec import PushSpec

DRAIN_S = 30.0  # after a session's end, its targets get this long to deliver what waits
CLOSE_WAIT_S = 5.0  # at the server's end, sessions' drains are waited for this long at most
COUNTS = ("delivered", "undelivered", "waiting")


class Pushes:
    def __init__(self, limits: DeliveryLimits | None = None, drain_s: float = DRAIN_S):
        self.limits, self.drain_s = limits or DeliveryLimits(), drain_s
        self._hub: PushHub | None = None
        self._lock = threading.Lock()
        self._live: set[Pusher] = set()
        self._draining: set[concurrent.futures.Future] = set()
        self._ended = dict.fromkeys(COUNTS[:2], 0)  # lines of finished sessions' targets

    def open(self, specs: list[PushSpec], report: Callable[[PushReport], None]) -> Pusher:
        with self._lock:
            if self._hub is None:
                self._hub = PushHub()
            hub = self._hub
        pusher = hub.open(specs, report, self.limits)
        with self._lock:
            self._live.add(pusher)
        return pusher

    def finish(self, pusher: Pusher) -> None:
        """Drain ``pusher`` in the background; returns at once."""

        def ended(future) -> None:
            with self._lock:
                self._live.discard(pusher)
                self._draining.discard(future)
                if not future.cancelled() and future.exception() is None:
                    for stats in future.result():
                        for key in self._ended:
                            self._ended[key] += stats[key]

        future = pusher.finish(self.drain_s)
        with self._lock:
            self._draining.add(future)
        future.add_done_callback(ended)

    def health(self) -> dict:
        """``/health``'s ``push``: targets live, failing and stopped, and lines delivered,
        undelivered (given up) and waiting, over every session this replica served."""
        with self._lock:
            stats = [each for pusher in self._live for each in pusher.stats()]
            totals = dict(self._ended)
        out = {
            "targets": len(stats),
            **{s: sum(e["state"] == s for e in stats) for s in ("failing", "stopped")},
        }
        for key in COUNTS:
            out[key] = totals.get(key, 0) + sum(e[key] for e in stats)
        return out

    def close(self) -> None:
        with self._lock:
            draining = list(self._draining)
        concurrent.futures.wait(draining, timeout=CLOSE_WAIT_S)
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()
