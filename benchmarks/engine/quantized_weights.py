"""Quantized weights as they ship against the dense fp32 path, on real models, in one run.

For each model and each weights path (``quantized``: the GGUF's own 4/5/8-bit layers through
mlx-ssbd's CPU kernel; ``dense``: the same layers dequantized to fp32, the path before the
kernel, ``MLX_SSBD_WEIGHTS=dense``), each in its own process so peak memory is its own:

* the load time and the process's peak RSS after loading;
* a decode step and passes of 16 and 64 tokens from the same cached prompt (medians);
* chrF++ and wall time of RT and SSBD (beta 0.2) on held-out talk sentences
  (``benchmarks/data/talk-sentences/en-de.test.jsonl``, all 24 by default, revealed 3 words at a
  time);
* the peak RSS of the whole ``mlx-ssbd translate --stream`` command on a short text.

    python -m benchmarks.engine.quantized_weights --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \\
        --out benchmarks/results/DIR/quantized-weights
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    DATA,
    REPO,
    child_json,
    machine_line,
    pass_ratios,
    pass_times,
    relative,
)
from benchmarks.harness import Benchmark, markdown_table, option

SENTENCES = DATA / "talk-sentences" / "en-de.test.jsonl"
PATHS = ("quantized", "dense")


def measure(model: str, sentences: int, repeats: int) -> dict:
    """In this process: load, time forward passes, translate sentences (run with the env set)."""
    import mlx_ssbd  # noqa: F401  (backend policy first)
    from mlx_ssbd import method_config
    from mlx_ssbd.evaluation.passes import pass_timings
    from mlx_ssbd.models.loading import load_model

    from sacrebleu.metrics import CHRF

    start = time.perf_counter()
    loaded = load_model(model)
    load_s = time.perf_counter() - start
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    _, timings = pass_timings(loaded, (1, 16, 64), repeats)
    passes = {str(n): round(t, 5) for n, t in timings.items()}

    items = [json.loads(line) for line in SENTENCES.read_text().splitlines()[:sentences]]
    chrf = CHRF(word_order=2)
    methods = {}
    for method in ("rt", "ssbd"):
        outputs, wall = [], 0.0
        for item in items:
            words = item["src"].split()
            tr = loaded.translator("de", config=method_config(method))
            t = time.perf_counter()
            for shown in range(3, len(words) + 3, 3):
                update = tr.update(" ".join(words[:shown]), final=shown >= len(words))
            wall += time.perf_counter() - t
            outputs.append(update.output)
        score = chrf.corpus_score(outputs, [[item["ref"] for item in items]]).score
        methods[method] = {"chrf": round(score, 2), "wall_s": round(wall, 2), "outputs": outputs}
    return {
        "model": loaded.name,
        "weights": loaded.weights,
        "load_s": round(load_s, 2),
        "rss_after_load_bytes": rss_loaded,
        "passes_s": passes,
        "methods": methods,
    }


def translate_rss(model: str, weights: str, text: Path) -> dict:
    """Peak RSS and wall time of the whole ``translate --stream`` command (its own rusage)."""
    env = dict(os.environ, MLX_SSBD_WEIGHTS=weights)
    cmd = [
        sys.executable,
        "-m",
        "mlx_ssbd_cli",
        "translate",
        "--stream",
        str(text),
        "-t",
        "de",
        "-m",
        model,
        "--format",
        "text",
    ]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            return {"error": err.read().decode(errors="replace")[-400:]}
        captions = out.read().decode().strip().splitlines()
    return {"peak_rss_bytes": usage.ru_maxrss * 1024, "wall_s": round(wall, 1), "captions": captions}


def run(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    text = args.out / "short-talk.txt"
    text.write_text(
        "Good afternoon, my name is Anna and I work as a nurse.\n"
        "Today I will explain how we plan our night shifts.\n"
    )
    rows = []
    for model in args.models.split(","):
        for weights in PATHS:
            row = child_json(
                __spec__.name,
                ["--child", model, "--sentences", str(args.sentences), "--repeats", str(args.repeats)],
                {"MLX_SSBD_WEIGHTS": weights},
                f"{model} {weights}",
            )
            row["path"] = weights
            row["translate_stream"] = translate_rss(model, weights, text)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "methods"}), flush=True)
    return {"rows": rows, "sentences": args.sentences, "data": relative(SENTENCES)}


def render(result: dict) -> list[str]:
    gb = lambda n: f"{n / 1e9:.2f}"
    lines = [
        f"{machine_line(result['machine'])} One run; medians of each path's forward passes. chrF++ on the "
        f"first {result['sentences']} sentences of `{result['data']}` (3 words at a time).",
        "",
    ]
    cells = []
    for r in result["rows"]:
        m, t = r["methods"], r["translate_stream"]
        rss = gb(t["peak_rss_bytes"]) if "peak_rss_bytes" in t else "failed"
        cells.append(
            (r["model"], r["path"], r["load_s"], gb(r["rss_after_load_bytes"]), pass_times(r["passes_s"]),
             f"{m['rt']['chrf']} / {m['rt']['wall_s']}", f"{m['ssbd']['chrf']} / {m['ssbd']['wall_s']}", rss)
        )  # fmt: skip
    lines += markdown_table(
        ["model", "weights", "load s", "RSS after load GB", "decode step ms", "16-token pass ms", "64-token pass ms",
         "RT chrF++ / s", "SSBD chrF++ / s", "translate --stream peak RSS GB"],
        cells,
    )  # fmt: skip
    by = {(r["model"], r["path"]): r for r in result["rows"]}
    pairs = [
        (model, by[model, "quantized"], by[model, "dense"])
        for model in dict.fromkeys(r["model"] for r in result["rows"])
        if (model, "quantized") in by and (model, "dense") in by
    ]
    lines += ["", *markdown_table(
        ["model", "decode step: dense / quantized", "16-token pass", "64-token pass"],
        [(model, pass_ratios(d["passes_s"], q["passes_s"])) for model, q, d in pairs],
    )]  # fmt: skip
    refs = [json.loads(line)["ref"] for line in (REPO / result["data"]).read_text().splitlines()]
    refs = refs[: result["sentences"]]
    lines += [
        "",
        "chrF++ of the quantized path minus the dense path's on the same sentences, with the 2.5th-97.5th "
        "percentile of that difference over 1000 paired bootstrap resamples of the sentences:",
        "",
    ]

    from mlx_ssbd.evaluation.metrics import paired_chrf_delta

    def delta(q: dict, d: dict, method: str) -> str:
        change, low, high = paired_chrf_delta(
            q["methods"][method]["outputs"], d["methods"][method]["outputs"], refs
        )
        return f"{change:+.2f} [{low:+.2f}, {high:+.2f}]"

    return lines + markdown_table(
        ["model", "RT: quantized - dense [95% interval]", "SSBD: quantized - dense [95% interval]"],
        [(model, delta(q, d, "rt"), delta(q, d, "ssbd")) for model, q, d in pairs],
    )


BENCHMARK = Benchmark(
    "quantized_weights",
    "Quantized weights vs the dense fp32 path",
    run,
    render,
    options=(
        option("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"),
        option("--sentences", type=int, default=24),
        option("--repeats", type=int, default=5),
    ),
    about=__doc__,
    child=lambda args: measure(args.child, args.sentences, args.repeats),
)

if __name__ == "__main__":
    BENCHMARK.main()
