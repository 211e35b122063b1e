"""SwiGLU through the native extension (mlx_ssbd.platform.swiglu): ``silu_mul`` against MLX's
sigmoid over the whole range (tails included), odd sizes, strided inputs and other dtypes, and a
model's MLPs routed to it with logits within a few ulp of MLX's."""

import sys

from mlx_ssbd.platform import quantized, swiglu

import mlx.core as mx
import pytest
from mlx_lm.models import activations
from tiny import tiny_model

KERNEL = quantized.kernel()
if KERNEL is None:
    pytest.skip(f"native extension not available: {quantized.kernel_status()}", allow_module_level=True)


def reference(gate, up):
    return gate * mx.sigmoid(gate) * up


@pytest.mark.parametrize("size", [1, 15, 16, 17, 8960, 1001])
def test_silu_mul_is_mlx_s_within_a_few_ulp(size):
    gate = mx.random.normal((size,), key=mx.random.key(size)) * 6
    up = mx.random.normal((size,), key=mx.random.key(size + 1))
    want = reference(gate, up)
    relative = mx.abs(KERNEL.silu_mul(gate, up) - want) / (mx.abs(want) + 1e-30)
    assert mx.max(relative).item() < 2e-6


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


def test_a_model_s_mlps_run_through_silu_mul(monkeypatch):
    model = tiny_model("qwen2", seed=4)
    namespace = sys.modules[type(model).__module__]
    monkeypatch.setattr(namespace, "swiglu", activations.swiglu)  # restored after the test
    x = mx.array([[3, 17, 40, 2, 9, 11, 250]])
    want = model(x)
    assert swiglu.route_swiglu(model) == 1
    assert namespace.swiglu is not activations.swiglu
    got = model(x)
    assert mx.max(mx.abs(got - want)).item() <= 1e-5 * mx.max(mx.abs(want)).item()
    assert swiglu.route_swiglu(model) == 0  # already routed
