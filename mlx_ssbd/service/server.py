"""Run the service: uvicorn serves the app on a side thread, the scheduler owns the model on this one.

Contract: ``serve(loaded, host, port, ...)`` blocks until SIGINT/SIGTERM, then *drains*: new
sessions and chat requests are refused (``/health`` answers 503), every open caption is
translated, committed and written to the store, every session gets ``session.closed`` (reason
``shutdown``) and its socket closes with 1001; then it returns, within ``drain_timeout_s``. A
second signal stops at once. The model runs only on the calling thread (MLX and threads: see
``live.session``); the uvicorn thread runs asyncio and never touches MLX. ``on_ready(url)`` is
called once the socket listens (port 0 picks a free port; the URL has the real one).

Signals are acted on by a thread of their own, woken through ``signal.set_wakeup_fd`` the moment
a signal arrives, not by a Python handler on the model's thread (which runs only between two model
calls, and one call may take long). If the model's thread has not returned by the drain's end
(plus ``EXIT_GRACE_S``), or a second signal came and it has not returned within ``EXIT_GRACE_S``,
the process exits at once with status 1: every caption committed so far is already in the store.
Once the model's thread has returned, the speech worker is stopped (``speech.SpeechWorker.stop``:
the recognizer's step under way ends first); if that step does not end within
``SPEECH_STOP_S``, the process exits at once with status 1 the same way.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable

from ..live.segmenter import SegmenterConfig
from .app import create_app
from .connections import InFlightLimit, head_guarded_h11, websocket_protocol
from .options import ServiceOptions
from .scheduler import DEFAULT_CAPTION_ROUNDS, DEFAULT_DRAIN_S, DEFAULT_MAX_SESSIONS, Scheduler
from .speech import SpeechWorker, speech_worker
from .store import TranscriptStore

log = logging.getLogger(__name__)
SOCKETS_CLOSE_S = 5.0  # after the drain, the longest wait for the handlers to close their sockets
PING_S = 10.0  # WebSocket pings: a peer gone without a word (no FIN, no RST) is noticed within 2 * PING_S
EXIT_GRACE_S = 2.0  # past the drain's end (or a second signal), how long the model's thread has to return
SPEECH_STOP_S = 30.0  # how long the recognizer's last step may take once the drain is over


def serve(
    loaded,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    options: ServiceOptions = ServiceOptions(),
    store: TranscriptStore | None = None,
    on_ready: Callable[[str], None] | None = None,
    caption_rounds: int = DEFAULT_CAPTION_ROUNDS,
    drain_timeout_s: float = DEFAULT_DRAIN_S,
    segmenter: SegmenterConfig = SegmenterConfig(),
) -> None:
    import uvicorn

    scheduler = Scheduler(
        loaded, max_sessions=max_sessions, store=store, caption_rounds=caption_rounds, segmenter=segmenter
    )
    speech = speech_worker(scheduler, options)
    config = uvicorn.Config(
        InFlightLimit(create_app(scheduler, options, speech), max_sessions + options.max_viewers + 64),
        host=host,
        port=port,
        log_level="warning",
        http=head_guarded_h11(options.head_timeout_s),
        ws=websocket_protocol(),
        ws_max_size=4 * options.limits.max_message_bytes,
        lifespan="off",
        timeout_graceful_shutdown=5,
        ws_ping_interval=PING_S,
        ws_ping_timeout=PING_S,
    )
    server = uvicorn.Server(config)
    web = threading.Thread(target=server.run, name="http", daemon=True)
    web.start()
    while not server.started:
        if not web.is_alive():
            raise OSError(f"cannot listen on {host}:{port}")
        time.sleep(0.02)
    if on_ready is not None:
        bound = server.servers[0].sockets[0].getsockname()[1]
        on_ready(f"http://{host}:{bound}")

    returned = threading.Event()
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_fd = signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
    threading.Thread(
        target=_watch_signals, args=(woken, scheduler, drain_timeout_s, returned), name="signals", daemon=True
    ).start()
    try:
        scheduler.run()
        returned.set()
        _wait_for_sockets(server, time.monotonic() + SOCKETS_CLOSE_S)
    finally:
        returned.set()
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.should_exit = True
        web.join(timeout=10)
        _stop_speech(speech)


def _stop_speech(speech: SpeechWorker) -> None:
    """Stop the recognizer's thread before the interpreter exits (module docstring)."""
    if not speech.stop(SPEECH_STOP_S):
        log.error(
            "speech recognition did not stop in time (a recognizer step is still running): exiting "
            "now; every committed caption is in the store"
        )
        os._exit(1)


def _watch_signals(
    woken: int, scheduler: Scheduler, drain_timeout_s: float, returned: threading.Event
) -> None:
    """The signal thread (module docstring): the first signal drains, a second stops; past the
    deadline the process exits."""
    deadline = None
    while not returned.is_set():
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([woken], [], [], wait)
        if returned.is_set():
            return
        if not ready:  # the deadline passed with the model's thread still in a model call
            log.error(
                "the drain did not end in time (a model call is still running): exiting now; every "
                "committed caption is in the store"
            )
            os._exit(1)
        os.read(woken, 64)
        if deadline is None:
            log.warning(
                "draining: finishing every session (at most %g s; again to stop at once)", drain_timeout_s
            )
            scheduler.drain(drain_timeout_s)
            deadline = time.monotonic() + drain_timeout_s + EXIT_GRACE_S
        else:
            log.warning("second signal: stopping at once")
            scheduler.drain(drain_timeout_s)  # a second drain stops the scheduler at its next loop
            deadline = min(deadline, time.monotonic() + EXIT_GRACE_S)


def _wait_for_sockets(server, deadline: float) -> None:
    """Let the WebSocket handlers send their last events and close with 1001 (uvicorn's own
    shutdown would close the sockets still open with 1012)."""
    while time.monotonic() < deadline and any(
        "WebSocket" in type(c).__name__ or "WSProtocol" in type(c).__name__
        for c in list(server.server_state.connections)
    ):
        time.sleep(0.05)
