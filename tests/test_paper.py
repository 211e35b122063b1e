"""The paper preset: its numbers are the paper's tables, its grid is the paper's, and
``mlx-ssbd reproduce`` writes our figures beside them."""

import json

from mlx_ssbd.evaluation import paper
from mlx_ssbd_cli.main import cli

import pytest
from click.testing import CliRunner

# The paper's tables (Zeng et al.), as published: FLORES, lag 3, beta 0.2.
MAIN = """
tower-plus-2b en-de 0.877 0.877 1.17 0.77 79.0 63.1 1.69
tower-plus-2b en-zh 0.882 0.880 1.72 1.01 71.7 57.0 1.48
tower-plus-2b en-ja 0.912 0.911 2.06 1.49 60.4 48.5 1.36
qwen3-4b en-de 0.843 0.843 1.26 0.82 74.7 58.9 1.53
qwen3-4b en-zh 0.882 0.882 1.54 1.20 65.4 51.8 1.43
qwen3-4b en-ja 0.889 0.888 1.96 1.49 57.7 45.9 1.33
"""


def test_the_shipped_numbers_are_the_papers_tables():
    numbers = paper.paper_numbers()
    keys = ("comet_rt", "comet_ssbd", "ne_rt", "ne_ssbd", "a_d", "a_o", "speedup")
    for line in MAIN.strip().splitlines():
        model, pair, *values = line.split()
        assert numbers["main"][model][pair] == dict(zip(keys, map(float, values))), (model, pair)
    assert sum(len(pairs) for pairs in numbers["main"].values()) == 6
    sweep = numbers["beta_sweep"]
    assert (sweep["model"], sweep["pair"]) == ("tower-plus-2b", "en-zh")
    assert sweep["beta"] == [0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert sweep["comet"] == [0.882, 0.881, 0.880, 0.870, 0.842, 0.742]
    assert sweep["ne"] == [1.53, 1.19, 1.01, 0.83, 0.57, 0]
    assert sweep["speedup"] == [1.28, 1.40, 1.48, 1.58, 1.70, 2.10] and sweep["cd_speedup"] == 2.60
    mask = numbers["mask_k"]
    assert mask["k"] == [3, 5] and mask["beta"] == 0.2
    assert mask["draft"] == {"ne": [0.52, 0.34], "speedup": [1.42, 1.39]}
    assert mask["display"] == {"ne": [0.53, 0.35], "speedup": [1.48, 1.48]}
    assert [numbers["models"][k]["hub"] for k in paper.paper_models()] == [
        "Unbabel/Tower-Plus-2B",
        "Qwen/Qwen3-4B",
    ]


def test_the_grid_is_the_papers():
    assert paper.PAIRS == ("en-de", "en-zh", "en-ja") and paper.LAG == 3
    main = paper.paper_grid(sweep=False)
    assert list(main) == ["rt", "ssbd-b0.2"]
    assert main["rt"].policy == "rt" and (main["ssbd-b0.2"].policy, main["ssbd-b0.2"].beta) == ("ssbd", 0.2)
    assert main["ssbd-b0.2"].lookahead is None and main["ssbd-b0.2"].final_beta is None  # the paper's rule
    full = paper.paper_grid(sweep=True)
    assert {c.beta for label, c in full.items() if label.startswith("ssbd-b") and "-" not in label[6:]} == {
        0.0,
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        1.0,
    }
    assert full["cd"].policy == "cd"
    for k in (3, 5):
        assert (full[f"ssbd-b0.2-mask{k}"].draft_mask_k, full[f"ssbd-b0.2-mask{k}"].display_mask_k) == (k, 0)
        assert (full[f"ssbd-b0.2-display{k}"].draft_mask_k, full[f"ssbd-b0.2-display{k}"].display_mask_k) == (
            0,
            k,
        )
    assert all(c.accept_rule == "mixture" and c.temperature == 0 for c in full.values())
    assert paper.sweep_run() == (0, "en-zh")


@pytest.mark.slow
def test_reproduce_writes_the_papers_tables_beside_ours(model_dir, tmp_path):
    for pair, ref in (("en-de", "heute reden wir"), ("en-zh", "今天我们谈谈")):
        (tmp_path / f"{pair}.jsonl").write_text(
            "".join(
                json.dumps(p, ensure_ascii=False) + "\n"
                for p in [
                    {"id": "a", "src": "so today we talk about rules", "ref": ref},
                    {"id": "b", "src": "we made new rules", "ref": ref},
                ]
            )
        )
    out = tmp_path / "out"
    args = [
        "reproduce",
        "--models",
        model_dir,
        "--pairs",
        "en-de,en-zh",
        "--data",
        str(tmp_path / "{pair}.jsonl"),
        "--limit",
        "1",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = (out / "paper.md").read_text()
    assert "| Tower+ 2B | en-de | paper | 0.877 | 0.877 | 1.17 | 0.77 | 79.0 | 63.1 | 1.69x |" in report
    ours = [line for line in report.splitlines() if " | ours | " in line and line.startswith("| `")]
    assert len(ours) == 2 and all("chrF++" in line for line in ours)  # no COMET: chrF++ stands in, named
    assert "| 0.3 | 0.870 |" in report and "| CD | - |" in report and "| display | 5 | 0.35 |" in report
    assert "llama.cpp" in report and "no COMET" in report
    numbers = json.loads((out / "paper.json").read_text())
    sweep_run = numbers["runs"][f"{model_dir} en-zh"]
    assert len(sweep_run) == 13 and sweep_run["ssbd-b0"]["ne"] == sweep_run["rt"]["ne"]  # beta 0 is RT
    assert set(numbers["runs"][f"{model_dir} en-de"]) == {"rt", "ssbd-b0.2"}
    records = sorted(out.rglob("results.jsonl"))
    assert len(records) == 2
    before = [path.read_text() for path in records]
    again = CliRunner().invoke(cli, args, catch_exceptions=False)  # resumable: nothing is recomputed
    assert again.exit_code == 0 and [path.read_text() for path in records] == before


def test_reproduce_checks_its_data_before_loading_a_model(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "reproduce",
            "--models",
            "no-such-model",
            "--data",
            str(tmp_path / "none-{pair}.jsonl"),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1 and "none-en-de.jsonl" in result.output
    result = CliRunner().invoke(
        cli,
        [
            "reproduce",
            "--models",
            "no-such-model",
            "--data",
            str(tmp_path / "{x}-{pair}.jsonl"),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1 and "{x}-en-de.jsonl" in result.output  # other braces are only text
    result = CliRunner().invoke(cli, ["reproduce", "--pairs", "english-german", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "not a language pair" in result.output
