"""Run the service: uvicorn serves the app on a side thread, the scheduler owns the model on this one.

Contract: ``serve(loaded, host, port, ...)`` blocks until SIGINT/SIGTERM (or ``stop`` is set),
then stops both. The model runs only on the calling thread (MLX and threads: see
``live.session``); the uvicorn thread runs asyncio and never touches MLX. ``on_ready(url)`` is
called once the socket listens (port 0 picks a free port; the URL has the real one).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from .app import ServiceOptions, create_app
from .scheduler import DEFAULT_CAPTION_ROUNDS, DEFAULT_MAX_SESSIONS, Scheduler
from .store import TranscriptStore


def serve(loaded, *, host: str = "127.0.0.1", port: int = 8000, max_sessions: int = DEFAULT_MAX_SESSIONS,
          options: ServiceOptions = ServiceOptions(), store: TranscriptStore | None = None,
          on_ready: Callable[[str], None] | None = None, caption_rounds: int = DEFAULT_CAPTION_ROUNDS) -> None:
    import uvicorn

    scheduler = Scheduler(loaded, max_sessions=max_sessions, store=store, caption_rounds=caption_rounds)
    config = uvicorn.Config(create_app(scheduler, options), host=host, port=port, log_level="warning",
                            ws_max_size=4 * options.limits.max_message_bytes, lifespan="off")
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
    previous = {sig: signal.signal(sig, lambda *_: scheduler.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        scheduler.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.should_exit = True
        web.join(timeout=5)
