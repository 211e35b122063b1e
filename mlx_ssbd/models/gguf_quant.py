"""GGUF quantized tensors as MLX affine quantized weights, without requantizing where the formats meet.

Contract: ``to_affine(tensor_type, blocks, rows, cols)`` takes one GGUF tensor's raw blocks (the
``gguf`` reader's ``tensor.data``: ``rows`` x bytes, uint8) and returns an ``Affine``: codes packed
as MLX packs them (a little-endian bit stream of ``bits``-bit codes in uint32 words, one row per
output feature), one scale and one bias per 32 weights (``w = scale * code + bias``), and whether
the mapping is exact. Nothing here loads MLX; ``pack_codes`` is the only layout knowledge.

Which GGUF types map exactly (every GGUF block is a whole number of MLX groups of 32):

| GGUF | a group of 32 in GGUF                 | MLX bits | scale    | bias      |
|------|---------------------------------------|----------|----------|-----------|
| Q4_0 | d * (q - 8), q in 0..15               | 4        | d        | -8 d      |
| Q4_1 | d * q + m                             | 4        | d        | m         |
| Q5_0 | d * (q - 16), q in 0..31              | 5        | d        | -16 d     |
| Q5_1 | d * q + m                             | 5        | d        | m         |
| Q8_0 | d * q, q in -128..127                 | 8        | d        | -128 d    |
| Q4_K | d * sc * q - dmin * m (per 32)        | 4        | d * sc   | -dmin * m |
| Q5_K | d * sc * q - dmin * m (per 32)        | 5        | d * sc   | -dmin * m |

Exact in fp32; stored as fp16 (as mlx-community's models are) a scale ``d * sc`` (an fp16 times a
6-bit integer) is rounded to fp16, a relative error of at most 2**-11 per scale, far below the
4-bit step itself (tests/test_gguf_quant.py checks both). Every other type (Q6_K's 16-weight
sub-blocks, Q2_K, Q3_K, the IQ types) has no exact MLX form: it is dequantized with the ``gguf``
package and requantized to MLX 8-bit, group 32, the nearest MLX format; ``Affine.error`` says
what that costs (max |error|, RMS relative to the weights') and the importer records it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP = 32
FALLBACK_BITS = 8
EXACT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K")


@dataclass
class Affine:
    """One weight matrix in MLX's affine layout (numpy arrays; ``weight`` is uint32)."""

    weight: np.ndarray  # [rows, cols * bits / 32] uint32
    scales: np.ndarray  # [rows, cols / 32] float32
    biases: np.ndarray  # [rows, cols / 32] float32
    bits: int
    exact: bool
    error: dict | None = None  # for an inexact mapping: its error against the GGUF values


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack ``codes`` ([rows, cols], values < 2**bits) as MLX does: a little-endian bit stream.

    Every 8 codes fill exactly ``bits`` bytes, so the stream is built 8 codes at a time.
    """
    rows, cols = codes.shape
    eight = codes.reshape(rows, cols // 8, 8).astype(np.uint64)
    shifts = (np.arange(8, dtype=np.uint64) * np.uint64(bits)).reshape(1, 1, 8)
    words = np.bitwise_or.reduce(eight << shifts, axis=-1)  # [rows, cols / 8] uint64
    packed = words.view(np.uint8).reshape(rows, cols // 8, 8)[:, :, :bits]
    return np.ascontiguousarray(packed).reshape(rows, cols * bits // 8).view(np.uint32)


def unpack_codes(weight: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of ``pack_codes`` (for tests and error measurement)."""
    rows = weight.shape[0]
    raw = weight.view(np.uint8).reshape(rows, -1, bits)
    padded = np.zeros(raw.shape[:2] + (8,), dtype=np.uint8)
    padded[:, :, :bits] = raw
    words = padded.view(np.uint64)  # [rows, cols / 8, 1]
    shifts = (np.arange(8, dtype=np.uint64) * np.uint64(bits)).reshape(1, 1, 8)
    codes = (words >> shifts) & np.uint64((1 << bits) - 1)
    return codes.reshape(rows, -1).astype(np.uint8)


def _f16(column: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(column).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, half: int) -> np.ndarray:
    """GGUF's 4-bit layout: a run of ``half`` bytes holds codes i (low nibble) and i + half (high)."""
    n = qs.shape[0]
    split = qs.reshape(n, -1, 1, half) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (split & np.uint8(0x0F)).reshape(n, -1)


def _high_bits(qh: np.ndarray, count: int) -> np.ndarray:
    """Bit i of a little-endian bit field, for i < count (Q5_0 / Q5_1)."""
    bits = np.unpackbits(qh, axis=-1, bitorder="little")
    return bits[:, :count]


def _legacy(kind: str, b: np.ndarray):
    """(codes [n, 32], scale [n], bias [n], bits) of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 blocks."""
    d = _f16(b[:, 0:2])[:, 0]
    if kind == "Q8_0":
        q = b[:, 2:34].view(np.int8).astype(np.int16) + 128
        return q.astype(np.uint8), d, -128.0 * d, 8
    has_min = kind in ("Q4_1", "Q5_1")
    m = _f16(b[:, 2:4])[:, 0] if has_min else None
    rest = b[:, 4:] if has_min else b[:, 2:]
    if kind.startswith("Q5"):
        qh, qs = rest[:, :4], rest[:, 4:]
        q = _nibbles(qs, 16) | (_high_bits(qh, 32) << np.uint8(4))
        bits, offset = 5, 16.0
    else:
        q = _nibbles(rest, 16)
        bits, offset = 4, 8.0
    return q, d, (m if has_min else -offset * d), bits


def _k_quant(kind: str, b: np.ndarray):
    """(codes [n * 8, 32], scale [n * 8], bias [n * 8], bits) of Q4_K / Q5_K super-blocks."""
    from gguf.quants import Q4_K

    n = b.shape[0]
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, m = Q4_K.get_scale_min(b[:, 4:16])
    scale = (d * sc.astype(np.float32)).reshape(-1)
    bias = -(dmin * m.astype(np.float32)).reshape(-1)
    if kind == "Q4_K":
        q = _nibbles(b[:, 16:144], 32)
        return q.reshape(n * 8, 32), scale, bias, 4
    qh, qs = b[:, 16:48], b[:, 48:176]
    low = _nibbles(qs, 32).reshape(n, 8, 32)
    high = (qh.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & np.uint8(1)
    q = low | (high << np.uint8(4))
    return q.reshape(n * 8, 32), scale, bias, 5


CHUNK_WEIGHTS = 1 << 22  # weights converted at a time: bounds the temporary arrays (~100 MB)


def to_affine(kind: str, blocks: np.ndarray, rows: int, cols: int) -> Affine:
    """See the module docstring. ``kind`` is the GGUF type's name (``GGMLQuantizationType.name``).
    Large tensors are converted a few thousand rows at a time."""
    if cols % GROUP:
        raise ValueError(f"{cols} columns are not a multiple of {GROUP}")
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(rows, -1)
    step = max(1, CHUNK_WEIGHTS // cols)
    parts = [_rows_to_affine(kind, raw[r : r + step], cols) for r in range(0, rows, step)]
    first = parts[0]
    affine = (
        first
        if len(parts) == 1
        else Affine(
            np.concatenate([p.weight for p in parts]),
            np.concatenate([p.scales for p in parts]),
            np.concatenate([p.biases for p in parts]),
            first.bits,
            first.exact,
        )
    )
    if not affine.exact:  # each part carries its error sums; the tensor's error combines them
        affine.error = _combined_error([p.error for p in parts])
    return affine


def _rows_to_affine(kind: str, raw: np.ndarray, cols: int) -> Affine:
    """``to_affine`` of some rows; an inexact one's ``error`` holds its raw error sums."""
    from gguf import GGMLQuantizationType
    from gguf.constants import GGML_QUANT_SIZES

    rows = raw.shape[0]
    qtype = GGMLQuantizationType[kind]
    if kind in EXACT_TYPES:
        block_bytes = GGML_QUANT_SIZES[qtype][1]
        q, scale, bias, bits = (_k_quant if kind.endswith("_K") else _legacy)(
            kind, raw.reshape(-1, block_bytes)
        )
        return Affine(
            pack_codes(q.reshape(rows, cols), bits),
            scale.reshape(rows, cols // GROUP).astype(np.float32),
            bias.reshape(rows, cols // GROUP).astype(np.float32),
            bits,
            True,
        )
    from gguf.quants import dequantize

    dense = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(rows, cols)
    affine = requantize(dense, FALLBACK_BITS)
    affine.error = _error_sums(dense, affine)
    return affine


def requantize(dense: np.ndarray, bits: int) -> Affine:
    """Round-to-nearest affine quantization of ``dense`` to ``bits`` bits, groups of 32 (as MLX's
    ``quantize``: the group's min and max span the codes)."""
    rows, cols = dense.shape
    groups = dense.reshape(rows, cols // GROUP, GROUP)
    low, high = groups.min(axis=-1), groups.max(axis=-1)
    levels = (1 << bits) - 1
    scale = (high - low) / levels
    safe = np.where(scale == 0, 1.0, scale)
    q = np.clip(np.rint((groups - low[..., None]) / safe[..., None]), 0, levels).astype(np.uint8)
    return Affine(
        pack_codes(q.reshape(rows, cols), bits), scale.astype(np.float32), low.astype(np.float32), bits, False
    )


def dequantize(affine: Affine, scale_dtype=np.float32) -> np.ndarray:
    """The dense fp32 matrix an ``Affine`` stands for (scales and biases rounded to ``scale_dtype``)."""
    codes = unpack_codes(affine.weight, affine.bits).astype(np.float32)
    rows, cols = codes.shape
    scale = affine.scales.astype(scale_dtype).astype(np.float32)[..., None]
    bias = affine.biases.astype(scale_dtype).astype(np.float32)[..., None]
    return (codes.reshape(rows, cols // GROUP, GROUP) * scale + bias).reshape(rows, cols)


def _error_sums(dense: np.ndarray, affine: Affine) -> dict:
    err = (dequantize(affine, np.float16) - dense).astype(np.float64)
    return {
        "max_abs": float(np.abs(err).max()),
        "err_sq": float(np.sum(err**2)),
        "sq": float(np.sum(dense.astype(np.float64) ** 2)),
    }


def _combined_error(parts: list[dict]) -> dict:
    """How far an inexact ``Affine`` is from the GGUF values it replaces: max |error| and the error's
    RMS relative to the weights' RMS."""
    sq = sum(p["sq"] for p in parts) or 1.0
    return {
        "max_abs": max(p["max_abs"] for p in parts),
        "relative_rms": float(np.sqrt(sum(p["err_sq"] for p in parts) / sq)),
    }
