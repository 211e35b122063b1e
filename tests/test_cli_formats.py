"""The command line's timed input and subtitle output on the tiny model: ASR chunks with their
speech times, SRT and VTT cues timed by them (or by the clock), a real-time replay paced by the
input's own clock, and bad lines of those formats refused with their file and line."""

import json
import time

import pytest
from conftest import write

ASR_CHUNKS = [
    {"start": 0.0, "end": 1.2, "text": "so today", "is_final": False},
    {"start": 1.2, "end": 2.5, "text": "I want to talk", "is_final": True},
    {"start": 3.0, "end": 4.0, "text": "about rules", "is_final": True},
]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_parse_and_are_timed_by_the_asr(run, tmp_path, fmt):
    path = write(tmp_path, "asr.jsonl", "".join(json.dumps(c) + "\n" for c in ASR_CHUNKS))
    result = run("translate", "--stream", path, "--format", fmt)
    assert result.exit_code == 0, result.output
    if fmt == "srt":
        import srt

        cues = [(c.start.total_seconds(), c.end.total_seconds(), c.content) for c in srt.parse(result.stdout)]
    else:
        import io

        import webvtt

        seconds = lambda stamp: sum(float(x) * 60**i for i, x in enumerate(reversed(stamp.split(":"))))
        cues = [
            (seconds(c.start), seconds(c.end), c.text) for c in webvtt.from_buffer(io.StringIO(result.stdout))
        ]
    assert [(start, end) for start, end, _ in cues] == [(0.0, 2.5), (3.0, 4.0)]
    assert all(text.strip() for _, _, text in cues)


def test_subtitle_lines_hold_cue_chars_and_a_longer_caption_is_several_cues_in_its_time(run, tmp_path):
    import io

    from mlx_ssbd.live.session import CaptionCommit
    from mlx_ssbd_cli.sinks import make_sink

    import srt

    text = "so today I want to talk about the new rules for all of us, and we made them together."
    commit = CaptionCommit(0, 0, text, "src", 2.0, 8.0, "asr", "final", None, 0, 8.0, 9.0)
    for chars, count in ((None, 2), (20, 3), (0, 1)):
        sink = make_sink("srt", output=None, line_chars=chars)
        sink.out = out = io.StringIO()
        sink.commit(commit)
        cues = list(srt.parse(out.getvalue()))
        lines = [line for c in cues for line in c.content.split("\n")]
        assert len(cues) == count and " ".join(lines) == text
        assert max(map(len, lines)) <= {None: 42, 20: 20, 0: len(text)}[chars]
        assert (cues[0].start.total_seconds(), cues[-1].end.total_seconds()) == (2.0, 8.0)
    path = write(tmp_path, "talk.txt", "so today\n")
    refused = run("translate", "--stream", path, "--format", "srt", "--cue-chars", "-1")
    assert refused.exit_code == 2 and "--cue-chars" in refused.output
    refused = run("translate", "--stream", path, "--format", "text", "--cue-chars", "30")
    assert refused.exit_code == 2 and "needs --format srt or vtt" in refused.output


def test_subtitles_without_asr_times_use_the_clock(run, tmp_path):
    import srt

    path = write(tmp_path, "talk.txt", "so today I want to talk\nabout the new rules\n")
    result = run("translate", "--stream", path, "--format", "srt")
    cues = list(srt.parse(result.stdout))
    assert result.exit_code == 0 and len(cues) == 2
    assert cues[0].start <= cues[1].start and all(c.end > c.start for c in cues)


def test_realtime_replay_follows_asr_times_and_skips_stale_partials(run, tmp_path):
    chunks = [{"id": "a", "text": " ".join(["word"] * n), "end": 0.05 * n} for n in range(1, 21)]
    chunks[-1]["final"] = True
    path = write(tmp_path, "fast.jsonl", "".join(json.dumps(c) + "\n" for c in chunks))
    start = time.time()
    result = run("translate", "--stream", path, "--format", "jsonl", "--realtime", "--no-auto-commit")
    assert result.exit_code == 0 and time.time() - start >= 1.0  # paced by the 'end' times
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["type"] == "commit" and events[-1]["source"] == chunks[-1]["text"]  # final kept


@pytest.mark.parametrize(
    "name,content,message",
    [
        (
            "w.jsonl",
            '{"start": 0, "end": 1, "text": "so", "is_final": false}\n{"start": 1, "end": 2, "text": 3}\n',
            "w.jsonl:2: field 'text' must be str",
        ),
        (
            "c.jsonl",
            '{"text": "so", "unconfirmed_text": 5}\n',
            "c.jsonl:1: field 'unconfirmed_text' must be str",
        ),
    ],
)
def test_bad_lines_in_the_new_formats(run, tmp_path, name, content, message):
    result = run("translate", "--stream", write(tmp_path, name, content), "--format", "text")
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_realtime_text_is_paced_by_its_words_two_characters_a_word_without_spaces(monkeypatch):
    """--realtime without ASR times: an update is due when its new words have been spoken at
    --wps; in Chinese two characters make a word. The clock is faked: nothing waits."""
    from mlx_ssbd.evaluation.streams import lag_updates
    from mlx_ssbd_cli import translate

    waits = []
    monkeypatch.setattr(translate.time, "monotonic", lambda: 0.0)
    monkeypatch.setattr(translate.time, "sleep", waits.append)
    updates = [*lag_updates("so today I want to talk", 2), *lag_updates("今天我想谈谈规则。", 1)]
    assert [u.text for u in translate.paced(iter(updates), 2.0)] == [u.text for u in updates]
    # English: 2, 4 and 6 words at 2 a second; Chinese: 8 characters and a "。" (which goes with
    # the character before it), 4 words, revealed one word at a time
    assert waits == [1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0]
