"""A long day through ``mlx-ssbd serve``: does anything grow or slow down over hours of speech?

``--sessions`` sessions (2) each replay the real talk partials (``benchmarks/data/talks``) in a
loop, each pass with new segment ids, timed at 2.5 words a second with a 0.6 s breath between
sentences, until ``--hours`` of speech (2), with one SSE viewer each. The speech clock runs
``--speed`` times faster than real time (10): the engine must keep up, so by default the server
runs a random-weight model of the 0.5B's tokenizer and 64-wide layers
(``evaluation.random_models.save_random_model``): it costs what the service, the engine's
bookkeeping and the caches cost over hours, not what a real model's weights cost (``--model NAME``
runs a real one; at real-time speed for the 0.5B: ``--speed 1``). Every 10 s of speech the server
process's RSS, open file descriptors and threads are sampled. Reported: RSS, descriptors and threads
after the first 10 minutes of speech and in the last sample before the sessions end (and the
highest RSS after those 10 minutes); the caption lag (wall seconds from a
partial's send to its caption, the engine's delay) in the first and the last 10 minutes; commits
received, seen by the viewers and in the transcript.

    python -m benchmarks.service.soak --out DIR
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA, machine_line, p50_p95
from benchmarks.harness import Benchmark, option
from benchmarks.service.server import rss_mb, start_server
from mlx_ssbd.evaluation.random_models import save_random_model
from mlx_ssbd.models.registry import get_card, model_dir

TALK = DATA / "talks" / "talk-partials.jsonl"
WPS, BREATH_S, SAMPLE_S, WINDOW_S = 2.5, 0.6, 10.0, 600.0


def day(hours: float, session: int) -> list[tuple[float, dict]]:
    """The talk's partials looped for ``hours`` of speech: ``(speech time, source.update)``."""
    talk = [json.loads(line) for line in TALK.read_text().splitlines() if line.strip()]
    out, clock, loop = [], 0.0, 0
    while clock < hours * 3600:
        said, segment, start = 0, None, 0.0
        for p in talk:
            if p["id"] != segment:
                segment, said, clock = p["id"], 0, clock + BREATH_S
                start = clock
            words = len(p["text"].split())
            clock += max(0, words - said) / WPS
            said = words
            message = {"type": "source.update", "segment": f"{session}.{loop}.{p['id']}", "text": p["text"]}
            out.append(
                (clock, {**message, "final": p["final"], "start": round(start, 3), "end": round(clock, 3)})
            )
        loop += 1
    return out


def process_sample(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:"))
    return {"rss_mb": round(rss_mb(pid), 1), "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": threads}


async def speaker(url: str, partials, speed: float, t0: float, out: dict) -> None:
    """One session: sends its partials on the sped-up clock; ``out`` gets lags (speech time of the
    send, wall lag), commits and the session id."""
    import websockets

    sent: dict[tuple[str, str], float] = {}  # (segment, text) -> wall time sent
    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
        out["session"] = json.loads(await ws.recv())["session"]
        await ws.send(json.dumps({"type": "session.update", "method": "ssbd"}))
        await ws.recv()

        async def send():
            for due, message in partials:
                await asyncio.sleep(max(0.0, t0 + due / speed - time.monotonic()))
                sent[message["segment"], message["end"]] = time.monotonic()
                await ws.send(json.dumps(message))
            await ws.send(json.dumps({"type": "session.close"}))

        sender = asyncio.create_task(send())
        async for raw in ws:
            event = json.loads(raw)
            if event["type"] == "translation.update" and (event["segment"], event.get("end")) in sent:
                at = sent[event["segment"], event["end"]]
                out["lags"].append(((at - t0) * speed, time.monotonic() - at))
            if event["type"] == "translation.commit":
                out["commits"].append(event["caption"])
            elif event["type"] == "error":
                out["errors"] += 1
            elif event["type"] == "session.closed":
                break
        await sender


def viewer(url: str, sid_of: dict, seen: list, stop: threading.Event) -> None:
    import httpx

    while "session" not in sid_of and not stop.is_set():
        time.sleep(0.05)
    with httpx.stream("GET", f"{url}/v1/sessions/{sid_of['session']}/events", timeout=None) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and '"translation.commit"' in line:
                seen.append(json.loads(line[6:])["caption"])
            elif '"session.closed"' in line or stop.is_set():
                return


def window(lags: list, start: float, end: float) -> dict:
    return p50_p95((lag for at, lag in lags if start <= at < end), digits=4)


def run(model: str, hours: float, speed: float, sessions: int, scratch: Path) -> dict:
    if model == "random":
        model = str(save_random_model(scratch / "model", model_dir(get_card("qwen2.5-coder-0.5b"))))
    store = scratch / "soak.sqlite3"
    proc, url = start_server(model, store, sessions + 2)
    days = [day(hours, n) for n in range(sessions)]
    outs = [{"lags": [], "commits": [], "errors": 0} for _ in range(sessions)]
    seen: list[list[int]] = [[] for _ in range(sessions)]
    samples, stop = [], threading.Event()
    try:
        t0 = time.monotonic() + 1.0

        def sample() -> None:
            while not stop.is_set():
                samples.append(((time.monotonic() - t0) * speed, process_sample(proc.pid)))
                stop.wait(SAMPLE_S / speed)

        threads = [threading.Thread(target=sample, daemon=True)]
        threads += [
            threading.Thread(target=viewer, args=(url, outs[n], seen[n], stop), daemon=True)
            for n in range(sessions)
        ]
        for thread in threads:
            thread.start()

        async def all_speakers():
            await asyncio.gather(*(speaker(url, days[n], speed, t0, outs[n]) for n in range(sessions)))

        asyncio.run(all_speakers())
        for thread in threads[1:]:
            thread.join(60)
        stop.set()
        threads[0].join(10)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with sqlite3.connect(store) as db:
        stored = {
            sid: [
                c
                for (c,) in db.execute(
                    "SELECT caption FROM captions WHERE session = ? ORDER BY caption", (sid,)
                )
            ]
            for sid in (o["session"] for o in outs)
        }
    end = hours * 3600
    lags = [lag for o in outs for lag in o["lags"]]
    return {
        "hours": hours,
        "speed": speed,
        "sessions": sessions,
        "model": model if Path(model).name != "model" else "random (the 0.5B's tokenizer, 64 wide, 2 layers)",
        **memory(samples, end),
        "lag_first_10_min": window(lags, 0, WINDOW_S),
        "lag_last_10_min": window(lags, end - WINDOW_S, end + 3600),
        "commits": sum(len(o["commits"]) for o in outs),
        "errors": sum(o["errors"] for o in outs),
        "viewer_commits": sum(len(v) for v in seen),
        "transcript_holds_every_commit": all(
            stored[o["session"]] == sorted(o["commits"]) == list(range(len(o["commits"]))) for o in outs
        ),
        "samples": [{"speech_s": round(at, 1), **s} for at, s in samples],
    }


def memory(samples: list, end: float) -> dict:
    """The server process after the first 10 minutes of speech, in its last sample while the
    sessions still ran (the sessions' end frees their caches), and its peak."""
    live = [(at, s) for at, s in samples if at <= end]
    first = next(s for at, s in live if at >= WINDOW_S)
    last = live[-1][1]
    return {
        "after_10_min": first,
        "at_the_end": last,
        "peak_rss_mb": max(s["rss_mb"] for _, s in live),
        "peak_after_10_min_rss_mb": max(s["rss_mb"] for at, s in live if at >= WINDOW_S),
        "rss_growth": round(last["rss_mb"] / first["rss_mb"] - 1, 4),
    }


def render(result: dict) -> list[str]:
    first, last, a, b = (
        result["after_10_min"],
        result["at_the_end"],
        result["lag_first_10_min"],
        result["lag_last_10_min"],
    )
    ratio = f"{b['p50_s'] / a['p50_s']:.2f}x" if a["p50_s"] and b["p50_s"] else "-"
    return [
        f"{machine_line(result['machine'])} Model: {result['model']}; speech replayed "
        f"{result['speed']:g}x faster than real time (the real talk partials looped, new segment ids); one "
        "viewer per session.",
        "",
        "| | after 10 min of speech | at the end | end / 10 min |",
        "|---|---|---|---|",
        f"| server RSS (MB) | {first['rss_mb']} | {last['rss_mb']} | {100 * result['rss_growth']:+.1f}% |",
        f"| server RSS, highest after 10 min (MB) | | {result['peak_after_10_min_rss_mb']} | "
        f"{100 * (result['peak_after_10_min_rss_mb'] / first['rss_mb'] - 1):+.1f}% |",
        f"| open file descriptors | {first['fds']} | {last['fds']} | |",
        f"| threads | {first['threads']} | {last['threads']} | |",
        f"| caption lag p50 / p95 (wall s) | {a['p50_s']} / {a['p95_s']} (first 10 min) | "
        f"{b['p50_s']} / {b['p95_s']} (last 10 min) | {ratio} |",
        "",
        f"Commits {result['commits']} (errors {result['errors']}); the viewers saw {result['viewer_commits']}; "
        f"the transcript holds every commit once, in order: "
        f"{'yes' if result['transcript_holds_every_commit'] else 'NO'}.",
    ]


def measure(args) -> dict:
    if args.hours * 3600 <= WINDOW_S:
        raise SystemExit(
            "--hours must be more than 10 minutes of speech: the report starts after the first 10"
        )
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        result = run(args.model, args.hours, args.speed, args.sessions, Path(scratch))
    return {**result, "wall_s": round(time.time() - started)}


BENCHMARK = Benchmark(
    "service_soak",
    lambda r: f"A long day: {r['hours']:g} hours of speech through serve, {r['sessions']} sessions",
    measure,
    render,
    options=(
        option("--model", default="random", help="random (default) or a model name or path"),
        option("--hours", type=float, default=2.0, help="hours of speech per session"),
        option("--speed", type=float, default=10.0, help="speech clock / real time"),
        option("--sessions", type=int, default=2),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
