"""Transcripts and viewers of a running server: JSON, SRT and VTT, a viewer following over SSE, the
caption page in a browser, and a kill -9 that loses no committed caption."""

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import time

import httpx
import pytest
import websockets
from serving import SENTENCE, server, session_events, source, ws_url

TWO_SENTENCES = ["so today we talk.", "why we made the new rules."]


def two_captions(base):
    """A session committing two captions; returns (session id, commits received)."""
    messages = [
        {"type": "session.update", "method": "rt"},
        *(source(t, final=True, segment=f"s{i}") for i, t in enumerate(TWO_SENTENCES)),
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(base, messages))
    return events[0]["session"], [e for e in events if e["type"] == "translation.commit"]


def test_transcripts_as_json_srt_and_vtt(url):
    import srt
    import webvtt

    sid, commits = two_captions(url)
    doc = httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()
    assert [c["text"] for c in doc["captions"]] == [c["text"] for c in commits] and not doc["live"]
    assert doc["settings"]["method"] == "rt" and [c["source"] for c in doc["captions"]] == TWO_SENTENCES
    subs = list(srt.parse(httpx.get(f"{url}/v1/sessions/{sid}/transcript.srt").text))
    assert [s.content for s in subs] == [c["text"] for c in commits if c["text"]]
    vtt = httpx.get(f"{url}/v1/sessions/{sid}/transcript.vtt")
    assert vtt.headers["content-type"].startswith("text/vtt")
    cues = webvtt.from_buffer(__import__("io").StringIO(vtt.text))
    assert [c.text for c in cues] == [s.content for s in subs]
    assert httpx.get(f"{url}/v1/sessions/nope/transcript.json").status_code == 404
    assert httpx.get(f"{url}/v1/sessions/{sid}/transcript.txt").status_code == 404
    whole = list(srt.parse(httpx.get(f"{url}/v1/sessions/{sid}/transcript.srt?chars=0").text))
    assert [s.content for s in whole] == [c["text"] for c in commits if c["text"]]  # one line a caption
    for bad in ("-1", "x", "1001", "²", "9" * 5000):  # a digit int() refuses; more digits than it reads
        refused = httpx.get(f"{url}/v1/sessions/{sid}/transcript.srt?chars={bad}")
        assert refused.status_code == 400 and "chars" in refused.json()["message"]


def read_sse(response):
    """The JSON events of a Server-Sent Events response, until ``session.closed``."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == "session.closed":
                return events
    return events


def test_a_viewer_follows_a_live_session_over_sse(url):
    async def talk(ready, sid_box):
        async with websockets.connect(ws_url(url)) as ws:
            sid_box.append(json.loads(await ws.recv())["session"])
            ready.wait(10)  # the viewer is connected
            for i, text in enumerate(TWO_SENTENCES):
                await ws.send(json.dumps(source(text, final=True, segment=f"s{i}")))
            await ws.send(json.dumps({"type": "session.close"}))
            async for _ in ws:
                pass

    import threading

    ready, sid_box = threading.Event(), []
    talker = threading.Thread(target=lambda: asyncio.run(talk(ready, sid_box)))
    talker.start()
    while not sid_box:
        time.sleep(0.01)
    with httpx.stream("GET", f"{url}/v1/sessions/{sid_box[0]}/events", timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        ready.set()
        live = read_sse(response)
    talker.join()
    assert [e["caption"] for e in live if e["type"] == "translation.commit"] == [0, 1]
    # an ended session: its captions are replayed, then it says it is closed
    with httpx.stream("GET", f"{url}/v1/sessions/{sid_box[0]}/events", timeout=60) as response:
        replay = read_sse(response)
    assert [e["text"] for e in replay if e["type"] == "translation.commit"] == [
        e["text"] for e in live if e["type"] == "translation.commit"
    ]
    page = httpx.get(f"{url}/captions/{sid_box[0]}")
    assert page.status_code == 200 and f"/v1/sessions/{sid_box[0]}/events" in page.text
    assert httpx.get(f"{url}/captions/nope").status_code == 404


def test_kill_9_loses_no_committed_caption_and_the_server_restarts_on_its_store(model_dir, tmp_path):
    """Killed mid-stream, right after the first commit reached the client: every commit the
    client received is in the store, and a new server on the same store serves it."""
    store = tmp_path / "t.sqlite3"

    async def until_first_commit_then_kill(base, proc):
        received = []
        async with websockets.connect(ws_url(base)) as ws:
            sid = json.loads(await ws.recv())["session"]
            for i, text in enumerate([*TWO_SENTENCES, SENTENCE]):
                await ws.send(json.dumps(source(text, final=True, segment=f"s{i}")))
            with contextlib.suppress(websockets.ConnectionClosed):
                async for raw in ws:
                    event = json.loads(raw)
                    if event["type"] == "translation.commit":
                        received.append(event)
                        if proc.poll() is None:
                            proc.send_signal(signal.SIGKILL)  # no shutdown at all
        return sid, received

    with server(model_dir, store) as (base, proc):
        sid, received = asyncio.run(until_first_commit_then_kill(base, proc))
        assert proc.wait(timeout=10) == -signal.SIGKILL
    assert received
    with server(model_dir, store) as (base, _):
        stored = httpx.get(f"{base}/v1/sessions/{sid}/transcript.json").json()["captions"]
        assert [c["text"] for c in stored][: len(received)] == [c["text"] for c in received]
        assert any(
            e["type"] == "translation.commit"
            for e in asyncio.run(session_events(base, [source("why", final=True), {"type": "session.close"}]))
        )


def chromium():

    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (CI installs it)")
def test_the_caption_page_shows_the_captions_in_headless_chromium(url, tmp_path):
    """The OBS page, rendered by a real browser: its script reads the session's SSE and puts the
    committed captions on screen; the screenshot has the caption's pixels where an empty page has none."""
    from PIL import Image

    sid, commits = two_captions(url)
    browser = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=960,240",
        "--virtual-time-budget=10000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*browser, "--dump-dom", f"{url}/captions/{sid}?lines=2"], capture_output=True, text=True, timeout=120
    ).stdout
    for commit in commits:
        assert f'<div class="line done">{commit["text"]}</div>' in dom, dom
    assert '<div id="status">ended</div>' in dom

    def ink(page, name):
        shot = tmp_path / name
        subprocess.run([*browser, f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)
        pixels = Image.open(shot).convert("L").tobytes()
        return sum(1 for p in pixels if p < 128)  # the captions' dark outline on the white default background

    blank = ink(f"{url}/captions/{sid}?lines=0", "blank.png")  # the same page keeping no lines on screen
    shown = ink(f"{url}/captions/{sid}?lines=2", "captions.png")
    assert shown > 500 and shown > 20 * max(blank, 1), (shown, blank)
    print(f"caption pixels {shown}, empty page {blank}; screenshot: {tmp_path / 'captions.png'}")
