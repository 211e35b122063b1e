"""The HTTP/WebSocket front of ``mlx-ssbd serve``: a Starlette app, run by uvicorn.

Contract: ``create_app(scheduler, options, speech)`` returns the ASGI app: the routes below behind a
``guard.Guard`` (the API key and the Origin check, ``options``). Routes:

* ``GET /``: the speaker's page (``web/``: plain HTML, JS and CSS, no build step): a form, then
  the microphone (an ``AudioWorklet`` sending 16 kHz PCM16), typed text or a recording streamed
  on a session's WebSocket, with what was heard and the captions live; ``?source=en&target=de``
  (``mode=mic|text|file``) preset it. Its files are under ``/static/``.
* ``GET /health``: ``{"status": "ok", "model", "replica", "sessions", "max_sessions", "completions"
  (chat completions queued or running), "viewers", "load", "push", "prefixes", "store"}``
  (``load``: the share of the last 30 s the model's thread was at work, ``meter.BusyMeter``;
  ``push``: the sessions' push targets, ``pushes.Pushes.health``; ``prefixes``: the prompt
  prefixes the sessions share, ``engine.prefixes.Prefixes.health``; ``store``:
  ``journal.Journal.health``, ``"state": "failing"`` while the transcript store cannot be written:
  a degraded replica that still serves); while the server drains, ``"status": "draining"`` with
  503 (so a proxy stops sending it sessions).
* ``GET /v1/models``: the one model, in OpenAI's list format.
* ``GET /v1/sessions``: the newest sessions of every replica sharing the store (``?limit=``, at
  most 1000): id, state (live, ended, detached), replica, captions, settings; for operators.
* ``GET /v1/sessions/{id}/transcript.json`` (``.srt``, ``.vtt``): the committed captions, from the
  transcript store (so also of ended sessions, across restarts, and of sessions that another
  replica sharing the store serves); 404 for an unknown session. JSON holds every language
  (each caption has its ``target``); SRT/VTT one: ``transcript.de.srt`` or ``?lang=de`` (default:
  the session's first target).
* ``GET /v1/sessions/{id}/events``: Server-Sent Events for viewers (``viewers``) of one language
  (``?lang=``, default the first target): the captions committed so far (after
  ``Last-Event-ID``), then the session's live events until ``session.closed``; 503 beyond
  ``max_viewers`` in all or ``max_viewers_per_session``.
* ``GET /captions/{id}``: a caption page for a browser or an OBS browser source, fed by the SSE
  (``?lang=`` as there); it may be framed (an overlay on a web page), the speaker's page may not.
* ``GET /watch/{id}``: the viewer page for phones, and ``GET /v1/sessions/{id}/qr.png`` (``.svg``)
  the QR code of its link (``watch``).
* ``POST /v1/chat/completions``: OpenAI-compatible, with Predicted Outputs (``chat_http``).
* ``WS /v1/stream``: live caption sessions, protocol version 1 (``stream``, ``protocol``).

The session list and the transcripts are served by ``transcripts``. A store that cannot be read
answers 503 (``store_unavailable``); the server goes on. The app never touches MLX: it hands
messages to the ``Scheduler`` (thread-safe calls) and sends the events the scheduler posts back
through a bounded queue per reader (``outbox``).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from ..live.methods import METHODS, SPEECH_METHOD
from . import events
from .chat import ChatEngine
from .chat_http import chat_route
from .guard import Guard
from .options import ServiceOptions
from .protocol import STREAM_METHODS, Settings
from .scheduler import Scheduler
from .speech import SpeechWorker, speech_worker
from .stream import serve_stream
from .transcripts import Transcripts, store_unavailable
from .viewers import Viewers, viewer_response
from .watch import Watch

log = logging.getLogger(__name__)
CAPTION_PAGE = Path(__file__).parent / "captions.html"
WEB = Path(__file__).parent / "web"  # the speaker's page and its script, style and audio worklet
# Content-Security-Policy: scripts and styles from this server only, connections to it only
# ('self' covers its own ws:/wss:); the speaker's page (microphone, Start) may not be framed.
PAGE_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
CAPTION_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'"
)


def create_app(
    scheduler: Scheduler, options: ServiceOptions = ServiceOptions(), speech: SpeechWorker | None = None
):
    """The ASGI app (a Starlette app behind the ``guard.Guard``); see the module docstring.
    ``speech``: the worker that recognises the sessions' audio (one is made if not given; the
    caller that gives it stops it)."""
    options.check()
    model = scheduler.loaded.name
    speech = speech or speech_worker(scheduler, options)
    viewers = Viewers(options.max_viewers, options.max_viewers_per_session)
    caption_page = CAPTION_PAGE.read_text(encoding="utf-8")
    page_config = json.dumps(
        {
            "model": model,
            "methods": {name: METHODS[name].beta for name in STREAM_METHODS},
            "method": Settings.method,
            "speech_method": SPEECH_METHOD,
            "beta": Settings.beta,
            "api_key_required": options.api_key is not None,
        }
    )
    speaker_page = (
        (WEB / "speaker.html")
        .read_text(encoding="utf-8")
        .replace("{{CONFIG}}", page_config.replace("</", "<\\/"))
    )

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(speaker_page, headers={"Content-Security-Policy": PAGE_POLICY})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "status": "draining" if scheduler.draining else "ok",
                "model": model,
                "replica": scheduler.store.replica if scheduler.store is not None else None,
                "sessions": scheduler.open_sessions,
                "max_sessions": scheduler.max_sessions,
                "completions": scheduler.completions,
                "viewers": viewers.total,
                "load": scheduler.meter.snapshot(),
                "push": scheduler.pushes.health(),
                "prefixes": scheduler.prefixes.health(),
                "store": scheduler.journal.health() if scheduler.store is not None else None,
            },
            status_code=503 if scheduler.draining else 200,
        )

    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "mlx-ssbd"}]}
        )

    async def stream(ws: WebSocket) -> None:
        await serve_stream(ws, scheduler, speech, options)

    transcripts = Transcripts(scheduler)
    watch = Watch(transcripts, CAPTION_POLICY)

    async def viewer_events(request: Request) -> Response:
        sid = request.path_params["sid"]
        try:
            targets = await asyncio.to_thread(transcripts.targets_of, sid)
        except Exception as error:
            return store_unavailable(error)
        if targets is None:
            return JSONResponse(events.error_event("not_found", f"no session {sid[:80]!r}"), status_code=404)
        if isinstance(lang := transcripts.language(request, targets), Response):
            return lang
        if (refusal := viewers.enter(sid)) is not None:
            return JSONResponse(events.error_event("too_many_viewers", refusal), status_code=503)
        return viewer_response(scheduler, sid, viewers, options, lang, request.headers.get("last-event-id"))

    def captions(request: Request) -> Response:
        if isinstance(found := transcripts.page_language(request), Response):
            return found
        sid, _, lang = found
        return HTMLResponse(
            caption_page.replace("{{EVENTS}}", html.escape(f"/v1/sessions/{sid}/events?lang={lang}")).replace(
                'lang="en"', f'lang="{html.escape(lang)}"'
            ),
            headers={"Content-Security-Policy": CAPTION_POLICY},
        )

    chat_engine: list[ChatEngine] = []  # built on the model's thread at the first request

    def complete(request, on_text=None):
        """The completion's steps (``ChatEngine.rounds``), for ``Scheduler.interleave``."""
        if not chat_engine:
            chat_engine.append(ChatEngine(scheduler.loaded))
        return chat_engine[0].rounds(request, on_text)

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_route(scheduler, complete, options), methods=["POST"]),
            Route("/health", health),
            Route("/v1/models", models),
            WebSocketRoute("/v1/stream", stream),
            Route("/v1/sessions", transcripts.sessions),
            Route("/v1/sessions/{sid}/transcript.{kind}", transcripts.transcript),
            Route("/v1/sessions/{sid}/events", viewer_events),
            Route("/v1/sessions/{sid}/qr.{kind}", watch.qr),
            Route("/captions/{sid}", captions),
            Route("/watch/{sid}", watch.page),
            Route("/", index),
            Mount("/static", StaticFiles(directory=WEB)),
        ]
    )
    app.router.redirect_slashes = False  # its redirect would name whatever Host the request gave
    return Guard(
        app,
        api_key=options.api_key,
        allowed_origins=options.allowed_origins,
        allowed_hosts=options.allowed_hosts,
    )
