"""The committed benchmark scripts run end to end on the tiny model (numbers are not checked here,
only that each script produces a consistent, complete report)."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def script(name, *args):
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *map(str, args)], capture_output=True, text=True, timeout=600
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
        "multistream.py",
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
        "verify_cost.py",
        "--model",
        model_dir,
        "--sizes",
        "1,4",
        "--repeats",
        2,
        "--out",
        tmp_path / "verify-cost-tiny",
    )
    assert (tmp_path / "verify-cost-tiny" / "verify_cost.json").is_file()
    script(
        "longform_memory.py",
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
    report = script("collect.py", tmp_path)
    assert "Long-form memory" in report and (tmp_path / "RESULTS.md").is_file()


def test_live_replay_in_real_time_and_never_final(model_dir, tmp_path):
    script(
        "live_replay.py",
        "--model",
        model_dir,
        "--minutes",
        0.1,
        "--methods",
        "rt,ssbd",
        "--out",
        tmp_path / "live",
    )
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())["methods"]
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
        "live_replay.py",
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
        "compare_load.py",
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
        "compare_load.py",
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


def test_tail_ceiling_prices_a_bench_run(model_dir, tmp_path):
    """The replay prices RT and SSBD with a measured cost table; an ideal guess can only help."""
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "src": src}) + "\n"
            for i, src in enumerate(
                ["so today I want to talk about the new rules", "we made them together with all of you"]
            )
        )
    )
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    bench = CliRunner().invoke(
        cli,
        [
            "bench",
            "--data",
            str(data),
            "-t",
            "de",
            "--methods",
            "rt,ssbd",
            "--out",
            str(tmp_path / "run"),
            "--model",
            model_dir,
        ],
        catch_exceptions=False,
    )
    assert bench.exit_code == 0, bench.output
    costs = tmp_path / "verify_cost.json"  # shaped like verify_cost.py's (the tiny model's timings are noise)
    costs.write_text(json.dumps({"pass_over_step": {"1": 1.0, "4": 1.6, "16": 3.2, "32": 4.5}}))
    script("tail_ceiling.py", tmp_path / "run", "--model", model_dir, "--costs", costs)
    result = json.loads((tmp_path / "run" / "tail_ceiling-ssbd-b0.2.json").read_text())
    assert result["updates"] > 2 and result["modeled_speedup"] > 0 and result["measured_speedup"] > 0
    ideal = [result["modeled_speedup"], *result["verify_guess"].values()]
    assert ideal == sorted(ideal)  # more of the tail guessed right never costs more
    pools = {row["pool"]: row for row in result["pools"]}
    assert pools["none"]["guesses"] == 0 and pools["none"]["passes"] == pools["none"]["decoded"]
    assert all(row["passes"] <= row["decoded"] for row in pools.values())
    assert "n-gram pools while decoding" in (tmp_path / "run" / "tail_ceiling-ssbd-b0.2.md").read_text()


def test_tail_ceiling_cost_model_and_lookup():
    sys.path.insert(0, str(BENCHMARKS))
    from tail_ceiling import PassCost, draft_model_guesses, lookup_passes, update_costs

    cost = PassCost({"1": 1.0, "4": 2.5, "16": 4.0})
    assert [cost(1), cost(2), cost(10), cost(28)] == [1.0, 1.5, 3.25, 5.5]  # linear, and on past the last
    record = {"forward_passes": 4, "tokens_fed": 13}  # a 10-token first pass, then 3 one-token steps
    assert update_costs(record, cost) == cost(10) + 3
    assert update_costs(record, cost, guessed=1.0) == cost(13)
    assert update_costs(record, cost, guessed=1.0, wasted=3) == cost(16)
    # The tail 7 8 9 follows 5 6 in the pool: one pass feeds 6 with the guess 7 8 and takes 9 from the model.
    assert lookup_passes([7, 8, 9], [5, 6], [[1, 5, 6, 7, 8, 4]], n=2, max_len=2) == ([3], 2)
    assert lookup_passes([7, 8, 9], [5, 6], [], n=2, max_len=2) == ([1, 1, 1], 0)
    records = [
        {"config": "ssbd", "tail_guessed": 0},
        {"config": "ssbd-tail", "tail_guessed": 4, "tail_accepted": 1},
        {"config": "ssbd-tail", "tail_guessed": 2, "tail_accepted": 2},
    ]
    assert draft_model_guesses(records) == [{"method": "ssbd-tail", "guessed": 6, "held": 3}]
    noisy = PassCost({"1": 1.0, "4": 0.9, "16": 0.8})  # a tiny model's timings: wider never cheaper
    assert noisy(4) == noisy(40) == 1.0


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
        "accept_rules.py",
        "--model",
        model_dir,
        "--data",
        data,
        "--configs",
        "rt,ssbd-b0,ssbd-b0.2,ssbd-ratio-b0.6",
        "--out",
        tmp_path / "rules",
    )
    configs = json.loads((tmp_path / "rules" / "summary.json").read_text())["configs"]
    assert list(configs) == ["rt", "ssbd-b0", "ssbd-b0.2", "ssbd-ratio-b0.6"]
    assert configs["ssbd-b0"]["chrf"] == configs["rt"]["chrf"]  # beta 0 commits RT's captions
    assert all(s["items"] == 2 and s["speedup"] > 0 for s in configs.values())
    assert (tmp_path / "rules" / "pareto.png").is_file()
    assert "| ssbd-ratio-b0.6 |" in (tmp_path / "rules" / "report.md").read_text()

    # (a random-weight model's outputs are mostly decoding loops: analysed as decoded, uncut)
    script(
        "acceptance_analysis.py",
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


def test_live_replay_speaks_the_sentences_it_is_given(model_dir, tmp_path):
    data = tmp_path / "talk.jsonl"
    data.write_text(
        json.dumps({"src": "Thank you all for coming here today.", "ref": "Danke, dass Sie gekommen sind."})
        + "\n"
    )
    script(
        "live_replay.py",
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
    run = json.loads((tmp_path / "talk" / "summary.json").read_text())["run"]
    assert run["data"].startswith("sentences of talk.jsonl")
    heard = {
        json.loads(line).get("source", "")
        for line in (tmp_path / "talk" / "events-ssbd.jsonl").read_text().splitlines()
    }
    assert any("thank you all" in text for text in heard)


def test_quantized_kernel_and_weights_reports(model_dir, tmp_path):
    from mlx_ssbd.platform.quantized import kernel, kernel_status

    import pytest

    if kernel() is None:
        pytest.skip(f"CPU kernel not available: {kernel_status()}")
    script(
        "quantized_kernel.py", "--rows", "1,2", "--bits", "4", "--repeats", 1, "--out", tmp_path / "kernel"
    )
    rows = json.loads((tmp_path / "kernel" / "quantized_kernel.json").read_text())["rows"]
    assert [(r["bits"], r["rows"]) for r in rows] == [(4, 1), (4, 2)] * 2
    assert all(r["kernel_ms"] > 0 and r["fp32_blas_ms"] > 0 for r in rows)
    script(
        "quantized_weights.py",
        "--models",
        model_dir,
        "--sentences",
        1,
        "--repeats",
        1,
        "--out",
        tmp_path / "w",
    )
    result = json.loads((tmp_path / "w" / "quantized_weights.json").read_text())
    assert [r["path"] for r in result["rows"]] == ["quantized", "dense"]
    for row in result["rows"]:
        assert row["translate_stream"]["peak_rss_bytes"] > 0 and row["translate_stream"]["captions"]
        assert set(row["methods"]) == {"rt", "ssbd"} and set(row["passes_s"]) == {"1", "16", "64"}
    assert "| dense |" in (tmp_path / "w" / "quantized_weights.md").read_text()


def test_hybrid_reuse_compares_checkpoints_with_rebuilds(model_dir, tmp_path):
    script(
        "hybrid_reuse.py",
        "--tokenizer",
        model_dir,
        "--archs",
        "qwen2,qwen3_5",
        "--width",
        64,
        "--limit",
        2,
        "--out",
        tmp_path,
    )
    rows = json.loads((tmp_path / "hybrid_reuse.json").read_text())["rows"]
    assert [(r["arch"], r["method"], r["cache"]) for r in rows] == [
        ("qwen2", "rt", "checkpoints"),
        ("qwen2", "ssbd", "checkpoints"),
        ("qwen3_5", "rt", "checkpoints"),
        ("qwen3_5", "rt", "rebuild"),
        ("qwen3_5", "ssbd", "checkpoints"),
        ("qwen3_5", "ssbd", "rebuild"),
    ]
    assert [r["rebuilds"] > 0 for r in rows] == [False, False, False, True, False, True]
    assert len({r["updates"] for r in rows}) == 1
    assert "| qwen3_5 | rebuild | ssbd |" in (tmp_path / "hybrid_reuse.md").read_text()
