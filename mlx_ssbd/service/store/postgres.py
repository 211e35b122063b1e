"""The shared transcript store for replicas: PostgreSQL through psycopg 3, and its event bus.

Contract: ``PostgresStore(url)`` connects (a pool of ``pool_size`` connections, ``synchronous_commit
= on``, every statement bounded by ``statement_timeout_s``; a database that cannot be reached
within ``connect_timeout_s`` raises at once), migrates the schema under an advisory lock (one
replica at a time) and registers this replica; the rest is ``base.TranscriptStore``'s. Once the
database failed, a call waits at most ``FAILING_WAIT_S`` for a connection until one succeeds
again, so the model's thread, which writes the commits, is never held long by a database that
is down.

Presence: a replica is alive while its *listener* connection holds the advisory lock
``(LOCK_CLASS, key(replica))``; PostgreSQL releases it the moment that connection ends (the
process was killed, its host went away), so another replica sees the sessions detached at once,
with no heartbeat to wait for.

``store.bus`` is a ``PostgresBus``: ``publish`` delivers to this process's viewers at once and
sends the event to the other replicas with ``NOTIFY`` on ``CHANNEL`` (from a sender thread, so
the model's thread never waits on the network); the listener thread delivers the other replicas'
events to this one's viewers. A payload over ``MAX_PAYLOAD`` bytes (PostgreSQL's limit is 8000)
goes as a reference: a commit is read back from the store; an update that large is not sent (the
commit that follows is). When the listener loses its connection, subscribers are interrupted
(``bus``) and the listener reconnects every ``reconnect_s``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import threading
import uuid

from .base import TranscriptStore
from .bus import LocalBus

log = logging.getLogger(__name__)
CHANNEL = "mlx_ssbd_events"
LOCK_CLASS = 21949  # the first key of every advisory lock this package takes
MAX_PAYLOAD = 7900
MAX_QUEUED = 10_000  # events waiting to be sent to the other replicas
FAILING_WAIT_S = 0.25  # the longest wait for a connection while the database is failing


def key(replica: str) -> int:
    """The second advisory-lock key of ``replica`` (a positive 31-bit integer)."""
    return int.from_bytes(hashlib.sha256(replica.encode()).digest()[:4], "big") & 0x7FFFFFFF


def _database_error(error: Exception) -> bool:
    """The database (not the statement) failed: it is unreachable or went away."""
    psycopg, psycopg_pool = _driver()
    return isinstance(error, (psycopg.OperationalError, psycopg_pool.PoolTimeout))


def _driver():
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise RuntimeError("a PostgreSQL store needs psycopg 3: pip install 'mlx-ssbd[postgres]'") from None
    return psycopg, psycopg_pool


class PostgresStore(TranscriptStore):
    """See the module docstring."""

    NOW = "extract(epoch from clock_timestamp())"
    PARAM = "%s"
    FOR_UPDATE = " FOR UPDATE"

    def __init__(
        self,
        url: str,
        *,
        replica: str | None = None,
        pool_size: int = 4,
        connect_timeout_s: int = 5,
        statement_timeout_s: float = 10.0,
        reconnect_s: float = 1.0,
    ):
        super().__init__(replica or f"replica_{uuid.uuid4().hex[:12]}")
        psycopg, psycopg_pool = _driver()
        self._failing = False
        self.url = url
        self._connect_args = {
            "connect_timeout": connect_timeout_s,
            "options": f"-c synchronous_commit=on -c statement_timeout={int(statement_timeout_s * 1000)}",
        }
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=connect_timeout_s,
            kwargs=self._connect_args,
            open=False,
            name="mlx-ssbd",
        )
        self._pool.open(wait=True, timeout=connect_timeout_s)
        try:
            with self._write() as db:
                self._migrate(db, lock=f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0)")
            self.register()
            self.bus = PostgresBus(self, reconnect_s=reconnect_s)
        except BaseException:
            self._pool.close()
            raise

    def connect(self, **kwargs):
        """A connection outside the pool (the bus's listener)."""
        psycopg, _ = _driver()
        return psycopg.connect(self.url, **self._connect_args, **kwargs)

    @contextlib.contextmanager
    def _write(self):
        # While the database is failing, wait FAILING_WAIT_S at most for a connection (the pool
        # reconnects in the background), so a caller (the model's thread) is not held for long.
        wait = FAILING_WAIT_S if self._failing else self._pool.timeout
        try:
            with self._pool.connection(timeout=wait) as db:  # commits at the end, rolls back on an exception
                yield db
        except Exception as error:
            self._failing = _database_error(error)
            raise
        self._failing = False

    _read = _write

    def alive(self, db) -> set[str]:
        locked = {
            row[0]
            for row in db.execute(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND "
                "classid = %s::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (LOCK_CLASS,),
            ).fetchall()
        }
        return {row[0] for row in db.execute("SELECT id FROM replicas").fetchall() if key(row[0]) in locked}

    def close(self) -> None:
        super().close()
        self.bus.close()
        self._pool.close()


class PostgresBus(LocalBus):
    """See the module docstring."""

    def __init__(self, store: PostgresStore, *, reconnect_s: float = 1.0):
        super().__init__()
        self.store = store
        self.reconnect_s = reconnect_s
        self._outgoing: queue.Queue = queue.Queue(MAX_QUEUED)
        self._stop = threading.Event()
        self._listener = self._listen()  # the first connection fails here, where the caller hears of it
        self._threads = [
            threading.Thread(target=target, name=name, daemon=True)
            for target, name in ((self._receive, "mlx-ssbd-listen"), (self._send, "mlx-ssbd-notify"))
        ]
        for thread in self._threads:
            thread.start()

    def publish(self, sid: str, event: dict) -> None:
        self.deliver(sid, event)
        try:
            self._outgoing.put_nowait((sid, event))
        except queue.Full:
            log.error(
                "%d events wait to be sent to the other replicas; one of %s is dropped", MAX_QUEUED, sid
            )

    def close(self) -> None:
        self._stop.set()
        self._outgoing.put(None)
        for thread in self._threads:
            thread.join(timeout=3)
        with contextlib.suppress(Exception):
            self._listener.close()

    def _listen(self):
        """A connection that holds this replica's presence lock and listens on ``CHANNEL``."""
        db = self.store.connect(autocommit=True, application_name=f"mlx-ssbd {self.store.replica}"[:63])
        db.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, key(self.store.replica)))
        db.execute(f"LISTEN {CHANNEL}")
        return db

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                for note in self._listener.notifies(timeout=1.0):
                    self._deliver_payload(note.payload)
            except Exception as error:
                if self._stop.is_set():
                    return
                log.error("lost the PostgreSQL listener (%s); viewers are told to reconnect", error)
                self.interrupted()
                with contextlib.suppress(Exception):
                    self._listener.close()
                while not self._stop.wait(self.reconnect_s):
                    try:
                        self._listener = self._listen()
                        log.warning("the PostgreSQL listener is back")
                        break
                    except Exception:
                        continue

    def _deliver_payload(self, payload: str) -> None:
        from .. import events

        note = json.loads(payload)
        if note["r"] == self.store.replica:
            return  # delivered here when it was published
        sid = note["s"]
        if "e" in note:
            self.deliver(sid, note["e"])
        elif sid in self.watched():  # a reference to a commit too large to notify
            for caption in self.store.captions(sid, after=note["c"] - 1, target=note["t"])[:1]:
                self.deliver(sid, events.stored_commit_event(caption))

    def _send(self) -> None:
        while True:
            items = [self._outgoing.get()]
            while not self._outgoing.empty() and len(items) < 256:
                items.append(self._outgoing.get_nowait())
            if None in items:
                return
            try:
                with self.store._write() as db:
                    for sid, event in items:
                        if (payload := self._payload(sid, event)) is not None:
                            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            except Exception as error:
                log.error("%d event(s) could not be sent to the other replicas: %s", len(items), error)

    def _payload(self, sid: str, event: dict) -> str | None:
        payload = json.dumps({"r": self.store.replica, "s": sid, "e": event}, ensure_ascii=False)
        if len(payload.encode()) <= MAX_PAYLOAD:
            return payload
        if event.get("type") == "translation.commit":
            return json.dumps(
                {"r": self.store.replica, "s": sid, "c": event["caption"], "t": event.get("target") or ""}
            )
        return None
