"""Does a glossary make the captions use the speaker's terms, and at what cost to the rest?

A talk written for this benchmark (``benchmarks/data/glossary``: 16 sentences at an energy
cooperative's meeting, German references written by hand, 10 terms in ``glossary.tsv``) is
streamed as live captions (each sentence revealed 3 words at a time, every partial translated,
each sentence committed as one caption), with and without the glossary, in one process per model.
Reported per run: **term accuracy** (``live.glossary.term_accuracy``: the share of (caption, term)
pairs whose source holds the term and whose committed caption holds the required rendering),
document chrF++ and BLEU of the captions against the references, wall time and forward passes.

    python -m benchmarks.live.glossary_terms --models qwen2.5-coder-1.5b,qwen2.5-coder-0.5b --out DIR
"""

from __future__ import annotations

import json
import time

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA as BENCH_DATA
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.streams import lag_updates
from mlx_ssbd.live.glossary import load_glossary, term_accuracy
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import CaptionCommit, LiveSession
from mlx_ssbd.models.loading import load_model

from sacrebleu.metrics import BLEU, CHRF

DATA = BENCH_DATA / "glossary"


def captions_run(loaded, pairs: list[dict], glossary, method: str) -> dict:
    translator = loaded.translator("de", config=method_config(method), glossary=glossary)
    session = LiveSession(
        translator,
        segmenter=SegmenterConfig(sentence_end=False, max_words=0, pause_s=None),
        latest_wins=False,
    )
    for pair in pairs:
        for update in lag_updates(pair["src"], 3, pair["id"]):
            session.push(update)
    session.close()
    started, commits, passes = time.perf_counter(), [], 0
    for event in session.run():
        passes += event.update.stats.forward_passes if hasattr(event, "update") else 0
        if isinstance(event, CaptionCommit):
            commits.append((event.source, event.text))
    wall = time.perf_counter() - started
    terms = load_glossary(DATA / "glossary.tsv")
    hits, total = term_accuracy(terms, "de", commits)
    hyps, refs = [text for _, text in commits], [[pair["ref"] for pair in pairs]]
    return {
        "glossary": glossary is not None,
        "captions": len(commits),
        "term_hits": hits,
        "term_pairs": total,
        "term_accuracy": round(100 * hits / total, 1),
        "chrf": round(CHRF(word_order=2).corpus_score(hyps, refs).score, 1),
        "bleu": round(BLEU().corpus_score(hyps, refs).score, 1),
        "wall_s": round(wall, 1),
        "passes": passes,
        "captions_text": hyps,
    }


def measure(args) -> dict:
    pairs = [json.loads(line) for line in (DATA / "talk.jsonl").read_text().splitlines() if line.strip()]
    glossary = load_glossary(DATA / "glossary.tsv")
    results = {"method": args.method, "sentences": len(pairs), "runs": {}}
    for model in args.models.split(","):
        loaded = load_model(model)
        results["runs"][model] = [
            captions_run(loaded, pairs, None, args.method),
            captions_run(loaded, pairs, glossary, args.method),
        ]
        del loaded
    return results


def render(result: dict) -> list[str]:
    return [
        f"{machine_line(result['machine'])} {result['sentences']} sentences of a talk written for the benchmark, "
        f"revealed 3 words at a time, method {result['method']}; term accuracy over (caption, term) pairs; "
        "chrF++/BLEU against hand-written references. See the script's docstring.",
        "",
        *markdown_table(
            ["model", "glossary", "term accuracy", "chrF++", "BLEU", "wall s", "passes"],
            [
                (model, "yes" if r["glossary"] else "no", f"{r['term_accuracy']}% ({r['term_hits']}/{r['term_pairs']})",
                 r["chrf"], r["bleu"], r["wall_s"], r["passes"])
                for model, runs in result["runs"].items()
                for r in runs
            ],
        ),
    ]  # fmt: skip


BENCHMARK = Benchmark(
    "glossary_terms",
    "A glossary's terms in live captions (en-de)",
    measure,
    render,
    options=(
        option("--models", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b"),
        option("--method", default="ssbd"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
