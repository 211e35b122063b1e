"""mlx-ssbd bench on the tiny model: every file written, options checked before the model loads, word
ranges, sampled methods against sampled RT."""

import json
import re

from mlx_ssbd_cli.main import cli

import pytest
from click.testing import CliRunner
from conftest import write


def pairs(tmp_path, *items: tuple[str, str, str]) -> str:
    """A pairs JSONL file of ``(id, src, ref)`` items; its path."""
    lines = [json.dumps({"id": i, "src": src, "ref": ref}) for i, src, ref in items]
    return write(tmp_path, "pairs.jsonl", "\n".join(lines) + "\n")


def test_bench_writes_every_file(run, tmp_path):
    data = pairs(
        tmp_path,
        ("a", "so today I want to talk about rules", "heute will ich über Regeln sprechen"),
        ("b", "we made new rules for all people", "wir haben neue Regeln gemacht"),
    )
    out = tmp_path / "out"
    result = run(
        "bench",
        "--data",
        data,
        "-t",
        "de",
        "--methods",
        "rt,ssbd,cd,rt-nocache",
        "--beta",
        "0,0.5,1",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    for name in ["results.jsonl", "summary.json", "report.md", "speed_ne_vs_beta.png", "update_latency.png"]:
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    configs = summary["configs"]
    assert set(configs) == {"rt", "ssbd-b0", "ssbd-b0.5", "ssbd-b1", "cd", "rt-nocache"}
    assert configs["rt"]["speedup"] == 1.0 and configs["cd"]["a_d"] == 1.0  # drafts exist: all kept
    assert configs["ssbd-b0"]["ne"] == configs["rt"]["ne"]  # lossless: same outputs, same flicker
    for key in ["ne", "ne_display", "a_o", "tps", "wall_s", "bleu", "chrf", "laal_ca_s"]:
        assert configs["ssbd-b0.5"][key] is not None
    assert summary["machine"]["blas"] and summary["ne_tokenizer"] == "13a"
    assert "flores101" in (out / "report.md").read_text()
    assert configs["rt"]["chrf_vs_rt"] == configs["ssbd-b0"]["chrf_vs_rt"] == [0.0, 0.0, 0.0]  # RT's captions
    change, low, high = configs["cd"]["chrf_vs_rt"]
    assert (
        change == pytest.approx(configs["cd"]["chrf"] - configs["rt"]["chrf"], abs=0.011)
        and low <= change <= high
    )
    assert "| Δ chrF++ vs RT [95%] |" in (out / "report.md").read_text()
    records = (out / "results.jsonl").read_text().splitlines()

    # Resuming: a complete run is not recomputed.
    again = run(
        "bench",
        "--data",
        data,
        "-t",
        "de",
        "--methods",
        "rt,ssbd,cd,rt-nocache",
        "--beta",
        "0,0.5,1",
        "--out",
        str(out),
    )
    assert again.exit_code == 0 and (out / "results.jsonl").read_text().splitlines() == records


def test_bench_without_refs_skips_quality(run, tmp_path):
    data = write(
        tmp_path,
        "partials.jsonl",
        '{"id": 1, "text": "so", "final": false}\n{"id": 1, "text": "so today", "final": true}\n',
    )
    result = run("bench", "--data", data, "--methods", "rt,ssbd", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0
    ssbd = json.loads((tmp_path / "o" / "summary.json").read_text())["configs"]["ssbd-b0.2"]
    assert "bleu" not in ssbd and "no reference" in ssbd["quality_note"] and ssbd["tps"] is not None
    assert "chrf_vs_rt" not in ssbd and "Δ chrF++" not in (tmp_path / "o" / "report.md").read_text()


def test_asr_partials_take_their_references_by_segment_id(run, tmp_path):
    lines = [
        {"id": "s1", "text": "so", "final": False},
        {"id": "s1", "text": "so today", "final": True},
        {"id": "s2", "text": "we made", "final": False},
        {"id": "s2", "text": "we made rules", "final": True},
    ]
    data = write(tmp_path, "partials.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    refs = pairs(tmp_path, ("s1", "so today", "also heute"), ("s2", "we made rules", "wir machten Regeln"))
    result = run(
        "bench", "--data", data, "--refs", refs, "--methods", "rt,ssbd", "--out", str(tmp_path / "o")
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["configs"]["ssbd-b0.2"]["chrf"] is not None and summary["run"]["refs"].endswith(
        "pairs.jsonl"
    )
    records = [json.loads(line) for line in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert {(r["item"], r["ref"]) for r in records if r.get("final")} == {
        ("s1#0", "also heute"),
        ("s2#1", "wir machten Regeln"),
    }

    other = pairs(tmp_path, ("x", "so today", "also heute"))  # no segment has its id
    result = run("bench", "--data", data, "--refs", other, "--out", str(tmp_path / "p"))
    assert result.exit_code == 2 and "no reference has the id of one of" in result.output
    result = run("bench", "--data", refs, "--refs", refs, "--out", str(tmp_path / "q"))
    assert result.exit_code == 2 and "sentence pairs carry their own" in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--methods", "rt,fast"], "unknown method 'fast'"),
        (["--beta", "0.2,1.5"], "outside [0, 1]"),
        (["--beta", "abc"], "not a valid float"),
        (["--temperature", "0,-1"], "temperature -1 is outside [0, 10]"),
        (["--top-p", "0"], "--top-p"),
        (["--words", "25-10"], "not a word range"),
    ],
)
def test_bench_bad_options(run, tmp_path, args, message):
    data = write(tmp_path, "p.jsonl", '{"src": "hello"}\n')
    result = run("bench", "--data", data, "--out", str(tmp_path / "o"), *args)
    assert result.exit_code == 2 and message in result.output


def test_bench_keeps_the_pairs_of_a_word_range(run, model_dir, tmp_path):
    """--words keeps only the pairs of that length."""
    data = pairs(
        tmp_path,
        ("short", "so today", "heute"),
        ("long", "so today I want to talk about rules", "heute will ich über Regeln sprechen"),
        ("zh", "今天我想谈谈规则。", "heute will ich über Regeln sprechen"),  # 9 characters: 4.5 words
        ("zh-long", "今天我想谈谈规则和它们的历史。", "heute will ich über Regeln sprechen"),  # 7.5
    )
    out = tmp_path / "out"
    result = run(
        "bench",
        "--data",
        data,
        "-t",
        "de",
        "--methods",
        "ssbd",
        "--words",
        "5-25",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    configs = json.loads((out / "summary.json").read_text())["configs"]
    assert configs["ssbd-b0.2"]["items"] == 2  # "so today" has 2 words, the short Chinese one 4.5
    items = {json.loads(line)["item"] for line in (out / "results.jsonl").read_text().splitlines()}
    assert items == {"long", "zh-long"}


def test_bench_malformed_jsonl_names_the_line(run, tmp_path):
    data = write(tmp_path, "p.jsonl", '{"src": "hello"}\n{"src": \n')
    result = run("bench", "--data", data, "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "p.jsonl:2: malformed JSON" in result.output


def test_bench_with_several_ssbd_variants_at_one_beta(run, tmp_path):
    """Variants sharing policy and beta get their own rows (regression: the plot sort crashed)."""
    data = write(tmp_path, "pairs.jsonl", '{"id": "a", "src": "so today I want to talk", "ref": "heute"}\n')
    out = tmp_path / "out"
    result = run(
        "bench",
        "--data",
        data,
        "--methods",
        "rt,ssbd,ssbd-plain,ssbd-ngram,ssbd-pool,ssbd-final0",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    for label in ["ssbd-b0.2", "ssbd-plain-b0.2", "ssbd-ngram-b0.2", "ssbd-pool-b0.2", "ssbd-final0-b0.2"]:
        assert f"| {label} |" in report
    assert (out / "speed_ne_vs_beta.png").is_file()


def test_bench_sampling_is_compared_with_sampled_rt(run, tmp_path):
    """--temperature 0,0.8 runs every method greedy and sampled; sampled speedup is vs sampled RT."""
    data = write(
        tmp_path, "pairs.jsonl", '{"id": "a", "src": "so today I want to talk about rules", "ref": "heute"}\n'
    )
    out = tmp_path / "out"
    result = run(
        "bench",
        "--data",
        data,
        "--methods",
        "rt,ssbd",
        "--temperature",
        "0,0.8",
        "--top-p",
        "0.9",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    configs = json.loads((out / "summary.json").read_text())["configs"]
    assert list(configs) == ["rt", "ssbd-b0.2", "rt-t0.8", "ssbd-b0.2-t0.8"]
    assert configs["ssbd-b0.2"]["speedup_vs"] == "rt" and configs["ssbd-b0.2-t0.8"]["speedup_vs"] == "rt-t0.8"
    assert configs["rt-t0.8"]["speedup"] == 1.0 and configs["rt-t0.8"]["temperature"] == 0.8
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["temperature"] for r in records if r["config"] == "ssbd-b0.2-t0.8"} == {0.8}
    assert "| T |" in (out / "report.md").read_text()


def test_each_method_runs_at_its_own_beta_unless_told(run, tmp_path):
    data = write(tmp_path, "pairs.jsonl", '{"id": "a", "src": "so today I want to talk", "ref": "heute"}\n')
    out = tmp_path / "out"
    result = run("bench", "--data", data, "--methods", "rt,ssbd,ssbd-ratio", "--out", str(out))
    assert result.exit_code == 0, result.output
    from mlx_ssbd.live.methods import COMMIT_BETA, DEFAULT_BETA, RATIO_BETA

    configs = json.loads((out / "summary.json").read_text())["configs"]
    assert list(configs) == ["rt", f"ssbd-b{DEFAULT_BETA:g}", f"ssbd-ratio-b{RATIO_BETA:g}"]
    wrapped = run("translate", "--help").output
    help_text = " ".join(re.sub(r"-\n\s*", "-", wrapped).split())  # as read, not as wrapped
    assert f"{RATIO_BETA:g} for ssbd-ratio" in help_text and f"smaller of it and {COMMIT_BETA:g}" in help_text


def test_a_rule_that_cannot_sample_is_refused_before_the_model_loads(tmp_path):
    for args in (
        ["translate", "so today", "--method", "ssbd-ratio", "--temperature", "0.7"],
        [
            "bench",
            "--data",
            write(tmp_path, "p.jsonl", '{"id": "a", "src": "so today"}\n'),
            "--methods",
            "ssbd-ratio",
            "--temperature",
            "0.7",
            "--out",
            str(tmp_path / "out"),
        ],
    ):
        result = CliRunner().invoke(cli, [*args, "--model", "no-such-model"])
        assert result.exit_code == 1 and "greedy decoding only" in result.output, result.output
