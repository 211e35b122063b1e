"""The transcript store's contract, on both backends: SQLite (a file) and PostgreSQL (a real
server, ``mlx_ssbd/service/store/scratch_postgres.py``): sessions and captions, replicas and session states, resume
claims, schema migrations, durability across ``kill -9``, and the event bus between replicas."""

import subprocess
import sys
import threading
import time

from mlx_ssbd.service.store import SCHEMA_VERSION, Caption, NotResumable, open_store
from mlx_ssbd.service.store.base import MIGRATIONS

import psycopg
import pytest
from waiting import until


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path):
    """Where a fresh store lives; each backend's short staleness for replicas that stop."""
    if request.param == "sqlite":
        return str(tmp_path / "t.sqlite3")
    return request.getfixturevalue("postgres").new_database()


def opened(location, **kwargs):
    if not location.startswith("postgresql://"):
        kwargs.setdefault("heartbeat_s", 0.1)
        kwargs.setdefault("stale_s", 0.5)
    return open_store(location, **kwargs)


def caption(n, text=None, end=None):
    return Caption(
        n,
        f"s{n}",
        text or f"caption {n}",
        f"source {n}",
        float(n),
        end if end is not None else n + 0.5,
        "final",
    )


def test_sessions_and_captions(location):
    store = opened(location)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        store.open_session("a", "m", {"target": "de"})
        for n in range(3):
            store.add_caption("a", caption(n))
        store.add_caption("a", caption(1, "fixed"))  # the same number again replaces it
        assert [c.text for c in store.captions("a")] == ["caption 0", "fixed", "caption 2"]
        assert [c.caption for c in store.captions("a", after=0)] == [1, 2]
        info = store.session("a")
        assert (info.model, info.settings, info.state, info.captions, info.next_start) == (
            "m",
            {"target": "de"},
            "live",
            3,
            2.5,
        )
        assert info.replica == store.replica and store.session("nope") is None
        store.open_session("a", "m", {"target": "fr"})  # recorded again: new settings, same captions
        assert store.session("a").settings == {"target": "fr"} and store.session("a").captions == 3
        store.open_session("b", "m", {})
        assert [s.session for s in store.sessions()] == ["b", "a"]
        store.end_session("a", "idle")
        assert (store.session("a").state, store.session("a").reason) == ("ended", "idle")
        store.detach("b")
        assert store.session("b").state == "detached"
        store.forget("a")  # has captions: kept
        store.forget("b")
        assert store.session("a") is not None and store.session("b") is None
    finally:
        store.close()


def test_replicas_see_each_other_and_claim_only_what_no_live_replica_serves(location):
    one, two = opened(location), opened(location)
    try:
        one.open_session("s", "m", {"target": "de"}, "secret")
        one.add_caption("s", caption(0, end=4.0))
        assert two.session("s").state == "live"
        with pytest.raises(NotResumable) as refused:
            two.claim("s", "secret")
        assert refused.value.code == "session_live"
        with pytest.raises(NotResumable) as refused:
            one.claim("s", "secret", served_here=True)
        assert refused.value.code == "session_live"
        # its own replica, not serving it any more (client gone)
        assert one.claim("s", "secret").state == "live"
        for sid, token in (
            ("unknown", "secret"),
            ("s", "guess"),
            ("s", ""),
        ):  # unknown, or not its token: alike
            with pytest.raises(NotResumable) as refused:
                two.claim(sid, token)
            assert refused.value.code == "not_found" and "guess" not in str(refused.value)
        one.close()  # the replica is gone: its session is detached, and another replica takes it over
        until(lambda: two.session("s").state == "detached")
        claimed = two.claim("s", "secret")
        assert (claimed.replica, claimed.captions, claimed.next_start, claimed.settings) == (
            two.replica,
            1,
            4.0,
            {"target": "de"},
        )
        assert two.session("s").state == "live"
        two.end_session("s", "closed")
        with pytest.raises(NotResumable) as refused:
            two.claim("s", "secret")
        assert refused.value.code == "session_ended"  # an ended session is never reopened
        assert {s.session: s.state for s in two.sessions()} == {"s": "ended"}
    finally:
        one.close()
        two.close()


def test_a_claim_is_taken_by_one_replica_only(location):
    first = opened(location)
    first.open_session("s", "m", {}, "secret")
    first.detach("s")
    stores = [opened(location) for _ in range(4)]
    outcomes = []

    def claim(store):
        try:
            store.claim("s", "secret")
            outcomes.append("claimed")
        except NotResumable as refused:
            outcomes.append(refused.code)

    try:
        threads = [threading.Thread(target=claim, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["claimed"] + ["session_live"] * 3
    finally:
        for store in [first, *stores]:
            store.close()


V1 = MIGRATIONS[1]


def test_an_older_schema_is_migrated_and_a_newer_one_refused(location):
    """A store written before schema versions existed (version 1) opens: its sessions are ended
    (its replicas are long gone), its captions kept."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as db:
            for statement in V1:
                db.execute(statement)
            db.execute("INSERT INTO sessions VALUES ('old', 1.0, 'm', '{}')")
            db.execute("INSERT INTO captions VALUES ('old', 0, 's', 'hallo', 'hello', 0, 1, 'final', 2.0)")
    else:
        import sqlite3

        with sqlite3.connect(location) as db:
            for statement in V1:
                db.execute(statement)
            db.execute("INSERT INTO sessions VALUES ('old', 1.0, 'm', '{}')")
            db.execute("INSERT INTO captions VALUES ('old', 0, 's', 'hallo', 'hello', 0, 1, 'final', 2.0)")
    store = opened(location)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert (store.session("old").state, store.session("old").reason) == ("ended", "shutdown")
        assert [c.text for c in store.captions("old")] == ["hallo"]
        with store._write() as db:
            db.execute(store._sql("INSERT INTO schema_version VALUES (?)"), (SCHEMA_VERSION + 1,))
    finally:
        store.close()
    with pytest.raises(RuntimeError, match="upgrade mlx-ssbd"):
        opened(location)


WRITER = """
import sys
from mlx_ssbd.service.store import Caption, open_store
store = open_store(sys.argv[1])
store.open_session("k", "m", {})
for n in range(5):
    store.add_caption("k", Caption(n, None, f"c{n}", "s", 0.0, 1.0, "final"))
    print(n, flush=True)
sys.stdin.read()
"""


def test_a_commit_survives_kill_9_of_the_writer(location):
    """Each ``add_caption`` returns once its transaction is durable: a writer killed right after
    leaves every caption it reported written, and its session detached."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, location], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert [proc.stdout.readline().strip() for _ in range(5)] == [str(n) for n in range(5)]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    store = opened(location)
    try:
        assert [c.text for c in store.captions("k")] == [f"c{n}" for n in range(5)]
        until(lambda: store.session("k").state == "detached")  # PostgreSQL: at once; SQLite: once stale
    finally:
        store.close()


def test_events_reach_the_viewers_of_every_replica(location):
    if not location.startswith("postgresql://"):
        pytest.skip("a SQLite store is one replica's: its bus is in the process (test_local_bus)")
    one, two = opened(location), opened(location)
    got: list = []
    try:
        two.bus.subscribe("s", got.append)
        one.bus.subscribe("s", got.append)
        one.open_session("s", "m", {})
        one.bus.publish("s", {"type": "translation.update", "stable": "a"})
        big = "x" * 9000  # beyond NOTIFY's payload limit: sent as a reference, read back from the store
        one.add_caption("s", Caption(0, None, big, "src", 0.0, 1.0, "final"))
        one.bus.publish("s", {"type": "translation.commit", "caption": 0, "text": big})
        one.bus.publish("other", {"type": "translation.update"})  # nobody watches it
        until(lambda: len(got) == 4)
        assert got[0] == {"type": "translation.update", "stable": "a"}  # one's own viewer, at once
        assert {e["type"] for e in got} == {"translation.update", "translation.commit"}
        assert [e["text"] == big for e in got if e["type"] == "translation.commit"] == [True, True]
    finally:
        one.close()
        two.close()


def test_a_viewer_is_interrupted_when_the_listener_is_lost_and_served_again(location):
    if not location.startswith("postgresql://"):
        pytest.skip("PostgreSQL's listener")
    import psycopg

    one, two = opened(location), opened(location, reconnect_s=0.1)
    got: list = []
    try:
        two.bus.subscribe("s", got.append)
        with psycopg.connect(location, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (f"mlx-ssbd {two.replica}",),
            )
        until(lambda: None in got)
        deadline = time.monotonic() + 10
        while not any(isinstance(e, dict) for e in got) and time.monotonic() < deadline:
            one.bus.publish("s", {"type": "translation.update"})
            time.sleep(0.2)
        assert any(isinstance(e, dict) for e in got)  # the listener is back
    finally:
        one.close()
        two.close()


def test_the_bus_in_one_process():
    from mlx_ssbd.service.store.bus import LocalBus

    bus, got = LocalBus(), []
    bus.subscribe("a", got.append)
    bus.publish("a", {"n": 1})
    bus.publish("b", {"n": 2})
    bus.interrupted()
    bus.unsubscribe("a", got.append)
    bus.publish("a", {"n": 3})
    assert got == [{"n": 1}, None] and bus.watched() == set()


def test_the_database_crashing_loses_no_commit_and_the_store_reconnects(postgres):
    """PostgreSQL killed (``pg_ctl stop -m immediate``: no shutdown checkpoint) right after the
    writes returned: they are there after its crash recovery; a write while it is down fails fast
    (the journal keeps the caption); once it is back the same store writes again."""
    location = postgres.new_database()
    store = opened(location, connect_timeout_s=2, reconnect_s=0.2)
    try:
        store.open_session("c", "m", {})
        for n in range(3):
            store.add_caption("c", caption(n))
        postgres.stop("immediate")
        started = time.monotonic()
        with pytest.raises(psycopg.Error):  # a refused connection, or the pool's timeout
            store.add_caption("c", caption(3))
        assert time.monotonic() - started < 15
        postgres.start()
        until(lambda: _writes(store, caption(3)), timeout=30)
        assert [c.caption for c in store.captions("c")] == [0, 1, 2, 3]
        until(lambda: store.session("c").state == "live")  # the listener took its presence lock again
    finally:
        store.close()


def _writes(store, item) -> bool:
    try:
        store.add_caption("c", item)
        return True
    except Exception:
        return False


def test_serve_refuses_a_store_it_cannot_open_before_loading_a_model(tmp_path):
    """A wrong store fails at once, with exit 1 and a message (the password masked), no traceback."""
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    unreachable = CliRunner().invoke(
        cli,
        [
            "serve",
            "--model",
            "no-such-model",
            "--store",
            "postgresql://captions:hunter2@127.0.0.1:1/captions",
        ],
    )
    assert unreachable.exit_code == 1 and "cannot open the transcript store" in unreachable.output
    assert "hunter2" not in unreachable.output and "captions:***@" in unreachable.output
    assert "Traceback" not in unreachable.output
    (tmp_path / "dir").mkdir()
    directory = CliRunner().invoke(
        cli, ["serve", "--model", "no-such-model", "--store", str(tmp_path / "dir")]
    )
    assert directory.exit_code == 1 and "cannot open the transcript store" in directory.output
