"""The update algorithm, written once, for one stream or many batched together.

Contract: ``update_requests(job)`` is a generator holding one SSBD update's logic: verify the draft
in one biased pass, decide, decode on from the first rejected position, stop. A research plug-in,
``Job.proposer`` (``lookahead.Proposer``), may propose tokens after any decoded token; each
proposal is checked in that step's pass, and what each kind gained comes back in the ``Outcome``.
It never touches a model: it yields requests and receives their answers (the types: ``requests``).

* ``Feed(ids, logits, reuse=True, marks=(), held=0)``: "make this stream's KV cache hold exactly
  ``ids``; give me the logits of the last ``logits`` positions". The feeder reuses the longest cached
  prefix (rewinding whatever diverges, e.g. a rejected draft; nothing with ``reuse=False``) and
  feeds the rest in one model call; the answer is ``(logits, reused)``, ``reused`` counting the
  tokens whose KV came from the cache. ``marks`` are the positions a later update may return to
  (the end of the shared prompt, the stable source, the draft's start): a cache that cannot be
  trimmed keeps a checkpoint there (``checkpoints``). ``held`` counts leading ids the cache is
  known to hold (the job's previous feed): a decode step's feed compares only its new token.
  With ``decide`` (a ``Decide`` without rows), the answer is that decision over the fed logits,
  made in the next round's sync: a decode step is one request.
* ``Sync(value)``: "evaluate this lazy array", answered with its ``tolist()``.
* ``Decide(rows, draft, ...)``: "the verify rule's ``[accepted, next token]`` over these logits"
  (``verify.decide``; without a draft, the next token alone), answered with that pair. The runner
  decides every greedy ``Decide`` of one batched call together, and the other greedy ones (over
  logits of their own: a pass fed in chunks, a stream alone) together where there are several
  (``verify.decide_rows``: one reading of every row's logit statistics for all of their drafts and
  next positions), never a few operations per row.

``Runner(feeder)`` drives any number of such generators in lock-step: every ``round()``, all
pending ``Sync``s and ``Decide``s are evaluated with ONE host sync, then all ``Feed``s (those the
decided jobs ask for next included) go to the feeder (``cache.TokenCache`` for one stream,
``batch.BatchCache`` for many) in ONE ``feeder.feed``: one batched model call (a few on a CPU,
where the batch splits rows of very different widths: ``batch``). A job may join
(``add``) between any two rounds, so a stream whose source changes does not wait for the others'
updates to end (continuous batching); its outcome goes to its ``done`` callback in the round it
ends, with what it cost (model passes, tokens fed), counted by the runner from the feeder's
answers (``Fed``). A feeder may answer a long ``Feed`` a chunk at a time (``Fed.done`` False): the
request then stands for the next round, less the logits that chunk already gave (``Fed.piece``),
so a long verify pass is fed a chunk per round like a long prompt. ``run(feeder, jobs)`` runs a
set of jobs to the end. A stream's outputs do not depend on how many others share its rounds, or
when they joined: the same code decides them, and each stream draws from its own sampler in the
same order either way. ``Runner.phases``, when set to a dict, adds up the seconds each part of
a round takes (for benchmarks): ``decide`` (the decisions, ``sync`` included: the host sync,
waiting for the device), ``feed`` (the feeder's bookkeeping and the model call's graph, then
``dispatch``: handing it to the device, which on a CPU runs most of it then), ``advance`` (the
jobs' own steps) and ``done`` (the callbacks of the updates that ended).

The rule (Zeng et al.): a draft token y_i is accepted while the biased distribution
(1 - beta) p_i + beta onehot(y_i) still has y_i as its argmax (``verify.decide``); beta = 0 accepts
exactly the greedy tokens, so the output equals greedy decoding (the β = 0 identity with RT), with
lookahead proposals too. A stop
token (``stops.StopRule``) ends the output; what it keeps (the text before a newline) is appended
but not fed. With ``Job.loop_cut``, an output that ends in a decoding loop is cut back to one copy
of the repeated block and ends (``Outcome.looped``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import mlx.core as mx

from ..platform.backend import on_generation_stream
from .requests import Decide, Feed, Sync
from .verify import DEFAULT_RULE, decide, decide_rows


@dataclass
class Job:
    """What one update needs (built by ``translator.StreamTranslator``).

    Attributes:
        head: the prompt ids followed by the locked (stable, forced) output start.
        locked: that forced output start.
        draft: tokens to verify after ``head`` (may be empty).
        beta: bias towards the draft and towards lookahead proposals (unless a proposal carries
            its own: ``lookahead.Proposal.beta``).
        max_new: the most output tokens (locked ones included).
        stops: ``stops.StopRule``-like: None, or the ids kept in place of a stop token.
        sampler: None for greedy; a ``sampling.Sampler`` for (biased speculative) sampling.
        proposer: None, or called as ``proposer(output, accepted)`` after each decoded token
            (``accepted``: the draft tokens the verify pass kept), returning a
            ``lookahead.Proposal`` or None (``lookahead.Proposer``).
        pipelined: dispatch decode step t+1 from the lazy token t before t reaches the host, as
            ``mlx_lm.generate_step`` does (``backend.pipelined_decode()``: on a GPU). When t turns
            out to end the output, the step was wasted and its position is trimmed at the next
            feed; so it is when the proposer, called once t is on the host, proposes tokens after
            t: they are checked with t in one call, which feeds t again.
        progress: None, or called with the output so far each time it grows (once after the
            verify pass, then per decided token), for callers that stream tokens out as they
            come (a chat completion). It may raise to abandon the update.
        reuse: the verify pass may keep the stream's cached prefix (False: recompute all of it,
            RT without a prefix cache).
        rule: the acceptance rule the bias applies through (``verify.RULES``), for the draft and
            the lookahead proposals alike.
        loop_cut: None, or ``stops.loop_cut``-like: tokens to drop where the output ends in a
            loop (the locked start is never cut); the output then ends. For captions: ``progress``
            is not told of the cut.
        marks: positions in ``head`` the next update is likely to return to (the end of the
            shared prompt, the end of the source's stable part); with the draft's start they are
            the verify pass's ``Feed.marks``.
    """

    head: Sequence[int]
    locked: Sequence[int]
    draft: Sequence[int]
    beta: float
    max_new: int
    stops: Callable[[int], tuple[int, ...] | None]
    sampler: object = None
    proposer: object = None
    pipelined: bool = False
    progress: Callable[[list[int]], None] | None = None
    reuse: bool = True
    rule: str = DEFAULT_RULE
    loop_cut: Callable[[Sequence[int], int], int] | None = None
    marks: tuple[int, ...] = ()


@dataclass
class Outcome:
    """What one update produced, and what it cost (``passes`` to ``rebuilds``: set by ``Runner``)."""

    output: list[int]
    accepted: int  # leading draft tokens accepted by the verify pass
    reused: int  # tokens of the verify pass whose KV came from the cache
    verified_at: float  # perf_counter() when the verify pass was decided
    passes: int = 0  # model calls this update took part in
    tokens_fed: int = 0  # tokens it sent through the model
    rebuilds: int = 0  # cache rebuilds (a trim that was impossible)
    looped: bool = False  # the output ended in a loop and was cut (``Job.loop_cut``)
    proposed: dict[str, int] = dataclasses.field(default_factory=dict)  # tokens accepted per proposal kind
    # tokens fed by each decode step's pass that also checked a lookahead proposal (``Job.proposer``)
    proposal_widths: list[int] = dataclasses.field(default_factory=list)

    @property
    def proposals(self) -> int:
        """Lookahead proposals checked, each in a decode step's pass."""
        return len(self.proposal_widths)


Requests = Generator[Feed | Sync | Decide, object, Outcome]


def update_requests(job: Job) -> Requests:
    """One update; see the module docstring. Returns the ``Outcome``."""
    # 1. Verify: the draft in one pass after the head; d = accepted tokens, ``token`` comes next.
    draft = list(job.draft)
    marks = (*job.marks, len(job.head))
    rows, reused = yield Feed([*job.head, *draft], len(draft) + 1, job.reuse, marks)
    accepted, token = yield Decide(rows, draft, job.beta, job.sampler, job.rule)
    outcome = Outcome([*job.locked, *draft[:accepted]], accepted, reused, time.perf_counter())
    grew = job.progress or (lambda output: None)
    grew(outcome.output)
    # 2. Decode on from the first rejected position, one token (or one checked proposal) a step.
    fed = [*job.head, *draft[:accepted]]  # what the cache holds before ``token`` (grown in place)
    pending = [token]  # decided tokens not yet checked for stops
    ahead = None  # logits of the step feeding ``token``, dispatched before it was known
    while pending and len(outcome.output) < job.max_new:
        token = pending.pop(0)
        kept = job.stops(token)
        if kept is not None:
            outcome.output += kept[: job.max_new - len(outcome.output)]
            grew(outcome.output)
            break
        outcome.output.append(token)
        if job.loop_cut is not None and (cut := job.loop_cut(outcome.output, len(job.locked))):
            del outcome.output[-cut:]
            outcome.looped = True
            break
        grew(outcome.output)
        if pending or len(outcome.output) >= job.max_new:
            continue  # accepted proposal tokens still to check, or out of budget
        offer = job.proposer(outcome.output, accepted) if job.proposer else None
        proposal = offer.tokens[: job.max_new - len(outcome.output)] if offer else []
        if proposal and ahead is not None:  # checked with ``token`` in one call: the step ahead is dropped
            ahead = None
            del fed[-1]
        if ahead is None and (proposal or not (job.pipelined and len(outcome.output) + 1 < job.max_new)):
            # fed and decided in one request: the step's decision comes back, not its logits
            held = len(fed)
            fed += [token, *proposal]
            beta = job.beta if offer is None or offer.beta is None else offer.beta
            decide = Decide(None, proposal, beta, job.sampler, job.rule)
            taken, token = yield Feed(fed, len(proposal) + 1, held=held, decide=decide)
            del fed[held + 1 + taken :]  # the rejected proposal tokens
            if proposal:
                outcome.proposed[offer.kind] = outcome.proposed.get(offer.kind, 0) + taken
                outcome.proposal_widths.append(1 + len(proposal))
            pending = [*proposal[:taken], token]
            continue
        if ahead is None:  # pipelined: the step's logits pick t+1 lazily
            held = len(fed)
            fed.append(token)
            rows, _ = yield Feed(fed, 1, held=held)
        else:
            rows, ahead = ahead, None
            fed[-1] = token  # in place of the lazy token that step was fed
        if len(outcome.output) + 1 < job.max_new:
            lazy = (job.sampler or mx.argmax)(rows[-1])
            fed.append(lazy)
            ahead, _ = yield Feed(fed, 1, held=len(fed) - 1)  # step t+1 dispatched before t syncs
            pending = [(yield Sync(lazy))]
        else:
            pending = [(yield Decide(rows, sampler=job.sampler))[1]]
    return outcome


class Runner:
    """Runs updates on ``feeder`` round by round; jobs join between rounds (module docstring).

    ``row`` names a stream's cache in ``feeder`` (``feeder.feed`` takes ``(row, Feed)`` pairs and
    returns their ``Fed`` answers in order, in one model call); a row runs one job at a time.
    """

    def __init__(self, feeder):
        self.feeder = feeder
        self._jobs: dict[int, tuple[object, Requests, Callable[[Outcome], None]]] = {}
        self._requests: dict[int, Feed | Sync] = {}
        self._costs: dict[int, list[int]] = {}  # per job: [passes, tokens fed, rebuilds]
        self._reused: dict[int, int] = {}  # per job fed in chunks: the tokens its first chunk reused
        self._pieces: dict[int, list[mx.array]] = {}  # per job fed in chunks: the logits so far
        # per job answered from a batched call: the logits it was given, and where they are in the call
        self._batch: dict[int, tuple[mx.array, tuple[mx.array, int]]] = {}
        self._next = 0
        # when set (a benchmark's): seconds per part of ``round``, added up (module docstring)
        self.phases: dict[str, float] | None = None

    @property
    def busy(self) -> bool:
        """Some job has not ended yet."""
        return bool(self._requests)

    def running(self, row) -> bool:
        """``row`` has a job under way."""
        return any(other is row for other, _, _ in self._jobs.values())

    def cancel(self, row) -> None:
        """Abandon ``row``'s job, if any (its ``done`` is never called). The feeder keeps what the
        job fed so far, as after any round, so the row's next job starts from a consistent cache."""
        for key in [key for key, (other, _, _) in self._jobs.items() if other is row]:
            del self._jobs[key], self._requests[key], self._costs[key]
            self._reused.pop(key, None)
            self._pieces.pop(key, None)
            self._batch.pop(key, None)

    def add(self, row, job: Job, done: Callable[[Outcome], None]) -> None:
        """Start ``job`` on ``row``; ``done(outcome)`` is called in the round it ends."""
        if self.running(row):
            raise ValueError("this row already runs a job")
        requests = update_requests(job)
        self._jobs[self._next] = (row, requests, done)
        self._requests[self._next] = next(requests)  # builds its first Feed: no model work
        self._costs[self._next] = [0, 0, 0]
        self._next += 1

    def round(self) -> None:
        """One host sync for every job that decides, then one batched model call for every job
        that feeds (those that just decided included); every job moves on to its next request
        (or ends). Deciding first puts every job under way into the round's one model call."""
        ended = []
        with on_generation_stream():
            self._timed("advance", self._send, self._timed("decide", self._synced), ended)
            self._timed("advance", self._send, self._timed("feed", self._fed), ended)
        for done, outcome in ended:
            self._timed("done", done, outcome)

    def _timed(self, phase: str, call, *args):
        """``call(*args)``, its time added to ``phases[phase]`` when ``phases`` is set."""
        if self.phases is None:
            return call(*args)
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - start

    def _send(self, answers: dict, ended: list) -> None:
        for key, answer in answers.items():
            try:
                self._requests[key] = self._jobs[key][1].send(answer)
            except StopIteration as end:
                del self._requests[key]
                self._batch.pop(key, None)
                outcome = end.value
                outcome.passes, outcome.tokens_fed, outcome.rebuilds = self._costs.pop(key)
                ended.append((self._jobs.pop(key)[2], outcome))

    def _synced(self) -> dict:
        """ONE host sync for every job that decides: its ``Sync``s and ``Decide``s; the greedy
        ``Decide``s of each batched call together, and the other greedy ones together where there
        are several (``verify.decide_rows``)."""
        lazy, steps = {}, {}  # by job: its lazy answer; its lazy next token (a sampled decode step)
        calls = {}  # by id of a batched call's logits: (those logits, its jobs, their decide_rows items)
        loose = []  # (job, Decide): greedy decisions over logits of their own (fed in chunks, or alone)
        for key, request in self._requests.items():
            if isinstance(request, Sync):
                lazy[key] = request.value
            elif not isinstance(request, Decide):
                continue
            elif request.sampler is None and (batch := self._batch.get(key)) and batch[0] is request.rows:
                logits, b = batch[1]
                keys, items = calls.setdefault(id(logits), (logits, [], []))[1:]
                keys.append(key)
                first = (b + 1) * logits.shape[1] - len(request.draft) - 1  # in the call's rows, flattened
                items.append((first, request.draft, request.beta, request.rule))
            elif request.sampler is None:
                loose.append((key, request))
            elif request.draft:
                lazy[key] = decide(request.rows, request.draft, request.beta, request.sampler, request.rule)
            else:  # a sampled decode step
                steps[key] = request.sampler(request.rows[-1])
        groups = [
            (logits.reshape(-1, logits.shape[-1]), keys, items) for logits, keys, items in calls.values()
        ]
        if len(loose) == 1:  # alone: its own fused decision
            key, request = loose[0]
            lazy[key] = decide(request.rows, request.draft, request.beta, rule=request.rule)
        elif loose:  # their logit rows side by side, decided as the rows of one call
            ends = list(itertools.accumulate(request.rows.shape[0] for _, request in loose))
            items = [(end - len(r.draft) - 1, r.draft, r.beta, r.rule) for end, (_, r) in zip(ends, loose)]
            rows = mx.concatenate([request.rows for _, request in loose])
            groups.append((rows, [key for key, _ in loose], items))
        if not lazy and not steps and not groups:
            return {}
        decided = [(keys, decide_rows(rows, items)) for rows, keys, items in groups]
        self._timed("sync", mx.eval, [*lazy.values(), *steps.values(), *(pairs for _, pairs in decided)])
        answers = {key: value.tolist() for key, value in lazy.items()}
        answers.update((key, (0, token.item())) for key, token in steps.items())
        for keys, pairs in decided:
            answers.update(zip(keys, pairs.tolist()))
        return answers

    def _fed(self) -> dict:
        """ONE model call for every stream that feeds, dispatched at once."""
        feeds = [(key, r) for key, r in self._requests.items() if isinstance(r, Feed)]
        if not feeds:
            return {}
        answers = {}
        answered = self.feeder.feed([(self._jobs[key][0], r) for key, r in feeds])
        calls = {id(fed.batch[0]): fed.batch[0] for fed in answered if fed.batch is not None}
        self._timed(
            "dispatch",
            mx.async_eval,
            [*calls.values()]
            + [fed.logits for fed in answered if fed.batch is None]
            + [fed.piece for fed in answered if fed.piece is not None],
        )
        for (key, request), fed in zip(feeds, answered):
            cost = self._costs[key]
            cost[0] += fed.calls
            cost[1] += fed.fed
            cost[2] += fed.rebuilt
            if not fed.done:  # a chunk of a long feed: the rest in the next round, after this chunk
                self._reused.setdefault(key, fed.reused)
                given = 0
                if fed.piece is not None:
                    self._pieces.setdefault(key, []).append(fed.piece)
                    given = fed.piece.shape[0]
                self._requests[key] = dataclasses.replace(request, reuse=True, logits=request.logits - given)
                continue
            pieces, decide = self._pieces.pop(key, []), request.decide
            batched = fed.batch if not pieces else None
            if batched is not None and decide is not None and decide.sampler is None:
                logits = None  # decided with the other rows of its call, from the call's logits
            else:
                logits = fed.rows(request.logits)
                logits = mx.concatenate([*pieces, logits]) if pieces else logits
            if batched is not None:
                self._batch[key] = (logits, batched)
            else:
                self._batch.pop(key, None)
            reused = self._reused.pop(key, fed.reused)
            if decide is None:
                answers[key] = (logits, reused)
            else:  # its decision stands for the next round's sync, in place of the feed
                decide.rows = logits
                self._requests[key] = decide
        return answers


def run(feeder, jobs: Sequence[tuple[object, Job]]) -> list[Outcome]:
    """Run updates ``(row, job)`` together on ``feeder`` to their end (see ``Runner``); returns
    one ``Outcome`` per job, in order."""
    runner, outcomes = Runner(feeder), [None] * len(jobs)
    for i, (row, job) in enumerate(jobs):
        runner.add(row, job, functools.partial(outcomes.__setitem__, i))
    while runner.busy:
        runner.round()
    return outcomes
