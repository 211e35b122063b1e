"""Connections before and after their request head: slow heads are closed, incomplete ones hold
nothing that viewers and health checks need, and ``serve`` needs a WebSocket implementation."""

import asyncio
import contextlib
import re
import socket
import threading
import time
from importlib import metadata

from mlx_ssbd.service import connections
from mlx_ssbd.service.connections import InFlightLimit, head_guarded_h11, websocket_protocol

import httpx
import pytest
import uvicorn
from serving import SENTENCE, server, session_events, source
from waiting import until


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(1.0)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


@contextlib.contextmanager
def uvicorn_on_a_free_port(app, **settings):
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off", **settings)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        until(lambda: srv.started, 30, "uvicorn to listen")
        yield srv.servers[0].sockets[0].getsockname()[1]
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def slow_head(port: int) -> socket.socket:
    """A connection that has sent a request line and one header, and no end of head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    return sock


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` seconds (what it sends first is read)."""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if sock.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        pass
    return False


def test_a_head_not_complete_in_time_is_closed_and_the_oldest_waiting_heads_make_room():
    with uvicorn_on_a_free_port(hello, http=head_guarded_h11(head_timeout_s=1.5, max_pending=4)) as port:
        socks = [slow_head(port) for _ in range(6)]
        try:
            # 6 heads waiting, 4 allowed: the two that waited longest are closed at once
            assert closed_by_server(socks[0], 10) and closed_by_server(socks[1], 10)
            # a real client still gets its answer (it evicts one more waiting head while it sends)
            assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "hello"
            # past the head timeout, every slow head is closed
            assert all(closed_by_server(s, 15) for s in socks[2:])
        finally:
            for s in socks:
                s.close()


def test_a_kept_alive_connection_has_the_same_bound_on_its_next_head():
    with uvicorn_on_a_free_port(hello, http=head_guarded_h11(head_timeout_s=1.0, max_pending=8)) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while b"hello" not in answer and len(answer) < 4096:
                answer += sock.recv(1024) or b"!" * 4096  # closed before the answer: fails below
            assert b"hello" in answer and b"!" not in answer
            sock.sendall(b"GET / HTTP/1.1\r\n")  # the next head, never finished
            assert closed_by_server(sock, 15)


def test_a_slow_request_in_flight_is_not_closed_by_the_head_bound():
    with uvicorn_on_a_free_port(hello, http=head_guarded_h11(head_timeout_s=0.3, max_pending=8)) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/slow", timeout=10).text == "hello"


def test_requests_past_the_limit_get_503_but_health_never_does():
    with uvicorn_on_a_free_port(InFlightLimit(hello, 1)) as port:

        async def scenario():
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                slow = asyncio.create_task(client.get("/slow"))
                await asyncio.sleep(0.3)  # the slow one is in flight
                busy, health = await asyncio.gather(client.get("/"), client.get("/health"))
                assert busy.status_code == 503 and busy.json()["code"] == "busy"
                assert health.status_code == 200
                assert (await slow).status_code == 200
                assert (await client.get("/")).status_code == 200  # the slot came back

        asyncio.run(scenario())


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        head_guarded_h11(head_timeout_s=0)
    with pytest.raises(ValueError):
        InFlightLimit(hello, 0)


def test_the_serve_extra_brings_a_websocket_implementation():
    """What the service imports for WebSockets is declared in the extra it is installed with."""
    serve = [req for req in metadata.requires("mlx-ssbd") if re.search(r"extra\s*==\s*.serve.", req)]
    declared = {re.split(r"[<>=\[; ]", req, maxsplit=1)[0].lower() for req in serve}
    assert {"starlette", "uvicorn"} <= declared
    assert declared & {"websockets", "wsproto"}, f"the serve extra has no WebSocket library: {declared}"
    websocket_protocol()  # and uvicorn finds it here


async def reads_until_closed(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            pass


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """A client frame (final, masked with the zero key, so the payload goes as it is)."""
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload


def test_a_text_frame_not_utf8_read_with_the_clients_close_is_closed_cleanly(caplog):
    """Both frames in one segment: the connection is closing when the bad text is decoded."""
    with uvicorn_on_a_free_port(reads_until_closed, ws=websocket_protocol()) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 101")
        sock.sendall(masked_frame(0x1, b"\xff") + masked_frame(0x8, (1000).to_bytes(2, "big")))
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(4096):
                received += chunk
        sock.close()
    assert received[:1] == b"\x88", f"no close frame came back: {received!r}"
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


def test_serve_refuses_to_start_without_a_websocket_library(monkeypatch, run):
    import uvicorn.protocols.websockets.auto as auto

    monkeypatch.setattr(auto, "AutoWebSocketsProtocol", None)
    with pytest.raises(ImportError, match="websockets"):
        connections.websocket_protocol()
    result = run("serve", "--port", "0")
    assert result.exit_code != 0
    assert "websockets" in result.output and "mlx-ssbd[serve]" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("limits", [("--max-viewers", "20"), ()], ids=["max-viewers-20", "default-limits"])
def test_slow_heads_beside_a_session_leave_health_and_captions_alone(model_dir, tmp_path, limits):
    """150 sockets sending a request head one header at a time, straight at a server whose
    connection limit is low (--max-viewers 20: 92 connections) or at its defaults: /health stays
    200 and a session commits."""
    with server(model_dir, tmp_path / "t.sqlite3", *limits, "--head-timeout", "3") as (base, _):
        port = int(base.rsplit(":", 1)[1])
        stop = threading.Event()
        socks = [slow_head(port) for _ in range(150)]

        def trickle():  # one more header every second on every socket, a bounded number of times
            for n in range(30):
                if stop.wait(1.0):
                    return
                for s in socks:
                    with contextlib.suppress(OSError):
                        s.sendall(f"X-Slow-{n}: 1\r\n".encode())

        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        try:
            health = [httpx.get(base + "/health", timeout=10) for _ in range(5)]
            assert all(h.status_code == 200 and h.json()["status"] == "ok" for h in health)
            events = asyncio.run(
                session_events(base, [source(SENTENCE, final=True), {"type": "session.close"}])
            )
            assert [e["type"] for e in events].count("translation.commit") == 1
            deadline = time.monotonic() + 20  # the head timeout closes every slow socket
            assert all(closed_by_server(s, max(0.1, deadline - time.monotonic())) for s in socks)
        finally:
            stop.set()
            feeder.join(timeout=10)
            for s in socks:
                s.close()
