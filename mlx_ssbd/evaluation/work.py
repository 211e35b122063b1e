"""An update's model work priced at a machine's pass costs: the same decisions on other hardware.

What a method gains over RT is decided by its decisions (how many tokens each update's first pass
feeds, how many decode steps follow) and by what passes cost on the machine (a pass over n tokens
against one decode step). The first is counted by every benchmark run (``records.UpdateStats``);
the second is measured per machine (``benchmarks/engine/verify_cost.py``,
``benchmarks/engine/decode_step.py``). This module puts them together: the time a run's updates
would take, in decode steps, on a machine whose passes cost what a report measured there.

Contract: ``PassCosts(name, points)``: what one forward pass over n new tokens costs, in decode
steps of that machine, from measured ``(n, steps)`` points (linear between them and past the last
two; one token costs one step). ``PassCosts.from_report(name, path, row=None)`` reads a
``verify_cost.json`` (its ``pass_over_step``) or a ``decode_step.json`` (the 16-token pass of the
row whose ``format`` is ``row``). ``update_work(record)``: ``(first-pass tokens, first-pass chunks,
one-token decode steps, widths of the decode steps that also checked a lookahead proposal)`` of one
update record, or None where it cannot be told (a record with proposals but without their widths,
``proposal_widths``, which older runs did not record); an update that ran no pass is
``(0, 0, 0, ())``. ``update_steps(record, costs)``: that work in decode steps.
``modelled_speedups(records, costs, base)``: per config, the base config's modelled time over the
config's (None for a config with an update that cannot be told). Both take ``piece``: the same
decisions had each draft been verified ``piece`` tokens a pass, stopping after the piece that holds
the first rejected token (``update_passes``). The model leaves out what is not a model pass (the
engine's own time, prompts, captions), so on a machine whose passes are cheap it is what the
decisions allow, not a measurement.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..engine.planner import PREFILL_CHUNK


@dataclass(frozen=True)
class PassCosts:
    """See the module docstring. ``points``: ``(tokens, decode steps)``, at least two tokens counts."""

    name: str
    points: tuple[tuple[int, float], ...]

    def __post_init__(self):
        points = tuple(sorted((int(n), float(steps)) for n, steps in self.points))
        if len(points) < 2 or points[0][0] < 1 or len({n for n, _ in points}) != len(points):
            raise ValueError(f"{self.name}: need costs of at least two distinct pass widths >= 1")
        object.__setattr__(self, "points", points)

    def cost(self, tokens: float) -> float:
        """Decode steps one pass over ``tokens`` new tokens costs (0 for none)."""
        if tokens <= 0:
            return 0.0
        if tokens <= 1:
            return float(tokens)
        pairs = list(zip(self.points, self.points[1:]))
        (a, cost_a), (b, cost_b) = next(((p, q) for p, q in pairs if tokens <= q[0]), pairs[-1])
        return cost_a + (cost_b - cost_a) * (tokens - a) / (b - a)

    @classmethod
    def from_report(cls, name: str, path: str | Path, row: str | None = None) -> PassCosts:
        """The costs a verify-cost or decode-step report measured (module docstring)."""
        report = json.loads(Path(path).read_text())
        if "pass_over_step" in report:
            return cls(name, tuple((int(n), steps) for n, steps in report["pass_over_step"].items()))
        rows = {r["format"]: r for r in report.get("rows", ())}
        if row not in rows:
            raise ValueError(f"{path}: name one of the rows {sorted(rows)} (got {row!r})")
        return cls(name, ((1, 1.0), (16, rows[row]["verify16_in_decode_steps"])))


def update_work(record: dict) -> tuple[int, int, int, tuple[int, ...]] | None:
    """``(first-pass tokens, first-pass chunks, one-token decode steps, proposal steps' widths)`` of
    one update (module docstring): every pass after the first feeds one token but those that checked
    a proposal, which fed what ``proposal_widths`` says, and a first pass over more than
    ``PREFILL_CHUNK`` tokens goes a chunk per pass."""
    passes, fed = record["forward_passes"], record["tokens_fed"]
    if not passes:
        return 0, 0, 0, ()
    wide = tuple(record.get("proposal_widths") or ())
    if len(wide) != record.get("proposals", 0):
        return None
    passes, fed = passes - len(wide), fed - sum(wide)
    chunks = 1
    while fed - (passes - chunks) > chunks * PREFILL_CHUNK and chunks < passes:
        chunks += 1
    return fed - (passes - chunks), chunks, passes - chunks, wide


def update_passes(record: dict, piece: int | None = None) -> tuple[list[float], int, tuple[int, ...]] | None:
    """``(tokens of each pass before the decode steps, one-token decode steps, proposal steps'
    widths)`` of one update (None: it cannot be told). ``piece``: as if its draft had been verified
    ``piece`` tokens a pass, the first pass feeding the new tokens and the first piece, and no piece
    after the one that holds the first rejected token (the same decisions, so the same decode steps
    after them)."""
    work = update_work(record)
    if work is None:
        return None
    first, chunks, steps, wide = work
    draft, accepted = record.get("draft_tokens", 0), record.get("accepted", 0)
    if piece is None or chunks != 1 or draft <= piece:
        return [first / chunks] * chunks if chunks else [], steps, wide
    passes, fed = [first - draft + piece], piece
    while fed < draft and accepted >= fed:
        passes.append(min(piece, draft - fed))
        fed += passes[-1]
    return passes, steps, wide


def update_steps(record: dict, costs: PassCosts, piece: int | None = None) -> float | None:
    """One update's model work in decode steps at ``costs`` (None: it cannot be told); ``piece``:
    its draft verified in pieces (``update_passes``)."""
    work = update_passes(record, piece)
    if work is None:
        return None
    passes, steps, wide = work
    return sum(costs.cost(tokens) for tokens in (*passes, *wide)) + steps


def modelled_speedups(
    records: Iterable[dict], costs: PassCosts, base: str, piece: int | None = None
) -> dict[str, float | None]:
    """Per config of ``records``: ``base``'s modelled time over its own (module docstring); ``piece``:
    each config's drafts verified in pieces (``update_passes``), the base's work as it was."""
    totals: dict[str, float | None] = {}
    for record in records:
        label = record["config"]
        steps = update_steps(record, costs, None if label == base else piece)
        if label not in totals or totals[label] is not None:
            totals[label] = None if steps is None else (totals.get(label) or 0.0) + steps
    if not totals.get(base):
        raise ValueError(f"no modelled work for the base config {base!r}")
    return {
        label: None if t is None else (totals[base] / t if t else math.inf) for label, t in totals.items()
    }


def mean_work(records: Sequence[dict], label: str) -> tuple[float, float] | None:
    """Mean first-pass tokens and decode steps (those that checked a proposal too) per update of
    ``label`` that ran a pass."""
    works = [update_work(r) for r in records if r["config"] == label and r["forward_passes"]]
    if not works or None in works:
        return None
    return sum(w[0] for w in works) / len(works), sum(w[2] + len(w[3]) for w in works) / len(works)
