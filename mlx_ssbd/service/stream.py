"""``WS /v1/stream``: one live caption session per WebSocket (protocol version 1).

Contract: ``serve_stream(ws, scheduler, speech, options)`` runs one connection to its end and
never raises. The session is opened at once (``session.created``) or refused (``busy`` and close
1013; ``shutting_down`` and close 1001; ``store_unavailable`` and close 1011). Then two tasks run
side by side: the *receiver* parses client frames (``protocol``) and hands them to the scheduler
(text) or the ``speech.SpeechWorker`` (binary PCM); the *sender* sends the events the scheduler
posts into the connection's ``outbox.Outbox``. A bad frame gets an ``error`` event and changes
nothing. A session that speech starts, whose client named no method or β, runs the method for
speech (``methods.SPEECH_METHOD``) and says so (``session.updated``) before its first caption.

``session.resume`` (before any source) makes the connection's session go on as a stored one
(``Scheduler.resume``): ``session.resumed``, or an ``error`` (``not_found``, ``session_live``,
``store_unavailable``) and the connection's own session goes on. The connection ends when:

* the client sends ``session.close`` (or stays silent: no first message within
  ``handshake_timeout_s``, no valid message for ``idle_timeout_s``): the open caption is
  committed, ``session.closed`` is sent, the socket closes with 1000;
* the server ends the session (the drain: 1001; the session failed: 1011) after
  ``session.closed``;
* the client reads too slowly (the outbox overflows, or one event waits ``SEND_TIMEOUT_S`` to
  be sent), or sends more than ``max_bad_messages`` bad messages within
  ``BAD_MESSAGE_WINDOW_S``: its session is dropped and the socket closed with 1008 and the reason;
* the client goes away, even after its ``session.close`` while its last captions are translated
  (the socket is read to the end): its session is dropped (queued sources and the update under way
  too) and detached, so it stops using the model at once and may be resumed.

This module never touches MLX: the scheduler's calls used here are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import replace

from starlette.websockets import WebSocket, WebSocketDisconnect

from ..live.methods import SPEECH_METHOD
from . import events, protocol
from .options import BAD_MESSAGE_WINDOW_S, ServiceOptions
from .outbox import Outbox, Overflow
from .protocol import CloseMessage, ProtocolError, ResumeMessage, SessionUpdate, SourceMessage
from .scheduler import Scheduler
from .speech import SpeechWorker
from .store import NotResumable
from .works import Busy

log = logging.getLogger(__name__)
CLOSE_CODES = {"closed": 1000, "idle": 1000, "shutdown": 1001, "error": 1011}
BUSY_CLOSE_CODE = 1013  # "try again later"
POLICY_CLOSE_CODE = 1008  # policy violation: the client does not read its events, or floods junk
SEND_TIMEOUT_S = 30.0  # one event's send waiting this long: the client does not read
CLOSE_TIMEOUT_S = 5.0  # a close waits for the socket's write buffer too
TASKS_END_S = 1.0  # the receiver and sender, cancelled, are waited for this long at most


class Misbehaving(Exception):
    """The client broke a rule that ends its connection (too many bad messages)."""


async def serve_stream(
    ws: WebSocket, scheduler: Scheduler, speech: SpeechWorker, options: ServiceOptions
) -> None:
    await ws.accept()
    loop, sending = asyncio.get_running_loop(), []  # the sender task, once started

    def stop_sending() -> None:  # the reader is too slow: the sender may be blocked in a send that never ends
        for task in sending:
            task.cancel()

    outbox = Outbox(options.max_outbox, on_overflow=stop_sending)
    try:
        session = await asyncio.to_thread(
            scheduler.open, lambda event: loop.call_soon_threadsafe(outbox.put, event)
        )
    except Busy as busy:
        await _refuse(
            ws,
            "shutting_down" if busy.shutdown else "busy",
            str(busy),
            1001 if busy.shutdown else BUSY_CLOSE_CODE,
        )
        return
    except Exception as error:
        log.error("a session could not be opened: %s", error)
        await _refuse(ws, "store_unavailable", f"the transcript store is unavailable: {error}", 1011)
        return
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await ws.send_json(
            events.settings_event(
                "session.created",
                session.id,
                session.settings,
                scheduler.loaded.name,
                resume_token=session.resume_token,
            )
        )
    receiver = asyncio.create_task(_receive(ws, session, scheduler, speech, options, outbox))
    sender = asyncio.create_task(_send_events(ws, outbox))
    sending.append(sender)
    await asyncio.wait({receiver, sender}, return_when=asyncio.FIRST_COMPLETED)
    if receiver.done() and receiver.exception() is None:
        # The client closed the session: its last commits, then session.closed. The socket is still
        # read meanwhile, so a client that goes away is noticed at once and its session dropped.
        watcher = asyncio.create_task(_until_gone(ws))
        await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        watcher.cancel()
        watcher.add_done_callback(_retrieve)
    receiver.cancel()
    if outbox.overflowed:
        ending = Overflow(f"too slow: more than {outbox.limit} events waiting to be read")
    elif receiver.done() and not receiver.cancelled() and isinstance(receiver.exception(), Misbehaving):
        ending = receiver.exception()
    else:
        ending = sender.exception() if sender.done() else WebSocketDisconnect(1006)
    if ending is None:  # session.closed was sent
        code, reason = CLOSE_CODES.get(session.reason, 1000), ""
    else:  # the client reads too slowly, misbehaves or went away: its session is dropped
        sender.cancel()
        speech.drop(session)
        scheduler.discard(session)
        policy = isinstance(ending, (Overflow, Misbehaving))
        code, reason = (POLICY_CLOSE_CODE, str(ending)) if policy else (None, "")
    outbox.close()
    await asyncio.wait({receiver, sender}, timeout=TASKS_END_S)  # cancelled: they end at once, or are left
    for task in (receiver, sender):
        task.add_done_callback(_retrieve)  # their exceptions were handled above (or do not matter now)
    if code is not None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(ws.close(code=code, reason=reason[:120]), CLOSE_TIMEOUT_S)


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


async def _until_gone(ws: WebSocket) -> None:
    """Read (and ignore) frames until the client goes away."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass


async def _refuse(ws: WebSocket, code: str, message: str, close_code: int) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await ws.send_json(events.error_event(code, message))
        await ws.close(code=close_code)


async def _send_events(ws: WebSocket, outbox: Outbox) -> None:
    """Send queued events in order until ``session.closed``; raises ``Overflow`` for a slow
    reader, ``WebSocketDisconnect`` when the client is gone."""
    while True:
        event = await outbox.get()
        try:
            await asyncio.wait_for(ws.send_json(event), SEND_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise Overflow(f"too slow: an event waited {SEND_TIMEOUT_S:g} s to be sent") from None
        except (RuntimeError, OSError):
            raise WebSocketDisconnect(1006) from None
        if event["type"] == "session.closed":
            return


async def _receive(
    ws: WebSocket,
    session,
    scheduler: Scheduler,
    speech: SpeechWorker,
    options: ServiceOptions,
    outbox: Outbox,
) -> None:
    """Read client frames until ``session.close`` or silence; raises ``WebSocketDisconnect``, or
    ``Misbehaving``."""
    close = lambda: speech.end(session) if session.input == "audio" else scheduler.close(session)
    heard = False  # a valid message came
    last = time.monotonic()
    bad: deque[float] = deque()  # when the recent bad messages came
    while True:
        handshake = not heard and options.handshake_timeout_s < options.idle_timeout_s
        wait = options.handshake_timeout_s if handshake else options.idle_timeout_s
        try:
            frame = await asyncio.wait_for(ws.receive(), timeout=max(0.0, last + wait - time.monotonic()))
        except asyncio.TimeoutError:
            code, what = (
                ("handshake_timeout", "no first message in")
                if handshake
                else ("idle_timeout", "no message for")
            )
            outbox.put(events.error_event(code, f"{what} {wait:g} s; the session is closed"))
            session.reason = "idle"
            close()
            return
        if frame["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(frame.get("code", 1000))
        try:
            error, closes = await _handle(frame, session, scheduler, speech, options, outbox)
        except Exception:
            log.exception("session %s: a client message could not be handled", session.id)
            error, closes = (
                events.error_event(
                    "internal_error", "this message could not be handled (an error on the server, in its log)"
                ),
                False,
            )
        if error is not None:
            outbox.put(error)
            now = time.monotonic()
            bad.append(now)
            while bad[0] < now - BAD_MESSAGE_WINDOW_S:
                bad.popleft()
            if len(bad) > options.max_bad_messages:
                raise Misbehaving(
                    f"more than {options.max_bad_messages} bad messages in {BAD_MESSAGE_WINDOW_S:g} s"
                )
            continue
        heard, last = True, time.monotonic()
        if closes:
            close()
            return


async def _handle(
    frame: dict, session, scheduler: Scheduler, speech: SpeechWorker, options: ServiceOptions, outbox: Outbox
) -> tuple[dict | None, bool]:
    """Act on one client frame: ``(the error event it gets or None, whether it closes the session)``."""
    raw = frame.get("text")
    if raw is None:
        data = frame.get("bytes") or b""
        if (error := _audio_error(data, session, speech, options)) is not None:
            return error, False
        if not session.started and not session.method_chosen:
            _take_speech_method(session, outbox, scheduler.loaded.name)
        session.begin("audio")
        if not speech.feed(session, data):
            return events.error_event(
                "audio_backlog",
                f"more than {options.max_audio_s:g} s of audio wait to be "
                "recognised; this frame is dropped (send audio in real time)",
            ), False
        return None, False
    try:
        message = protocol.parse(raw, options.limits)
    except ProtocolError as error:
        return events.error_event(error.code, str(error)), False
    if isinstance(message, ResumeMessage):
        if session.started:
            return events.error_event(
                "session_active", "only a session with no source yet can resume another"
            ), False
        try:
            info = await asyncio.to_thread(scheduler.resume, session, message.session, message.resume_token)
        except NotResumable as refused:
            return events.error_event(refused.code, str(refused)), False
        except Exception as error:
            return events.error_event(
                "store_unavailable", f"the session store cannot be reached: {error}"
            ), False
        session.method_chosen = True  # the stored session's
        outbox.put(
            events.settings_event(
                "session.resumed", session.id, session.settings, scheduler.loaded.name, captions=info.captions
            )
        )
    elif isinstance(message, SessionUpdate):
        if session.started:
            return events.error_event(
                "session_active", "settings can only change before the first source.update"
            ), False
        try:
            session.settings = message.apply(session.settings)
        except ProtocolError as error:
            return events.error_event(error.code, str(error)), False
        session.method_chosen |= "method" in message.changes or "beta" in message.changes
        outbox.put(
            events.settings_event("session.updated", session.id, session.settings, scheduler.loaded.name)
        )
    elif isinstance(message, SourceMessage):
        if session.input == "audio":
            return events.error_event(
                "mixed_input", "this session is fed by speech (binary frames); source.update is refused"
            ), False
        try:
            scheduler.push(session, message)
        except Busy as busy:
            return events.error_event("backlog", str(busy)), False
    return None, isinstance(message, CloseMessage)


def _take_speech_method(session, outbox: Outbox, model: str) -> None:
    """A session that speech starts and that never named a method or β runs the method for speech
    (``methods.SPEECH_METHOD``, as ``listen`` does), and its client is told: ``session.updated``."""
    session.settings = replace(session.settings, **protocol.method_changes(SPEECH_METHOD))
    outbox.put(events.settings_event("session.updated", session.id, session.settings, model))


def _audio_error(data: bytes, session, speech: SpeechWorker, options: ServiceOptions) -> dict | None:
    """The ``error`` event a binary frame gets, or None when it is audio this session takes."""
    if len(data) > options.limits.max_message_bytes:
        return events.error_event(
            "message_too_large",
            f"audio frame of {len(data)} bytes; the limit is {options.limits.max_message_bytes}",
        )
    if session.input == "text":
        return events.error_event(
            "mixed_input", "this session is fed by source.update; binary audio is refused"
        )
    if not speech.hears(session.settings.source):
        return events.error_event(
            "unsupported_language",
            f"no speech recognizer here hears {session.settings.source}, this session's source",
        )
    return None
