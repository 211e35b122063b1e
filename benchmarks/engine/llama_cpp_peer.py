"""llama.cpp against mlx-ssbd on the same GGUF files: a decode step and a 16-token pass of each, from
the same cached prompt with the same tokens, and the pass in decode steps.

The GGUF is assembled from the model's PyPI parts (sha256-checked, as ``mlx-ssbd models prepare``
does). llama.cpp runs through llama-cpp-python (its own environment is fine: ``pip install
llama-cpp-python`` builds llama.cpp from the sdist) on 2 threads, in a process of its own; ours in
this process (``mlx_ssbd.evaluation.passes``). Each takes the median time of evaluating 1 and 16 new
tokens after the cached prompt, the cache rewound after each. The two alternate, ``--rounds`` times,
so that both meet the machine as it is in the same minutes; a figure is the median over rounds.

    python -m benchmarks.engine.llama_cpp_peer --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, machine_line
from benchmarks.harness import Benchmark, markdown_table, option


def gguf_for(model: str, work: Path) -> Path:
    import mlx_ssbd  # noqa: F401
    from mlx_ssbd.models.registry import assemble_gguf, get_card

    return assemble_gguf(get_card(model), work / f"{model}.gguf")


def gguf_step_bytes(path: Path) -> int:
    """The bytes of the GGUF's tensors a decode step reads: all but the token embedding's (each token
    reads one of its rows), unless it is also the output layer (no ``output.weight``)."""
    from gguf import GGUFReader

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    skip = "token_embd.weight" if "output.weight" in tensors else None
    return sum(n for name, n in tensors.items() if name != skip)


def time_llama(path: Path, ids: list[int], filler: list[int], repeats: int, threads: int) -> dict:
    """In a process of its own: llama.cpp and MLX's BLAS and OpenMP do not share one process well."""
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(path),
        n_ctx=1024,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        verbose=False,
    )
    llm.eval(ids)
    base = llm.n_tokens

    def median_s(n: int) -> float:
        times = []
        for _ in range(repeats):
            llm.n_tokens = base  # eval() drops the cache past n_tokens
            start = time.perf_counter()
            llm.eval(filler[:n])
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    median_s(16)  # warm up
    import llama_cpp

    return {
        "decode_step_s": round(median_s(1), 5),
        "pass16_s": round(median_s(16), 5),
        "llama_cpp_python": llama_cpp.__version__,
        "threads": threads,
    }


def child(args) -> dict:
    """In the child process: the timings of the job file ``--child`` names."""
    job = json.loads(Path(args.child).read_text())
    return time_llama(Path(job["gguf"]), job["ids"], job["filler"], job["repeats"], job["threads"])


def run_llama(job: Path, model: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", __spec__.name, "--child", str(job)], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"llama.cpp on {model} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_ours(loaded, repeats: int) -> dict:
    from mlx_ssbd.evaluation.passes import pass_timings

    _, medians = pass_timings(loaded, (1, 16), repeats)
    return {"decode_step_s": round(medians[1], 5), "pass16_s": round(medians[16], 5)}


def measure(args) -> dict:
    import mlx_ssbd  # noqa: F401
    from mlx_ssbd.evaluation.passes import product_bytes, prompt_and_filler
    from mlx_ssbd.models.loading import load_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            loaded = load_model(model)
            ids, filler = prompt_and_filler(loaded.tokenizer, loaded.family)
            path = gguf_for(model, Path(tmp))
            job = Path(tmp) / "job.json"
            job.write_text(
                json.dumps(
                    {
                        "gguf": str(path),
                        "ids": ids,
                        "filler": filler,
                        "repeats": args.repeats,
                        "threads": args.threads,
                    }
                )
            )
            rounds = [(run_llama(job, model), time_ours(loaded, args.repeats)) for _ in range(args.rounds)]
            read = {"llama_cpp": gguf_step_bytes(path), "ours": product_bytes(loaded.model)}
            path.unlink()
            llama = rounds[0][0]
            row = {
                "model": model,
                "prompt_tokens": len(ids),
                "llama_cpp_python": llama["llama_cpp_python"],
                "threads": llama["threads"],
                "step_bytes": read,
                "rounds": [{"llama_cpp": a, "ours": b} for a, b in rounds],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"rows": rows, "repeats": args.repeats}


def engine_rows(row: dict) -> list[tuple[str, float, float, int | None]]:
    """(engine, decode step s, 16-token pass s, weight bytes a decode step reads) of one model's row,
    medians over its rounds (a report of one llama.cpp run a round, before ours ran beside it, has
    llama.cpp alone and no bytes)."""
    rounds = row.get("rounds") or [{"llama_cpp": row}]
    out = []
    for key, name in (("llama_cpp", "llama.cpp"), ("ours", "mlx-ssbd")):
        timed = [r[key] for r in rounds if key in r]
        if timed:
            medians = (statistics.median(t[f] for t in timed) for f in ("decode_step_s", "pass16_s"))
            out.append((name, *medians, row.get("step_bytes", {}).get(key)))
    return out


def render(result: dict) -> list[str]:
    rows = result["rows"]
    threads = ", ".join(sorted({str(r["threads"]) for r in rows}))
    versions = ", ".join(sorted({r["llama_cpp_python"] for r in rows}))
    medians = f"medians of {result['repeats']} passes" if "repeats" in result else "medians"
    rounds = max(len(r.get("rounds", [])) for r in rows)
    alternating = f", {rounds} alternating rounds (median over rounds)" if rounds else ""
    return [
        f"{machine_line(result['machine'])} llama.cpp (llama-cpp-python {versions}), {threads} threads, "
        f"{medians}{alternating}.",
        "",
        *markdown_table(
            [
                "model",
                "engine",
                "decode step ms",
                "16-token pass ms",
                "x decode step",
                "weights a step reads MB",
                "weights / step GB/s",
            ],
            [
                (
                    r["model"],
                    name,
                    f"{1000 * step:.1f}",
                    f"{1000 * pass16:.1f}",
                    f"{pass16 / step:.2f}",
                    "-" if read is None else f"{read / 1e6:.0f}",
                    "-" if read is None else f"{read / step / 1e9:.1f}",
                )
                for r in rows
                for name, step, pass16, read in engine_rows(r)
            ],
        ),
        "",
        "Weights a step reads: llama.cpp, the GGUF's tensors but the token embedding (one row a token); "
        "mlx-ssbd, its quantized products' codes, scales and biases as held in memory (Q6_K layers "
        "requantized to 8 bits: docs/models.md). GB/s: those bytes over the decode step's time, the "
        "rate the step streams its weights at, all else in the step included.",
    ]


BENCHMARK = Benchmark(
    "llama_cpp",
    lambda result: (
        "llama.cpp and mlx-ssbd on the same GGUF files"
        if any("rounds" in row for row in result["rows"])
        else "llama.cpp on the same GGUF files"
    ),
    measure,
    render,
    options=(
        option("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"),
        option("--repeats", type=int, default=7),
        option("--threads", type=int, default=2),
        option("--rounds", type=int, default=3),
    ),
    about=__doc__,
    child=child,
)

if __name__ == "__main__":
    BENCHMARK.main()
