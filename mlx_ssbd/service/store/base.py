"""The transcript store's contract and its SQL, shared by the SQLite and PostgreSQL backends.

Contract: a ``TranscriptStore`` keeps every session (its model, settings, the replica serving
it, whether it ended) and every committed caption. Each write returns only once its transaction
is committed and durable (SQLite: WAL with ``synchronous=FULL``; PostgreSQL: ``synchronous_commit
= on``), so a caption the server sends as committed survives ``kill -9`` of the server. Every
method may be called from any thread; a failing database raises the driver's exception (the
caller decides what it costs: see ``journal``).

A store is opened by one *replica* (a ``serve`` process; ``replica`` is its id) and knows which
replicas are alive (``alive``, per backend). A session is

* ``live`` while it has not ended and its replica is alive,
* ``ended`` once it was closed (by its client, for idleness, or a failure: ``reason``),
* ``detached`` when it has not ended but no live replica serves it: its replica died or drained
  (SIGTERM), or its client went away. A detached session can be resumed (``claim``) by any
  replica, given its resume token; an ended one never goes on.

A session's resume token is a secret its client got when the session was opened; the store keeps
only its SHA-256 (``open_session``), and ``claim`` refuses a session whose token does not match as
it refuses one that does not exist, so a session id (public in every viewer link) resumes nothing.

The schema has a version (table ``schema_version``); ``MIGRATIONS`` bring any older database
(including one written before versions existed) to ``SCHEMA_VERSION`` when a store opens it, one
replica at a time. A database newer than this code is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
import threading
from dataclasses import asdict, dataclass

SCHEMA_VERSION = 3


def _targets_from_settings(db, store: TranscriptStore) -> None:
    """Older captions get their session's (one) target language."""
    for sid, settings in db.execute("SELECT id, settings FROM sessions").fetchall():
        stored = json.loads(settings)
        target = stored.get("target") or (stored.get("targets") or [""])[0]
        db.execute(store._sql("UPDATE captions SET target = ? WHERE session = ?"), (target, sid))


MIGRATIONS = {
    1: [  # sessions and their committed captions
        "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL, "
        "model TEXT NOT NULL, settings TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS captions (session TEXT NOT NULL REFERENCES sessions(id), caption INTEGER NOT NULL, "
        "segment TEXT, text TEXT NOT NULL, source TEXT NOT NULL, start DOUBLE PRECISION NOT NULL, "
        '"end" DOUBLE PRECISION NOT NULL, reason TEXT NOT NULL, committed DOUBLE PRECISION NOT NULL, '
        "PRIMARY KEY (session, caption))",
    ],
    2: [  # which replica serves a session, whether it ended; the replicas; a caption per target language
        "ALTER TABLE sessions ADD COLUMN replica TEXT",
        "ALTER TABLE sessions ADD COLUMN ended DOUBLE PRECISION",
        "ALTER TABLE sessions ADD COLUMN reason TEXT",
        "UPDATE sessions SET ended = created, reason = 'shutdown'",  # older stores knew no replicas
        "CREATE TABLE replicas (id TEXT PRIMARY KEY, started DOUBLE PRECISION NOT NULL, "
        "seen DOUBLE PRECISION NOT NULL, "
        "host TEXT NOT NULL, pid INTEGER NOT NULL)",
        "CREATE TABLE captions_v2 (session TEXT NOT NULL REFERENCES sessions(id), target TEXT NOT NULL, "
        "caption INTEGER NOT NULL, segment TEXT, text TEXT NOT NULL, source TEXT NOT NULL, "
        'start DOUBLE PRECISION NOT NULL, "end" DOUBLE PRECISION NOT NULL, reason TEXT NOT NULL, '
        "committed DOUBLE PRECISION NOT NULL, PRIMARY KEY (session, target, caption))",
        "INSERT INTO captions_v2 SELECT session, '', caption, segment, text, source, start, \"end\", reason, committed "
        "FROM captions",
        "DROP TABLE captions",
        "ALTER TABLE captions_v2 RENAME TO captions",
        _targets_from_settings,
    ],
    3: [  # the SHA-256 of each session's resume token (older sessions have none: they cannot be resumed)
        "ALTER TABLE sessions ADD COLUMN resume_hash TEXT",
    ],
}
_COUNT = "(SELECT COUNT(DISTINCT caption) FROM captions c WHERE c.session = sessions.id)"
_SESSION = (
    "SELECT id, created, model, settings, replica, ended, reason, " + _COUNT + ", "
    '(SELECT COALESCE(MAX(c."end"), 0) FROM captions c WHERE c.session = sessions.id) FROM sessions '
)


class NotResumable(Exception):
    """``claim`` refused: ``code`` is ``not_found`` (no such session, or not with this resume
    token), ``session_ended`` (it ended: never reopened) or ``session_live`` (a live replica
    serves it)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Caption:
    caption: int
    segment: str | None
    text: str
    source: str
    start: float
    end: float
    reason: str
    target: str = ""  # its language (a session may have several)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SessionInfo:
    session: str
    created: float
    model: str
    settings: dict
    replica: str | None
    ended: float | None
    reason: str | None  # why it ended (None while not ended)
    state: str  # live, ended or detached (module docstring)
    captions: int  # committed captions (in any of its languages): the next one has this number
    next_start: float  # where a resumed session's clock goes on: the end of its last caption (or 0)

    def to_dict(self) -> dict:
        return asdict(self)


class TranscriptStore:
    """See the module docstring. Backends provide ``_write``/``_read`` (a transaction),
    ``alive`` and ``NOW`` (the database's clock, in seconds since the epoch, as SQL)."""

    NOW = ""
    PARAM = "?"
    FOR_UPDATE = ""  # what locks the row read in a write transaction (PostgreSQL: FOR UPDATE)

    def __init__(self, replica: str):
        self.replica = replica
        self._closed = threading.Event()

    # -- backends -------------------------------------------------------------------------------

    def _write(self) -> contextlib.AbstractContextManager:
        """A write transaction: yields an object with ``execute(sql, params)``; commits at the end."""
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def alive(self, db) -> set[str]:
        """The ids of the replicas alive now (``db``: an open transaction)."""
        raise NotImplementedError

    def close(self) -> None:
        self._closed.set()

    # -- shared ---------------------------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        return sql.replace("{now}", self.NOW).replace("?", self.PARAM)

    def _migrate(self, db, lock: str | None = None) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` (``db``: a write transaction; ``lock``: SQL that
        keeps other replicas out until it commits)."""
        if lock:
            db.execute(lock)
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        version = row[0] or 0
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"the transcript store has schema version {version}; this mlx-ssbd knows versions up "
                f"to {SCHEMA_VERSION}: upgrade mlx-ssbd"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[target]:
                statement(db, self) if callable(statement) else db.execute(statement)
        if version < SCHEMA_VERSION:
            db.execute("DELETE FROM schema_version")
            db.execute(self._sql("INSERT INTO schema_version VALUES (?)"), (SCHEMA_VERSION,))

    def schema_version(self) -> int:
        with self._read() as db:
            return db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    def register(self) -> None:
        """Record this replica (its host and process, and that it is alive now)."""
        with self._write() as db:
            db.execute(
                self._sql(
                    "INSERT INTO replicas VALUES (?, {now}, {now}, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                    "seen = excluded.seen"
                ),
                (self.replica, socket.gethostname(), os.getpid()),
            )

    def heartbeat(self) -> None:
        with self._write() as db:
            db.execute(self._sql("UPDATE replicas SET seen = {now} WHERE id = ?"), (self.replica,))

    def open_session(self, session: str, model: str, settings: dict, resume_token: str | None = None) -> None:
        """Record a session served by this replica, resumable with ``resume_token`` (again: its
        settings are updated, its token kept)."""
        with self._write() as db:
            db.execute(
                self._sql(
                    "INSERT INTO sessions (id, created, model, settings, replica, resume_hash) VALUES "
                    "(?, {now}, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET settings = excluded.settings"
                ),
                (
                    session,
                    model,
                    json.dumps(settings),
                    self.replica,
                    None if resume_token is None else _token_hash(resume_token),
                ),
            )

    def add_caption(self, session: str, caption: Caption) -> None:
        with self._write() as db:
            db.execute(
                self._sql(
                    'INSERT INTO captions (session, target, caption, segment, text, source, start, "end", '
                    "reason, committed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {now}) ON CONFLICT (session, "
                    "target, caption) DO UPDATE SET segment = excluded.segment, text = excluded.text, "
                    'source = excluded.source, start = excluded.start, "end" = excluded."end", '
                    "reason = excluded.reason, committed = excluded.committed"
                ),
                (
                    session,
                    caption.target,
                    caption.caption,
                    caption.segment,
                    caption.text,
                    caption.source,
                    caption.start,
                    caption.end,
                    caption.reason,
                ),
            )

    def end_session(self, session: str, reason: str) -> None:
        """The session ended (its client closed it, it idled, it failed)."""
        with self._write() as db:
            db.execute(
                self._sql("UPDATE sessions SET ended = {now}, reason = ? WHERE id = ?"), (reason, session)
            )

    def detach(self, session: str) -> None:
        """No replica serves the session now (the drain, or its client went away); it may be resumed."""
        with self._write() as db:
            db.execute(
                self._sql("UPDATE sessions SET replica = NULL WHERE id = ? AND replica = ?"),
                (session, self.replica),
            )

    def forget(self, session: str) -> None:
        """Delete a session that has no caption (one replaced by a resumed session)."""
        with self._write() as db:
            db.execute(self._sql(f"DELETE FROM sessions WHERE id = ? AND {_COUNT} = 0"), (session,))

    def claim(self, session: str, resume_token: str, *, served_here: bool = False) -> SessionInfo:
        """Serve ``session`` from this replica from now on (a resume). Refused (``NotResumable``)
        for an unknown session or another token (alike: the answer tells nothing of which), an
        ended one, or one that a live replica serves (this one included, when ``served_here``)."""
        with self._write() as db:
            info = self._info(db, session, lock=True)
            stored = db.execute(
                self._sql("SELECT resume_hash FROM sessions WHERE id = ?"), (session,)
            ).fetchone()
            if info is None or not stored[0] or not hmac.compare_digest(stored[0], _token_hash(resume_token)):
                raise NotResumable("not_found", f"no session {session[:80]!r} with this resume token")
            if info.state == "ended":
                raise NotResumable(
                    "session_ended",
                    f"session {session[:80]!r} has ended; an ended session is "
                    "never reopened (start a new one)",
                )
            if info.state == "live" and (info.replica != self.replica or served_here):
                raise NotResumable(
                    "session_live",
                    f"session {session[:80]!r} is live on "
                    f"{'this' if info.replica == self.replica else 'another'} replica; it cannot be "
                    "resumed twice",
                )
            db.execute(self._sql("UPDATE sessions SET replica = ? WHERE id = ?"), (self.replica, session))
        return SessionInfo(**{**info.to_dict(), "replica": self.replica, "state": "live"})

    def session(self, session: str) -> SessionInfo | None:
        with self._read() as db:
            return self._info(db, session)

    def sessions(self, limit: int = 100) -> list[SessionInfo]:
        """The newest sessions of every replica, newest first."""
        with self._read() as db:
            alive = self.alive(db)
            rows = db.execute(self._sql(_SESSION + "ORDER BY created DESC LIMIT ?"), (limit,)).fetchall()
        return [self._row_info(row, alive) for row in rows]

    def captions(self, session: str, after: int = -1, target: str | None = None) -> list[Caption]:
        """The session's committed captions numbered above ``after``, in order (by number, then
        language), in every language or in ``target``'s."""
        where, params = "WHERE session = ? AND caption > ?", (session, after)
        if target is not None:
            where, params = where + " AND target = ?", (*params, target)
        with self._read() as db:
            rows = db.execute(
                self._sql(
                    'SELECT caption, segment, text, source, start, "end", reason, target FROM '
                    f"captions {where} ORDER BY caption, target"
                ),
                params,
            ).fetchall()
        return [Caption(*row) for row in rows]

    def _info(self, db, session: str, *, lock: bool = False) -> SessionInfo | None:
        row = db.execute(
            self._sql(_SESSION + "WHERE id = ?" + (self.FOR_UPDATE if lock else "")), (session,)
        ).fetchone()
        return None if row is None else self._row_info(row, self.alive(db))

    @staticmethod
    def _row_info(row, alive: set[str]) -> SessionInfo:
        sid, created, model, settings, replica, ended, reason, count, next_start = row
        state = "ended" if ended is not None else "live" if replica in alive else "detached"
        return SessionInfo(
            sid, created, model, json.loads(settings), replica, ended, reason, state, count, float(next_start)
        )


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
