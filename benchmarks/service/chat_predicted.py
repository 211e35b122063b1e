"""Re-translation through the OpenAI endpoint of ``mlx-ssbd serve``, with and without Predicted Outputs.

What a tool that already calls an OpenAI chat endpoint for live translation gets: it re-sends the
growing source (every ``--every`` words, then the whole sentence) and passes its previous answer
as ``prediction``. Three modes, each through every prefix of a sentence in turn (the order rotates
from sentence to sentence): ``none`` (plain re-translation; the server's prompt cache still
reuses the shared prefix), ``exact`` (prediction verified at beta = 0: lossless, so its answers
must equal ``none``'s, checked), ``biased`` (``prediction_beta`` = ``--beta``: SSBD). Every request
streams (``stream: true``, the official ``openai`` client); per request: time to the first content
chunk, time to the last, tokens, accepted and rejected prediction tokens. Reports medians, the
wall time of each mode, its speedup over ``none``, chrF++ of the final answers against the
references, and a plot.

    python -m benchmarks.service.chat_predicted --model qwen2.5-coder-0.5b --limit 8 --out DIR
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA as BENCH_DATA
from benchmarks.common import machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.service.server import start_server
from mlx_ssbd.evaluation.report import pyplot, save_figure

DATA = BENCH_DATA / "udhr-sentences" / "en-de.jsonl"
SYSTEM = "Translate the English source text to German. Answer with the translation only."
MODES = ("none", "exact", "biased")


def prefixes(text: str, every: int) -> list[str]:
    words = text.split()
    return [" ".join(words[:n]) for n in range(every, len(words), every)] + [text]


def request(client, model: str, source: str, prediction: str | None, beta: float | None) -> dict:
    """One streamed chat completion; its answer, timings and usage."""
    extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    if prediction and beta:
        extra["extra_body"] = {"prediction_beta": beta}
    start, first, pieces, usage = time.perf_counter(), None, [], None
    for chunk in client.chat.completions.create(
        model=model,
        max_tokens=96,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"English: {source}"}],
        **extra,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    end = time.perf_counter()
    details = usage.completion_tokens_details
    return {
        "answer": "".join(pieces),
        "first_s": (first or end) - start,
        "total_s": end - start,
        "tokens": usage.completion_tokens,
        "accepted": details.accepted_prediction_tokens,
        "rejected": details.rejected_prediction_tokens,
        "chunks": len(pieces),
    }


def measure(args) -> dict:
    import openai
    import sacrebleu

    low, high = (int(n) for n in args.words.split("-"))
    pairs = [
        p for p in map(json.loads, DATA.read_text().splitlines()) if low <= len(p["src"].split()) <= high
    ]
    pairs = pairs[: args.limit]
    records = {mode: [] for mode in MODES}
    finals = {mode: [] for mode in MODES}
    walls = dict.fromkeys(MODES, 0.0)
    with tempfile.TemporaryDirectory() as scratch:
        proc, url = start_server(args.model, Path(scratch) / "t.sqlite3", 1)
        try:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
            model = client.models.list().data[0].id
            request(client, model, "Hello.", None, None)  # warm-up: the prompt cache and first-call costs
            for n, pair in enumerate(pairs):
                for mode in MODES[n % 3 :] + MODES[: n % 3]:
                    previous, start = None, time.perf_counter()
                    for source in prefixes(pair["src"], args.every):
                        record = request(
                            client,
                            model,
                            source,
                            previous if mode != "none" else None,
                            args.beta if mode == "biased" else None,
                        )
                        records[mode].append(
                            {"item": pair["id"], "source_words": len(source.split()), **record}
                        )
                        previous = record["answer"]
                    walls[mode] += time.perf_counter() - start
                    finals[mode].append(previous)
                print(f"{n + 1}/{len(pairs)} {pair['id']}", file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    refs = [p["ref"] for p in pairs]
    summary = {}
    for mode in MODES:
        rs = records[mode]
        predicted = sum(r["accepted"] + r["rejected"] for r in rs)
        summary[mode] = {
            "requests": len(rs),
            "wall_s": round(walls[mode], 2),
            "speedup": round(walls["none"] / walls[mode], 2),
            "first_chunk_p50_s": round(statistics.median(r["first_s"] for r in rs), 3),
            "request_p50_s": round(statistics.median(r["total_s"] for r in rs), 3),
            "tokens": sum(r["tokens"] for r in rs),
            "chunks_per_answer": round(statistics.mean(r["chunks"] for r in rs), 1),
            "accepted_share": round(sum(r["accepted"] for r in rs) / predicted, 3) if predicted else None,
            "chrf": round(sacrebleu.corpus_chrf(finals[mode], [refs], word_order=2).score, 1),
        }
    same = [
        a == b
        for a, b in zip((r["answer"] for r in records["none"]), (r["answer"] for r in records["exact"]))
    ]
    return {
        "model": args.model,
        "beta": args.beta,
        "words": args.words,
        "every_words": args.every,
        "sentences": len(pairs),
        "exact_equals_none": all(same),
        "exact_equal_answers": f"{sum(same)}/{len(same)}",
        "summary": summary,
        "records": records,
    }


def render(result: dict) -> list[str]:
    m = result["machine"]
    share = lambda s: "-" if s["accepted_share"] is None else f"{100 * s['accepted_share']:.1f}%"
    return [
        f"{machine_line(m)} {m['device']}, {m['compute_dtype']}; one `mlx-ssbd serve`, the official `openai` "
        f"client, streamed requests. {result['sentences']} UDHR sentences of {result['words']} words "
        f"(`{relative(DATA)}`), the source re-sent every {result['every_words']} words and whole, each mode through "
        "all prefixes of a sentence in turn (order rotating). `none`: no prediction; `exact`: the previous answer "
        f"as prediction, beta = 0; `biased`: prediction_beta = {result['beta']:g}.",
        "",
        *markdown_table(
            ["mode", "requests", "wall s", "speedup", "first chunk p50 s", "request p50 s", "tokens", "chunks/answer",
             "prediction accepted", "chrF++"],
            [
                (mode, s["requests"], s["wall_s"], f"{s['speedup']:.2f}x", s["first_chunk_p50_s"], s["request_p50_s"],
                 s["tokens"], s["chunks_per_answer"], share(s), s["chrf"])
                for mode, s in result["summary"].items()
            ],
        ),
        "",
        f"`exact` answers equal to `none`'s (beta = 0 is lossless): {result['exact_equal_answers']}.",
        "chrF++ (sacrebleu) of each mode's answers to the whole sentences against the UDHR German text.",
        "",
        "![latency](chat_predicted.png)",
    ]  # fmt: skip


def plot(result: dict, out: Path) -> None:
    records = result["records"]
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for mode, rs in records.items():
        by_words: dict[int, list[float]] = {}
        for r in rs:
            by_words.setdefault(r["source_words"], []).append(r["total_s"])
        xs = sorted(by_words)
        ax.plot(xs, [statistics.median(by_words[x]) for x in xs], "o-", label=mode)
    ax.set_xlabel("source words in the request")
    ax.set_ylabel("request time, median (s)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(plt, fig, out / "chat_predicted.png")


BENCHMARK = Benchmark(
    "chat_predicted",
    lambda r: f"Re-translation through the OpenAI endpoint: {r['model']}, Predicted Outputs",
    measure,
    render,
    plot=plot,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--limit", type=int, default=8, help="sentences"),
        option("--words", default="10-25", help="sentence length range in words"),
        option("--every", type=int, default=3, help="words added per request"),
        option("--beta", type=float, default=0.2),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
