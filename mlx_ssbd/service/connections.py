"""What a connection may hold before and after its request head.

Contract: ``websocket_protocol()`` is the WebSocket protocol class for ``uvicorn.Config(ws=...)``:
uvicorn's own choice, except that its websockets-sansio implementation (the default since uvicorn
0.50) gets one fix: a text frame that is not UTF-8, read in the same segment as the client's close
frame, made it call ``send_close`` on a closing connection, and the ``InvalidState`` escaped
``data_received`` (asyncio logged a fatal error and dropped the socket unclosed); that close is
now left to the closing handshake already under way. It raises ``ImportError`` (naming
``websockets``) where uvicorn finds no WebSocket implementation (without one it answers every
upgrade with 404), so ``serve`` refuses to start rather than serve a speaker's page that can
never connect. Two guards that
``server.serve`` puts around the app, so that idle or slow sockets never use up what viewers,
speakers and health checks need:

* ``head_guarded_h11(head_timeout_s, max_pending)``: uvicorn's h11 protocol with a bound on
  reading a request head, as nginx's ``client_header_timeout`` and Apache's ``mod_reqtimeout``
  bound it. A connection that has not sent a complete head (request line and headers) within
  ``head_timeout_s`` of its first byte being awaited (a new connection, or the next request on a
  kept-alive one) is closed; and at most ``max_pending`` connections may be reading a head at
  once: a new one beyond that closes the one that has waited longest (a real client sends its
  head within milliseconds, so only the slowest are ever closed). A head costs nothing else.
* ``InFlightLimit(app, limit)``: at most ``limit`` requests and WebSockets past their head at once
  (uvicorn's own ``limit_concurrency`` counts every open socket, heads still being read
  included, so a few hundred idle sockets made ``/health`` answer 503); beyond it an HTTP request
  gets 503 ``busy`` and a WebSocket is closed with 1013 (try again later). ``/health`` is never
  counted nor refused: a load balancer must see a live replica as live.
"""

from __future__ import annotations

import collections
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .events import error_event

DEFAULT_HEAD_TIMEOUT_S = 10.0
DEFAULT_MAX_PENDING_HEADS = 256
EXEMPT_PATHS = frozenset({"/health"})


def websocket_protocol() -> type:
    """uvicorn's WebSocket protocol class, with the fix of the module docstring where it applies;
    ``ImportError`` where there is none."""
    from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol

    if AutoWebSocketsProtocol is None:
        raise ImportError(
            "no WebSocket library for uvicorn (websockets or wsproto): pip install 'mlx-ssbd[serve]'",
            name="websockets",
        )
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
        from websockets.exceptions import InvalidState
    except ImportError:  # an older uvicorn: its choice has no such path
        return AutoWebSocketsProtocol
    if AutoWebSocketsProtocol is not WebSocketsSansIOProtocol:
        return AutoWebSocketsProtocol

    class ClosingSafeWebSockets(WebSocketsSansIOProtocol):
        def send_receive_event_to_app(self) -> None:
            try:
                super().send_receive_event_to_app()
            except InvalidState:  # its 1007 close on a connection already closing: the close goes on
                pass

    return ClosingSafeWebSockets


def head_guarded_h11(
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S, max_pending: int = DEFAULT_MAX_PENDING_HEADS
):
    """A subclass of uvicorn's ``H11Protocol`` (for ``uvicorn.Config(http=...)``) with the head
    bounds of the module docstring; each call makes a class with its own count of waiting heads,
    one per server."""
    if head_timeout_s <= 0 or max_pending < 1:
        raise ValueError(f"need head_timeout_s > 0 and max_pending >= 1, got {head_timeout_s}, {max_pending}")
    waiting: collections.OrderedDict[HeadGuardedH11, None] = collections.OrderedDict()

    class HeadGuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            self._head_timer = None
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._head_done()  # the head is complete: a request (or an upgrade) is under way

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()  # kept alive: the next head has the same bound

        def connection_lost(self, exc) -> None:
            self._head_done()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            if self._head_timer is not None:
                return
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_late)
            waiting[self] = None
            while len(waiting) > max_pending:
                oldest = next(iter(waiting))
                oldest._close_waiting()

        def _head_done(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            waiting.pop(self, None)

        def _head_late(self) -> None:
            self._head_timer = None
            self._close_waiting()

        def _close_waiting(self) -> None:
            self._head_done()
            if not self.transport.is_closing():
                self.transport.close()

    return HeadGuardedH11


class InFlightLimit:
    """ASGI middleware: at most ``limit`` HTTP requests and WebSockets at once (module docstring)."""

    def __init__(self, app, limit: int):
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            await _refuse(scope, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


async def _refuse(scope, send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1013, "reason": "server busy: try again later"})
        return
    body = json.dumps(error_event("busy", "too many requests at once: try again later")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
        }
    )
    await send({"type": "http.response.body", "body": body})
