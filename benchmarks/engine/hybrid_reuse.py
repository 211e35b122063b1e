"""What an update costs on models whose cache cannot be trimmed: hybrid against full attention.

Random-weight models of one width (``mlx_ssbd.evaluation.random_models``), a real tokenizer (the
0.5B's, so prompts and sources have their real token counts), held-out talk sentences revealed
``--lag`` words at a time, each sentence a segment of one stream (its last update final). For
every architecture and method (RT, SSBD), the cache runs with checkpoints (what the engine does)
and, for the hybrids, without them (every divergence rebuilds the cache: the engine before
checkpoints). Per update: tokens fed, model calls, cache rebuilds, wall time. The weights are
random, so what the captions say means nothing here; what is measured is what the cache costs,
and each architecture's ratio to full attention (qwen2) under the same method.

    python -m benchmarks.engine.hybrid_reuse --out benchmarks/results/DATE-MACHINE/hybrid-reuse
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA, data_pairs, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd import StreamTranslator
from mlx_ssbd.evaluation.bench import items_from_pairs
from mlx_ssbd.evaluation.random_models import random_model
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.models.loading import load_model

SENTENCES = DATA / "talk-sentences" / "en-de.test.jsonl"


def one_stream(model, tokenizer, items, method: str, checkpoints: bool) -> list[dict]:
    """One stream through every item (a segment each); the stats of every update that ran a job."""
    tr = StreamTranslator(
        model,
        tokenizer,
        family="chatml",
        source_lang="en",
        target_lang="de",
        config=replace(method_config(method), cut_loops=False),
    )
    if not checkpoints:
        tr.cache.checkpoints = None
    records = []
    for item in items:
        for update in item.updates:
            stats = tr.update(update.text, final=update.final).stats
            if not stats.unchanged:
                records.append(
                    {
                        "fed": stats.tokens_fed,
                        "passes": stats.forward_passes,
                        "rebuilds": stats.cache_rebuilds,
                        "wall_s": stats.wall_s,
                    }
                )
    return records


def summary(records: list[dict]) -> dict:
    n = len(records)
    return {
        "updates": n,
        "fed_per_update": round(sum(r["fed"] for r in records) / n, 1),
        "passes_per_update": round(sum(r["passes"] for r in records) / n, 2),
        "rebuilds": sum(r["rebuilds"] for r in records),
        "wall_ms_median": round(1000 * statistics.median(r["wall_s"] for r in records), 1),
    }


def render(result: dict) -> list[str]:
    setup, rows = result["setup"], result["rows"]
    base = {r["method"]: r for r in rows if r["arch"] == "qwen2"}
    return [
        f"{machine_line(result['machine'])} Random-weight models of hidden size {setup['width']} and "
        f"{setup['layers'] or 'default'} layers (what they translate means nothing; what the cache costs is "
        f"measured), the {setup['tokenizer']} tokenizer, {setup['limit']} sentences of `{setup['sentences']}` "
        f"revealed {setup['lag']} words at a time, one stream. \"x full attention\": tokens fed per update "
        "against qwen2 (full attention) under the same method.",
        "",
        *markdown_table(
            ["model", "cache", "method", "updates", "fed/update", "x full attention", "passes/update", "rebuilds",
             "wall/update (median)"],
            [
                (r["arch"], r["cache"], r["method"], r["updates"], r["fed_per_update"],
                 f"{r['fed_per_update'] / base[r['method']]['fed_per_update']:.2f}x", r["passes_per_update"],
                 r["rebuilds"], f"{r['wall_ms_median']} ms")
                for r in rows
            ],
        ),
    ]  # fmt: skip


def measure(args) -> dict:
    pairs = data_pairs(args.sentences, args.limit)
    tokenizer = load_model(args.tokenizer).tokenizer
    vocab = len(tokenizer)
    items = items_from_pairs(pairs, args.lag)
    rows = []
    for arch in args.archs.split(","):
        model = random_model(arch, vocab_size=vocab, width=args.width, layers=args.layers, seed=1)
        modes = [True] if arch in ("llama", "qwen2") else [True, False]
        for method in args.methods.split(","):
            for checkpoints in modes:
                row = {
                    "arch": arch,
                    "method": method,
                    "cache": "checkpoints" if checkpoints else "rebuild",
                    **summary(one_stream(model, tokenizer, items, method, checkpoints)),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    setup = {
        "tokenizer": Path(args.tokenizer).name,
        "width": args.width,
        "layers": args.layers,
        "sentences": relative(args.sentences),
        "limit": args.limit,
        "lag": args.lag,
    }
    return {"setup": setup, "rows": rows}


BENCHMARK = Benchmark(
    "hybrid_reuse",
    "Updates on hybrid models: checkpoints against rebuilds",
    measure,
    render,
    options=(
        option("--tokenizer", default="qwen2.5-coder-0.5b", help="model whose tokenizer is used"),
        option("--archs", default="qwen2,qwen3_5,lfm2,mamba2,gemma3_text"),
        option("--methods", default="rt,ssbd"),
        option("--width", type=int, default=256, help="hidden size of every model"),
        option(
            "--layers",
            type=int,
            default=None,
            help="layers of every model (default: 2 full attention, 4 hybrid)",
        ),
        option("--sentences", type=Path, default=SENTENCES),
        option("--limit", type=int, default=12, help="sentences used"),
        option("--lag", type=int, default=3, help="words revealed per update"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
