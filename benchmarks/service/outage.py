"""The database gone for minutes under a live talk: what the speaker, a viewer on another replica and
the transcript see.

Two ``mlx-ssbd serve`` replicas on one PostgreSQL (a throwaway server, ``scratch_postgres``). A
session on replica A replays ASR-like partials in real time (``faults.Good``); a viewer of it reads
the session's events from replica B as a browser's ``EventSource`` does (reconnecting with
``Last-Event-ID``). ``--outage-at`` seconds in, PostgreSQL is stopped (``pg_ctl -m immediate``) for
``--outage`` seconds, then started again. ``/health`` of A is polled every second. Reported:

* the speaker's caption lag (speech time of the newest word to the event) before, during and after
  the outage, median and p95; commits received and errors (``store_failed`` while it is down);
* A's ``/health``: answers that were not 200, and the most commits held in memory (``store.waiting``);
* the viewer on B: captions missed and repeated, its delay behind the speaker (commits made before,
  during and after the outage), and how many times it connected;
* the transcript at the end: every commit the speaker received, exactly once, numbered without a gap.

    python -m benchmarks.service.outage --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line, p50_p95
from benchmarks.harness import Benchmark, option
from benchmarks.service.failover import stored, view
from benchmarks.service.faults import Good, streams
from benchmarks.service.server import start_server
from mlx_ssbd.service.store.scratch_postgres import MISSING, postgres_server


def poll_health(url: str, stop: threading.Event, samples: list) -> None:
    import httpx

    while not stop.is_set():
        try:
            answer = httpx.get(f"{url}/health", timeout=5)
            samples.append((answer.status_code, answer.json().get("store", {})))
        except Exception as error:
            samples.append((type(error).__name__, {}))
        stop.wait(1.0)


def run(model: str, seconds: float, outage_at: float, outage: float, scratch: Path) -> dict:
    (partials,) = streams(1, seconds, 23)
    speaker, seen, samples = Good(partials), [], []
    with postgres_server() as pg:
        store = pg.new_database()
        a, url_a = start_server(model, store, 4, cwd=scratch)
        b, url_b = start_server(model, store, 4, cwd=scratch)
        stop_health = threading.Event()
        health = threading.Thread(target=poll_health, args=(url_a, stop_health, samples), daemon=True)
        try:
            window: list[float] = []

            async def scenario():
                stop = asyncio.Event()

                async def database():
                    await asyncio.sleep(outage_at)
                    window.append(time.monotonic())
                    await asyncio.to_thread(pg.stop, "immediate")
                    await asyncio.sleep(outage)
                    await asyncio.to_thread(pg.start)
                    window.append(time.monotonic())

                viewer = asyncio.create_task(
                    view(url_b, speaker, stop, lambda c: seen.append((c, time.monotonic())))
                )
                await asyncio.gather(database(), speaker.run(url_a))
                done, _ = await asyncio.wait({viewer}, timeout=60)
                stop.set()
                return viewer.result() if done else None

            health.start()
            connections = asyncio.run(scenario())
            deadline = time.monotonic() + 60  # the journal writes what it held
            while time.monotonic() < deadline and len(stored(store).get(speaker.sessions[0], [])) < len(
                speaker.commits
            ):
                time.sleep(0.5)
            in_store = [c for c, _ in stored(store).get(speaker.sessions[0], [])]
        finally:
            stop_health.set()
            for proc in (a, b):
                proc.terminate()
                proc.wait(timeout=60)
    down, up = window
    phase = lambda at: "before" if at < down else "during" if at < up else "after"
    lags = {
        p: [lag for lag, at in zip(speaker.lags, speaker.lag_at) if phase(at) == p]
        for p in ("before", "during", "after")
    }
    made = {caption: at for (_, caption, _), at in zip(speaker.commits, speaker.commit_at)}
    delays = {p: [] for p in lags}
    for caption, at in dict(seen).items():  # a caption's first showing
        if caption in made:
            delays[phase(made[caption])].append(at - made[caption])
    captions = [c for _, c, _ in speaker.commits]
    return {
        "seconds": seconds,
        "outage_at_s": outage_at,
        "outage_s": outage,
        "commits": len(captions),
        "errors": speaker.errors,
        "drops": speaker.drops,
        "lag": {p: p50_p95(v) for p, v in lags.items()},
        "health_not_200": sum(code != 200 for code, _ in samples),
        "health_checks": len(samples),
        "most_held": max((s.get("waiting", 0) for _, s in samples), default=0),
        "degraded_reported": any(s.get("state") == "failing" for _, s in samples),
        "viewer": {
            "missed": len(set(captions) - {c for c, _ in seen}),
            "repeated": len(seen) - len({c for c, _ in seen}),
            "connections": connections,
            "delay": {p: p50_p95(v) for p, v in delays.items()},
        },
        "transcript_exactly_once": sorted(in_store) == sorted(captions) == list(range(len(captions))),
    }


def render(result: dict) -> list[str]:
    lag, viewer = result["lag"], result["viewer"]
    cell = lambda q: f"{q['p50_s']} / {q['p95_s']} ({q['n']})"
    return [
        f"{machine_line(result['machine'])} A session on replica A replays {result['seconds']:g} s of ASR-like "
        f"partials in real time; PostgreSQL is stopped {result['outage_at_s']:g} s in and started again "
        f"{result['outage_s']:g} s later; a viewer reads the session from replica B.",
        "",
        "| | before | during the outage | after |",
        "|---|---|---|---|",
        f"| speaker's caption lag, p50 / p95 (s) (events) | {cell(lag['before'])} | {cell(lag['during'])} | "
        f"{cell(lag['after'])} |",
        "| viewer on the other replica: delay behind the speaker, p50 / p95 (s) (captions) | "
        + " | ".join(cell(viewer["delay"][p]) for p in ("before", "during", "after"))
        + " |",
        "",
        "| | |",
        "|---|---|",
        f"| commits the speaker received / errors / drops | {result['commits']} / {result['errors']} / "
        f"{result['drops']} |",
        f"| replica A's /health: checks, not 200 | {result['health_checks']}, {result['health_not_200']} |",
        f"| /health said the store was failing / most commits held in memory | "
        f"{'yes' if result['degraded_reported'] else 'no'} / {result['most_held']} |",
        f"| viewer: captions missed / repeated / connections | {viewer['missed']} / {viewer['repeated']} / "
        f"{viewer['connections']} |",
        f"| transcript: every commit exactly once, numbered without a gap | "
        f"{'yes' if result['transcript_exactly_once'] else 'NO'} |",
    ]


def measure(args) -> dict:
    if MISSING:
        raise SystemExit(MISSING)
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        return {
            "model": args.model,
            **run(args.model, args.seconds, args.outage_at, args.outage, Path(scratch)),
            "wall_s": round(time.time() - started),
        }


BENCHMARK = Benchmark(
    "service_outage",
    lambda r: f"The database gone for {r['outage_s']:g} s under a live talk: {r['model']}",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--seconds", type=float, default=420.0, help="speech the session replays"),
        option("--outage-at", type=float, default=60.0),
        option("--outage", type=float, default=300.0, help="seconds the database is down"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
