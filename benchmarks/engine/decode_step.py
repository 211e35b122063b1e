"""A decode step and a verify pass on the backend MLX runs here (CPU, Metal or CUDA), dense against
quantized, for random-weight models of a real model's shape: no weights to fetch.

The default shape is Qwen2.5-1.5B's (the default model): hidden 1536, 28 layers, MLP 8960, 12
heads (2 KV), vocabulary 151,936. Timings do not depend on what the weights say, so a random
model of the same shape and dtype costs what the real one costs. For each weight format
(``--formats``: the compute dtype, and MLX's affine 4-bit and 8-bit at group size 32, as the GGUF
import writes them), after a 200-token prompt: the median of ``--repeats`` decode steps (one
token) and of verify passes of 16 tokens (each trimmed back off the cache).

    python -m benchmarks.engine.decode_step --out DIR
"""

from __future__ import annotations

import json
import statistics
import time

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.platform.backend import is_gpu
from mlx_ssbd.platform.quantized import route_quantized_layers

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

SHAPE = dict(
    hidden_size=1536,
    num_hidden_layers=28,
    intermediate_size=8960,
    num_attention_heads=12,
    num_key_value_heads=2,
    vocab_size=151936,
)


def build(fmt: str, dtype, layers: int):
    from mlx_lm.models import qwen2

    mx.random.seed(0)
    args = qwen2.ModelArgs(
        model_type="qwen2",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        **{**SHAPE, "num_hidden_layers": layers},
    )
    model = qwen2.Model(args)
    model.set_dtype(dtype)
    if fmt != "dense":
        nn.quantize(model, group_size=32, bits=int(fmt.removesuffix("bit")))
        route_quantized_layers(model)  # the CPU kernel where it is the backend's path
    mx.eval(model.parameters())
    return model


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_and_pass(model, repeats: int) -> dict:
    cache = make_prompt_cache(model)
    mx.eval(model(mx.arange(200)[None] % 1000, cache=cache))

    def step():
        mx.eval(model(mx.array([[7]]), cache=cache))
        for layer in cache:
            layer.trim(1)

    def verify():
        mx.eval(model(mx.arange(16)[None] + 100, cache=cache))
        for layer in cache:
            layer.trim(16)

    decode, verify16 = timed(step, repeats), timed(verify, repeats)
    return {
        "decode_ms": round(1000 * decode, 2),
        "verify16_ms": round(1000 * verify16, 2),
        "verify16_in_decode_steps": round(verify16 / decode, 2),
    }


def measure(args) -> dict:
    dtype = mx.float16 if is_gpu() else mx.float32
    rows = []
    for fmt in args.formats.split(","):
        row = {
            "format": fmt if fmt != "dense" else f"dense {dtype}".replace("mlx.core.", ""),
            **step_and_pass(build(fmt, dtype, args.layers), args.repeats),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {
        "shape": {**SHAPE, "num_hidden_layers": args.layers},
        "device": str(mx.default_device()),
        "rows": rows,
    }


def render(result: dict) -> list[str]:
    return [
        f"{machine_line(result['machine'])} Device: {result['device']}.",
        "",
        *markdown_table(
            ["weights", "decode step (ms)", "16-token pass (ms)", "pass / step"],
            [
                (r["format"], r["decode_ms"], r["verify16_ms"], r["verify16_in_decode_steps"])
                for r in result["rows"]
            ],
        ),
    ]


BENCHMARK = Benchmark(
    "decode_step",
    lambda r: f"Decode step and 16-token pass, random weights of Qwen2.5-1.5B's shape ({r['device']})",
    measure,
    render,
    options=(
        option("--formats", default="dense,4bit,8bit"),
        option("--repeats", type=int, default=20),
        option("--layers", type=int, default=SHAPE["num_hidden_layers"], help="fewer for a quick look"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
