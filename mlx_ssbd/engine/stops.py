"""Which tokens end an output, and what of them is kept.

Contract: ``StopRule(tokenizer, on_newline)(token)`` is ``None`` for a token that does not end the
output, else the tuple of token ids to append in its place (usually empty). EOS and end-of-turn
tokens end it and leave nothing. With ``on_newline`` (captions are one line), a token holding a
newline ends it too, but the text before the newline stays: Qwen merges ``".\\n"`` and ``"。\\n"``
into single tokens, and dropping the whole token would cut a caption's full stop. The kept text is
re-tokenized (``"."``); it is never fed to the model in this update (the next update verifies it as
part of the draft, like any other output token).

``loop_cut(tokens, floor)`` is the repetition rule: an output that ends in a decoding loop (a
block of at most ``LOOP_MAX_PERIOD`` tokens repeated at least ``LOOP_MIN_REPEATS`` times in a
row, ``LOOP_MIN_TOKENS`` tokens at least: "Krankenhausarztarztarzt...") ends there, with one copy
of the block kept. It reads token ids only, so greedy decoding and SSBD at β = 0 cut the same
outputs at the same place.
"""

from __future__ import annotations

from collections.abc import Sequence

NOT_A_STOP = None
LOOP_MAX_PERIOD = 16  # tokens in a repeated block, at most
LOOP_MIN_REPEATS = 3  # copies of it in a row, at least ...
LOOP_MIN_TOKENS = 12  # ... and this many tokens in all ("no, no, no" is speech, not a loop)


class StopRule:
    """See the module docstring. Results are memoized per token id."""

    def __init__(self, tokenizer, *, on_newline: bool = True):
        self.tokenizer = tokenizer
        self.on_newline = on_newline
        self.ids = stop_ids(tokenizer)
        self._memo: dict[int, tuple[int, ...] | None] = {}

    def __call__(self, token: int) -> tuple[int, ...] | None:
        if token in self.ids:
            return ()
        if not self.on_newline:
            return NOT_A_STOP
        if token not in self._memo:
            text = self.tokenizer.decode([token])
            if "\n" not in text:
                self._memo[token] = NOT_A_STOP
            else:
                before = text.split("\n", 1)[0]
                kept = self.tokenizer.encode(before, add_special_tokens=False) if before.strip() else []
                self._memo[token] = tuple(int(t) for t in kept)
        return self._memo[token]


def stop_ids(tokenizer) -> frozenset[int]:
    """EOS ids (mlx-lm's wrapper has a set, HF tokenizers an int) plus end-of-turn tokens."""
    ids: set[int] = set()
    for attr in ("eos_token_ids", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>") if t in vocab)
    return frozenset(ids)


# (period, tokens its copies must cover): whole copies, LOOP_MIN_REPEATS and LOOP_MIN_TOKENS at least
_SPANS = tuple(
    (period, period * max(LOOP_MIN_REPEATS, -(-LOOP_MIN_TOKENS // period)))
    for period in range(1, LOOP_MAX_PERIOD + 1)
)


def loop_cut(tokens: Sequence[int], floor: int = 0) -> int:
    """How many tokens to drop from the end of ``tokens`` because they end in a loop (module
    docstring); 0 when they do not. The first ``floor`` tokens (a locked start) are never cut.
    Called after every decoded token, so a period the last token breaks costs one comparison."""
    n = len(tokens)
    for period, span in _SPANS:
        if span > n:
            break  # a longer period needs at least as long a span
        if tokens[n - 1] != tokens[n - 1 - period]:
            continue  # the last token breaks this period (the common case: no loop at all)
        start = n - span
        if any(tokens[i] != tokens[i + period] for i in range(start, n - period)):
            continue
        while start > 0 and tokens[start - 1] == tokens[start - 1 + period]:
            start -= 1  # the loop began before the copies that tripped the rule
        return n - max(start + period, floor)
    return 0
