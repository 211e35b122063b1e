"""Random-weight models of mlx-lm's architectures, one of each kind of cache, built in memory.

Contract: ``random_model(arch, vocab_size=..., width=64, seed=0)`` returns an fp32 mlx-lm model of
``arch`` (``ARCHITECTURES``) with random weights: full attention (``llama``, ``qwen2``), or a
cache that cannot be trimmed (``HYBRIDS``: Gated DeltaNet + attention for ``qwen3_5`` and
``qwen3_next``, short convolutions + attention for ``lfm2``, SSM layers for ``mamba2``, sliding
windows + a global layer for ``gemma3_text``). ``width`` scales the hidden size (heads of 16
dimensions), so a full-attention and a hybrid model of one width are of one size. The output layer
is scaled by ``logit_scale`` so that greedy choices are decisive (random logits are otherwise
nearly flat). ``save_random_model(path, tokenizer_dir, ...)`` writes such a model as an mlx-lm
model directory, with the tokenizer of a real one, for a process that loads a model by path
(``mlx-ssbd serve --model PATH``). ``shaped_model(config)`` is a random model of a real model's
shape (its ``config.json``: architecture, width, depth, vocabulary): what that model's calls cost,
without its weights. ``byte_tokenizer()`` is a tokenizer that needs no files (one token per byte,
ChatML specials and template). For tests and for measurements that do not depend on what the
weights say (tokens fed, model calls, cache rebuilds, time and memory), never for quality.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map

FULL_ATTENTION = ("llama", "qwen2")
HYBRIDS = ("qwen3_5", "qwen3_next", "lfm2", "mamba2", "gemma3_text")  # each cache kind mlx-lm has
ARCHITECTURES = FULL_ATTENTION + HYBRIDS


def model_args(arch: str, vocab_size: int, width: int = 64, layers: int | None = None):
    """``(module, args)`` of a model of ``arch`` with hidden size ``width`` and ``layers`` layers
    (default: 2 for full attention, 4 for hybrids, whose kinds of layer alternate)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    module = importlib.import_module(f"mlx_lm.models.{arch}")
    layers = layers or (2 if arch in FULL_ATTENTION else 4)
    heads = max(1, width // 16)
    attention = dict(
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        vocab_size=vocab_size,
        max_position_embeddings=2048,
    )
    linear = dict(
        linear_num_value_heads=heads,
        linear_num_key_heads=max(1, heads // 2),
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        full_attention_interval=2,
    )
    if arch in FULL_ATTENTION:
        return module, module.ModelArgs(
            model_type=arch, rms_norm_eps=1e-6, tie_word_embeddings=False, **attention
        )
    if arch == "qwen3_5":
        text = dict(model_type="qwen3_5_text", tie_word_embeddings=False, head_dim=16, **attention, **linear)
        return module, module.ModelArgs(model_type="qwen3_5", text_config=text)
    if arch == "qwen3_next":
        return module, module.ModelArgs(
            model_type="qwen3_next",
            head_dim=16,
            **attention,
            **linear,
            num_experts=0,
            num_experts_per_tok=0,
            decoder_sparse_step=1,
            shared_expert_intermediate_size=0,
            mlp_only_layers=list(range(layers)),
            moe_intermediate_size=0,
            rms_norm_eps=1e-6,
            rope_theta=10000.0,
            partial_rotary_factor=0.25,
        )
    if arch == "lfm2":
        return module, module.ModelArgs(
            model_type="lfm2",
            vocab_size=vocab_size,
            hidden_size=width,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=4096,
            norm_eps=1e-5,
            conv_bias=False,
            conv_L_cache=3,
            block_dim=width,
            block_multiple_of=16,
            block_ffn_dim_multiplier=1.0,
            block_auto_adjust_ff_dim=False,
            block_ff_dim=2 * width,
            full_attn_idxs=list(range(1, layers, 2)),
        )
    if arch == "mamba2":
        return module, module.ModelArgs(
            model_type="mamba2",
            num_heads=heads * 2,
            head_dim=16,
            vocab_size=vocab_size,
            hidden_size=width // 2,
            intermediate_size=width,
            state_size=16,
            num_hidden_layers=max(1, layers // 2),
            layer_norm_epsilon=1e-5,
            conv_kernel=4,
            n_groups=1,
            use_bias=False,
            use_conv_bias=True,
            tie_word_embeddings=False,
            time_step_limit=(0.0, float("inf")),
            time_step_rank=4,
        )
    return module, module.ModelArgs(  # gemma3_text
        model_type="gemma3_text",
        hidden_size=width,
        num_hidden_layers=max(1, layers - 1),
        intermediate_size=2 * width,
        num_attention_heads=heads,
        head_dim=16,
        vocab_size=vocab_size,
        num_key_value_heads=1,
        query_pre_attn_scalar=16,
        sliding_window=32,
        sliding_window_pattern=3,
    )


def random_model(
    arch: str,
    *,
    vocab_size: int,
    width: int = 64,
    layers: int | None = None,
    seed: int = 0,
    logit_scale: float = 30.0,
):
    """A random-weight fp32 model of ``arch``; see the module docstring."""
    mx.random.seed(seed)
    module, args = model_args(arch, vocab_size, width, layers)
    model = module.Model(args)
    model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    head = next((m for name, m in model.named_modules() if name.endswith("lm_head")), None)
    if head is not None:
        head.weight = head.weight * logit_scale
    else:  # tied embeddings (LFM2): the final norm's weight scales the logits
        model.model.embedding_norm.weight = model.model.embedding_norm.weight * logit_scale
    mx.eval(model.parameters())
    return model


def shaped_model(config: dict, *, dtype: mx.Dtype = mx.float32, seed: int = 0):
    """A random-weight mlx-lm model of ``config`` (a ``config.json`` as a dict), its parameters in
    ``dtype``; see the module docstring."""
    from mlx_lm.utils import _get_classes

    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.update(tree_map(lambda p: p.astype(dtype), model.parameters()))
    mx.eval(model.parameters())
    return model


CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BYTE_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<bos>", "<start_of_turn>", "<end_of_turn>")
BYTE_VOCAB = 256 + len(BYTE_SPECIALS)


def byte_tokenizer(chat_template: str = CHATML_TEMPLATE):
    """A Hugging Face fast tokenizer with one token per byte (byte-level BPE without merges), the
    ``BYTE_SPECIALS`` as ids 256-261 and ``chat_template`` (ChatML); EOS is ``<|im_end|>``. Ids it
    does not know (a larger model's) decode to nothing."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template)
    tok.add_special_tokens({"additional_special_tokens": list(BYTE_SPECIALS)})
    tok.eos_token = "<|im_end|>"
    return tok


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def save_random_model(
    path: str | Path,
    tokenizer_dir: str | Path,
    *,
    arch: str = "qwen2",
    width: int = 64,
    layers: int | None = None,
) -> Path:
    """A ``random_model`` of ``arch`` saved at ``path`` (config, fp32 weights) with the tokenizer files
    of the model directory ``tokenizer_dir`` (its vocabulary size too); returns ``path``."""
    path, source = Path(path), Path(tokenizer_dir)
    vocab_size = json.loads((source / "config.json").read_text())["vocab_size"]
    model = random_model(arch, vocab_size=vocab_size, width=width, layers=layers)
    path.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (path / "config.json").write_text(json.dumps(dataclasses.asdict(model.args), indent=2))
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, path / name)
    return path
