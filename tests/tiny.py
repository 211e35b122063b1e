"""Tiny models and a byte tokenizer for tests: no downloads, no weights on disk.

``byte_tokenizer`` is byte-level BPE with no merges (one token per byte) plus ChatML special tokens
and a ChatML chat template, wrapped as a Hugging Face fast tokenizer so the library's prompt code
runs unchanged. ``bpe_tokenizer`` adds merges learnt from a small corpus, with the GPT-2
pre-tokenizer, so token-boundary effects (" so" vs " " + "so") show up as with real models. Models
are ``mlx_ssbd.evaluation.random_models`` at their smallest.
"""

from __future__ import annotations

from mlx_ssbd.evaluation.random_models import (  # noqa: F401  (re-exported for tests)
    BYTE_VOCAB,
    CHATML_TEMPLATE,
    HYBRIDS,
    byte_tokenizer,
    random_model,
)

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GEMMA_TEMPLATE = (
    "<bos>{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}"
    "\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


VOCAB = BYTE_VOCAB
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
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator([BPE_CORPUS] * 4, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template)
    tok.eos_token = "<|im_end|>"
    return tok


def tiny_model(arch: str = "llama", *, seed: int = 0, logit_scale: float = 30.0, vocab_size: int = VOCAB):
    """A random-weight mlx-lm model of architecture ``arch`` (``random_models.ARCHITECTURES``), fp32."""
    return random_model(arch, vocab_size=vocab_size, seed=seed, logit_scale=logit_scale)
