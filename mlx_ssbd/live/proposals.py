"""Everything an update proposes beyond its draft, behind one object: the translator's plug-in point.

Contract: ``Proposals(config, stops, draft_model)`` is built from a ``methods.TranslatorConfig``
and owns the lookahead features and their state across updates: resync and n-gram pools
(``engine.lookahead.Proposer``, consulted while decoding), the session's earlier outputs as pools
(``engine.lookahead.History``) and a draft model's tail guess (``engine.tail.TailDrafter``, fed in
the verify pass). Per update, ``plan(source_ids, head, draft, room)`` returns a ``Plan`` (the
``Proposer`` for the ``engine.Job``, or None; the guessed tail; what the guess cost), and
``report(plan, outcome)`` what they gained as ``ProposalStats`` (the translator copies them into
the update's flat ``UpdateStats``). ``seen``/``commit``/``drop_segment`` keep the history in step
with the segment. With every feature off, ``plan`` proposes nothing and the update is plain SSBD.

None changes the output at β = 0. What each costs and gains is measured in ``docs/results.md``
("Ordinary sentences, and what a pass costs"): on short sentences the session's n-gram pools
checked at β = 0 (``ssbd-pool``) were the fastest method, and a draft model's tail guess did not
pay on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine import update as engine
from ..engine.lookahead import History, Proposer
from ..engine.tail import TailDrafter
from .methods import TranslatorConfig


@dataclass(frozen=True)
class ProposalStats:
    """What the proposals of one update gained and cost (field names as in ``UpdateStats``)."""

    resynced: int = 0  # tokens accepted by rejoining the old draft after a divergence
    ngram_accepted: int = 0  # tokens accepted from n-gram proposals (source, earlier outputs)
    proposals: int = 0  # lookahead proposals verified (each one forward pass)
    tail_guessed: int = 0  # tokens the draft model guessed past the draft
    tail_accepted: int = 0  # of them, accepted by the verify pass
    draft_model_passes: int = 0  # the draft model's forward passes
    tail_s: float = 0.0  # wall time of the guess


@dataclass(frozen=True)
class Plan:
    """One update's proposals: the ``Proposer`` consulted while decoding, the guessed tail, and
    what the guess cost."""

    proposer: Proposer | None = None
    guess: list[int] = field(default_factory=list)
    guess_passes: int = 0
    guess_s: float = 0.0


class Proposals:
    """See the module docstring.

    Args:
        config: the translator's settings (``resync``, ``ngram_drafts``, ``history_drafts``,
            ``ngram_len``, ``ngram_beta``, ``tail_guess``).
        stops: the translator's stop rule (a guess ends at a stop token).
        draft_model: ``(model, tokenizer)`` for ``tail_guess``.
        history: earlier outputs to keep (when the settings change between segments).

    Raises:
        ValueError: ``tail_guess`` without a draft model.
    """

    def __init__(
        self,
        config: TranslatorConfig,
        stops,
        draft_model: tuple | None = None,
        history: History | None = None,
    ):
        self.config = config
        self.history = history if history is not None else History()
        self.drafter = None
        if config.tail_guess:
            if draft_model is None:
                raise ValueError("tail_guess needs a draft model (a smaller model with the same tokenizer)")
            self.drafter = TailDrafter(draft_model[0], stops, config.tail_guess)

    def plan(self, source_ids: Sequence[int], head: Sequence[int], draft: Sequence[int], room: int) -> Plan:
        """The proposals for an update that verifies ``draft`` after ``head`` and may write
        ``room`` tokens after ``head``."""
        cfg = self.config
        proposer = None
        if cfg.resync or cfg.ngram_drafts or cfg.history_drafts:
            pools = [
                *(self.history.pools() if cfg.history_drafts else ()),
                *([source_ids] if cfg.ngram_drafts else ()),
            ]
            proposer = Proposer(
                old_draft=draft if cfg.resync else (),
                pools=pools,
                pool_len=cfg.ngram_len,
                pool_beta=cfg.ngram_beta,
            )
        if self.drafter is None or len(draft) >= room:
            return Plan(proposer)
        calls, seconds = self.drafter.cache.forward_calls, self.drafter.seconds
        guess = self.drafter.guess(head, draft)[: room - len(draft)]
        return Plan(proposer, guess, self.drafter.cache.forward_calls - calls, self.drafter.seconds - seconds)

    @staticmethod
    def report(plan: Plan | None, outcome: engine.Outcome | None) -> ProposalStats:
        """What ``plan`` gained in the update that ended with ``outcome`` (None: no update ran)."""
        if plan is None:
            return ProposalStats()
        proposer = plan.proposer
        return ProposalStats(
            resynced=proposer.resynced if proposer else 0,
            ngram_accepted=proposer.ngram_accepted if proposer else 0,
            proposals=proposer.attempts if proposer else 0,
            tail_guessed=len(plan.guess),
            tail_accepted=outcome.guess_accepted if outcome else 0,
            draft_model_passes=plan.guess_passes,
            tail_s=plan.guess_s,
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
