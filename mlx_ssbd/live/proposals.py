"""Everything an update proposes beyond its draft, behind one object: the translator's plug-in point.

Contract: ``Proposals(lookahead)`` is built from a translator's ``engine.lookahead.Lookahead``
settings (``TranslatorConfig.lookahead``; None: none) and owns the lookahead features and their
state across updates: resync and n-gram pools (``engine.lookahead.Proposer``, consulted while
decoding) and the session's earlier outputs as pools (``engine.lookahead.History``). Per update,
``plan(source_ids, draft)`` returns the ``Proposer`` for the ``engine.Job`` (or None), and
``report(outcome)`` what the update's proposals gained, read off its ``engine.Outcome``, as
``ProposalStats`` (the translator copies them into the update's flat ``UpdateStats``).
``seen``/``commit``/``drop_segment`` keep the history in step with the segment. With every feature
off, ``plan`` proposes nothing and the update is plain SSBD.

None changes the output at β = 0. What each costs and gains is measured in ``docs/results.md``:
rejoining the draft saved passes on the talk sets and is part of the user methods ``ssbd`` and
``ssbd-final0``; the n-gram pools are for research (``ssbd-ngram``, ``ssbd-pool``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.lookahead import History, Lookahead, Proposer
from ..engine.update import Outcome


@dataclass(frozen=True)
class ProposalStats:
    """What the proposals of one update gained and cost (field names as in ``UpdateStats``)."""

    resynced: int = 0  # tokens accepted by rejoining the old draft after a divergence
    ngram_accepted: int = 0  # tokens accepted from n-gram proposals (source, earlier outputs)
    proposals: int = 0  # lookahead proposals verified (each one forward pass)
    proposal_widths: tuple[int, ...] = ()  # tokens each of those passes fed (token and proposal)


class Proposals:
    """See the module docstring."""

    def __init__(self, lookahead: Lookahead | None):
        self.lookahead = lookahead
        self.history = History()

    def plan(self, source_ids: Sequence[int], draft: Sequence[int]) -> Proposer | None:
        """The proposer for an update that verifies ``draft`` of a source ``source_ids``."""
        cfg = self.lookahead
        if cfg is None or not cfg.proposes:
            return None
        pools = [
            *(self.history.pools() if cfg.history_drafts else ()),
            *([source_ids] if cfg.ngram_drafts else ()),
        ]
        return Proposer(
            old_draft=draft if cfg.resync else (),
            anchors=cfg.resync_anchors,
            pools=pools,
            pool_len=cfg.ngram_len,
            pool_beta=cfg.ngram_beta,
        )

    @staticmethod
    def report(outcome: Outcome) -> ProposalStats:
        """What the proposals of the update that ended in ``outcome`` gained."""
        return ProposalStats(
            outcome.proposed.get("resync", 0),
            outcome.proposed.get("ngram", 0),
            outcome.proposals,
            tuple(outcome.proposal_widths),
        )

    def seen(self, output: Sequence[int]) -> None:
        """A live output of the current segment (a pool for ``history_drafts``)."""
        self.history.seen(output)

    def commit(self, output: Sequence[int]) -> None:
        """The segment's committed output."""
        self.history.commit(output)

    def drop_segment(self) -> None:
        """The segment ends or is abandoned: forget its live outputs."""
        self.history.drop_segment()
