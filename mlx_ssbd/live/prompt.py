"""Translation prompts as token ids split into (prefix, source, suffix).

Contract: ``PromptBuilder.build(text)`` returns a ``Prompt`` whose ``ids`` are
``prefix + source + suffix``. The prefix (system prompt, user-turn opening, source-language tag)
is tokenized once and is identical for every update, so its KV cache is shared by all segments;
the source is tokenized after it, so a growing source shares its leading tokens with the
previous update. The split is found by rendering the model's own chat template around a sentinel,
so any chat model works; a *family* only chooses the wording (the paper's Table 5 templates).

The ids are the tokenizer's own tokenization of the rendered text, as the model saw in training:
the whitespace that separates the source from the text before it ("English: so") is tokenized
with the source (``["English", ":", " so"]``, never ``[":", " ", "so"]``), and a prompt never ends
in a lone space (the answer's first token carries it). The prefix stops before that whitespace,
so it still tokenizes the same for every source (BPE pre-tokenizers split before " word").

With ``examples`` (``(source text, translation)`` pairs: a translation memory), the prefix ends
with them as finished user/assistant turns, built as context is: the model sees how this talk's
kind of text is translated, and they are computed once, with the rest of the shared prefix.

With ``context`` (earlier committed segments as ``(source ids, output ids)`` pairs), the prefix
also holds those segments as finished user/assistant turns, built from the very ids that were fed
for them (source ids, suffix, output ids), so a cache that translated them holds exactly this
prefix and keeps its KV (``cache.TokenCache.reuse``): context costs no recomputation.

Families:
  * ``generic``: any chat model: the model's own template with a system turn where the template
    takes one (it renders the system text), folded into the user turn where it does not (it
    raises, as Gemma's and Mistral's do, or drops it).
  * ``chatml``: Qwen2.5 and other ChatML models; system + user "{src}: {text}".
  * ``qwen3``: as chatml, and the assistant turn opens with an empty think block and "{tgt}:".
  * ``tower``: Tower+ (Gemma-2 template, no system role): the instruction joins the user turn.
``detect_family`` names the paper's families where a template is theirs, ``generic`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .languages import language_name

SYSTEM_TEMPLATE = (
    "Translate the {src} source text to {tgt}. "
    "Return only the translation, without any additional explanations or commentary."
)
USER_TEMPLATE = "{src}: {text}"
TERMS_TEMPLATE = "\n\n{tgt} terms to use: {pairs}."  # after the source, in the user turn (a glossary's hits)
_SENTINEL = "\u2063SSBD_SOURCE\u2063"


@dataclass(frozen=True)
class PromptFamily:
    """How one model family words a translation request."""

    name: str
    # False: the instruction is prepended to the user turn; None: as the template takes it
    system_role: bool | None = True
    assistant_prefix: str = ""  # text the assistant turn opens with; may use {tgt}


FAMILIES = {
    "generic": PromptFamily("generic", system_role=None),
    "chatml": PromptFamily("chatml"),
    "qwen3": PromptFamily("qwen3", assistant_prefix="<think>\n\n</think>\n\n{tgt}:"),
    "tower": PromptFamily("tower", system_role=False),
}


def get_family(name: str) -> PromptFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown prompt family {name!r}; known: {', '.join(FAMILIES)}") from None


def detect_family(chat_template: str | None) -> str:
    """The prompt family for a tokenizer's chat template: the paper's where the template is a
    ChatML or Gemma-2 one, ``generic`` for any other; a tokenizer without one is refused."""
    template = chat_template or ""
    if not template.strip():
        raise ValueError(
            "this model's tokenizer has no chat template: it is not a chat model (or pass a prompt "
            f"family: {', '.join(FAMILIES)})"
        )
    if "<|im_start|>" in template and "<|im_sep|>" not in template:
        return "qwen3" if "<think>" in template else "chatml"
    if "<start_of_turn>" in template and "first_user_prefix" not in template:
        return "tower"
    return "generic"


@dataclass(frozen=True)
class Prompt:
    """Token ids of one translation prompt, with the source span marked."""

    prefix: tuple[int, ...]
    source: tuple[int, ...]
    suffix: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return [*self.prefix, *self.source, *self.suffix]

    def __len__(self) -> int:
        return len(self.prefix) + len(self.source) + len(self.suffix)


class PromptBuilder:
    """Builds prompts for one (family, source language, target language) triple.

    Args:
        tokenizer: a Hugging Face tokenizer (or mlx-lm ``TokenizerWrapper``) with a chat template.
        family: a key of ``FAMILIES``.
        source_lang, target_lang: ISO 639-1 codes.
        examples: ``(source text, translation)`` pairs shown as finished turns at the end of the
            prefix (module docstring).
    """

    def __init__(
        self,
        tokenizer,
        family: str,
        source_lang: str,
        target_lang: str,
        examples: Sequence[tuple[str, str]] = (),
    ):
        self.family = get_family(family)
        self.source_lang = source_lang
        self.target_lang = target_lang
        src, tgt = language_name(source_lang), language_name(target_lang)
        self._tokenizer = tokenizer
        self.system_role = self.family.system_role
        if self.system_role is None:
            self.system_role = _takes_system_turn(tokenizer)
        prefix_text, self._suffix_text = self._render(tokenizer, src, tgt)
        # The space before the source is tokenized with it (see the module docstring).
        prefix_text, self._boundary = _split_trailing_spaces(prefix_text)
        self.prefix = tuple(self._encode(prefix_text))
        self.suffix = tuple(self._encode(self._suffix_text))
        turn_break, _ = _split_trailing_spaces(self._render_turn_break(tokenizer, src, tgt))
        self.turn_break = tuple(self._encode(turn_break))
        self.examples = tuple(examples)
        shown = [(self._encode(self._boundary + source), self._encode(target)) for source, target in examples]
        self.prefix += self.context_ids(shown)

    def _render_chat(self, tokenizer, src: str, tgt: str, text: str, more=()) -> str:
        """The chat template rendered: the instruction and a user turn holding ``text`` as the
        source, then the ``more`` messages, then the opening of the assistant's answer."""
        system = SYSTEM_TEMPLATE.format(src=src, tgt=tgt)
        user = USER_TEMPLATE.format(src=src, text=text)
        if self.system_role:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        else:
            messages = [{"role": "user", "content": f"{system}\n\n{user}"}]
        return tokenizer.apply_chat_template([*messages, *more], tokenize=False, add_generation_prompt=True)

    def _render(self, tokenizer, src: str, tgt: str) -> tuple[str, str]:
        rendered = self._render_chat(tokenizer, src, tgt, _SENTINEL)
        if rendered.count(_SENTINEL) != 1:
            raise ValueError("the chat template does not place the user text exactly once")
        prefix, suffix = rendered.split(_SENTINEL)
        suffix, _ = _split_trailing_spaces(suffix + self.family.assistant_prefix.format(tgt=tgt))
        return prefix, suffix

    def _render_turn_break(self, tokenizer, src: str, tgt: str) -> str:
        """The text between an assistant reply and the next source text (end of turn, user
        turn opening, source-language tag), from the template rendered with two turns."""
        marks = [f"\u2063SSBD_{n}\u2063" for n in range(3)]
        rendered = self._render_chat(
            tokenizer,
            src,
            tgt,
            marks[0],
            [
                {"role": "assistant", "content": marks[1]},
                {"role": "user", "content": USER_TEMPLATE.format(src=src, text=marks[2])},
            ],
        )
        start, end = rendered.find(marks[1]), rendered.find(marks[2])
        if start < 0 or end < start:
            raise ValueError("the chat template does not render an assistant turn between user turns")
        return rendered[start + len(marks[1]) : end]

    def context_ids(self, context) -> tuple[int, ...]:
        """Ids of earlier segments as finished turns: source, suffix, output, turn break each."""
        ids: list[int] = []
        for source_ids, output_ids in context:
            ids += [*source_ids, *self.suffix, *output_ids, *self.turn_break]
        return tuple(ids)

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def build(
        self, text: str, context_ids: tuple[int, ...] = (), terms: tuple[tuple[str, str], ...] = ()
    ) -> Prompt:
        """The prompt for one source text (already validated as non-empty), after earlier
        segments' ``context_ids`` (see ``context_ids``). ``terms``: ``(source term, required
        rendering)`` pairs (a glossary's entries found in ``text``), named after the source in
        the user turn, so the prefix (and its KV cache) stays the same for every caption."""
        suffix_text, suffix = self._suffix_text, self.suffix
        if terms:
            pairs = "; ".join(term_pair(term, rendering) for term, rendering in terms)
            suffix_text = (
                TERMS_TEMPLATE.format(tgt=language_name(self.target_lang), pairs=pairs) + suffix_text
            )
            suffix = tuple(self._encode(suffix_text))
        tail = tuple(self._encode(self._boundary + text + suffix_text))
        cut = len(tail) - len(suffix)
        if suffix and tail[cut:] != suffix:  # the suffix merged into the text: keep the
            cut = len(tail)  # tokenizer's own ids, all counted as source
        return Prompt(self.prefix + tuple(context_ids), tail[:cut], tail[cut:])


def term_pair(term: str, rendering: str) -> str:
    """How one glossary entry is named in the prompt."""
    return f'"{term}" = "{rendering}"'


def _takes_system_turn(tokenizer) -> bool:
    """The chat template renders a system turn (it neither raises on one nor drops its text)."""
    mark = "\u2063SSBD_SYSTEM\u2063"
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "system", "content": mark}, {"role": "user", "content": "x"}],
            tokenize=False,
            add_generation_prompt=True,
        )
    except Exception:
        return False
    return mark in rendered


def _split_trailing_spaces(text: str) -> tuple[str, str]:
    """``text`` without its trailing spaces, and those spaces."""
    kept = text.rstrip(" ")
    return kept, text[len(kept) :]
