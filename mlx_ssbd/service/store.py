"""The transcript store: every committed caption of every session, in SQLite (WAL mode).

Contract: ``TranscriptStore(path)`` creates or reopens the database. ``open_session`` and
``add_caption`` are called by the scheduler (one writer); each returns only after its transaction
is committed, so a caption the server sends as committed is already on disk: it survives
``kill -9`` of the server (WAL with ``synchronous=FULL``), and a server restarted on the same file
serves it again. ``session`` and ``captions`` may be called from any thread (each call opens its
own short-lived reader connection; WAL lets readers run beside the writer).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    model TEXT NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS captions (
    session TEXT NOT NULL REFERENCES sessions(id),
    caption INTEGER NOT NULL,
    segment TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    start REAL NOT NULL,
    "end" REAL NOT NULL,
    reason TEXT NOT NULL,
    committed REAL NOT NULL,
    PRIMARY KEY (session, caption)
);
"""


@dataclass(frozen=True)
class Caption:
    caption: int
    segment: str | None
    text: str
    source: str
    start: float
    end: float
    reason: str

    def to_dict(self) -> dict:
        return {"caption": self.caption, "segment": self.segment, "text": self.text, "source": self.source,
                "start": self.start, "end": self.end, "reason": self.reason}


class TranscriptStore:
    """See the module docstring."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._writer.executescript(SCHEMA)
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA synchronous=FULL")
        return db

    def _write(self, sql: str, params: tuple) -> None:
        with self._lock:
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                self._writer.execute(sql, params)
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")

    def open_session(self, session: str, model: str, settings: dict) -> None:
        """Record a session (again: its settings are updated)."""
        self._write("INSERT INTO sessions VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET settings = excluded.settings",
                    (session, time.time(), model, json.dumps(settings)))

    def add_caption(self, session: str, caption: Caption) -> None:
        self._write("INSERT OR REPLACE INTO captions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session, caption.caption, caption.segment, caption.text, caption.source, caption.start,
                     caption.end, caption.reason, time.time()))

    def session(self, session: str) -> dict | None:
        """The session's model and settings, or None if unknown."""
        with self._reader() as db:
            row = db.execute("SELECT model, settings, created FROM sessions WHERE id = ?", (session,)).fetchone()
        if row is None:
            return None
        return {"session": session, "model": row[0], "settings": json.loads(row[1]), "created": row[2]}

    def captions(self, session: str) -> list[Caption]:
        with self._reader() as db:
            rows = db.execute('SELECT caption, segment, text, source, start, "end", reason FROM captions '
                              "WHERE session = ? ORDER BY caption", (session,)).fetchall()
        return [Caption(*row) for row in rows]

    def _reader(self):
        return contextlib.closing(self._connect())

    def close(self) -> None:
        self._writer.close()
