"""Streaming re-translation of one growing source segment at a time.

Contract: ``StreamTranslator.update(source, final=...)`` translates the current source prefix and
returns an ``Update`` (output ids and text, the displayed text, per-update stats). It knows
nothing about where updates come from (see ``streams``). Between updates it keeps the previous
output (the draft) and the model's KV cache; a ``final`` update commits the segment and clears the
draft, but keeps the cache, so the shared system prompt is never recomputed across segments.
Invalid input raises ``ValueError`` before any state changes, so the translator stays usable.

Settings: ``methods.TranslatorConfig`` (``methods.METHODS`` names the usual combinations); the
source comes as ``source.SourcePartial``s; each update gives an ``records.Update``.

Draft mask-k (``draft_mask_k``) drops the last k tokens from the draft (the paper's ablation);
display mask-k (``display_mask_k``) hides the last k tokens from the viewer only while the
segment is not final, and the full output stays the draft.

Stable text (``agreement`` = n >= 1, LocalAgreement-n): a token that has stood unchanged in n
consecutive outputs of a segment is *locked*. Locked tokens are a forced start of the assistant
turn from then on (they are fed after the prompt, never verified), so the stable text of an update
never changes again within its segment and is a prefix of what the segment commits. Every
``Update`` carries ``stable`` and the revisable ``unstable`` rest of its display.

Lookahead (resync, n-gram pools; research methods): ``proposals.Proposals``, built from the
config, plans each update's proposals and reports what they gained; with none of them on, an
update is plain SSBD.

Context (``context_tokens`` > 0): committed segments stay in the prompt as finished turns (see
``prompt``), up to that many tokens; when they exceed it, the oldest are dropped until at most
half remain, so the context KV is reused across most segment changes and recomputed only then.

Checkpoints (models whose cache cannot be trimmed: hybrids, sliding windows): every update marks
the end of the instruction, of the context and of the source but its last ``SOURCE_SLACK`` tokens
(the words an ASR still revises) as points the next update may return to (``engine.update.Job.marks``).

Layers, as in mlx-lm: ``StreamTranslator.update`` (one update), ``stream_translate`` (a generator
of ``Update``), ``translate`` (one call, returns a string).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, replace

from ..engine import update as engine
from ..engine.cache import TokenCache, common_prefix_len, context_length
from ..engine.sampling import Sampler
from ..engine.stops import StopRule, loop_cut
from ..platform.backend import pipelined_decode
from .glossary import Glossary
from .methods import TranslatorConfig, method_config
from .prompt import PromptBuilder, term_pair
from .proposals import Proposals
from .records import PendingUpdate, Update, UpdateStats
from .source import SourcePartial

SOURCE_SLACK = 2  # source tokens at the end likely to change at the next partial (not checkpointed)


class StreamTranslator:
    """Translates one growing segment at a time; see the module docstring.

    Args:
        model: an mlx-lm model (already in its compute dtype).
        tokenizer: its tokenizer (Hugging Face or mlx-lm ``TokenizerWrapper``).
        family: prompt family (``prompt.FAMILIES``).
        source_lang, target_lang: ISO 639-1 codes.
        config: decoding settings. Default ``method_config()``: ``methods.DEFAULT_METHOD``.
        max_kv_size: a rotating KV window (``None``: full cache).
        glossary: a ``glossary.Glossary``: its entries for ``target_lang`` whose term occurs in
            the source are named in the prompt, after the source (``prompt.PromptBuilder.build``),
            in the order they occur, as many as ``config.glossary_tokens`` allows.
        examples: a ``glossary.Glossary`` of example translations (``glossary.load_examples``):
            its entries for ``target_lang`` are shown to the model as finished turns before the
            talk (``prompt.PromptBuilder``), once, in the prompt's shared prefix.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        family: str,
        source_lang: str,
        target_lang: str,
        config: TranslatorConfig | None = None,
        max_kv_size: int | None = None,
        glossary: Glossary | None = None,
        examples: Glossary | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        config = method_config() if config is None else config
        self.config = config
        shown = list(examples.entries.get(target_lang, {}).items()) if examples is not None else []
        self.prompts = PromptBuilder(tokenizer, family, source_lang, target_lang, examples=shown)
        self.glossary = glossary
        self._term_tokens: dict[tuple[str, str], int] = {}  # tokens each glossary entry costs in a prompt
        self.cache = TokenCache(model, max_kv_size=max_kv_size)
        self._row = None  # the batch row holding this stream's KV while it is in a batch
        self.context_length = context_length(model)
        self.stops = StopRule(tokenizer, on_newline=config.stop_on_newline)
        self.proposals = Proposals(config.lookahead)  # lookahead: everything beyond the draft
        self.pipelined = pipelined_decode()  # the backend's policy (see ``engine.update.Job``)
        self._draft: list[int] = []
        self._last_source: str | None = None  # the last non-final source of this segment
        self._locked = 0  # leading tokens of the draft that are stable (forced)
        self._recent: list[list[int]] = []  # this segment's last outputs, for agreement
        self._context: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # committed (source, output)
        self._context_ids: tuple[int, ...] = ()  # the prompt ids of ``_context``
        self.caption = 0  # index of the open caption (segment) in this translator's life
        self.sampler = self._make_sampler(config)

    @property
    def source_lang(self) -> str:
        return self.prompts.source_lang

    @property
    def target_lang(self) -> str:
        return self.prompts.target_lang

    @property
    def row(self):
        """Where this stream's KV lives: its own ``cache``, or its row while it is in a batch
        (``attach``); its updates run on ``row.feeder`` either way."""
        return self.cache if self._row is None else self._row

    def attach(self, batch) -> None:
        """Move this stream's KV into ``batch`` (a ``batch.BatchCache``) as a new row; its
        updates run there, alone or with the batch's other rows, until ``detach``."""
        if self._row is not None:
            raise ValueError("this translator is already in a batch")
        self._row = batch.join(self.cache)

    def detach(self) -> None:
        """Move this stream's KV back out of its batch into its own cache."""
        if self._row is not None:
            self._row.feeder.leave(self._row, into=self.cache)
            self._row = None

    @staticmethod
    def _make_sampler(config: TranslatorConfig) -> Sampler | None:
        if config.temperature == 0:
            return None
        return Sampler(temperature=config.temperature, top_p=config.top_p, seed=config.seed)

    def reset(self) -> None:
        """Start a new segment: forget the draft (the KV cache is kept for its shared prefix)."""
        self._draft = []
        self._last_source = None
        self._locked = 0
        self._recent = []
        self.proposals.drop_segment()

    def update(self, source: str, *, final: bool = False) -> Update:
        """Translate the current source prefix; see ``Update``.

        Raises:
            ValueError: source is not a string, is empty or whitespace, or does not fit the
                model's context. The translator's state is unchanged.
        """
        pending = self.begin(source, final)
        outcome = engine.run(self.row.feeder, [(self.row, pending.job)])[0] if pending.job else None
        return self.finish(pending, outcome)

    def begin(self, source: str, final: bool) -> PendingUpdate:
        """Validate ``source`` and prepare the update's ``engine.Job``: the first half of
        ``update`` (``multistream`` runs many translators' jobs in one ``engine.run``)."""
        # 0. Prompt and draft (1. verify and 2. decode are ``engine.update.update_requests``).
        prompt, max_new = self._validated_prompt(source)
        cfg, start = self.config, time.perf_counter()
        if self._unchanged(source, final):
            return PendingUpdate(source, final, prompt, None, start)
        locked = tuple(self._draft[: self._locked])  # promised to the viewer: kept even if the source shrank
        max_new = max(max_new, len(locked))
        draft = self._draft_tokens()[len(locked) : max_new] if cfg.uses_draft else []
        head = [*prompt.ids, *locked]
        proposer = self.proposals.plan(prompt.source, draft)
        job = engine.Job(
            head=head,
            locked=locked,
            draft=draft,
            beta=cfg.beta_for(final, self.target_lang),
            max_new=max_new,
            stops=self.stops,
            sampler=self.sampler,
            proposer=proposer,
            pipelined=self.pipelined,
            reuse=cfg.policy != "rt-nocache",
            rule=cfg.accept_rule,
            loop_cut=loop_cut if cfg.cut_loops else None,
            marks=self._marks(prompt),
        )
        return PendingUpdate(source, final, prompt, job, start)

    def finish(self, pending: PendingUpdate, outcome: engine.Outcome | None) -> Update:
        """Record the outcome of an update begun with ``begin``: stats, display, the next draft."""
        cfg, job, end = self.config, pending.job, time.perf_counter()
        if outcome is None:  # unchanged source: the last output stands, no forward pass
            outcome = engine.Outcome(list(self._draft), 0, 0, end)
        output = outcome.output
        locked = len(job.locked) if job else self._locked
        stats = UpdateStats(
            policy=cfg.policy,
            beta=job.beta if job else cfg.beta_for(False),  # unchanged: the last live update's output
            draft_tokens=len(job.draft) if job else 0,
            accepted=outcome.accepted,
            decoded=len(output) - outcome.accepted - locked if job else 0,
            output_tokens=len(output),
            forward_passes=outcome.passes,
            tokens_fed=outcome.tokens_fed,
            reused_tokens=outcome.reused,
            prefill_s=outcome.verified_at - pending.start,
            decode_s=end - outcome.verified_at,
            wall_s=end - pending.start,
            cache_rebuilds=outcome.rebuilds,
            looped=int(outcome.looped),
            locked=locked,
            unchanged=int(job is None),
            **asdict(Proposals.report(outcome)),
        )
        if pending.final:
            stable_tokens = len(output)
        else:  # a repeated source is no new evidence for agreement
            stable_tokens = self._agree(output) if job else self._locked
        display = self._display(output, pending.final)
        stable = self._decode(output[:stable_tokens])
        if len(stable) > len(display):  # stable text is shown even where display mask-k would hide it
            display = stable
        stable = stable[: common_prefix_len(stable, display)]  # never a half character (byte tokens)
        update = Update(
            source=pending.source,
            output_ids=tuple(output),
            output=self._decode(output),
            display=display,
            final=pending.final,
            caption=self.caption,
            stats=stats,
            stable=stable,
            unstable=display[len(stable) :],
        )
        if pending.final:
            self.proposals.commit(output)
            self._remember(pending.prompt.source, output)
            self.caption += 1
            self.reset()
        else:
            self.proposals.seen(output)
            self._draft = output
            self._last_source = pending.source.strip()
        return update

    def _marks(self, prompt) -> tuple[int, ...]:
        """Positions the next update is likely to return to (see the module docstring)."""
        context_end = len(prompt.prefix)
        return (
            len(self.prompts.prefix),
            context_end,
            context_end + max(0, len(prompt.source) - SOURCE_SLACK),
        )

    def _unchanged(self, source: str, final: bool) -> bool:
        """True when ``source`` repeats the last non-final source and the last output stands: it
        would come out again (greedy; for a final update, the same bias as a live one), or the
        config commits a repeated source as shown (``commit_shown``)."""
        cfg = self.config
        if self._last_source != source.strip() or cfg.policy == "rt-nocache":
            return False
        same = cfg.temperature == 0 and cfg.beta_for(True, self.target_lang) == cfg.beta_for(False)
        return not final or same or cfg.commit_shown

    def _agree(self, output: list[int]) -> int:
        """Record a non-final output; return how many leading tokens are now locked."""
        n = self.config.agreement
        if n:
            self._recent = [*self._recent, output][-n:]
            if len(self._recent) == n:
                agreed = (
                    min(common_prefix_len(self._recent[0], other) for other in self._recent[1:])
                    if n > 1
                    else len(output)
                )
                self._locked = max(self._locked, agreed)
        return self._locked

    def _remember(self, source_ids, output) -> None:
        """Keep a committed segment as context, within ``context_tokens`` (see module docstring)."""
        budget = self.config.context_tokens
        if not budget:
            return
        self._context.append((tuple(source_ids), tuple(output)))
        size = lambda pairs: len(self.prompts.context_ids(pairs))
        if size(self._context) > budget:
            while self._context and size(self._context) > budget // 2:
                self._context.pop(0)
        self._context_ids = self.prompts.context_ids(self._context)

    def check(self, source) -> None:
        """Raise ``ValueError`` if ``source`` could not be translated (see ``update``)."""
        self._validated_prompt(source)

    # -- helpers ---------------------------------------------------------------------------

    def _terms(self, text: str) -> tuple[tuple[str, str], ...]:
        """The glossary's hits in ``text`` that fit ``glossary_tokens``, in the order they occur."""
        if self.glossary is None:
            return ()
        kept, used = [], 0
        for term, rendering in self.glossary.matches(text, self.target_lang):
            if (cost := self._term_tokens.get((term, rendering))) is None:
                cost = self._term_tokens[term, rendering] = len(
                    self.tokenizer.encode(term_pair(term, rendering) + "; ", add_special_tokens=False)
                )
            if used + cost > self.config.glossary_tokens:
                break
            kept.append((term, rendering))
            used += cost
        return tuple(kept)

    def _validated_prompt(self, source):
        if not isinstance(source, str):
            raise ValueError(f"source must be a string, got {type(source).__name__}")
        text = source.strip()
        if not text:
            raise ValueError("source is empty or whitespace")
        prompt = self.prompts.build(text, self._context_ids, self._terms(text))
        cfg = self.config
        max_new = max(cfg.min_max_tokens, math.ceil(cfg.max_tokens_ratio * len(prompt.source)))
        if self.context_length is not None and len(prompt) + max_new > self.context_length:
            raise ValueError(
                f"source too long: {len(prompt)} prompt tokens + {max_new} output tokens exceed "
                f"the model's context of {self.context_length}"
            )
        return prompt, max_new

    def _draft_tokens(self) -> list[int]:
        k = self.config.draft_mask_k
        return self._draft[: len(self._draft) - k] if k else list(self._draft)

    def _display(self, output: list[int], final: bool) -> str:
        k = self.config.display_mask_k
        if final or k == 0:
            return self._decode(output)
        return self._decode(output[: max(0, len(output) - k)])

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids)).strip() if ids else ""


def stream_translate(translator: StreamTranslator, updates: Iterable[SourcePartial]) -> Iterator[Update]:
    """Translate a stream of source partials, yielding an ``Update`` for each.

    A segment that ends without a final update is committed when the next segment starts (by
    ``segment_id`` change) or when the stream ends, by re-running its last source as final.
    """
    last: SourcePartial | None = None
    for item in updates:
        if last is not None and not last.final and item.segment_id != last.segment_id:
            yield translator.update(last.text, final=True)
        yield translator.update(item.text, final=item.final)
        last = item
    if last is not None and not last.final:
        yield translator.update(last.text, final=True)


def translate(
    model,
    tokenizer,
    text: str,
    *,
    family: str,
    source_lang: str,
    target_lang: str,
    config: TranslatorConfig | None = None,
) -> str:
    """Translate one complete text; returns the translation."""
    translator = StreamTranslator(
        model,
        tokenizer,
        family=family,
        source_lang=source_lang,
        target_lang=target_lang,
        config=replace(config or method_config(), display_mask_k=0),
    )
    return translator.update(text, final=True).output
