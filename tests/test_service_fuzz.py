"""No client can stop ``mlx-ssbd serve`` or disturb another session: thousands of messages made
from valid ones by mutation, sent by real WebSocket clients while a reference session translates;
the reference session's commits must be identical to its commits without them."""

import asyncio
import contextlib
import copy
import json
import random
import time

import httpx
import websockets
from serving import server, ws_url

REFERENCE = [
    "so today I want to talk about the new rules",
    "why we made them for all people",
    "and what they mean for you",
]
VALID = [
    {"type": "session.update", "source": "en", "target": "de", "method": "ssbd", "beta": 0.2, "mask_k": 0},
    {
        "type": "source.update",
        "segment": "a1",
        "text": "so today we talk",
        "final": False,
        "start": 0.0,
        "end": 1.5,
    },
    {
        "type": "source.update",
        "segment": "a1",
        "text": "so today we talk about",
        "final": True,
        "start": 0.0,
        "end": 2.0,
    },
    {"type": "source.update", "segment": 7, "text": "hello there", "final": False},
]
NASTY = [
    float("nan"),
    float("inf"),
    -float("inf"),
    -1,
    -1e300,
    1e300,
    2**70,
    -(2**70),
    0,
    0.5,
    "",
    "\x00\x01",
    "\ud800",
    "x" * 5000,
    "é" * 3000,
    None,
    True,
    False,
    [],
    {},
    [[[[1]]]],
    {"a": {"b": {}}},
    "<script>alert(1)</script>",
    "a --> b",
    "\u202e",
    "session.close",
    "source.update",
]
KEYS = [
    "type",
    "text",
    "start",
    "end",
    "segment",
    "final",
    "beta",
    "mask_k",
    "source",
    "target",
    "method",
    "extra",
]
ATTACK_MESSAGES = 3000


def mutant(rng: random.Random):
    """A frame made from a valid message: ``(payload, as_text)``."""
    roll = rng.random()
    if roll < 0.05:
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 3, 640, 4000]))), False  # binary
    if roll < 0.08:
        return b'\xff\xfe{"type": "\xc3', True  # a text frame that is not UTF-8
    if roll < 0.11:
        depth = rng.choice([100, 1000, 20000])
        return "[" * depth + "]" * depth, True
    if roll < 0.14:
        whole = json.dumps(rng.choice(VALID))
        return whole[: rng.randrange(len(whole))], True  # cut short
    if roll < 0.17:
        return rng.choice(
            [
                '{"type": "source.update", "text": "a", "final": true, "start": 1e999}',
                '{"type": "source.update", "text": "a", "final": true, "start": NaN, "end": 1}',
                '{"type": "source.update", "text": "a", "final": true, "start": 5, "end": 1}',
                '{"type": "session.update", "beta": -Infinity}',
            ]
        ), True
    message = copy.deepcopy(rng.choice(VALID))
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(KEYS)
        if rng.random() < 0.25:
            message.pop(key, None)
        else:
            message[key] = copy.deepcopy(rng.choice(NASTY))
    return json.dumps(message), True  # Python writes NaN and Infinity, as a careless client does


async def reference(base, events):
    """A session translating REFERENCE in lockstep (each partial waits for its update, so what
    it translates never depends on timing); records every event."""
    async with websockets.connect(ws_url(base)) as ws:

        async def until(kind):
            while True:
                events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=120)))
                if events[-1]["type"] == kind:
                    return

        events.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"type": "session.update", "method": "ssbd", "beta": 0.2}))
        await until("session.updated")
        for i, sentence in enumerate(REFERENCE):
            words = sentence.split()
            for n in range(2, len(words)):
                await ws.send(
                    json.dumps({"type": "source.update", "segment": f"r{i}", "text": " ".join(words[:n])})
                )
                await until("translation.update")
                await asyncio.sleep(0.05)
            await ws.send(
                json.dumps({"type": "source.update", "segment": f"r{i}", "text": sentence, "final": True})
            )
            await until("translation.commit")
        await ws.send(json.dumps({"type": "session.close"}))
        await until("session.closed")


async def attacker(base, rng, sent, stop, *, reads: bool):
    """Sends mutants on one connection after another (a new one whenever the server closes it)
    until ``stop``; ``reads``: it reads its events (else it never reads one)."""
    while not stop.is_set():
        try:
            async with websockets.connect(ws_url(base), max_size=None) as ws:
                reader = asyncio.create_task(_drain(ws)) if reads else None
                while not stop.is_set():
                    payload, as_text = mutant(rng)
                    await ws.send(payload, text=as_text)
                    sent[0] += 1
                    if sent[0] % 50 == 0:
                        await asyncio.sleep(0.01)  # let the reference's frames through the client's own loop
                if reader is not None:
                    reader.cancel()
        except (websockets.ConnectionClosed, websockets.InvalidStatus, OSError):
            await asyncio.sleep(0.05)


async def _drain(ws):
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in ws:
            pass


def commits(events):
    return [(e["caption"], e["text"]) for e in events if e["type"] == "translation.commit"]


def test_mutated_messages_never_stop_the_server_nor_change_another_session(model_dir, tmp_path):
    async def attacked(base):
        events, sent, stop = [], [0], asyncio.Event()
        rngs = [random.Random(1), random.Random(2)]
        attackers = [
            asyncio.create_task(attacker(base, rngs[0], sent, stop, reads=True)),
            asyncio.create_task(attacker(base, rngs[1], sent, stop, reads=False)),
        ]
        while sent[0] < 200:
            await asyncio.sleep(0.01)
        await reference(base, events)
        deadline = time.monotonic() + 120
        while sent[0] < ATTACK_MESSAGES and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait(attackers, timeout=30)
        return events, sent[0]

    # Pauses off: a busy server must not make the reference's lockstep partials look like pauses.
    with server(model_dir, tmp_path / "t.sqlite3", "--max-sessions", "6", "--pause", "0") as (base, proc):
        alone: list[dict] = []
        asyncio.run(reference(base, alone))
        events, sent = asyncio.run(attacked(base))
        assert proc.poll() is None, "the server exited"
        assert httpx.get(base + "/health").json()["status"] == "ok"
        assert sent >= ATTACK_MESSAGES
        assert commits(events) == commits(alone) and len(commits(alone)) == len(REFERENCE)
        assert not [e for e in events if e["type"] == "error"]
        stored = httpx.get(f"{base}/v1/sessions/{events[0]['session']}/transcript.json").json()["captions"]
        assert [(c["caption"], c["text"]) for c in stored] == commits(alone)
        log = open(f"{tmp_path / 't.sqlite3'}.server.log").read()
        # every attack was refused as bad input, none reached a bug of ours (uvicorn logs the text
        # frames that are not UTF-8, which it closes with 1007, as it should)
        assert "mlx_ssbd/" not in log and "mlx-ssbd serve: ERROR" not in log, log[-3000:]
