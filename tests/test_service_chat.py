"""The OpenAI chat endpoint beside live captions: Predicted Outputs, streaming, chunked prompts, shared
rounds, and clients that leave."""

import asyncio
import json
import time

from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.service import chat, protocol
from mlx_ssbd.service.chat import ChatEngine
from mlx_ssbd.service.protocol import ProtocolError
from mlx_ssbd.service.scheduler import Scheduler

import httpx
import pytest
import websockets
from serving import SENTENCE, server, source, ws_url
from waiting import until


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
