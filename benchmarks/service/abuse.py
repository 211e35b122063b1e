"""Hostile clients against ``mlx-ssbd serve``: does a reference session lose anything, and what
does the server hold in memory meanwhile?

Two reference sessions replay ASR-like partials in real time (``benchmarks.service.faults.Good``), first alone
(the baseline), then beside, all at once:

* **junk floods**: clients sending malformed frames as fast as they can, reading their errors,
  and connecting again each time the server closes them (beyond 50 bad messages in 10 s);
* **slow readers**: clients that never read a byte after the handshake, sending valid messages
  that each get an event (each must be dropped once its socket buffers and outbox are full);
* **idle sockets**: ``--idle`` WebSockets that connect and never say a word (beyond
  ``--max-sessions`` they are refused as busy; the others are closed by the handshake timeout);
* **viewers**: ``--viewers`` SSE viewers of one reference session (each must receive every commit
  of that session).

The attackers run in a process of their own, so that they do not slow the reference clients'
event loop, and at a fixed pace (``PACE``: frames per second per attacker), since on a 2-core
machine an attacker spinning on the server's own cores would measure only the contention. Reported: what the
reference sessions lost (commits not in the store, errors, drops;
their lag p95 against the baseline), what was refused, and the server's resident memory (peak,
sampled every 0.25 s) in each run.

    python -m benchmarks.service.abuse --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.service.faults import BAD, Good, stored, streams
from benchmarks.service.server import rss_mb, start_server

MAX_SESSIONS = 8
PACE = 500  # frames a second, per flooder and per slow reader


async def flood(url: str, stop, counts: dict) -> None:
    """Malformed frames as fast as the socket takes them, reading the errors, until ``stop``;
    a connection the server closes is opened again."""
    import websockets

    while not stop.is_set():
        try:
            async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
                reader = asyncio.create_task(_count_errors(ws, counts))
                try:
                    while not stop.is_set():
                        await ws.send(BAD[counts["junk_sent"] % len(BAD)])
                        counts["junk_sent"] += 1
                        await asyncio.sleep(1 / PACE)
                finally:
                    reader.cancel()
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            counts["flood_closes"][str(code)] = counts["flood_closes"].get(str(code), 0) + 1
            await asyncio.sleep(0.1)  # a client's backoff before it connects again
        except (websockets.InvalidStatus, OSError):
            await asyncio.sleep(0.1)


async def _count_errors(ws, counts: dict) -> None:
    async for raw in ws:
        counts["errors_received"] += json.loads(raw)["type"] == "error"


def slow_reader(url: str, stop, counts: dict) -> None:
    """Never reads after the handshake; sends ``session.update`` (each answered by an event) until
    the server stops taking its frames (it dropped the connection: a send fails or waits 5 s)."""
    import socket

    from websockets.client import ClientProtocol
    from websockets.protocol import State
    from websockets.uri import parse_uri

    client = ClientProtocol(parse_uri(url.replace("http", "ws", 1) + "/v1/stream"))
    client.send_request(client.connect())
    with socket.create_connection(url[len("http://") :].split(":")) as sock:
        sock.settimeout(5)
        sock.sendall(b"".join(client.data_to_send()))
        while client.state is State.CONNECTING:
            client.receive_data(sock.recv(4096))
        sent = 0
        while not stop.is_set() and sent < 1_000_000:
            client.send_text(b'{"type": "session.update"}')
            try:
                sock.sendall(b"".join(client.data_to_send()))
            except OSError:
                counts["slow_readers_dropped"] += 1
                return
            sent += 1
            time.sleep(1 / PACE)
        counts["slow_readers_never_dropped"] += 1


async def idle(url: str, counts: dict) -> None:
    """Connect, say nothing; count how the server answers."""
    import websockets

    try:
        async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream") as ws:
            async for raw in ws:
                event = json.loads(raw)
                if event["type"] == "error":
                    counts[event["code"]] = counts.get(event["code"], 0) + 1
    except websockets.ConnectionClosed:
        pass
    except websockets.InvalidStatus as refused:  # uvicorn's own bound on connections
        key = f"http_{refused.response.status_code}"
        counts[key] = counts.get(key, 0) + 1
    except OSError:
        counts["connect_failed"] = counts.get("connect_failed", 0) + 1


async def viewer(url: str, sid: str, commits: list, refused: list) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=None) as client:
        async with client.stream("GET", f"{url}/v1/sessions/{sid}/events") as response:
            if response.status_code != 200:
                refused.append(response.status_code)
                return
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event["type"] == "translation.commit":
                        commits.append((event["caption"], event["text"]))
                    elif event["type"] == "session.closed":
                        return


def _health_viewers(url: str) -> int:
    import httpx

    return httpx.get(url + "/health").json()["viewers"]


async def memory(pid: int, stop: asyncio.Event, peak: list) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb(pid))
        await asyncio.sleep(0.25)


def attack(url: str, sid: str, idle_sockets: int, viewers: int, stop, out) -> None:
    """The attackers (a process of their own): until ``stop``, then their counts into ``out``."""
    counts = {
        "junk_sent": 0,
        "errors_received": 0,
        "flood_closes": {},
        "slow_readers_dropped": 0,
        "slow_readers_never_dropped": 0,
    }

    async def main():
        loop_stop = asyncio.Event()
        watched, refused, idles = [[] for _ in range(viewers)], [], {}
        tasks = [asyncio.create_task(viewer(url, sid, watched[i], refused)) for i in range(viewers)]
        while await asyncio.to_thread(_health_viewers, url) < viewers:
            await asyncio.sleep(0.1)
        tasks.append(asyncio.create_task(viewer(url, sid, [], refused)))  # one more than the bound allows
        tasks += [asyncio.create_task(flood(url, loop_stop, counts)) for _ in range(2)]
        tasks += [
            asyncio.create_task(asyncio.to_thread(slow_reader, url, loop_stop, counts)) for _ in range(2)
        ]
        await asyncio.sleep(1.0)
        tasks += [asyncio.create_task(idle(url, idles)) for _ in range(idle_sockets)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        loop_stop.set()
        await asyncio.wait(tasks, timeout=60)
        return watched, refused, idles

    watched, refused, idles = asyncio.run(main())
    out.put(
        {
            **counts,
            "idle_sockets": idle_sockets,
            "idle_answers": idles,
            "viewers": viewers,
            "viewers_refused": refused,
            "viewer_commits": watched,
        }
    )


async def attacked(url: str, pid: int, good: list[Good], args) -> dict:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    stop, out, peak, done = context.Event(), context.Queue(), [0.0], asyncio.Event()
    sampler = asyncio.create_task(memory(pid, done, peak))
    references = [asyncio.create_task(g.run(url)) for g in good]
    while not all(g.sessions for g in good):
        await asyncio.sleep(0.05)
    attackers = context.Process(
        target=attack, args=(url, good[0].sessions[0], args.idle, args.viewers, stop, out)
    )
    attackers.start()
    await asyncio.gather(*references)
    stop.set()
    result = await asyncio.to_thread(out.get, True, 120)
    attackers.join(timeout=30)
    done.set()
    await sampler
    received = sorted((c, t) for s, c, t in good[0].commits)
    watched = result.pop("viewer_commits")
    return {
        "peak_rss_mb": round(peak[0]),
        **result,
        "viewers_with_every_commit": sum(sorted(w) == received for w in watched),
    }


def run(model: str, scratch: Path, args) -> dict:
    proc, url = start_server(
        model, scratch / "base.sqlite3", MAX_SESSIONS, ["--max-viewers", str(args.viewers + 50)]
    )
    try:
        base = [Good(p) for p in streams(2, args.seconds, 5)]
        stop, peak = asyncio.Event(), [0.0]

        async def alone():
            sampler = asyncio.create_task(memory(proc.pid, stop, peak))
            await asyncio.gather(*(g.run(url) for g in base))
            stop.set()
            await sampler

        asyncio.run(alone())
        good = [Good(p) for p in streams(2, args.seconds, 5)]
        attack = asyncio.run(attacked(url, proc.pid, good, args))
        alive = proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    in_store = stored(scratch / "base.sqlite3")
    received = {c for g in good for c in g.commits}
    return {
        "baseline": {
            "peak_rss_mb": round(peak[0]),
            "commits": sum(len(g.commits) for g in base),
            "lag_p95_s": [g.p95() for g in base],
        },
        "attacked": {
            **attack,
            "server_alive": alive,
            "reference_commits": len(received),
            "reference_commits_lost": len(received - in_store),
            "reference_errors": sum(g.errors for g in good),
            "reference_drops": sum(g.drops for g in good),
            "lag_p95_s": [g.p95() for g in good],
        },
    }


def measure(args) -> dict:
    if min(args.seconds, args.idle, args.viewers) <= 0:
        raise SystemExit("--seconds, --idle and --viewers must be positive")
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        return {
            "model": args.model,
            "seconds": args.seconds,
            **run(args.model, Path(scratch), args),
            "wall_s": round(time.time() - started),
        }


def render(result: dict) -> list[str]:
    b, a = result["baseline"], result["attacked"]
    return [
        f"{machine_line(result['machine'])} 2 reference sessions replay {result['seconds']:g} s of ASR-like partials "
        "in real time, alone and then beside the attackers (see the script's docstring).",
        "",
        *markdown_table(
            ["", "alone", "beside the attackers"],
            [
                ("server peak RSS (MB)", b["peak_rss_mb"], a["peak_rss_mb"]),
                ("reference commits (lost: not in the store)", b["commits"],
                 f"{a['reference_commits']} ({a['reference_commits_lost']} lost)"),
                ("reference errors / drops", "0 / 0", f"{a['reference_errors']} / {a['reference_drops']}"),
                ("reference lag p95 (s)", b["lag_p95_s"], a["lag_p95_s"]),
                (f"2 junk flooders ({PACE}/s each): frames sent / errors read / connections the server closed, by "
                 "close code (1008: too many bad messages; 1013: busy)", "",
                 f"{a['junk_sent']} / {a['errors_received']} / {a['flood_closes']}"),
                (f"2 slow readers ({PACE} frames/s each, never read): dropped by the server", "",
                 f"{a['slow_readers_dropped']} of 2"),
                (f"{a['idle_sockets']} idle sockets: answers", "", a["idle_answers"]),
                (f"{a['viewers']} SSE viewers of one session: with every commit; refused beyond", "",
                 f"{a['viewers_with_every_commit']}; {a['viewers_refused']}"),
                ("server alive after", "", a["server_alive"]),
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "service_abuse",
    lambda r: f"Hostile clients: {r['model']}",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--seconds", type=float, default=40.0, help="speech replayed per reference session"),
        option("--idle", type=int, default=500, help="idle sockets"),
        option("--viewers", type=int, default=200, help="SSE viewers of one reference session"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
