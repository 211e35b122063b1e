"""Load on ``mlx-ssbd serve``: N concurrent sessions replaying ASR partials at speaking rate.

Starts the server (a subprocess on 127.0.0.1, a free port, a scratch transcript store), then for
each method and each session count N runs N WebSocket clients at once, each replaying its own
ASR-like stream (``live_replay.speech`` / ``asr_partials``: UDHR English, ~2.5 words/s, partials
every 0.3-1.0 s, misheard and late words, finals every 45-90 s) in real time for ``--seconds``.
Caption lag = arrival time of a translation event minus the speech time of the newest word it
translates (the ``end`` the server echoes). Reports p50/p95 lag per (method, N), the most sessions
served with p95 lag under ``--target-p95`` seconds, the server's resident memory (sampled every
second) and a plot. With ``--chat-tokens N`` an OpenAI client beside the sessions asks for
completions of N tokens (a story, no prediction) back to back for the whole run, and each row
reports how many it got and how long they took: what a long chat answer does to live captions.
``--languages de/de,fr,ja`` runs every session count once per set of caption languages (each
session's ``targets``; a row of the batch per language), so one run compares one language with
three; the lag counts every language's events.

    python -m benchmarks.service.load --model qwen2.5-coder-0.5b --sessions 1,2,4,8 --seconds 90 --out DIR
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import threading
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.partials import DATA, asr_partials, speech
from benchmarks.service.lag_aims import BOUNDS, against_aim, busy_cell, most_sessions
from benchmarks.service.server import rss_mb, server_code, source_message, start_server
from mlx_ssbd.evaluation.report import pyplot, save_figure


async def client(
    url: str,
    method: str,
    languages: list[str],
    partials,
    seconds: float,
    timed: list,
    counts: dict,
    late: list,
    gaps: list,
) -> None:
    import websockets

    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/stream", max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "session.update", "method": method, "targets": languages}))
        await ws.recv()
        t0 = time.monotonic()

        async def send():
            for due, p in partials:
                if due > seconds:
                    break
                await asyncio.sleep(max(0.0, due - (time.monotonic() - t0)))
                await ws.send(source_message(p))
                counts["partials"] += 1
            await ws.send(json.dumps({"type": "session.close"}))

        sender = asyncio.create_task(send())
        last = 0.0  # when the session's last caption event came (the replay's start before any)
        async for raw in ws:
            event = json.loads(raw)
            now = time.monotonic() - t0
            if event["type"] in ("translation.update", "translation.commit") and event.get("end") is not None:
                if now <= seconds + 5:  # after the replay ends, the drain is not live lag
                    timed.append((now, now - event["end"]))
                    gaps.append(now - last)
                    last = now
                else:
                    late.append(now - event["end"])
                counts[event["type"]] += 1
            elif event["type"] == "error":
                counts["errors"] += 1
            elif event["type"] == "session.closed":
                break
        gaps.append(min(time.monotonic() - t0, seconds + 5) - last)  # since the last caption, to the end
        await sender


CHAT_PROMPT = "Tell a long story about a lighthouse keeper and a storm."


async def chat_client(url: str, tokens: int, seconds: float, answers: list) -> None:
    """Completions of ``tokens`` tokens back to back for ``seconds``: (seconds taken, tokens) each."""
    import httpx

    t0 = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        while time.monotonic() - t0 < seconds:
            start = time.monotonic()
            reply = await http.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": CHAT_PROMPT}], "max_tokens": tokens},
            )
            reply.raise_for_status()
            answers.append((time.monotonic() - start, reply.json()["usage"]["completion_tokens"]))


def server_load(url: str) -> dict:
    """The server's ``/health`` load: seconds its model was at work, and since it started."""
    import httpx

    return httpx.get(url + "/health", timeout=30).json()["load"]


def run_load(
    url: str, method: str, n: int, seconds: float, streams, chat_tokens: int = 0, languages=("de",)
) -> dict:
    # (arrival, lag) of each caption event during the replay, arrival in seconds since its session began
    timed, counts = [], {"partials": 0, "translation.update": 0, "translation.commit": 0, "errors": 0}
    answers: list[tuple[float, int]] = []
    late: list[float] = []  # lags of events that came after the replay ended (the drain)
    gaps: list[float] = []  # seconds between a session's caption events during the replay, and to its end

    async def all_clients():
        chat = [chat_client(url, chat_tokens, seconds, answers)] if chat_tokens else []
        await asyncio.gather(
            *(
                client(url, method, list(languages), streams[i], seconds, timed, counts, late, gaps)
                for i in range(n)
            ),
            *chat,
        )

    before = server_load(url)
    start = time.monotonic()
    asyncio.run(all_clients())
    after = server_load(url)
    lags = sorted(lag for _, lag in timed)
    q = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))] if lags else float("nan")
    return {
        "method": method,
        "languages": ",".join(languages),
        "sessions": n,
        "seconds": seconds,
        "wall_s": round(time.monotonic() - start, 1),
        "events": len(lags),
        "lag_p50_s": round(q(0.5), 2),
        "lag_p95_s": round(q(0.95), 2),
        "lag_max_s": round(lags[-1], 2) if lags else None,
        # the median lag of the events in the replay's first third, and in its last
        "lag_p50_thirds_s": [
            median_lag(timed, 0, seconds / 3),
            median_lag(timed, 2 * seconds / 3, seconds + 5),
        ],
        # the share of the run the server's model thread was at work (its /health load)
        "model_busy": round(
            (after["busy_s"] - before["busy_s"]) / (after["uptime_s"] - before["uptime_s"]), 3
        ),
        **counts,
        **(
            {
                "longest_gap_s": round(max(gaps), 2) if gaps else None,
                "events_after_replay": len(late),
                "lag_max_all_s": round(max(lags + late), 2) if lags + late else None,
                "chat_answers": len(answers),
                "chat_tokens": sum(t for _, t in answers),
                "chat_s_median": round(sorted(s for s, _ in answers)[len(answers) // 2], 1)
                if answers
                else None,
            }
            if chat_tokens
            else {}
        ),
    }


def median_lag(timed: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The median lag of the events that arrived from ``start`` to ``end`` (None: no event)."""
    lags = sorted(lag for arrival, lag in timed if start <= arrival < end)
    return round(lags[len(lags) // 2], 2) if lags else None


def measure(args) -> dict:
    if args.chat_tokens < 0:
        raise SystemExit("--chat-tokens must be 0 (no chat client) or more")
    if args.caption_rounds is not None and args.caption_rounds < 1:
        raise SystemExit("--caption-rounds must be at least 1")
    extra = [] if args.caption_rounds is None else ["--caption-rounds", str(args.caption_rounds)]
    counts = [int(n) for n in args.sessions.split(",")]
    language_sets = [tuple(part.split(",")) for part in args.languages.split("/")]
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    streams = []
    for i in range(max(counts)):  # each session its own talk: another start in the text, another ASR
        rng = random.Random(100 + i)
        words, _ = speech(pairs[i % len(pairs) :] + pairs, int(args.seconds * 2.5) + 20, 2.5, rng)
        streams.append(asr_partials(words, rng))
    rows, memory = [], []
    with tempfile.TemporaryDirectory() as scratch:
        code = server_code(Path(scratch))
        print(f"server code: {code}", flush=True)
        proc, url = start_server(args.model, Path(scratch) / "t.sqlite3", max(counts), extra)
        stop = threading.Event()

        def sample():
            t0 = time.monotonic()
            while not stop.wait(1.0):
                memory.append((round(time.monotonic() - t0, 1), round(rss_mb(proc.pid), 1)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for method in args.methods.split(","):
                for languages in language_sets:
                    for n in counts:
                        rows.append(
                            run_load(url, method, n, args.seconds, streams, args.chat_tokens, languages)
                        )
                        print(json.dumps(rows[-1]), flush=True)
        finally:
            stop.set()
            proc.terminate()
            proc.wait(timeout=30)
    return {
        "model": args.model,
        "methods": args.methods.split(","),
        "seconds_per_run": args.seconds,
        "target_p95_s": args.target_p95,
        "chat_tokens": args.chat_tokens,
        "caption_rounds": args.caption_rounds,
        "server_code": code,
        "languages": args.languages,
        "most_sessions_within_target": most_sessions(rows, args.methods.split(","), args.target_p95),
        "rows": rows,
        "server_rss_mb": memory,
    }


def thirds_cell(row: dict) -> str:
    first, last = row.get("lag_p50_thirds_s") or (None, None)
    return "" if first is None or last is None else f"{first:g} → {last:g}"


def render(result: dict) -> list[str]:
    m, rows, memory, methods = result["machine"], result["rows"], result["server_rss_mb"], result["methods"]
    target, rounds = result["target_p95_s"], result["caption_rounds"]
    lines = [
        f"{machine_line(m)} {m['device']}, {m['compute_dtype']}; one server process (`mlx-ssbd serve`), N "
        "WebSocket clients each replaying its own ASR-like stream (~2.5 words/s) in real time for "
        f"{result['seconds_per_run']:g} s; lag = event arrival minus the speech time of the newest word "
        f"translated. Server code: commit {result['server_code']}"
        + (f", `--caption-rounds {rounds}`." if rounds else "."),
        "",
        *markdown_table(
            ["method", "languages", "sessions", "partials", "updates", "commits", "errors", "lag p50 s", "lag p95 s",
             "lag max s", "lag p50 s, first → last third", "model busy"],
            [
                (r["method"], r.get("languages", "de"), r["sessions"], r["partials"], r["translation.update"],
                 r["translation.commit"], r["errors"], r["lag_p50_s"], r["lag_p95_s"], r["lag_max_s"],
                 thirds_cell(r), busy_cell(r))
                for r in rows
            ],
        ),
        "",
        "*model busy*: the share of the run the server's model was at work (its `/health` load). "
        "*first → last third*: the median lag of the caption events in the replay's first third and in "
        "its last. Where the model is busy near 100% and the last third's lag is well above the first's, "
        "the sessions ask more model work than the machine does in real time: their captions fall "
        "further behind as the talk goes on, and the median lag of a run grows with its length.",
        *against_aim(rows),
    ]  # fmt: skip
    if result["chat_tokens"]:
        lines += [
            "",
            f"Beside the sessions, one client asked for chat completions of {result['chat_tokens']} tokens back "
            "to back (`--chat-tokens`). Lag is measured on the events that come, and a held session sends "
            "none, so here are also the longest wait between a session's caption events during the replay, "
            "and the events held past its end (+5 s), with the largest lag of any event:",
            "",
            *markdown_table(
                ["method", "sessions", "chat answers", "their tokens", "median answer s",
                 "longest wait between captions s", "events after the replay", "lag max, every event, s"],
                [
                    (r["method"], r["sessions"], r["chat_answers"], r["chat_tokens"], r["chat_s_median"],
                     r["longest_gap_s"], r["events_after_replay"], r["lag_max_all_s"])
                    for r in rows
                ],
            ),
        ]  # fmt: skip
    best = result["most_sessions_within_target"]
    lines += [
        "",
        f"Most sessions with p95 lag under {target:g} s"
        + (f" (captions in {rows[0]['languages']})" if len({r.get("languages") for r in rows}) > 1 else "")
        + ": "
        + ", ".join(f"{k} **{v}**" for k, v in best.items())
        + ".",
        "",
        "Most sessions served (of those tried) with p95 lag under each bound:",
        "",
        *markdown_table(
            ["p95 lag under", *methods],
            [
                (f"{bound:g} s", *(most_sessions(rows, methods, bound)[method] for method in methods))
                for bound in sorted({target, *BOUNDS})
            ],
        ),
        "",
        f"Server memory (RSS): {memory[0][1] if memory else 'n/a'} MB after 1 s, "
        f"{max(v for _, v in memory) if memory else 'n/a'} MB at most, "
        f"{memory[-1][1] if memory else 'n/a'} MB at the end ({len(memory)} samples over the run).",
        "",
        "![lag](service_load.png)",
    ]
    return lines


def plot(result: dict, out: Path) -> None:
    rows, memory, target = result["rows"], result["server_rss_mb"], result["target_p95_s"]
    plt = pyplot()
    if plt is None:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for method, languages in dict.fromkeys((r["method"], r.get("languages", "de")) for r in rows):
        mine = [r for r in rows if r["method"] == method and r.get("languages", "de") == languages]
        name = method if languages == "de" else f"{method} {languages}"
        ax1.plot([r["sessions"] for r in mine], [r["lag_p95_s"] for r in mine], "o-", label=f"{name} p95")
        ax1.plot([r["sessions"] for r in mine], [r["lag_p50_s"] for r in mine], "o--", label=f"{name} p50")
    ax1.axhline(target, color="gray", lw=0.8, ls=":")
    ax1.set_xlabel("concurrent sessions")
    ax1.set_ylabel("caption lag (s)")
    ax1.set_xscale("log", base=2)
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    if memory:
        ax2.plot([t / 60 for t, _ in memory], [v for _, v in memory])
    ax2.set_xlabel("minutes into the run")
    ax2.set_ylabel("server RSS (MB)")
    ax2.grid(alpha=0.3)
    save_figure(plt, fig, out / "service_load.png")


BENCHMARK = Benchmark(
    "service_load",
    lambda r: f"Service load: {r['model']}, concurrent sessions at speaking rate",
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--methods", default="rt,ssbd"),
        option("--sessions", default="1,2,4,8"),
        option(
            "--languages",
            default="de",
            help="caption languages of each session; several sets separated by / (de/de,fr,ja): one run each",
        ),
        option("--seconds", type=float, default=90.0, help="speech replayed per session"),
        option("--target-p95", type=float, default=2.0, help="lag target, seconds"),
        option("--chat-tokens", type=int, default=0, help="a chat client beside: answers of N tokens"),
        option(
            "--caption-rounds",
            type=int,
            default=None,
            help="the server's --caption-rounds (default: the server's default)",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
