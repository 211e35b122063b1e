"""One quantized product on the CPU: mlx-ssbd's kernel, MLX's own ``quantized_matmul``, and fp32 BLAS.

For the default model's MLP weights (8960 x 1536 and 1536 x 8960) quantized to 4, 5 and 8 bits
(group 32, as the prepared models are), the median time of ``x @ W.T`` for 1 to 64 rows of x: a
decode step is 1 row, a verify pass of a draft 8-64. The kernel reads each weight as a routed layer
holds it (``quantized.route_quantized_layers``): 4, 5, 6 and 8-bit codes repacked in bands of 16 rows
at load, MLX's quantized_matmul as stored. fp32 BLAS multiplies the dequantized weight
(the dense path: 8x the bytes of 4-bit weights); with OpenBLAS one-row products go through the
sgemv shim when it is built (``mlx-ssbd doctor``). Beside it, the MLP's SwiGLU on the same rows
of 8960 values: MLX's ``silu(gate) * up`` (mlx-lm's compiled ``swiglu``) against the extension's
``silu_mul``; and a decode layer's RoPE (12 heads of 128, the default model's queries), RMSNorm
(1536 values) and attention (those queries against 2 key-value heads with 400 tokens cached, the
keys and values views of a longer cache as mlx-lm's holds them), each timed per call within a
chain of 56 calls (a decode step's count, so the time includes what MLX's scheduling of each call
costs, as it does in a model): ``mx.fast``'s graph of small operations against the extension's one
operation. Each product's rate (multiply-adds per second) is set against the kernel's ceiling on
this CPU: its own tiles on operands already in L1, every thread at once (``in_cache_rate``),
measured before and after the products (the higher of the two: the machine at its quietest); and
the ceiling against the CPU's int8 peak, its widest int8 multiply-add instruction alone
(``int8_peak_rate``: what no int8 product beats here), and against that instruction beside the fp32
work each block of 32 codes costs a row in bands (``int8_peak_rate(scaled=True)``, AVX-512 builds:
what no product in this format beats here).

    python -m benchmarks.engine.quantized_kernel --out benchmarks/results/DIR/quantized-kernel
"""

from __future__ import annotations

import json
import statistics
import time

import mlx_ssbd  # noqa: F401  (backend policy first, before mlx.core)
from benchmarks.common import machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.passes import int8_peak, kernel_ceiling
from mlx_ssbd.platform.backend import quiet_blas_workers
from mlx_ssbd.platform.extension import kernel, kernel_status
from mlx_ssbd.platform.quantized import BANDED_BITS, LEAVES, band_leaf

import mlx.core as mx

SHAPES = {"mlp up/gate (8960 x 1536)": (8960, 1536), "mlp down (1536 x 8960)": (1536, 8960)}


def median_ms(fn, repeats: int) -> float:
    mx.eval(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(fn())
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def times(ours, x, stored, held, dense, bits: int, repeats: int) -> dict:
    """Median ms of one product through the kernel (``held``: the weight as a routed layer holds it),
    MLX's quantized_matmul (``stored``: as stored) and fp32 BLAS, each with BLAS's threads as
    mlx-ssbd sets them for that path (one OpenBLAS thread beside the kernel)."""
    q, s, b = stored
    banded = held is not stored
    quiet_blas_workers(True)
    result = {
        "kernel_ms": median_ms(lambda: ours.quantized_matmul(x, *held, 32, bits, banded=banded), repeats),
        "mlx_quantized_ms": median_ms(
            lambda: mx.quantized_matmul(x, q, s, b, transpose=True, group_size=32, bits=bits),
            max(3, repeats // 3),
        ),
    }
    quiet_blas_workers(False)
    return {**result, "fp32_blas_ms": median_ms(lambda: x @ dense.T, repeats)}


def ceiling_gmacs(ours, bits: list[int]) -> dict[int, float]:
    """The kernel's in-cache ceiling per width, GMAC/s: the highest of three measurements."""
    return {b: kernel_ceiling(ours, b) / 1e9 for b in bits}


def swiglu_rows(ours, rows: list[int], repeats: int) -> list[dict]:
    """Median ms of SwiGLU over ``m`` rows of 8960 values: mlx-lm's and the extension's."""
    from mlx_lm.models.activations import swiglu

    result = []
    for m in rows:
        gate, up = (mx.random.normal((m, 8960), key=mx.random.key(m + i)) for i in (0, 1))
        mx.eval(gate, up)
        mlx_ms = median_ms(lambda: swiglu(gate, up), repeats)  # noqa: B023  (timed at once)
        ours_ms = median_ms(lambda: ours.silu_mul(gate, up), repeats)  # noqa: B023
        result.append({"rows": m, "mlx_ms": mlx_ms, "silu_mul_ms": ours_ms})
    return result


def chain_ms(step, first, repeats: int, calls: int = 56) -> float:
    """Median ms per call of ``step`` applied ``calls`` times in a chain, evaluated once."""

    def chain():
        y = first
        for _ in range(calls):
            y = step(y)
        return y

    return median_ms(chain, repeats) / calls


def small_ops(ours, m: int, repeats: int) -> dict:
    """Median ms per call of RoPE, RMSNorm and attention over ``m`` tokens: ``mx.fast``'s and the
    extension's."""
    from mlx_ssbd.platform.extension import default_inverse_frequencies

    inverse = default_inverse_frequencies(128, 1e6)
    offset = mx.array(400, dtype=mx.int32)
    heads = mx.random.normal((1, 12, m, 128), key=mx.random.key(m))
    hidden = mx.random.normal((1, m, 1536), key=mx.random.key(m + 1))
    weight = mx.ones((1536,))
    keys, values = (
        mx.random.normal((1, 2, 512, 128), key=mx.random.key(m + i))[:, :, : 400 + m] for i in (2, 3)
    )
    mask = "causal" if m > 1 else None
    mx.eval(heads, hidden, weight, inverse, keys, values)
    scale = 128**-0.5
    return {
        "rows": m,
        "rope_mlx_ms": chain_ms(
            lambda y: mx.fast.rope(y, 128, traditional=False, base=1e6, scale=1.0, offset=400), heads, repeats
        ),
        "rope_ms": chain_ms(
            lambda y: ours.rope(y, 128, traditional=False, inv_freqs=inverse, scale=1.0, offset=offset),
            heads,
            repeats,
        ),
        "rms_norm_mlx_ms": chain_ms(lambda y: mx.fast.rms_norm(y, weight, 1e-6), hidden, repeats),
        "rms_norm_ms": chain_ms(lambda y: ours.rms_norm(y, weight, 1e-6), hidden, repeats),
        "attention_mlx_ms": chain_ms(
            lambda y: mx.fast.scaled_dot_product_attention(y, keys, values, scale=scale, mask=mask),
            heads,
            repeats,
        ),
        "attention_ms": chain_ms(
            lambda y: ours.attention(y, keys, values, scale=scale, mask_mode=mask or ""), heads, repeats
        ),
    }


def measure(args) -> dict:
    ours = kernel()
    if ours is None:
        raise SystemExit(f"the CPU kernel is not available: {kernel_status()}")
    widths = [int(b) for b in args.bits.split(",")]
    before = ceiling_gmacs(ours, widths)
    rows = []
    for label, (n, k) in SHAPES.items():
        for bits in widths:
            w = mx.random.normal((n, k), key=mx.random.key(0)) * 0.02
            stored = mx.quantize(w, group_size=32, bits=bits)
            dense = mx.dequantize(*stored, group_size=32, bits=bits)
            # as routing lays them out: 4 to 8 bits in bands (every shape here is whole bands)
            banded = bits in BANDED_BITS
            held = tuple(band_leaf(leaf, a, bits) for leaf, a in zip(LEAVES, stored)) if banded else stored
            mx.eval(stored, held, dense)
            for m in (int(r) for r in args.rows.split(",")):
                x = mx.random.normal((m, k), key=mx.random.key(m))
                mx.eval(x)
                row = {
                    "shape": label,
                    "bits": bits,
                    "rows": m,
                    **times(ours, x, stored, held, dense, bits, args.repeats),
                }
                row["kernel_gmacs"] = m * n * k / row["kernel_ms"] / 1e6
                rows.append(row)
                print(json.dumps(row), flush=True)
            del dense
    after = ceiling_gmacs(ours, widths)
    ceiling = {b: max(before[b], after[b]) for b in widths}
    peak, scaled_peak = int8_peak(ours), int8_peak(ours, scaled=True)
    activation = swiglu_rows(ours, [int(r) for r in args.rows.split(",")], args.repeats)
    small = [small_ops(ours, int(r), args.repeats) for r in args.rows.split(",")]
    return {
        "rows": rows,
        "swiglu": activation,
        "small_ops": small,
        "ceiling_gmacs": {str(b): round(c, 1) for b, c in ceiling.items()},
        "ceiling_gmacs_before_after": {str(b): [round(before[b], 1), round(after[b], 1)] for b in widths},
        "int8_peak_gmacs": peak and round(peak / 1e9, 1),
        "scaled_peak_gmacs": scaled_peak and round(scaled_peak / 1e9, 1),
        "kernel": kernel_status(),
        "repeats": args.repeats,
    }


def peak_lines(peak: float | None, scaled: float | None, ceiling: dict[int, float]) -> list[str]:
    """The CPU's int8 peak, the same beside a band's fp32 work, and the kernel's ceiling as a share of
    each (nothing where not measured)."""
    if not peak:
        return []
    lines = [
        f"The CPU's int8 peak (its widest int8 multiply-add instruction alone, on operands in registers, every "
        f"thread at once): {peak:.1f} GMAC/s; the kernel's ceiling is "
        + ", ".join(f"{c / peak:.0%} of it for {b}-bit codes" for b, c in ceiling.items())
        + " (the rest: reducing the products to int32 lanes, scaling them in fp32, unpacking the codes).",
        "",
    ]
    if scaled:
        lines += [
            f"The same instruction beside the fp32 work a band costs each row per block of 32 codes (its sum "
            f"converted, the scale times x's step, the scaled sum's and the bias's fmas; on registers): "
            f"{scaled:.1f} GMAC/s, {scaled / peak:.0%} of the peak, the most a product in this format (a scale "
            f"and a bias per 32 codes, a step per 32 values of x) reaches here; the kernel's ceiling is "
            + ", ".join(f"{c / scaled:.0%} of it for {b}-bit codes" for b, c in ceiling.items())
            + ".",
            "",
        ]
    return lines


def render(result: dict) -> list[str]:
    machine, repeats = result["machine"], result["repeats"]
    ceiling = {int(b): c for b, c in result["ceiling_gmacs"].items()}
    lines = [
        f"{machine_line(machine)} Sgemv shim: {machine['gemv']}; kernel {result['kernel']}. "
        f"Medians of {repeats} runs (MLX's quantized: of {max(3, repeats // 3)}), one run.",
        "",
        "The kernel's ceiling on this CPU (its own tiles on operands already in L1, every thread at once): "
        + ", ".join(f"{c:.1f} GMAC/s for {b}-bit codes" for b, c in ceiling.items())
        + ". GMAC/s: the product's multiply-adds per second; of ceiling: that rate over the ceiling.",
        "",
        *peak_lines(result.get("int8_peak_gmacs"), result.get("scaled_peak_gmacs"), ceiling),
    ]
    lines += markdown_table(
        ["weight", "bits", "rows", "kernel ms", "kernel GMAC/s", "of ceiling", "MLX quantized ms", "fp32 BLAS ms",
         "fp32 / kernel", "MLX / kernel"],
        [
            (r["shape"], r["bits"], r["rows"], f"{r['kernel_ms']:.2f}", f"{r['kernel_gmacs']:.1f}",
             f"{r['kernel_gmacs'] / ceiling[r['bits']]:.0%}", f"{r['mlx_quantized_ms']:.1f}",
             f"{r['fp32_blas_ms']:.2f}", f"{r['fp32_blas_ms'] / r['kernel_ms']:.2f}x",
             f"{r['mlx_quantized_ms'] / r['kernel_ms']:.1f}x")
            for r in result["rows"]
        ],
    )  # fmt: skip
    lines += [
        "",
        "SwiGLU of one MLP (8960 values a row): mlx-lm's compiled `silu(gate) * up` against `silu_mul`.",
        "",
    ]
    lines += markdown_table(
        ["rows", "MLX ms", "silu_mul ms", "MLX / silu_mul"],
        [
            (
                a["rows"],
                f"{a['mlx_ms']:.3f}",
                f"{a['silu_mul_ms']:.3f}",
                f"{a['mlx_ms'] / a['silu_mul_ms']:.1f}x",
            )
            for a in result["swiglu"]
        ],
    )
    lines += [
        "",
        "A decode layer's RoPE (12 heads of 128), RMSNorm (1536 values) and attention (12 query heads,",
        "2 key-value heads, 400 tokens cached): ms per call within a chain of 56, `mx.fast` (a graph",
        "of small operations on the CPU) against the extension's one operation.",
        "",
    ]
    ops = ("rope", "rms_norm", "attention")
    return lines + markdown_table(
        ["rows", "RoPE MLX ms", "RoPE ms", "MLX / ours", "RMSNorm MLX ms", "RMSNorm ms", "MLX / ours",
         "attention MLX ms", "attention ms", "MLX / ours"],
        [
            (a["rows"], *(cell for op in ops for cell in (
                f"{a[op + '_mlx_ms']:.3f}", f"{a[op + '_ms']:.3f}", f"{a[op + '_mlx_ms'] / a[op + '_ms']:.1f}x")))
            for a in result["small_ops"]
        ],
    )  # fmt: skip


BENCHMARK = Benchmark(
    "quantized_kernel",
    "One quantized product: mlx-ssbd's CPU kernel, MLX's quantized_matmul, fp32 BLAS",
    measure,
    render,
    options=(
        option("--rows", default="1,2,4,8,16,32,64"),
        option("--bits", default="4,5,8"),
        option("--repeats", type=int, default=9),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
