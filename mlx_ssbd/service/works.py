"""Model work beside the captions: chat completions, stepped between the sessions' rounds.

Contract: a work is a generator doing one model call per step; ``Works.submit(fn)`` queues
``fn`` (any thread, under the scheduler's lock) and returns the future its result or exception
comes back through; on the model's thread ``start(waiting)`` starts what was queued,
``advance(captions_waiting)`` advances the oldest work by one step (works run one at a time, in the
order they came) once every ``caption_rounds`` calls while captions wait (each call follows one
batched round of the sessions), at every call otherwise; ``abandon(error)`` ends every work with
``error``. Nothing here touches MLX itself.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from concurrent.futures import Future


class Busy(Exception):
    """Refused for now: the server is full, or shutting down (``shutdown``); try again later."""

    def __init__(self, message: str, *, shutdown: bool = False):
        super().__init__(message)
        self.shutdown = shutdown


class Works:
    """See the module docstring; ``max_works``: works waiting or under way at most;
    ``caption_rounds``: rounds of the sessions per step while captions wait (1: they alternate)."""

    def __init__(self, max_works: int, caption_rounds: int = 1):
        if caption_rounds < 1:
            raise ValueError(f"caption_rounds must be at least 1, got {caption_rounds}")
        self.max_works = max_works
        self.caption_rounds = caption_rounds
        self._rounds = 0  # calls of advance() since a work last stepped
        self.waiting: list[tuple[Callable[[], Generator], Future]] = []  # any thread, under a lock
        self.running: list[tuple[Generator, Future]] = []  # the model's thread

    def __len__(self) -> int:
        return len(self.waiting) + len(self.running)

    def submit(self, fn: Callable[[], Generator]) -> Future:
        """Queue ``fn``. Raises ``Busy`` when ``max_works`` wait or run already."""
        if len(self) >= self.max_works:
            raise Busy(f"{self.max_works} completions are queued or running; try again later")
        future: Future = Future()
        self.waiting.append((fn, future))
        return future

    def take_waiting(self) -> list[tuple[Callable[[], Generator], Future]]:
        """What was queued since the last call (under the scheduler's lock)."""
        waiting, self.waiting = self.waiting, []
        return waiting

    def start(self, waiting: list[tuple[Callable[[], Generator], Future]]) -> None:
        """Start each queued work (``fn()``) unless its future was cancelled."""
        for fn, future in waiting:
            if future.set_running_or_notify_cancel():
                try:
                    self.running.append((fn(), future))
                except Exception as error:  # handed to the caller, which answers the client
                    future.set_exception(error)

    def advance(self, captions_waiting: bool = False) -> None:
        """One step of the oldest work when one is due; at its end its future gets the result."""
        self._rounds += 1
        if not self.running or (captions_waiting and self._rounds < self.caption_rounds):
            return
        self._rounds = 0
        steps, future = self.running[0]
        try:
            next(steps)
            return
        except StopIteration as end:
            future.set_result(end.value)
        except Exception as error:  # handed to the caller, which answers the client
            future.set_exception(error)
        self.running.pop(0)

    def abandon(self, error: BaseException) -> None:
        """End every work under way with ``error``."""
        for _, future in self.running:
            future.set_exception(error)
        self.running = []
