"""One sender per platform: how a caption line goes out, and what each answer means.

Contract: a sender's ``send(line)`` (a coroutine, run on the push loop only) makes one attempt
to deliver one ``Line`` and returns a ``Verdict``: ``OK``, ``RETRY`` (a timeout, a dropped
connection, 408/429/5xx), ``HOLD`` (the destination is not live yet: a Zoom meeting that has not
started, an OBS that is not streaming; keep the captions and try again) or ``STOP`` (a bad or
expired token, a wrong password: nothing more goes there). It never raises for a network fault.
A retry repeats the same sequence number; a number is used up only by an ``OK``.

The rules followed (docs/push.md cites the documents):

* Zoom: ``POST URL&seq=N&lang=de-DE``, ``text/plain; charset=utf-8``; before the first post,
  ``GET .../closedcaption/seq`` (same query) gives the last accepted ``seq``. 400: the meeting
  has not started (hold); 403: the token is bad or expired (stop).
* YouTube Live: ``POST URL&seq=N``, a body of the time the words were spoken (UTC,
  ``YYYY-MM-DDTHH:MM:SS.mmm``), a newline, the caption line, a newline; ``seq`` counts from 1.
* Teams CART: Zoom's protocol (the CART link takes what a Zoom captioner sends; ``lang`` as a
  BCP 47 tag), lines of at most 120 characters.
* OBS (obs-websocket 5, through ``simpleobsws``): ``SendStreamCaption`` with the line in CEA-608's
  characters; status 501 (not streaming) holds; a closed socket reconnects; close code 4009
  (authentication failed) stops.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlencode, urlsplit, urlunsplit

from .spec import BCP47_LANGS, PLATFORMS, ZOOM_LANGS, PushSpec, redact
from .text import cea608, cut_lines

OBS_AUTH_FAILED = 4009  # obs-websocket's close code for a wrong password
OBS_NOT_STREAMING = 501  # obs-websocket's RequestStatus OutputNotRunning


class Verdict(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    HOLD = "hold"
    STOP = "stop"


@dataclass(frozen=True)
class Line:
    """One line of a committed caption, as a target sends it."""

    lang: str
    text: str
    spoken_at: float  # Unix time when its words were spoken (YouTube's timestamp)
    caption: int  # the caption's number in its language


def lines_for(spec: PushSpec, text: str) -> list[str]:
    """A caption's text cut into the lines ``spec``'s platform takes."""
    if spec.platform == "obs":
        text = cea608(text)
    return cut_lines(text, PLATFORMS[spec.platform].line_chars)


def with_query(url: str, **params) -> str:
    """``url`` with ``params`` added to its query."""
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit(parts._replace(query=query))


def youtube_time(unix: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmm`` in UTC, as YouTube's caption ingestion takes it."""
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def http_verdict(platform: str, status: int) -> tuple[Verdict, str]:
    """What an HTTP status means for ``platform``, and a few words for the report."""
    if 200 <= status < 300:
        return Verdict.OK, "delivered"
    if status in (408, 429) or status >= 500:
        return Verdict.RETRY, f"HTTP {status}"
    if status == 400 and platform in ("zoom", "teams"):
        return Verdict.HOLD, "HTTP 400: the meeting has not started"
    if status in (401, 403):
        return Verdict.STOP, f"HTTP {status}: the URL's token is wrong or expired (copy a new one)"
    return Verdict.STOP, f"HTTP {status}: refused"


class HttpSender:
    """A platform that takes captions as HTTP posts (``client``: an ``httpx.AsyncClient``); a
    subclass says what a post is (``request``) and, where the platform can tell, from which number
    to go on (``last_seq``)."""

    # the last sequence number the platform accepted: known from the start (none yet), or asked
    start_seq: int | None = 0

    def __init__(self, spec: PushSpec, client, timeout_s: float):
        self.spec, self.client, self.timeout_s = spec, client, timeout_s
        self.seq = self.start_seq

    def request(self, line: Line, seq: int) -> tuple[str, str]:
        """The URL and body of the post that carries ``line`` as number ``seq``."""
        raise NotImplementedError

    async def last_seq(self) -> tuple[Verdict, str]:
        """Ask the platform for its last accepted number, into ``self.seq``."""
        raise NotImplementedError

    async def send(self, line: Line) -> tuple[Verdict, str]:
        import httpx

        try:
            if self.seq is None:
                verdict, detail = await self.last_seq()
                if verdict is not Verdict.OK:
                    return verdict, detail
            url, body = self.request(line, self.seq + 1)
            response = await self.client.post(
                url,
                content=body.encode("utf-8"),
                headers={"Content-Type": "text/plain; charset=utf-8"},
                timeout=self.timeout_s,
            )
        except httpx.TimeoutException:
            return Verdict.RETRY, f"no answer in {self.timeout_s:g} s"
        except httpx.HTTPError as error:  # connection refused, reset, DNS: the message names no query
            return Verdict.RETRY, f"{type(error).__name__} at {redact(self.spec.url)}"
        verdict, detail = http_verdict(self.spec.platform, response.status_code)
        if verdict is Verdict.OK:
            self.seq += 1
        return verdict, detail

    async def close(self) -> None:
        pass


class ZoomSender(HttpSender):
    """Zoom's caption API: ``&seq=N&lang=de-DE``; the last ``seq`` from ``GET .../closedcaption/seq``."""

    start_seq = None
    langs = ZOOM_LANGS

    def request(self, line: Line, seq: int) -> tuple[str, str]:
        return with_query(self.spec.url, seq=seq, lang=self.langs[line.lang]), line.text

    async def last_seq(self) -> tuple[Verdict, str]:
        parts = urlsplit(self.spec.url)
        url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/seq"))
        response = await self.client.get(url, timeout=self.timeout_s)
        verdict, detail = http_verdict(self.spec.platform, response.status_code)
        if verdict is Verdict.OK:
            try:
                self.seq = int(response.text.strip() or 0)
            except ValueError:
                return Verdict.RETRY, f"the seq query answered {response.text[:40]!r}, not a number"
        return verdict, detail


class TeamsSender(ZoomSender):
    """Teams' CART link: Zoom's posts with BCP 47 tags, counted from 1 (no seq query is documented)."""

    start_seq = 0
    langs = BCP47_LANGS


class YouTubeSender(HttpSender):
    """YouTube Live's caption ingestion: ``&seq=N``, the spoken time (UTC) and the line as the body."""

    def request(self, line: Line, seq: int) -> tuple[str, str]:
        return with_query(self.spec.url, seq=seq), f"{youtube_time(line.spoken_at)}\n{line.text}\n"


class ObsSender:
    """OBS Studio through obs-websocket 5: ``SendStreamCaption`` for each line."""

    def __init__(self, spec: PushSpec, client, timeout_s: float):  # (client: unused, OBS has its own socket)
        parts = urlsplit(spec.url)
        self.spec, self.timeout_s = spec, timeout_s
        self.address = f"{parts.scheme}://{parts.hostname}:{parts.port or 4455}"
        self.password = parts.password or ""
        self.client = None

    async def _connect(self) -> tuple[Verdict, str]:
        import simpleobsws

        self.client = simpleobsws.WebSocketClient(url=self.address, password=self.password)
        try:
            await self.client.connect()
            identified = await self.client.wait_until_identified(timeout=self.timeout_s)
        except Exception as error:  # refused, reset, a handshake websockets rejects
            return Verdict.RETRY, f"cannot connect to OBS at {self.address}: {type(error).__name__}"
        if identified:
            return Verdict.OK, "connected"
        ws = self.client.ws
        if ws is not None and ws.close_code == OBS_AUTH_FAILED:
            return Verdict.STOP, "OBS refused the password (obs-websocket's Server Settings)"
        return Verdict.RETRY, "OBS did not identify the connection"

    async def send(self, line: Line) -> tuple[Verdict, str]:
        import simpleobsws

        if self.client is None or not self.client.is_identified():
            await self.close()
            verdict, detail = await self._connect()
            if verdict is not Verdict.OK:
                return verdict, detail
        try:
            response = await self.client.call(
                simpleobsws.Request("SendStreamCaption", {"captionText": line.text}),
                timeout=self.timeout_s,
            )
        except simpleobsws.MessageTimeout:
            return Verdict.RETRY, f"OBS did not answer in {self.timeout_s:g} s"
        except Exception as error:  # the socket closed under the call
            await self.close()
            return Verdict.RETRY, f"the connection to OBS dropped ({type(error).__name__})"
        if response.ok():
            return Verdict.OK, "delivered"
        status = response.requestStatus
        if status.code == OBS_NOT_STREAMING:
            return Verdict.HOLD, "OBS is not streaming (stream captions go out with a stream)"
        return Verdict.STOP, f"OBS refused the caption: {status.code} {status.comment or ''}".strip()

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await client.disconnect()
            except Exception:  # already gone
                pass


SENDERS = {"zoom": ZoomSender, "youtube": YouTubeSender, "teams": TeamsSender, "obs": ObsSender}


def sender_for(spec: PushSpec, client, timeout_s: float):
    """The sender of ``spec``'s platform (``client``: the HTTP client the HTTP platforms share)."""
    return SENDERS[spec.platform](spec, client, timeout_s)
