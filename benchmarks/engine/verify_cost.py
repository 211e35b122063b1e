"""Cost of one verify pass over N tokens relative to one decode step, on a real model.

SSBD's premise is that checking a whole draft in one forward pass costs about as much as decoding
one token. This measures it: from the same cached prompt, the median wall time of a forward over N
new tokens (N = 1 is a decode step), trimming the cache back after each run, every size once a
round; and each pass's ratio to the decode step of its own round, lowest and highest: on a machine
shared with other work a compute-bound pass and a memory-bound decode step slow apart, and the
spread says how far that moved the ratio during the run. Beside each, where
the model runs through the CPU kernel, the floor under that pass: its tokens' multiply-adds in the
quantized products at the kernel's in-cache ceiling on this CPU (``in_cache_rate``: its own tiles
on operands already in L1), the arithmetic alone, nothing for reading the weights, attention or
the small operations; and the floor under that at the CPU's int8 peak (``int8_peak_rate``: its
widest int8 multiply-add instruction alone), what no int8 kernel can beat here. And what deciding
that pass costs after it (``verify.decide`` on its logits: each row's largest logit and softmax
normaliser), beside what MLX's softmax over the same rows costs (``passes.decision_timings``).
And where the time of a decode step and of a 16-token pass goes (``passes.pass_breakdown``): the
CPU kernel's operations timed by kind as they run (the quantized products by code width,
attention, SwiGLU, RoPE, RMSNorm), the rest being MLX's own operations, its scheduling and the
model's Python.
Decode steps go through the sgemv shim when it is on (``mlx_ssbd/platform/gemv.py``);
``MLX_SSBD_GEMV=0`` measures plain sgemm.

    python -m benchmarks.engine.verify_cost --model qwen2.5-coder-0.5b --out benchmarks/results/DIR
"""

from __future__ import annotations

import statistics

import mlx_ssbd  # noqa: F401  (backend policy first, before mlx.core)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.passes import (
    decision_timings,
    int8_peak,
    kernel_ceiling,
    multiply_adds,
    pass_breakdown,
    pass_rounds,
)
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.platform.extension import kernel


def floor_per_token_s(counts: dict[int, int]) -> float | None:
    """Seconds of one token's quantized products (``counts``: multiply-adds per code width) at the
    kernel's in-cache ceiling, or None when the model does not run through the kernel."""
    ours = kernel()
    if ours is None or not counts:
        return None
    return sum(macs / kernel_ceiling(ours, bits) for bits, macs in counts.items())


def peak_floor_per_token_s(counts: dict[int, int]) -> float | None:
    """Seconds of one token's quantized products at the CPU's int8 peak, or None where not measured."""
    ours = kernel()
    peak = int8_peak(ours) if ours is not None and counts else None
    return peak and sum(counts.values()) / peak


def measure(args) -> dict:
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise SystemExit(
            f"error: --sizes takes token counts separated by commas, not {args.sizes!r}"
        ) from None
    if 1 not in sizes or min(sizes) < 1:
        raise SystemExit(
            "error: --sizes must include 1 (the decode step each pass is compared with), none under 1"
        )
    loaded = load_model(args.model)
    prompt_tokens, rounds = pass_rounds(loaded, sizes, args.repeats, context=args.context)
    rows = {n: statistics.median(t) for n, t in rounds.items()}
    step, counts = rows[1], multiply_adds(loaded.model)
    floor, peak_floor = floor_per_token_s(counts), peak_floor_per_token_s(counts)
    decisions = decision_timings(loaded, [n for n in rows if n > 1], args.repeats)
    split = pass_breakdown(loaded, sorted({1, 16 if 16 in rows else max(rows)}), args.repeats, args.context)
    return {
        "model": loaded.name,
        "dtype": loaded.dtype,
        "prompt_tokens": prompt_tokens,
        "repeats": args.repeats,
        "decode_step_s": round(step, 5),
        "pass_s": {str(n): round(t, 5) for n, t in rows.items()},
        "pass_over_step": {str(n): round(t / step, 3) for n, t in rows.items()},
        "round_over_step": {
            str(n): [round(t / one, 3) for t, one in zip(times, rounds[1])]
            for n, times in rounds.items()
            if n > 1
        },
        "multiply_adds_per_token": {str(b): m for b, m in counts.items()},
        "floor_per_token_s": floor and round(floor, 6),
        "peak_floor_per_token_s": peak_floor and round(peak_floor, 7),
        "decision_s": {str(n): round(ours, 6) for n, (ours, _) in decisions.items()},
        "softmax_decision_s": {str(n): round(theirs, 6) for n, (_, theirs) in decisions.items()},
        "breakdown": split
        and {
            str(n): {
                "wall_s": round(b["wall_s"], 5),
                "ops_s": {k: round(s, 6) for k, s in b["ops_s"].items()},
                "loops_s": {k: round(s, 6) for k, s in b["loops_s"].items()},
            }
            for n, b in split.items()
        },
    }


def render(result: dict) -> list[str]:
    step, floor = result["decode_step_s"], result["floor_per_token_s"]
    lines = [
        f"{machine_line(result['machine'])} Sgemv shim: {result['machine']['gemv']}. Every pass after "
        f"{result['prompt_tokens']} cached tokens.",
        "",
    ]
    passes = [(int(n), t) for n, t in result["pass_s"].items()]
    lines += decision_lines(result, step)
    lines += breakdown_lines(result)
    lines += [
        "Each round times every size back to back; x decode step is the ratio of the medians, and "
        "by round the lowest and highest ratio of a pass to the decode step of its own round.",
        "",
    ]
    by_round = result.get("round_over_step", {})

    def spread(n: int) -> str:
        ratios = by_round.get(str(n))
        return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"

    if floor is None:
        return lines + markdown_table(
            ["tokens in one pass", "ms", "x decode step", "by round"],
            [(n, f"{1000 * t:.1f}", f"{t / step:.2f}", spread(n)) for n, t in passes],
        )
    peak = result.get("peak_floor_per_token_s")
    lines += [
        "Floor: the pass's multiply-adds in the quantized products at the CPU kernel's in-cache ceiling "
        "(its own tiles on operands already in L1), nothing else; no pass over N tokens costs less."
        + (
            " Peak floor: the same multiply-adds at the CPU's int8 peak (its widest int8 multiply-add "
            "instruction alone, every thread): no int8 kernel on this CPU could go under it."
            if peak
            else ""
        ),
        "",
    ]
    heads = ["tokens in one pass", "ms", "x decode step", "by round", "floor ms", "floor x decode step"]
    rows = [
        (
            n,
            f"{1000 * t:.1f}",
            f"{t / step:.2f}",
            spread(n),
            f"{1000 * n * floor:.1f}",
            f"{n * floor / step:.2f}",
        )
        for n, t in passes
    ]
    if peak:
        heads += ["peak floor ms", "peak floor x decode step"]
        rows = [
            (*row, f"{1000 * n * peak:.1f}", f"{n * peak / step:.2f}") for row, (n, _) in zip(rows, passes)
        ]
    return lines + markdown_table(heads, rows)


def breakdown_lines(result: dict) -> list[str]:
    """Where a decode step's and a pass's time go, by the CPU kernel's operations (none: no lines)."""
    split = result.get("breakdown")
    if not split or "1" not in split or len(split) < 2:
        return []
    n = max(split, key=int)
    step, wide = split["1"], split[n]
    kinds = sorted({**step["ops_s"], **wide["ops_s"]}, key=lambda k: (not k.startswith("products"), k))

    def rest(b):
        return b["wall_s"] - sum(b["ops_s"].values())

    def row(label, one, many):
        return (label, f"{1000 * one:.2f}", f"{1000 * many:.2f}", f"{many / step['wall_s']:.2f}")

    return [
        f"Where the time goes: the mean of {result['repeats']} decode steps and {n}-token passes with the "
        "CPU kernel timing its own operations as they run; the rest is MLX's own operations (adds, "
        "copies, the cache's slices), its scheduling and the model's Python.",
        "",
        *markdown_table(
            ["", "decode step ms", f"{n}-token pass ms", "pass part x decode step"],
            [
                *(row(k, step["ops_s"].get(k, 0.0), wide["ops_s"].get(k, 0.0)) for k in kinds),
                row("the rest", rest(step), rest(wide)),
                row("whole", step["wall_s"], wide["wall_s"]),
            ],
        ),
        "",
        *loop_lines(step, wide, n),
    ]


def loop_lines(step: dict, wide: dict, n: str) -> list[str]:
    """How long the kernel's threads ran its loops' pieces, and how much of that they had a CPU for
    (none: no lines, a report made before the kernel timed its loops)."""
    if "loops_s" not in step or "loops_s" not in wide:
        return []

    def row(label: str, seconds) -> tuple[str, str, str]:  # seconds(loops) of each
        return (label, f"{1000 * seconds(step['loops_s']):.2f}", f"{1000 * seconds(wide['loops_s']):.2f}")

    return [
        "The kernel's threads in its parallel loops (the products' pieces, and those of the operations "
        "it shares out), summed over its threads: the time they spent there, and how much of it they had "
        "a CPU for; the rest their core ran something else (MLX's own threads, the model's Python, "
        "other processes).",
        "",
        *markdown_table(
            ["", "decode step ms", f"{n}-token pass ms"],
            [
                row("in the loops", lambda loops: loops["wall_s"]),
                row("with a CPU", lambda loops: loops["cpu_s"]),
                row("waiting for a CPU", lambda loops: loops["wall_s"] - loops["cpu_s"]),
            ],
        ),
        "",
    ]


def decision_lines(result: dict, step: float) -> list[str]:
    """The decision after each pass, ours against a softmax over the vocabulary (none: no lines)."""
    ours, theirs = result.get("decision_s"), result.get("softmax_decision_s")
    if not ours:
        return []
    return [
        "Deciding a pass of N tokens after it (N - 1 draft tokens checked, then the next token): "
        "mlx-ssbd's decision (each row's largest logit and softmax normaliser) against MLX's softmax "
        "over the checked rows and one argmax, on the same logits.",
        "",
        *markdown_table(
            ["tokens in one pass", "decision ms", "x decode step", "MLX softmax ms", "softmax / decision"],
            [
                (n, f"{1000 * t:.2f}", f"{t / step:.3f}", f"{1000 * theirs[n]:.2f}", f"{theirs[n] / t:.1f}x")
                for n, t in ours.items()
            ],
        ),
        "",
    ]


BENCHMARK = Benchmark(
    "verify_cost",
    lambda r: f"Verify pass cost vs one decode step ({r['model']}, {r['dtype']}, median of {r['repeats']})",
    measure,
    render,
    options=(
        option("--model", default=None),
        option("--sizes", default="1,4,8,16,24,32,48,64"),
        option("--repeats", type=int, default=7),
        option(
            "--context",
            type=int,
            default=None,
            help="tokens the cache holds before each pass: the prompt, then filler up to this many "
            "(a talk's examples and earlier captions; default: the prompt alone)",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
