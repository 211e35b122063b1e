"""How many live streams one machine carries: N streams through the real engine, and where a round goes.

N concurrent caption streams (``--streams``, up to 128) run through ``MultiStreamTranslator``: each
stream replays the talk's real-time ASR partials (``benchmarks/data/talks``), stream i starting at
its own segment; at every step each stream's next partial is submitted, then rounds run (one
host sync and one batched model call each, a few on a CPU: ``engine.planner``) until every update
has ended. One step warms up (the
prompts fed, the kernels compiled), the next ``--steps`` are measured, more where that would be
fewer than ``--min-updates`` updates in all (one stream's rounds are short: a few dozen would leave
its figures to the machine's noise). RT and SSBD (``--methods``).

Where a round's time goes: every batched model call's shape (rows, width, context, logits:
``engine.batch.CallShape``) is recorded, and at the end of each step (every update ended, the
device synchronized) that step's calls are replayed alone on the same model, once each, with a
pre-sized cache and no engine around them. The model's time is the sum of those bare calls; the
engine's own time is the rest of the steps' wall (bookkeeping, building the inputs, moving rows in
and out of the batch, copying caches, host syncs). Replaying each step's calls right after it,
rather than all of them after the run, pairs the two in time: a machine whose speed drifts by tens
of percent from one minute to the next (a shared VM) slows both alike, so the difference stays the
engine's. The report gives the engine's share over the whole run and the lowest and highest of its
single steps': the spread the machine's noise leaves. Padding: the share of the calls' rows x width
that no row asked for (refeeds and left padding; it is inside the model's time).

Models (``--models``): ``0.5b-shape`` and ``1.5b-shape`` are random weights of the Qwen2.5(-Coder)
0.5B's and 1.5B's configurations (the default model's is the 1.5B's), in the backend's compute
dtype (fp32 on a CPU, fp16 on a GPU): they cost what those models' calls cost without their
weights. ``small-shape`` (width 512, 8 layers, the byte tokenizer's 262 tokens) makes calls of a
few milliseconds on a 2-core CPU for a few rows, as the real shapes' are on a GPU, so the engine's
own share shows as it would there; at 64 rows its calls take about 100-250 ms here, so
``tiny-shape`` (width 64, 2 layers) keeps them at a few milliseconds for every N: the engine's
share with many streams where the model is fast. A prepared model's name (``qwen2.5-coder-0.5b``)
runs its weights as served.
Random models use the tokenizer of ``--tokenizer`` (a model directory; default: the 0.5B's when
prepared, else a byte tokenizer, which makes prompts about 4x longer); their outputs are random
tokens up to each update's length limit (special tokens never win, loops are not cut), so SSBD's draft acceptance
says nothing about a real model's.

    python -m benchmarks.engine.capacity --models small-shape,0.5b-shape --streams 1,2,4,8 --out DIR

On an NVIDIA GPU (``pip install "mlx[cuda]"`` beside this package): ``python -m benchmarks.run
--only capacity-gpu`` (both shapes, 1 to 128 streams).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.engine.batch import CallShape
from mlx_ssbd.engine.cache import model_logits
from mlx_ssbd.evaluation.random_models import BYTE_VOCAB, byte_tokenizer, shaped_model
from mlx_ssbd.evaluation.streams import read_partials
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.multistream import MultiStreamTranslator
from mlx_ssbd.live.translator import StreamTranslator
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.models.registry import get_card, model_dir
from mlx_ssbd.platform.backend import compute_dtype, generation_stream

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

TALK = DATA / "talks" / "talk-partials.jsonl"
QWEN2 = dict(
    model_type="qwen2",
    vocab_size=151936,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
SMALL_SHAPE = dict(  # with the byte tokenizer's vocabulary: its calls cost a few ms on a CPU
    QWEN2,
    vocab_size=BYTE_VOCAB,
    hidden_size=512,
    intermediate_size=1024,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
)
SHAPES = {  # the configurations of Qwen2.5-Coder 0.5B and 1.5B (config.json), and two small ones
    "0.5b-shape": dict(
        QWEN2,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
    "1.5b-shape": dict(
        QWEN2,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
    ),
    "small-shape": SMALL_SHAPE,
    # ... and calls of a few ms on a CPU at 64 rows too, as the real shapes' are on a GPU
    "tiny-shape": dict(
        SMALL_SHAPE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    ),
}


def model_and_tokenizer(name: str, tokenizer_dir: str | None):
    """``(model, tokenizer, family, description)`` of a shape or a prepared model."""
    if name not in SHAPES:
        loaded = load_model(name)
        return loaded.model, loaded.tokenizer, loaded.family, f"{loaded.name} ({loaded.weights})"
    dtype = compute_dtype()
    model = shaped_model(SHAPES[name], dtype=dtype)
    if tokenizer_dir and SHAPES[name]["vocab_size"] != BYTE_VOCAB:
        from transformers import AutoTokenizer

        tokenizer, source = AutoTokenizer.from_pretrained(tokenizer_dir), f"{Path(tokenizer_dir).name}'s"
    else:
        tokenizer, source = byte_tokenizer(), "a byte"
    specials = mx.array(sorted(set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)))
    model.lm_head.weight[specials] = 0  # a zero logit never wins: outputs run to their length limit
    return (
        model,
        tokenizer,
        "chatml",
        f"{name}, random {str(dtype).split('.')[-1]} weights, {source} tokenizer",
    )


def streams_run(
    model, tokenizer, family: str, streams: int, method: str, steps: int, beta: float, replay
) -> dict:
    """Run ``streams`` streams for one warm-up step and ``steps`` measured steps; the run's
    figures, its calls' shapes (``"calls"``) and their bare time (``"model_s"``: each measured
    step's calls through ``replay(shape) -> seconds`` right after the step)."""
    talk = [(partial.text, partial.final) for partial in read_partials(str(TALK))]
    starts = [0, *(i + 1 for i, (_, final) in enumerate(talk[:-1]) if final)]  # each segment's first
    lanes = [talk[starts[i % len(starts)] :] + talk[: starts[i % len(starts)]] for i in range(streams)]
    config = dataclasses.replace(method_config(method, beta=beta), cut_loops=False)  # random outputs loop
    translators = [
        StreamTranslator(model, tokenizer, family=family, source_lang="en", target_lang="de", config=config)
        for _ in range(streams)
    ]
    multi = MultiStreamTranslator(translators)
    updates, calls, rounds, wall, model_s, shares = [], [], 0, 0.0, 0.0, []
    phases = {"submit": 0.0}  # seconds, measured steps: submitting updates, and the rounds' parts
    for step in range(steps + 1):
        measured = step > 0
        step_calls = []
        multi.batch.trace = step_calls.append if measured else None
        multi.runner.phases = phases if measured else None
        start = time.perf_counter()
        for translator, lane in zip(translators, lanes):
            text, final = lane[step % len(lane)]
            multi.submit(translator, text, final, updates.append if measured else (lambda update: None))
        phases["submit"] += (time.perf_counter() - start) * measured
        while multi.busy:
            multi.round()
            rounds += measured
        mx.synchronize(generation_stream())  # a step wasted at an output's end (pipelined) included
        if measured:
            step_wall = time.perf_counter() - start
            step_model = sum(replay(shape) for shape in step_calls)
            wall, model_s, calls = wall + step_wall, model_s + step_model, calls + step_calls
            shares.append(1 - step_model / step_wall)
    return {
        "wall_s": wall,
        "model_s": model_s,
        "rounds": rounds,
        "updates": len(updates),
        "output_tokens": sum(u.stats.output_tokens for u in updates),
        "draft_tokens": sum(u.stats.draft_tokens for u in updates),
        "accepted": sum(u.stats.accepted for u in updates),
        "calls": calls,
        "step_shares": shares,  # each measured step's engine share: how far the machine's noise moves it
        "phases": phases,
    }


def kv_layout(model) -> tuple[int, int, int, mx.Dtype]:
    """(layers, KV heads, head size, dtype) of ``model``'s cache, read off one token's."""
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[0]]), cache=cache))
    keys = cache[0].keys
    return len(cache), keys.shape[1], keys.shape[3], keys.dtype


def bare_call_s(model, layout, shape: CallShape) -> float:
    """Seconds ``model`` takes for one call of ``shape`` alone: the same rows, width, context and
    logits, a cache sized to hold it (no growth, no padding), one run (its inputs and cache made
    and evaluated before the clock starts)."""
    n_layers, heads, size, dtype = layout
    room = -(-(shape.context + shape.width) // BatchKVCache.step) * BatchKVCache.step
    layers = []
    for _ in range(n_layers):
        layer = BatchKVCache([0] * shape.rows)
        layer.keys = mx.zeros((shape.rows, heads, room, size), dtype)
        layer.values = mx.zeros((shape.rows, heads, room, size), dtype)
        layers.append(layer)
    inputs = mx.zeros((shape.rows, shape.width), mx.int32)
    mx.eval(inputs, *(layer.keys for layer in layers), *(layer.values for layer in layers))
    for layer in layers:
        layer.offset, layer._idx = mx.array([shape.context] * shape.rows), shape.context
    mx.eval(*(layer.offset for layer in layers))
    start = time.perf_counter()
    mx.eval(model_logits(model, inputs, layers, shape.logits))
    return time.perf_counter() - start


def summary(run: dict, streams: int, method: str) -> dict:
    calls, model_s = run["calls"], run["model_s"]
    slots = sum(shape.rows * shape.width for shape in calls)
    return {
        "method": method,
        "streams": streams,
        "updates": run["updates"],
        "rounds": run["rounds"],
        "calls": len(calls),
        "mean_rows": round(statistics.mean(s.rows for s in calls), 1) if calls else 0,
        "wall_s": round(run["wall_s"], 2),
        "round_ms": round(1000 * run["wall_s"] / max(1, run["rounds"]), 1),
        "model_ms_per_round": round(1000 * model_s / max(1, run["rounds"]), 1),
        "engine_ms_per_round": round(1000 * (run["wall_s"] - model_s) / max(1, run["rounds"]), 1),
        "outside_share": round(1 - model_s / run["wall_s"], 3),
        "outside_share_steps": [round(min(run["step_shares"]), 3), round(max(run["step_shares"]), 3)],
        "padding_share": round(1 - sum(s.new for s in calls) / slots, 3) if slots else 0.0,
        "updates_per_s": round(run["updates"] / run["wall_s"], 2),
        "output_tok_per_s": round(run["output_tokens"] / run["wall_s"], 1),
        "accepted_share": round(run["accepted"] / run["draft_tokens"], 3) if run["draft_tokens"] else None,
        "engine_parts_ms_per_round": engine_parts(run),
    }


def engine_parts(run: dict) -> dict:
    """Where a round's wall goes (ms), from the runner's phases (``engine.update.Runner.phases``):
    waiting for the device (dispatching the calls and the host sync: on a CPU most of the model's
    work is done in them), building the calls (the feeder's bookkeeping and the model's graph),
    the decisions' host work, the updates' own steps, starting and ending updates, and the rest."""
    phases, rounds = run["phases"], max(1, run["rounds"])
    get = lambda name: phases.get(name, 0.0)
    parts = {
        "waiting": get("dispatch") + get("sync"),
        "building": get("feed") - get("dispatch"),
        "deciding": get("decide") - get("sync"),
        "steps": get("advance"),
        "starting_ending": get("submit") + get("done"),
    }
    parts["other"] = run["wall_s"] - sum(
        get(name) for name in ("decide", "feed", "advance", "done", "submit")
    )
    return {name: round(1000 * seconds / rounds, 2) for name, seconds in parts.items()}


def measure(args) -> dict:
    counts = [int(n) for n in args.streams.split(",")]
    tokenizer_dir = args.tokenizer
    if tokenizer_dir is None and (model_dir(get_card("qwen2.5-coder-0.5b")) / "tokenizer.json").exists():
        tokenizer_dir = str(model_dir(get_card("qwen2.5-coder-0.5b")))
    results = []
    for name in args.models.split(","):
        model, tokenizer, family, described = model_and_tokenizer(name, tokenizer_dir)
        layout, rows = kv_layout(model), []
        replay = functools.partial(bare_call_s, model, layout)
        for method in args.methods.split(","):
            for n in counts:
                steps = max(args.steps, -(-args.min_updates // n))
                run = streams_run(model, tokenizer, family, n, method, steps, args.beta, replay)
                rows.append(summary(run, n, method))
                print(json.dumps({"model": name, **rows[-1]}), flush=True)
        results.append({"model": name, "described": described, "rows": rows})
        del model
    return {
        "steps": args.steps,
        "min_updates": args.min_updates,
        "beta": args.beta,
        "data": relative(TALK),
        "results": results,
    }


def percent(share: float | None) -> str:
    return "" if share is None else f"{round(100 * share) or 0}%"  # never "-0%"


def share_cell(row: dict) -> str:
    """The engine's share of the run, and the lowest and highest of its steps where they differ."""
    low, high = (round(100 * share) for share in row.get("outside_share_steps", [row["outside_share"]] * 2))
    return percent(row["outside_share"]) + (f" ({low} to {high})" if low != high else "")


AIM = {1: 0.20, 64: 0.15}  # the engine's share of the wall aimed at where calls cost a few ms


def against_aim(rows: list[dict]) -> str | None:
    """One line: each method's engine share at the stream counts ``AIM`` names, against it."""
    found = []
    for streams, aim in AIM.items():
        shares = [f"{r['method']} {percent(r['outside_share'])}" for r in rows if r["streams"] == streams]
        if shares:
            model_ms = max(r["model_ms_per_round"] for r in rows if r["streams"] == streams)
            found.append(f"{streams} stream{'s' * (streams > 1)}: {', '.join(shares)} (aim: at most "
                         f"{percent(aim)}; model calls {model_ms} ms a round)")  # fmt: skip
    return f"Engine share against the aim, {'; '.join(found)}." if found else None


def render(report: dict) -> list[str]:
    lines = [
        f"{machine_line(report['machine'])} Each stream replays the talk's ASR partials "
        f"({report['data']}), {report['steps']} measured partials per stream after one warm-up "
        f"(more where that is under {report.get('min_updates', 0)} updates in all); SSBD "
        f"β = {report['beta']}. A round: one host sync and one batched model call (on a CPU a few, "
        "rows of very different widths apart). *model*: the round's model calls replayed alone (same "
        "rows, width, context, logits), each step's right after it; *engine*: the rest of the wall "
        "(its share over the whole run, and in brackets the lowest and highest of the single steps': "
        "how far this machine's noise moves it). "
        "*padding*: the share of the calls' rows x width no row asked for (inside the model's time). "
        "Random models' outputs are random tokens, so their acceptance is not a real model's.",
    ]
    for result in report["results"]:
        lines += ["", f"## {result['described']}", ""]
        lines += markdown_table(
            ["method", "streams", "updates", "rounds", "rows/call", "round ms", "model ms", "engine ms", "engine share",
             "padding", "updates/s", "output tok/s", "draft accepted"],
            [
                (r["method"], r["streams"], r["updates"], r["rounds"], r["mean_rows"], r["round_ms"],
                 r["model_ms_per_round"], r["engine_ms_per_round"], share_cell(r),
                 percent(r["padding_share"]), r["updates_per_s"], r["output_tok_per_s"], percent(r["accepted_share"]))
                for r in result["rows"]
            ],
        )  # fmt: skip
        lines += parts_table(result["rows"])
        if (line := against_aim(result["rows"])) is not None:
            lines += ["", line]
    return lines


def parts_table(rows: list[dict]) -> list[str]:
    """Where a round's wall goes (``engine_parts``), for the rows that recorded it."""
    rows = [r for r in rows if "engine_parts_ms_per_round" in r]
    if not rows:
        return []
    return [
        "",
        "Where a round's wall goes (ms a round): *waiting*: for the device, in dispatching the calls "
        "and in the host sync (on a CPU the model's work is done there); *building*: the calls "
        "(the feeder's bookkeeping: which rows share a call, their inputs, the KV layout; and the "
        "model's graph); *deciding*: the decisions' host work; *steps*: the updates' own (what "
        "to feed next, stops, outputs); *starting, ending*: updates' prompts and captions. All but "
        "*waiting* and the model's graph is the engine's host work, one thread of Python. *a row*: "
        "the model's time and the engine's per row of a round's calls (µs; below zero where the "
        "replay ran slower than the round): the engine's is a part a round and a part a row, "
        "whatever the model costs, so the cheaper a model's rows, the larger the engine's share.",
        "",
        *markdown_table(
            ["method", "streams", "round ms", "model ms", "waiting", "building", "deciding", "steps",
             "starting, ending", "other", "a row: model µs", "a row: engine µs"],
            [
                (r["method"], r["streams"], r["round_ms"], r["model_ms_per_round"], p["waiting"], p["building"],
                 p["deciding"], p["steps"], p["starting_ending"], p["other"],
                 per_row(r, r["model_ms_per_round"]), per_row(r, r["engine_ms_per_round"]))
                for r in rows
                for p in [r["engine_parts_ms_per_round"]]
            ],
        ),
    ]  # fmt: skip


def per_row(row: dict, ms_per_round: float) -> int:
    """``ms_per_round`` per row of a round's calls, in µs."""
    rows_per_round = row["mean_rows"] * row["calls"] / max(1, row["rounds"])
    return round(1000 * ms_per_round / max(rows_per_round, 1e-9))


BENCHMARK = Benchmark(
    "capacity",
    "Capacity: N live streams through the engine, and where a round goes",
    measure,
    render,
    options=(
        option("--models", default="small-shape,0.5b-shape", help="shapes and/or prepared models"),
        option("--streams", default="1,2,4,8,16", help="numbers of concurrent streams"),
        option("--methods", default="rt,ssbd"),
        option("--steps", type=int, default=6, help="measured partials per stream"),
        option("--min-updates", type=int, default=32, help="at least this many measured updates in all"),
        option("--beta", type=float, default=0.2),
        option("--tokenizer", help="model directory whose tokenizer random models use"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
