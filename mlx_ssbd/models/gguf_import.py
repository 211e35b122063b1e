"""Convert a GGUF file into a directory that ``mlx_lm.load`` accepts, without torch.

Contract: ``convert_gguf(gguf_path, out_dir)`` keeps the GGUF's quantization: every quantized
weight matrix becomes an MLX affine quantized layer (``gguf_quant.to_affine``: exact for Q4_0/1,
Q5_0/1, Q8_0, Q4_K and Q5_K; other types requantized to 8 bits, the error recorded), with its
bits in ``config.json``'s ``quantization`` (per layer where it differs from the model's default),
so mlx-lm and Metal load it as any mlx-community quantized model. Float tensors (norms, biases,
F16/F32 matrices) are saved in ``dtype`` (float16 by default, as are the scales and biases). It
renames tensors to mlx-lm's names, writes ``config.json`` from the GGUF metadata, and builds the
tokenizer (vocabulary, merges, special tokens, chat template) from the GGUF vocabulary with
transformers' torch-free GGUF tokenizer converter. The directory is written under a temporary
name and renamed into place when complete, so an interrupted run never leaves a directory that
loads half a model. Architectures: ``qwen2`` and ``llama``. Anything else raises
``UnsupportedGGUF`` naming the architecture, tensor or tensor type.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .gguf_quant import GROUP, to_affine

SUPPORTED_ARCHITECTURES = ("qwen2", "llama")
COMPLETE_MARKER = "mlx-ssbd-conversion.json"
FORMAT = 2  # 1: dense fp16 weights; 2: the GGUF's quantization kept (gguf_quant)
FLOAT_TYPES = ("F32", "F16", "BF16")

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


class UnsupportedGGUF(ValueError):
    """The GGUF file uses an architecture, tensor type or tensor this converter does not handle."""


def mlx_name(gguf_name: str) -> str:
    """mlx-lm's parameter name for a GGUF tensor name."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_RE.match(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    raise UnsupportedGGUF(f"no mlx-lm name for GGUF tensor {gguf_name!r}")


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def read_metadata(reader) -> dict:
    """The scalar metadata of a GGUF file (arrays such as the vocabulary are left out)."""
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key.split(".")[-1] in (
            "tokens",
            "merges",
            "token_type",
            "scores",
        ):
            continue
        out[key] = field.contents()
    return out


def hf_config(meta: dict, tensor_names: set[str], vocab_size: int, dtype: str) -> dict:
    """A Hugging Face style config.json for mlx-lm from GGUF metadata."""
    arch = meta["general.architecture"]
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedGGUF(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    g = lambda key, default=None: meta.get(f"{arch}.{key}", default)
    heads = int(g("attention.head_count"))
    config = {
        "model_type": arch,
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
        "hidden_size": int(g("embedding_length")),
        "num_hidden_layers": int(g("block_count")),
        "intermediate_size": int(g("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(g("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(g("context_length", 4096)),
        "vocab_size": vocab_size,
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "torch_dtype": dtype,
    }
    key_length = g("attention.key_length")
    if key_length is not None and int(key_length) != config["hidden_size"] // heads:
        config["head_dim"] = int(key_length)
    eos = meta.get("tokenizer.ggml.eos_token_id")
    if eos is not None:
        config["eos_token_id"] = int(eos)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        config["bos_token_id"] = int(bos)
    return config


def _unpermute_llama(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of llama q/k projections."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def converted_tensors(reader, config: dict):
    """Yield (mlx name, numpy array, Affine or None, GGUF type name) for every tensor, in file order.

    A quantized 2-D weight comes as an ``Affine`` (the array is None); anything else as fp32.
    """
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    for tensor in reader.tensors:
        name = mlx_name(tensor.name)
        kind = GGMLQuantizationType(tensor.tensor_type).name
        shape = [int(d) for d in reversed(tensor.shape)]
        llama_qk = config["model_type"] == "llama" and name.endswith(("q_proj.weight", "k_proj.weight"))
        if llama_qk:
            heads = config["num_attention_heads"] if "q_proj" in name else config["num_key_value_heads"]
        if kind not in FLOAT_TYPES and len(shape) == 2:
            try:
                affine = to_affine(kind, tensor.data, shape[0], shape[1])
            except (NotImplementedError, KeyError, ValueError) as error:
                raise UnsupportedGGUF(
                    f"tensor {tensor.name!r} of type {kind} cannot be imported: {error}"
                ) from error
            if llama_qk:
                affine.weight, affine.scales, affine.biases = (
                    _unpermute_llama(a, heads) for a in (affine.weight, affine.scales, affine.biases)
                )
            yield name, None, affine, kind
            continue
        try:
            array = dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError as error:
            raise UnsupportedGGUF(f"tensor {tensor.name!r} has unsupported type {kind}") from error
        array = np.asarray(array, dtype=np.float32).reshape(shape)
        if llama_qk:
            array = _unpermute_llama(array, heads)
        yield name, array, None, kind


def quantization_config(layer_bits: dict[str, int]) -> dict:
    """``config.json``'s ``quantization``: the most common bits as the default, other layers named."""
    counts: dict[int, int] = {}
    for bits in layer_bits.values():
        counts[bits] = counts.get(bits, 0) + 1
    default = max(counts, key=lambda b: (counts[b], -b))
    config: dict = {"group_size": GROUP, "bits": default, "mode": "affine"}
    for layer, bits in sorted(layer_bits.items()):
        if bits != default:
            config[layer] = {"group_size": GROUP, "bits": bits, "mode": "affine"}
    return config


def build_tokenizer(reader, meta: dict):
    """A ``PreTrainedTokenizerFast`` from the GGUF vocabulary, merges and chat template."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        convert_gguf_tokenizer,
    )

    tokens = _field(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise UnsupportedGGUF("the GGUF file has no tokenizer vocabulary")
    tokenizer_dict = {
        "tokenizer_type": meta.get("tokenizer.ggml.model"),
        "pre_tokenizer_type": meta.get("tokenizer.ggml.pre"),
        "tokens": tokens,
        "token_type": _field(reader, "tokenizer.ggml.token_type"),
    }
    for key, name in (("merges", "merges"), ("scores", "scores")):
        value = _field(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            tokenizer_dict[name] = value
    if tokenizer_dict["tokenizer_type"] == "gpt2":
        tokenizer_dict.setdefault("merges", [])  # a byte-level vocabulary may have no merges
    try:
        backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tokenizer_dict)
    except ValueError as error:
        raise UnsupportedGGUF(str(error)) from error
    special = {}
    for name, key in (
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("pad_token", "padding_token_id"),
    ):
        index = meta.get(f"tokenizer.ggml.{key}")
        if index is not None:
            special[name] = tokens[int(index)]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=meta.get("tokenizer.chat_template"), **special
    )


def convert_gguf(
    gguf_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "float16",
    progress: Callable[[int, int], None] | None = None,
    provenance: dict | None = None,
) -> Path:
    """Convert ``gguf_path`` into an mlx-lm model directory at ``out_dir`` (atomically).

    Args:
        gguf_path: the GGUF file.
        out_dir: destination; must not exist yet.
        dtype: storage dtype of the weights ("float16", "bfloat16" or "float32").
        progress: called as ``progress(done, total)`` after each tensor.
        provenance: extra facts stored in the completion marker (e.g. source packages, sha256).

    Returns:
        ``out_dir`` as a Path.
    """
    import mlx.core as mx
    from gguf import GGUFReader
    from mlx_lm.utils import make_shards

    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists")
    reader = GGUFReader(str(gguf_path))
    meta = read_metadata(reader)
    tensor_names = {t.name for t in reader.tensors}
    vocab_size = next(int(t.shape[1]) for t in reader.tensors if t.name == "token_embd.weight")
    config = hf_config(meta, tensor_names, vocab_size, dtype)
    tokenizer = build_tokenizer(reader, meta)

    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        target = getattr(mx, dtype)
        weights, layer_bits, types, requantized = {}, {}, {}, {}
        total = len(reader.tensors)
        for done, (name, array, affine, kind) in enumerate(converted_tensors(reader, config), 1):
            types[kind] = types.get(kind, 0) + 1
            if affine is None:
                new = {name: mx.array(array).astype(target)}
            else:
                layer = name.removesuffix(".weight")
                layer_bits[layer] = affine.bits
                new = {
                    name: mx.array(affine.weight),
                    f"{layer}.scales": mx.array(affine.scales).astype(target),
                    f"{layer}.biases": mx.array(affine.biases).astype(target),
                }
                if not affine.exact:
                    requantized[layer] = {"gguf_type": kind, "bits": affine.bits, **(affine.error or {})}
            mx.eval(*new.values())
            weights.update(new)
            if progress:
                progress(done, total)
        if layer_bits:
            config["quantization"] = quantization_config(layer_bits)
            config["quantization_config"] = config["quantization"]
        _save_weights(tmp, weights, make_shards)
        with open(tmp / "config.json", "w") as f:
            json.dump(config, f, indent=2)
        tokenizer.save_pretrained(str(tmp))
        marker = {
            "format": FORMAT,
            "gguf": Path(gguf_path).name,
            "dtype": dtype,
            "architecture": config["model_type"],
            "gguf_types": types,
            "requantized_layers": requantized,
        }
        marker.update(provenance or {})
        with open(tmp / COMPLETE_MARKER, "w") as f:
            json.dump(marker, f, indent=2)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _save_weights(directory: Path, weights: dict, make_shards) -> None:
    import mlx.core as mx

    shards = make_shards(weights)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    )
    weight_map = {}
    for shard, file_name in zip(shards, names):
        mx.save_safetensors(str(directory / file_name), shard, metadata={"format": "mlx"})
        weight_map.update({key: file_name for key in shard})
    index = {
        "metadata": {"total_size": sum(v.nbytes for v in weights.values())},
        "weight_map": dict(sorted(weight_map.items())),
    }
    with open(directory / "model.safetensors.index.json", "w") as f:
        json.dump(index, f, indent=2)
