"""Who may use the service: the Host it is reached by, an API key and a browser Origin allowlist,
checked before any route.

Contract: ``Guard(app, api_key=None, allowed_origins=(), allowed_hosts=())`` wraps an ASGI app.

* **Host** (always; every route but ``/health``, which load balancers probe by address): the
  ``Host`` header must name this machine by a loopback name (``localhost``, ``*.localhost``), an
  IP address, or a name in ``allowed_hosts`` (``"*"``: any); otherwise HTTP 400
  (``host_not_allowed``). A DNS-rebinding page (a name of the attacker's, resolved to this
  machine) can then neither use the service nor read its session list. A request without
  ``Host`` (HTTP/1.0, no browser) is not affected.

* **API key** (when set): the paths in ``PROTECTED`` (opening a session, chat completions, the
  model list, the session list) need ``Authorization: Bearer KEY``; a WebSocket may instead carry
  ``?api_key=KEY`` (browsers cannot set its headers). Without it: HTTP 401 (OpenAI's error shape,
  ``WWW-Authenticate: Bearer``), and a WebSocket is refused with a 401 before it opens. Viewer
  links of one session (``/captions/{id}``, ``/v1/sessions/{id}/...``) need only the session id,
  the capability to read that session; ``/health`` is open.
* **Headers** (every HTTP response): ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
  no-referrer``.
* **Origin** (always): a WebSocket, or a request other than GET/HEAD/OPTIONS, whose ``Origin``
  header names another host than the one it was sent to (its ``Host``) and is not in
  ``allowed_origins`` (``"*"``: any) is refused with 403, with or without the key: a web page the
  operator visits cannot drive the service (cross-site WebSocket hijacking, text/plain POSTs that
  skip the browser's preflight). Clients that send no ``Origin`` (not browsers) are not affected.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import parse_qs, urlsplit

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from .events import openai_error

PROTECTED = frozenset({"/v1/stream", "/v1/chat/completions", "/v1/models", "/v1/sessions"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Guard:
    """See the module docstring."""

    def __init__(
        self,
        app,
        *,
        api_key: str | None = None,
        allowed_origins: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
    ):
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.origins = {origin.rstrip("/").lower() for origin in allowed_origins}
        self.hosts = {host.lower().rstrip(".") for host in allowed_hosts}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            send = _with_headers(send)
        if scope["type"] in ("http", "websocket"):
            refusal = self.refusal(scope)
            if refusal is not None:
                status, code, message = refusal
                response = JSONResponse(
                    openai_error(code, message),
                    status_code=status,
                    headers={"WWW-Authenticate": "Bearer"} if status == 401 else None,
                )
                if scope["type"] == "http":
                    await response(scope, receive, send)
                else:
                    await _deny(WebSocket(scope, receive, send), response)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope) -> tuple[int, str, str] | None:
        """``(status, code, message)`` when the request is refused, else None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host")
        if host is not None and scope["path"] != "/health" and not self.host_allowed(host):
            return (
                400,
                "host_not_allowed",
                (
                    f"this server does not answer to the host {host[:100]!r}; the operator "
                    "can allow it with --allow-host"
                ),
            )
        origin = headers.get("origin")
        writes = scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS
        if writes and origin is not None and not self.origin_allowed(origin, headers.get("host", "")):
            return (
                403,
                "origin_not_allowed",
                (
                    f"requests from {origin[:100]!r} are not allowed; the operator can "
                    "allow it with --allow-origin"
                ),
            )
        if self.key is not None and scope["path"] in PROTECTED and not self.authorized(scope, headers):
            return 401, "invalid_api_key", "a valid API key is needed: Authorization: Bearer KEY"
        return None

    def host_allowed(self, host: str) -> bool:
        """``host`` (a ``Host`` header: name or address, maybe a port) names this machine."""
        try:
            parts = urlsplit("//" + host)
            name, _ = parts.hostname, parts.port  # .port raises on a malformed one
        except ValueError:  # a malformed port or brackets
            return False
        if not name:
            return False
        name = name.rstrip(".")
        if "*" in self.hosts or name in self.hosts or name == "localhost" or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)
            return True  # reached by its address: no name for a DNS-rebinding attacker to control
        except ValueError:
            return False

    def origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        return "*" in self.origins or origin in self.origins or urlsplit(origin).netloc == host.lower()

    def authorized(self, scope, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else None
        if token is None and scope["type"] == "websocket":
            token = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("api_key") or [None])[0]
        return token is not None and hmac.compare_digest(token.encode(), self.key)


SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


def _with_headers(send):
    """``send`` that adds ``SECURITY_HEADERS`` to every HTTP response: no content-type sniffing, and
    no session id leaves a page in a Referer."""

    async def sending(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
        await send(message)

    return sending


async def _deny(ws: WebSocket, response: JSONResponse) -> None:
    """Refuse a WebSocket before it opens: an HTTP response where the server can send one."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(response)
    else:
        await ws.close(code=1008)
