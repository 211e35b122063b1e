"""Quality effect of tokenizing the prompt the way the model saw it in training.

Before: the prompt prefix ended in a lone space token and the source was tokenized on its own
(``[..., ":", " "] + ["so", " today"]``). After (``mlx_ssbd.live.prompt`` now): the prompt ids are the
tokenizer's own tokenization of the rendered text (``[..., ":"] + [" so", " today"]``). Both are
run here in one process on the same model: each source translated once, whole (greedy, as a final
update of prefix-cached RT), scored with BLEU and chrF++ against the reference.

    python -m benchmarks.quality.prompt_boundary --model qwen2.5-coder-0.5b --items 50 --out DIR
    python -m benchmarks.quality.prompt_boundary --speed --model qwen2.5-coder-0.5b --items 8 --rounds 2 --out DIR

``--speed``: the cost side instead. Each variant runs SSBD (beta 0.2) over lag-3 streams of the
first items, alternating variants for ``--rounds`` rounds; reports wall time, output tokens,
forward passes and tokens per second, so a change of speed can be told apart from the engine. A
third variant keeps the new prompt but the old stop rule (a ``".\n"`` token leaves nothing).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA as BENCH_DATA
from mlx_ssbd import TranslatorConfig
from mlx_ssbd.evaluation.bench import machine_info
from mlx_ssbd.evaluation.metrics import quality
from mlx_ssbd.evaluation.streams import read_pairs
from mlx_ssbd.live.prompt import Prompt, PromptBuilder
from mlx_ssbd.models.loading import load_model

DATA = BENCH_DATA / "udhr"
VARIANTS = ("split", "canonical")


class SplitBoundary(PromptBuilder):
    """The old prompt: prefix ending in the separate space token, source tokenized alone."""

    def build(self, text, context_ids=()):
        prefix = self.prefix + tuple(self._encode(self._boundary))
        return Prompt(prefix + tuple(context_ids), tuple(self._encode(text)), self.suffix)


def run_pair(loaded, pair: str, items: int) -> dict:
    source_lang, target_lang = pair.split("-")
    pairs = [p for _, p in read_pairs(str(DATA / f"{pair}.jsonl"))][:items]
    result = {"pair": pair, "items": len(pairs)}
    outputs = {}
    for variant in VARIANTS:
        translator = loaded.translator(
            target_lang, source_lang=source_lang, config=TranslatorConfig(policy="rt")
        )
        if variant == "split":
            translator.prompts = SplitBoundary(loaded.tokenizer, loaded.family, source_lang, target_lang)
        start = time.perf_counter()
        outputs[variant] = [translator.update(p.src, final=True).output for p in pairs]
        scores = quality(outputs[variant], [p.ref for p in pairs], target_lang)
        result[variant] = {**scores, "wall_s": round(time.perf_counter() - start, 1)}
        print(f"{loaded.name} {pair} {variant}: BLEU {scores['bleu']} chrF++ {scores['chrf']}", flush=True)
    result["changed_outputs"] = sum(a != b for a, b in zip(outputs["split"], outputs["canonical"]))
    result["outputs"] = outputs
    return result


def run_speed(loaded, items: int, rounds: int) -> dict:
    from mlx_ssbd.evaluation.bench import items_from_pairs

    pairs = [p for _, p in read_pairs(str(DATA / "en-de.jsonl"))][:items]
    streams = items_from_pairs(pairs, lag=3)
    variants = (*VARIANTS, "canonical, stop drops the full stop")
    totals = {v: {"wall_s": 0.0, "output_tokens": 0, "forward_passes": 0, "updates": 0} for v in variants}
    for _ in range(rounds):
        for variant in variants:
            translator = loaded.translator("de", config=TranslatorConfig(policy="ssbd", beta=0.2))
            if variant == "split":
                translator.prompts = SplitBoundary(loaded.tokenizer, loaded.family, "en", "de")
            if variant.endswith("drops the full stop"):  # the old rule: a ".\n" token leaves nothing
                rule = translator.stops
                translator.stops = lambda token, rule=rule: None if rule(token) is None else ()
            translator.update("warm up", final=True)
            for item in streams:
                for u in item.updates:
                    stats = translator.update(u.text, final=u.final).stats
                    t = totals[variant]
                    t["wall_s"] += stats.wall_s
                    t["output_tokens"] += stats.output_tokens
                    t["forward_passes"] += stats.forward_passes
                    t["updates"] += 1
    for t in totals.values():
        t["tok_per_s"] = round(t["output_tokens"] / t["wall_s"], 2)
        t["s_per_pass"] = round(t["wall_s"] / t["forward_passes"], 4)
        t["wall_s"] = round(t["wall_s"], 1)
    print(json.dumps(totals), flush=True)
    return totals


def write_speed_report(out: Path, data: dict) -> None:
    lines = [
        f"# Prompt boundary, the cost side: {data['model']}",
        "",
        f"SSBD β=0.2 over lag-3 streams of the first {data['items']} UDHR en-de paragraphs, the variants "
        f"alternating, {data['rounds']} rounds, one run (`prompt_boundary.py --speed`). `split`: the old prompt; "
        "`canonical`: the tokenizer's own tokenization (now the default); the third keeps the new prompt with "
        "the old stop rule (a `.\\n` token leaves nothing).",
        "",
        "| variant | updates | output tokens | forward passes | wall s | tok/s | s/pass |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {k} | {v['updates']} | {v['output_tokens']} | {v['forward_passes']} | {v['wall_s']} | "
        f"{v['tok_per_s']} | {v['s_per_pass']} |"
        for k, v in data["totals"].items()
    ]
    (out / "prompt_speed.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--pairs", default="en-de,en-zh,en-ja")
    parser.add_argument("--items", type=int, default=50, help="first N pairs of each UDHR file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--speed", action="store_true", help="measure cost instead of quality (see above)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--speed-report", action="store_true", help="only rewrite prompt_speed.md from the JSON in --out"
    )
    args = parser.parse_args()
    if args.speed_report:
        write_speed_report(args.out, json.loads((args.out / "prompt_speed.json").read_text()))
        return
    loaded = load_model(args.model)
    if args.speed:
        totals = run_speed(loaded, args.items, args.rounds)
        args.out.mkdir(parents=True, exist_ok=True)
        data = {
            "model": loaded.name,
            "machine": machine_info(),
            "items": args.items,
            "rounds": args.rounds,
            "totals": totals,
        }
        (args.out / "prompt_speed.json").write_text(json.dumps(data, indent=2))
        write_speed_report(args.out, data)
        return
    rows = [run_pair(loaded, pair, args.items) for pair in args.pairs.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_boundary.json").write_text(
        json.dumps(
            {"model": loaded.name, "machine": machine_info(), "data": "benchmarks/data/udhr", "rows": rows},
            indent=2,
            ensure_ascii=False,
        )
    )
    lines = [
        f"# Prompt boundary: {loaded.name}",
        "",
        "Each UDHR source translated once, whole (greedy RT), with the old prompt split "
        "(`split`: prefix ends in a lone space token, source tokenized alone) and the tokenizer's "
        "own tokenization of the rendered prompt (`canonical`, now the default), in one run.",
        "",
        "| pair | items | BLEU split | BLEU canonical | chrF++ split | chrF++ canonical | outputs changed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s, c = r["split"], r["canonical"]
        lines.append(
            f"| {r['pair']} | {r['items']} | {s['bleu']} | {c['bleu']} | {s['chrf']} | {c['chrf']} "
            f"| {r['changed_outputs']} |"
        )
    lines += [
        "",
        f"BLEU signature (de): `{rows[0]['split']['bleu_signature']}`; "
        f"chrF++: `{rows[0]['split']['chrf_signature']}`.",
        "",
    ]
    (args.out / "prompt_boundary.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
