"""A run's counted model work priced at a machine's pass costs (``evaluation.work``)."""

import json

from mlx_ssbd.engine.planner import PREFILL_CHUNK
from mlx_ssbd.evaluation.work import (
    PassCosts,
    mean_work,
    modelled_speedups,
    update_passes,
    update_steps,
    update_work,
)

import pytest


def record(config, fed, passes, proposals=0, draft=0, accepted=0, widths=None):
    return {
        "config": config,
        "tokens_fed": fed,
        "forward_passes": passes,
        "proposals": proposals,
        "draft_tokens": draft,
        "accepted": accepted,
        **({} if widths is None else {"proposal_widths": widths}),
    }


def test_pass_costs_interpolate_between_measured_widths_and_extend_the_last_segment():
    costs = PassCosts("cpu", ((16, 5.0), (1, 1.0), (4, 2.0)))  # sorted on the way in
    assert costs.points == ((1, 1.0), (4, 2.0), (16, 5.0))
    assert costs.cost(0) == 0.0 and costs.cost(1) == 1.0
    assert costs.cost(2.5) == pytest.approx(1.5)  # halfway from 1 to 4 tokens
    assert costs.cost(10) == pytest.approx(3.5)
    assert costs.cost(28) == pytest.approx(8.0)  # past 16: the last segment's slope, 0.25 a token
    with pytest.raises(ValueError, match="two distinct"):
        PassCosts("one point", ((1, 1.0),))
    with pytest.raises(ValueError, match="two distinct"):
        PassCosts("twice the same", ((1, 1.0), (1, 2.0)))


def test_pass_costs_read_a_verify_cost_report_or_a_decode_step_report_s_row(tmp_path):
    verify = tmp_path / "verify_cost.json"
    verify.write_text(json.dumps({"pass_over_step": {"1": 1.0, "16": 4.0, "4": 1.5}}))
    assert PassCosts.from_report("cpu", verify).points == ((1, 1.0), (4, 1.5), (16, 4.0))
    decode = tmp_path / "decode_step.json"
    rows = [
        {"format": "dense float16", "verify16_in_decode_steps": 1.75},
        {"format": "4bit", "verify16_in_decode_steps": 2.5},
    ]
    decode.write_text(json.dumps({"shape": {}, "rows": rows}))
    gpu = PassCosts.from_report("gpu", decode, "4bit")
    assert gpu.points == ((1, 1.0), (16, 2.5)) and gpu.cost(31) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="name one of the rows"):
        PassCosts.from_report("gpu", decode, "8bit")


def test_an_update_s_work_is_its_first_pass_then_one_token_a_decode_step():
    assert update_work(record("rt", fed=23, passes=16)) == (8, 1, 15, ())  # 8 prompt tokens, 15 steps
    assert update_work(record("rt", fed=0, passes=0)) == (0, 0, 0, ())  # unchanged source: no pass
    long = PREFILL_CHUNK + 72  # a first pass over more than a chunk goes in two passes
    assert update_work(record("rt", fed=long + 5, passes=2 + 5)) == (long, 2, 5, ())
    assert update_work(record("ssbd-ngram", fed=30, passes=6, proposals=2)) is None  # widths unknown
    # a 12-token first pass, 3 one-token steps and 2 steps that checked proposals of 4 and 7 tokens
    assert update_work(record("ssbd", fed=12 + 3 + 5 + 8, passes=6, proposals=2, widths=[5, 8])) == (
        12,
        1,
        3,
        (5, 8),
    )
    costs = PassCosts("linear", ((1, 1.0), (17, 5.0)))  # 0.75 + 0.25 n
    assert update_steps(record("rt", fed=23, passes=16), costs) == pytest.approx(0.75 + 0.25 * 8 + 15)
    assert update_steps(record("ssbd", fed=28, passes=6, proposals=2, widths=[5, 8]), costs) == pytest.approx(
        (0.75 + 0.25 * 12) + 3 + (0.75 + 0.25 * 5) + (0.75 + 0.25 * 8)
    )
    assert update_steps(record("rt", fed=long + 5, passes=7), costs) == pytest.approx(
        2 * (0.75 + 0.25 * long / 2) + 5
    )


def test_modelled_speedups_set_each_config_s_work_against_the_base_s():
    costs = PassCosts("linear", ((1, 1.0), (17, 5.0)))  # 0.75 + 0.25 n
    records = [
        record("rt", fed=23, passes=16),  # 2.75 + 15 = 17.75
        record("rt", fed=0, passes=0),
        record("ssbd", fed=25, passes=8),  # first pass 18 tokens: 5.25 + 7 = 12.25
        record("ssbd", fed=0, passes=0),
        record("plus", fed=25, passes=8),
        record("plus", fed=20, passes=4, proposals=1),
        record("resync", fed=25 + 4, passes=8, proposals=1, widths=[5]),  # 5.25 + 6 + 2 = 13.25
    ]
    speedups = modelled_speedups(records, costs, base="rt")
    assert speedups["rt"] == pytest.approx(1.0)
    assert speedups["ssbd"] == pytest.approx(17.75 / 12.25)
    assert speedups["plus"] is None  # one of its updates cannot be priced
    assert speedups["resync"] == pytest.approx(17.75 / 13.25)
    assert mean_work(records, "ssbd") == (18.0, 7.0) and mean_work(records, "plus") is None
    assert mean_work(records, "resync") == (18.0, 7.0)
    with pytest.raises(ValueError, match="base config"):
        modelled_speedups(records, costs, base="nothing")


def test_a_draft_verified_in_pieces_stops_after_the_piece_that_holds_the_first_rejection():
    # 8 new tokens and a 20-token draft, then 3 decode steps
    def update(accepted):
        return record("ssbd", fed=28 + 3, passes=1 + 3, draft=20, accepted=accepted)

    assert update_passes(update(20)) == ([28], 3, ())  # the whole draft in one pass
    assert update_passes(update(20), piece=8) == ([16, 8, 4], 3, ())  # all kept: every piece fed
    assert update_passes(update(3), piece=8) == ([16], 3, ())  # rejected in the first piece
    assert update_passes(update(8), piece=8) == ([16, 8], 3, ())  # the 9th token, in the second piece
    assert update_passes(update(3), piece=20) == ([28], 3, ())  # a draft no longer than a piece: whole
    assert update_passes(record("rt", fed=23, passes=16), piece=4) == ([8], 15, ())  # no draft
    costs = PassCosts("linear", ((1, 1.0), (17, 5.0)))  # 0.75 + 0.25 n
    assert update_steps(update(3), costs, piece=8) == pytest.approx(0.75 + 0.25 * 16 + 3)
    records = [record("rt", fed=23, passes=16), update(20)]
    whole, pieces = (modelled_speedups(records, costs, "rt", piece)["ssbd"] for piece in (None, 8))
    assert whole == pytest.approx(17.75 / (0.75 + 0.25 * 28 + 3))
    assert pieces == pytest.approx(17.75 / (3 * 0.75 + 0.25 * 28 + 3))  # two passes' fixed part more


def test_the_report_names_its_pass_costs_as_name_equals_report():
    from benchmarks.quality.work_model import parse_costs

    assert parse_costs("H100, fp16=runs/decode_step.json#dense float16") == (
        "H100, fp16",
        "runs/decode_step.json",
        "dense float16",
    )
    assert parse_costs("cpu=verify_cost.json") == ("cpu", "verify_cost.json", None)
    for bad in ("verify_cost.json", "=verify_cost.json", "cpu="):
        with pytest.raises(SystemExit, match="NAME=REPORT"):
            parse_costs(bad)


def test_a_run_whose_rt_ran_no_pass_is_refused_with_a_message(tmp_path):
    from benchmarks.quality.work_model import run_rows

    (tmp_path / "results.jsonl").write_text(json.dumps(record("rt", fed=0, passes=0)) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"configs": {"rt": {"speedup": 1.0}}, "run": {}}))
    with pytest.raises(SystemExit, match="no modelled work for the base config 'rt'"):
        run_rows(tmp_path, [PassCosts("cpu", ((1, 1.0), (16, 4.0)))])
    # nor records that are not a run's
    (tmp_path / "results.jsonl").write_text('{"config": "rt"}\n{not json\n')
    with pytest.raises(SystemExit, match="not a run this can price"):
        run_rows(tmp_path, [PassCosts("cpu", ((1, 1.0), (16, 4.0)))])


def test_the_runner_s_step_names_the_runs_and_costs_of_its_own_results_folder(tmp_path):
    """``benchmarks.run`` passes other steps' folder names: looked up beside ``--out``."""
    from test_benchmark_scripts import script

    run = tmp_path / "2026-01-01-linux-x86_64-2cpu-epyc"
    (run / "rules").mkdir(parents=True)
    (run / "verify-cost-1.5b").mkdir()
    records = [record("rt", fed=23, passes=16), record("ssbd", fed=25, passes=8, draft=10, accepted=2)]
    (run / "rules" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"configs": {"rt": {"speedup": 1.0}, "ssbd": {"speedup": 1.4}}, "run": {"data_name": "d"}}
    (run / "rules" / "summary.json").write_text(json.dumps(summary))
    costs = {"model": "m", "dtype": "float32", "pass_over_step": {"1": 1.0, "17": 5.0}}  # 0.75 + 0.25 n
    (run / "verify-cost-1.5b" / "verify_cost.json").write_text(json.dumps(costs))
    script(
        "benchmarks.quality.work_model",
        "--runs",
        "rules",
        "--pass-costs",
        "this machine=verify-cost-1.5b/verify_cost.json",
        "--pieces",
        "4",
        "--out",
        run / "work-model",
    )
    (done,) = json.loads((run / "work-model" / "work_model.json").read_text())["runs"]
    ssbd = done["rows"][1]
    assert ssbd["config"] == "ssbd" and ssbd["measured"] == 1.4
    assert ssbd["modelled"]["this machine"] == pytest.approx(17.75 / 12.25)
    # in pieces of 4 its 18-token first pass (8 new tokens, a 10-token draft rejected at its third
    # token) feeds 12 tokens: 3.75 + 7 steps
    assert ssbd["pieces"]["4"]["this machine"] == pytest.approx(17.75 / 10.75)
    report = (run / "work-model" / "work_model.md").read_text()
    assert "| ssbd | this machine | 1.45x | 1.65x |" in report


def test_pieces_are_whole_numbers_of_at_least_one_token():
    from benchmarks.quality.work_model import parse_pieces

    assert parse_pieces("4, 8") == (4, 8) and parse_pieces("") == ()
    for bad in ("0", "four", "4,-1"):
        with pytest.raises(SystemExit, match="--pieces takes"):
            parse_pieces(bad)
