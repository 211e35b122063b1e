"""Tiny models and a byte tokenizer for tests: no downloads, no weights on disk.

``byte_tokenizer`` is byte-level BPE with no merges (one token per byte) plus ChatML special tokens
and a ChatML chat template, wrapped as a Hugging Face fast tokenizer so the library's prompt code
runs unchanged. ``bpe_tokenizer`` adds merges learnt from a small corpus, with the GPT-2
pre-tokenizer, so token-boundary effects (" so" vs " " + "so") show up as with real models. Models are mlx-lm architectures built from ``ModelArgs`` with random weights; the output
layer is scaled up so greedy choices are decisive (random logits are otherwise nearly flat).
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_map
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA_TEMPLATE = (
    "<bos>{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}"
    "\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def byte_tokenizer(chat_template: str = CHATML_TEMPLATE) -> PreTrainedTokenizerFast:
    """A 256-byte vocabulary plus ChatML specials (ids 256-258); EOS is ``<|im_end|>``."""
    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template)
    tok.add_special_tokens({"additional_special_tokens": SPECIALS + ["<bos>", "<start_of_turn>", "<end_of_turn>"]})
    tok.eos_token = "<|im_end|>"
    return tok


VOCAB = 256 + 6
BPE_VOCAB = 400
BPE_CORPUS = (
    "so today we talk about the weather. English: so today it is cold, and tomorrow? "
    "Also heute reden wir über das Wetter. Heute ist es kalt, und morgen? "
    "All human beings are born free and equal in dignity and rights. "
    "Alle Menschen sind frei und gleich an Würde und Rechten geboren.\n"
)


def bpe_tokenizer(chat_template: str = CHATML_TEMPLATE) -> PreTrainedTokenizerFast:
    """Byte-level BPE with merges learnt from ``BPE_CORPUS`` (ids < ``BPE_VOCAB``), ChatML specials."""
    from tokenizers import trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([BPE_CORPUS] * 4, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template)
    tok.eos_token = "<|im_end|>"
    return tok


HYBRIDS = ("qwen3_5", "qwen3_next", "lfm2", "mamba2", "gemma3_text")  # each cache kind mlx-lm has


def _hybrid_args(arch: str, vocab_size: int):
    """``(module, args)`` of a tiny model whose cache holds recurrent states or sliding windows."""
    import importlib

    module = importlib.import_module(f"mlx_lm.models.{arch}")
    linear = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                  linear_value_head_dim=16, linear_conv_kernel_dim=4, full_attention_interval=2)
    attention = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, vocab_size=vocab_size, max_position_embeddings=4096)
    if arch == "qwen3_5":  # Gated DeltaNet layers (ArraysCache) and full attention, every other layer
        text = dict(model_type="qwen3_5_text", tie_word_embeddings=False, **attention, **linear)
        return module, module.ModelArgs(model_type="qwen3_5", text_config=text)
    if arch == "qwen3_next":
        return module, module.ModelArgs(
            model_type="qwen3_next", **attention, **linear, num_experts=0, num_experts_per_tok=0,
            decoder_sparse_step=1, shared_expert_intermediate_size=0, mlp_only_layers=[0, 1, 2, 3],
            moe_intermediate_size=0, rms_norm_eps=1e-6, rope_theta=10000.0, partial_rotary_factor=0.25)
    if arch == "lfm2":  # short convolutions (ArraysCache) and attention
        return module, module.ModelArgs(
            model_type="lfm2", vocab_size=vocab_size, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, norm_eps=1e-5, conv_bias=False, conv_L_cache=3,
            block_dim=64, block_multiple_of=16, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False,
            block_ff_dim=128, full_attn_idxs=[1, 3])
    if arch == "mamba2":  # SSM layers only
        return module, module.ModelArgs(
            model_type="mamba2", num_heads=4, head_dim=16, vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
            state_size=16, num_hidden_layers=2, layer_norm_epsilon=1e-5, conv_kernel=4, n_groups=1, use_bias=False,
            use_conv_bias=True, tie_word_embeddings=False, time_step_limit=(0.0, float("inf")), time_step_rank=4)
    if arch == "gemma3_text":  # sliding windows (RotatingKVCache) and a global layer
        return module, module.ModelArgs(
            model_type="gemma3_text", hidden_size=64, num_hidden_layers=3, intermediate_size=128, num_attention_heads=4,
            head_dim=16, vocab_size=vocab_size, num_key_value_heads=1, query_pre_attn_scalar=16,
            sliding_window=32, sliding_window_pattern=3)
    raise ValueError(arch)


def tiny_model(arch: str = "llama", *, seed: int = 0, logit_scale: float = 30.0, vocab_size: int = VOCAB):
    """A random-weight mlx-lm model of architecture ``arch`` ("llama", "qwen2" or one of
    ``HYBRIDS``), fp32."""
    mx.random.seed(seed)
    common = dict(
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        vocab_size=vocab_size,
        max_position_embeddings=2048,
    )
    if arch == "llama":
        from mlx_lm.models import llama as module

        args = module.ModelArgs(model_type="llama", tie_word_embeddings=False, **common)
    elif arch == "qwen2":
        from mlx_lm.models import qwen2 as module

        args = module.ModelArgs(model_type="qwen2", tie_word_embeddings=False, **common)
    else:
        module, args = _hybrid_args(arch, vocab_size)
    model = module.Model(args)
    model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    head = next((m for name, m in model.named_modules() if name.endswith("lm_head")), None)
    if head is not None:
        head.weight = head.weight * logit_scale
    else:  # tied embeddings (LFM2): the final norm's weight scales the logits
        model.model.embedding_norm.weight = model.model.embedding_norm.weight * logit_scale
    mx.eval(model.parameters())
    return model
