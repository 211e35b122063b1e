"""Drafts proposed while decoding (``update.update_steps`` verifies them).

Contract: ``Proposer`` looks at the output decoded so far and proposes tokens that may follow:

* **resync** (after Input-guided Aggressive Decoding): after the old draft was rejected at position
  d, when the last ``n`` output tokens occur exactly once in the rest of the old draft, propose what
  follows them there. Rewording early in a sentence often leaves its tail intact, so decoding can
  rejoin the old draft.
* **source n-grams** (prompt lookup): when resync has nothing to propose (no old draft left, or no
  unique match in it) and the last ``n`` output tokens occur in the source ids, propose the
  source tokens that follow, which helps with copy-through
  tokens (names, numbers, code).

``update.update_steps`` checks each proposal in one biased pass (``verify.decide``: the same rule
and β as the update's draft). With β = 0 every accepted token is the greedy token, so the output
equals plain greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_NGRAM = 2
DEFAULT_MAX_PROPOSAL = 16
DEFAULT_MAX_ATTEMPTS = 4


def find_unique(haystack: Sequence[int], needle: Sequence[int], start: int = 0) -> int | None:
    """Index just past the single occurrence of ``needle`` in ``haystack[start:]``, else None."""
    n = len(needle)
    hits = [i + n for i in range(start, len(haystack) - n + 1) if list(haystack[i : i + n]) == list(needle)]
    return hits[0] if len(hits) == 1 else None


def find_last(haystack: Sequence[int], needle: Sequence[int]) -> int | None:
    """Index just past the last occurrence of ``needle`` in ``haystack``, else None."""
    n = len(needle)
    for i in range(len(haystack) - n, -1, -1):
        if list(haystack[i : i + n]) == list(needle):
            return i + n
    return None


@dataclass
class Proposer:
    """Proposes continuations of the output; see the module docstring.

    Args:
        old_draft: the previous output (the update's draft), if resync is on; else empty.
        diverged_at: how many draft tokens the update's verify pass accepted.
        source: the source token ids, if n-gram drafts are on; else empty.
    """

    old_draft: Sequence[int] = ()
    diverged_at: int = 0
    source: Sequence[int] = ()
    n: int = DEFAULT_NGRAM
    max_len: int = DEFAULT_MAX_PROPOSAL
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    attempts: int = 0
    resynced: int = 0  # tokens accepted from resync proposals
    ngram_accepted: int = 0  # tokens accepted from source n-gram proposals
    _kind: str = ""

    def __call__(self, output: Sequence[int]) -> list[int]:
        if self.attempts >= self.max_attempts or len(output) < self.n:
            return []
        tail = output[-self.n :]
        proposal, self._kind = [], ""
        if self.old_draft and self.diverged_at < len(self.old_draft):
            at = find_unique(self.old_draft, tail, self.diverged_at)
            if at is not None:
                proposal, self._kind = list(self.old_draft[at : at + self.max_len]), "resync"
        if not proposal and self.source:
            at = find_last(self.source, tail)
            if at is not None:
                proposal, self._kind = list(self.source[at : at + self.max_len]), "ngram"
        if proposal:
            self.attempts += 1
        return proposal

    def accepted(self, count: int) -> None:
        if self._kind == "resync":
            self.resynced += count
        elif self._kind == "ngram":
            self.ngram_accepted += count
