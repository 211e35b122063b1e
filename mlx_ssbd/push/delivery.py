"""Delivery: each push target gets every caption line once, in order, off the model's thread.

Contract: a ``PushHub`` runs one asyncio loop on a thread of its own (``mlx-ssbd-push``) with one
HTTP client; ``hub.open(specs, report)`` gives a talk's ``Pusher``, one ``TargetWorker`` per
``PushSpec``. ``Pusher.submit`` (any thread) costs a few microseconds and never waits on a
network: the model, the viewers and the transcript never wait for a target.

Each worker sends its queue in order, one line at a time (the head is retried until it is
delivered, so a caption is never sent out of order or twice). Bounds, all in ``DeliveryLimits``:
at most ``max_queue`` lines wait per target (beyond that the oldest waiting line is dropped); a
line that has failed for ``retry_for_s`` is given up; retries back off from ``backoff_s[0]`` to
``backoff_s[1]``; a destination that is not live yet (``HOLD``) is tried every ``hold_s``. A
``STOP`` verdict ends the target. What could not be delivered is counted (``stats``) and
reported through the ``report`` callback (``PushReport``, on the push thread; never with a URL's
secrets), once when a target starts failing, once when it recovers, for every line given up.
``Pusher.finish(drain_s)`` lets the queues drain for at most ``drain_s`` seconds, then stops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .senders import Line, Verdict, lines_for, sender_for
from .spec import PushSpec


@dataclass(frozen=True)
class DeliveryLimits:
    max_queue: int = 2000  # lines waiting per target; beyond it the oldest waiting one is dropped
    retry_for_s: float = 300.0  # a line failing this long is given up (an outage of 5 minutes)
    backoff_s: tuple[float, float] = (0.5, 8.0)  # the first and the longest wait between retries
    hold_s: float = 2.0  # between tries while the destination is not live yet
    timeout_s: float = 5.0  # one request (or OBS's connection and answer) waited for at most

    def __post_init__(self):
        if self.max_queue < 2:
            raise ValueError(
                f"max_queue must be at least 2 (one in flight, one waiting), got {self.max_queue}"
            )


@dataclass(frozen=True)
class PushReport:
    """News of one target: ``kind`` is ``failing``, ``recovered``, ``undelivered`` or ``stopped``."""

    target: str  # ``PushSpec.name``: platform, languages, host (no secrets)
    kind: str
    message: str
    lines: int = 0  # lines given up by this report (``undelivered``, ``stopped``)


@dataclass
class _Entry:
    line: Line
    queued_at: float  # the hub's clock when the caption was submitted


class TargetWorker:
    """One target's queue and its delivery loop (the hub's loop only, but ``stats``)."""

    def __init__(self, spec: PushSpec, sender, limits: DeliveryLimits, report: Callable, clock: Callable):
        self.spec, self.sender, self.limits, self.report, self.clock = spec, sender, limits, report, clock
        self.queue: deque[_Entry] = deque()
        self.wake = asyncio.Event()
        self.state = "live"  # live, failing (retrying or holding), stopped
        self.failing_since: float | None = None
        self.delivered = self.undelivered = 0
        self.last_error = ""
        self.delays: deque[float] = deque(maxlen=10_000)  # submit to delivered, seconds
        self.busy = False  # the queue's head is being sent

    def put(self, entries: list[_Entry]) -> None:
        if self.state == "stopped":
            self.undelivered += len(entries)
            return
        for entry in entries:
            if len(self.queue) >= self.limits.max_queue:  # drop the oldest line not in flight
                del self.queue[1 if self.busy else 0]
                self._give_up(1, f"more than {self.limits.max_queue} lines waited; the oldest is dropped")
            self.queue.append(entry)
        self.wake.set()

    def _give_up(self, lines: int, why: str) -> None:
        self.undelivered += lines
        self.report(PushReport(self.spec.name, "undelivered", f"{lines} line(s) not delivered: {why}", lines))

    async def run(self) -> None:
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            self.busy = True
            try:
                delivered = await self._deliver(self.queue[0])
            finally:
                self.busy = False
            if self.state == "stopped":
                return
            self.queue.popleft()
            if delivered:
                self.delivered += 1

    async def _deliver(self, entry: _Entry) -> bool:
        """Send ``entry`` until it is delivered (True), given up or the target stops (False)."""
        wait = self.limits.backoff_s[0]
        while True:
            try:
                verdict, detail = await self.sender.send(entry.line)
            except Exception as error:  # a sender's bug must not end the loop: retried, reported
                verdict, detail = Verdict.RETRY, f"{type(error).__name__}: {error}"
            now = self.clock()
            if verdict is Verdict.OK:
                self.delays.append(now - entry.queued_at)
                if self.failing_since is not None:
                    back = f"delivering again after {now - self.failing_since:.0f} s"
                    self.report(PushReport(self.spec.name, "recovered", back))
                self.state, self.failing_since = "live", None
                return True
            self.last_error = detail
            if verdict is Verdict.STOP:
                self._stop(detail)
                return False
            if self.failing_since is None:
                self.state, self.failing_since = "failing", now
                self.report(PushReport(self.spec.name, "failing", f"{detail}; retrying, captions are kept"))
            if now - entry.queued_at >= self.limits.retry_for_s:
                self._give_up(1, f"failed for {self.limits.retry_for_s:g} s ({detail})")
                return False
            await asyncio.sleep(self.limits.hold_s if verdict is Verdict.HOLD else wait)
            wait = min(2 * wait, self.limits.backoff_s[1])

    def _stop(self, why: str) -> None:
        lines = len(self.queue)
        self.state, self.undelivered = "stopped", self.undelivered + lines
        self.queue.clear()
        self.report(
            PushReport(self.spec.name, "stopped", f"stopped: {why}; {lines} line(s) not delivered", lines)
        )

    def stats(self) -> dict:
        delays = sorted(self.delays)
        quantile = lambda q: round(delays[min(len(delays) - 1, int(q * len(delays)))], 3) if delays else None
        return {
            "target": self.spec.name,
            "platform": self.spec.platform,
            "languages": list(self.spec.languages),
            "state": self.state,
            "delivered": self.delivered,
            "undelivered": self.undelivered,
            "waiting": len(self.queue),
            "last_error": self.last_error,
            "delay_p50_s": round(statistics.median(delays), 3) if delays else None,
            "delay_p95_s": quantile(0.95),
        }


class Pusher:
    """One talk's push targets (made by ``PushHub.open``)."""

    def __init__(self, hub: PushHub, workers: list[TargetWorker]):
        self.hub, self.workers = hub, workers
        self._tasks: list[asyncio.Task] = []  # the workers' loops (set by ``PushHub.open``)
        self._done: concurrent.futures.Future | None = None

    def submit(self, lang: str, text: str, *, spoken_at: float, caption: int) -> None:
        """A committed caption (or a stable piece of one) in ``lang`` to every target of that
        language; returns at once (any thread)."""
        now = self.hub.clock()
        for worker in self.workers:
            if lang in worker.spec.languages:
                entries = [
                    _Entry(Line(lang, piece, spoken_at, caption), now)
                    for piece in lines_for(worker.spec, text)
                ]
                if entries:
                    self.hub.loop.call_soon_threadsafe(worker.put, entries)

    def stats(self) -> list[dict]:
        return [worker.stats() for worker in self.workers]

    def finish(self, drain_s: float = 10.0) -> concurrent.futures.Future:
        """Let every queue drain for at most ``drain_s`` seconds, then stop; what is left is reported
        undelivered. Returns at once; the future's result is ``stats()`` at the end."""
        if self._done is None:
            self._done = asyncio.run_coroutine_threadsafe(self._finish(drain_s), self.hub.loop)
        return self._done

    async def _finish(self, drain_s: float) -> list[dict]:
        deadline = self.hub.clock() + drain_s
        while any(w.queue and w.state != "stopped" for w in self.workers) and self.hub.clock() < deadline:
            await asyncio.sleep(0.02)
        for worker, task in zip(self.workers, self._tasks):
            task.cancel()
            if worker.queue:
                lines = len(worker.queue)
                worker.queue.clear()
                worker._give_up(lines, f"still waiting {drain_s:g} s after the talk ended")
            await worker.sender.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return self.stats()


class PushHub:
    """The push thread and its loop, for every talk of a process; ``close()`` ends it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mlx-ssbd-push", daemon=True)
        self.thread.start()
        self.client = self.call(self._client())

    @staticmethod
    async def _client():
        import httpx

        return httpx.AsyncClient(follow_redirects=False)

    def call(self, coroutine, timeout: float | None = 30.0):
        """Run ``coroutine`` on the push loop and wait for its result (not from the push thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def open(
        self,
        specs: list[PushSpec],
        report: Callable[[PushReport], None],
        limits: DeliveryLimits = DeliveryLimits(),
    ) -> Pusher:
        """A ``Pusher`` for ``specs``; ``report`` is called on the push thread."""

        async def start() -> Pusher:
            workers = [
                TargetWorker(
                    spec,
                    sender_for(spec, self.client, limits.timeout_s),
                    limits,
                    report,
                    self.clock,
                )
                for spec in specs
            ]
            pusher = Pusher(self, workers)
            pusher._tasks = [asyncio.create_task(worker.run()) for worker in workers]
            return pusher

        return self.call(start())

    def close(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.call(self.client.aclose(), timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            if not self.thread.is_alive():
                self.loop.close()

    def __enter__(self) -> PushHub:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
