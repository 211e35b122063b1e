"""The HTTP/WebSocket front of ``mlx-ssbd serve``: a Starlette app, run by uvicorn.

Contract: ``create_app(scheduler, options)`` returns the ASGI app. Routes:

* ``GET /health``: ``{"status": "ok", "model", "sessions", "max_sessions"}``.
* ``GET /v1/models``: the one model, in OpenAI's list format.
* ``GET /v1/sessions/{id}/transcript.json`` (``.srt``, ``.vtt``): the committed captions, from the
  transcript store (so also of ended sessions and across restarts); 404 for an unknown session.
* ``GET /v1/sessions/{id}/events``: Server-Sent Events for viewers: the captions committed so far,
  then the session's live events until ``session.closed`` (at once for an ended session).
* ``GET /captions/{id}``: a caption page for a browser or an OBS browser source, fed by the SSE.
* ``POST /v1/chat/completions``: OpenAI-compatible, with Predicted Outputs (``chat``).
* ``WS /v1/stream``: live caption sessions, protocol version 1 (``protocol``), fed by
  ``source.update`` messages or by speech (binary PCM frames, recognised by ``speech``; one kind
  per session). A bad message gets
  an ``error`` event and the session goes on; beyond ``max_sessions`` the client gets a ``busy``
  error and the socket closes (code 1013); a client silent for ``idle_timeout_s`` gets an
  ``idle_timeout`` error and its session is closed like a ``session.close``.

The app never touches MLX: it hands messages to the ``Scheduler`` (thread-safe calls) and sends
the events the scheduler posts back through a per-connection queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..live import subtitles
from . import chat, protocol
from .chat import ChatEngine
from .protocol import CloseMessage, Limits, ProtocolError, SessionUpdate, SourceMessage
from .scheduler import Scheduler
from .speech import SpeechWorker

BUSY_CLOSE_CODE = 1013  # "try again later"


@dataclass(frozen=True)
class ServiceOptions:
    limits: Limits = Limits()
    idle_timeout_s: float = 300.0


def create_app(scheduler: Scheduler, options: ServiceOptions = ServiceOptions()) -> Starlette:
    model = scheduler.loaded.name
    speech = SpeechWorker(scheduler)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "model": model, "sessions": scheduler.open_sessions,
                             "max_sessions": scheduler.max_sessions})

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "mlx-ssbd"}]})

    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        loop, outbox = asyncio.get_running_loop(), asyncio.Queue()
        send = lambda event: loop.call_soon_threadsafe(outbox.put_nowait, event)  # noqa: E731
        session = await asyncio.to_thread(scheduler.open, send)  # it writes to the store: not on the loop
        if session is None:
            await ws.send_json(protocol.error_event(
                "busy", f"the server is serving its maximum of {scheduler.max_sessions} sessions; try again later"))
            await ws.close(code=BUSY_CLOSE_CODE)
            return
        await ws.send_json(protocol.settings_event("session.created", session.id, session.settings, model))
        sender = asyncio.create_task(_send_events(ws, outbox))
        try:
            await _receive(ws, session, scheduler, speech, options, outbox)
        except WebSocketDisconnect:
            speech.drop(session)
            scheduler.discard(session)
            sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await sender
        with contextlib.suppress(RuntimeError):
            await ws.close()

    def stored(sid: str) -> dict | None:
        return scheduler.store.session(sid) if scheduler.store is not None else None

    def known(sid: str) -> bool:
        return scheduler.find(sid) is not None or stored(sid) is not None

    # Plain (not async) handlers: Starlette runs them in its thread pool, so the SQLite reads
    # never block the event loop that carries every session's WebSocket.
    def transcript(request: Request) -> Response:
        sid, kind = request.path_params["sid"], request.path_params["kind"]
        live, info = scheduler.find(sid) is not None, stored(sid)
        if kind not in ("json", "srt", "vtt") or not (live or info):
            return JSONResponse(protocol.error_event("not_found", f"no session {sid!r} with a .{kind} transcript"),
                                status_code=404)
        captions = scheduler.store.captions(sid) if scheduler.store is not None else []
        if kind == "json":
            return JSONResponse({"session": sid, "live": live,
                                 **({"model": info["model"], "settings": info["settings"]} if info else {}),
                                 "captions": [c.to_dict() for c in captions]})
        body = subtitles.document(kind, [(c.start, c.end, c.text) for c in captions])
        return PlainTextResponse(body, media_type="text/vtt" if kind == "vtt" else "application/x-subrip")

    async def events(request: Request) -> Response:
        sid = request.path_params["sid"]
        if not await asyncio.to_thread(known, sid):
            return JSONResponse(protocol.error_event("not_found", f"no session {sid!r}"), status_code=404)
        return StreamingResponse(_viewer_events(scheduler, sid), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    def captions_page(request: Request) -> Response:
        sid = request.path_params["sid"]
        if not known(sid):
            return PlainTextResponse(f"no session {sid!r}", status_code=404)
        return HTMLResponse(CAPTION_PAGE.replace("{{EVENTS}}", f"/v1/sessions/{sid}/events"))

    chat_engine: list[ChatEngine] = []  # built on the model's thread at the first request

    def complete(request: chat.ChatRequest, on_text=None):
        """The completion's steps (``ChatEngine.rounds``), for ``Scheduler.interleave``."""
        if not chat_engine:
            chat_engine.append(ChatEngine(scheduler.loaded))
        return chat_engine[0].rounds(request, on_text)

    async def chat_completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _openai_error("invalid_json", "the body is not JSON", 400)
        try:
            parsed = chat.parse_request(body)
            if parsed.stream:
                return await _stream_chat(parsed, complete, scheduler, model)
            result = await asyncio.wrap_future(scheduler.interleave(lambda: complete(parsed)))
        except ProtocolError as error:
            return _openai_error(error.code, str(error), 400)
        return JSONResponse(chat.response(parsed, result, model))

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/health", health), Route("/v1/models", models), WebSocketRoute("/v1/stream", stream),
        Route("/v1/sessions/{sid}/transcript.{kind}", transcript), Route("/v1/sessions/{sid}/events", events),
        Route("/captions/{sid}", captions_page),
    ])


async def _viewer_events(scheduler: Scheduler, sid: str):
    """SSE lines: the committed captions so far, then live events until the session closes."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    session = scheduler.find(sid)

    def viewer(event):
        loop.call_soon_threadsafe(queue.put_nowait, event)

    if session is not None:
        session.watch(viewer)  # before the replay, so no commit falls in between
    try:
        replayed = -1
        stored = await asyncio.to_thread(scheduler.store.captions, sid) if scheduler.store is not None else []
        for caption in stored:
            yield _sse(protocol.stored_commit_event(caption))
            replayed = caption.caption
        if session is None:
            yield _sse({"type": "session.closed", "session": sid})
            return
        while True:
            event = await queue.get()
            if event["type"] == "translation.commit" and event["caption"] <= replayed:
                continue
            yield _sse(event)
            if event["type"] == "session.closed":
                return
    finally:
        if session is not None:
            session.unwatch(viewer)


async def _stream_chat(parsed: chat.ChatRequest, complete, scheduler: Scheduler, model: str) -> Response:
    """A streamed chat completion: a chunk per piece of text as the model's thread decides it.

    Raises ``ProtocolError`` (a 400, before anything is streamed) when the request is refused.
    A client that goes away stops the decoding at its next token."""
    loop, pieces = asyncio.get_running_loop(), asyncio.Queue()
    gone = threading.Event()

    def on_text(piece: str) -> None:  # the model's thread
        if gone.is_set():
            raise chat.Cancelled
        loop.call_soon_threadsafe(pieces.put_nowait, piece)

    done = asyncio.wrap_future(scheduler.interleave(lambda: complete(parsed, on_text)))

    def finished(future) -> None:
        future.cancelled() or future.exception()  # read here, so a Cancelled is never "unretrieved"
        pieces.put_nowait(None)

    done.add_done_callback(finished)
    first = await pieces.get()  # "" once accepted; None: refused (or failed) before any text
    if first is None:
        done.result()  # raises the ProtocolError, answered with a 400

    async def lines():
        try:
            yield _sse(chat.chunk(parsed, model, {"role": "assistant", "content": ""}))
            while (piece := await pieces.get()) is not None:
                if piece:
                    yield _sse(chat.chunk(parsed, model, {"content": piece}))
            try:
                result = done.result()
            except Exception as error:  # headers are sent: the error goes in the stream, as OpenAI's do
                yield _sse({"error": {"message": f"the completion failed: {error}", "type": "server_error",
                                      "code": "completion_failed"}})
                return
            yield _sse(chat.chunk(parsed, model, {}, result.finish_reason))
            if parsed.include_usage:
                yield _sse(chat.usage_chunk(parsed, result, model))
            yield "data: [DONE]\n\n"
        finally:
            gone.set()

    return StreamingResponse(lines(), media_type="text/event-stream")


def _openai_error(code: str, message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}},
                        status_code=status)


def _sse(event: dict) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


CAPTION_PAGE = (Path(__file__).parent / "captions.html").read_text(encoding="utf-8")


async def _receive(ws: WebSocket, session, scheduler: Scheduler, speech: SpeechWorker, options: ServiceOptions,
                   outbox) -> None:
    """Read client messages until ``session.close`` or idleness; raises WebSocketDisconnect."""
    close = lambda: speech.end(session) if session.input == "audio" else scheduler.close(session)  # noqa: E731
    while True:
        try:
            frame = await asyncio.wait_for(ws.receive(), timeout=options.idle_timeout_s)
        except asyncio.TimeoutError:
            outbox.put_nowait(protocol.error_event(
                "idle_timeout", f"no message for {options.idle_timeout_s:g} s; the session is closed"))
            close()
            return
        if frame["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(frame.get("code", 1000))
        raw = frame.get("text")
        if raw is None:
            if (error := _audio_error(frame.get("bytes") or b"", session, speech, options)) is not None:
                outbox.put_nowait(error)
            else:
                session.input = "audio"
                speech.feed(session, frame["bytes"])
            continue
        try:
            message = protocol.parse(raw, options.limits)
        except ProtocolError as error:
            outbox.put_nowait(protocol.error_event(error.code, str(error)))
            continue
        if isinstance(message, SessionUpdate):
            if session.started:
                outbox.put_nowait(protocol.error_event(
                    "session_active", "settings can only change before the first source.update"))
                continue
            session.settings = message.apply(session.settings)
            outbox.put_nowait(protocol.settings_event("session.updated", session.id, session.settings,
                                                      scheduler.loaded.name))
        elif isinstance(message, SourceMessage):
            if session.input == "audio":
                outbox.put_nowait(protocol.error_event(
                    "mixed_input", "this session is fed by speech (binary frames); source.update is refused"))
                continue
            session.push(message)
            scheduler.wake()
        elif isinstance(message, CloseMessage):
            close()
            return


def _audio_error(data: bytes, session, speech: SpeechWorker, options: ServiceOptions) -> dict | None:
    """The ``error`` event a binary frame gets, or None when it is audio this session takes."""
    if len(data) > options.limits.max_message_bytes:
        return protocol.error_event("message_too_large", f"audio frame of {len(data)} bytes; the limit is "
                                    f"{options.limits.max_message_bytes}")
    if session.input == "text":
        return protocol.error_event("mixed_input", "this session is fed by source.update; binary audio is refused")
    if session.settings.source != speech.language:
        return protocol.error_event("unsupported_language", f"speech input is {speech.language} only (the recognizer "
                                    f"hears {speech.language}); this session's source is {session.settings.source}")
    return None


async def _send_events(ws: WebSocket, outbox: asyncio.Queue) -> None:
    """Send queued events in order until ``session.closed``."""
    while True:
        event = await outbox.get()
        await ws.send_json(event)
        if event["type"] == "session.closed":
            return
