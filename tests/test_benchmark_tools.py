"""The benchmark tools: the runner lists every step, the results page takes the newest run of each
on each machine kind, a before/after comparison runs one benchmark on two commits."""

import json
import platform
import re
import subprocess
import sys

from test_benchmark_scripts import REPO, script


def test_the_runner_lists_every_step_with_an_estimate_and_refuses_an_unknown_group():
    listing = script("benchmarks.run", "--list")
    lines = listing.strip().splitlines()
    assert lines[-1].split()[0] == "total" and len(lines) > 15
    assert all("min" in line for line in lines)
    assert "rules-test-1.5b" in listing and "sentences-1.5b" not in listing  # a step of the long run only
    long = script("benchmarks.run", "--list", "--long")
    assert "sentences-1.5b" in long and len(long.strip().splitlines()) > len(lines)
    assert "--streams 1,2,4,8,16,32,64 " in long and "--streams 1,4,16,64 " in listing  # larger sizes
    quick = script("benchmarks.run", "--list", "--quick", "--only", "service")
    assert "service-attacks-0.5b" in quick and "service-soak" in quick and "sentences-1.5b" not in quick
    for argv, says in (
        (["--only", "nonsense"], "no such group"),
        (["--only", "sentences-1.5b"], "add --long"),
        (["--quick", "--long"], "one size at a time"),
    ):
        refused = subprocess.run(
            [sys.executable, "-m", "benchmarks.run", "--list", *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert refused.returncode != 0 and says in refused.stderr, refused.stderr


def test_the_results_page_takes_each_step_from_its_newest_run_on_each_machine_kind(tmp_path):
    from benchmarks.tools.results_page import page

    runs = (
        ("2026-01-01-linux-x86_64-2cpu", 0, None),  # generic: superseded by any named kind's run
        ("2026-01-02-linux-x86_64-2cpu-epyc", 1, None),
        ("2026-02-01-linux-x86_64-2cpu-epyc", 2, "abc1234"),
        ("2026-01-15-linux-x86_64-h200", 3, "def5678"),
        ("2026-03-01-linux-x86_64-2cpu-epyc-quick", 4, "abc1234"),  # a smoke run: never shown
    )
    for folder, value, commit in runs:
        step = tmp_path / folder / "glossary-terms"
        step.mkdir(parents=True)
        machine = {"cpus": 2, "cpu_model": f"CPU {value}", **({"commit": commit} if commit else {})}
        (step / "glossary_terms.json").write_text(json.dumps({"machine": machine}))
        (step / "glossary_terms.md").write_text(
            f"# Terms\n\nprose\n\n| a | b |\n|---|---|\n| {value} | x |\n"
        )
    text = page(sorted(tmp_path.iterdir()))
    section = text.split("## A glossary per talk")[1]
    shown = [value for _, value, _ in runs if f"| {value} | x |" in section]
    assert shown == [2, 3] and section.index("| 2 | x |") < section.index("| 3 | x |")  # newest first
    assert "Run 2026-02-01" in section and "CPU 2, 2 CPUs" in section and "`abc1234`" in section
    assert "Run 2026-01-15" in section and "`def5678`" in section
    assert "prose" not in section  # tables, not the report's story
    generic = page([tmp_path / runs[0][0]])  # a generic run where no named kind has the step
    assert "| 0 | x |" in generic
    assert "run before reports named their commit: older than the current code" in generic


def test_a_label_does_not_make_a_machine_kind_and_the_later_commit_of_a_day_is_the_newest(tmp_path):
    from benchmarks.tools.results_page import page

    older, newer = (
        subprocess.run(
            ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        for rev in ("HEAD~1", "HEAD")
    )
    runs = (  # one machine, one day, three labels: the run at the later commit is the newest
        ("2026-03-02-linux-x86_64-2cpu-epyc-vnni-zzz", 1, older),
        ("2026-03-02-linux-x86_64-2cpu-epyc-vnni-aaa", 2, newer),
        ("2026-03-01-linux-x86_64-2cpu-epyc-vnni", 3, newer),  # a day before
        ("2026-03-01-linux-x86_64-2cpu-epyc-other", 4, older),  # another machine: the AVX2 EPYC
    )
    for folder, value, commit in runs:
        step = tmp_path / folder / "glossary-terms"
        step.mkdir(parents=True)
        (step / "glossary_terms.json").write_text(json.dumps({"machine": {"cpus": 2, "commit": commit}}))
        (step / "glossary_terms.md").write_text(f"# Terms\n\n| a | b |\n|---|---|\n| {value} | x |\n")
    section = page(sorted(tmp_path.iterdir())).split("## A glossary per talk")[1]
    shown = [value for _, value, _ in runs if f"| {value} | x |" in section]
    assert shown == [2, 4] and section.index("| 2 | x |") < section.index("| 4 | x |")


def test_a_run_s_folder_names_a_machine_kind_that_the_results_page_shows():
    from benchmarks.run import default_out
    from benchmarks.tools.results_page import GENERIC_KINDS, kind

    folder = default_out(None)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-[a-z0-9_-]+", folder.name), folder.name
    assert kind(folder) not in GENERIC_KINDS and kind(folder).startswith(f"{platform.system().lower()}-")
    assert kind(default_out("quiet")) == kind(folder)  # a label says why a run was made, not where


def test_a_before_after_comparison_runs_one_benchmark_on_two_commits(model_dir, tmp_path):
    script(
        "benchmarks.compare.run",
        "--before",
        "HEAD",
        "--runs",
        1,
        "--out",
        tmp_path,
        "--",
        "benchmarks.engine.verify_cost",
        "--model",
        model_dir,
        "--sizes",
        "1",
        "--repeats",
        1,
    )
    result = json.loads((tmp_path / "compare.json").read_text())
    assert (
        result["before"] == "HEAD"
        and result["after"] == "working tree"
        and "build" in result["kernel"]["after"]
    )
    assert (tmp_path / "before-0" / "verify_cost.json").is_file() and (tmp_path / "after-0").is_dir()
    values = {row["value"] for row in result["rows"]}
    assert "pass_s.1" in values and all(
        row["before"] > 0 for row in result["rows"] if row["value"] == "pass_s.1"
    )


def test_the_harness_writes_a_step_s_json_and_markdown_and_renders_them_again(tmp_path, capsys):
    from benchmarks.harness import Benchmark, markdown_table, option

    def render(result):
        return markdown_table(["size", "seconds"], [(n, f"{s:.1f}") for n, s in result["rows"]])

    step = Benchmark(
        "tiny",
        lambda result: f"Tiny ({len(result['rows'])} sizes)",
        lambda args: {"rows": [[n, n / 2] for n in range(1, args.sizes + 1)]},
        render,
        options=(option("--sizes", type=int, default=2),),
        about="A step of the harness.\n\nMore.",
    )
    assert step.parser().description == "A step of the harness."
    step.main(["--sizes", "3", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "tiny.json").read_text())
    assert report["rows"] == [[1, 0.5], [2, 1.0], [3, 1.5]] and report["machine"]["commit"]
    text = (tmp_path / "tiny.md").read_text()
    assert text.splitlines()[:5] == ["# Tiny (3 sizes)", "", "| size | seconds |", "|---|---|", "| 1 | 0.5 |"]
    assert text in capsys.readouterr().out  # printed as well
    report["rows"] = [[9, 4.5]]  # a layout change renders what the JSON holds, measuring nothing
    (tmp_path / "tiny.json").write_text(json.dumps(report))
    step.main(["--out", str(tmp_path), "--report"])
    assert "| 9 | 4.5 |" in (tmp_path / "tiny.md").read_text()
    assert step.main(["--sizes", "1", "--out", str(tmp_path)]) is not None
    parent = Benchmark(
        "split", "Split", lambda args: None, render, child=lambda args: {"setting": args.child}
    )
    assert parent.main(["--child", "fp32"]) is None and not (tmp_path / "split.json").exists()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"setting": "fp32"}


def test_no_committed_file_names_this_checkout_s_absolute_path():
    found = subprocess.run(["git", "grep", "-l", "-F", str(REPO)], capture_output=True, text=True, cwd=REPO)
    assert found.returncode == 1 and not found.stdout, found.stdout  # 1: no match


def test_the_runner_refuses_a_tree_with_uncommitted_changes(monkeypatch, tmp_path, capsys):
    from benchmarks import run

    import pytest

    monkeypatch.setattr(run, "dirty", lambda: True)
    monkeypatch.setattr(sys, "argv", ["run", "--only", "verify-cost-1.5b", "--out", str(tmp_path / "r")])
    with pytest.raises(SystemExit, match="uncommitted changes"):
        run.main()
    assert not (tmp_path / "r").exists()  # nothing measured, no folder


def test_prune_lists_the_result_folders_no_page_links(tmp_path):
    from benchmarks.tools.prune import unlinked

    for step in ("2026-01-01-a/old", "2026-01-01-a/kept", "2026-02-01-b/new"):
        (tmp_path / step).mkdir(parents=True)
    (tmp_path / "2026-02-01-b" / "RESULTS.md").write_text("a file, not a step")
    text = f"see [kept]({tmp_path}/2026-01-01-a/kept/report.md) and {tmp_path}/2026-02-01-b/new"
    assert unlinked(tmp_path, text) == [tmp_path / "2026-01-01-a" / "old"]


def test_a_side_with_other_kernel_sources_gets_its_own_build(tmp_path, monkeypatch):
    """Where a side's kernel sources differ from this checkout's, CMake builds them and the side
    gets that build; where the build fails, it runs without a kernel and says so."""
    import benchmarks.compare.run as compare

    tree, build, calls = tmp_path / "tree", tmp_path / "build", []
    (tree / "mlx_ssbd" / "platform").mkdir(parents=True)

    def run(command, **kwargs):
        calls.append(command)
        if command[:2] == ["git", "diff"]:
            return subprocess.CompletedProcess(command, 1)  # the sources differ
        if command[:2] == ["cmake", "--build"]:
            (build / "_qmm.test.so").write_bytes(b"built")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(compare.subprocess, "run", run)
    build.mkdir()
    assert compare.side_kernel(tree, "abc123", build) == "built from its own sources"
    assert calls[1][:3] == ["cmake", "-S", str(tree / compare.NATIVE)] and calls[2][:2] == [
        "cmake",
        "--build",
    ]
    assert (tree / "mlx_ssbd" / "platform" / "_qmm.test.so").read_bytes() == b"built"

    def failing(command, **kwargs):
        return subprocess.CompletedProcess(command, 1 if command[0] in ("git", "cmake") else 0)

    monkeypatch.setattr(compare.subprocess, "run", failing)
    assert compare.side_kernel(tree, "abc123", tmp_path / "other").startswith(
        "none (its kernel did not build"
    )


def test_a_comparison_with_an_unknown_revision_says_so(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare.run", "--before", "no-such-revision", "--out", tmp_path, "--",
         "benchmarks.engine.verify_cost"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--before no-such-revision: not a revision of this repository" in result.stderr


def test_acceptance_rules_set_speed_and_quality_against_the_run_s_first_plain_rt():
    """With the example translations in RT's prompt listed first, the rules report's chrF++
    differences are against that RT, as its speeds are (``bench.summarize``)."""
    from benchmarks.quality.accept_rules import base_rt
    from mlx_ssbd.evaluation.bench import chrf_against

    assert base_rt(["ssbd-b0.2+examples", "rt+context", "rt+examples", "rt"]) == "rt+examples"
    assert base_rt(["ssbd-b0.2", "rt+context"]) is None  # RT with the talk's context is not plain RT
    refs = ["heute sprechen wir über Regeln", "wir haben sie gemeinsam gemacht"]
    outputs = {
        "rt+examples": ["heute sprechen wir über Regeln", "wir haben sie gemeinsam gemacht"],
        "rt": ["heute reden wir", "wir machten sie"],
    }
    records = [
        {"config": label, "item": str(i), "final": True, "output": text, "ref": refs[i]}
        for label, texts in outputs.items()
        for i, text in enumerate(texts)
    ]
    deltas = chrf_against(records, list(outputs), "rt+examples", resamples=20)
    assert deltas["rt+examples"] == (0.0, 0.0, 0.0)
    assert deltas["rt"][0] < -40  # the exact references against far weaker outputs


def test_the_llama_cpp_peer_report_gives_each_engine_its_median_over_rounds_and_its_pass_in_steps():
    from benchmarks.engine.llama_cpp_peer import render

    def timed(step_ms, pass_ms):
        return {"decode_step_s": step_ms / 1000, "pass16_s": pass_ms / 1000}

    speeds = [((40, 250), (45, 110)), ((60, 300), (50, 140)), ((50, 240), (47, 100))]
    row = {"model": "m", "threads": 2, "llama_cpp_python": "0.3.36", "prompt_tokens": 48}
    read = {"step_bytes": {"llama_cpp": 1_000_000_000, "ours": 1_175_000_000}}
    rounds = [{"llama_cpp": timed(*llama), "ours": timed(*ours)} for llama, ours in speeds]
    machine = {"cpu_model": "CPU", "cpus": 2, "mlx_version": "0", "blas": "none"}
    lines = render({"machine": machine, "repeats": 7, "rows": [{**row, **read, "rounds": rounds}]})
    assert "3 alternating rounds" in lines[0]
    assert "| m | llama.cpp | 50.0 | 250.0 | 5.00 | 1000 | 20.0 |" in lines
    assert "| m | mlx-ssbd | 47.0 | 110.0 | 2.34 | 1175 | 25.0 |" in lines
    # a report from before ours ran beside it: llama.cpp alone, its one run
    alone = render({"machine": machine, "rows": [{**row, **timed(66.5, 212.7)}]})
    assert "| m | llama.cpp | 66.5 | 212.7 | 3.20 | - | - |" in alone and not any(
        line.startswith("| m | mlx-ssbd") for line in alone
    )


def test_asr_partials_join_the_asr_sentences_that_share_a_spoken_one():
    """The real-ASR partials set: ASR sentences become items by the talk sentences they heard."""
    from benchmarks.tools.asr_partials import items
    from mlx_ssbd.evaluation.streams import Pair
    from mlx_ssbd.live.source import SourcePartial

    talk = [
        Pair("s1", "Good afternoon, my name is Anna.", "Guten Tag, ich heiße Anna."),
        Pair("s2", "I work here.", "Ich arbeite hier."),
        Pair("s3", "We plan our shifts at night.", "Wir planen nachts."),
    ]
    heard = [
        ("a0", "Go after", False),
        ("a0", "Go afternoon, my name is Anna. I work here.", True),  # two sentences as one
        ("a1", "We plan", False),
        ("a1", "We plan our shifts.", True),  # one sentence as two
        ("a2", "At night.", True),
    ]
    records, refs, matched = items([SourcePartial(text, final, ident) for ident, text, final in heard], talk)
    assert refs == [
        {
            "id": "s1+s2",
            "src": "Good afternoon, my name is Anna. I work here.",
            "ref": "Guten Tag, ich heiße Anna. Ich arbeite hier.",
        },
        {"id": "s3", "src": "We plan our shifts at night.", "ref": "Wir planen nachts."},
    ]
    assert [(r["id"], r["text"], r["final"]) for r in records] == [
        ("s1+s2", "Go after", False),
        ("s1+s2", "Go afternoon, my name is Anna. I work here.", True),
        ("s3", "We plan", False),
        ("s3", "We plan our shifts.", False),  # the first ASR sentence's end is not the item's
        ("s3", "We plan our shifts. At night.", True),
    ]
    assert matched == 14  # of 15 spoken words: "Go" is not "Good"
