"""The SSBD paper's experiments as a preset: its grid, its numbers, and a side-by-side report.

Contract: ``paper_numbers()`` is the paper's tables as data (``paper_ssbd.json``: the main table
per model and language pair, the β sweep and the mask-k ablation). ``paper_grid(sweep)`` is the
configurations one (model, pair) run needs: RT and SSBD at β = 0.2 everywhere (the main table),
and on the β sweep's model and pair also SSBD at β 0, 0.1, 0.3, 0.4, 0.5 and 1, CD, and draft and
display-only mask-k 3 and 5 at β = 0.2. ``side_by_side(runs, ...)`` writes the report: each table
of the paper with our figures beside it, and what differs. Our models stand in for the paper's in
order (the first for Tower+ 2B, the second for Qwen3-4B). Where we have no COMET, chrF++ is shown
in its place and named as such; NE on displayed text is used for display-only mask-k, as the paper
measures what the viewer sees.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ..live.methods import TranslatorConfig, method_config

PAIRS = ("en-de", "en-zh", "en-ja")
LAG = 3
MAIN_BETA = 0.2
SWEEP_BETAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0)
MASK_K = (3, 5)


@cache
def paper_numbers() -> dict:
    """The paper's tables (see ``paper_ssbd.json``)."""
    return json.loads((Path(__file__).with_name("paper_ssbd.json")).read_text(encoding="utf-8"))


def paper_models() -> list[str]:
    """The paper's models by key, in the order ours stand in for them."""
    return list(paper_numbers()["models"])


def ssbd_label(beta: float) -> str:
    return f"ssbd-b{beta:g}"


PAPER_METHOD = "ssbd-plain"  # the paper's rule: no rejoining, every update at the same β


def paper_grid(sweep: bool) -> dict[str, TranslatorConfig]:
    """label -> config for one (model, pair) run; ``sweep``: the β sweep's model and pair."""
    configs = {"rt": method_config("rt"), ssbd_label(MAIN_BETA): method_config(PAPER_METHOD, beta=MAIN_BETA)}
    if sweep:
        configs.update({ssbd_label(beta): method_config(PAPER_METHOD, beta=beta) for beta in SWEEP_BETAS})
        configs["cd"] = method_config("cd")
        for k in MASK_K:
            configs[f"{ssbd_label(MAIN_BETA)}-mask{k}"] = method_config(
                PAPER_METHOD, beta=MAIN_BETA, draft_mask_k=k
            )
            configs[f"{ssbd_label(MAIN_BETA)}-display{k}"] = method_config(
                PAPER_METHOD, beta=MAIN_BETA, display_mask_k=k
            )
    return configs


def sweep_run() -> tuple[int, str]:
    """(model position, pair) of the β sweep and the mask-k ablation."""
    sweep = paper_numbers()["beta_sweep"]
    return paper_models().index(sweep["model"]), sweep["pair"]


# -- the report ----------------------------------------------------------------------------------


def _f(value, digits=2, suffix="") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _quality(s: dict | None) -> str:
    """Our COMET, or chrF++ (named) where no COMET ran."""
    if not s:
        return "-"
    if s.get("comet") is not None:
        return f"{s['comet']:.3f}"
    return f"chrF++ {s['chrf']:.1f}" if s.get("chrf") is not None else "-"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def side_by_side(runs: dict, ours: list[str], facts: dict) -> str:
    """The report. ``runs[(position, pair)]`` is that run's ``summarize`` result; ``ours`` names
    our models in position order; ``facts``: ``data``, ``items``, ``machine``, ``ne_tokenizer``,
    ``comet`` (a label or None), ``backend``."""
    paper = paper_numbers()
    names = [paper["models"][key]["name"] for key in paper_models()]
    lines = [
        "# The SSBD paper's tables, reproduced with mlx-ssbd",
        "",
        f"Paper: {paper['paper']}; {paper['setup']}.",
        "",
        f"Ours: {facts['backend']}; data {facts['data']} ({facts['items']}); lag {LAG} words; "
        f"NE tokenizer sacrebleu `{facts['ne_tokenizer']}`; quality "
        + (
            f"COMET `{facts['comet']}`."
            if facts.get("comet")
            else "chrF++ (no COMET model was given: COMET columns show chrF++, a different scale)."
        ),
        "",
        "Models: "
        + "; ".join(f"ours `{mine}` in place of the paper's {names[i]}" for i, mine in enumerate(ours))
        + ".",
        "",
        "## Main table (β = 0.2)",
        "",
        "| model | pair | | COMET RT | COMET SSBD | NE RT | NE SSBD | A/D % | A/O % | speedup |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for position, mine in enumerate(ours):
        key = paper_models()[position] if position < len(paper_models()) else None
        for pair in PAIRS:
            run = runs.get((position, pair))
            if key and pair in paper["main"].get(key, {}):
                p = paper["main"][key][pair]
                lines.append(
                    f"| {names[position]} | {pair} | paper | {p['comet_rt']:.3f} | {p['comet_ssbd']:.3f} | "
                    f"{p['ne_rt']:.2f} | {p['ne_ssbd']:.2f} | {p['a_d']:.1f} | {p['a_o']:.1f} | {p['speedup']:.2f}x |"
                )
            if run:
                rt, ssbd = run["configs"].get("rt"), run["configs"].get(ssbd_label(MAIN_BETA))
                lines.append(
                    f"| `{mine}` | {pair} | ours | {_quality(rt)} | {_quality(ssbd)} | "
                    f"{_f(rt and rt['ne'])} | {_f(ssbd and ssbd['ne'])} | {_pct(ssbd and ssbd['a_d'])} | "
                    f"{_pct(ssbd and ssbd['a_o'])} | {_f(ssbd and ssbd['speedup'], suffix='x')} |"
                )
    lines += _sweep_tables(runs, ours, names)
    lines += [
        "",
        "## What differs from the paper",
        "",
        "- Engine: MLX (mlx-lm models, this project's update loop) instead of llama.cpp; "
        f"{facts['backend']}. Speedups depend on what a multi-token verify pass costs against a "
        "decode step on the machine: about one step on Apple Silicon or a GPU, several on a CPU "
        '(docs/results.md, "what a pass costs").',
        f"- NE tokenizer: sacrebleu `{facts['ne_tokenizer']}`"
        + (
            "."
            if facts["ne_tokenizer"] == "flores101"
            else " (the paper tokenizes with flores101 SentencePiece, whose model could not be downloaded here; "
            "NE values are on a different token scale)."
        ),
        f"- Data: {facts['data']}, {facts['items']}"
        + (
            "."
            if facts["data"].startswith("FLORES+")
            else "; the paper uses FLORES (1,012 devtest sentences)."
        ),
        "- Quality: "
        + (
            f"COMET `{facts['comet']}`."
            if facts.get("comet")
            else "no COMET here: chrF++ stands in its columns, a different metric on a different scale."
        ),
        "- Models: "
        + (
            "the paper's."
            if ours == [paper["models"][k]["hub"] for k in paper_models()][: len(ours)]
            else "ours stand in for the paper's (above); their sizes and training differ."
        ),
    ]
    return "\n".join(lines) + "\n"


def _sweep_tables(runs: dict, ours: list[str], names: list[str]) -> list[str]:
    paper = paper_numbers()
    position, pair = sweep_run()
    if position >= len(ours):
        return []
    run = (runs.get((position, pair)) or {}).get("configs", {})
    sweep, mask = paper["beta_sweep"], paper["mask_k"]
    lines = [
        "",
        f"## β sweep ({names[position]} / ours `{ours[position]}`, {pair})",
        "",
        "| β | COMET paper | ours | NE paper | ours | speedup paper | ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, beta in enumerate(sweep["beta"]):
        s = run.get(ssbd_label(beta))
        lines.append(
            f"| {beta:g} | {sweep['comet'][i]:.3f} | {_quality(s)} | {sweep['ne'][i]:.2f} | "
            f"{_f(s and s['ne'])} | {sweep['speedup'][i]:.2f}x | {_f(s and s['speedup'], suffix='x')} |"
        )
    b1, cd = run.get(ssbd_label(1.0)), run.get("cd")
    lines.append(
        f"| 1 | - | {_quality(b1)} | - | {_f(b1 and b1['ne'])} | - | {_f(b1 and b1['speedup'], suffix='x')} |"
    )
    lines.append(
        f"| CD | - | {_quality(cd)} | - | {_f(cd and cd['ne'])} | {sweep['cd_speedup']:.2f}x | "
        f"{_f(cd and cd['speedup'], suffix='x')} |"
    )
    lines += [
        "",
        f"## Mask-k ablation (β = {mask['beta']:g}; {mask['note']})",
        "",
        "| mask-k | k | NE paper | ours | speedup paper | ours |",
        "|---|---|---|---|---|---|",
    ]
    for kind, suffix, ne_key in (("draft", "mask", "ne"), ("display", "display", "ne_display")):
        for i, k in enumerate(mask["k"]):
            s = run.get(f"{ssbd_label(mask['beta'])}-{suffix}{k}")
            lines.append(
                f"| {kind} | {k} | {mask[kind]['ne'][i]:.2f} | {_f(s and s[ne_key])} | "
                f"{mask[kind]['speedup'][i]:.2f}x | {_f(s and s['speedup'], suffix='x')} |"
            )
    return lines
