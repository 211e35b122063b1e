"""Local stand-ins for the push platforms, each enforcing the documented rules it stands for.

``RulesServer(platform)``: an HTTP server on 127.0.0.1 (a free port, its own thread) that takes
captions as Zoom, YouTube Live or Teams CART document them and records every rule broken:

* the URL's signature parameters (Zoom ``id``/``ns``/``expire``/``signature``, YouTube ``cid``,
  Teams ``meetingid``/``token``) must be there and match, else 403;
* a POST's ``seq`` must be the last accepted one + 1, else 400 and a violation; the last
  accepted one again is a retry (200, not recorded twice); Zoom and Teams posts carry ``lang``
  (one of ``langs``), YouTube's none;
* the body is ``text/plain`` UTF-8; YouTube's is ``YYYY-MM-DDTHH:MM:SS.mmm\\nLINE\\n``;
* Zoom answers 400 until ``started`` (the meeting has not started) and ``GET .../seq`` with the
  last accepted number;
* ``fail_with`` (a status) or ``hang_s`` (no answer for that long) are injected faults.

``ObsPeer``: an obs-websocket 5 server (msgpack subprotocol) with the real authentication
handshake (``Hello`` with salt and challenge, ``Identify``, ``Identified``; a wrong password gets
close code 4009) that answers ``SendStreamCaption`` (501 while not ``streaming``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import msgpack
import websockets

SIGNED = {
    "zoom": {
        "id": "200610693",
        "ns": "GZHkEA==",
        "expire": "86400",
        "sparams": "id,ns,expire",
        "signature": "nYtX",
    },
    "youtube": {"cid": "abcd-efgh-ijkl"},
    "teams": {"meetingid": '{"tId":"72f9","oId":"9c3d"}', "token": "tkb8kvx"},
}
PATHS = {"zoom": "/closedcaption", "youtube": "/closedcaption", "teams": "/cartcaption"}
YOUTUBE_BODY = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\n([^\n]+)\n\Z")


class RulesServer:
    def __init__(self, platform: str, langs: tuple[str, ...] = ("de-DE",), *, started: bool = True):
        self.platform, self.langs, self.started = platform, langs, started
        self.received: list[tuple[str | None, str, int, float]] = []  # (lang, line, seq, when)
        self.violations: list[str] = []
        self.last_seq = 0
        self.fail_with: int | None = None
        self.hang_s = 0.0
        self.posts = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def place(self) -> str:
        """The URL as reports name it (no query)."""
        host, port = self.server.server_address
        return f"http://{host}:{port}{PATHS[self.platform]}"

    @property
    def url(self) -> str:
        from urllib.parse import urlencode

        host, port = self.server.server_address
        return f"http://{host}:{port}{PATHS[self.platform]}?{urlencode(SIGNED[self.platform])}"

    def texts(self, lang: str | None = None) -> list[str]:
        return [text for each, text, _, _ in self.received if lang is None or each == lang]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        rules = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _signed(self, query: dict) -> bool:
                return all(
                    query.get(k, [None])[0] == v for k, v in SIGNED[rules.platform].items() if k != "sparams"
                )

            def do_GET(self):
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                if rules.platform != "zoom" or parts.path != PATHS["zoom"] + "/seq":
                    return self._answer(405)
                if not self._signed(query):
                    return self._answer(403)
                if not rules.started:
                    return self._answer(400)
                self._answer(200, str(rules.last_seq))

            def do_POST(self):
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                rules.posts += 1
                if rules.hang_s:  # no answer in time (the client gives up first)
                    time.sleep(rules.hang_s)
                    return self._answer(504)
                with rules.lock:
                    if rules.fail_with:
                        return self._answer(rules.fail_with)
                    if parts.path != PATHS[rules.platform] or not self._signed(query) or "seq" not in query:
                        return self._answer(403)
                    if rules.platform == "zoom" and not rules.started:
                        return self._answer(400)
                    status, lang, text = self._check(query, body)
                    if status != 200 or text is None:
                        return self._answer(status)
                    rules.last_seq += 1
                    rules.received.append((lang, text, rules.last_seq, time.monotonic()))
                self._answer(200, "2026-11-27T10:00:00.000" if rules.platform == "youtube" else "")

            def _check(self, query: dict, body: bytes) -> tuple[int, str | None, str | None]:
                seq = int(query["seq"][0])
                if seq == rules.last_seq and rules.received:  # a retry of what was accepted
                    return 200, None, None
                if seq != rules.last_seq + 1:
                    rules.violations.append(f"seq {seq} after {rules.last_seq}")
                    return 400, None, ""
                if not self.headers.get("Content-Type", "").startswith("text/plain"):
                    rules.violations.append(f"content type {self.headers.get('Content-Type')}")
                    return 400, None, ""
                text = body.decode("utf-8")
                lang = query.get("lang", [None])[0]
                if rules.platform == "youtube":
                    match = YOUTUBE_BODY.match(text)
                    if lang is not None or not match:
                        rules.violations.append(f"youtube body {text!r} lang {lang}")
                        return 400, None, ""
                    text = match.group(1)
                elif lang not in rules.langs:
                    rules.violations.append(f"lang {lang}")
                    return 400, None, ""
                return 200, lang, text

        return Handler


class ObsPeer:
    """An obs-websocket 5 server on 127.0.0.1 with the given ``password``."""

    def __init__(self, password: str = "secret"):
        self.password, self.streaming = password, True
        self.captions: list[tuple[str, float]] = []
        self.auth_failures = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    async def _start(self):
        return await websockets.serve(self._serve, "127.0.0.1", 0, subprotocols=["obswebsocket.msgpack"])

    async def _serve(self, ws) -> None:
        salt, challenge = (
            base64.b64encode(b"salt-1234").decode(),
            base64.b64encode(time.time_ns().to_bytes(8)).decode(),
        )
        auth = {"challenge": challenge, "salt": salt}
        await ws.send(
            msgpack.packb(
                {"op": 0, "d": {"obsWebSocketVersion": "5.1.0", "rpcVersion": 1, "authentication": auth}}
            )
        )
        identify = msgpack.unpackb(await ws.recv())
        secret = base64.b64encode(hashlib.sha256((self.password + salt).encode()).digest())
        expected = base64.b64encode(hashlib.sha256(secret + challenge.encode()).digest()).decode()
        if identify.get("op") != 1 or identify["d"].get("authentication") != expected:
            self.auth_failures += 1
            await ws.close(4009, "Authentication failed.")
            return
        await ws.send(msgpack.packb({"op": 2, "d": {"negotiatedRpcVersion": 1}}))
        async for raw in ws:
            message = msgpack.unpackb(raw)
            if message.get("op") != 6:
                continue
            d = message["d"]
            ok = d["requestType"] == "SendStreamCaption" and self.streaming
            if ok:
                self.captions.append((d["requestData"]["captionText"], time.monotonic()))
            status = {"result": ok, "code": 100 if ok else 501}
            answer = {"requestType": d["requestType"], "requestId": d["requestId"], "requestStatus": status}
            await ws.send(msgpack.packb({"op": 7, "d": answer}))

    def close(self) -> None:
        async def stop():
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
