"""``mlx-ssbd reproduce``: the SSBD paper's grid on the models given, with a side-by-side report."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from mlx_ssbd.evaluation import paper
from mlx_ssbd.evaluation.bench import machine_info, run_bench, summarize
from mlx_ssbd.evaluation.datasets import describe
from mlx_ssbd.evaluation.metrics import ne_tokenizer
from mlx_ssbd.evaluation.report import write_report
from mlx_ssbd.evaluation.scorers import Comet, add_scores

import click

from .bench import DATA_HELP, comet_options, load_items, parse_list, parse_words, portable
from .common import load, user_errors

DEFAULT_MODELS = ",".join(model["hub"] for model in paper.paper_numbers()["models"].values())
WORD_S = 0.3  # seconds per source word for lagging, as bench's default


def _for_pair(data: str, pair: str) -> str:
    """``--data`` for one pair: ``{pair}`` in it becomes the pair (any other text stays as it is)."""
    return data.replace("{pair}", pair)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-").lower()


def _data_label(spec: str) -> str:
    """The data for reports: a set's name, or a file's path relative to the working directory."""
    return describe(spec) if spec.partition(":")[0] in ("flores", "sacrebleu") else portable(spec)


def _ne_tokenizer(target: str) -> str | None:
    """The paper's flores101 SentencePiece tokenizer where it can be had, else None (the default)."""
    try:
        return ne_tokenizer(target, "flores101")[0]
    except ValueError:
        return None


@click.command()
@click.option(
    "--models",
    default=DEFAULT_MODELS,
    show_default=True,
    help="Comma list of models (names, directories or hub ids), standing in for the paper's in order.",
)
@click.option(
    "--pairs", default=",".join(paper.PAIRS), show_default=True, help="Comma list of language pairs."
)
@click.option(
    "--data",
    default="flores:devtest",
    show_default=True,
    help=DATA_HELP + " A path may hold {pair} (en-de), filled per pair.",
)
@click.option(
    "--flores-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="A local copy of FLORES+ (SPLIT/CODE.parquet or .jsonl).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Use the first N sentences per pair.")
@click.option("--words", default=None, metavar="MIN-MAX", help="Keep sentences with MIN-MAX source words.")
@comet_options
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory (resumable)."
)
def reproduce(models, pairs, data, flores_dir, limit, words, comet, comet_python, out_dir):
    """Run the SSBD paper's grid and write its tables beside ours.

    \b
    For every model and language pair: RT and SSBD at beta 0.2 (the paper's main table); on the
    first model's en-zh also the beta sweep (0-0.5, 1), CD and draft / display mask-k 3 and 5.
    Lag 3 words. Each run is a `bench` run in OUT/MODEL/PAIR (resumable); OUT/paper.md is the
    side-by-side report, OUT/paper.json its numbers.

    \b
    On a Mac with the hub reachable (FLORES+ is gated: accept its terms and log in first):
      mlx-ssbd reproduce --comet Unbabel/wmt22-comet-da --out paper-run
    """
    model_list = parse_list(str, models)
    pair_list = parse_list(str, pairs)
    for pair in pair_list:
        if not re.fullmatch(r"[a-z]{2}-[a-z]{2}", pair):
            raise click.BadParameter(f"{pair!r} is not a language pair like en-de", param_hint="--pairs")
    word_range = parse_words(words)
    with user_errors():  # every pair's data before any model loads
        items = {
            pair: load_items(
                _for_pair(data, pair),
                paper.LAG,
                limit,
                word_range,
                source=pair[:2],
                target=pair[3:],
                flores_dir=flores_dir,
            )
            for pair in pair_list
        }
    sweep_position, sweep_pair = paper.sweep_run()
    scorer = Comet(comet, python=comet_python) if comet else None
    out, runs, tokenizers = Path(out_dir), {}, set()
    families = {model["hub"]: model["family"] for model in paper.paper_numbers()["models"].values()}
    for position, name in enumerate(model_list):
        loaded = load(name, family=families.get(name))  # the paper's prompt for its own models
        for pair in pair_list:
            source, target = pair.split("-")
            configs = paper.paper_grid(sweep=(position, pair) == (sweep_position, sweep_pair))
            translators = {
                label: loaded.translator(target, source_lang=source, config=config, examples=None)
                for label, config in configs.items()
            }
            spec = _for_pair(data, pair)
            facts = {
                "data": _data_label(spec),
                "data_name": describe(spec),
                "data_note": _data_label(spec),
                "model": loaded.name,
                "source": source,
                "target": target,
                "configs": list(configs),
                "lag": paper.LAG,
                "display_mask_k": 0,
                "word_s": WORD_S,
                "items": len(items[pair]),
                "temperatures": [0.0],
                "top_p": 1.0,
                "seed": 0,
            }
            if word_range:
                facts["words"] = word_range
            run_dir = out / _slug(name) / pair
            with (
                click.progressbar(
                    length=len(items[pair]),
                    label=f"{name} {pair}",
                    file=sys.stderr,
                    item_show_func=lambda i: i.id if i else "",
                ) as bar,
                user_errors(),
            ):
                records = run_bench(
                    translators,
                    items[pair],
                    run_dir,
                    run_facts=facts,
                    on_item=lambda item: bar.update(1, item),
                )
            summary = summarize(
                records, target_lang=target, word_s=WORD_S, ne_tok=_ne_tokenizer(target), labels=list(configs)
            )
            summary.update(run=facts, machine=machine_info(), notes=[])
            add_scores(summary, records, comet=scorer)
            write_report(run_dir, summary, records)
            runs[(position, pair)] = summary
            tokenizers.add(summary["ne_tokenizer"])
    machine = machine_info()
    counts = sorted({len(v) for v in items.values()})
    report_facts = {
        "backend": f"MLX on {machine['device']} ({machine['compute_dtype']}, BLAS {machine['blas']}), "
        f"{machine['cpus']} CPUs, {machine.get('os', machine['platform'])}",
        "data": _data_label(data)
        + (f", sentences of {word_range[0]}-{word_range[1]} words" if word_range else ""),
        "items": f"{'/'.join(map(str, counts))} sentences per pair",
        "ne_tokenizer": "/".join(sorted(tokenizers)),
        "comet": scorer.label if scorer else None,
    }
    (out / "paper.md").write_text(paper.side_by_side(runs, model_list, report_facts))
    (out / "paper.json").write_text(
        json.dumps(
            {
                "facts": report_facts,
                "models": model_list,
                "runs": {f"{model_list[pos]} {pair}": s["configs"] for (pos, pair), s in runs.items()},
            },
            indent=2,
            ensure_ascii=False,
        )
    )
    click.echo((out / "paper.md").read_text())
    click.echo(f"wrote paper.md, paper.json and one bench run per model and pair to {out}", err=True)
