"""Faults against ``mlx-ssbd serve``: is any committed caption lost, is any other session disturbed?

Three scenarios, each with well-behaved sessions replaying ASR-like streams in real time
(``service_load.client``-style clients that record every event):

1. **Bad clients beside good ones.** 3 good sessions run twice, first alone (baseline), then while
   a chaos client sends malformed messages of every kind (each must get exactly one ``error``
   event) and other clients connect, push a partial and drop the connection mid-update. Good
   sessions must see no error and no drop; their lag is compared with the baseline.
2. **kill -9 mid-stream.** 2 sessions; the server is killed with SIGKILL once ``--kill-after``
   seconds have passed and at least 2 commits have reached the clients, then started again on the
   same transcript store: every commit a client received must be in the store.
3. **Loss of a replica.** 2 replicas behind HAProxy (``service.deploy``), 4 sessions; one replica is
   killed with SIGKILL; the other replica's sessions must go on undisturbed; the killed replica's
   clients reconnect (a new session) and go on; every received commit is in its replica's store.

    python -m benchmarks.service.faults --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.partials import DATA, asr_partials, speech
from benchmarks.service.server import source_message, start_server
from mlx_ssbd.service.deploy import haproxy_config

BAD = [
    "not json",
    "[1]",
    '{"type": "nope"}',
    '{"type": "source.update", "text": 5}',
    '{"type": "source.update", "text": "x", "final": "yes"}',
    '{"type": "session.update", "target": "xx"}',
    '{"type": "session.update", "method": "turbo"}',
    "x" * 70000,
]


def streams(n: int, seconds: float, seed: int):
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    out = []
    for i in range(n):
        rng = random.Random(seed + i)
        words, _ = speech(pairs[(7 * i) % len(pairs) :] + pairs, int(seconds * 2.5) + 20, 2.5, rng)
        out.append([(t, p) for t, p in asr_partials(words, rng) if t <= seconds])
    return out


class Good:
    """A well-behaved client: replays its partials, records commits, errors, drops and lag. When
    its connection drops and ``reconnect``, it connects again through ``url`` and goes on from the
    partial it had reached: in a new session, or with ``resume`` in the same one
    (``session.resume``, retried while the session still looks live; ``resume_s``: from
    ``killed_at``, set by whoever kills its replica, to ``session.resumed``)."""

    def __init__(self, partials, method: str = "ssbd", reconnect: bool = False, resume: bool = False):
        self.partials, self.method, self.reconnect, self.resume = partials, method, reconnect, resume
        self.commits, self.lags, self.errors, self.drops, self.sessions = [], [], 0, 0, []
        self.lag_at: list[float] = []  # when each lag was measured (monotonic)
        self.commit_at: list[float] = []  # when each commit came (monotonic)
        self.resume_s: list[float] = []
        self.killed_at: float | None = None
        self.resume_token: str | None = None  # the first session's, from its session.created

    async def run(self, url: str) -> None:
        import websockets

        t0, index = time.monotonic(), 0
        while index < len(self.partials):
            try:
                async with websockets.connect(
                    url.replace("http", "ws", 1) + "/v1/stream", max_size=None
                ) as ws:
                    created = json.loads(await ws.recv())
                    if self.resume and self.sessions:
                        await ws.send(
                            json.dumps(
                                {
                                    "type": "session.resume",
                                    "session": self.sessions[0],
                                    "resume_token": self.resume_token,
                                }
                            )
                        )
                    else:
                        self.sessions.append(created["session"])
                        self.resume_token = self.resume_token or created["resume_token"]
                        await ws.send(json.dumps({"type": "session.update", "method": self.method}))
                    answer = json.loads(await ws.recv())
                    if answer["type"] == "error":  # resumed too early: its replica's loss is not yet noticed
                        await asyncio.sleep(0.2)
                        continue
                    if answer["type"] == "session.resumed" and self.killed_at is not None:
                        self.resume_s.append(time.monotonic() - self.killed_at)

                    async def send():
                        nonlocal index
                        while index < len(self.partials):
                            due, p = self.partials[index]
                            await asyncio.sleep(max(0.0, due - (time.monotonic() - t0)))
                            await ws.send(source_message(p))
                            index += 1
                        await ws.send(json.dumps({"type": "session.close"}))

                    sender = asyncio.create_task(send())
                    try:
                        async for raw in ws:
                            event = json.loads(raw)
                            if event.get("end") is not None and event["type"].startswith("translation."):
                                self.lags.append(time.monotonic() - t0 - event["end"])
                                self.lag_at.append(time.monotonic())
                            if event["type"] == "translation.commit":
                                self.commits.append((self.sessions[-1], event["caption"], event["text"]))
                                self.commit_at.append(time.monotonic())
                            elif event["type"] == "error":
                                self.errors += 1
                            elif event["type"] == "session.closed":
                                return
                    finally:
                        sender.cancel()
            except (websockets.ConnectionClosed, OSError):
                pass
            self.drops += 1
            if not self.reconnect:
                return
            await asyncio.sleep(0.5 if not self.resume else 0.1)

    def p95(self) -> float | None:
        lags = sorted(self.lags)
        return round(lags[int(0.95 * (len(lags) - 1))], 2) if lags else None


async def chaos(url: str, rounds: int, droppers: int) -> dict:
    """Malformed messages (one error each; a connection that sends too many in a short time is
    closed with 1008 and the client connects again), and clients that drop mid-update."""
    import websockets

    answered = closed = sent = 0
    while sent < rounds:
        async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
            await ws.recv()
            try:
                while sent < rounds:
                    await ws.send(BAD[sent % len(BAD)])
                    sent += 1
                    event = json.loads(await ws.recv())
                    answered += event["type"] == "error"
                    await asyncio.sleep(0.05)
            except websockets.ConnectionClosed as gone:
                if gone.rcvd is None or gone.rcvd.code != 1008:
                    raise
                closed += 1
    for i in range(droppers):
        async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream") as ws:
            await ws.recv()
            await ws.send(
                json.dumps(
                    {"type": "source.update", "text": "so today we talk about the rules " * (1 + i % 3)}
                )
            )
            await asyncio.sleep(random.Random(i).uniform(0.0, 1.0))
        # leaving without session.close, maybe mid-update
    return {
        "bad_messages": rounds,
        "errors_answered": answered,
        "closed_for_abuse": closed,
        "dropped_clients": droppers,
    }


def stored(store: Path) -> set:
    with contextlib.closing(sqlite3.connect(store)) as db:
        return {(s, c, t) for s, c, t in db.execute("SELECT session, caption, text FROM captions")}


def good_summary(clients) -> dict:
    return {
        "sessions": len(clients),
        "commits": sum(len(c.commits) for c in clients),
        "errors": sum(c.errors for c in clients),
        "drops": sum(c.drops for c in clients),
        "lag_p95_s": [c.p95() for c in clients],
    }


async def gather(*coros):
    return await asyncio.gather(*coros)


def scenario_bad_clients(model: str, scratch: Path, seconds: float) -> dict:
    proc, url = start_server(model, scratch / "a.sqlite3", 32)
    try:
        base = [Good(p) for p in streams(3, seconds, 1)]
        asyncio.run(gather(*(g.run(url) for g in base)))
        good = [Good(p) for p in streams(3, seconds, 1)]
        chaos_result = asyncio.run(gather(chaos(url, 200, 20), *(g.run(url) for g in good)))[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lost = {c for g in good for c in g.commits} - stored(scratch / "a.sqlite3")
    return {
        "baseline": good_summary(base),
        "with_chaos": good_summary(good),
        **chaos_result,
        "commits_lost": len(lost),
    }


def scenario_kill_9(model: str, scratch: Path, seconds: float, kill_after: float) -> dict:
    store = scratch / "k.sqlite3"
    proc, url = start_server(model, store, 8)
    clients = [Good(p) for p in streams(2, seconds, 11)]

    async def run_and_kill():
        async def killer():  # mid-stream: once commits have reached the clients, not before kill_after
            await asyncio.sleep(kill_after)
            while sum(len(c.commits) for c in clients) < 2 and any(c.drops == 0 for c in clients):
                await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGKILL)

        await asyncio.gather(killer(), *(c.run(url) for c in clients))

    asyncio.run(run_and_kill())
    proc.wait(timeout=10)
    start = time.monotonic()
    proc, url = start_server(model, store, 8)  # again, on the same store
    restart = time.monotonic() - start
    try:
        received = {c for g in clients for c in g.commits}
        served = {
            (s, c["caption"], c["text"])
            for s in {s for g in clients for s in g.sessions}
            for c in _transcript(url, s)
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "commits_received": len(received),
        "commits_lost": len(received - served),
        "restart_s": round(restart, 1),
        "killed_after_s": kill_after,
    }


def _transcript(url: str, sid: str) -> list[dict]:
    import httpx

    return httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()["captions"]


@contextlib.contextmanager
def replicas_behind_haproxy(model: str, stores: list, scratch: Path):
    """One replica per store (a SQLite file each, or one PostgreSQL URL repeated) behind HAProxy on
    loopback; yields ``([(process, url)], the proxy's url)``; everything stopped at the end."""
    servers = [start_server(model, store, 8, cwd=scratch) for store in stores]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{s.getsockname()[1]}"
    (scratch / "h.cfg").write_text(haproxy_config(listen, [u.removeprefix("http://") for _, u in servers]))
    proxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(scratch / "h.cfg")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(2)  # first health checks
    try:
        yield servers, f"http://{listen}"
    finally:
        proxy.terminate()
        for proc, _ in servers:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=30)


def scenario_replica_loss(model: str, scratch: Path, seconds: float, kill_after: float) -> dict:
    if shutil.which("haproxy") is None:
        return {"skipped": "haproxy is not installed"}
    clients = [Good(p, reconnect=True) for p in streams(4, seconds, 21)]
    with replicas_behind_haproxy(model, [scratch / f"r{i}.sqlite3" for i in range(2)], scratch) as (
        servers,
        url,
    ):

        async def run_and_kill():
            async def killer():
                await asyncio.sleep(kill_after)
                servers[0][0].send_signal(signal.SIGKILL)

            await asyncio.gather(killer(), *(c.run(url) for c in clients))

        asyncio.run(run_and_kill())
    in_stores = stored(scratch / "r0.sqlite3") | stored(scratch / "r1.sqlite3")
    received = {c for g in clients for c in g.commits}
    undisturbed = [g for g in clients if g.drops == 0]
    return {
        "sessions": len(clients),
        "undisturbed_sessions": len(undisturbed),
        "reconnected_sessions": sum(g.drops > 0 for g in clients),
        "errors_in_undisturbed": sum(g.errors for g in undisturbed),
        "commits_received": len(received),
        "commits_lost": len(received - in_stores),
        "lag_p95_s": [g.p95() for g in clients],
        "killed_after_s": kill_after,
    }


def fault_options(seconds: float, kill_after: float) -> tuple:
    """The options of a fault benchmark: the model, speech per session, when to kill."""
    return (
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--seconds", type=float, default=seconds, help="speech replayed per session"),
        option("--kill-after", type=float, default=kill_after),
    )


def measure(args) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        return {
            "model": args.model,
            "seconds": args.seconds,
            "bad_clients": scenario_bad_clients(args.model, root, args.seconds),
            "kill_9": scenario_kill_9(args.model, root, args.seconds, args.kill_after),
            "replica_loss": scenario_replica_loss(args.model, root, args.seconds, args.kill_after),
        }


def render(result: dict) -> list[str]:
    b, k, r = result["bad_clients"], result["kill_9"], result["replica_loss"]
    if "skipped" in r:
        replica = ("loss of a replica", f"skipped: {r['skipped']}")
    else:
        replica = (
            f"loss of 1 of 2 replicas after {r['killed_after_s']:g} s",
            f"{r['undisturbed_sessions']}/{r['sessions']} sessions undisturbed ({r['errors_in_undisturbed']} errors), "
            f"{r['reconnected_sessions']} reconnected and went on; {r['commits_received']} commits received, "
            f"{r['commits_lost']} lost",
        )
    return [
        f"{machine_line(result['machine'])} Sessions replay {result['seconds']:g} s of ASR-like partials in real "
        "time; see the script's docstring.",
        "",
        *markdown_table(
            ["scenario", "result"],
            [
                (
                    "bad clients beside 3 good sessions",
                    f"{b['errors_answered']}/{b['bad_messages']} malformed messages answered with an error, "
                    f"{b.get('closed_for_abuse', 0)} connections closed for too many of them (1008); "
                    f"{b['dropped_clients']} clients dropped mid-update; good sessions: {b['with_chaos']['errors']} "
                    f"errors, {b['with_chaos']['drops']} drops, {b['with_chaos']['commits']} commits, lag p95 "
                    f"{b['with_chaos']['lag_p95_s']} s (alone: {b['baseline']['lag_p95_s']} s); commits lost "
                    f"{b['commits_lost']}",
                ),
                (
                    f"kill -9 after {k['killed_after_s']:g} s",
                    f"{k['commits_received']} commits received, {k['commits_lost']} lost; restarted on the same "
                    f"store in {k['restart_s']} s",
                ),
                replica,
            ],
        ),
    ]


BENCHMARK = Benchmark(
    "service_faults",
    lambda r: f"Service faults: {r['model']}",
    measure,
    render,
    options=fault_options(40.0, 15.0),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
