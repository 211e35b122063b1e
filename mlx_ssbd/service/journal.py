"""Commits on their way to the transcript store: written in order, kept in memory while it fails.

Contract: ``Journal(store)`` is used by the scheduler's thread only (``health`` by any).
``write(session, caption)`` writes the caption, after any earlier ones of any session still
waiting, and returns True when all of them are in the store; when the store fails (full disk,
read-only file, locked, gone), the caption is kept in memory, in order, and ``write`` returns
False (the failure is in ``error``). At most ``max_waiting`` captions are kept (100,000: hours of
a busy server's commits, tens of MB); beyond that a caption is not kept (``kept`` is False after
its ``write``, ``not_kept`` counts them): its client has it, the transcript will not.
``retry()`` tries the waiting ones again (at most every ``retry_s``; ``force`` at once).
``recovered()`` returns (and forgets) the captions that had failed and have been written since;
``catch_up(sessions)`` retries, tells those sessions' clients (``transcript.stored``) and publishes
the captions again for their viewers (a viewer on another replica missed them while the store,
which carries events between replicas, was gone).
Below that bound nothing is dropped while the process lives; ``kill -9`` loses only captions that
were never written, and the scheduler says so to their clients when they are committed
(``stored: false``). ``health()`` is what ``/health`` says of the store: ``ok`` or ``failing``
(since when), captions waiting, captions not kept.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from .events import stored_commit_event
from .store import Caption

log = logging.getLogger(__name__)
DEFAULT_RETRY_S = 1.0
DEFAULT_MAX_WAITING = 100_000


class Journal:
    """See the module docstring. ``store``: a ``store.base.TranscriptStore`` (None: nothing is kept)."""

    def __init__(
        self,
        store,
        *,
        retry_s: float = DEFAULT_RETRY_S,
        max_waiting: int = DEFAULT_MAX_WAITING,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.retry_s = retry_s
        self.max_waiting = max_waiting
        self.error: Exception | None = None  # the last failure, while some caption waits
        self.failing_since: float | None = None  # the clock when the store started failing
        self.kept = True  # the last ``write``'s caption is in the store or waiting for it
        self.not_kept = 0  # captions refused because ``max_waiting`` waited
        self._clock = clock
        self._waiting: deque[tuple[str, Caption]] = deque()
        self._failed = 0  # how many of the oldest waiting captions have failed at least once
        self._recovered: list[tuple[str, Caption]] = []
        self._tried = 0.0

    @property
    def waiting(self) -> int:
        """Captions not yet in the store."""
        return len(self._waiting)

    def write(self, session: str, caption: Caption) -> bool:
        if self.store is None:
            return True
        if len(self._waiting) >= self.max_waiting:
            self.retry()  # the store may be back: room for this one
        self.kept = len(self._waiting) < self.max_waiting
        if not self.kept:
            self.not_kept += 1
            if self.not_kept == 1:
                log.error(
                    "%d captions wait for the transcript store; newer ones are not kept", self.max_waiting
                )
            return False
        self._waiting.append((session, caption))
        self._flush()
        return not self._waiting

    def health(self) -> dict:
        """``/health``'s ``store``: its state, since when it fails, captions waiting and not kept."""
        since = self.failing_since
        return {
            "state": "ok" if since is None else "failing",
            "failing_for_s": None if since is None else round(self._clock() - since, 1),
            "waiting": len(self._waiting),
            "not_kept": self.not_kept,
        }

    def retry(self, *, force: bool = False) -> None:
        """Write the waiting captions if ``retry_s`` passed since the last try (or ``force``)."""
        if self._waiting and (force or self._clock() - self._tried >= self.retry_s):
            self._flush()

    def catch_up(self, sessions, *, last: bool = False) -> None:
        """Write the captions the store refused before, if it is back; tell their clients (the
        ``service.session.ServiceSession``s given); ``last``: at once, and log what is left."""
        self.retry(force=last)
        written = self.recovered()
        live = {s.id: s for s in sessions}
        for sid in dict.fromkeys(sid for sid, _ in written):
            if (session := live.get(sid)) is not None:
                for other, caption in written:  # viewers on other replicas missed them while it failed
                    if other == sid:
                        session.publish(stored_commit_event(caption), to_client=False)
                session.send(
                    {
                        "type": "transcript.stored",
                        "session": sid,
                        "captions": [c.caption for other, c in written if other == sid],
                    }
                )
        if last and self.waiting:
            log.error(
                "the transcript store is still failing; %d committed caption(s) were never written",
                self.waiting,
            )

    def recovered(self) -> list[tuple[str, Caption]]:
        """The captions written since the last call after failing before, in order."""
        done, self._recovered = self._recovered, []
        return done

    def _flush(self) -> None:
        self._tried = self._clock()
        while self._waiting:
            session, caption = self._waiting[0]
            try:
                self.store.add_caption(session, caption)
            except Exception as error:
                if self.error is None:
                    log.error(
                        "the transcript store failed (%s); %d caption(s) kept in memory",
                        error,
                        len(self._waiting),
                    )
                self.error, self._failed = error, len(self._waiting)
                if self.failing_since is None:
                    self.failing_since = self._tried
                return
            self._waiting.popleft()
            if self._failed:
                self._failed -= 1
                self._recovered.append((session, caption))
        if self.error is not None:
            log.warning("the transcript store is back; every waiting caption is written")
            self.error, self.failing_since = None, None
