"""The service's promises under bad input and failure: every field checked, every queue bounded,
a failing store or recognizer or round confined to its session, keys and origins, the drain."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

from mlx_ssbd.live import subtitles
from mlx_ssbd.service import protocol
from mlx_ssbd.service.outbox import Outbox, Overflow
from mlx_ssbd.service.protocol import Limits, ProtocolError
from mlx_ssbd.service.viewers import Viewers

import httpx
import pytest
import websockets
from serving import SENTENCE, server, session_events, source, ws_url
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
