"""Drafts proposed while decoding, a plug-in of the update (``update.update_requests`` verifies
them): the default method rejoins its old draft (resync); the n-gram pools are for research.

Contract: ``Lookahead`` holds the settings (which proposals, how long, checked with which bias);
``Proposer``, called with the output decoded so far and how many draft tokens the update's verify
pass accepted, returns a ``Proposal`` of tokens that may follow (or None):

* **resync** (after Input-guided Aggressive Decoding): after the old draft was rejected at position
  d, when the last ``n`` output tokens occur exactly once in the rest of the old draft, propose what
  follows them there; ``n`` is each of ``anchors`` in turn (the default: 2; ``(2, 1)`` lets a
  token unique in the rest of the draft anchor it where the last two tokens do not). Rewording early
  in a sentence often leaves its tail intact, so decoding can rejoin the old draft.
* **n-gram pools** (prompt lookup): when resync has nothing to propose (no old draft left, or no
  unique match in it), look the last ``n`` output tokens up in each pool in turn and propose the
  (up to ``pool_len``) tokens that follow their last occurrence in the first pool that has them.
  Pools: the source ids, which helps with copy-through tokens (names, numbers, code), and the
  session's earlier outputs (``History``: this segment's earlier outputs, then the committed
  segments, newest first), which helps where the model words a new sentence as it worded an
  earlier one.

``update.update_requests`` checks each proposal in one pass (``verify.decide``: the same rule as the
update's draft, with its β, or with the proposal's own, ``Proposal.beta``: ``ssbd-pool`` checks its
pool guesses at β = 0, so they only save passes and never change the output) and counts what each
kind gained in the update's ``Outcome``. With β = 0 every accepted token is the greedy token, so
the output equals plain greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .verify import accept_threshold

DEFAULT_NGRAM = 2
DEFAULT_ANCHORS = (DEFAULT_NGRAM,)  # resync's anchor lengths, tried in turn
DEFAULT_MAX_PROPOSAL = 16
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_HISTORY = 8  # earlier outputs kept per kind (this segment's, committed ones)


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


@dataclass(frozen=True)
class Lookahead:
    """Which proposals an update checks while decoding (a translator's ``TranslatorConfig.lookahead``).

    Attributes:
        resync: after the draft is rejected, rejoin it where the new output matches it again.
        ngram_drafts: propose source n-gram continuations (copy-through tokens) while decoding.
        history_drafts: propose n-gram continuations from the session's earlier outputs too (this
            segment's earlier outputs, then committed segments; ``History``).
        ngram_len: the most tokens an n-gram proposal holds. Default 16.
        ngram_beta: the bias n-gram proposals are checked with; None (the default): the update's.
            0 makes them lossless: the output is what the method gives without them.
        resync_anchors: how many of the output's last tokens resync looks up in the old draft, each
            length in turn until one occurs exactly once there. Default (2,); (2, 1) rejoins more
            often (research: docs/results.md, "What anchors a rejoin").
    """

    resync: bool = False
    ngram_drafts: bool = False
    history_drafts: bool = False
    ngram_len: int = DEFAULT_MAX_PROPOSAL
    ngram_beta: float | None = None
    resync_anchors: tuple[int, ...] = DEFAULT_ANCHORS

    def __post_init__(self):
        if not isinstance(self.ngram_len, int) or self.ngram_len < 1:
            raise ValueError(f"ngram_len must be a positive integer, got {self.ngram_len!r}")
        anchors = self.resync_anchors
        if not anchors or not all(isinstance(n, int) and n >= 1 for n in anchors):
            raise ValueError(f"resync_anchors must be positive integers, got {anchors!r}")
        if self.ngram_beta is not None:
            accept_threshold(self.ngram_beta)

    @property
    def proposes(self) -> bool:
        """Some kind of proposal is on."""
        return self.resync or self.ngram_drafts or self.history_drafts


@dataclass(frozen=True)
class Proposal:
    """Tokens that may follow the output: their ``kind`` (``resync`` or ``ngram``) and the bias to
    check them with (None: the update's)."""

    tokens: list[int]
    kind: str
    beta: float | None = None


@dataclass
class Proposer:
    """Proposes continuations of the output; see the module docstring.

    Args:
        old_draft: the previous output (the update's draft), if resync is on; else empty.
        anchors: the lengths of the output's tail resync looks up in it, in turn.
        pools: token sequences searched for n-gram proposals, in order of preference; empty: none.
        max_len, pool_len: the most tokens a resync / n-gram proposal holds.
        pool_beta: the bias n-gram pool proposals are checked with; None: the update's.
        max_attempts: proposals per update at most.
    """

    old_draft: Sequence[int] = ()
    pools: Sequence[Sequence[int]] = ()
    n: int = DEFAULT_NGRAM
    anchors: Sequence[int] = DEFAULT_ANCHORS
    max_len: int = DEFAULT_MAX_PROPOSAL
    pool_len: int = DEFAULT_MAX_PROPOSAL
    pool_beta: float | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    attempts: int = 0

    def __call__(self, output: Sequence[int], accepted: int) -> Proposal | None:
        """A proposal after ``output``, the verify pass having accepted ``accepted`` draft tokens
        (resync searches the old draft from there), or None."""
        if self.attempts >= self.max_attempts:
            return None
        proposal = None
        if self.old_draft and accepted < len(self.old_draft):
            for n in self.anchors:
                at = find_unique(self.old_draft, output[-n:], accepted) if len(output) >= n else None
                if at is not None and at < len(self.old_draft):  # something follows it there
                    proposal = Proposal(list(self.old_draft[at : at + self.max_len]), "resync")
                    break
        tail = output[-self.n :]
        for pool in self.pools if proposal is None and len(output) >= self.n else ():
            at = find_last(pool, tail)
            if at is not None and at < len(pool):
                proposal = Proposal(list(pool[at : at + self.pool_len]), "ngram", self.pool_beta)
                break
        if proposal is not None:
            self.attempts += 1
        return proposal


@dataclass
class History:
    """A session's earlier outputs as n-gram pools (``pools()``, newest first): this segment's
    earlier outputs, then its committed segments' outputs, at most ``keep`` of each."""

    keep: int = DEFAULT_HISTORY
    segment: list[tuple[int, ...]] = field(default_factory=list)
    committed: list[tuple[int, ...]] = field(default_factory=list)

    def seen(self, output: Sequence[int]) -> None:
        """Record a live (not final) output of the current segment."""
        self.segment = _newest_first(self.segment, output, self.keep)

    def commit(self, output: Sequence[int]) -> None:
        """Record the segment's final output; the next outputs belong to a new segment."""
        self.committed = _newest_first(self.committed, output, self.keep)
        self.drop_segment()

    def drop_segment(self) -> None:
        """Forget the current segment's live outputs (it ends, or is abandoned)."""
        self.segment = []

    def pools(self) -> list[tuple[int, ...]]:
        return [*self.segment, *self.committed]


def _newest_first(kept: list[tuple[int, ...]], output: Sequence[int], keep: int) -> list[tuple[int, ...]]:
    output = tuple(output)
    if not output or (kept and kept[0] == output):  # an empty or repeated output adds nothing
        return kept
    return [output, *kept][:keep]
