"""Prompt building: families, family detection, the sentinel split, context turns (no model)."""

from mlx_ssbd.live.prompt import FAMILIES, PromptBuilder, detect_family

import pytest
from tiny import CHATML_TEMPLATE, GEMMA_TEMPLATE, bpe_tokenizer, byte_tokenizer


@pytest.fixture(scope="module")
def chatml():
    return byte_tokenizer()


def text(tok, ids):
    return tok.decode(list(ids))


def test_chatml_prompt_renders_the_template_around_the_source(chatml):
    prompt = PromptBuilder(chatml, "chatml", "en", "de").build("so today")
    assert text(chatml, prompt.source) == " so today"
    assert text(chatml, prompt.ids) == (
        "<|im_start|>system\nTranslate the English source text to German. Return only the translation, "
        "without any additional explanations or commentary.<|im_end|>\n"
        "<|im_start|>user\nEnglish: so today<|im_end|>\n<|im_start|>assistant\n"
    )
    assert len(prompt) == len(prompt.ids)


def test_prefix_and_suffix_are_shared_by_every_source(chatml):
    builder = PromptBuilder(chatml, "chatml", "en", "ja")
    a, b = builder.build("so"), builder.build("so today we")
    assert a.prefix == b.prefix and a.suffix == b.suffix and a.source != b.source
    assert "Japanese" in text(chatml, a.prefix)


def test_qwen3_opens_the_answer_with_an_empty_think_block_and_the_target_tag(chatml):
    prompt = PromptBuilder(chatml, "qwen3", "en", "zh").build("hello")
    assert text(chatml, prompt.suffix).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nChinese:")


def test_tower_has_no_system_role_so_the_instruction_joins_the_user_turn():
    gemma = byte_tokenizer(GEMMA_TEMPLATE)
    rendered = text(gemma, PromptBuilder(gemma, "tower", "en", "de").build("hi").ids)
    assert rendered.startswith("<bos><start_of_turn>user\nTranslate the English source text to German.")
    assert "system" not in rendered and rendered.endswith("English: hi<end_of_turn>\n<start_of_turn>model\n")


@pytest.mark.parametrize(
    "template,family",
    [
        ("{{ '<|im_start|>' }}", "chatml"),
        ("<|im_start|>{% if x %}<think>{% endif %}", "qwen3"),
        (GEMMA_TEMPLATE, "tower"),
    ],
)
def test_detect_family(template, family):
    assert detect_family(template) == family and family in FAMILIES


@pytest.mark.parametrize("bad", [None, "", "  "])
def test_detect_family_refuses_a_tokenizer_without_a_template(bad):
    with pytest.raises(ValueError, match="no chat template"):
        detect_family(bad)


def test_any_other_template_is_generic():
    assert detect_family("{{ messages }}") == "generic"


def test_unknown_family_and_a_template_that_drops_the_user_text(chatml):
    with pytest.raises(ValueError, match="unknown prompt family"):
        PromptBuilder(chatml, "nope", "en", "de")
    with pytest.raises(ValueError, match="exactly once"):
        PromptBuilder(
            byte_tokenizer("{% for m in messages %}{{ m['role'] }}{% endfor %}"), "chatml", "en", "de"
        )


def test_context_turns_are_the_ids_that_were_fed(chatml):
    builder = PromptBuilder(chatml, "chatml", "en", "de")
    first = builder.build("so today")
    answer = tuple(chatml.encode("Also heute", add_special_tokens=False))
    second = builder.build("we made it", builder.context_ids([(first.source, answer)]))
    # what the cache held after the first segment (prompt + answer) is a prefix of the next prompt
    assert second.ids[: len(first.ids) + len(answer)] == [*first.ids, *answer]
    assert text(chatml, second.ids).endswith(
        "English: so today<|im_end|>\n<|im_start|>assistant\nAlso heute<|im_end|>\n"
        "<|im_start|>user\nEnglish: we made it<|im_end|>\n<|im_start|>assistant\n"
    )
    assert builder.context_ids([]) == ()


@pytest.mark.parametrize("family", ["chatml", "qwen3", "tower"])
def test_examples_are_finished_turns_at_the_end_of_the_shared_prefix(family):
    """Example translations come before the talk as turns the model already answered, in the
    prefix every source shares (so their KV is computed once), tokenized as a source and an
    answer are; the prompt is the tokenizer's own tokenization of the rendered text."""
    tok = bpe_tokenizer(GEMMA_TEMPLATE if family == "tower" else CHATML_TEMPLATE)
    examples = [("so today we talk about the weather.", "Also heute reden wir über das Wetter.")]
    plain = PromptBuilder(tok, family, "en", "de")
    builder = PromptBuilder(tok, family, "en", "de", examples=examples)
    prompt = builder.build("all human beings")
    assert prompt.prefix == builder.prefix == builder.build("so").prefix
    assert prompt.prefix[: len(plain.prefix)] == plain.prefix
    shown = text(tok, prompt.prefix[len(plain.prefix) :])
    assert shown.startswith(" so today we talk about the weather.") and "Also heute reden wir" in shown
    assert text(tok, prompt.ids).endswith(text(tok, plain.build("all human beings").ids)[-60:])
    assert tok.encode(tok.decode(prompt.ids), add_special_tokens=False) == prompt.ids
    assert builder.examples == tuple(examples) and plain.examples == ()


SOURCES = ["so today we talk", "so today", '"Quoted" words', "42 rights.", "e.g. it's cold", "Würde\nund"]


@pytest.mark.parametrize("family", ["chatml", "qwen3"])
def test_prompt_ids_are_the_tokenizers_own_tokenization_of_the_rendered_text(family):
    """With merges, " so" is one token: the source keeps its leading space, the prefix stays
    shared, and no prompt ends in a lone space (the qwen3 "German:" tag)."""
    tok = bpe_tokenizer()
    builder = PromptBuilder(tok, family, "en", "de")
    for source in SOURCES:
        prompt = builder.build(source)
        assert tok.encode(tok.decode(prompt.ids), add_special_tokens=False) == prompt.ids, source
        assert prompt.prefix == builder.prefix
    assert tok.decode([builder.build("so today").source[0]]) == " so"
    assert not tok.decode(list(builder.suffix)).endswith(" ")
