"""``translate`` and ``listen`` with several target languages: one batched run whose every
language equals a run with that language alone; labelled text, JSONL with ``target``, one
subtitle file per language, a live view with one line per language; bad language lists refused."""

import io
import json

from mlx_ssbd.live.session import CaptionCommit, CaptionUpdate
from mlx_ssbd_cli.main import cli
from mlx_ssbd_cli.sinks import LiveSink

import pytest
from click.testing import CliRunner

TALK = "so today we talk about the new rules.\nand why we made them for all of us.\n"


@pytest.fixture
def run(model_dir):
    def invoke(*args):
        return CliRunner().invoke(cli, [*args, "--model", model_dir], catch_exceptions=False)

    return invoke


@pytest.fixture
def talk(tmp_path):
    (tmp_path / "talk.txt").write_text(TALK)
    return str(tmp_path / "talk.txt")


def events(result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def same(event: dict) -> dict:
    """What must be equal: all but the running number, the clock times and the timings."""
    return {k: v for k, v in event.items() if k not in ("seq", "at", "stats", "start", "end")}


@pytest.mark.parametrize("beta", ["0", "0.2"])
def test_every_language_equals_that_language_alone(run, talk, beta):
    together = events(
        run("translate", "--stream", talk, "-t", "de,fr,ja", "--format", "jsonl", "--beta", beta)
    )
    for lang in ("de", "fr", "ja"):
        alone = events(run("translate", "--stream", talk, "-t", lang, "--format", "jsonl", "--beta", beta))
        assert [same(e) for e in together if e["target"] == lang] == [same(e) for e in alone], lang
    assert {e["target"] for e in together} == {"de", "fr", "ja"}
    assert [e["caption"] for e in together if e["type"] == "commit" and e["target"] == "ja"] == [0, 1]


def test_text_lines_are_labelled_and_subtitles_go_to_one_file_per_language(run, talk, tmp_path):
    import srt

    text = run("translate", "--stream", talk, "-t", "de,fr", "--format", "text")
    assert [line.split(": ", 1)[0] for line in text.stdout.splitlines()] == ["de", "fr", "de", "fr"]
    refused = run("translate", "--stream", talk, "-t", "de,fr", "--format", "srt")
    assert refused.exit_code == 2 and "-o PATTERN with {lang}" in refused.output
    pattern = str(tmp_path / "talk.{lang}.srt")
    assert run("translate", "--stream", talk, "-t", "de,fr", "--format", "srt", "-o", pattern).exit_code == 0
    for lang in ("de", "fr"):
        alone = run("translate", "--stream", talk, "-t", lang, "--format", "srt").stdout
        cues = list(srt.parse((tmp_path / f"talk.{lang}.srt").read_text()))
        assert [c.content for c in cues] == [c.content for c in srt.parse(alone)] and len(cues) == 2
    labelled = {line.split(": ", 1)[0]: [] for line in text.stdout.splitlines()}
    for line in text.stdout.splitlines():
        labelled[line.split(": ", 1)[0]].append(line.split(": ", 1)[1])
    assert [c.content for c in srt.parse((tmp_path / "talk.fr.srt").read_text())] == labelled["fr"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["-t", "de,de"], "named twice"),
        (["-t", "de,en"], "source language en is also a target"),
        (["-t", "de,fr,ja,es,it"], "the limit is 4"),
        (["-t", "de,xx"], "xx"),
        (["-t", ","], "no target language"),
        (["-t", "de,fr", "-o", "talk.srt"], "{lang}"),
        (["-t", "de", "--format", "live", "-o", "x.txt"], "live view"),
    ],
)
def test_bad_language_lists_are_refused(run, talk, args, message):
    result = run("translate", "--stream", talk, *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_more_targets_with_max_targets(run, talk):
    result = run(
        "translate", "--stream", talk, "-t", "de,fr,ja,es,it", "--max-targets", "5", "--format", "jsonl"
    )
    assert {e["target"] for e in events(result)} == {"de", "fr", "ja", "es", "it"}


def test_the_live_view_keeps_one_line_per_language():
    out, err = io.StringIO(), io.StringIO()
    sink = LiveSink(out, err, labelled=True)
    update = type(
        "U", (), {"stable": "Also", "unstable": " heute", "stats": _stats(), "output": "Also heute"}
    )()
    sink.update(CaptionUpdate(0, 0, update, 0, 0.0, None, 0.0, None, "de"))
    sink.update(CaptionUpdate(0, 1, update, 0, 0.0, None, 0.0, None, "fr"))
    final = type("U", (), {"stats": _stats()})()
    sink.commit(
        CaptionCommit(
            0, 2, "Also heute.", "so today.", 0.0, 1.0, "clock", "final", final, 0, None, 1.0, target="de"
        )
    )
    shown = out.getvalue()
    assert "de: " in shown and "fr: " in shown and "de: Also heute.\n" in shown
    assert shown.count("\x1b[1A") == 1 + 2  # the second update redraws 1 line, the commit clears both


def _stats():
    from mlx_ssbd.live.records import UpdateStats

    return UpdateStats("ssbd", 0.2, 4, 3, 1, 4, 2, 20, 10, 0.1, 0.1, 0.2, 0)
