"""What forward passes cost on a real model: the benchmarks' one way to time them.

Contract: ``pass_timings(loaded, sizes, repeats, context=None)`` caches the prompt of ``PROMPT``
(en->de) once (followed by tokens of ``FILLER`` until the cache holds ``context`` tokens, when
given: what a pass costs after a longer talk), then for each N in ``sizes`` returns the median
wall time of one forward pass over N new tokens of ``FILLER`` from that cached context, rewinding
the cache after each (N = 1 is a decode step), the sizes taken in turn round after round;
``pass_rounds`` gives each round's seconds instead of the medians (a pass over N tokens and a decode
step of the same round ran back to back: their ratio round by round shows how far the machine's
state moved it).
``decision_timings(loaded, sizes, repeats)`` times deciding such a pass (its N - 1 tokens after
the first as the draft, greedy at the default bias, ``verify.decide``) on that pass's own logits,
and beside it what MLX's softmax over the checked rows plus one argmax costs on the same logits:
what a decision over the vocabulary costs this way.
``prompt_and_filler(tokenizer, family)`` gives the token ids, so a peer engine can be timed on
exactly the same tokens. ``multiply_adds(model)`` counts a token's multiply-adds in the model's
quantized products by code width, the arithmetic a pass over N tokens cannot do with less than N
times; ``kernel_ceiling(ours, bits)`` is the CPU kernel's in-cache rate for that width (the highest
of a few measurements: the machine at its quietest). Together they give the floor under a pass.
``product_bytes(model)`` is what the same products' weights take as held (codes, scales, biases),
every byte of it read once a decode step.
``pass_breakdown(loaded, sizes, repeats, context=None)`` splits such passes' wall time by the CPU kernel's
operations (its products by code width, attention, the small operations), the rest being MLX's own
operations and scheduling and the model's Python, and says how long the kernel's threads ran its
loops' pieces and how much of that time they had a CPU for.
``int8_peak(ours)`` is the CPU's own int8 peak (its widest int8 multiply-add instruction alone), the
floor under any int8 product: None where the kernel's build times no such instruction;
``int8_peak(ours, scaled=True)`` that instruction beside the fp32 work the kernel's format adds per
block (a scale and a bias per 32 codes), the floor under the kernel's products.
"""

from __future__ import annotations

import functools
import statistics
import time

PROMPT = "All human beings are born free and equal in dignity and rights."
FILLER = " Alle Menschen sind frei und gleich an Würde und Rechten geboren." * 8


def prompt_and_filler(tokenizer, family: str) -> tuple[list[int], list[int]]:
    from ..live.prompt import PromptBuilder

    prompt = PromptBuilder(tokenizer, family, "en", "de").build(PROMPT)
    return list(prompt.ids), tokenizer.encode(FILLER, add_special_tokens=False)


def _cached_prompt(loaded, context: int | None = None):
    """``(cache, ids, filler)``: a ``TokenCache`` holding the prompt's ``ids`` (followed by filler
    tokens up to ``context``), and the filler tokens a pass is fed from."""
    import mlx.core as mx

    from ..engine.cache import TokenCache

    ids, filler = prompt_and_filler(loaded.tokenizer, loaded.family)
    while context is not None and len(ids) < context:
        ids += filler[: context - len(ids)]
    cache = TokenCache(loaded.model)
    mx.eval(cache.forward(ids))
    return cache, ids, filler


def _median_s(work, repeats: int, after=None) -> float:
    """Median seconds of evaluating ``work()`` over ``repeats`` runs (``after()`` after each, untimed)."""
    import mlx.core as mx

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(work())
        times.append(time.perf_counter() - start)
        if after is not None:
            after()
    return statistics.median(times)


def _in_turn(cache, filler, sizes, repeats: int, measure) -> None:
    """One pass over N tokens of ``filler`` for each N in ``sizes`` in turn, round after round: a
    round that warms up, then ``repeats`` more, each pass as ``measure(N, run)`` where ``run()``
    evaluates it and returns its seconds; the cache is rewound after each. A machine that other
    work slows for a while so slows every size alike (the sizes one after the other, a slow spell
    could fall on the decode steps alone and make every pass look cheap against them)."""
    import mlx.core as mx

    base = len(cache)

    def once(n: int) -> float:
        start = time.perf_counter()
        mx.eval(cache.forward(filler[:n]))
        return time.perf_counter() - start

    for round_ in range(repeats + 1):
        for n in sizes:
            if round_:
                measure(n, functools.partial(once, n))
            else:
                once(n)
            assert cache.rewind(base) == base


def pass_rounds(
    loaded, sizes, repeats: int, context: int | None = None
) -> tuple[int, dict[int, list[float]]]:
    """(cached tokens, {N: seconds of a pass over N tokens, round by round}), the sizes in turn
    (``_in_turn``): entry r of every size comes from the same round."""
    cache, ids, filler = _cached_prompt(loaded, context)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    _in_turn(cache, filler, sizes, repeats, lambda n, run: times[n].append(run()))
    return len(ids), times


def pass_timings(loaded, sizes, repeats: int, context: int | None = None) -> tuple[int, dict[int, float]]:
    """(cached tokens, {N: median seconds of a pass over N tokens}), the sizes in turn (``_in_turn``)."""
    tokens, rounds = pass_rounds(loaded, sizes, repeats, context)
    return tokens, {n: statistics.median(t) for n, t in rounds.items()}


def pass_breakdown(loaded, sizes, repeats: int, context: int | None = None) -> dict[int, dict] | None:
    """{N: {"wall_s": mean seconds of a pass over N tokens, "ops_s": {kind: mean seconds of it in
    the CPU kernel's operations of that kind}, "loops_s": {"wall_s", "cpu_s": mean seconds, summed
    over its threads, that the kernel's threads spent in its parallel loops and the CPU time they
    had meanwhile (``loop_times``)}}} over ``repeats`` rounds of one pass of each size from the
    cached prompt (filled up to ``context`` tokens, as ``pass_timings``; ``_in_turn``), the kernel
    timing its operations (``op_timing``); None without the kernel."""
    from ..platform.extension import kernel

    ours = kernel()
    if ours is None:
        return None
    cache, _, filler = _cached_prompt(loaded, context)
    walls = {n: 0.0 for n in sizes}
    ops: dict[int, dict[str, float]] = {n: {} for n in sizes}
    loops = {n: {"wall_s": 0.0, "cpu_s": 0.0} for n in sizes}

    def measure(n: int, run) -> None:
        ours.op_timing(True)
        walls[n] += run()
        ours.op_timing(False)
        for kind, (seconds, calls) in ours.op_times().items():
            if calls:
                ops[n][kind] = ops[n].get(kind, 0.0) + seconds
        for key, seconds in ours.loop_times().items():
            loops[n][key] += seconds

    _in_turn(cache, filler, sizes, repeats, measure)
    return {
        n: {
            "wall_s": walls[n] / repeats,
            "ops_s": {k: t / repeats for k, t in ops[n].items()},
            "loops_s": {k: t / repeats for k, t in loops[n].items()},
        }
        for n in sizes
    }


def decision_timings(loaded, sizes, repeats: int) -> dict[int, tuple[float, float]]:
    """{N: (median seconds of ``verify.decide`` over a pass of N tokens, of MLX's softmax over its
    N - 1 checked rows plus the last row's argmax)}, on the logits of that pass."""
    import mlx.core as mx

    from ..engine.verify import decide
    from ..live.methods import DEFAULT_BETA

    cache, ids, filler = _cached_prompt(loaded)

    def median(work, *args) -> float:
        work = functools.partial(work, *args)
        mx.eval(work())  # warm up
        return _median_s(work, repeats)

    def softmax_way(rows):
        return [mx.softmax(rows[:-1], axis=-1, precise=True), mx.argmax(rows[-1])]

    timings = {}
    for n in sizes:
        rows = cache.forward(filler[:n])
        mx.eval(rows)
        cache.rewind(len(ids))
        timings[n] = (median(decide, rows, filler[1:n], DEFAULT_BETA), median(softmax_way, rows))
    return timings


def _quantized_products(model):
    """The model's quantized products: its quantized linear layers, the output layer included (a
    tied embedding counted as the output layer it is when there is no other)."""
    import mlx.nn as nn

    modules = dict(model.named_modules())
    tied = not any(name.endswith("lm_head") for name in modules)
    for module in modules.values():
        if isinstance(module, nn.QuantizedLinear) or (tied and isinstance(module, nn.QuantizedEmbedding)):
            yield module


def multiply_adds(model) -> dict[int, int]:
    """{bits: one token's multiply-adds} over the model's quantized products."""
    counts: dict[int, int] = {}
    for module in _quantized_products(model):
        rows, words = module.weight.shape
        counts[module.bits] = counts.get(module.bits, 0) + rows * words * 32 // module.bits
    return counts


def product_bytes(model) -> int:
    """The bytes of the model's quantized products' weights (codes, scales and biases as held): what
    a decode step reads from memory at the least, every weight once."""
    total = 0
    for module in _quantized_products(model):
        biases = getattr(module, "biases", None)
        total += module.weight.nbytes + module.scales.nbytes + (0 if biases is None else biases.nbytes)
    return total


def kernel_ceiling(ours, bits: int, tries: int = 3, seconds: float = 0.3) -> float:
    """Multiply-adds per second of ``ours`` (the CPU kernel, ``extension.kernel()``) for ``bits``-bit
    codes on operands already in L1 (``in_cache_rate``): the highest of ``tries`` measurements."""
    return max(ours.in_cache_rate(bits, seconds) for _ in range(tries))


def int8_peak(ours, tries: int = 3, seconds: float = 0.3, scaled: bool = False) -> float | None:
    """Multiply-adds per second of this CPU's widest int8 multiply-add instruction alone on operands in
    registers, every thread at once (``int8_peak_rate``: AVX-512 VNNI's dpbusd, or on the AVX2 builds
    maddubs), the highest of ``tries`` measurements; None in the kernel's portable build. ``scaled``:
    the same beside the fp32 work a band costs each row per block of 32 codes (a conversion, a
    multiplication, two fmas), the most a product in the kernel's format reaches; None but on AVX-512."""
    rate = max(ours.int8_peak_rate(seconds, scaled=scaled) for _ in range(tries))
    return rate or None
