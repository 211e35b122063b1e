"""Push targets under a real talk: every commit once and in order, while one target is down.

A session on ``mlx-ssbd serve`` (a real model) replays ASR-like partials in real time, captioned
in German and French, pushed to a Zoom-rules endpoint (de-DE and fr-FR), a YouTube-rules endpoint
(German) and an obs-websocket 5 peer (French), with a viewer of the German captions (SSE). The
endpoints are ``push_peers``: local servers that enforce each platform's documented rules. Two
runs on one server: all targets healthy, then the YouTube endpoint answering 503 for
``--outage`` seconds from ``--outage-at``. Reported per run: for each target the lines it should
get (the commits cut as its platform takes them), whether it got exactly those once and in
order, and its delivery delay (commit received by the speaker's client to line accepted by the
endpoint) median, p95 and max; the viewer's delay (speaker's commit to viewer's) and the
speaker's caption lag (speech time of the newest word to the event), median and p95.

    python -m benchmarks.service.push --model qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.service.faults import streams
from benchmarks.service.push_peers import ObsPeer, RulesServer
from benchmarks.service.server import source_message, start_server
from mlx_ssbd.push.senders import lines_for
from mlx_ssbd.push.spec import parse_targets

import httpx


def quantiles(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {"p50_s": None, "p95_s": None, "max_s": None}
    return {
        "p50_s": round(statistics.median(values), 3),
        "p95_s": round(values[int(0.95 * (len(values) - 1))], 3),
        "max_s": round(values[-1], 3),
    }


def viewer(url: str, sid: str, lang: str, seen: list, stop: threading.Event) -> None:
    """Read a session's viewer events (SSE) into ``seen``: (caption, receive time)."""
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events?lang={lang}", timeout=None) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "translation.commit":
                    seen.append((event["caption"], time.monotonic()))
                elif event["type"] == "session.closed" or stop.is_set():
                    return


async def talk(url: str, partials, push: list[dict], on_start) -> tuple[str, list, list]:
    """The speaker's session: ``(id, commits as (target, caption, text, receive time), lags)``."""
    import websockets

    commits, lags = [], []
    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
        sid = json.loads(await ws.recv())["session"]
        await ws.send(json.dumps({"type": "session.update", "targets": ["de", "fr"], "push": push}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
        on_start(sid)
        t0 = time.monotonic()

        async def send():
            for due, partial in partials:
                await asyncio.sleep(max(0.0, due - (time.monotonic() - t0)))
                await ws.send(source_message(partial))
            await ws.send(json.dumps({"type": "session.close"}))

        sender = asyncio.create_task(send())
        async for raw in ws:
            event = json.loads(raw)
            now = time.monotonic()
            if event.get("end") is not None and event["type"].startswith("translation."):
                lags.append(now - t0 - event["end"])
            if event["type"] == "translation.commit":
                commits.append((event["target"], event["caption"], event["text"], now))
            elif event["type"] == "session.closed":
                break
        sender.cancel()
    return sid, commits, lags


def delivered(spec, commits: list, received: list[tuple[str, float]]) -> dict:
    """One target's lines against what it should have got: exactly once, in order, delays."""
    expected = [
        (line, at)
        for target, _, text, at in commits
        if target in spec.languages
        for line in lines_for(spec, text)
    ]
    got = [text for text, _ in received]
    exact = got == [line for line, _ in expected]
    delays = [when - at for (_, at), (_, when) in zip(expected, received)] if exact else []
    return {"lines": len(expected), "received": len(got), "exactly_once_in_order": exact, **quantiles(delays)}


def run_once(url: str, partials, outage: tuple[float, float] | None) -> dict:
    zoom, youtube, obs = RulesServer("zoom", ("de-DE", "fr-FR")), RulesServer("youtube"), ObsPeer("bench")
    obs_url = f"ws://:bench@127.0.0.1:{obs.port}"
    push = [
        {"platform": "zoom", "url": zoom.url},
        {"platform": "youtube", "lang": "de", "url": youtube.url},
        {"platform": "obs", "lang": "fr", "url": obs_url},
    ]
    seen, stop, threads = [], threading.Event(), []

    def started(sid: str) -> None:
        threads.append(threading.Thread(target=viewer, args=(url, sid, "de", seen, stop), daemon=True))
        threads[-1].start()
        if outage is not None:
            at, seconds = outage
            threading.Timer(at, lambda: setattr(youtube, "fail_with", 503)).start()
            threading.Timer(at + seconds, lambda: setattr(youtube, "fail_with", None)).start()

    try:
        sid, commits, lags = asyncio.run(talk(url, partials, push, started))
        deadline = time.monotonic() + 120  # the targets drain after the session's end
        total = lambda: len(zoom.received) + len(youtube.received) + len(obs.captions)
        specs = parse_targets([(p["platform"], p.get("lang"), p["url"]) for p in push], ("de", "fr"))
        expected = sum(len(lines_for(s, c[2])) for s in specs for c in commits if c[0] in s.languages)
        while total() < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join(30)
        when = {caption: at for target, caption, _, at in commits if target == "de"}
        received = {
            "zoom": [(text, at) for _, text, _, at in zoom.received],
            "youtube": [(text, at) for _, text, _, at in youtube.received],
            "obs": list(obs.captions),
        }
        health = httpx.get(f"{url}/health").json()["push"]
        return {
            "session": sid,
            "commits": len(commits),
            "targets": {s.platform: delivered(s, commits, received[s.platform]) for s in specs},
            "rule_violations": len(zoom.violations) + len(youtube.violations),
            "youtube_posts": youtube.posts,
            "viewer_delay": quantiles([at - when[caption] for caption, at in seen if caption in when]),
            "viewer_commits": len(seen),
            "caption_lag": quantiles(lags),
            "health_push": health,
        }
    finally:
        zoom.close()
        youtube.close()
        obs.close()


def render(result: dict) -> list[str]:
    runs = result["runs"]
    out = [
        f"{machine_line(result['machine'])} One session replays {result['seconds']:g} s of ASR-like partials in "
        "real time, captioned in German and French, pushed to a Zoom-rules endpoint (de-DE, fr-FR), a "
        "YouTube-rules endpoint (de) and an obs-websocket 5 peer (fr), local servers that enforce each "
        f"platform's rules (`benchmarks/service/push_peers.py`); in the second run the YouTube endpoint "
        f"answers 503 for {result['outage_s']:g} s from {result['outage_at_s']:g} s.",
        "",
    ]
    out += markdown_table(
        ["run", "target", "lines", "exactly once, in order", "delay p50 (s)", "p95 (s)", "max (s)"],
        [
            (name, target, each["lines"], "yes" if each["exactly_once_in_order"] else "NO", each["p50_s"],
             each["p95_s"], each["max_s"])
            for name, run in runs.items()
            for target, each in run["targets"].items()
        ],
    )  # fmt: skip
    return [
        *out,
        "",
        *markdown_table(
            ["run", "commits", "viewer delay p50 / p95 (s)", "speaker's caption lag p50 / p95 (s)", "rule violations"],
            [
                (name, run["commits"], f"{run['viewer_delay']['p50_s']} / {run['viewer_delay']['p95_s']}",
                 f"{run['caption_lag']['p50_s']} / {run['caption_lag']['p95_s']}", run["rule_violations"])
                for name, run in runs.items()
            ],
        ),
    ]  # fmt: skip


def measure(args) -> dict:
    started = time.time()
    (partials,) = streams(1, args.seconds, seed=5)
    with tempfile.TemporaryDirectory() as scratch:
        proc, url = start_server(args.model, Path(scratch) / "s.sqlite3", 4)
        try:
            runs = {
                "all healthy": run_once(url, partials, None),
                "youtube down": run_once(url, partials, (args.outage_at, args.outage)),
            }
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {
        "model": args.model,
        "seconds": args.seconds,
        "outage_s": args.outage,
        "outage_at_s": args.outage_at,
        "runs": runs,
        "wall_s": round(time.time() - started),
    }


BENCHMARK = Benchmark(
    "service_push",
    lambda r: f"Push targets under a live talk: {r['model']}",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--seconds", type=float, default=120.0, help="speech the session replays"),
        option("--outage", type=float, default=60.0, help="seconds the YouTube endpoint answers 503"),
        option("--outage-at", type=float, default=15.0, help="when the outage starts (s into the talk)"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
