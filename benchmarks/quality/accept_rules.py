"""Speed against quality for every acceptance rule and setting, in one run per model and data set.

Each configuration (``CONFIGS``: RT, the paper's mixture rule at several β, the ratio rule at
several β, variants, and ``cd``, which keeps every draft token: the speed no acceptance rule that
verifies the draft can pass) translates the same sentences revealed ``--lag`` words at a time, one
after another in one process (``evaluation.bench.run_bench``: timings compare within this run
only). Reported per configuration: speedup over prefix-cached RT, chrF++ and BLEU of the committed
captions, NE and LAAL-CA (``mlx-ssbd bench``'s report, ``report.md``), a Pareto plot of speedup
against chrF++ and NE (``pareto.png``), and for each configuration the difference of its chrF++
from RT's with a 95% interval from a paired bootstrap over the sentences (``rules.md``: how much of
a difference these few sentences can tell apart). ``--semsim`` adds USE-multilingual similarity
to the references (after the run; not COMET). ``--configs`` picks a subset by label; a label
ending in ``+examples`` is that configuration with the example translations of ``--examples FILE``
in its prompt (``glossary.examples_for``: ``builtin`` names mlx-ssbd's own), one ending in
``+context`` that configuration with the talk's earlier committed captions in its prompt
(``TranslatorConfig.context_tokens``: the sentences are one talk, translated in order), so one run
measures what each changes. With ``--refs FILE`` the data is ASR partials instead (a segment's
reference from that pairs file by id: ``benchmarks/data/asr-partials``), each committed as its
final partial says. An interrupted run resumes per sentence.

    python -m benchmarks.quality.accept_rules --model qwen2.5-coder-0.5b \
        --data benchmarks/data/talk-sentences/en-de.dev.jsonl --out DIR
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import data_pairs, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.bench import (
    NoReferences,
    items_from_pairs,
    machine_info,
    partials_items,
    run_bench,
    summarize,
)
from mlx_ssbd.evaluation.report import pyplot, save_figure, write_report
from mlx_ssbd.evaluation.scorers import add_scores
from mlx_ssbd.live.glossary import BUILTIN, examples_for
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.models.loading import load_model

EXAMPLED = "+examples"  # a config label's suffix: the same with the --examples in its prompt
CONTEXTED = "+context"  # ... with the talk's earlier captions in its prompt, CONTEXT_TOKENS at most
BUILTIN_FILE = "mlx_ssbd/live/examples.tsv (--examples builtin)"  # how a report names the built-in ones
CONTEXT_TOKENS = 256  # as the docs' example (``mlx-ssbd translate --context 256``)
WORD_S = 0.3  # seconds per source word for lagging, as ``mlx-ssbd bench``
CONFIGS = {
    "rt": dict(method="rt"),
    "ssbd-b0": dict(method="ssbd", beta=0.0),
    "ssbd-b0.1": dict(method="ssbd", beta=0.1),
    "ssbd-b0.2": dict(method="ssbd", beta=0.2),  # the default: commits at β 0.1 (COMMIT_BETA)
    "ssbd-plain-b0.2": dict(method="ssbd-plain", beta=0.2),  # the paper's rule, never rejoining the draft
    # the default rejoining its draft also where the output's last token alone occurs once in it
    "ssbd-b0.2-anchor1": dict(method="ssbd", beta=0.2, resync_anchors=[2, 1]),
    "ssbd-b0.25": dict(method="ssbd", beta=0.25),
    "ssbd-b0.3": dict(method="ssbd", beta=0.3),
    "ssbd-ratio-b0.4": dict(method="ssbd-ratio", beta=0.4),
    "ssbd-ratio-b0.6": dict(method="ssbd-ratio", beta=0.6),
    "ssbd-ratio-b0.8": dict(method="ssbd-ratio", beta=0.8),
    "ssbd-final0-b0.2": dict(method="ssbd-final0", beta=0.2),
    # the default committing at another β (0.2: at the live updates' β)
    "ssbd-b0.2-final0.05": dict(method="ssbd", beta=0.2, final_beta=0.05),
    "ssbd-b0.2-final0.1": dict(method="ssbd", beta=0.2, final_beta=0.1),
    "ssbd-b0.2-final0.15": dict(method="ssbd", beta=0.2, final_beta=0.15),
    "ssbd-b0.2-final0.2": dict(method="ssbd", beta=0.2, final_beta=0.2),
    # the default checking every commit at 0.1, also one whose source repeats the last live update's
    "ssbd-b0.2-recheck": dict(method="ssbd", beta=0.2, commit_shown=False),
    "ssbd-ratio-b0.6-final0.2": dict(method="ssbd-ratio", beta=0.6, final_beta=0.2),
    # every draft token kept (β = 1): the fastest any rule that verifies the draft can be
    "cd": dict(method="cd"),
}


def base_rt(labels: list[str]) -> str | None:
    """The RT configuration a run's speeds and chrF++ differences are measured against: the first
    RT label without the talk's context (``bench.summarize`` takes the same one)."""
    return next(
        (label for label in labels if (parts := split_label(label))[0] == "rt" and CONTEXTED not in parts[1]),
        None,
    )


def split_label(label: str) -> tuple[str, set[str]]:
    """A config label's ``CONFIGS`` key and its ``+examples`` / ``+context`` suffixes (either order)."""
    suffixes = set()
    while suffix := next((s for s in (EXAMPLED, CONTEXTED) if label.endswith(s)), None):
        suffixes.add(suffix)
        label = label.removesuffix(suffix)
    return label, suffixes


def revealed(facts: dict) -> str:
    """How a run's sources came: ``lag 3`` (words revealed at a time) or ``ASR partials``."""
    return f"lag {facts['lag']}" if facts["lag"] else "ASR partials"


def rules_table(summary: dict, deltas: dict) -> list[str]:
    semsim = any("semsim" in s for s in summary.values())
    header = [
        "config",
        "speedup over RT",
        "chrF++",
        "Δ chrF++ vs RT [95% interval]",
        "BLEU",
        "NE",
        "LAAL-CA s",
    ]
    rows = []
    for label, s in summary.items():
        delta, low, high = deltas[label]
        rows.append(
            (label, f"{s['speedup']:.2f}x", f"{s['chrf']:.1f}", f"{delta:+.1f} [{low:+.1f}, {high:+.1f}]",
             f"{s['bleu']:.1f}", f"{s['ne']:.2f}", f"{s['laal_ca_s']:.2f}")
            + ((f"{s['semsim']:.3f}",) if semsim else ())
        )  # fmt: skip
    return markdown_table(header + (["semsim"] if semsim else []), rows)


def plot(result: dict, out: Path) -> None:
    """Speedup against chrF++ and against NE, a point per configuration (``pareto.png``)."""
    summary, facts = result["configs"], result["run"]
    title = f"{facts['model']}, {facts['data_name']}, {revealed(facts)}"
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for label, s in summary.items():
        colour = (
            "black" if label == result.get("base", "rt") else "tab:orange" if "ratio" in label else "tab:blue"
        )
        for ax, key in zip(axes, ("chrf", "ne")):
            ax.scatter(s["speedup"], s[key], color=colour, s=22)
            ax.annotate(
                label.replace("ssbd-", ""),
                (s["speedup"], s[key]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    rt = summary[result.get("base", "rt")]
    axes[0].axhline(rt["chrf"] - 1, color="grey", ls="--", lw=1, label="RT's chrF++ - 1")
    axes[0].set(xlabel="speedup over RT", ylabel="chrF++ (committed captions)", title=title)
    axes[0].legend(fontsize=8)
    axes[1].axhline(0.5, color="grey", ls="--", lw=1, label="NE 0.5")
    axes[1].set(xlabel="speedup over RT", ylabel="NE (normalized erasure)", title="flicker")
    axes[1].legend(fontsize=8)
    save_figure(plt, fig, out / "pareto.png")


def examples_named(spec: str | None) -> str | None:
    """How a report names ``--examples``: the file, relative to the repository, or the built-in ones."""
    if not spec:
        return None
    return BUILTIN_FILE if spec == BUILTIN else relative(spec)


def measure(args) -> dict:
    labels = [label.strip() for label in args.configs.split(",")]
    parsed = {label: split_label(label) for label in labels}
    unknown = [label for label, (base, _) in parsed.items() if base not in CONFIGS]
    if any(EXAMPLED in suffixes for _, suffixes in parsed.values()) and not args.examples:
        raise SystemExit(f"configs labelled LABEL{EXAMPLED} need --examples FILE")
    if unknown or base_rt(labels) is None:
        needed = "rt (or rt+examples) must be among them"
        raise SystemExit(f"unknown configs {unknown}; {needed}" if unknown else needed)

    if args.refs:  # ASR partials, each segment's reference by its id
        try:
            items = partials_items(args.data, args.refs)[: args.limit or None]
        except NoReferences as error:
            raise SystemExit(str(error)) from None
    else:
        items = items_from_pairs(data_pairs(args.data, args.limit), args.lag)
    examples = examples_for(args.examples) if args.examples else None
    loaded = load_model(args.model)
    translators = {}
    for label, (base, suffixes) in parsed.items():
        settings = dict(CONFIGS[base])
        if CONTEXTED in suffixes:
            settings["context_tokens"] = CONTEXT_TOKENS
        anchors = settings.pop("resync_anchors", None)  # a list in CONFIGS, as the run's facts keep it
        config = method_config(settings.pop("method"), **settings)
        if anchors:  # the method's own lookahead, rejoining on these anchors
            config = replace(config, lookahead=replace(config.lookahead, resync_anchors=tuple(anchors)))
        shown = examples if EXAMPLED in suffixes else None
        translators[label] = loaded.translator(args.target, config=config, examples=shown)
    facts = {
        "data": relative(args.data),
        "data_name": Path(args.data).name,
        "model": args.model,
        "source": "en",
        "target": args.target,
        "lag": None if args.refs else args.lag,
        "display_mask_k": 0,
        "word_s": WORD_S,
        "items": len(items),
        "data_note": (
            "real ASR partials of a talk written for the project (benchmarks/data/asr-partials)"
            if args.refs
            else "talk-like sentences written for the project, references by the authors"
        ),
        "configs": {label: CONFIGS[base] for label, (base, _) in parsed.items()},
        "examples": examples_named(args.examples),
    }
    records = run_bench(
        translators, items, args.out, run_facts=facts, on_item=lambda item: print(item.id, flush=True)
    )
    summary = summarize(records, target_lang=args.target, word_s=WORD_S, labels=labels)
    summary.update(run=facts, machine=machine_info(), notes=[])
    add_scores(summary, records, semsim=args.semsim)
    write_report(args.out, summary, records)  # the bench's own report: summary.json, report.md
    base = base_rt(labels)
    return {
        "run": facts,
        "configs": summary["configs"],
        "deltas": {label: summary["configs"][label]["chrf_vs_rt"] for label in labels},  # against ``base``
        "base": base,
    }


def render(result: dict) -> list[str]:
    facts = result["run"]
    semsim = any("semsim" in s for s in result["configs"].values())
    shown = f" {EXAMPLED}: with the example translations of {facts['examples']} in the prompt."
    context = (
        f" {CONTEXTED}: with the talk's earlier committed captions in the prompt (at most {CONTEXT_TOKENS}"
        " tokens, the sentences translated in the talk's order)."
    )
    base = result.get("base", "rt")  # the RT configuration the chrF++ differences are against
    speed_base = result["configs"][base].get("speedup_vs") or base  # and speeds (``bench.summarize``)
    return [
        *rules_table(result["configs"], result["deltas"]),
        "",
        f"{machine_line(result['machine'])} Speedup: the wall time of {speed_base} over the configuration's, same "
        f"run. Δ chrF++: corpus chrF++ of the committed captions minus {base}'s; the interval: 2.5th-97.5th "
        "percentile of that difference over 1000 paired bootstrap resamples of the sentences."
        + (" semsim: USE-multilingual-v3 cosine similarity, not COMET." if semsim else "")
        + (shown if facts["examples"] else "")
        + (context if any(CONTEXTED in split_label(label)[1] for label in result["configs"]) else ""),
    ]


BENCHMARK = Benchmark(
    "rules",
    lambda r: (
        f"Acceptance rules: {r['run']['model']}, {r['run']['data_name']}, {r['run']['items']} sentences, "
        f"{revealed(r['run'])}"
    ),
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-1.5b"),
        option("--data", required=True),
        option("--target", default="de"),
        option("--lag", type=int, default=3),
        option(
            "--refs", help="read --data as ASR partials, each segment's reference from this pairs file by id"
        ),
        option("--limit", type=int, default=0, help="the first N sentences only"),
        option("--configs", default=",".join(CONFIGS), help="labels of CONFIGS, comma-separated"),
        option("--semsim", action="store_true", help="USE-multilingual similarity to the references"),
        option(
            "--examples",
            help=f"example translations for the configs labelled LABEL+examples (a file, or {BUILTIN}: "
            "mlx-ssbd's own)",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
