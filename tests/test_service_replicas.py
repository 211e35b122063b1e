"""Sessions beyond one connection and one replica: viewers that reconnect get what they missed
(``Last-Event-ID``), a client resumes its session after its connection or its replica was lost,
and replicas sharing a PostgreSQL store serve every session's viewers and transcripts."""

import asyncio
import contextlib
import json
import threading
import time

from mlx_ssbd.service.store.scratch_postgres import MISSING as POSTGRES_MISSING

import httpx
import pytest
import websockets
from serving import server, source, ws_url
from waiting import until, until_async


class Viewer:
    """An SSE reader on a background thread: ``events`` holds ``(id, event)`` as they come. With
    ``reconnect``, it does what a browser's ``EventSource`` does: a stream that ends before
    ``session.closed`` is opened again after ``retry:`` ms, with ``Last-Event-ID``."""

    def __init__(self, url: str, last_event_id: int | None = None, *, reconnect: bool = False):
        self.events: list[tuple[str | None, dict]] = []
        self.retry, self.keepalives, self.connections, self.done = None, 0, 0, threading.Event()
        self.last_id = None if last_event_id is None else str(last_event_id)
        self._client = httpx.Client(timeout=httpx.Timeout(5, read=60))
        self._closing = False
        self._thread = threading.Thread(target=self._run, args=(url, reconnect), daemon=True)
        self._thread.start()

    def _run(self, url, reconnect):
        while not self._closing:
            if self._read(url) or not reconnect:
                break
            time.sleep((self.retry or 1000) / 1000)
        self.done.set()

    def _read(self, url) -> bool:
        """One connection; True once the session ended."""
        event_id, headers = None, {} if self.last_id is None else {"Last-Event-ID": self.last_id}
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            with self._client.stream("GET", url, headers=headers) as response:
                if response.status_code != 200:
                    return False
                self.connections += 1
                for line in response.iter_lines():
                    if line.startswith("retry: "):
                        self.retry = int(line[7:])
                    elif line.startswith(":"):
                        self.keepalives += 1
                    elif line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        self.events.append((event_id, json.loads(line[6:])))
                        self.last_id, event_id = event_id or self.last_id, None
                        if self.events[-1][1]["type"] == "session.closed":
                            return True
                        if self.events[-1][1]["type"] == "error":
                            return False
        return False

    def commits(self) -> list[tuple[str | None, int, str]]:
        return [(i, e["caption"], e["text"]) for i, e in self.events if e["type"] == "translation.commit"]

    def wait_for(self, condition, timeout: float = 60) -> None:
        until(lambda: condition(self), timeout, "the viewer's events", detail=lambda: self.events)

    async def until(self, condition, timeout: float = 60) -> None:
        """``wait_for`` inside a coroutine: the event loop goes on (its WebSockets answer pings)."""
        await until_async(lambda: condition(self), timeout, "the viewer's events", detail=lambda: self.events)

    def close(self) -> None:
        self._closing = True
        self._client.close()
        self._thread.join(timeout=10)


async def expect(ws, kind: str, timeout: float = 60) -> dict:
    """The next event of type ``kind`` (others skipped; an unexpected error fails)."""
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if event["type"] == kind:
            return event
        assert event["type"] != "error" or kind == "error", event


async def commit(ws, text: str, segment: str) -> dict:
    await ws.send(json.dumps(source(text, final=True, segment=segment)))
    return await expect(ws, "translation.commit")


RESUME_TOKENS: dict[str, str] = {}  # each session's resume token, as its client keeps it


async def opened(url: str, **settings):
    ws = await websockets.connect(ws_url(url))
    created = await expect(ws, "session.created")
    RESUME_TOKENS[created["session"]] = created["resume_token"]
    await ws.send(json.dumps({"type": "session.update", "method": "rt", **settings}))
    await expect(ws, "session.updated")
    return ws, created["session"]


async def resumed(url: str, sid: str, timeout: float = 60):
    """A new connection (through ``url``) that resumed ``sid`` with its client's token: retried
    while the session is still seen live (its replica's loss not yet noticed) or no replica
    answers; ``(ws, session.resumed, the id of the session the connection was opened as)``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, websockets.WebSocketException, asyncio.TimeoutError):
            ws = await websockets.connect(ws_url(url), open_timeout=5)
            placeholder = (await expect(ws, "session.created", 10))["session"]
            await ws.send(
                json.dumps({"type": "session.resume", "session": sid, "resume_token": RESUME_TOKENS[sid]})
            )
            event = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if event["type"] == "session.resumed":
                return ws, event, placeholder
            assert event.get("code") == "session_live", event
            await ws.close()
        assert time.monotonic() < deadline, f"{sid} could not be resumed"
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def url(model_dir, tmp_path_factory):
    with server(model_dir, tmp_path_factory.mktemp("store") / "t.sqlite3") as (base, _):
        yield base


def test_a_viewer_that_reconnects_gets_exactly_the_commits_it_missed(url):
    async def scenario():
        ws, sid = await opened(url)
        events = f"{url}/v1/sessions/{sid}/events"
        first = Viewer(events)
        await commit(ws, "so today we talk.", "a")
        await first.until(lambda v: len(v.commits()) == 1)
        first.close()  # the viewer's connection drops
        missed = [await commit(ws, text, f"m{i}") for i, text in enumerate(["about the rules.", "and why."])]
        again = Viewer(events, last_event_id=int(first.commits()[-1][0]))
        await commit(ws, "then we vote.", "b")
        await again.until(lambda v: len(v.commits()) == 3)
        await ws.send(json.dumps({"type": "session.close"}))
        await expect(ws, "session.closed")
        await again.until(lambda v: v.done.is_set())
        await ws.close()
        return sid, first, missed, again

    sid, first, missed, again = asyncio.run(scenario())
    assert first.retry == 1000 and first.commits()[0][:2] == ("0", 0)
    assert [(c[0], c[1]) for c in again.commits()] == [("1", 1), ("2", 2), ("3", 3)]  # no repeat, no gap
    assert [c[2] for c in again.commits()[:2]] == [m["text"] for m in missed]
    assert again.events[-1][1] == {"type": "session.closed", "session": sid, "reason": "closed"}
    ended = Viewer(f"{url}/v1/sessions/{sid}/events", last_event_id=2)
    ended.wait_for(lambda v: v.done.is_set())
    assert [c[1] for c in ended.commits()] == [3] and ended.events[-1][1]["type"] == "session.closed"


def test_a_client_resumes_its_session_after_its_connection_drops(url):
    async def scenario():
        ws, sid = await opened(url, target="fr")
        before = [await commit(ws, "so today we talk.", "a"), await commit(ws, "about the rules.", "b")]
        viewer = Viewer(f"{url}/v1/sessions/{sid}/events")
        await viewer.until(lambda v: len(v.commits()) == 2)
        # another connection may not take a session that is live
        other, _ = await opened(url)
        token = RESUME_TOKENS[sid]
        await other.send(json.dumps({"type": "session.resume", "session": sid, "resume_token": token}))
        refused = await expect(other, "error")
        await other.send(
            json.dumps({"type": "session.resume", "session": "sess_nope", "resume_token": token})
        )
        unknown = await expect(other, "error")
        await other.send(json.dumps({"type": "session.resume", "session": sid}))  # the id alone
        no_token = await expect(other, "error")
        await other.close()
        ws.transport.abort()  # the connection drops, no close frame: the server discards the session
        # whoever knows the id (every viewer does) but not the token gets nothing
        thief, _ = await opened(url)
        for _ in range(20):  # over the time the server takes to notice the drop
            await thief.send(
                json.dumps({"type": "session.resume", "session": sid, "resume_token": token[::-1]})
            )
            stolen = await expect(thief, "error")
            assert stolen["code"] == "not_found", stolen
            await asyncio.sleep(0.1)
        await thief.close()
        # until the server has noticed the drop, the session is live and a resume is refused
        again, event, placeholder = await resumed(url, sid)
        after = await commit(again, "and why we vote.", "c")
        await again.send(json.dumps({"type": "session.close"}))
        await expect(again, "session.closed")
        await again.close()
        await viewer.until(lambda v: v.done.is_set())
        closed = await websockets.connect(ws_url(url))  # an ended session is never reopened
        await expect(closed, "session.created")
        await closed.send(json.dumps({"type": "session.resume", "session": sid, "resume_token": token}))
        ended = await expect(closed, "error")
        await closed.close()
        return sid, before, (refused, unknown, no_token, ended), event, after, viewer, placeholder

    sid, before, (refused, unknown, no_token, ended), took, after, viewer, placeholder = asyncio.run(
        scenario()
    )
    assert (
        refused["code"] == "session_live"
        and unknown["code"] == "not_found"
        and ended["code"] == "session_ended"
    )
    assert no_token["code"] == "invalid_message" and "resume_token" in no_token["message"]
    assert (took["session"], took["captions"], took["target"], took["method"]) == (sid, 2, "fr", "rt")
    assert after["caption"] == 2  # numbering goes on
    transcript = httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()
    assert [c["caption"] for c in transcript["captions"]] == [0, 1, 2]
    assert [c["text"] for c in transcript["captions"]] == [c["text"] for c in [*before, after]]
    assert transcript["state"] == "ended" and not transcript["live"]
    # the viewer stayed through the drop (no session.closed while it was detached) and saw it all
    assert [c[1] for c in viewer.commits()] == [0, 1, 2] and viewer.events[-1][1]["reason"] == "closed"
    listed = {s["session"]: s for s in httpx.get(f"{url}/v1/sessions").json()["sessions"]}
    assert listed[sid]["state"] == "ended" and listed[sid]["captions"] == 3
    assert placeholder not in listed  # the session the resuming connection was opened as is gone


@pytest.mark.skipif(POSTGRES_MISSING is not None, reason=str(POSTGRES_MISSING))
def test_postgresql_going_away_mid_session_loses_nothing_and_the_replica_goes_on(
    model_dir, postgres, tmp_path
):
    """The database is killed mid-session: the client is told (``store_failed``), its commit comes
    with ``stored: false``, the replica answers on; once the database is back the commit is
    written (``transcript.stored``) and the transcript holds every caption."""
    store = postgres.new_database()
    with server(model_dir, store, log=tmp_path / "r.log") as (url, _):

        async def scenario():
            ws, sid = await opened(url)
            first = await commit(ws, "so today we talk.", "a")
            postgres.stop("immediate")
            try:
                await ws.send(json.dumps(source("about the new rules.", final=True, segment="b")))
                events = []
                while not events or events[-1]["type"] != "translation.commit":
                    events.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
                healthy = httpx.get(url + "/health", timeout=10).status_code
            finally:
                postgres.start()
            stored = await expect(ws, "transcript.stored", 60)
            await ws.send(json.dumps({"type": "session.close"}))
            await expect(ws, "session.closed")
            await ws.close()
            return sid, first, events, healthy, stored

        sid, first, events, healthy, stored = asyncio.run(scenario())
        errors = [e["code"] for e in events if e["type"] == "error"]
        assert errors == ["store_failed"] and events[-1]["stored"] is False and healthy == 200
        assert stored["captions"] == [1]
        doc = httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()
        assert [c["text"] for c in doc["captions"]] == [first["text"], events[-1]["text"]]


def test_a_resumed_session_goes_on_with_its_numbers_settings_and_clock():
    """``ServiceSession.resume``: the stored id and settings, the next caption number, and audio
    times (the recognizer's, from this connection's first audio) after the last caption's end."""
    from mlx_ssbd.live.segmenter import SegmenterConfig
    from mlx_ssbd.live.source import SourcePartial, Word
    from mlx_ssbd.service.journal import Journal
    from mlx_ssbd.service.protocol import Settings
    from mlx_ssbd.service.session import ServiceSession
    from mlx_ssbd.service.store import SessionInfo
    from mlx_ssbd.service.store.bus import LocalBus

    sent = []
    session = ServiceSession(
        "sess_new", Settings(), sent.append, SegmenterConfig(), Journal(None), LocalBus()
    )
    session.resume(
        SessionInfo(
            "sess_old",
            0.0,
            "m",
            {"target": "ja", "method": "rt", "future": 1},
            "r",
            None,
            None,
            "live",
            3,
            12.5,
        ),
        "its token",
    )
    assert (session.id, session.settings.target, session.settings.method) == ("sess_old", "ja", "rt")
    assert session.resume_token == "its token"
    session.hear(
        SourcePartial("so today", False, "a", 0.5, 1.0, (Word("so", 0.5, 0.7), Word("today", 0.7, 1.0))), 1.0
    )
    heard = sent[-1]
    assert (heard["type"], heard["start"], heard["end"]) == ("transcription.update", 13.0, 13.5)
    item = session.live.take()
    assert session.live.result(item, _update("so heute")).caption == 3
    assert session.live.now() >= 12.5  # the clock goes on from the last caption


def test_a_service_session_cuts_long_speech_in_its_source_language():
    """The settings in force at the first source name the language the segmenter cuts in."""
    from mlx_ssbd.live.segmenter import SegmenterConfig
    from mlx_ssbd.service.journal import Journal
    from mlx_ssbd.service.protocol import Settings, SourceMessage
    from mlx_ssbd.service.session import ServiceSession
    from mlx_ssbd.service.store.bus import LocalBus

    text = "eins zwei drei vier fünf sechs sieben acht neun und dann zehn elf"
    session = ServiceSession(
        "sess_de",
        Settings(),
        [].append,
        SegmenterConfig(max_words=11, pause_s=None),
        Journal(None),
        LocalBus(),
    )
    session.settings = Settings(source="de", targets=("en",))  # a settings message before the first source
    for partial in (text, text + " zwölf"):
        session.push(SourceMessage(partial, segment="a"))
    commits = [item.source.text for item in iter(session.live.take, None) if item.source.final]
    assert commits == [text[: text.index(" und")]]


def _update(text):
    from types import SimpleNamespace

    return SimpleNamespace(output=text, stable=text, unstable="", stats=None)
