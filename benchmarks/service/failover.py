"""Failover of replicas sharing a PostgreSQL store: what a caption team's viewers and speakers see.

Two ``mlx-ssbd serve`` replicas on one PostgreSQL (a throwaway server: Debian's binaries, ``initdb``
in a temporary directory, ``mlx_ssbd.service.store.scratch_postgres``) behind HAProxy (``service.deploy``); 4 sessions
replay ASR-like streams in real time (``benchmarks.service.faults.Good`` clients), each with one SSE
viewer, both through the proxy. After ``--kill-after`` seconds one replica is killed with SIGKILL.
The killed replica's clients reconnect through the proxy and send ``session.resume`` (retrying
while the session still looks live), then go on with their stream; viewers reconnect as a
browser's ``EventSource`` does, with ``Last-Event-ID``. Reported:

* commits lost: commits a client received that are not in the store at the end (must be 0);
* resume time: from the kill to ``session.resumed``, per resumed session;
* viewer events lost / repeated: per session, committed captions its viewer never saw, or saw twice;
* numbering: whether every session's transcript is numbered 0..n-1 without a gap;
* the other replica's sessions: drops and errors (must be 0).

    python -m benchmarks.service.failover --model qwen2.5-coder-0.5b --seconds 60 --out DIR
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table
from benchmarks.service.faults import Good, fault_options, replicas_behind_haproxy, streams
from mlx_ssbd.service.store.scratch_postgres import MISSING, postgres_server


async def view(url: str, speaker: Good, stop: asyncio.Event, on_commit) -> int:
    """An ``EventSource``: reads the session's SSE, reconnecting with ``Last-Event-ID``; calls
    ``on_commit(caption number)`` for each commit it shows; returns the connections it made."""
    import httpx

    while not speaker.sessions:
        await asyncio.sleep(0.05)
    sid = speaker.sessions[0]
    last, connections = None, 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(5, read=60)) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                headers = {"Last-Event-ID": last} if last else {}
                async with client.stream("GET", f"{url}/v1/sessions/{sid}/events", headers=headers) as r:
                    connections += 1
                    event_id = None
                    async for line in r.aiter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("data: "):
                            event = json.loads(line[6:])
                            if event["type"] == "translation.commit":
                                on_commit(event["caption"])
                                last = event_id or last
                            if event["type"] == "session.closed":
                                return connections
                            event_id = None
            await asyncio.sleep(1.0)
    return connections


def stored(url: str) -> dict[str, list[tuple[int, str]]]:
    import psycopg

    with psycopg.connect(url) as db:
        rows = db.execute("SELECT session, caption, text FROM captions ORDER BY session, caption").fetchall()
    out: dict[str, list] = {}
    for session, caption, text in rows:
        out.setdefault(session, []).append((caption, text))
    return out


def run(model: str, seconds: float, kill_after: float, scratch: Path) -> dict:
    import httpx

    speakers = [Good(p, reconnect=True, resume=True) for p in streams(4, seconds, 31)]
    seen: list[list[int]] = [[] for _ in speakers]
    with postgres_server() as pg:
        store = pg.new_database()
        with replicas_behind_haproxy(model, [store, store], scratch) as (servers, url):
            replica_of = {httpx.get(u + "/health").json()["replica"]: proc for proc, u in servers}

            async def scenario():
                stop = asyncio.Event()

                async def killer():
                    await asyncio.sleep(kill_after)
                    owners = {
                        s["session"]: s["replica"] for s in httpx.get(f"{url}/v1/sessions").json()["sessions"]
                    }
                    victim = owners[speakers[0].sessions[0]]
                    replica_of[victim].send_signal(signal.SIGKILL)
                    now = time.monotonic()
                    for speaker in speakers:
                        if owners.get(speaker.sessions[0]) == victim:
                            speaker.killed_at = now

                viewers = [
                    asyncio.create_task(view(url, s, stop, seen[i].append)) for i, s in enumerate(speakers)
                ]
                await asyncio.gather(killer(), *(s.run(url) for s in speakers))
                done, _ = await asyncio.wait(viewers, timeout=30)
                stop.set()
                return [v.result() if v in done else None for v in viewers]

            connections = asyncio.run(scenario())
        in_store = stored(store)
    resumed = [s for s in speakers if s.killed_at is not None]
    undisturbed = [s for s in speakers if s.killed_at is None]
    received = set(c for s in speakers for c in s.commits)
    kept = {(sid, c, t) for sid, rows in in_store.items() for c, t in rows}
    resume_s = [t for s in resumed for t in s.resume_s]
    return {
        "sessions": len(speakers),
        "resumed_sessions": len(resumed),
        "resumed": sum(bool(s.resume_s) for s in resumed),
        "resume_s": {
            "median": round(statistics.median(resume_s), 3) if resume_s else None,
            "max": round(max(resume_s), 3) if resume_s else None,
        },
        "commits_received": len(received),
        "commits_lost": len(received - kept),
        "numbered_without_gaps": all(
            [c for c, _ in in_store.get(s.sessions[0], [])]
            == list(range(len(in_store.get(s.sessions[0], []))))
            for s in speakers
        ),
        "viewer_commits_missed": sum(
            len({c for c, _ in in_store.get(s.sessions[0], [])} - set(seen[i]))
            for i, s in enumerate(speakers)
        ),
        "viewer_commits_repeated": sum(len(v) - len(set(v)) for v in seen),
        "viewer_connections": connections,
        "undisturbed": {
            "sessions": len(undisturbed),
            "drops": sum(s.drops for s in undisturbed),
            "errors": sum(s.errors for s in undisturbed),
        },
        "killed_after_s": kill_after,
    }


def measure(args) -> dict:
    if MISSING or shutil.which("haproxy") is None:
        raise SystemExit(f"this benchmark needs PostgreSQL's server and haproxy: {MISSING or 'no haproxy'}")
    with tempfile.TemporaryDirectory() as scratch:
        return {
            "model": args.model,
            "seconds": args.seconds,
            **run(args.model, args.seconds, args.kill_after, Path(scratch)),
        }


def render(result: dict) -> list[str]:
    r = result
    return [
        f"{machine_line(r['machine'])} 2 replicas, one PostgreSQL, HAProxy; 4 sessions replay {r['seconds']:g} s of "
        f"ASR-like partials in real time, one SSE viewer each; one replica killed (SIGKILL) after "
        f"{r['killed_after_s']:g} s. See the script's docstring.",
        "",
        *markdown_table(
            ["figure", "value"],
            [
                ("sessions of the killed replica resumed on the other", f"{r['resumed']}/{r['resumed_sessions']}"),
                ("resume time (kill to session.resumed), median / max",
                 f"{r['resume_s']['median']} s / {r['resume_s']['max']} s"),
                ("commits received by clients / lost", f"{r['commits_received']} / {r['commits_lost']}"),
                ("transcripts numbered without a gap", "yes" if r["numbered_without_gaps"] else "NO"),
                ("viewer commits missed / repeated", f"{r['viewer_commits_missed']} / {r['viewer_commits_repeated']}"),
                ("viewer connections (reconnects with Last-Event-ID)", r["viewer_connections"]),
                ("the other replica's sessions: drops / errors",
                 f"{r['undisturbed']['drops']} / {r['undisturbed']['errors']}"),
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "service_failover",
    lambda r: f"Failover of replicas on PostgreSQL: {r['model']}",
    measure,
    render,
    options=fault_options(60.0, 25.0),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
