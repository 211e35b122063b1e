"""The committed benchmark scripts run end to end on the tiny model (numbers are not checked here,
only that each script produces a consistent, complete report)."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def script(name, *args):
    result = subprocess.run([sys.executable, str(BENCHMARKS / name), *map(str, args)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_multistream_compares_sequential_and_batched(model_dir, tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "src": src}) + "\n" for i, src in enumerate(
        ["so today I want to talk", "about the new rules for all", "we made them together"])))
    script("multistream.py", "--model", model_dir, "--data", data, "--items", 3, "--methods", "rt,ssbd",
           "--streams", "1,2", "--out", tmp_path)
    rows = json.loads((tmp_path / "multistream.json").read_text())["rows"]
    assert [(r["method"], r["mode"], r["streams"]) for r in rows] == [
        ("rt", "sequential", 2), ("rt", "batched", 1), ("rt", "batched", 2),
        ("ssbd", "sequential", 2), ("ssbd", "batched", 1), ("ssbd", "batched", 2)]
    assert len({r["updates"] for r in rows}) == 1  # every run served every update
    assert all(r["throughput_vs_sequential"] > 0 for r in rows)
    assert "| ssbd | batched | 2 |" in (tmp_path / "multistream.md").read_text()


def test_verify_cost_and_longform_and_collect(model_dir, tmp_path):
    script("verify_cost.py", "--model", model_dir, "--sizes", "1,4", "--repeats", 2, "--out", tmp_path / "verify-cost-tiny")
    assert (tmp_path / "verify-cost-tiny" / "verify_cost.json").is_file()
    script("longform_memory.py", "--model", model_dir, "--updates", 20, "--every", 10, "--out", tmp_path / "longform")
    samples = json.loads((tmp_path / "longform" / "longform_memory.json").read_text())["samples"]
    assert [s["update"] for s in samples] == [1, 10, 20]
    report = script("collect.py", tmp_path)
    assert "Long-form memory" in report and (tmp_path / "RESULTS.md").is_file()


def test_live_replay_in_real_time_and_never_final(model_dir, tmp_path):
    script("live_replay.py", "--model", model_dir, "--minutes", 0.1, "--methods", "rt,ssbd", "--out", tmp_path / "live")
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())["methods"]
    for s in summary.values():
        assert s["partials"] == summary["rt"]["partials"] and s["errors"] == 0 and s["commits"] >= 1
        assert s["updates"] > s["commits"] and s["coalesced"] + s["repeated"] < s["partials"]
        assert s["lag_p95_s"] >= s["lag_p50_s"] > 0
    events = (tmp_path / "live" / "events-ssbd.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["type"] == "commit"
    assert (tmp_path / "live" / "lag.png").is_file() and "| ssbd |" in (tmp_path / "live" / "live_replay.md").read_text()
    script("live_replay.py", "--never-final", "--words", 80, "--stride", 2, "--model", model_dir, "--methods", "ssbd",
           "--out", tmp_path / "never")
    (s,) = json.loads((tmp_path / "never" / "summary.json").read_text())["methods"].values()
    assert s["words"] >= 80 and s["commits"] >= 3 and s["errors"] == 0
    report = script("collect.py", tmp_path)
    assert "Real-time replay of a long ASR stream" in report and "Never-final stream" in report


def test_chat_predicted_through_the_openai_endpoint(model_dir, tmp_path):
    """Re-translation through a real server and the openai client: beta = 0 predictions give the
    very answers of plain requests (lossless), and every mode answers every prefix."""
    script("chat_predicted.py", "--model", model_dir, "--limit", 1, "--every", 5, "--out", tmp_path)
    result = json.loads((tmp_path / "chat_predicted.json").read_text())
    assert result["exact_equals_none"] is True
    counts = {mode: s["requests"] for mode, s in result["summary"].items()}
    assert set(counts) == {"none", "exact", "biased"} and len(set(counts.values())) == 1 and counts["none"] >= 2
    assert result["summary"]["none"]["accepted_share"] is None  # no prediction, nothing to accept
    assert "| biased |" in (tmp_path / "chat_predicted.md").read_text()


def test_compare_load_joins_two_runs(tmp_path):
    def run(name, p95):
        rows = [{"method": m, "sessions": n, "lag_p50_s": 1.0, "lag_p95_s": p95 * n, "translation.update": 3,
                 "translation.commit": 1} for m in ("rt", "ssbd") for n in (1, 2)]
        (tmp_path / name).mkdir()
        (tmp_path / name / "service_load.json").write_text(json.dumps({
            "model": "m", "seconds_per_run": 60, "rows": rows,
            "machine": {"device": "cpu", "compute_dtype": "float32", "blas": "openblas", "cpus": 2}}))

    run("a", 3.0)
    run("b", 2.0)
    script("compare_load.py", tmp_path / "a", tmp_path / "b", "--before-label", "old", "--after-label", "new",
           "--out", tmp_path / "out")
    report = (tmp_path / "out" / "service_batching.md").read_text()
    assert "| ssbd | 2 | 1.0 | 1.0 | 6.0 | 4.0 | 4 | 4 |" in report and "lag p95 s, old" in report
