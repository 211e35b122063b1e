"""How one round of a batch is fed: which rows sit it out, which share a model call, and how many
tokens each takes. The policy; ``batch.BatchCache`` keeps the KV layout and carries out the plan.

Contract: ``Planner(...).plan(requests, members)`` takes one ``Request`` per batched row with work
(its handle, how many tokens it must hold, how many of those are new, whether it may reuse its
cache) and the number of batched rows (running or parked), and returns a ``Plan``: the rows that
rest, and the model calls, each its rows and the most tokens any of them feeds (None: no bound).
The planner remembers only how many calls each heavy row has sat out (by row, weakly).
``chunk_for(new, limit)`` is the bound one row feeds under: None when its new tokens fit.

The rules, and why:

* **Chunks.** A row feeds at most ``chunk`` tokens a call (a long prompt or verify pass goes a
  chunk per call, so a call's width, its memory, stays bounded); ``shared_chunk`` (32) while other
  rows share the batch (a feed of at most that is *short* and goes whole); and in a call where
  another row has a short feed (a decode step, a caption's verify pass), a long feed takes only
  as many tokens as the widest short feed, at least ``side_chunk`` (2): rows share the call's
  width, and a row beside a long context attends over its padded length, so a decode step beside
  a long feed costs about twice what it costs alone, not seven times
  (``benchmarks/service/attacks.py``).
* **Heavy rows rest.** A row whose sequence is at least ``heavy`` tokens (512) and ``heavy_ratio``
  (4) times the shortest in the call joins one call in ``heavy_every`` (3) beside lighter ones:
  its padded length makes a lighter row's step cost 2-3x what it costs alone, so it gets about
  its share of the model's time. A feed that rebuilds from nothing never rests.
* **Calls by width.** Where a call's fixed cost is small next to padding (``call_tokens``, a CPU:
  ``platform.backend.call_tokens``), the rows are split into the calls that cost least in all,
  each costing ``call_tokens`` plus its rows x its widest row's tokens: three decode steps are not
  padded to the width of a fourth row's 30-token verify pass. With ``call_tokens`` None (a GPU)
  every round is one call.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from ..platform import backend

PREFILL_CHUNK = 128  # prompt tokens a row feeds per call at most (the 1.5B: a few seconds on 2 CPU cores)
SHARED_CHUNK = 32  # ... while other streams share the batch (a feed of at most this is short)
SIDE_CHUNK = 2  # ... at least, in a call where another stream has a short feed
HEAVY = 512  # a row this long, and HEAVY_RATIO times the shortest beside it, joins one call in HEAVY_EVERY
HEAVY_RATIO = 4.0
HEAVY_EVERY = 3


@dataclass(slots=True)
class Request:
    """One batched row's work in a round, as the planner sees it (made per row per round: slotted,
    not frozen, like ``update.Feed``)."""

    row: object  # the batch's handle of the row
    length: int  # tokens the row must hold once fed
    new: int  # of those, the tokens not in its cache
    reuse: bool = True  # False: everything is fed again (such a row never rests)


@dataclass
class Plan:
    resting: list = field(default_factory=list)  # rows that sit this round out
    calls: list[tuple[list, int | None]] = field(default_factory=list)  # (rows, most tokens a row feeds)


def chunk_for(new: int, limit: int | None) -> int | None:
    """The bound one row's ``new`` tokens are fed under: None when they fit ``limit``."""
    return None if limit is None or new <= limit else limit


class Planner:
    """See the module docstring."""

    def __init__(
        self,
        chunk: int | None = PREFILL_CHUNK,
        side_chunk: int = SIDE_CHUNK,
        shared_chunk: int = SHARED_CHUNK,
        heavy: int = HEAVY,
        heavy_ratio: float = HEAVY_RATIO,
        heavy_every: int = HEAVY_EVERY,
        call_tokens: int | None | str = "auto",
    ):
        if chunk is not None and chunk < 1 or min(side_chunk, shared_chunk, heavy_every) < 1:
            raise ValueError(
                "chunk, side_chunk, shared_chunk and heavy_every must be at least 1 (chunk may be "
                f"None), got {chunk}, {side_chunk}, {shared_chunk}, {heavy_every}"
            )
        self.chunk = chunk
        self.shared_chunk = shared_chunk if chunk is None else min(shared_chunk, chunk)
        self.side_chunk = min(side_chunk, self.shared_chunk)
        self.heavy, self.heavy_ratio, self.heavy_every = heavy, heavy_ratio, heavy_every
        self.call_tokens = backend.call_tokens() if call_tokens == "auto" else call_tokens
        self._rests: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # calls a heavy row sat out

    def plan(self, requests: list[Request], members: int) -> Plan:
        """The round for ``requests`` in a batch of ``members`` rows (see the module docstring)."""
        resting = self._resting(requests)
        running = [r for r in requests if r.row not in resting]
        return Plan(
            [r.row for r in requests if r.row in resting],
            [([r.row for r in group], self._call_chunk(group, members)) for group in self._groups(running)],
        )

    def _resting(self, requests: list[Request]) -> set:
        if len(requests) < 2:
            return set()
        shortest = min(r.length for r in requests)
        resting = set()
        for r in requests:
            heavy = r.length > shortest and r.length >= max(self.heavy, self.heavy_ratio * shortest)
            if r.reuse and heavy:
                self._rests[r.row] = (self._rests.get(r.row, 0) + 1) % self.heavy_every
                if self._rests[r.row]:
                    resting.add(r.row)
        return resting

    def _groups(self, requests: list[Request]) -> list[list[Request]]:
        """One call, or (with ``call_tokens``) the split of the rows, by width, that costs least.
        Rows of one width always share a call (splitting them adds a call and narrows neither),
        so the split is searched over the distinct widths only."""
        if self.call_tokens is None or len(requests) < 2:
            return [requests] if requests else []
        bound = self.shared_chunk if self.chunk is not None else None
        order = sorted(requests, key=lambda r: self._width(r, bound))
        widths = [self._width(r, bound) for r in order]
        ends = [i for i in range(1, len(order)) if widths[i] != widths[i - 1]] + [len(order)]
        best, cut = {0: 0}, {}  # per end of a run of one width: the least cost up to it, its call's start
        for k, end in enumerate(ends):
            for start in [0, *ends[:k]]:
                cost = best[start] + self.call_tokens + (end - start) * widths[end - 1]
                if end not in best or cost < best[end]:
                    best[end], cut[end] = cost, start
        groups, end = [], len(order)
        while end:
            groups.append(order[cut[end] : end])
            end = cut[end]
        return groups

    @staticmethod
    def _width(request: Request, bound: int | None) -> int:
        return max(1, request.new if bound is None else min(request.new, bound))

    def _call_chunk(self, requests: list[Request], members: int) -> int | None:
        """The most any row feeds in this call."""
        if self.chunk is None:
            return None
        short = [r.new for r in requests if r.new <= self.shared_chunk]
        if short and len(short) < len(requests):
            return max(self.side_chunk, *short)
        return self.shared_chunk if members > 1 else self.chunk
