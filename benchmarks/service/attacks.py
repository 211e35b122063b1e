"""Attacks that once held the model or a session, against ``mlx-ssbd serve`` on a real model.

1. **Glossary flood.** A reference session replays ASR-like partials in real time, first alone,
   then beside an attacker whose session has a 200-term glossary of 100-character renderings and
   who sends finals naming every term, one after another. Reported: the reference's caption lag
   (median and p95) and commit count in both runs, and the server's peak RSS.
2. **SIGTERM during the flood.** The same attack, then SIGTERM: seconds until the process exits
   (against ``--drain-timeout``, 30 s) and its exit status.
3. **A client gone mid-work.** A client sends a 4,000-character final and ``session.close`` and
   drops its TCP connection at once: seconds until ``/health`` no longer counts its session.
4. **A session id alone.** ``session.resume`` with the dropped session's id and no token (the id
   is public in every viewer link): the answer.
5. **Slow-header sockets.** 150 sockets that send a request head one header at a time:
   ``/health``'s answer time beside them straight at the replica and through HAProxy as
   ``mlx-ssbd deploy haproxy`` configures it (when ``haproxy`` is installed), its cap per client
   address raised above 150 since every socket here comes from one address. Then, on a server
   whose connection limit is low (``--max-viewers 20``), the reference session replays its
   partials again, alone and beside 150 such sockets that send one more header every 15 s
   (each reconnecting when the server closes it): its caption lag and ``/health``'s answers.

    python -m benchmarks.service.attacks --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.service.faults import Good, streams
from benchmarks.service.server import rss_mb, start_server
from mlx_ssbd.service.deploy import haproxy_config

TERMS = 200


def glossary() -> tuple[dict, str]:
    """200 made-up terms, each rendered by 100 characters; and a final naming all of them."""
    terms = [f"term{i:03d}x" for i in range(TERMS)]
    renderings = {term: (f"Fachbegriff {term} " * 8)[:100] for term in terms}
    return {"de": renderings}, "We discuss " + ", ".join(terms) + "."


async def flooder(url: str, stop: asyncio.Event, counts: dict) -> None:
    """One session with the glossary, sending finals that name every term until ``stop``."""
    import websockets

    with contextlib.suppress(websockets.ConnectionClosed):  # the server drains (SIGTERM) under it
        await _flood(url, stop, counts)


async def _flood(url: str, stop: asyncio.Event, counts: dict) -> None:
    import websockets

    terms, text = glossary()
    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "session.update", "glossary": terms}))
        await ws.recv()
        n = 0
        while not stop.is_set():
            await ws.send(
                json.dumps({"type": "source.update", "segment": f"f{n}", "text": text, "final": True})
            )
            counts["flood_finals"] += 1
            n += 1
            with contextlib.suppress(asyncio.TimeoutError):
                while True:  # read what comes (commits, backlog errors) for a second, then the next final
                    event = json.loads(await asyncio.wait_for(ws.recv(), timeout=1.0))
                    counts["flood_commits"] += event["type"] == "translation.commit"


def lag_summary(good: Good) -> dict:
    lags = sorted(good.lags)
    return {
        "commits": len(good.commits),
        "errors": good.errors,
        "drops": good.drops,
        "lag_median_s": round(statistics.median(lags), 2) if lags else None,
        "lag_p95_s": good.p95(),
    }


async def reference_run(
    url: str, pid: int, seconds: float, flood: bool, sigterm: subprocess.Popen | None = None
):
    good, stop, peak, counts = (
        Good(streams(1, seconds, 11)[0]),
        asyncio.Event(),
        [rss_mb(pid)],
        {"flood_finals": 0, "flood_commits": 0},
    )

    async def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            await asyncio.sleep(0.25)

    before = rss_mb(pid)
    tasks = [asyncio.create_task(sample())]
    if flood:
        tasks.append(asyncio.create_task(flooder(url, stop, counts)))
        await asyncio.sleep(2.0)  # the flood is under way before the reference starts
    if sigterm is None:
        await good.run(url)
    else:  # the drain: SIGTERM in the middle of the flood, timed to the process's exit
        await asyncio.sleep(seconds / 2)
        sigterm.send_signal(signal.SIGTERM)
        started = time.monotonic()
        status = await asyncio.to_thread(sigterm.wait, 120)
        counts.update(sigterm_exit_s=round(time.monotonic() - started, 1), exit_status=status)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    return {**lag_summary(good), "rss_before_mb": round(before), "peak_rss_mb": round(peak[0]), **counts}


async def dropped_session(url: str) -> dict:
    """A long final, session.close, TCP gone: until /health no longer counts the session; then a
    resume with the id alone."""
    import httpx
    import websockets

    ws = await websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None)
    sid = json.loads(await ws.recv())["session"]
    await ws.send(json.dumps({"type": "session.update"}))
    await ws.recv()
    text = ("So today I want to talk about the weather station on the hill and why we built it. " * 60)[:4000]
    await ws.send(json.dumps({"type": "source.update", "segment": "s0", "text": text, "final": True}))
    await ws.send(json.dumps({"type": "session.close"}))
    ws.transport.abort()  # gone without a closing handshake
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        while (await client.get(url + "/health")).json()["sessions"] and time.monotonic() - started < 600:
            await asyncio.sleep(0.2)
    gone_s = round(time.monotonic() - started, 1)
    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream") as other:
        await other.recv()
        await other.send(json.dumps({"type": "session.resume", "session": sid}))
        answer = json.loads(await other.recv())
    return {"session_gone_s": gone_s, "resume_by_id_alone": answer.get("code", answer["type"])}


def health_beside_slow_sockets(url: str, count: int = 150) -> float | str:
    """Seconds /health takes while ``count`` sockets dribble request heads (or why it failed)."""
    import httpx

    host, port = url.removeprefix("http://").split(":")
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sockets.append(sock)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.sendall(b"X-Slow: 1\r\n")
        started = time.monotonic()
        try:
            status = httpx.get(url + "/health", timeout=10).status_code
        except httpx.HTTPError as error:
            return f"{type(error).__name__} after {time.monotonic() - started:.1f} s"
        return round(time.monotonic() - started, 2) if status == 200 else f"HTTP {status}"
    finally:
        for sock in sockets:
            sock.close()


async def beside_slow_heads(url: str, pid: int, seconds: float, count: int = 150) -> dict:
    """The reference run beside ``count`` sockets that each send a request head one header every
    15 s (reopened when the server closes them), and the slowest of /health's answers meanwhile."""
    import httpx

    host, port = url.removeprefix("http://").split(":")
    stop, health, reopened = asyncio.Event(), [], [0]

    async def slow_head() -> None:
        while not stop.is_set():
            try:
                _, writer = await asyncio.open_connection(host, int(port))
            except OSError:
                await asyncio.sleep(1)
                continue
            try:
                writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                for n in range(1000):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), 15)
                    if stop.is_set() or writer.is_closing():
                        break
                    writer.write(f"X-Slow-{n}: 1\r\n".encode())
                    await writer.drain()
            except OSError:  # closed by the server while writing
                pass
            finally:
                writer.close()
            reopened[0] += not stop.is_set()  # closed by the server: open another

    async def poll_health() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status = (await client.get(url + "/health")).status_code
                except httpx.HTTPError as error:
                    status = type(error).__name__
                health.append((status, time.monotonic() - started))
                await asyncio.sleep(1.0)

    tasks = [asyncio.create_task(slow_head()) for _ in range(count)]
    tasks.append(asyncio.create_task(poll_health()))
    await asyncio.sleep(2.0)  # the sockets are open before the reference starts
    result = await reference_run(url, pid, seconds, flood=False)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    return {
        **result,
        "health_checks": len(health),
        "health_not_200": sum(status != 200 for status, _ in health),
        "health_slowest_s": round(max((s for _, s in health), default=0.0), 3),
        "slow_sockets_reopened": reopened[0],
    }


def through_haproxy(url: str, scratch: Path) -> float | str:
    if shutil.which("haproxy") is None:
        return "haproxy not installed"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{s.getsockname()[1]}"
    config = scratch / "haproxy.cfg"
    # Every socket here comes from 127.0.0.1: the per-client cap (100) would refuse the 101st at
    # once, /health included; raised above them, the request-head timeout alone is measured.
    config.write_text(haproxy_config(listen, [url.removeprefix("http://")], per_client=1000))
    proxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        import httpx

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{listen}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        return health_beside_slow_sockets(f"http://{listen}")
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


def run(model: str, scratch: Path, seconds: float) -> dict:
    proc, url = start_server(model, scratch / "a.sqlite3", 8)
    try:
        alone = asyncio.run(reference_run(url, proc.pid, seconds, flood=False))
        flooded = asyncio.run(reference_run(url, proc.pid, seconds, flood=True))
        dropped = asyncio.run(dropped_session(url))
        slow = {"direct": health_beside_slow_sockets(url), "through_haproxy": through_haproxy(url, scratch)}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    proc, url = start_server(model, scratch / "c.sqlite3", 8, ["--max-viewers", "20"])
    try:
        low_limit = {
            "alone": asyncio.run(reference_run(url, proc.pid, seconds, flood=False)),
            "beside_slow_heads": asyncio.run(beside_slow_heads(url, proc.pid, seconds)),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    proc, url = start_server(model, scratch / "b.sqlite3", 8)
    try:
        drain = asyncio.run(reference_run(url, proc.pid, seconds, flood=True, sigterm=proc))
    finally:
        if proc.poll() is None:
            proc.kill()
    return {
        "alone": alone,
        "flooded": flooded,
        "drain": {k: drain[k] for k in ("sigterm_exit_s", "exit_status")},
        **dropped,
        "health_beside_150_slow_header_sockets_s": slow,
        "max_viewers_20": low_limit,
    }


def measure(args) -> dict:
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        return {
            "model": args.model,
            "seconds": args.seconds,
            **run(args.model, Path(scratch), args.seconds),
            "wall_s": round(time.time() - started),
        }


def ratio(base: dict, other: dict, key: str) -> str:
    """``other[key] / base[key]`` as a factor, or "-" where either is missing or zero."""
    return f"{other[key] / base[key]:.2f}x" if base[key] and other[key] else "-"


def compared(base: dict, other: dict) -> list[tuple]:
    """The reference session's rows of a table against a baseline: commits, errors and drops, lag."""
    return [
        ("reference commits / errors / drops", f"{base['commits']} / {base['errors']} / {base['drops']}",
         f"{other['commits']} / {other['errors']} / {other['drops']}", ""),
        ("reference caption lag, median (s)", base["lag_median_s"], other["lag_median_s"],
         ratio(base, other, "lag_median_s")),
        ("reference caption lag, p95 (s)", base["lag_p95_s"], other["lag_p95_s"], ratio(base, other, "lag_p95_s")),
    ]  # fmt: skip


def render(result: dict) -> list[str]:
    a, f, slow = result["alone"], result["flooded"], result["health_beside_150_slow_header_sockets_s"]
    low, beside = result["max_viewers_20"]["alone"], result["max_viewers_20"]["beside_slow_heads"]
    return [
        f"{machine_line(result['machine'])} A reference session replays {result['seconds']:g} s of ASR-like partials "
        "in real time (see the script's docstring for each attack).",
        "",
        *markdown_table(
            ["", "alone", "beside the glossary flood", "flood / alone"],
            [
                *compared(a, f),
                ("server peak RSS (MB; before the run)", f"{a['peak_rss_mb']} ({a['rss_before_mb']})",
                 f"{f['peak_rss_mb']} ({f['rss_before_mb']})", f"+{f['peak_rss_mb'] - a['rss_before_mb']} MB"),
                (f"flood: finals of {TERMS} terms sent / committed", "", f"{f['flood_finals']} / {f['flood_commits']}",
                 ""),
            ],
        ),
        "",
        *markdown_table(
            ["attack", "result"],
            [
                ("SIGTERM during the flood: seconds to exit (drain timeout 30 s), status",
                 f"{result['drain']['sigterm_exit_s']}, {result['drain']['exit_status']}"),
                ("a client gone after a 4,000-character final and session.close: seconds until its session is gone",
                 result["session_gone_s"]),
                ("session.resume with the session id alone", result["resume_by_id_alone"]),
                ("/health beside 150 slow-header sockets, straight at the replica (s)", slow["direct"]),
                ("/health beside 150 slow-header sockets, through HAProxy (s)", slow["through_haproxy"]),
            ],
        ),
        "",
        "With `--max-viewers 20` (a connection limit of 92), straight at the replica:",
        "",
        *markdown_table(
            ["", "alone", "beside 150 slow-head sockets", "beside / alone"],
            [
                *compared(low, beside),
                ("/health: checks, not 200, slowest answer (s)", "",
                 f"{beside['health_checks']}, {beside['health_not_200']}, {beside['health_slowest_s']}", ""),
                ("slow sockets closed by the server and reopened", "", beside["slow_sockets_reopened"], ""),
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "service_attacks",
    lambda r: f"Attacks that once held the model: {r['model']}",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--seconds", type=float, default=40.0, help="speech the reference session replays"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
