"""The embedded transcript store: one SQLite file (WAL mode), nothing to run.

Contract: ``SQLiteStore(path)`` creates or reopens (and migrates) the database; the rest is
``base.TranscriptStore``'s. One writer connection (serialized by a lock), a short-lived reader
connection per read (WAL lets readers run beside the writer). A replica is alive while it records
a heartbeat every ``heartbeat_s`` (a daemon thread; stopped by ``close``): one whose last
heartbeat is older than ``stale_s`` is gone (its sessions are detached), and so at once is one on
this host whose process has ended (a server killed and started again resumes its sessions at once). Several
processes may
share the file on one host; replicas on several hosts need ``postgres.PostgresStore``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import uuid
from pathlib import Path

from .base import TranscriptStore
from .bus import LocalBus

DEFAULT_HEARTBEAT_S = 2.0
DEFAULT_STALE_S = 10.0


class SQLiteStore(TranscriptStore):
    """See the module docstring."""

    NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(
        self,
        path: str | Path,
        *,
        replica: str | None = None,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        stale_s: float = DEFAULT_STALE_S,
    ):
        super().__init__(replica or f"replica_{uuid.uuid4().hex[:12]}")
        self.path = str(path)
        self.stale_s = stale_s
        self.bus = LocalBus()
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode=WAL")
        with self._write() as db:
            self._migrate(db)
        self.register()
        threading.Thread(
            target=self._beat, args=(heartbeat_s,), name="mlx-ssbd-heartbeat", daemon=True
        ).start()

    def _beat(self, every_s: float) -> None:
        """Record a heartbeat every ``every_s`` until ``close`` (a failed one is tried at the next)."""
        while not self._closed.wait(every_s):
            with contextlib.suppress(Exception):
                self.heartbeat()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA synchronous=FULL")
        return db

    @contextlib.contextmanager
    def _write(self):
        with self._lock:
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield self._writer
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self):
        with contextlib.closing(self._connect()) as db:
            yield db

    def alive(self, db) -> set[str]:
        rows = db.execute(
            self._sql("SELECT id, host, pid FROM replicas WHERE seen > {now} - ?"), (self.stale_s,)
        ).fetchall()
        here = socket.gethostname()
        alive = {rid for rid, host, pid in rows if rid != self.replica and (host != here or _running(pid))}
        return alive | ({self.replica} if not self._closed.is_set() else set())

    def close(self) -> None:
        super().close()
        with self._lock:
            self._writer.close()


def _running(pid: int) -> bool:
    """A process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        return True
    return True
