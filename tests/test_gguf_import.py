"""GGUF import round trip on tiny random models: write a GGUF the way llama.cpp lays it out, convert
it back, and compare logits with the original model. No downloads."""

import json

from mlx_ssbd.models.gguf_import import (
    COMPLETE_MARKER,
    UnsupportedGGUF,
    convert_gguf,
    mlx_name,
)

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from tiny import CHATML_TEMPLATE, SPECIALS, tiny_model
from transformers.convert_slow_tokenizer import bytes_to_unicode

GGUF_NAMES = {
    v: k
    for k, v in {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }.items()
}
LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name: str) -> str:
    if name in GGUF_NAMES:
        return GGUF_NAMES[name]
    _, _, layer, rest = name.split(".", 3)
    return f"blk.{layer}.{LAYER[rest]}"


def permute(w, n_head):  # llama.cpp's convert_hf_to_gguf permutation of llama q/k rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, model, arch):
    from gguf import GGUFWriter

    args = model.args
    w = GGUFWriter(str(path), arch=arch)
    w.add_block_count(args.num_hidden_layers)
    w.add_context_length(args.max_position_embeddings)
    w.add_embedding_length(args.hidden_size)
    w.add_feed_forward_length(args.intermediate_size)
    w.add_head_count(args.num_attention_heads)
    w.add_head_count_kv(args.num_key_value_heads)
    w.add_layer_norm_rms_eps(args.rms_norm_eps)
    w.add_rope_freq_base(args.rope_theta)
    tokens = list(bytes_to_unicode().values()) + SPECIALS + ["<bos>", "<start_of_turn>", "<end_of_turn>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * (len(tokens) - 256))
    w.add_token_merges([])
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_chat_template(CHATML_TEMPLATE)
    for name, value in tree_flatten(model.parameters()):
        array = np.array(value.astype(mx.float32))
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = args.num_attention_heads if "q_proj" in name else args.num_key_value_heads
            array = permute(array, heads)
        w.add_tensor(gguf_name(name), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_round_trip_gives_the_same_logits(tmp_path, arch):
    from mlx_lm import load

    model = tiny_model(arch, seed=3, logit_scale=1.0)
    write_gguf(tmp_path / "m.gguf", model, arch)
    steps = []
    out = convert_gguf(
        tmp_path / "m.gguf", tmp_path / "out", dtype="float32", progress=lambda d, n: steps.append(d)
    )
    assert steps[-1] == len(tree_flatten(model.parameters()))
    assert (out / COMPLETE_MARKER).is_file() and not (tmp_path / "out.partial").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == arch and config["tie_word_embeddings"] is False

    loaded, tok = load(str(out))
    ids = tok.encode("<|im_start|>user\nHello there<|im_end|>", add_special_tokens=False)
    assert ids[0] == 257 and ids[-1] == 258  # specials stay whole
    x = mx.array([ids])
    np.testing.assert_allclose(np.array(loaded(x)), np.array(model(x)), atol=1e-4, rtol=1e-4)


def test_existing_destination_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    model = tiny_model("qwen2")
    write_gguf(tmp_path / "m.gguf", model, "qwen2")
    with pytest.raises(FileExistsError):
        convert_gguf(tmp_path / "m.gguf", tmp_path / "out")


def test_unsupported_architecture_is_named(tmp_path):
    from gguf import GGUFWriter

    w = GGUFWriter(str(tmp_path / "m.gguf"), arch="mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedGGUF, match="'mamba'"):
        convert_gguf(tmp_path / "m.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_unknown_tensor_name_is_named():
    with pytest.raises(UnsupportedGGUF, match="blk.0.ssm_a"):
        mlx_name("blk.0.ssm_a")
    assert mlx_name("blk.3.attn_q.bias") == "model.layers.3.self_attn.q_proj.bias"
