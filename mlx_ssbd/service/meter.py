"""How much of its time the model's thread spends at work: the server's load, for ``/health``.

Contract: ``BusyMeter(clock, window_s)`` is told, on the model's thread, each stretch of work
(``with meter.working():``: a batched round, a step of a chat completion, the bookkeeping around
them; the scheduler's idle waits are what is left out); ``snapshot()`` (any thread) gives
``busy``: the share of the last ``window_s`` seconds (or of the time since the start, when shorter)
spent at work, 0 to 1; ``busy_s`` and ``uptime_s``: the seconds at work and the seconds since the
start (a client takes two snapshots and divides the differences for any span of its own).
A share near 1 means the server is at its capacity: every session added makes each one's captions
trail further (``benchmarks/service/load.py`` reports it beside the lag). ``clock`` is injectable
(seconds, monotonic); nothing here touches MLX.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_WINDOW_S = 30.0
# Stretches closer than this are kept as one entry (a busy loop's turns), so the window holds a few
# entries, not one per round; the share then counts the gaps between them as work (at most this
# much a turn), ``busy_s`` does not.
JOINED_S = 0.001


class BusyMeter:
    """See the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = DEFAULT_WINDOW_S):
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.clock = clock
        self.window_s = window_s
        self._lock = threading.Lock()
        self._start = clock()
        self._spans: deque[tuple[float, float]] = deque()  # stretches of work that end in the window
        self._total = 0.0  # seconds at work since the start, the stretch under way not included
        self._since: float | None = None  # when the stretch under way began

    @contextmanager
    def working(self) -> Iterator[None]:
        """A stretch of work (not reentrant: the model's thread does one thing at a time)."""
        began = self.clock()
        with self._lock:
            self._since = began
        try:
            yield
        finally:
            ended = self.clock()
            with self._lock:
                self._since = None
                self._total += ended - began
                if self._spans and began - self._spans[-1][1] < JOINED_S:  # back to back: one stretch
                    began = self._spans.pop()[0]
                self._spans.append((began, ended))
                self._forget(ended)

    def _forget(self, now: float) -> None:
        while self._spans and self._spans[0][1] <= now - self.window_s:
            self._spans.popleft()

    def snapshot(self) -> dict:
        """``{"busy", "window_s", "busy_s", "uptime_s"}`` as of now (see the module docstring)."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            spans = list(self._spans)
            if self._since is not None:
                spans.append((self._since, now))
            total = self._total + (now - self._since if self._since is not None else 0.0)
        start = max(self._start, now - self.window_s)
        worked = sum(max(0.0, end - max(begin, start)) for begin, end in spans)
        span = now - start
        return {
            "busy": round(min(1.0, worked / span), 3) if span > 0 else 0.0,
            "window_s": self.window_s,
            "busy_s": round(total, 3),
            "uptime_s": round(now - self._start, 3),
        }
