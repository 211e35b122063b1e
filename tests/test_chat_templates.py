"""Any chat model's template: the chat templates of Llama 3, Mistral, Gemma 2/3, Phi-3/4, Qwen2.5
and Qwen3 (``tests/fixtures/chat_templates``) on tokenizers carrying them: the family each gets,
whether the instruction is a system turn or folds into the user turn, and prompt ids equal to the
tokenizer's own tokenization of the rendered chat, with a prefix every source shares (cacheable)."""

from pathlib import Path

from mlx_ssbd.live.prompt import SYSTEM_TEMPLATE, USER_TEMPLATE, PromptBuilder, detect_family

import pytest
from tiny import byte_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"
# template: (family, instruction as a system turn, special tokens, bos, eos)
TEMPLATES = {
    "llama3": (
        "generic",
        True,
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
    "mistral": ("generic", False, ["<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>"),
    "gemma2": ("tower", False, ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "gemma3": ("generic", True, ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "phi3": (
        "generic",
        True,
        ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
        "<|endoftext|>",
        "<|end|>",
    ),
    "phi4": ("generic", True, ["<|im_start|>", "<|im_sep|>", "<|im_end|>"], "<|im_end|>", "<|im_end|>"),
    "qwen2.5": (
        "chatml",
        True,
        ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
        "<|endoftext|>",
        "<|im_end|>",
    ),
    "qwen3": ("qwen3", True, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"], "<|endoftext|>", "<|im_end|>"),
}


def tokenizer(name: str):
    template = (FIXTURES / f"{name}.jinja").read_text().removesuffix("\n")
    _, _, specials, bos, eos = TEMPLATES[name]
    tok = byte_tokenizer(template)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.bos_token, tok.eos_token = bos, eos
    return tok


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_each_template_gets_a_prompt_that_is_its_own_rendering(name):
    family, system_turn, *_ = TEMPLATES[name]
    tok = tokenizer(name)
    assert detect_family(tok.chat_template) == family
    builder = PromptBuilder(tok, family, "en", "de")
    assert builder.system_role == system_turn
    system, user = (
        SYSTEM_TEMPLATE.format(src="English", tgt="German"),
        USER_TEMPLATE.format(src="English", text="so today we talk"),
    )
    messages = (
        [{"role": "system", "content": system}, {"role": "user", "content": user}]
        if system_turn
        else [{"role": "user", "content": f"{system}\n\n{user}"}]
    )
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    rendered += builder.family.assistant_prefix.format(tgt="German")
    prompt = builder.build("so today we talk")
    assert prompt.ids == tok.encode(rendered.rstrip(" "), add_special_tokens=False)
    assert builder.build("and why we made the rules").prefix == prompt.prefix  # the cached part is shared
    assert "so today we talk" in tok.decode(list(prompt.source))


def test_a_model_whose_template_is_not_the_papers_loads_and_translates_without_a_family(model_dir, tmp_path):
    """A model directory whose tokenizer carries Llama 3's template (specials added): loaded with
    the generic family, no ``--family`` needed, and it translates."""
    import shutil

    from mlx_ssbd.live.methods import method_config
    from mlx_ssbd.models.loading import load_model

    target = tmp_path / "model"
    shutil.copytree(model_dir, target)
    tok = tokenizer("llama3")
    tok.save_pretrained(target)  # tokenizer.json, tokenizer_config.json and the template
    loaded = load_model(str(target))
    assert loaded.family == "generic"
    tr = loaded.translator("de", config=method_config("rt"))
    update = tr.update("so today we talk", final=True)
    assert update.stats.forward_passes >= 1 and "<|start_header_id|>" in loaded.tokenizer.decode(
        tr.prompts.build("so today").ids
    )
