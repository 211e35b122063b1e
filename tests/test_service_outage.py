"""The transcript store gone for a while: the journal's bound, ``/health``'s ``store`` detail, and
a real PostgreSQL stopped mid-talk under two replicas that comes back at another address (libpq's
multi-host URL): every commit exactly once in the transcript and on a viewer of the other replica."""

import asyncio
import json
import socket

from mlx_ssbd.service.journal import Journal
from mlx_ssbd.service.store.scratch_postgres import MISSING as POSTGRES_MISSING
from mlx_ssbd.service.store.scratch_postgres import postgres_server

import httpx
import pytest
from serving import server
from test_service_replicas import Viewer, commit, expect, opened
from test_store import caption
from waiting import until


class FlakyStore:
    def __init__(self):
        self.rows, self.down = [], False

    def add_caption(self, session, item):
        if self.down:
            raise OSError("the database is gone")
        self.rows.append((session, item.caption))


def test_the_journal_holds_what_fails_up_to_its_bound_and_says_so():
    store, now = FlakyStore(), [100.0]
    journal = Journal(store, retry_s=1.0, max_waiting=3, clock=lambda: now[0])
    assert journal.write("a", caption(0)) and journal.health() == {
        "state": "ok", "failing_for_s": None, "waiting": 0, "not_kept": 0
    }  # fmt: skip
    store.down = True
    for n in range(1, 5):
        now[0] += 1.0
        assert not journal.write("a", caption(n))
    assert [journal.kept, journal.not_kept, journal.waiting] == [False, 1, 3]
    assert journal.health() == {"state": "failing", "failing_for_s": 3.0, "waiting": 3, "not_kept": 1}
    store.down = False
    now[0] += 1.0
    assert journal.write("a", caption(5)) and journal.kept
    assert store.rows == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 5)]
    assert journal.health()["state"] == "ok" and [c.caption for _, c in journal.recovered()] == [1, 2, 3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(POSTGRES_MISSING is not None, reason=str(POSTGRES_MISSING))
def test_the_database_gone_mid_talk_and_back_at_another_address_costs_no_caption(model_dir, tmp_path):
    with postgres_server() as pg:
        first_port, second_port = pg.port, free_port()
        database = pg.new_database().rsplit("/", 1)[1]
        # libpq's multi-host URL: the database now, and where it will come back
        store = (
            f"postgresql://mlx@127.0.0.1:{first_port},127.0.0.1:{second_port}/{database}?connect_timeout=2"
        )
        with (
            server(model_dir, store, "--pause", "0", log=tmp_path / "a.log") as (url_a, _),
            server(model_dir, store, "--pause", "0", log=tmp_path / "b.log") as (url_b, _),
        ):

            async def talk():
                ws, sid = await opened(url_a)
                viewer = Viewer(f"{url_b}/v1/sessions/{sid}/events", reconnect=True)  # on the other replica
                sent = [await commit(ws, f"sentence {n} is here.", f"s{n}") for n in range(2)]
                await viewer.until(lambda v: len(v.commits()) == 2)
                pg.stop("immediate")
                try:
                    for n in range(2, 5):  # committed while the database is gone
                        await ws.send(json.dumps({"type": "source.update", "text": f"sentence {n} is here.",
                                                  "final": True, "segment": f"s{n}"}))  # fmt: skip
                        while (event := json.loads(await asyncio.wait_for(ws.recv(), 60)))["type"] != (
                            "translation.commit"
                        ):
                            assert event["type"] in ("error", "translation.update"), event
                        assert event["stored"] is False
                        sent.append(event)
                    health = httpx.get(f"{url_a}/health", timeout=10)
                finally:
                    pg.port = second_port  # it comes back elsewhere
                    pg.start()
                stored = await expect(ws, "transcript.stored", 60)
                sent += [await commit(ws, f"sentence {n} is here.", f"s{n}") for n in range(5, 7)]
                await ws.send(json.dumps({"type": "session.close"}))
                await expect(ws, "session.closed")
                await ws.close()
                await viewer.until(lambda v: v.done.is_set())
                return sid, sent, health, stored, viewer

            sid, sent, health, stored, viewer = asyncio.run(talk())
            assert health.status_code == 200 and health.json()["store"]["state"] == "failing"
            assert health.json()["store"]["waiting"] == 3 and stored["captions"] == [2, 3, 4]
            until(lambda: httpx.get(f"{url_a}/health").json()["store"]["state"] == "ok")
            texts = [(c["caption"], c["text"]) for c in sent]
            assert [(n, t) for _, n, t in viewer.commits()] == texts  # each once, in order, no gap
            doc = httpx.get(f"{url_b}/v1/sessions/{sid}/transcript.json").json()
            assert [(c["caption"], c["text"]) for c in doc["captions"]] == texts


class GappedStore:
    """A store whose captions 0..n-1 are ``rows`` (the ones ``ready`` says are written)."""

    def __init__(self, rows):
        self.rows, self.ready = rows, len(rows)

    def captions(self, sid, after, target):
        return [c for c in self.rows[: self.ready] if c.caption > after]

    def session(self, sid):
        return None


def test_a_viewer_fills_a_gap_from_the_store_before_a_later_commit(monkeypatch):
    """Commits of another replica whose events were lost while the store was gone: a viewer that
    gets a later commit first is given the missing ones from the store, in order, waited for while
    that replica's journal writes them; what never comes is waited for a bounded time only."""
    from types import SimpleNamespace

    from mlx_ssbd.service import events, viewers
    from mlx_ssbd.service.options import ServiceOptions
    from mlx_ssbd.service.store.bus import LocalBus

    monkeypatch.setattr(viewers, "GAP_POLL_S", 0.01)
    rows = [caption(n) for n in range(6)]
    store = GappedStore(rows)
    store.ready = 2  # 0 and 1 written; 2-4 still in the other replica's journal
    scheduler = SimpleNamespace(bus=LocalBus(), store=store, find=lambda sid: object())

    async def read(live: list[int], *, writes_at: int | None) -> list[int]:
        stream = viewers._viewer_events(scheduler, "s", ServiceOptions(), rows[0].target, -1)
        seen, lines = [], 0
        async for line in stream:
            lines += 1
            if '"translation.commit"' in line:
                seen.append(json.loads(line.split("data: ", 1)[1])["caption"])
            if lines == 3:  # the replay is done: the live commits come
                for n in live:
                    scheduler.bus.publish("s", events.stored_commit_event(rows[n]))
                if writes_at is not None:
                    asyncio.get_running_loop().call_later(0.05, setattr, store, "ready", writes_at)
            if seen and seen[-1] == live[-1]:
                await stream.aclose()
                return seen
        return seen

    assert asyncio.run(read([5], writes_at=6)) == [0, 1, 2, 3, 4, 5]
    store.ready = 2
    monkeypatch.setattr(viewers, "GAP_WAIT_S", 0.2)
    assert asyncio.run(read([5], writes_at=None)) == [0, 1, 5]  # never written: not waited for forever
