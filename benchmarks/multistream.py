"""Throughput and per-stream latency against the number of concurrent streams.

A captioning service translating N talks at once: the same paragraphs (lag-k word reveal) are
split round-robin over N streams, and ``MultiStreamTranslator`` runs one batched forward per step
for all streams with an update. Reports total output tokens per second, updates per second, and
the latency a viewer sees per update (the wall time of the batched step that produced it).

    python benchmarks/multistream.py --model qwen2.5-coder-0.5b --streams 1,2,4,8 --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)

from mlx_ssbd import StreamTranslator, TranslatorConfig
from mlx_ssbd.bench import items_from_pairs, machine_info
from mlx_ssbd.loading import load_model
from mlx_ssbd.report import pyplot
from mlx_ssbd.multistream import MultiStreamTranslator
from mlx_ssbd.streams import read_pairs


def run(loaded, items, n_streams: int, config: TranslatorConfig, target: str) -> dict:
    lanes = [[] for _ in range(n_streams)]
    for index, item in enumerate(items):
        lanes[index % n_streams].extend((u.text, u.final) for u in item.updates)
    multi = MultiStreamTranslator([
        StreamTranslator(loaded.model, loaded.tokenizer, family=loaded.family, source_lang="en",
                         target_lang=target, config=config)
        for _ in range(n_streams)
    ])
    multi.update([lane[0] if lane else None for lane in lanes])  # warm-up step (not timed)
    for tr in multi.translators:
        tr.reset()
    latencies, tokens, updates = [], 0, 0
    start = time.perf_counter()
    for step in range(max(len(lane) for lane in lanes)):
        sources = [lane[step] if step < len(lane) else None for lane in lanes]
        t0 = time.perf_counter()
        results = multi.update(sources)
        dt = time.perf_counter() - t0
        for r in results:
            if r is not None:
                latencies.append(dt)
                tokens += r.stats.output_tokens
                updates += 1
    wall = time.perf_counter() - start
    latencies.sort()
    return {"streams": n_streams, "updates": updates, "wall_s": round(wall, 2),
            "output_tok_per_s": round(tokens / wall, 2), "updates_per_s": round(updates / wall, 3),
            "median_update_latency_s": round(statistics.median(latencies), 3),
            "p90_update_latency_s": round(latencies[int(0.9 * (len(latencies) - 1))], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--data", default=str(Path(__file__).parent / "data/udhr/en-de.jsonl"))
    parser.add_argument("--target", default="de")
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--beta", type=float, default=0.2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    loaded = load_model(args.model)
    items = items_from_pairs([p for _, p in read_pairs(args.data)][: args.items], lag=3)
    config = TranslatorConfig(policy="ssbd", beta=args.beta)
    rows = []
    for n in [int(s) for s in args.streams.split(",")]:
        rows.append(run(loaded, items, n, config, args.target))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    for row in rows:
        row["throughput_vs_first"] = round(row["output_tok_per_s"] / base["output_tok_per_s"], 2)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"model": loaded.name, "policy": f"ssbd beta={args.beta}", "items": args.items, "rows": rows,
              "machine": machine_info()}
    (args.out / "multistream.json").write_text(json.dumps(result, indent=2))
    lines = [f"# Concurrent streams, one batched forward per step ({loaded.name}, SSBD β={args.beta}, "
             f"{args.items} UDHR paragraphs, lag 3)", "",
             "| streams | output tok/s | x 1 stream | updates/s | median update latency s | p90 s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['streams']} | {r['output_tok_per_s']} | {r['throughput_vs_first']} | {r['updates_per_s']} | "
              f"{r['median_update_latency_s']} | {r['p90_update_latency_s']} |" for r in rows]
    (args.out / "multistream.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    _plot(rows, args.out / "multistream.png")


def _plot(rows, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    n = [r["streams"] for r in rows]
    fig, ax1 = plt.subplots(figsize=(6, 3.5))
    ax1.plot(n, [r["output_tok_per_s"] for r in rows], "o-", color="tab:blue")
    ax1.set_xlabel("concurrent streams")
    ax1.set_ylabel("total output tokens/s", color="tab:blue")
    ax1.set_xscale("log", base=2)
    ax2 = ax1.twinx()
    ax2.plot(n, [r["median_update_latency_s"] for r in rows], "s--", color="tab:red")
    ax2.set_ylabel("median update latency (s)", color="tab:red")
    ax1.set_title("Batched streams: throughput and latency", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
