"""A real ``mlx-ssbd serve`` for tests, and what its clients send.

``server(model_dir, store, *args)`` starts one on a free loopback port and always stops it (by its
own pid; if the test run itself is killed, the kernel stops it: ``children``); ``session_events``
runs one WebSocket session; ``source`` builds a ``source.update``; ``alone`` is the commit one
translator gives alone (the reference for a served session).
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

from mlx_ssbd import method_config
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.service.scheduler import DEFAULT_DRAIN_S

import websockets
from children import ends_with_us

SENTENCE = "so today I want to talk about the new rules"
# SIGTERM finishes every session (at most the drain's bound), then closes the sockets
EXIT_S = DEFAULT_DRAIN_S + 30


@contextlib.contextmanager
def server(model_dir, store, *args, log=None):
    """``mlx-ssbd serve`` on a free port; yields its base URL and process; always stopped
    (SIGTERM, which must exit cleanly; or SIGKILL where the test kills it itself). ``store``: a
    SQLite path or a PostgreSQL URL (then ``log`` names the server's log file)."""
    # a file, not a pipe: preparing a model writes progress bars
    log = open(log or f"{store}.server.log", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_ssbd_cli",
            "serve",
            "--model",
            model_dir,
            "--port",
            "0",
            "--store",
            str(store),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        # a crash (a fatal signal) writes every thread's Python stack into the log
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        preexec_fn=ends_with_us,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), open(log.name).read()
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(timeout=EXIT_S)
                assert status == 0, f"exit status {status}\n" + open(log.name).read()
            finally:
                if proc.poll() is None:
                    proc.kill()
        log.close()


def ws_url(base):
    return base.replace("http", "ws", 1) + "/v1/stream"


async def session_events(base, messages, *, until="session.closed"):
    """Send ``messages`` on a new session; return every event up to ``until``. A message
    ``("await", kind)`` waits for an event of that kind before the next is sent."""
    events = []
    async with websockets.connect(ws_url(base)) as ws:
        events.append(json.loads(await ws.recv()))
        for message in messages:
            if isinstance(message, tuple):
                while events[-1]["type"] != message[1]:
                    events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=60)))
                continue
            await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
        while not events or events[-1]["type"] != until:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=60)))
    return events


def source(text, final=False, segment="s1"):
    return {"type": "source.update", "segment": segment, "text": text, "final": final}


def alone(model_dir, text, target="de", **settings):
    """The commit of ``text`` by one translator alone (the reference for a served session)."""
    loaded = load_model(model_dir)
    tr = loaded.translator(
        target, config=method_config(settings.get("method", "ssbd"), beta=settings.get("beta", 0.2))
    )
    return tr.update(text, final=True).output
