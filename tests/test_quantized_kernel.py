"""The CPU kernel for quantized products (mlx_ssbd/platform/native) against MLX's own, and the
model path through it: every bit width and group size, odd shapes, 1-64 rows, each row's result
independent of the rows beside it, SSBD at beta 0 equal to RT on a quantized model, and the
install without a compiler."""

import os
import random
import shutil
import subprocess
from pathlib import Path

from mlx_ssbd.platform import quantized

import mlx.core as mx
import mlx.nn as nn
import pytest
from tiny import tiny_model

KERNEL = quantized.kernel()
if KERNEL is None:
    if os.environ.get("CI"):  # CI installs a compiler: the kernel must be there
        raise RuntimeError(f"the CPU kernel is missing in CI: {quantized.kernel_status()}")
    pytest.skip(f"CPU kernel not available: {quantized.kernel_status()}", allow_module_level=True)

NATIVE = Path(quantized.__file__).with_name("native")


def product(x, q, s, b, group, bits):
    return KERNEL.quantized_matmul(x, q, s, b, group, bits)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_kernel_equals_mlx_for_every_width_and_group(bits, group):
    key = mx.random.key(bits * 1000 + group)
    for rows, n, k in [(1, 13, 256), (2, 7, 384), (3, 33, 128), (16, 5, 512), (64, 21, 256)]:
        k1, k2, key = mx.random.split(key, 3)
        w = mx.random.normal((n, k), key=k1)
        x = mx.random.normal((rows, k), key=k2)
        q, s, b = mx.quantize(w, group_size=group, bits=bits)
        dense = x @ mx.dequantize(q, s, b, group_size=group, bits=bits).T
        theirs = mx.quantized_matmul(x, q, s, b, transpose=True, group_size=group, bits=bits)
        ours = product(x, q, s, b, group, bits)
        scale = mx.max(mx.abs(dense)).item()
        assert mx.max(mx.abs(ours - dense)).item() <= 2e-6 * scale, (rows, n, k)
        assert mx.max(mx.abs(ours - theirs)).item() <= 2e-5 * scale, (rows, n, k)


@pytest.mark.parametrize("bits", [4, 5, 8])
def test_each_row_gets_what_it_would_get_alone(bits):
    """A verify pass of many tokens gives each token bit for bit its one-token decode result."""
    w = mx.random.normal((70, 640), key=mx.random.key(1))
    x = mx.random.normal((64, 640), key=mx.random.key(2))
    q, s, b = mx.quantize(w, group_size=64, bits=bits)
    together = product(x, q, s, b, 64, bits)
    for rows in (1, 2, 3, 5, 16, 64):
        part = product(x[:rows], q, s, b, 64, bits)
        assert mx.array_equal(part, together[:rows]).item(), rows
    alone = mx.concatenate([product(x[i : i + 1], q, s, b, 64, bits) for i in range(64)])
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


def test_bad_arguments_are_refused_with_a_reason():
    w = mx.random.normal((8, 128), key=mx.random.key(5))
    q, s, b = mx.quantize(w, group_size=32, bits=4)
    with pytest.raises(ValueError, match="bits must be"):
        KERNEL.quantized_matmul(mx.zeros((1, 128)), q, s, b, 32, 7)
    with pytest.raises(ValueError, match="shapes do not match"):
        KERNEL.quantized_matmul(mx.zeros((1, 96)), q, s, b, 32, 4)
    with pytest.raises(ValueError, match="uint32"):
        KERNEL.quantized_matmul(mx.zeros((1, 128)), w, s, b, 32, 4)


def quantized_tiny(bits=4, seed=0):
    model = tiny_model("qwen2", seed=seed)
    nn.quantize(model, group_size=32, bits=bits)
    mx.eval(model.parameters())
    return model


def test_a_quantized_model_runs_through_the_kernel_with_mlx_s_logits():
    model = quantized_tiny(bits=4)
    x = mx.array([[3, 17, 40, 2, 9, 11, 250]])
    want = model(x)
    routed = quantized.route_quantized_layers(model)
    assert routed == 2 * 7 + 2  # seven projections per layer, the output layer, the embedding
    assert all(type(m) is not nn.QuantizedLinear for _, m in model.named_modules())
    got = model(x)
    assert mx.max(mx.abs(got - want)).item() <= 1e-4 * mx.max(mx.abs(want)).item()


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


def test_status_says_when_the_kernel_is_missing(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_kernel(name, globals=None, locals=None, fromlist=(), level=0):
        if fromlist and "_qmm" in fromlist:
            raise ImportError("no module named _qmm")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_kernel)
    module, status = quantized._load()
    assert module is None and "not built" in status and "slower" in status
    monkeypatch.setenv(quantized.QMM_ENV, "0")
    assert quantized._load()[0] is None


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake on PATH")
def test_without_a_compiler_the_build_succeeds_and_builds_nothing(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"))
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(NATIVE),
            "-B",
            str(tmp_path / "build"),
            f"-DPython_EXECUTABLE={os.sys.executable}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "no C++ compiler found" in result.stderr
    build = subprocess.run(
        ["cmake", "--build", str(tmp_path / "build")], capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0
    assert not list((tmp_path / "build").rglob("_qmm*.so"))


CHECK_PATH = """
import mlx_ssbd, mlx.core as mx
from mlx_ssbd.platform import quantized
k = quantized.kernel()
assert k is not None, quantized.kernel_status()
print(k.simd_path())
for bits in (3, 4, 5, 8):
    w = mx.random.normal((37, 256), key=mx.random.key(bits))
    x = mx.random.normal((9, 256), key=mx.random.key(bits + 1))
    q, s, b = mx.quantize(w, group_size=64, bits=bits)
    dense = x @ mx.dequantize(q, s, b, group_size=64, bits=bits).T
    out = k.quantized_matmul(x, q, s, b, 64, bits)
    assert mx.max(mx.abs(out - dense)).item() <= 2e-6 * mx.max(mx.abs(dense)).item(), bits
    alone = mx.concatenate([k.quantized_matmul(x[i : i + 1], q, s, b, 64, bits) for i in range(9)])
    assert mx.array_equal(alone, out).item(), bits
"""


@pytest.mark.parametrize("path", ["avx2", "generic"])
def test_every_narrower_path_of_this_cpu_is_right_too(path):
    """The widest path runs above; the narrower builds (MLX_SSBD_QMM_SIMD) must agree with MLX too."""
    if path == "avx2" and KERNEL.simd_path() not in ("avx512", "avx2"):
        pytest.skip("this CPU has no AVX2")
    env = dict(os.environ, MLX_SSBD_QMM_SIMD=path)
    result = subprocess.run(
        [os.sys.executable, "-c", CHECK_PATH], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] == path
