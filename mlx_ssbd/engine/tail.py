"""Guess how a translation continues past its draft, with a smaller model of the same tokenizer.

Contract: ``TailDrafter(model, stops, max_len).guess(head, draft)`` returns up to ``max_len``
token ids that a small draft model expects after ``head + draft``, ending with the raw stop token
when the draft model stops within them. ``update.update_requests`` feeds the guess after the draft
in the update's one verify pass and accepts it only where it is the big model's greedy choice
(β = 0), so a guess changes how many passes an update takes, never its output.

Why: when the source grows by a word, SSBD accepts the old translation in one pass but decodes the
translation of the new word token by token (on short sentences most of an update's passes). A
draft model a third of the size guesses those tokens for a fraction of a big step each; when the
guess holds, the update needs one big pass instead of several. Measured on this project's CPU, the
0.5B guessing for the 1.5B does not pay: 21.5% of its guessed tokens are accepted (``mlx-ssbd bench``,
benchmarks/results/2026-11-21-linux-x86_64-2cpu/sentences-1.5b).

How the guess is made: the draft model takes the *big* model's previous output as given, not its
own, and decodes on greedily from its end, on its own ``TokenCache`` (so the guess lines up with
the draft it follows, and the prompt and every shared prefix stay cached between updates, like a
translator's), while its top probability is at least ``min_prob``. An empty draft (a segment's
first update) gets a guess from scratch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import mlx.core as mx

from . import update as engine
from .cache import TokenCache

DEFAULT_MIN_PROB = 0.5  # stop guessing where the draft model is unsure (measured: fewer wasted passes)
DEFAULT_GUESS = 6  # tokens: a new source word's translation plus the end of the turn, most of the time


class TailDrafter:
    """See the module docstring.

    Args:
        model: the draft model (already in its compute dtype), sharing the big model's tokenizer.
        stops: the big model's stop rule (``stops.StopRule``): a stop ends the guess, kept raw.
        max_len: the most tokens guessed per update.
        min_prob: the guess ends before a token the draft model gives less than this probability.
    """

    def __init__(
        self,
        model,
        stops: Callable[[int], tuple[int, ...] | None],
        max_len: int = DEFAULT_GUESS,
        min_prob: float = DEFAULT_MIN_PROB,
    ):
        if max_len < 1:
            raise ValueError(f"a tail guess needs max_len >= 1, got {max_len}")
        self.cache = TokenCache(model)
        self.max_len = max_len
        self.min_prob = min_prob
        self._is_stop = lambda token: stops(token) is not None
        self.seconds = 0.0  # wall time spent guessing (cumulative)

    def guess(self, head: Sequence[int], draft: Sequence[int]) -> list[int]:
        """Up to ``max_len`` tokens guessed to follow ``head + draft``; see the module docstring."""
        start = time.perf_counter()
        logits = self.cache.feed([(self.cache, engine.Feed([*head, *draft], 1))])[0].logits
        out: list[int] = []
        while True:
            probs = mx.softmax(logits[-1].astype(mx.float32))
            token, top = mx.argmax(probs), probs.max()
            mx.eval(token, top)  # one host sync per guessed token
            token = int(token.item())
            if top.item() < self.min_prob:
                break  # the draft model is unsure: a guess here would likely be rejected
            out.append(token)
            if self._is_stop(token) or len(out) >= self.max_len:
                break
            logits = self.cache.forward([token])
        self.seconds += time.perf_counter() - start
        return out


def same_vocabulary(tokenizer, other) -> bool:
    """True when two tokenizers map every token to the same id (a draft model must share it)."""
    return tokenizer.get_vocab() == other.get_vocab()
