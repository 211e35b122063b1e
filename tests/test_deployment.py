"""Two ``mlx-ssbd serve`` replicas behind HAProxy (Debian's ``haproxy``), all on 127.0.0.1:
sessions spread by least connections; one replica killed with SIGKILL; the other replica's
sessions go on undisturbed and reconnecting clients are served."""

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import time

import httpx
import pytest
import websockets

from mlx_ssbd.service.deploy import haproxy_config
from test_service import server, source, ws_url

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def haproxy(config: str, path):
    path.write_text(config)
    subprocess.run(["haproxy", "-c", "-q", "-f", str(path)], check=True)  # the configuration is valid
    log = path.with_suffix(".log")
    with log.open("w") as err:
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(path)], stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()


def wait_healthy(url: str, log, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} never became healthy; haproxy said:\n{log.read_text()}")


async def open_sessions(url: str, n: int):
    sockets = []
    for _ in range(n):
        ws = await websockets.connect(ws_url(url))
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "session.update", "method": "rt"}))
        await ws.recv()
        sockets.append(ws)
    return sockets


async def commit_on(ws, text: str) -> str | None:
    """The commit of ``text`` on an open session, or None if its replica is gone."""
    try:
        await ws.send(json.dumps(source(text, final=True)))
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
            if event["type"] == "translation.commit":
                return event["text"]
    except websockets.ConnectionClosed:
        return None


def test_two_replicas_behind_haproxy_survive_the_loss_of_one(model_dir, tmp_path):
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(server(model_dir, tmp_path / f"r{i}.sqlite3")) for i in range(2)]
        listen = f"127.0.0.1:{free_port()}"
        config = haproxy_config(listen, [url.removeprefix("http://") for url, _ in replicas])
        log = stack.enter_context(haproxy(config, tmp_path / "haproxy.cfg"))
        proxy = f"http://{listen}"
        wait_healthy(proxy, log)

        async def scenario():
            sessions = await open_sessions(proxy, 4)
            counts = [httpx.get(url + "/health").json()["sessions"] for url, _ in replicas]
            assert counts == [2, 2]  # least connections spreads them
            before = [await commit_on(ws, "so today we talk") for ws in sessions]
            assert all(before)
            replicas[0][1].kill()  # SIGKILL one replica mid-service
            replicas[0][1].wait(timeout=10)
            after = [await commit_on(ws, "about the new rules") for ws in sessions]
            survivors = [text for text in after if text is not None]
            assert len(survivors) == 2  # the other replica's sessions are undisturbed
            assert httpx.get(replicas[1][0] + "/health").json()["sessions"] == 2
            for ws in sessions:
                await ws.close()
            # clients that reconnect (through the proxy) are served, by the surviving replica
            again = await open_sessions(proxy, 3)
            assert all([await commit_on(ws, "why we made them") for ws in again])
            for ws in again:
                await ws.close()

        asyncio.run(scenario())
