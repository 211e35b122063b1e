"""``translate --push`` and ``listen --push``: targets checked before the model loads, and a
talk's committed captions reach each platform-rules endpoint once, in order."""

from __future__ import annotations

import json

from benchmarks.service.push_peers import ObsPeer, RulesServer
from mlx_ssbd_cli.main import cli

import pytest
from click.testing import CliRunner
from conftest import write

TALK = "So today I want to talk about rules.\nThe first problem is latency.\nThe second one is flicker.\n"


@pytest.fixture
def zoom():
    server = RulesServer("zoom", ("de-DE", "fr-FR"))
    yield server
    server.close()


@pytest.mark.parametrize(
    "push, words",
    [
        ("zoomx=https://a.b/?id=1", "unknown push platform 'zoomx'"),
        ("zoom=https://wmcapi.zoom.us/closedcaption?id=1&signature=s3cret", "no ns, expire parameters"),
        ("youtube=http://upload.youtube.com/closedcaption?cid=s3cret", "youtube:de=URL"),
        (
            "zoom:ja=https://wmcapi.zoom.us/closedcaption?id=1&ns=2&expire=3&signature=s3cret",
            "not captioned in 'ja'",
        ),
    ],
)
def test_a_bad_push_target_is_refused_before_the_model_loads(tmp_path, push, words):
    talk = write(tmp_path, "talk.txt", TALK)
    args = ["translate", "--stream", talk, "-t", "de,fr", "--push", push, "--model", str(tmp_path / "none")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output
    assert "s3cret" not in result.output
    assert "none" not in result.output  # the model was never looked for


def test_push_is_for_live_captions_and_push_stable_needs_agree(run, zoom):
    result = run("translate", "Hello.", "--push", f"zoom={zoom.url}")
    assert result.exit_code == 2 and "use it with --stream" in result.output
    result = run("translate", "--stream", "-", "--push", f"zoom={zoom.url}", "--push-stable", input="Hi.\n")
    assert result.exit_code == 2 and "--agree" in result.output


def test_every_commit_reaches_zoom_in_both_languages_and_youtube_and_obs_in_one(run, tmp_path, zoom):
    youtube, obs = RulesServer("youtube"), ObsPeer("pw")
    try:
        talk = write(tmp_path, "talk.txt", TALK)
        result = run(
            "translate", "--stream", talk, "-t", "de,fr", "--format", "jsonl",
            "--push", f"zoom={zoom.url}",
            "--push", f"youtube:de={youtube.url}",
            "--push", f"obs:fr=ws://:pw@127.0.0.1:{obs.port}",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        commits = [json.loads(line) for line in result.stdout.splitlines()]
        commits = [c for c in commits if c["type"] == "commit" and c["output"].strip()]
        words = {
            lang: " ".join(c["output"] for c in commits if c["target"] == lang).split()
            for lang in ("de", "fr")
        }
        assert zoom.violations == youtube.violations == []
        assert " ".join(zoom.texts("de-DE")).split() == words["de"]
        assert " ".join(zoom.texts("fr-FR")).split() == words["fr"]
        assert " ".join(youtube.texts()).split() == words["de"]
        assert all(len(line) <= 80 for line in zoom.texts() + youtube.texts())
        assert all(len(text) <= 32 for text, _ in obs.captions) and obs.captions
        assert "lines delivered, 0 not" in result.stderr
        assert "signature" not in result.stderr and "pw@" not in result.stderr
    finally:
        youtube.close()
        obs.close()


def test_a_dead_target_costs_no_caption_and_says_so(run, tmp_path):
    dead = RulesServer("teams")
    dead.fail_with = 403
    try:
        talk = write(tmp_path, "talk.txt", TALK)
        result = run("translate", "--stream", talk, "-t", "de", "--push", f"teams={dead.url}")
        assert result.exit_code == 0, result.output
        assert len([line for line in result.stdout.splitlines() if line.strip()]) == 3
        assert "stopped: HTTP 403" in result.stderr and "token" not in dead.url.split("?")[0]
        assert "0 lines delivered" in result.stderr and "tkb8kvx" not in result.stderr
    finally:
        dead.close()


def test_push_stable_sends_the_locked_words_as_they_lock_and_the_rest_at_the_commit(run, tmp_path, zoom):
    talk = write(tmp_path, "talk.txt", TALK)
    args = ["translate", "--stream", talk, "-t", "de", "--agree", "2", "--format", "jsonl"]
    result = run(*args, "--push", f"zoom:de={zoom.url}", "--push-stable")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    commits = [e["output"] for e in events if e["type"] == "commit"]
    assert zoom.violations == [] and " ".join(zoom.texts("de-DE")).split() == " ".join(commits).split()
    # each piece sent before its commit was a run of whole locked words of an update
    stables = [e["stable"] for e in events if e["type"] == "update" and not e["final"]]
    early = len(zoom.texts("de-DE")) - len([c for c in commits if c.strip()])
    assert early >= 0 and (early == 0 or any(" " in s.strip() for s in stables))


def test_listen_refuses_push_with_asr_only(tmp_path, zoom):
    wav = write(tmp_path, "a.wav", b"RIFF")
    result = CliRunner().invoke(cli, ["listen", wav, "--asr-only", "--push", f"zoom={zoom.url}"])
    assert result.exit_code == 2 and "--asr-only translates nothing" in result.output


def test_push_stable_sends_whole_locked_words_once_then_the_rest_at_the_commit(zoom):
    from types import SimpleNamespace

    from mlx_ssbd.live.session import CaptionCommit
    from mlx_ssbd.push.spec import parse_targets
    from mlx_ssbd_cli.push import PushSink

    class Quiet:
        update = commit = close = lambda *a: None

    sink = PushSink(Quiet(), parse_targets([f"zoom={zoom.url}"], ("de",)), ("de",), stable=True)
    for stable in ("Das", "Das erste Pro", "Das erste Problem ist ", "Das erste Problem ist "):
        sink.update(
            SimpleNamespace(
                target="de", caption=0, speech_end=1.0, pushed_at=1.0, update=SimpleNamespace(stable=stable)
            )
        )
    text = "Das erste Problem ist die Latenz."
    sink.commit(
        CaptionCommit(0, 5, text, "src", 0.0, 2.0, "clock", "sentence", None, 0, None, 2.0, target="de")
    )
    sink.close()
    assert zoom.texts("de-DE") == ["Das erste", "Problem ist", "die Latenz."] and zoom.violations == []
