"""The engine's benchmark scripts (the kernel, hybrid reuse, a busy machine, capacity) run end to
end on tiny models (numbers are not checked here, only that each report is consistent and complete)."""

import json

import pytest
from test_benchmark_scripts import script


def test_quantized_kernel_and_weights_reports(model_dir, tmp_path):
    from mlx_ssbd.platform.extension import kernel, kernel_status

    import pytest

    if kernel() is None:
        pytest.skip(f"CPU kernel not available: {kernel_status()}")
    script(
        "benchmarks.engine.quantized_kernel",
        "--rows",
        "1,2",
        "--bits",
        "4",
        "--repeats",
        1,
        "--out",
        tmp_path / "kernel",
    )
    report = json.loads((tmp_path / "kernel" / "quantized_kernel.json").read_text())
    rows = report["rows"]
    assert [(r["bits"], r["rows"]) for r in rows] == [(4, 1), (4, 2)] * 2
    assert all(r["kernel_ms"] > 0 and r["fp32_blas_ms"] > 0 for r in rows)
    assert report["ceiling_gmacs"]["4"] == max(report["ceiling_gmacs_before_after"]["4"]) > 0
    text = (tmp_path / "kernel" / "quantized_kernel.md").read_text()
    assert "of ceiling" in text
    if kernel().simd_path() in ("avx512", "avxvnni", "avx2"):  # the builds that time an instruction
        peak = report["int8_peak_gmacs"]
        assert peak > 0 and "int8 peak (its widest int8 multiply-add instruction alone" in text
        share = f"{report['ceiling_gmacs']['4'] / peak:.0%} of it for 4-bit codes"
        assert share in text
    script(
        "benchmarks.engine.quantized_weights",
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
    script("benchmarks.engine.avx2_path", "--models", model_dir, "--repeats", 1, "--out", tmp_path / "avx2")
    rows = json.loads((tmp_path / "avx2" / "avx2_path.json").read_text())["rows"]
    assert [r["path"] for r in rows][:4] == [
        "quantized, widest",
        "dense, widest",
        "quantized, AVX2",
        "dense, AVX2",
    ]
    assert all(r["passes_s"]["64"] > 0 for r in rows)
    if rows[0]["kernel_path"] in ("avx512", "avxvnni"):  # the AVX2 rows ran the AVX2 build
        assert rows[2]["kernel_path"] == "avx2"
    # the AVX-VNNI row only where the kernel ran its AVX-VNNI build
    assert [r["kernel_path"] for r in rows[4:]] in ([], ["avxvnni"])
    assert "| AVX2 |" in (tmp_path / "avx2" / "avx2_path.md").read_text()


def test_x_rounding_prices_each_block_size_against_exact_x(model_dir, tmp_path):
    script(
        "benchmarks.engine.x_rounding",
        *("--model", model_dir, "--sentences", 2, "--blocks", "32,256", "--out", tmp_path / "x"),
    )
    report = json.loads((tmp_path / "x" / "x_rounding.json").read_text())
    assert report["sentences"] == 2 and report["tokens"] > 0 and report["layers_rounded"] > 0
    assert [r["block"] for r in report["rows"]] == [32, 256]
    assert all(r["kl_nats"] >= 0 and 0 <= r["top1_agreement"] <= 1 for r in report["rows"])
    assert "| 32 values (the kernel) |" in (tmp_path / "x" / "x_rounding.md").read_text()


def test_x_rounding_refuses_block_sizes_that_are_not_whole_numbers_of_values(capsys):
    from benchmarks.engine.x_rounding import BENCHMARK

    parser = BENCHMARK.parser()
    assert parser.parse_args(["--blocks", "32,256"]).blocks == [32, 256]
    for bad in ("abc", "0,32", "", "32,-1"):
        with pytest.raises(SystemExit) as refused:
            parser.parse_args(["--blocks", bad])
        assert refused.value.code != 0
        assert "--blocks: expected block sizes: whole numbers of at least 1" in capsys.readouterr().err


def test_hybrid_reuse_compares_checkpoints_with_rebuilds(model_dir, tmp_path):
    script(
        "benchmarks.engine.hybrid_reuse",
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


def test_busy_machine_reports_each_thread_wait_policy_quiet_and_busy(model_dir, tmp_path):
    args = ("--models", model_dir, "--rounds", 1, "--repeats", 1, "--busy", 1, "--out", tmp_path / "b")
    script("benchmarks.engine.busy_machine", *args)
    result = json.loads((tmp_path / "b" / "busy_machine.json").read_text())
    assert [r["policy"] for r in result["rows"]] == ["mlx-ssbd", "runtime defaults", "passive"]
    waits = [r["thread_waits"] for r in result["rows"]]
    assert waits[0] == "GOMP_SPINCOUNT=1000, KMP_BLOCKTIME=0, OPENBLAS_THREAD_TIMEOUT=16"  # mlx-ssbd's
    assert "300000 (yours)" in waits[1] and waits[2] == "OMP_WAIT_POLICY=PASSIVE (yours)"
    assert all(r["quiet_ms"]["1"] > 0 and r["busy_ms"]["16"] > 0 for r in result["rows"])
    text = (tmp_path / "b" / "busy_machine.md").read_text()
    assert "| passive (" in text
    if result["rows"][0]["quiet_without_cpu"] is not None:  # the kernel runs the model: its threads' waits
        for r in result["rows"]:
            shares = [*r["quiet_without_cpu"].values(), *r["busy_without_cpu"].values()]
            assert len(shares) == 4 and all(share is None or 0 <= share < 1 for share in shares), r
            assert r["quiet_without_cpu"]["16"] is not None  # a 16-token pass shares its products out
        assert "that they had no CPU for" in text and "| mlx-ssbd |" in text


def test_capacity_splits_each_round_into_the_model_and_the_engine(tmp_path):
    from benchmarks.engine.capacity import per_row, percent

    # 4 ms a round over rounds of two calls of 2 rows: 1 ms (1000 µs) a row
    assert per_row({"mean_rows": 2, "calls": 10, "rounds": 5}, 4.0) == 1000

    script(
        "benchmarks.engine.capacity",
        *("--models", "tiny-shape", "--streams", "1,3", "--methods", "rt,ssbd"),
        *("--steps", 2, "--min-updates", 4),
        *("--out", tmp_path),
    )
    report = json.loads((tmp_path / "capacity.json").read_text())
    rows = report["results"][0]["rows"]
    assert report["results"][0]["described"].startswith("tiny-shape, random")
    assert [(r["method"], r["streams"]) for r in rows] == [("rt", 1), ("rt", 3), ("ssbd", 1), ("ssbd", 3)]
    for r in rows:
        # every stream's every measured partial: 2 steps, or 4 for the lone stream (4 updates at least)
        assert r["updates"] == {1: 4, 3: 6}[r["streams"]]
        assert 0 < r["calls"] <= r["rounds"] and 1 <= r["mean_rows"] <= r["streams"]
        assert 0 < r["model_ms_per_round"] and r["outside_share"] < 1 and 0 <= r["padding_share"] < 1
        low, high = r["outside_share_steps"]  # the steps' own shares, around the run's
        assert low <= r["outside_share"] <= high
        assert r["output_tok_per_s"] > r["updates_per_s"] > 0  # random outputs run to their length limit
        parts = r["engine_parts_ms_per_round"]  # the round's wall in parts: they add up to it
        assert parts["waiting"] > 0 and parts["building"] > 0 and min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(r["round_ms"], abs=0.1)
    text = (tmp_path / "capacity.md").read_text()
    assert "| ssbd | 3 |" in text and "Where a round's wall goes" in text and "a row: engine µs" in text
    # the engine's share against the aim, at the one stream the run has (64 streams it has not)
    shares = {r["method"]: percent(r["outside_share"]) for r in rows if r["streams"] == 1}  # never "-0%"
    assert f"1 stream: rt {shares['rt']}, ssbd {shares['ssbd']} (aim: at most 20%" in text
    assert "64 streams" not in text


def test_kernel_ab_builds_two_revisions_into_one_program_and_compares_their_bits(tmp_path):
    import platform
    import shutil
    from pathlib import Path

    from benchmarks.engine.kernel_ab import PATHS, cpu_flags

    if platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists():
        pytest.skip("kernel_ab is for x86-64 Linux")
    if not PATHS["avx2"] <= cpu_flags() or not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("needs AVX2 and a C++ compiler")
    out = tmp_path / "ab"
    script(
        "benchmarks.engine.kernel_ab",
        *("--before", "HEAD", "--after", "HEAD", "--paths", "avx2", "--products", "q-o", "--reps", 1),
        *("--out", out),
    )
    result = json.loads((out / "kernel-ab.json").read_text())
    assert [(r["path"], r["product"], r["rows"]) for r in result["rows"]] == [
        ("avx2", "q-o", 1),
        ("avx2", "q-o", 16),
    ]
    assert all(r["same_bits"] and r["before_s"] > 0 and r["after_s"] > 0 for r in result["rows"])
    assert "| avx2 | q-o | 16 | 1536 x 1536, 4 |" in (out / "kernel-ab.md").read_text()
