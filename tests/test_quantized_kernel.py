"""The CPU kernel for quantized products (mlx_ssbd/platform/native) against MLX's own, and the
model path through it: every bit width, group size and scale dtype, odd shapes, 1-64 rows, x
rounded to int8 per block of 32 exactly as documented, each row's result independent of the rows
beside it, every SIMD path bit for bit the same, SSBD at beta 0 equal to RT on a quantized model
(the build: ``test_kernel_build``)."""

import os
import random
import subprocess
from pathlib import Path

from mlx_ssbd.platform import extension, quantized

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from tiny import tiny_model

KERNEL = extension.kernel()
if KERNEL is None:
    if os.environ.get("CI"):  # CI installs a compiler: the kernel must be there
        raise RuntimeError(f"the CPU kernel is missing in CI: {extension.kernel_status()}")
    pytest.skip(f"CPU kernel not available: {extension.kernel_status()}", allow_module_level=True)

NATIVE = Path(quantized.__file__).with_name("native")


def product(x, q, s, b, group, bits):
    return KERNEL.quantized_matmul(x, q, s, b, group, bits)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_kernel_is_the_weights_times_x_rounded_per_block(bits, group):
    """Exactly the stored weights times x rounded to int8 steps per block of 32 (up to fp32 sums in
    another order), and within that rounding's bound of MLX's own product on the exact x."""
    key = mx.random.key(bits * 1000 + group)
    shapes = [
        (1, 13, 256),
        (2, 7, 384),
        (3, 33, 128),
        (16, 5, 512),
        (64, 21, 256),
        (5, 9, 160),
        (9, 11, 1920),
    ]
    for rows, n, k in shapes:
        if k % group:
            continue
        k1, k2, key = mx.random.split(key, 3)
        w = mx.random.normal((n, k), key=k1)
        x = mx.random.normal((rows, k), key=k2)
        q, s, b = mx.quantize(w, group_size=group, bits=bits)
        weights = mx.dequantize(q, s, b, group_size=group, bits=bits)
        rounded = extension.rounded_activations(x)
        ours = product(x, q, s, b, group, bits)
        want = rounded @ weights.T
        scale = mx.max(mx.abs(want)).item()
        assert mx.max(mx.abs(ours - want)).item() <= 5e-6 * scale, (rows, n, k)
        theirs = mx.quantized_matmul(x, q, s, b, transpose=True, group_size=group, bits=bits)
        bound = mx.abs(x - rounded) @ mx.abs(weights).T + 1e-5 * scale
        assert mx.all(mx.abs(ours - theirs) <= bound).item(), (rows, n, k)
        assert mx.max(mx.abs(x - rounded)).item() > 0  # the rounding is real, so the bound is tight


def test_rounding_is_half_a_step_of_the_block_s_largest_value():
    x = mx.random.normal((3, 128), key=mx.random.key(9)) * mx.array([1.0, 10.0, 0.01])[:, None]
    x = mx.concatenate([x, mx.zeros((1, 128))])  # an all-zero row stays zero
    rounded = extension.rounded_activations(x)
    blocks = x.reshape(4, 4, 32)
    step = mx.max(mx.abs(blocks), axis=-1, keepdims=True) / 127
    err = mx.abs(rounded.reshape(4, 4, 32) - blocks)
    assert mx.all(err <= step / 2 * (1 + 1e-5)).item()
    assert mx.array_equal(rounded[3], x[3]).item()
    # one step per 96 values instead: blocks of 96, 32 (the last), each its own largest value
    coarse = extension.rounded_activations(x[:, :128], block=96)
    for lo, hi in ((0, 96), (96, 128)):
        part = x[:, lo:hi]
        step = mx.max(mx.abs(part), axis=-1, keepdims=True) / 127
        assert mx.all(mx.abs(coarse[:, lo:hi] - part) <= step / 2 * (1 + 1e-5)).item()
    assert not mx.array_equal(coarse, rounded).item()


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("groups", [3, 8, 12, 28, 29, 31])  # whole sets of 8 and every kind of rest
def test_half_precision_scales_are_read_as_stored(dtype, groups):
    w = mx.random.normal((40, 32 * groups), key=mx.random.key(11))
    x = mx.random.normal((5, 32 * groups), key=mx.random.key(12))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    s, b = s.astype(dtype), b.astype(dtype)
    for rows in (1, 5):  # a decode step's path and the few-rows one
        got = product(x[:rows], q, s, b, 32, 4)
        want = product(x[:rows], q, s.astype(mx.float32), b.astype(mx.float32), 32, 4)
        assert mx.array_equal(got, want).item(), rows


@pytest.mark.parametrize("bits", [4, 5, 8])
def test_each_row_gets_what_it_would_get_alone(bits):
    """A verify pass of many tokens gives each token bit for bit its one-token decode result (k of
    13 quads and a half: a last quad of two blocks)."""
    w = mx.random.normal((70, 1728), key=mx.random.key(1))
    x = mx.random.normal((64, 1728), key=mx.random.key(2))
    q, s, b = mx.quantize(w, group_size=64, bits=bits)
    together = product(x, q, s, b, 64, bits)
    for rows in (1, 2, 3, 5, 16, 64):
        part = product(x[:rows], q, s, b, 64, bits)
        assert mx.array_equal(part, together[:rows]).item(), rows
    alone = mx.concatenate([product(x[i : i + 1], q, s, b, 64, bits) for i in range(64)])
    assert mx.array_equal(alone, together).item()


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
def test_banded_products_give_each_row_what_it_would_get_alone(bits):
    """Banded weights (a routed layer's) over a long K (54 blocks), with the layer's bias: a pass of
    many rows gives each row bit for bit what it gets alone (through the tiles of 16 rows, their
    tails of 8, 4, 2 and 1, and one row), and the same as the weight in MLX's layout."""
    w = mx.random.normal((48, 1728), key=mx.random.key(4))
    x = mx.random.normal((64, 1728), key=mx.random.key(5))
    bias = mx.random.normal((48,), key=mx.random.key(6))
    stored = mx.quantize(w, group_size=64, bits=bits)
    banded = [quantized.band_leaf(leaf, a, bits) for leaf, a in zip(quantized.LEAVES, stored)]

    def banded_product(rows):
        return KERNEL.quantized_matmul(rows, *banded, 64, bits, bias=bias, banded=True)

    together = banded_product(x)
    assert mx.array_equal(together, KERNEL.quantized_matmul(x, *stored, 64, bits, bias=bias)).item()
    for rows in (2, 3, 16, 17):
        assert mx.array_equal(banded_product(x[:rows]), together[:rows]).item(), rows
    alone = mx.concatenate([banded_product(x[i : i + 1]) for i in range(64)])
    assert mx.array_equal(alone, together).item()


def test_leading_dimensions_and_dtypes_are_kept():
    w = mx.random.normal((40, 128), key=mx.random.key(3))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((2, 3, 128), key=mx.random.key(4))
    out = product(x, q, s, b, 32, 4)
    assert out.shape == (2, 3, 40) and out.dtype == mx.float32
    assert mx.array_equal(out.reshape(6, 40), product(x.reshape(6, 128), q, s, b, 32, 4)).item()
    half = product(x.astype(mx.float16), q, s.astype(mx.float16), b.astype(mx.float16), 32, 4)
    assert half.dtype == mx.float16
    assert product(mx.zeros((0, 128)), q, s, b, 32, 4).shape == (0, 40)


def test_strided_inputs_give_what_contiguous_ones_give():
    w = mx.random.normal((80, 256), key=mx.random.key(6))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((256, 5), key=mx.random.key(7)).T  # a transposed view, not row-contiguous
    qs, ss, bs = q[::2], s[::2], b[::2]  # strided views of evaluated weights
    mx.eval(x, qs, ss, bs)
    want = product(
        mx.array(x.tolist()),
        mx.array(qs.tolist(), dtype=mx.uint32),
        mx.array(ss.tolist()),
        mx.array(bs.tolist()),
        32,
        4,
    )
    assert mx.array_equal(product(x, qs, ss, bs, 32, 4), want).item()


def test_a_fused_bias_is_the_same_addition_as_adding_it_afterwards():
    w = mx.random.normal((40, 128), key=mx.random.key(12))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((2, 3, 128), key=mx.random.key(13))
    bias = mx.random.normal((40,), key=mx.random.key(14))
    fused = KERNEL.quantized_matmul(x, q, s, b, 32, 4, bias=bias)
    assert mx.array_equal(fused, product(x, q, s, b, 32, 4) + bias).item()
    half = bias.astype(mx.float16)  # promoted to fp32 exactly, as MLX's addition promotes it
    fused = KERNEL.quantized_matmul(x, q, s, b, 32, 4, bias=half)
    assert mx.array_equal(fused, product(x, q, s, b, 32, 4) + half).item()
    with pytest.raises(ValueError, match="bias must be 1-D"):
        KERNEL.quantized_matmul(x, q, s, b, 32, 4, bias=mx.zeros((41,)))


def test_bad_arguments_are_refused_with_a_reason():
    w = mx.random.normal((8, 128), key=mx.random.key(5))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    with pytest.raises(ValueError, match="bits must be"):
        KERNEL.quantized_matmul(mx.zeros((1, 128)), q, s, b, 32, 7)
    with pytest.raises(ValueError, match="group_size must be 32, 64 or 128"):
        KERNEL.quantized_matmul(mx.zeros((1, 192)), q, s, b, 96, 4)
    with pytest.raises(ValueError, match="shapes do not match"):
        KERNEL.quantized_matmul(mx.zeros((1, 96)), q, s, b, 32, 4)
    with pytest.raises(ValueError, match="uint32"):
        KERNEL.quantized_matmul(mx.zeros((1, 128)), w, s, b, 32, 4)


def quantized_tiny(bits=4, seed=0):
    model = tiny_model("qwen2", seed=seed)
    nn.quantize(model, group_size=32, bits=bits)
    mx.eval(model.parameters())
    return model


class RoundedLinear(nn.QuantizedLinear):
    """MLX's own quantized layer fed x rounded as the kernel rounds it: the kernel's contract."""

    def __call__(self, x):
        return super().__call__(extension.rounded_activations(x))


class RoundedEmbedding(nn.QuantizedEmbedding):
    def as_linear(self, x):
        return super().as_linear(extension.rounded_activations(x))


def test_a_quantized_model_runs_through_the_kernel_with_mlx_s_logits():
    model = quantized_tiny(bits=4)
    x = mx.array([[3, 17, 40, 2, 9, 11, 250]])
    exact = model(x)
    for _, m in model.named_modules():
        m.__class__ = {nn.QuantizedLinear: RoundedLinear, nn.QuantizedEmbedding: RoundedEmbedding}.get(
            type(m), type(m)
        )
    want = model(x)
    for _, m in model.named_modules():
        m.__class__ = {RoundedLinear: nn.QuantizedLinear, RoundedEmbedding: nn.QuantizedEmbedding}.get(
            type(m), type(m)
        )
    routed = quantized.route_quantized_layers(model)
    assert routed == 2 * 7 + 2  # seven projections per layer, the output layer, the embedding
    assert all(type(m) is not nn.QuantizedLinear for _, m in model.named_modules())
    got = model(x)
    scale = mx.max(mx.abs(want)).item()
    assert mx.max(mx.abs(got - want)).item() <= 1e-4 * scale
    assert mx.max(mx.abs(got - exact)).item() <= 0.05 * scale  # what the rounding costs here


@pytest.mark.parametrize("bits", [3, 4, 5, 6, 8])
def test_routing_repacks_4_to_8_bit_layers_in_bands_with_the_same_products(bits):
    model = quantized_tiny(bits=bits)
    layer, head = model.model.layers[0].mlp.up_proj, model.lm_head  # 128 rows; the vocabulary's 259
    stored = [layer[leaf] for leaf in ("weight", "scales", "biases")]
    h = mx.random.normal((17, 64), key=mx.random.key(3))
    want = KERNEL.quantized_matmul(h, *stored, layer.group_size, bits)
    quantized.route_quantized_layers(model)
    assert getattr(layer, "banded", False) == (bits in (4, 5, 6, 8))
    assert not getattr(head, "banded", False)  # not whole bands: read in MLX's layout
    assert [layer[leaf].shape for leaf in ("weight", "scales", "biases")] == [a.shape for a in stored]
    assert [layer[leaf].dtype for leaf in ("weight", "scales", "biases")] == [a.dtype for a in stored]
    assert mx.array_equal(layer(h), want).item()  # the same bits from the bands
    if bits in (4, 5, 6, 8):
        assert not mx.array_equal(layer["weight"], stored[0]).item()  # repacked, not copied
    for leaf, before in zip(quantized.LEAVES, stored):
        assert mx.array_equal(quantized.as_stored(layer, leaf), before).item()
    plain = nn.QuantizedLinear(64, 32, group_size=32, bits=bits)  # never routed: as it is
    assert quantized.as_stored(plain, "weight") is plain["weight"]


@pytest.mark.parametrize("bits", [5, 6])
def test_5_and_6_bit_codes_take_a_band_s_order_and_back(bits):
    """Each row's blocks of 32 codes: the same codes in another order of their bits (the low 4 bits
    packed as 4-bit codes, each higher bit in a word of its own), and the inverse gives MLX's back."""
    w = mx.random.normal((3, 96), key=mx.random.key(5))
    q, _, _ = mx.quantize(w, group_size=32, bits=bits)
    ordered = KERNEL.band_codes(q, bits)
    assert ordered.shape == q.shape and ordered.dtype == mx.uint32
    assert mx.array_equal(KERNEL.band_codes(ordered, bits, inverse=True), q).item()
    codes = mx.dequantize(q, mx.ones((3, 3)), mx.zeros((3, 3)), group_size=32, bits=bits).astype(mx.uint32)
    low = mx.dequantize(
        ordered.reshape(3, 3, bits)[..., :4].reshape(3, 12),
        mx.ones((3, 3)),
        mx.zeros((3, 3)),
        group_size=32,
        bits=4,
    )
    assert mx.array_equal(low.astype(mx.uint32), codes % 16).item()
    assert mx.array_equal(KERNEL.band_codes(q[:, :5], 4), q[:, :5]).item()  # 4 and 8 bits: as they are
    with pytest.raises(ValueError, match="whole blocks"):
        KERNEL.band_codes(q[:, : bits - 1], bits)
    with pytest.raises(ValueError, match="4, 5, 6 or 8 bits"):
        KERNEL.band_codes(q, 3)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_banded_embedding_looks_up_the_rows_it_stored(bits):
    embedding = nn.QuantizedEmbedding.from_embedding(nn.Embedding(64, 128), group_size=32, bits=bits)
    ids = mx.array([[1, 17, 63], [0, 5, 5]])
    x = mx.random.normal((3, 128), key=mx.random.key(4))
    rows = embedding(ids)
    product = KERNEL.quantized_matmul(
        x, embedding["weight"], embedding["scales"], embedding["biases"], 32, bits
    )
    quantized.route_quantized_layers(nn.Sequential(embedding))
    assert embedding.banded
    assert mx.array_equal(embedding(ids), rows.astype(mx.float32)).item()
    assert mx.array_equal(embedding.as_linear(x), product).item()  # a tied output layer


def test_banded_weights_must_be_whole_bands_of_4_to_8_bits():
    q, s, b = mx.quantize(mx.random.normal((24, 64)), group_size=32, bits=4)
    with pytest.raises(ValueError, match="banded weights"):
        KERNEL.quantized_matmul(mx.ones((1, 64)), q, s, b, 32, 4, banded=True)
    q, s, b = mx.quantize(mx.random.normal((32, 64)), group_size=32, bits=3)
    with pytest.raises(ValueError, match="banded weights"):
        KERNEL.quantized_matmul(mx.ones((1, 64)), q, s, b, 32, 3, banded=True)


def test_routed_layers_keep_their_scales_as_stored():
    from mlx_ssbd.models.loading import to_compute_dtype

    model = quantized_tiny(bits=4)
    model.set_dtype(mx.float16)
    quantized.route_quantized_layers(model)
    keep = quantized.stored_parameters(model)
    assert "model.layers.0.mlp.up_proj.scales" in keep and "lm_head.biases" in keep
    to_compute_dtype(model, keep=keep)
    params = dict(tree_flatten(model.parameters()))
    assert params["model.layers.0.mlp.up_proj.scales"].dtype == mx.float16
    assert params["model.norm.weight"].dtype == mx.float32
    assert model(mx.array([[1, 2, 3]])).dtype == mx.float32


@pytest.mark.parametrize("bits", [4, 8])
def test_beta_zero_ssbd_equals_rt_on_a_quantized_model(bits):
    from mlx_ssbd import StreamTranslator, TranslatorConfig

    from test_translator import SMALL, random_stream
    from tiny import byte_tokenizer

    model = quantized_tiny(bits=bits, seed=2)
    assert quantized.route_quantized_layers(model) > 0
    tok = byte_tokenizer()
    rng = random.Random(bits)
    for _ in range(3):
        prefixes = random_stream(rng)
        outputs = {}
        for policy in ("rt", "ssbd"):
            tr = StreamTranslator(
                model,
                tok,
                family="chatml",
                source_lang="en",
                target_lang="de",
                config=TranslatorConfig(policy=policy, beta=0.0, **SMALL),
            )
            last = len(prefixes) - 1
            outputs[policy] = [tr.update(p, final=i == last).output_ids for i, p in enumerate(prefixes)]
        assert outputs["ssbd"] == outputs["rt"], prefixes


def test_dense_path_dequantizes_every_quantized_layer():
    model = quantized_tiny(bits=4)
    x = mx.array([[5, 6, 7, 8]])
    want = model(x)
    assert quantized.dequantize_layers(model) == 2 * 7 + 2  # and the embedding
    assert not any(
        isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, m in model.named_modules()
    )
    assert mx.max(mx.abs(model(x) - want)).item() <= 1e-4 * mx.max(mx.abs(want)).item()


def test_the_in_cache_ceiling_is_a_rate_for_every_width_the_kernel_knows():
    rates = {bits: KERNEL.in_cache_rate(bits, 0.01) for bits in (2, 3, 4, 5, 6, 7, 8)}
    assert rates.pop(7) == 0.0  # a width the kernel does not know
    assert all(rate > 1e6 for rate in rates.values()), rates  # multiply-adds per second, not seconds


@pytest.mark.parametrize(
    "scaled, timed_on",
    [(False, ("avx512", "avxvnni", "avx2")), (True, ("avx512",))],  # alone; beside a band's fp32 work
)
def test_the_int8_peak_is_a_rate_where_the_build_times_it_and_none_elsewhere(scaled, timed_on):
    from mlx_ssbd.evaluation.passes import int8_peak

    rate = KERNEL.int8_peak_rate(0.01, scaled=scaled)
    if KERNEL.simd_path() in timed_on:
        assert 1e6 < rate < float("inf")  # multiply-adds per second, not seconds
        assert int8_peak(KERNEL, tries=2, seconds=0.01, scaled=scaled) > 1e6
    else:
        assert rate == 0.0 and int8_peak(KERNEL, tries=1, seconds=0.01, scaled=scaled) is None


def test_a_token_s_multiply_adds_and_weight_bytes_are_counted_over_the_quantized_products():
    from mlx_ssbd.evaluation.passes import multiply_adds, product_bytes

    model = quantized_tiny(bits=4)
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    tied = not hasattr(model, "lm_head")
    want = sum(m.weight.shape[0] * m.weight.shape[1] * 8 for m in layers)
    want += (
        model.model.embed_tokens.weight.shape[0] * model.model.embed_tokens.weight.shape[1] * 8 if tied else 0
    )
    assert multiply_adds(model) == {4: want} and want > 0
    assert multiply_adds(tiny_model("qwen2")) == {}  # a dense model has none
    products = layers + ([model.model.embed_tokens] if tied else [])
    codes = sum(m.weight.size * 4 for m in products)  # uint32 words
    groups = sum(m.weight.size * 8 // m.group_size for m in products)  # 8 codes a word
    assert product_bytes(model) == codes + groups * 2 * products[0].scales.dtype.size  # a scale and a bias
    assert product_bytes(tiny_model("qwen2")) == 0


def test_openblas_runs_on_one_thread_while_a_model_runs_through_the_kernel():
    from mlx_ssbd.platform import backend

    if backend.BLAS.name != "openblas":
        pytest.skip(f"BLAS here is {backend.BLAS.name}: its threads are left alone")
    backend.quiet_blas_workers(False)  # whatever a model routed before left
    default = backend.blas_threads()
    model = quantized_tiny(bits=4)
    try:
        assert quantized.route_quantized_layers(model) > 0
        assert backend.blas_threads() == 1
        quantized.dequantize_layers(model)
        assert quantized.route_quantized_layers(model) == 0  # a dense model: BLAS's threads back
        assert backend.blas_threads() == default
    finally:
        backend.quiet_blas_workers(False)


CHECK_PATH = """
import hashlib, sys
import mlx_ssbd, mlx.core as mx
from mlx_ssbd.platform import extension
from mlx_ssbd.platform.quantized import LEAVES, band_leaf
k = extension.kernel()
assert k is not None, extension.kernel_status()
digest = hashlib.sha256()
for bits in (2, 3, 4, 5, 6, 8):
    for scales in (mx.float32, mx.float16):
        w = mx.random.normal((37, 1728), key=mx.random.key(bits))  # a last quad of 2 blocks
        x = mx.random.normal((15, 1728), key=mx.random.key(bits + 1))
        q, s, b = mx.quantize(w, group_size=64, bits=bits)
        out = k.quantized_matmul(x, q, s.astype(scales), b.astype(scales), 64, bits)
        alone = mx.concatenate(
            [k.quantized_matmul(x[i : i + 1], q, s.astype(scales), b.astype(scales), 64, bits) for i in range(15)]
        )
        assert mx.array_equal(alone, out).item(), bits
        digest.update(bytes(memoryview(out)))
        # every remainder after the tiles of 4 rows (quads) or of 16, 8, 4, 2 and 1 (bands)
        for rows in (6, 7, 9, 12):
            part = k.quantized_matmul(x[:rows], q, s.astype(scales), b.astype(scales), 64, bits)
            assert mx.array_equal(part, out[:rows]).item(), (bits, rows)
    if bits >= 4:  # whole bands, repacked as at load, and a tile of 16 rows
        w = mx.random.normal((48, 1536), key=mx.random.key(bits + 2))
        x17 = mx.random.normal((17, 1536), key=mx.random.key(bits + 3))
        q16, s16, b16 = mx.quantize(w, group_size=32, bits=bits)
        s16, b16 = s16.astype(mx.float16), b16.astype(mx.float16)
        out = k.quantized_matmul(x17, q16, s16, b16, 32, bits)
        held = (band_leaf(leaf, a, bits) for leaf, a in zip(LEAVES, (q16, s16, b16)))
        bands = k.quantized_matmul(x17, *held, 32, bits, banded=True)
        assert mx.array_equal(bands, out).item(), bits
        digest.update(bytes(memoryview(out)))
    # fp16 scales and biases in fp16's subnormal range (each build converts them its own way)
    tiny = k.quantized_matmul(x, q, (s * 2**-12).astype(mx.float16), (b * 2**-12).astype(mx.float16), 64, bits)
    digest.update(bytes(memoryview(tiny)))
# The small operations, odd sizes (lane tails) included, with values wide enough for exp's range.
x = 8 * mx.random.normal((2, 3, 7, 40), key=mx.random.key(7))
kv = mx.random.normal((2, 1, 19, 40), key=mx.random.key(8))
inv = 1.0 / (10000.0 ** (mx.arange(0, 36, 2) / 36))
for out in (
    k.silu_mul(x, x[:, ::-1]),
    k.rope(x, 36, traditional=False, inv_freqs=inv, scale=1.0, offset=mx.array(5)),
    k.rope(x, 36, traditional=True, inv_freqs=inv, scale=0.5, offset=mx.array([3, 11])),
    k.rms_norm(x, mx.arange(40) / 7.0, 1e-6),
    k.attention(x[:, :, :, :32], kv[..., :32], kv, scale=0.2, mask_mode="causal"),
    k.attention(x, kv, kv[..., :24], scale=0.7),
    *k.logit_stats(x.reshape(-1, 40)[:, :37] * 9, mx.array([5, 0, 3])),
):
    digest.update(bytes(memoryview(out)))
print(k.simd_path(), digest.hexdigest())
"""


def run_path(path=None):
    env = dict(os.environ)
    env.pop("MLX_SSBD_QMM_SIMD", None)
    if path:
        env["MLX_SSBD_QMM_SIMD"] = path
    result = subprocess.run(
        [os.sys.executable, "-c", CHECK_PATH], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


@pytest.mark.parametrize("path", ["avxvnni", "avx2", "generic"])
def test_every_narrower_path_of_this_cpu_gives_the_same_bits(path):
    """The narrower builds (MLX_SSBD_QMM_SIMD) compute exactly what the widest path computes: the
    quantized products and the small operations (SwiGLU, RoPE, RMSNorm, attention, logit statistics)
    alike."""
    if path != "generic" and KERNEL.simd_path() not in ("avx512", "avxvnni", "avx2"):
        pytest.skip("this CPU has no AVX2")
    widest, narrow = run_path(), run_path(path)
    if path == "avxvnni" and narrow[0] == "avx2":
        pytest.skip("this CPU (or the compiler that built the kernel) has no AVX-VNNI")
    assert narrow[0] == path
    assert narrow[1] == widest[1], f"{path} differs from {widest[0]}"


@pytest.mark.skipif(KERNEL is None, reason="the CPU kernel is not built here")
def test_products_on_two_streams_at_once_give_each_its_own_bits():
    """Two threads, each with a stream of its own, multiply through the kernel at the same time:
    its thread pool takes one product at a time and the other runs on its caller, so every result
    is the one each product gives alone, and neither waits forever."""
    import threading

    model = nn.Sequential(nn.Linear(1024, 2048))
    nn.quantize(model, group_size=32, bits=4)
    assert quantized.route_quantized_layers(model) == 1
    xs = [mx.random.normal((16, 1024), key=mx.random.key(i)) for i in range(2)]
    alone = [model(x) for x in xs]
    mx.eval(alone)
    wrong = []

    def multiply(i):
        stream = mx.new_stream(mx.cpu)
        for _ in range(30):
            with mx.stream(stream):
                got = model(xs[i])
            mx.eval(got)
            wrong.extend([i] if not mx.array_equal(got, alone[i]).item() else [])

    threads = [threading.Thread(target=multiply, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a product never finished"
    assert wrong == []


def test_the_operations_are_timed_by_kind_only_while_timing_is_on():
    q, s, b = mx.quantize(mx.random.normal((64, 128)), group_size=32, bits=4)
    x8 = mx.random.normal((3, 128))
    q8, s8, b8 = mx.quantize(mx.random.normal((32, 128)), group_size=32, bits=8)
    mx.eval(product(x8, q, s, b, 32, 4))  # not timed: timing is off
    KERNEL.op_timing(True)
    mx.eval(product(x8, q, s, b, 32, 4), product(x8, q, s, b, 32, 4), product(x8, q8, s8, b8, 32, 8))
    mx.eval(KERNEL.silu_mul(x8, x8))
    KERNEL.op_timing(False)
    mx.eval(product(x8, q8, s8, b8, 32, 8))  # not timed either
    times = KERNEL.op_times()
    calls = {kind: n for kind, (_, n) in times.items()}
    assert calls["products, 4-bit"] == 2 and calls["products, 8-bit"] == 1 and calls["silu_mul"] == 1
    assert calls["attention"] == calls["rope"] == calls["products, other widths"] == 0
    assert all(seconds > 0 for seconds, n in times.values() if n) and times["attention"][0] == 0
    KERNEL.op_timing(True)  # starting again clears the sums
    KERNEL.op_timing(False)
    assert all(n == 0 and seconds == 0 for seconds, n in KERNEL.op_times().values())


def test_the_threads_time_in_the_kernels_loops_is_summed_only_while_timing_is_on():
    """``loop_times``: the wall time the kernel's threads spent running its parallel loops' pieces,
    summed over the threads, and the CPU time they had meanwhile (never more than that wall time)."""
    q, s, b = mx.quantize(mx.random.normal((4096, 1536)), group_size=32, bits=4)
    x = mx.random.normal((16, 1536))
    mx.eval(product(x, q, s, b, 32, 4))  # not timed: timing is off
    KERNEL.op_timing(True)
    assert KERNEL.loop_times() == {"wall_s": 0.0, "cpu_s": 0.0}  # starting clears the sums
    mx.eval(product(x, q, s, b, 32, 4))
    KERNEL.op_timing(False)
    timed = KERNEL.loop_times()
    assert 0 < timed["cpu_s"] <= timed["wall_s"], timed
    mx.eval(product(x, q, s, b, 32, 4))  # timing is off again: nothing is added
    assert KERNEL.loop_times() == timed
