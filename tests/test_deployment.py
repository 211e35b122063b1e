"""Two ``mlx-ssbd serve`` replicas behind HAProxy (Debian's ``haproxy``), all on 127.0.0.1:
sessions spread by least connections; one replica killed with SIGKILL; the other replica's
sessions go on undisturbed and reconnecting clients are served."""

import asyncio
import contextlib
import json
import select
import shutil
import socket
import subprocess
import time

from mlx_ssbd.service.deploy import haproxy_config
from mlx_ssbd.service.store.scratch_postgres import MISSING

import httpx
import pytest
import websockets
from browser import MISSING as BROWSER_MISSING
from browser import chromium
from children import ends_with_us
from serving import server, source, ws_url
from waiting import until

pytestmark = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)"
)


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
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=ends_with_us,
        )
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
    def healthy() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url + "/health", timeout=1).status_code == 200
        return False

    until(
        healthy,
        timeout,
        f"{url} to be healthy",
        interval=0.1,
        detail=lambda: f"haproxy said:\n{log.read_text()}",
    )


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


async def page_lines(page, count: int, timeout_s: float = 60) -> list[str]:
    """The committed lines a caption page shows, once it shows ``count`` (locators, not
    wait_for_function: the page's CSP forbids eval)."""
    lines = page.locator(".line.done")
    await lines.nth(count - 1).wait_for(timeout=timeout_s * 1000)
    return await lines.all_text_contents()


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.skipif(BROWSER_MISSING is not None, reason=str(BROWSER_MISSING))
def test_replicas_sharing_postgresql_serve_every_viewer_and_resume_a_lost_replicas_sessions(
    model_dir, postgres, tmp_path
):
    """Two replicas on one PostgreSQL behind HAProxy, everything through the proxy: 4 sessions, a
    viewer of each (SSE, reconnecting as a browser does) and its caption page in headless Chromium,
    whichever replica they reach; then one replica is killed with SIGKILL: its clients resume their
    sessions on the other (caption numbers go on, nothing committed is lost), every viewer sees
    every commit exactly once, the dead replica's transcripts are served, and the other replica's
    sessions are undisturbed."""
    from test_service_replicas import Viewer, commit, opened, resumed

    store = postgres.new_database()
    with contextlib.ExitStack() as stack:
        replicas = [
            stack.enter_context(server(model_dir, store, log=tmp_path / f"r{i}.log")) for i in range(2)
        ]
        listen = f"127.0.0.1:{free_port()}"
        log = stack.enter_context(
            haproxy(
                haproxy_config(listen, [u.removeprefix("http://") for u, _ in replicas]),
                tmp_path / "haproxy.cfg",
            )
        )
        proxy = f"http://{listen}"
        wait_healthy(proxy, log)
        texts = ["so today we talk.", "about the new rules.", "and why we made them."]

        async def scenario():
            async with chromium() as browser:
                return await talk(browser)

        async def talk(browser):
            opened_sessions = [await opened(proxy) for _ in range(4)]
            assert [httpx.get(u + "/health").json()["sessions"] for u, _ in replicas] == [2, 2]
            viewers = [
                stack.enter_context(
                    contextlib.closing(Viewer(f"{proxy}/v1/sessions/{sid}/events", reconnect=True))
                )
                for _, sid in opened_sessions
            ]
            sockets = [ws for ws, _ in opened_sessions]
            sids = [sid for _, sid in opened_sessions]
            committed = {sid: [] for sid in sids}
            for n, text in enumerate(texts[:2]):
                for ws, sid in opened_sessions:
                    committed[sid].append((await commit(ws, text, f"s{n}"))["text"])
            for viewer in viewers:
                await viewer.until(lambda v: len(v.commits()) == 2)
            for sid in sids:  # several reads each, landing on either replica
                for _ in range(4):
                    doc = httpx.get(f"{proxy}/v1/sessions/{sid}/transcript.json").json()
                    assert [c["text"] for c in doc["captions"]] == committed[sid] and doc["live"]
            pages = []
            for sid in sids:  # the OBS page of each session, open until the end
                pages.append(await browser.new_page())
                await pages[-1].goto(f"{proxy}/captions/{sid}?lines=5")
                assert await page_lines(pages[-1], 2) == committed[sid]
            owners = {
                s["session"]: s["replica"] for s in httpx.get(f"{proxy}/v1/sessions").json()["sessions"]
            }
            processes = {httpx.get(url + "/health").json()["replica"]: proc for url, proc in replicas}
            assert set(owners.values()) == set(processes)
            victim = processes[owners[sids[0]]]
            lost = [i for i, sid in enumerate(sids) if owners[sid] == owners[sids[0]]]
            assert len(lost) == 2
            victim.kill()
            victim.wait(timeout=10)
            started = time.monotonic()
            for i in lost:
                sockets[i], took, _ = await resumed(proxy, sids[i])
                assert took["captions"] == 2
            resume_s = time.monotonic() - started
            for ws, sid in zip(sockets, sids):
                event = await commit(ws, texts[2], "s2")
                assert event["caption"] == 2  # numbering goes on, on either replica
                committed[sid].append(event["text"])
            for viewer in viewers:
                await viewer.until(lambda v: len(v.commits()) == 3)
            for page, sid in zip(pages, sids):  # the pages reconnected on their own, and show each line once
                assert await page_lines(page, 3) == committed[sid]
            await pages[lost[0]].screenshot(path=str(tmp_path / "caption-page.png"))
            for ws in sockets:
                await ws.send(json.dumps({"type": "session.close"}))
                await ws.close()
            return sids, committed, viewers, lost, resume_s

        sids, committed, viewers, lost, resume_s = asyncio.run(scenario())
        for sid, viewer in zip(sids, viewers):
            # each once, in order
            assert [(c[0], c[1], c[2]) for c in viewer.commits()] == [
                (str(n), n, text) for n, text in enumerate(committed[sid])
            ]
        # least connections put viewers on both replicas: those on the killed one reconnected
        assert sum(v.connections for v in viewers) > len(viewers), [v.connections for v in viewers]
        for sid in sids:
            doc = httpx.get(f"{proxy}/v1/sessions/{sid}/transcript.json").json()
            assert [c["text"] for c in doc["captions"]] == committed[sid]
        print(f"resumed {len(lost)} sessions of the killed replica in {resume_s:.2f} s")


def test_a_silent_talk_keeps_its_viewers_through_the_proxy(model_dir, tmp_path):
    """HAProxy cuts an HTTP response that is silent longer than its client/server timeout (2 s
    here): the replica's keep-alive comments (every 0.5 s) keep a viewer's stream open through a
    5 s pause; with keep-alives rarer than the timeout, the same viewer is cut (and reconnects)."""
    from test_service_replicas import Viewer, commit, opened

    async def pause_then_commit(proxy, keepalive_s):
        ws, sid = await opened(proxy)
        viewer = Viewer(f"{proxy}/v1/sessions/{sid}/events", reconnect=True)
        await viewer.until(lambda v: v.connections == 1)
        await asyncio.sleep(5)
        await commit(ws, "so today we talk.", "s0")
        await viewer.until(lambda v: len(v.commits()) == 1)
        await ws.close()
        viewer.close()
        return viewer

    results = {}
    for keepalive in ("0.5", "30"):
        with contextlib.ExitStack() as stack:
            url, _ = stack.enter_context(
                server(model_dir, tmp_path / f"k{keepalive}.sqlite3", "--keepalive", keepalive)
            )
            listen = f"127.0.0.1:{free_port()}"
            log = stack.enter_context(
                haproxy(
                    haproxy_config(listen, [url.removeprefix("http://")], http_timeout="2s"),
                    tmp_path / f"k{keepalive}.cfg",
                )
            )
            wait_healthy(f"http://{listen}", log)
            results[keepalive] = asyncio.run(pause_then_commit(f"http://{listen}", float(keepalive)))
    kept, cut = results["0.5"], results["30"]
    assert kept.connections == 1 and kept.keepalives >= 5
    assert cut.connections > 1 and cut.keepalives == 0  # cut by the proxy, replayed on reconnect
    assert [c[1] for c in kept.commits()] == [c[1] for c in cut.commits()] == [0]


HEALTH_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # a request head, not yet ended


def dribbling(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` sockets that have sent a request's first line and one header, and no more yet."""
    sockets = [socket.create_connection(address, timeout=30) for _ in range(count)]
    for sock in sockets:
        sock.sendall(HEALTH_HEAD)
    return sockets


def held_connection(address: tuple[str, int], deadline: float) -> socket.socket:
    """A connection the proxy has answered a whole request on (so it counts it), kept open. A
    connection closed just before (``wait_healthy``'s) may still count for a moment on a busy
    machine, refusing this one: it is tried again until ``deadline``."""
    while True:
        sock = socket.create_connection(address, timeout=30)
        try:
            sock.sendall(HEALTH_HEAD + b"\r\n")
            answer = sock.recv(12)
        except ConnectionError:  # refused as reset or as a broken pipe
            answer = b"reset"
        if answer == b"HTTP/1.1 200":
            return sock
        sock.close()
        assert time.monotonic() < deadline, f"the proxy still refuses a connection under its cap: {answer}"
        time.sleep(0.5)


def test_the_proxy_cuts_slow_header_sockets_and_caps_connections_per_client(model_dir, tmp_path):
    """150 sockets that send a request head one line a second (uvicorn alone has no timeout for
    that) never reach the replica: /health answers through the proxy beside them, and the proxy
    answers each with 408 once its request timeout (2 s here) passes. One client address holds at
    most ``per_client`` connections: the next is refused at once."""
    with contextlib.ExitStack() as stack:
        url, _ = stack.enter_context(server(model_dir, tmp_path / "s.sqlite3"))
        listen = f"127.0.0.1:{free_port()}"
        config = haproxy_config(listen, [url.removeprefix("http://")], request_timeout="2s", per_client=200)
        log = stack.enter_context(haproxy(config, tmp_path / "slow.cfg"))
        proxy, (host, port) = f"http://{listen}", listen.split(":")
        wait_healthy(proxy, log)
        slow = dribbling((host, int(port)), 150)
        assert httpx.get(proxy + "/health", timeout=30).status_code == 200  # beside 150 slow sockets
        answers, deadline = {}, time.monotonic() + 60
        while len(answers) < len(slow) and time.monotonic() < deadline:
            waiting = [sock for sock in slow if sock not in answers]
            for sock in waiting:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-Slow: 1\r\n")  # one more header line, a second apart
            readable, _, _ = select.select(waiting, [], [], 1.0)
            for sock in readable:
                try:
                    answers[sock] = sock.recv(64)
                except OSError:
                    answers[sock] = b"reset"
        for sock in slow:
            sock.close()
        assert len(answers) == len(slow), f"{len(slow) - len(answers)} slow sockets still open after 60 s"
        assert {answer[:12] for answer in answers.values()} <= {b"HTTP/1.1 408", b"", b"reset"}
        assert sum(answer.startswith(b"HTTP/1.1 408") for answer in answers.values()) > 0

        listen = f"127.0.0.1:{free_port()}"
        config = haproxy_config(listen, [url.removeprefix("http://")], per_client=5, request_timeout="60s")
        log = stack.enter_context(haproxy(config, tmp_path / "cap.cfg"))
        host, port = listen.split(":")
        wait_healthy(f"http://{listen}", log)
        deadline = time.monotonic() + 60
        held = [held_connection((host, int(port)), deadline) for _ in range(5)]
        try:
            with socket.create_connection((host, int(port)), timeout=30) as extra:
                answer = extra.recv(200)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", answer  # the sixth connection of one address: closed at once
        for sock in held:
            sock.close()
        wait_healthy(f"http://{listen}", log)  # once they are gone, the address is served again


def test_the_deploy_command_writes_a_configuration_haproxy_accepts(tmp_path):
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    result = CliRunner().invoke(
        cli,
        [
            "deploy",
            "haproxy",
            "--listen",
            "127.0.0.1:9000",
            "--replica",
            "10.0.0.11:8000",
            "--replica",
            "10.0.0.12:8000",
            "--http-timeout",
            "90s",
            "--per-client",
            "300",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "server r2 10.0.0.12:8000 check" in result.output and "timeout server 90s" in result.output
    assert "timeout http-request 10s" in result.output and "sc0_conn_cur gt 300" in result.output
    (tmp_path / "h.cfg").write_text(result.output)
    subprocess.run(["haproxy", "-c", "-q", "-f", str(tmp_path / "h.cfg")], check=True)
    for bad in (
        ["--replica", "nope"],
        ["--replica", "h:70000"],
        ["--replica", "h:1", "--http-timeout", "soon"],
        [],
    ):
        refused = CliRunner().invoke(cli, ["deploy", "haproxy", *bad])
        assert refused.exit_code == 2 and "Error" in refused.output, refused.output
