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

import argparse
import json
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA as BENCH_DATA
from mlx_ssbd.evaluation.bench import machine_info
from mlx_ssbd.evaluation.streams import lag_updates
from mlx_ssbd.live.glossary import load_glossary, term_accuracy
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import CaptionCommit, LiveSession
from mlx_ssbd.models.loading import load_model

from sacrebleu.metrics import BLEU, CHRF

DATA = BENCH_DATA / "glossary"


def run(loaded, pairs: list[dict], glossary, method: str) -> dict:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b")
    parser.add_argument("--method", default="ssbd")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pairs = [json.loads(line) for line in (DATA / "talk.jsonl").read_text().splitlines() if line.strip()]
    glossary = load_glossary(DATA / "glossary.tsv")
    results = {"method": args.method, "sentences": len(pairs), "machine": machine_info(), "runs": {}}
    for model in args.models.split(","):
        loaded = load_model(model)
        results["runs"][model] = [
            run(loaded, pairs, None, args.method),
            run(loaded, pairs, glossary, args.method),
        ]
        del loaded
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "glossary_terms.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    lines = [
        "# A glossary's terms in live captions (en-de)",
        "",
        f"{len(pairs)} sentences of a talk written for the benchmark, revealed 3 words at a time, method "
        f"{args.method}; term accuracy over (caption, term) pairs; chrF++/BLEU against hand-written references. "
        "See the script's docstring.",
        "",
        "| model | glossary | term accuracy | chrF++ | BLEU | wall s | passes |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, runs in results["runs"].items():
        for r in runs:
            lines.append(
                f"| {model} | {'yes' if r['glossary'] else 'no'} | {r['term_accuracy']}% "
                f"({r['term_hits']}/{r['term_pairs']}) | {r['chrf']} | {r['bleu']} | {r['wall_s']} | "
                f"{r['passes']} |"
            )
    (args.out / "glossary_terms.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
