"""The service's promises under bad input and failure: every field checked, every queue bounded,
a failing store or recognizer or round confined to its session, keys and origins, the drain."""

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

from mlx_ssbd.live import subtitles
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.service import protocol
from mlx_ssbd.service.outbox import Outbox, Overflow
from mlx_ssbd.service.protocol import Limits, ProtocolError
from mlx_ssbd.service.scheduler import Scheduler
from mlx_ssbd.service.store import open_store
from mlx_ssbd.service.viewers import Viewers
from mlx_ssbd.service.works import Busy

import httpx
import numpy as np
import pytest
import websockets
from test_service import SENTENCE, server, session_events, source, ws_url
from waiting import until


@pytest.mark.parametrize(
    "raw,code",
    [
        ('{"type": "source.update", "text": "a", "final": true, "start": NaN}', "invalid_json"),
        ('{"type": "source.update", "text": "a", "end": Infinity}', "invalid_json"),
        ('{"type": "source.update", "text": "a", "end": 1e999}', "invalid_json"),
        ("[" * 50000 + "]" * 50000, "message_too_large"),
        ("[" * 20000 + "]" * 20000, "invalid_json"),  # too deep for Python's parser: refused, not a crash
        ('{"type": "source.update", "text": "a", "start": -1}', "invalid_message"),
        ('{"type": "source.update", "text": "a", "start": 2, "end": 1}', "invalid_message"),
        ('{"type": "source.update", "text": "a", "end": 1e300}', "invalid_message"),
        ('{"type": "source.update", "text": "a\\u0000b"}', "invalid_message"),
        ('{"type": "source.update", "text": "a\\ud800"}', "invalid_message"),
        ('{"type": "source.update", "text": "a", "segment": "' + "s" * 200 + '"}', "invalid_message"),
        ('{"type": "source.update", "text": "a", "segment": "s\\n1"}', "invalid_message"),
        ('{"type": "source.update", "text": "a", "segment": -3}', "invalid_message"),
        ('{"type": "session.update", "mask_k": 100000000000}', "invalid_message"),
        ('{"type": "session.update", "target": "' + "d" * 5000 + '"}', "invalid_message"),
        ('{"type": "session.update", "beta": [0.2]}', "invalid_message"),
    ],
)
def test_every_field_is_checked(raw, code):
    with pytest.raises(ProtocolError) as error:
        protocol.parse(raw, Limits())
    assert error.value.code == code and len(str(error.value)) < 300  # the message never echoes a flood


def test_valid_times_and_text_pass_the_checks():
    message = protocol.parse(
        '{"type": "source.update", "text": "line one\\nline two\\tend", "start": 0, "end": 0}'
    )
    assert message.text == "line one\nline two\tend" and message.start == message.end == 0.0


def test_a_method_without_a_beta_runs_at_its_own():
    from mlx_ssbd.live.methods import DEFAULT_BETA, RATIO_BETA

    assert protocol.parse('{"type": "session.update", "method": "ssbd-ratio"}').changes["beta"] == RATIO_BETA
    assert protocol.parse('{"type": "session.update", "method": "ssbd"}').changes["beta"] == DEFAULT_BETA
    assert (
        protocol.parse('{"type": "session.update", "method": "ssbd-ratio", "beta": 0.3}').changes["beta"]
        == 0.3
    )
    assert "beta" not in protocol.parse('{"type": "session.update", "target": "fr"}').changes


def test_the_outbox_drops_live_updates_first_and_overflows_on_commits():
    async def scenario():
        box = Outbox(3)
        for kind in ("translation.update", "translation.commit", "translation.update", "error"):
            box.put({"type": kind})
        assert [e["type"] for e in box._events] == ["translation.commit", "translation.update", "error"]
        box.put({"type": "translation.commit"})  # the last live update makes room
        assert box.dropped == 2 and not box.overflowed
        box.put({"type": "session.closed"})  # nothing left to drop: the reader is too slow
        assert box.overflowed
        with pytest.raises(Overflow):
            await box.get()

    asyncio.run(scenario())


def test_viewers_are_counted_in_all_and_per_session():
    viewers = Viewers(max_total=3, max_per_session=2)
    assert viewers.enter("a") is None and viewers.enter("a") is None
    assert "this session" in viewers.enter("a")
    assert viewers.enter("b") is None and "the server" in viewers.enter("c")
    viewers.leave("a")
    assert viewers.enter("c") is None and viewers.total == 3


def test_subtitle_cues_stay_valid_whatever_the_model_writes():
    import html
    import io

    import srt
    import webvtt

    texts = ["a --> b", "<i>not a tag</i> & more", "1 < 2 > 0", "<-- x -->-->"]
    captions = [(float(i), i + 1.0, t) for i, t in enumerate(texts)]
    cues = webvtt.from_buffer(io.StringIO(subtitles.document("vtt", captions)))
    assert [html.unescape(c.text) for c in cues] == texts  # escaped, read back as written
    subs = list(srt.parse(subtitles.document("srt", captions)))
    assert len(subs) == len(texts) and all("-->" not in s.content for s in subs)
    assert subs[1].content == "\u2039i>not a tag\u2039/i> & more" and subs[2].content == "1 < 2 > 0"
    with pytest.raises(ValueError, match="finite"):
        subtitles.document("srt", [(0.0, float("inf"), "x")])
    # an override tag would move the cue; bidi controls would show the words in another order
    tricks = [(0.0, 1.0, "{\\an8}up here {not a tag}"), (1.0, 2.0, "pay \u202e001$\u202c now \u2066x\u2069")]
    subs = list(srt.parse(subtitles.document("srt", tricks)))
    assert [s.content for s in subs] == ["\uff5b\\an8}up here {not a tag}", "pay 001$ now x"]
    cues = webvtt.from_buffer(io.StringIO(subtitles.document("vtt", tricks)))
    assert cues[1].text == "pay 001$ now x"


# -- the scheduler, in process (this thread owns the model, as the server's main thread does) --


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_model(model_dir)


def run_session(scheduler, finals, on_event=lambda event, session: None):
    """One session committing ``finals``; runs the scheduler until it is closed; its events."""
    events = []

    def send(event):
        events.append(event)
        on_event(event, session)
        if event["type"] == "session.closed":
            scheduler.stop()

    session = scheduler.open(send)
    for i, text in enumerate(finals):
        scheduler.push(session, protocol.SourceMessage(text, True, f"s{i}"))
    scheduler.close(session)
    scheduler.run()
    return session, events


@pytest.mark.parametrize("failure", ["read-only", "raises"])
def test_a_store_that_fails_mid_session_loses_no_caption(loaded, tmp_path, monkeypatch, failure):
    """The store fails after the first commit and is back after the second: the client is told,
    the second commit is sent with ``stored: false``, then written (``transcript.stored``)."""
    store = open_store(tmp_path / "t.sqlite3")
    add = store.add_caption

    def break_store(broken):
        if failure == "read-only":  # SQLite's own refusal: "attempt to write a readonly database"
            store._writer.execute(f"PRAGMA query_only={'ON' if broken else 'OFF'}")
        else:

            def failing(*args):
                raise sqlite3.OperationalError("database is locked")

            monkeypatch.setattr(store, "add_caption", failing if broken else add)

    def on_event(event, session):
        if event["type"] == "translation.commit":
            break_store(event["caption"] == 0)

    scheduler = Scheduler(loaded, store=store)
    session, events = run_session(
        scheduler, ["so today we talk.", "about the new rules.", "for all people."], on_event
    )
    commits = [e for e in events if e["type"] == "translation.commit"]
    assert [c["stored"] for c in commits] == [True, False, True]
    kinds = [e["type"] for e in events]
    # told before the commit
    assert kinds.index("error") < kinds.index("translation.commit", kinds.index("error"))
    assert next(e for e in events if e["type"] == "error")["code"] == "store_failed"
    assert next(e for e in events if e["type"] == "transcript.stored")["captions"] == [1]
    assert kinds[-1] == "session.closed" and kinds.index("transcript.stored") < len(kinds) - 1
    assert [c.text for c in store.captions(session.id)] == [c["text"] for c in commits]


def test_a_failing_round_closes_the_sessions_in_it_and_the_scheduler_goes_on(loaded, monkeypatch):
    """The first batched round raises: the session in it gets ``internal_error`` and is closed; a
    session opened after it is served by a fresh batch, in the same run."""
    scheduler = Scheduler(loaded)
    broken = scheduler.batch
    monkeypatch.setattr(broken, "round", lambda: (_ for _ in ()).throw(RuntimeError("a bug")))
    first, second = [], []

    def then(event):
        second.append(event)
        if event["type"] == "session.closed":
            scheduler.stop()

    def on_first(event):
        first.append(event)
        if event["type"] == "session.closed":
            session = scheduler.open(then)
            scheduler.push(session, protocol.SourceMessage(SENTENCE, True))
            scheduler.close(session)

    scheduler.push(scheduler.open(on_first), protocol.SourceMessage(SENTENCE, True))
    scheduler.run()
    assert [e["type"] for e in first] == ["error", "session.closed"]
    assert first[0]["code"] == "internal_error" and first[1]["reason"] == "error"
    assert "a bug" not in first[0]["message"]  # what failed is in the server's log, not sent out
    assert [e["type"] for e in second] == [
        "translation.commit",
        "session.closed",
    ] and scheduler.batch is not broken


def test_a_session_failing_on_its_own_leaves_the_others(loaded, monkeypatch):
    """An exception while one session's event is sent (here: its client's callback) closes that
    session with a reason; another session in the same rounds commits as usual."""
    scheduler = Scheduler(loaded)
    good, bad = [], []

    def broken(event):
        bad.append(event)
        if event["type"] == "translation.commit":
            raise RuntimeError("a bug in this session's path")

    def watching(event):
        good.append(event)
        if len([e for e in good + bad if e["type"] == "session.closed"]) == 2:
            scheduler.stop()

    first, second = scheduler.open(broken), scheduler.open(watching)
    scheduler.push(first, protocol.SourceMessage(SENTENCE, True))
    scheduler.push(second, protocol.SourceMessage(SENTENCE, True))
    scheduler.close(second)
    scheduler.run()
    assert [e["type"] for e in good] == ["translation.commit", "session.closed"]
    assert [e.get("code") for e in bad if e["type"] == "error"] == ["internal_error"]
    assert bad[-1] == {"type": "session.closed", "session": first.id, "reason": "error"}


def test_pending_finals_and_queued_completions_are_bounded(loaded):
    scheduler = Scheduler(loaded, max_pending_finals=2, max_calls=1)
    session = scheduler.open(lambda event: None)
    for text in ("one.", "two."):
        scheduler.push(session, protocol.SourceMessage(text, True))
    with pytest.raises(Busy, match="limit is 2"):
        scheduler.push(session, protocol.SourceMessage("three.", True))
    assert session.live.pending_finals == 2  # the refused one was not queued
    scheduler.interleave(lambda: iter(()))
    with pytest.raises(Busy, match="1 completions"):
        scheduler.interleave(lambda: iter(()))


def test_the_drain_commits_the_open_caption_and_refuses_newcomers(loaded, tmp_path):
    store = open_store(tmp_path / "t.sqlite3")
    scheduler = Scheduler(loaded, store=store)
    events = []

    def send(event):
        events.append(event)
        if event["type"] == "translation.update":
            scheduler.drain(30)

    session = scheduler.open(send)
    scheduler.push(session, protocol.SourceMessage("so today we talk about"))  # live, never final
    scheduler.run()  # returns by itself once drained
    assert [e["type"] for e in events] == ["translation.update", "translation.commit", "session.closed"]
    assert events[-1]["reason"] == "shutdown" and events[1]["reason"] == "end"
    assert [c.text for c in store.captions(session.id)] == [events[1]["text"]]
    with pytest.raises(Busy) as refused:
        scheduler.open(lambda event: None)
    assert refused.value.shutdown
    with pytest.raises(Busy):
        scheduler.interleave(lambda: iter(()))


class _FakeLive:
    def __init__(self):
        self.partials, self.heard = [], []

    def push(self, partial, at=None):
        self.partials.append(partial)

    def tick(self, at):
        self.heard.append(at)


class _FakeSession:
    def __init__(self, sid):
        self.id, self.live, self.events = sid, _FakeLive(), []

    def publish(self, event):
        self.events.append(event)

    send = publish

    def hear(self, partial, heard):
        self.live.push(partial, heard)


def test_the_asr_thread_survives_a_failing_decode(monkeypatch):
    """One session's audio makes the recognizer fail: that session gets ``asr_failed``; the other
    session's speech is recognised on, by the same worker thread; audio beyond the bound is refused."""
    from mlx_ssbd.asr.recognizer import SAMPLE_RATE
    from mlx_ssbd.service.speech import SpeechWorker

    from test_asr import ScriptedRecognizer

    class Fussy(ScriptedRecognizer):
        def transcribe(self, audio, prompt=""):
            if np.abs(audio).max() > 0.9:  # the loud session's audio breaks it
                raise RuntimeError("decoder failure")
            return super().transcribe(audio, prompt)

    class FakeScheduler:
        closed = []

        def wake(self):
            pass

        def close(self, session):
            self.closed.append(session.id)

    worker = SpeechWorker(FakeScheduler(), max_pending_s=5.0)
    worker._recognizer = Fussy()
    loud, quiet = _FakeSession("loud"), _FakeSession("quiet")
    second = 2 * SAMPLE_RATE
    assert worker.feed(loud, (np.full(SAMPLE_RATE, 32000, "<i2")).tobytes())
    for _ in range(4):
        assert worker.feed(quiet, np.zeros(SAMPLE_RATE, "<i2").tobytes())
    worker.end(quiet)
    until(lambda: "quiet" in FakeScheduler.closed, 30, "the quiet session to end")
    assert [e["code"] for e in loud.events] == ["asr_failed"]
    assert quiet.live.partials and not [e for e in quiet.events if e["type"] == "error"]
    assert quiet.live.heard == sorted(quiet.live.heard) and quiet.live.heard[-1] == 4.0  # the audio's clock
    assert worker._thread.is_alive()
    hold = _FakeSession("hold")
    with worker._cond:  # the worker is not served while it holds the lock: nothing is recognised
        assert worker.feed(hold, b"\x00" * (second * 4)) and not worker.feed(hold, b"\x00" * (second + 2))


# -- real servers ------------------------------------------------------------------------------


def test_api_key_and_origins(model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_SSBD_API_KEY", "sekret")
    key = {"Authorization": "Bearer sekret"}

    async def opens(base, *, query="", headers=None, origin=None):
        try:
            async with websockets.connect(
                ws_url(base) + query, additional_headers=headers, origin=origin
            ) as ws:
                return json.loads(await ws.recv())["type"]
        except websockets.InvalidStatus as refused:
            return refused.response.status_code

    with server(model_dir, tmp_path / "t.sqlite3", "--allow-origin", "https://captions.example") as (base, _):
        own = base  # the server's own origin: http://127.0.0.1:PORT
        results = [
            asyncio.run(opens(base, **kw))
            for kw in (
                {},
                {"headers": key},
                {"query": "?api_key=sekret"},
                {"query": "?api_key=wrong"},
                {"headers": {"Authorization": "Bearer wrong"}},
                {"headers": key, "origin": "https://evil.example"},
                {"headers": key, "origin": "https://captions.example"},
                {"query": "?api_key=sekret", "origin": own},
            )
        ]
        assert results == [
            401,
            "session.created",
            "session.created",
            401,
            401,
            403,
            "session.created",
            "session.created",
        ]
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        post = lambda **kw: httpx.post(base + "/v1/chat/completions", timeout=60, **kw)
        assert post(json=chat).status_code == 401
        assert post(json=chat, headers=key).status_code == 200
        assert (
            post(content=json.dumps(chat), headers={**key, "Content-Type": "text/plain"}).status_code == 415
        )
        assert post(json=chat, headers={**key, "Origin": "https://evil.example"}).status_code == 403
        assert (
            post(content=b"{" * (2 << 20), headers={**key, "Content-Type": "application/json"}).status_code
            == 413
        )
        assert post(json={**chat, "max_tokens": 10**6}, headers=key).status_code == 400
        assert (
            post(
                content=b'{"messages": NaN}', headers={**key, "Content-Type": "application/json"}
            ).status_code
            == 400
        )
        assert (
            httpx.get(base + "/v1/models").status_code == 401
            and httpx.get(base + "/health").status_code == 200
        )

        async def session_with_key():
            async with websockets.connect(ws_url(base), additional_headers=key) as ws:
                sid = json.loads(await ws.recv())["session"]
                await ws.send(json.dumps(source(SENTENCE, final=True)))
                await ws.send(json.dumps({"type": "session.close"}))
                async for _ in ws:
                    pass
            return sid

        sid = asyncio.run(session_with_key())
        # the viewer links need only the session id
        assert httpx.get(f"{base}/v1/sessions/{sid}/transcript.json").json()["captions"]
        assert httpx.get(f"{base}/captions/{sid}").status_code == 200
        # the list of every session is for operators: with the key only
        assert httpx.get(f"{base}/v1/sessions").status_code == 401
        listed = httpx.get(f"{base}/v1/sessions", headers=key).json()["sessions"]
        assert sid in [s["session"] for s in listed]


def test_only_known_hosts_are_answered_and_a_public_server_needs_a_key(model_dir, tmp_path):
    """DNS rebinding: a page on a name its attacker resolves to this server sends that name as
    Host; the server answers loopback names, IP addresses and --allow-host names only."""
    with server(model_dir, tmp_path / "t.sqlite3", "--allow-host", "captions.example") as (base, _):
        port = base.rsplit(":", 1)[1]
        get = lambda path, host: httpx.get(base + path, headers={"Host": host})
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "[::1", "localhost:x"):
            refused = get("/v1/sessions", host)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "host_not_allowed", host
        assert get("/", "evil.example").status_code == 400
        for host in (
            f"localhost:{port}",
            f"127.0.0.1:{port}",
            "[::1]",
            "10.1.2.3",
            "captions.example",
            "CAPTIONS.example:443",
            "app.localhost",
        ):
            assert get("/v1/sessions", host).status_code == 200, host
        assert get("/health", "evil.example").status_code == 200  # load balancers probe by address

        async def rebinding():
            try:
                async with websockets.connect(ws_url(base), additional_headers={"Host": "evil.example"}):
                    return "opened"
            except websockets.InvalidStatus as refused:
                return refused.response.status_code

        assert asyncio.run(rebinding()) == 400
        # the small things: no redirect built from the Host, bounds on numbers, headers on every page
        assert httpx.get(base + "/v1/sessions/").status_code == 404
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        for seed in (-1, 2**64):
            refused = httpx.post(base + "/v1/chat/completions", json={**chat, "seed": seed}, timeout=60)
            assert refused.status_code == 400 and "seed" in refused.text
        sid = asyncio.run(session_events(base, [source(SENTENCE, final=True), {"type": "session.close"}]))[0][
            "session"
        ]
        replayed = httpx.get(
            f"{base}/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(2**63)}, timeout=30
        )
        # an id not ours: all of it
        assert replayed.status_code == 200 and "translation.commit" in replayed.text
        page, caption_page = httpx.get(base + "/"), httpx.get(f"{base}/captions/{sid}")
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        for response in (page, caption_page, replayed, httpx.get(base + "/health")):
            assert response.headers["x-content-type-options"] == "nosniff"
        policy = caption_page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "ws:" not in policy
    public = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlx_ssbd_cli",
            "serve",
            "--model",
            model_dir,
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--store",
            str(tmp_path / "p.sqlite3"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "MLX_SSBD_API_KEY"},
    )
    assert (
        public.returncode == 2
        and "--public-without-key" in public.stderr
        and "Traceback" not in public.stderr
    )


def test_silent_sockets_viewers_and_slow_readers_are_bounded(model_dir, tmp_path):
    async def scenario(base):
        async with websockets.connect(ws_url(base)) as silent:  # says nothing: its slot is not kept
            assert json.loads(await silent.recv())["type"] == "session.created"
            timeout = json.loads(await asyncio.wait_for(silent.recv(), timeout=10))
            assert timeout["code"] == "handshake_timeout"
            assert json.loads(await silent.recv())["type"] == "session.closed"
        async with websockets.connect(ws_url(base)) as talker:  # a live session, two viewers at most
            sid = json.loads(await talker.recv())["session"]
            await talker.send(json.dumps(source("so today")))
            url = f"{base}/v1/sessions/{sid}/events"
            async with httpx.AsyncClient(timeout=30) as client:
                async with client.stream("GET", url) as one, client.stream("GET", url) as two:
                    assert one.status_code == two.status_code == 200
                    third = await client.get(url)
                    assert third.status_code == 503 and third.json()["code"] == "too_many_viewers"
                # the server notices the viewers leaving a moment later
                for _ in range(200):
                    if (await client.get(f"{base}/health")).json()["viewers"] == 0:
                        break
                    await asyncio.sleep(0.05)
                assert (await client.get(f"{base}/health")).json()["viewers"] == 0, "viewers never left"
        async with websockets.connect(ws_url(base)) as junk:  # beyond 50 bad messages in 10 s: closed
            await junk.recv()
            for _ in range(60):
                await junk.send("junk")
            errors = 0
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    errors += json.loads(await asyncio.wait_for(junk.recv(), timeout=10))["type"] == "error"
            assert (
                errors == 51 and closed.value.rcvd.code == 1008 and "bad messages" in closed.value.rcvd.reason
            )

    def without_reading(base, message, count, first=None):
        """``count`` copies of ``message`` from a client that never reads a byte after the
        handshake (a raw socket driven by websockets' sans-I/O protocol); how many it had sent when
        its session was seen dropped (None: not within 10 s of the last)."""
        from websockets.client import ClientProtocol
        from websockets.protocol import State
        from websockets.uri import parse_uri

        client = ClientProtocol(parse_uri(ws_url(base)))
        client.send_request(client.connect())
        with socket.create_connection(base[len("http://") :].split(":")) as sock:
            sock.settimeout(10)
            sock.sendall(b"".join(client.data_to_send()))
            while client.state is State.CONNECTING:  # the handshake's answer: the last bytes it reads
                client.receive_data(sock.recv(4096))
            assert client.state is State.OPEN
            if first is not None:  # a valid first message: the handshake timeout no longer applies
                client.send_text(first.encode())
            for sent in range(1, count + 1):
                client.send_text(message.encode())
                try:
                    sock.sendall(b"".join(client.data_to_send()))
                except OSError:  # the server closed the connection
                    pass
                if sent % 500 == 0 and httpx.get(base + "/health").json()["sessions"] == 0:
                    return sent
            deadline = time.monotonic() + 10  # the server may still be reading what was sent
            while time.monotonic() < deadline:
                if httpx.get(base + "/health").json()["sessions"] == 0:
                    return count
                time.sleep(0.05)
        return None

    with server(model_dir, tmp_path / "t.sqlite3", "--handshake-timeout", "1", "--max-viewers", "2") as (
        base,
        _,
    ):
        asyncio.run(scenario(base))
        until(lambda: httpx.get(base + "/health").json()["sessions"] == 0, 10, "every session to end")
        # valid messages, each answered by an event it never reads: once the socket's buffers and
        # the outbox are full, the session is dropped
        assert without_reading(base, json.dumps({"type": "session.update"}), 100_000) is not None
        # junk: beyond 50 bad messages in 10 s the connection is closed
        assert without_reading(base, "junk", 60, first=json.dumps({"type": "session.update"})) == 60
        assert httpx.get(base + "/health").json()["status"] == "ok"


def test_sigterm_drains_open_captions_into_the_store_and_exits_0(model_dir, tmp_path):
    store = tmp_path / "t.sqlite3"

    async def talk_then_terminate(base, proc):
        async with websockets.connect(ws_url(base)) as ws:
            sid = json.loads(await ws.recv())["session"]
            await ws.send(json.dumps(source("so today we talk about the weather")))  # never final
            events = []
            async for raw in ws:
                events.append(json.loads(raw))
                if events[-1]["type"] == "translation.update" and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            return sid, events, ws.close_code

    with server(model_dir, store) as (base, proc):
        sid, events, code = asyncio.run(talk_then_terminate(base, proc))
        assert proc.wait(timeout=60) == 0
    commit = next(e for e in events if e["type"] == "translation.commit")
    assert events[-1] == {"type": "session.closed", "session": sid, "reason": "shutdown"} and code == 1001
    assert commit["reason"] == "end" and commit["stored"]
    assert [c.text for c in open_store(store).captions(sid)] == [commit["text"]]


def test_signals_are_acted_on_at_once_even_while_the_model_thread_is_busy(monkeypatch):
    """The signal thread (``server._watch_signals``): the first signal drains at once, whatever the
    model's thread is doing; if that thread has not returned by the drain's end the process exits
    (status 1); a second signal cuts the wait to ``EXIT_GRACE_S``."""
    import threading

    from mlx_ssbd.service import server as server_mod

    class Exited(Exception):
        pass

    def run(signals: int, drain_s: float):
        drains, exits = [], []

        class Scheduler:
            def drain(self, timeout_s):
                drains.append((time.monotonic(), timeout_s))

        def exit_now(status):
            exits.append((time.monotonic(), status))
            raise Exited

        def watch():
            with pytest.raises(Exited):
                server_mod._watch_signals(woken, Scheduler(), drain_s, returned)

        monkeypatch.setattr(server_mod.os, "_exit", exit_now)
        woken, wake = os.pipe()
        returned = threading.Event()  # never set: the model's thread is stuck in a long model call
        watcher = threading.Thread(target=watch, daemon=True)
        start = time.monotonic()
        watcher.start()
        for _ in range(signals):
            os.write(wake, bytes([signal.SIGTERM]))
            time.sleep(0.2)
        watcher.join(timeout=60)
        os.close(woken), os.close(wake)
        return start, drains, exits

    start, drains, exits = run(1, drain_s=0.5)
    assert len(drains) == 1 and drains[0][0] - start < 1.0 and drains[0][1] == 0.5  # at once
    assert [status for _, status in exits] == [1] and exits[0][
        0
    ] - start >= 0.5 + server_mod.EXIT_GRACE_S - 0.1
    start, drains, exits = run(2, drain_s=30.0)
    assert len(drains) == 2 and [status for _, status in exits] == [1]
    assert exits[0][0] - start < 0.2 + server_mod.EXIT_GRACE_S + 5  # not the 30 s drain
