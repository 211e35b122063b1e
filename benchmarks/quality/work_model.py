"""The same decisions on other machines: a run's counted model work priced at measured pass costs.

A method's speed over RT comes from its decisions (how many tokens each update's first pass feeds,
how many decode steps follow: counted in every run's ``results.jsonl``) and from what a pass over n
tokens costs against one decode step on the machine (``verify-cost`` and ``decode-step`` reports).
For each run folder (``--runs``: an ``accept_rules`` or ``mlx-ssbd bench`` output) and each set of
pass costs (``--pass-costs NAME=REPORT``, ``NAME=REPORT#ROW`` for a decode-step report's row; a path
that names nothing is looked up beside ``--out``, among the other steps of its results folder), this
reports per configuration the work per update and its modelled speedup over the run's RT
(``evaluation.work``), beside the speedup the run measured. At the pass costs of the machine the
run was timed on, the model should give about the measured speedup (what it leaves out, the
engine's own time, is small there); at another machine's, it says what the same decisions would
gain there, the engine's own time left out: what they allow, not a measurement. ``--pieces 4,8``
adds the same decisions had each draft been verified a few tokens a pass, stopping after the piece
that holds the first rejected token (``evaluation.work.update_passes``): whether verifying less
would pay on those machines. Nothing is timed here; the inputs are committed reports.

    python -m benchmarks.quality.work_model --runs RUN_DIR \
        --pass-costs "this CPU=VERIFY_COST_DIR/verify_cost.json" \
        --pass-costs "H100 fp16=DECODE_STEP_DIR/decode_step.json#dense float16" --out DIR
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.quality.accept_rules import base_rt
from mlx_ssbd.evaluation.bench import RESULTS as RECORDS
from mlx_ssbd.evaluation.work import PassCosts, mean_work, modelled_speedups


def beside(path: str | Path, out: Path | None) -> Path:
    """``path`` as given, or, where nothing is there, beside ``out``: another step of the same
    results folder (as ``benchmarks.run`` names them)."""
    given = Path(path)
    return given if given.exists() or out is None else out.parent / given


def parse_costs(spec: str) -> tuple[str, str, str | None]:
    """``NAME=PATH`` or ``NAME=PATH#ROW`` -> (name, path, row)."""
    name, sep, where = spec.partition("=")
    if not sep or not name or not where:
        raise SystemExit(f"--pass-costs takes NAME=REPORT[#ROW], not {spec!r}")
    path, _, row = where.partition("#")
    return name, path, row or None


def parse_pieces(spec: str) -> tuple[int, ...]:
    """``--pieces 4,8`` -> (4, 8): tokens of a draft per pass, each at least 1."""
    refused = SystemExit(f"--pieces takes draft tokens per pass, whole numbers >= 1, as 4,8; not {spec!r}")
    try:
        pieces = tuple(int(part) for part in spec.split(",") if part.strip())
    except ValueError:
        raise refused from None
    if any(piece < 1 for piece in pieces):
        raise refused
    return pieces


def pass_costs_facts(costs: PassCosts, path: str, row: str | None) -> dict:
    report = json.loads(Path(path).read_text())
    if "shape" in report:  # a decode-step report: random weights of a model's shape
        shape = report["shape"]
        timed = f"random weights, width {shape['hidden_size']}, {shape['num_hidden_layers']} layers"
    else:
        timed = f"{report.get('model', '?')} ({report.get('dtype', '?')})"
    return {
        "name": costs.name,
        "report": relative(path) + (f" ({row})" if row else ""),
        "timed": timed,
        "points": [list(point) for point in costs.points],
    }


def run_rows(folder: Path, all_costs: list[PassCosts], pieces: tuple[int, ...] = ()) -> dict:
    try:
        records = [json.loads(line) for line in (folder / RECORDS).read_text().splitlines() if line]
        summary = json.loads((folder / "summary.json").read_text())
        labels = list(summary["configs"])
        base = base_rt(labels) or labels[0]
        modelled = {costs.name: modelled_speedups(records, costs, base) for costs in all_costs}
        in_pieces = {
            piece: {costs.name: modelled_speedups(records, costs, base, piece) for costs in all_costs}
            for piece in pieces
        }
        works = {label: mean_work(records, label) for label in labels}
    except (ValueError, KeyError, IndexError) as error:  # not a run's records, or RT ran no pass
        raise SystemExit(f"--runs: {relative(folder)}: not a run this can price ({error!r})") from None
    rows = []
    for label in labels:
        work = works[label]
        rows.append(
            {
                "config": label,
                "measured": summary["configs"][label].get("speedup"),
                "first_pass_tokens": None if work is None else round(work[0], 1),
                "decode_steps": None if work is None else round(work[1], 1),
                "modelled": {name: speedups.get(label) for name, speedups in modelled.items()},
                "pieces": {
                    str(piece): {name: speedups.get(label) for name, speedups in by_costs.items()}
                    for piece, by_costs in in_pieces.items()
                },
            }
        )
    return {
        "run": relative(folder),
        "model": summary["run"].get("model"),
        "data": summary["run"].get("data_name"),
        "base": base,
        "machine": machine_line(summary.get("machine", {})),
        "rows": rows,
    }


def measure(args) -> dict:
    specs = [parse_costs(spec) for spec in args.pass_costs]
    pieces = parse_pieces(args.pieces)
    if not specs or not args.runs:
        raise SystemExit("name the runs (--runs DIR[,DIR...]) and at least one --pass-costs NAME=REPORT")
    all_costs, facts = [], []
    for name, path, row in specs:
        path = beside(path, args.out)
        try:
            costs = PassCosts.from_report(name, path, row)
        except (OSError, ValueError, KeyError) as error:
            raise SystemExit(f"--pass-costs {name}: {error}") from None
        all_costs.append(costs)
        facts.append(pass_costs_facts(costs, path, row))
    runs = []
    for folder in args.runs.split(","):
        folder = beside(folder.strip(), args.out)
        if not (folder / RECORDS).is_file() or not (folder / "summary.json").is_file():
            raise SystemExit(f"--runs: {folder} holds no results.jsonl and summary.json of a run")
        runs.append(run_rows(folder, all_costs, pieces))
    return {"pass_costs": facts, "pieces": list(pieces), "runs": runs}


def run_name(run: dict) -> str:
    """A run's name in the tables: its step, its day and its data."""
    step = Path(run["run"])
    return f"{step.name} ({step.parent.name[:10]}), {run['data']}"


def speed(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(result: dict) -> list[str]:
    names = [costs["name"] for costs in result["pass_costs"]]
    lines = [
        "Nothing here was timed: each run's counted work (`results.jsonl`) priced at the pass "
        "costs of a verify-cost or decode-step report. *first pass*: tokens the update's first pass "
        "fed (the source's new tokens, the prompt's end and the draft), *steps*: decode steps after "
        "it, both per update that ran a pass. *measured*: the run's own speedup over its RT (wall "
        "time, same run). *modelled at ...*: the RT configuration's work over the configuration's, "
        "each pass priced at that machine's cost of a pass over as many tokens (in its decode "
        "steps); the engine's own time, prompts and captions are left out, so at a machine's own "
        "costs it should be near what was measured there, and at another's it is what the same "
        "decisions allow there, not a measurement; a decode step that also checked a lookahead "
        "proposal (rejoining the draft) is priced as a pass over as many tokens as it fed. '-': a "
        "configuration whose records do not say how wide those steps were (runs older than that count).",
        "",
        "Pass costs (decode steps for a pass over n tokens):",
        "",
        *markdown_table(
            ["name", "from", "what was timed", "n: decode steps"],
            [
                (
                    c["name"],
                    c["report"],
                    c["timed"],
                    ", ".join(f"{n}: {steps:.2f}" for n, steps in c["points"]),
                )
                for c in result["pass_costs"]
            ],
        ),
    ]
    rows = []
    for run in result["runs"]:
        name = run_name(run)
        for row in run["rows"]:
            work = (
                ("-", "-")
                if row["first_pass_tokens"] is None
                else (row["first_pass_tokens"], row["decode_steps"])
            )
            modelled = (speed(row["modelled"][n]) for n in names)
            rows.append((name, row["config"], *work, speed(row["measured"]), *modelled))
    timed = sorted({run["machine"] for run in result["runs"]})
    lines += [
        "",
        *markdown_table(
            ["run", "config", "first pass tokens", "steps", "measured", *(f"modelled at {n}" for n in names)],
            rows,
        ),
        "",
        "Runs (folders under benchmarks/results) timed on: " + " ".join(timed) + " Each run against its RT "
        "configuration (the first `rt` one).",
    ]
    return lines + pieces_table(result, names)


def pieces_table(result: dict, names: list[str]) -> list[str]:
    """The drafts verified in pieces (``--pieces``): each config with a draft, at each machine's costs."""
    pieces = result.get("pieces") or []
    rows = []
    for run in result["runs"]:
        name = run_name(run)
        for row in run["rows"]:
            if row["config"] == run["base"] or not row.get("pieces"):
                continue
            for costs in names:
                whole = row["modelled"][costs]
                rows.append(
                    (
                        name,
                        row["config"],
                        costs,
                        speed(whole),
                        *(speed(row["pieces"][str(p)][costs]) for p in pieces),
                    )
                )
    if not rows:
        return []
    return [
        "",
        "Each draft verified in pieces instead of whole: the first pass feeds the new tokens and the "
        "first piece, each later pass the next piece, and no piece follows the one that holds the first "
        "rejected draft token (the same decisions, so the same decode steps). Modelled speedup over the "
        "run's RT, at each machine's pass costs: whether verifying less would pay there.",
        "",
        *markdown_table(
            ["run", "config", "pass costs of", "whole draft", *(f"pieces of {p}" for p in pieces)], rows
        ),
    ]


BENCHMARK = Benchmark(
    "work_model",
    "The same decisions at other machines' pass costs",
    measure,
    render,
    options=(
        option("--runs", default="", help="run folders (results.jsonl, summary.json), comma-separated"),
        option(
            "--pass-costs",
            action="append",
            default=[],
            help="NAME=REPORT: a verify_cost.json, or decode_step.json#ROW (repeatable)",
        ),
        option(
            "--pieces", default="", help="also price each draft verified N tokens a pass (comma-separated N)"
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
