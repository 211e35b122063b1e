"""A decoder's small operations through the native extension (mlx_ssbd.platform.layers):
``silu_mul`` against MLX's sigmoid over the whole range (tails included), ``rope`` and ``rms_norm``
against ``mx.fast`` (both RoPE layouts, offsets per batch row, strided input, features left
unrotated, far positions), and models routed to them with logits within a few ulp of MLX's."""

import sys

from mlx_ssbd.evaluation.random_models import ARCHITECTURES
from mlx_ssbd.platform import extension, layers

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import activations
from mlx_lm.models.rope_utils import Llama3RoPE
from tiny import tiny_model

KERNEL = extension.kernel()
if KERNEL is None:
    pytest.skip(f"native extension not available: {extension.kernel_status()}", allow_module_level=True)


def reference(gate, up):
    return gate * mx.sigmoid(gate) * up


@pytest.mark.parametrize("size", [1, 15, 16, 17, 8960, 1001, 40961, 16 * 8960])
def test_silu_mul_is_mlx_s_within_a_few_ulp(size):
    gate = mx.random.normal((size,), key=mx.random.key(size)) * 6
    up = mx.random.normal((size,), key=mx.random.key(size + 1))
    want = reference(gate, up)
    relative = mx.abs(KERNEL.silu_mul(gate, up) - want) / (mx.abs(want) + 1e-30)
    assert mx.max(relative).item() < 2e-6


def test_silu_mul_gives_a_row_the_same_bits_alone_and_among_many():
    # 16 rows of 8960 are shared out over the kernel's threads in pieces; one row runs whole.
    gate = mx.random.normal((16, 8960), key=mx.random.key(3)) * 6
    up = mx.random.normal((16, 8960), key=mx.random.key(4))
    together = KERNEL.silu_mul(gate, up)
    for row in (0, 7, 15):
        assert mx.array_equal(together[row], KERNEL.silu_mul(gate[row], up[row])).item()


def test_silu_mul_tails_saturate_as_sigmoid_does():
    gate = mx.array([-1e4, -200.0, -90.0, -87.5, -30.0, -1e-30, 0.0, 1e-30, 30.0, 87.5, 90.0, 200.0, 1e4])
    up = mx.ones_like(gate)
    got = KERNEL.silu_mul(gate, up)
    want = reference(gate, up)
    assert mx.all(mx.isfinite(got)).item()
    assert mx.allclose(got, want, rtol=2e-6, atol=1e-30).item()
    assert got[-1].item() == 1e4 and got[0].item() == pytest.approx(0.0, abs=1e-30)


def test_strided_inputs_and_other_dtypes():
    gate = mx.random.normal((64, 6), key=mx.random.key(1)).T  # a transposed view
    up = mx.random.normal((6, 64), key=mx.random.key(2))
    want = reference(gate, up)
    assert mx.allclose(KERNEL.silu_mul(gate, up), want, rtol=2e-6, atol=1e-7).item()
    half = KERNEL.silu_mul(gate.astype(mx.float16), up.astype(mx.float16))
    assert half.dtype == mx.float16
    assert KERNEL.silu_mul(gate.astype(mx.float16), up).dtype == mx.float32  # promoted, as MLX does
    assert mx.allclose(half.astype(mx.float32), want, rtol=1e-2, atol=1e-3).item()
    with pytest.raises(ValueError, match="same shape"):
        KERNEL.silu_mul(gate, up[:, :3])


def rope_case(x, dims, traditional, offset, scale=1.0, base=10000.0):
    want = mx.fast.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=offset)
    got = KERNEL.rope(
        x,
        dims,
        traditional=traditional,
        inv_freqs=extension.default_inverse_frequencies(dims, base),
        scale=scale,
        offset=offset if isinstance(offset, mx.array) else mx.array(offset, dtype=mx.int32),
    )
    assert got.shape == want.shape and got.dtype == mx.float32
    return mx.max(mx.abs(got - want)).item()


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize(
    ("shape", "dims", "offset"),
    [((1, 12, 1, 128), 128, 57), ((2, 4, 7, 64), 32, [3, 90]), ((1, 3, 5, 48), 48, 0), ((3, 9, 64), 64, 11)],
)
def test_rope_is_mlx_s_within_a_few_ulp(shape, dims, offset, traditional):
    x = mx.random.normal(shape, key=mx.random.key(len(shape) + dims))
    offset = mx.array(offset, dtype=mx.int32) if isinstance(offset, list) else offset
    assert rope_case(x, dims, traditional, offset) < 1e-6 * 8  # |x| < 8: a few ulp
    # The same rows read through a transposed view (as attention layers pass them).
    view = x.swapaxes(-2, -3) if x.ndim == 4 else x
    assert rope_case(view, dims, traditional, offset, scale=0.5) < 1e-6 * 8


def test_rope_angles_follow_each_call_s_offsets_positions_scale_and_frequencies():
    # The kernel keeps its last table of angles: every change of what they depend on, and a return
    # to an earlier one, gives MLX's result again.
    x = mx.random.normal((1, 4, 6, 64), key=mx.random.key(9))
    calls = [
        (57, 1.0, 10000.0),
        (57, 1.0, 10000.0),
        (58, 1.0, 10000.0),
        (58, 0.5, 10000.0),
        (58, 0.5, 500000.0),
        (57, 1.0, 10000.0),
    ]
    for offset, scale, base in calls:
        assert rope_case(x, 64, False, offset, scale=scale, base=base) < 1e-6 * 8
    assert rope_case(x[:, :, :3], 64, False, 57) < 1e-6 * 8  # fewer positions
    assert rope_case(x[:, :, :, :32], 32, False, 57) < 1e-6 * 8  # fewer frequencies
    assert rope_case(mx.concatenate([x, x]), 64, False, mx.array([57, 9], dtype=mx.int32)) < 1e-6 * 8


def test_rope_far_positions_agree_as_far_as_fp32_angles_do():
    x = mx.random.normal((1, 2, 3, 64), key=mx.random.key(5))
    # At position 30000 an fp32 angle is only good to ~2e-3 rad; both compute the same angle, so
    # the difference is sin and cos to a few ulp, not the angle's own error.
    assert rope_case(x, 64, False, 30000) < 1e-5


def test_rope_and_rms_norm_refuse_bad_input():
    x = mx.ones((1, 2, 3, 8))
    inv = extension.default_inverse_frequencies(8, 10000.0)
    with pytest.raises(ValueError, match="dims"):
        KERNEL.rope(x, 10, traditional=False, inv_freqs=inv, scale=1.0, offset=mx.array(0))
    with pytest.raises(ValueError, match="offset"):
        KERNEL.rope(x, 8, traditional=False, inv_freqs=inv, scale=1.0, offset=mx.array([1, 2, 3]))
    with pytest.raises(ValueError, match="fp32"):
        KERNEL.rms_norm(x.astype(mx.float16), mx.ones((8,)), 1e-5)
    with pytest.raises(ValueError, match="weight"):
        KERNEL.rms_norm(x, mx.ones((7,)), 1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 1536), (3, 5, 17), (4, 896)])
def test_rms_norm_is_mlx_s_within_a_few_ulp(shape):
    x = mx.random.normal(shape, key=mx.random.key(shape[-1])) * 3
    weight = mx.random.normal(shape[-1:], key=mx.random.key(2))
    want = mx.fast.rms_norm(x, weight, 1e-6)
    relative = mx.abs(KERNEL.rms_norm(x, weight, 1e-6) - want) / (mx.abs(want) + 1e-30)
    assert mx.max(relative).item() < 2e-6
    view = x.swapaxes(0, 1) if len(shape) == 3 else x
    assert mx.allclose(
        KERNEL.rms_norm(view, weight, 1e-6), mx.fast.rms_norm(view, weight, 1e-6), rtol=2e-6
    ).item()


def test_routed_rope_layers_match_mlx_and_leave_other_dtypes_to_it():
    x = mx.random.normal((2, 4, 6, 64), key=mx.random.key(8))
    offsets = mx.array([5, 700], dtype=mx.int32)
    plain = nn.RoPE(64, traditional=False, base=1e6, scale=0.25)
    llama3 = Llama3RoPE(64, base=500000.0, scaling_config={"factor": 8.0})
    for module in (plain, llama3):
        want = [module(x, offset=7), module(x, offset=offsets), module(x.astype(mx.float16), offset=7)]
        wrapper = nn.Module()
        wrapper.rope = module
        assert layers.route_layers(wrapper) == 1
        assert type(module) is not nn.RoPE and type(module) is not Llama3RoPE
        got = [module(x, offset=7), module(x, offset=offsets), module(x.astype(mx.float16), offset=7)]
        assert mx.max(mx.abs(got[0] - want[0])).item() < 1e-5
        assert mx.max(mx.abs(got[1] - want[1])).item() < 1e-5
        assert got[2].dtype == mx.float16 and mx.array_equal(got[2], want[2]).item()  # MLX's own


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_routed_gives_mlx_s_logits(arch, monkeypatch):
    model = tiny_model(arch, seed=4)
    namespace = sys.modules[type(model).__module__]
    for function, (theirs, _) in layers.ROUTED_FUNCTIONS.items():
        if hasattr(namespace, function):
            monkeypatch.setattr(namespace, function, theirs)  # restored after the test
    x = mx.array([[3, 17, 40, 2, 9, 11, 250]])
    want = model(x)
    assert layers.route_layers(model) > 0
    got = model(x)
    assert mx.max(mx.abs(got - want)).item() <= 1e-5 * mx.max(mx.abs(want)).item()
    assert layers.route_layers(model) == 0  # already routed


def test_a_model_s_mlps_run_through_silu_mul(monkeypatch):
    model = tiny_model("qwen2", seed=4)
    namespace = sys.modules[type(model).__module__]
    monkeypatch.setattr(namespace, "swiglu", activations.swiglu)  # restored after the test
    layers.route_layers(model)
    assert namespace.swiglu is not activations.swiglu


def attention_case(shape, mask_mode="", mask=None, seed=0):
    B, Hq, Hkv, L, S, D = shape
    q = mx.random.normal((B, Hq, L, D), key=mx.random.key(seed))
    # Keys and values as a KV cache holds them: views of a longer buffer.
    k = mx.random.normal((B, Hkv, S + 7, D), key=mx.random.key(seed + 1))[:, :, :S]
    v = mx.random.normal((B, Hkv, S + 7, D), key=mx.random.key(seed + 2))[:, :, :S]
    want = mx.fast.scaled_dot_product_attention(
        q, k, v, scale=D**-0.5, mask=mask if mask is not None else mask_mode or None
    )
    got = KERNEL.attention(q, k, v, scale=D**-0.5, mask_mode=mask_mode, mask=mask)
    assert got.shape == want.shape
    return mx.max(mx.abs(got - want)).item()


@pytest.mark.parametrize(
    ("shape", "mask_mode"),
    [
        ((1, 12, 2, 1, 48, 128), ""),  # a decode step of the default model
        ((1, 12, 2, 16, 64, 128), "causal"),  # a verify pass
        ((2, 4, 4, 3, 9, 64), ""),
        ((1, 14, 2, 7, 300, 64), "causal"),
        ((1, 4, 2, 3, 9, 80), ""),  # a head size that is not a multiple of 16
    ],
)
def test_attention_is_mlx_s_within_a_few_ulp(shape, mask_mode):
    assert attention_case(shape, mask_mode) < 2e-6


def test_attention_with_bool_and_additive_masks():
    boolean = mx.random.uniform(shape=(2, 1, 3, 9), key=mx.random.key(3)) > 0.3
    assert attention_case((2, 4, 2, 3, 9, 64), "array", boolean) < 2e-6
    boolean[0, 0, 1, :] = False  # a row with every key masked: MLX's uniform average
    assert attention_case((2, 4, 2, 3, 9, 64), "array", boolean) < 2e-6
    additive = mx.random.normal((3, 9), key=mx.random.key(4))
    assert attention_case((2, 4, 2, 3, 9, 64), "array", additive) < 2e-6


@pytest.mark.parametrize(("query_heads", "key_heads"), [(6, 2), (1, 1), (2, 1), (3, 1), (4, 4)])
def test_a_verify_row_gets_the_bits_of_a_decode_step(query_heads, key_heads):
    """Rows that read one key head are computed together (groups of 1 to 4 rows, each taking its
    own number of keys at a time): whichever rows share a group, each gets the bits it gets alone."""
    q = mx.random.normal((1, query_heads, 5, 64), key=mx.random.key(6))
    k = mx.random.normal((1, key_heads, 41, 64), key=mx.random.key(7))
    v = mx.random.normal((1, key_heads, 41, 64), key=mx.random.key(8))
    verify = KERNEL.attention(q, k, v, scale=0.125, mask_mode="causal")
    for row in range(5):  # query row of the pass sees keys [0, 37 + row]: a decode step there
        step = KERNEL.attention(q[:, :, row : row + 1], k[:, :, : 37 + row], v[:, :, : 37 + row], scale=0.125)
        assert mx.array_equal(step[:, :, 0], verify[:, :, row]).item()


def test_attention_refuses_bad_input():
    q = mx.ones((1, 3, 1, 8))
    k = mx.ones((1, 2, 4, 8))
    with pytest.raises(ValueError, match="multiple"):
        KERNEL.attention(q, k, k, scale=1.0)
    with pytest.raises(ValueError, match="mask_mode"):
        KERNEL.attention(q, q, q, scale=1.0, mask_mode="sliding")
