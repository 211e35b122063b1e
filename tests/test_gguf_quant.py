"""GGUF quantized tensors to MLX's affine layout: exact where the formats meet, measured where not.

Every GGUF block is made of random bytes (with finite fp16 scales), so every code and scale
pattern occurs; the ``gguf`` package's own dequantizer is the reference."""

import json

from mlx_ssbd.models.gguf_import import UnsupportedGGUF, convert_gguf, converted_tensors
from mlx_ssbd.models.gguf_quant import (
    EXACT_TYPES,
    dequantize,
    pack_codes,
    to_affine,
    unpack_codes,
)

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize
from mlx.utils import tree_flatten
from test_gguf_import import gguf_name, write_gguf
from tiny import tiny_model

ROWS, COLS = 6, 512
# Where each type keeps its fp16 scales (byte offsets in a block); every other byte is random.
SCALE_BYTES = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [-2],
    "Q3_K": [-2],
    "Q2_K": [-4, -2],
}


def random_blocks(kind, rows=ROWS, cols=COLS, seed=0):
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for offset in SCALE_BYTES[kind]:
        scale = rng.uniform(1e-3, 5e-2, size=len(raw)).astype(np.float16).view(np.uint8).reshape(-1, 2)
        start = offset % size
        raw[:, start : start + 2] = scale
    return raw.reshape(rows, -1)


def reference(kind, raw, rows=ROWS, cols=COLS):
    return np.asarray(gguf_dequantize(raw, GGMLQuantizationType[kind]), np.float32).reshape(rows, cols)


@pytest.mark.parametrize("kind", EXACT_TYPES)
def test_exact_types_map_without_requantizing(kind):
    raw = random_blocks(kind)
    affine = to_affine(kind, raw, ROWS, COLS)
    assert affine.exact and affine.error is None
    assert affine.bits == {"Q8_0": 8, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5}.get(kind, 4)
    want = reference(kind, raw)
    np.testing.assert_array_equal(dequantize(affine, np.float32), want)  # exact in fp32
    # Stored as fp16, each scale and bias is rounded once: at most 2**-11 of its size per group.
    codes = unpack_codes(affine.weight, affine.bits).reshape(ROWS, -1, 32).max(axis=-1)
    bound = 2.0**-11 * (np.abs(affine.scales) * codes + np.abs(affine.biases)) + 1e-12
    err = np.abs(dequantize(affine, np.float16) - want).reshape(ROWS, -1, 32).max(axis=-1)
    assert (err <= bound).all()


@pytest.mark.parametrize("kind", ["Q6_K", "Q3_K", "Q2_K"])
def test_other_types_become_8_bit_with_their_error_measured(kind):
    raw = random_blocks(kind)
    affine = to_affine(kind, raw, ROWS, COLS)
    want = reference(kind, raw)
    assert affine.bits == 8 and not affine.exact
    err = dequantize(affine, np.float16) - want
    assert affine.error["max_abs"] == pytest.approx(float(np.abs(err).max()), rel=1e-6)
    # 8 bits over each group's range: at most half a step, plus the fp16 rounding of the stored
    # scale (times a code up to 255: 2**-11 of the range) and bias (2**-11 of the group's minimum).
    groups = want.reshape(ROWS, -1, 32)
    low, span = groups.min(-1), groups.max(-1) - groups.min(-1)
    bound = 0.5 * span / 255 * 1.001 + 2.0**-11 * (np.abs(low) + span) + 1e-6
    assert (np.abs(err).reshape(ROWS, -1, 32).max(-1) <= bound).all()


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_packing_is_mlx_layout(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, size=(5, 128), dtype=np.uint8)
    packed = pack_codes(codes, bits)
    np.testing.assert_array_equal(unpack_codes(packed, bits), codes)
    scales = rng.uniform(0.5, 1.5, size=(5, 4)).astype(np.float32)
    biases = rng.uniform(-1, 1, size=(5, 4)).astype(np.float32)
    want = (codes.reshape(5, 4, 32) * scales[..., None] + biases[..., None]).reshape(5, 128)
    got = mx.dequantize(mx.array(packed), mx.array(scales), mx.array(biases), group_size=32, bits=bits)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-6, atol=1e-6)


def write_quantized_gguf(path, model, kinds):
    """A GGUF of ``model`` whose 2-D weights are quantized by the gguf package (kinds by position)."""
    import test_gguf_import as helper
    from gguf import GGUFWriter

    class Writer(GGUFWriter):
        count = 0

        def add_tensor(self, name, array, **kw):
            if array.ndim == 2 and array.shape[-1] % 32 == 0:
                kind = kinds[Writer.count % len(kinds)]
                Writer.count += 1
                qtype = GGMLQuantizationType[kind]
                return super().add_tensor(name, gguf_quantize(array, qtype), raw_dtype=qtype)
            return super().add_tensor(name, array, **kw)

    original = helper.__dict__.get("GGUFWriter")
    import gguf

    saved = gguf.GGUFWriter
    gguf.GGUFWriter = Writer
    try:
        write_gguf(path, model, "qwen2")
    finally:
        gguf.GGUFWriter = saved
        if original is not None:
            helper.GGUFWriter = original


def test_a_quantized_gguf_becomes_a_quantized_mlx_model(tmp_path):
    from mlx_lm import load

    model = tiny_model("qwen2", seed=5, logit_scale=1.0)
    write_quantized_gguf(tmp_path / "m.gguf", model, ["Q8_0", "Q5_0", "Q4_1"])
    out = convert_gguf(tmp_path / "m.gguf", tmp_path / "out", dtype="float32")
    config = json.loads((out / "config.json").read_text())
    quantization = config["quantization"]
    assert quantization["group_size"] == 32 and quantization["mode"] == "affine"
    assert {v["bits"] for v in quantization.values() if isinstance(v, dict)} | {quantization["bits"]} == {
        4,
        5,
        8,
    }
    marker = json.loads((out / "mlx-ssbd-conversion.json").read_text())
    assert marker["format"] == 2 and marker["requantized_layers"] == {}

    loaded, _ = load(str(out))
    layers = dict(loaded.named_modules())
    assert type(layers["model.layers.0.mlp.up_proj"]).__name__ == "QuantizedLinear"
    assert type(layers["model.embed_tokens"]).__name__ == "QuantizedEmbedding"
    # The same logits as the dense model with the GGUF's own dequantized weights.
    dense = tiny_model("qwen2", seed=5, logit_scale=1.0)
    from gguf import GGUFReader

    reader = GGUFReader(str(tmp_path / "m.gguf"))
    by_name = {t.name: t for t in reader.tensors}
    weights = []
    for name, value in tree_flatten(dense.parameters()):
        t = by_name[gguf_name(name)]
        array = np.asarray(gguf_dequantize(t.data, t.tensor_type), np.float32).reshape(value.shape)
        weights.append((name, mx.array(array)))
    dense.load_weights(weights)
    x = mx.array([[1, 5, 9, 200, 17, 3]])
    np.testing.assert_allclose(np.array(loaded(x)), np.array(dense(x)), atol=1e-4, rtol=1e-4)


def test_a_tensor_type_it_cannot_read_is_named():
    class Tensor:
        name = "blk.0.ffn_up.weight"
        tensor_type = GGMLQuantizationType.Q8_1
        shape = (64, 4)
        data = np.zeros((4, 72), np.uint8)

    class Reader:
        tensors = [Tensor()]

    with pytest.raises(UnsupportedGGUF, match=r"blk\.0\.ffn_up\.weight.*Q8_1"):
        list(converted_tensors(Reader(), {"model_type": "qwen2"}))


@pytest.mark.parametrize("kind", ["Q4_K", "Q5_0", "Q6_K"])
def test_converting_in_row_chunks_changes_nothing(kind, monkeypatch):
    import mlx_ssbd.models.gguf_quant as gq

    raw = random_blocks(kind, rows=12)
    whole = to_affine(kind, raw, 12, COLS)
    monkeypatch.setattr(gq, "CHUNK_WEIGHTS", 5 * COLS)  # chunks of 5, 5 and 2 rows
    chunked = to_affine(kind, raw, 12, COLS)
    for name in ("weight", "scales", "biases"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(whole, name))
    assert chunked.exact == whole.exact
    if not whole.exact:
        assert chunked.error["max_abs"] == whole.error["max_abs"]
        assert chunked.error["relative_rms"] == pytest.approx(whole.error["relative_rms"], rel=1e-9)
