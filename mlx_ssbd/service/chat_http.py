"""``POST /v1/chat/completions``: OpenAI's chat completions over HTTP, run by the scheduler.

Contract: ``chat_route(scheduler, complete, options)`` returns the Starlette endpoint.
``complete(request, on_text)`` gives a completion's steps (``chat.ChatEngine.rounds``) for
``Scheduler.interleave``. The body must be ``application/json`` (415 otherwise: a browser's
text/plain POST is refused) of at most ``options.max_chat_bytes`` (413), strict JSON (400); the
request is checked by ``chat.parse_request`` (400, OpenAI's error shape). Beyond the scheduler's
``max_calls`` completions queued or running: 429; while the server shuts down: 503. A streamed
answer (``"stream": true``) is Server-Sent Events, a chunk per piece of text. A client that goes
away, streamed or not, abandons its completion at the next model call (a prompt chunk or a
decoding step): no model time is spent on an answer nobody reads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from . import chat, events, fields
from .events import sse
from .fields import ProtocolError
from .options import ServiceOptions
from .scheduler import Scheduler
from .works import Busy


class _TooLarge(Exception):
    pass


def chat_route(scheduler: Scheduler, complete, options: ServiceOptions):
    model = scheduler.loaded.name

    async def chat_completions(request: Request) -> Response:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return refusal(
                "unsupported_media_type", f"the body must be application/json, not {kind[:60]!r}", 415
            )
        try:
            body = fields.loads(await _read(request, options.max_chat_bytes))
            parsed = chat.parse_request(body, max_tokens=options.max_tokens)
            if parsed.stream:
                return await _stream_chat(parsed, complete, scheduler, model)
            result = await _answer(request, parsed, complete, scheduler)
        except chat.Cancelled:  # nobody is there to read an answer
            return Response(status_code=499)
        except _TooLarge:
            return refusal("request_too_large", f"the body is over {options.max_chat_bytes} bytes", 413)
        except ProtocolError as error:
            return refusal(error.code, str(error), 400)
        except Busy as busy:
            return refusal(
                "shutting_down" if busy.shutdown else "rate_limit_exceeded",
                str(busy),
                503 if busy.shutdown else 429,
            )
        return JSONResponse(chat.response(parsed, result, model))

    return chat_completions


async def _read(request: Request, limit: int) -> bytes:
    """The body, refused (``_TooLarge``) as soon as it is over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise _TooLarge
    return bytes(body)


DISCONNECT_POLL_S = 0.5  # how often a waiting non-streamed completion checks that its client is there


def _abandoned_when(gone: threading.Event, steps: Generator):
    """``steps`` (a completion's, ``ChatEngine.rounds``), ended with ``chat.Cancelled`` at the
    first step after ``gone`` is set; otherwise their return value."""
    while True:
        if gone.is_set():
            steps.close()
            raise chat.Cancelled
        try:
            next(steps)
        except StopIteration as end:
            return end.value
        yield


async def _answer(request: Request, parsed: chat.ChatRequest, complete, scheduler: Scheduler):
    """A non-streamed completion's ``ChatResult``; raises ``chat.Cancelled`` once its client is gone."""
    gone = threading.Event()
    done = asyncio.wrap_future(scheduler.interleave(lambda: _abandoned_when(gone, complete(parsed))))
    while not done.done():
        await asyncio.wait({done}, timeout=DISCONNECT_POLL_S)
        if not done.done() and await request.is_disconnected():
            gone.set()
    return done.result()


async def _stream_chat(parsed: chat.ChatRequest, complete, scheduler: Scheduler, model: str) -> Response:
    """A streamed chat completion: a chunk per piece of text as the model's thread decides it.

    Raises ``ProtocolError`` (a 400, before anything is streamed) when the request is refused,
    ``Busy`` when the scheduler cannot take it."""
    loop, pieces = asyncio.get_running_loop(), asyncio.Queue()
    gone = threading.Event()

    def on_text(piece: str) -> None:  # the model's thread
        if gone.is_set():
            raise chat.Cancelled
        loop.call_soon_threadsafe(pieces.put_nowait, piece)

    done = asyncio.wrap_future(scheduler.interleave(lambda: _abandoned_when(gone, complete(parsed, on_text))))

    def finished(future) -> None:
        future.cancelled() or future.exception()  # read here, so a Cancelled is never "unretrieved"
        pieces.put_nowait(None)

    done.add_done_callback(finished)
    first = await pieces.get()  # "" once accepted; None: refused (or failed) before any text
    if first is None:
        done.result()  # raises the ProtocolError, answered with a 400

    async def lines():
        try:
            yield sse(chat.chunk(parsed, model, {"role": "assistant", "content": ""}))
            while (piece := await pieces.get()) is not None:
                if piece:
                    yield sse(chat.chunk(parsed, model, {"content": piece}))
            try:
                result = done.result()
            except Exception as error:  # headers are sent: the error goes in the stream, as OpenAI's do
                yield sse(
                    {
                        "error": {
                            "message": f"the completion failed: {error}",
                            "type": "server_error",
                            "code": "completion_failed",
                        }
                    }
                )
                return
            yield sse(chat.chunk(parsed, model, {}, result.finish_reason))
            if parsed.include_usage:
                yield sse(chat.usage_chunk(parsed, result, model))
            yield "data: [DONE]\n\n"
        finally:
            gone.set()

    return StreamingResponse(lines(), media_type="text/event-stream")


def refusal(code: str, message: str, status: int) -> JSONResponse:
    """An HTTP error response with an OpenAI-shaped body (`events.openai_error`)."""
    return JSONResponse(events.openai_error(code, message), status_code=status)
