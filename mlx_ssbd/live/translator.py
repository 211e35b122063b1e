"""Streaming re-translation of one growing source segment at a time.

Contract: ``StreamTranslator.update(source, final=...)`` translates the current source prefix and
returns an ``Update`` (output ids and text, the displayed text, per-update stats). It knows
nothing about where updates come from (see ``streams``). Between updates it keeps the previous
output (the draft) and the model's KV cache; a ``final`` update commits the segment and clears the
draft, but keeps the cache, so the shared system prompt is never recomputed across segments.
Invalid input raises ``ValueError`` before any state changes, so the translator stays usable.

Settings: ``methods.TranslatorConfig`` (``methods.METHODS`` names the usual combinations); the
source comes as ``source.SourceUpdate``s; each update gives an ``updates.Update``.

Draft mask-k (``draft_mask_k``) drops the last k tokens from the draft (the paper's ablation);
display mask-k (``display_mask_k``) hides the last k tokens from the viewer only while the
segment is not final, and the full output stays the draft.

Stable text (``agreement`` = n >= 1, LocalAgreement-n): a token that has stood unchanged in n
consecutive outputs of a segment is *locked*. Locked tokens are a forced start of the assistant
turn from then on (they are fed after the prompt, never verified), so the stable text of an update
never changes again within its segment and is a prefix of what the segment commits. Every
``Update`` carries ``stable`` and the revisable ``unstable`` rest of its display.

Tail guess (``tail_guess`` = n > 0, with a ``draft_model``): a smaller model of the same tokenizer
guesses up to n tokens after the draft, and the update's one verify pass checks them too, at β = 0
(``engine.tail``): the output is the same as without the guess, in fewer passes of the big model.

Context (``context_tokens`` > 0): committed segments stay in the prompt as finished turns (see
``prompt``), up to that many tokens; when they exceed it, the oldest are dropped until at most
half remain, so the context KV is reused across most segment changes and recomputed only then.

Layers, as in mlx-lm: ``StreamTranslator.update`` (one step), ``stream_translate`` (a generator
of ``Update``), ``translate`` (one call, returns a string).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace

from ..platform.backend import pipelined_decode
from ..engine import update as engine
from ..engine.cache import TokenCache, common_prefix_len
from ..engine.lookahead import History, Proposer
from ..engine.sampling import Sampler
from ..engine.stops import StopRule
from ..engine.tail import TailDrafter, same_vocabulary
from ..models.loading import context_length
from .glossary import Glossary
from .methods import TranslatorConfig, method_config
from .prompt import PromptBuilder
from .source import SourceUpdate
from .updates import PendingUpdate, Update, UpdateStats


class StreamTranslator:
    """Translates one growing segment at a time; see the module docstring.

    Args:
        model: an mlx-lm model (already in its compute dtype).
        tokenizer: its tokenizer (Hugging Face or mlx-lm ``TokenizerWrapper``).
        family: prompt family (``prompt.FAMILIES``).
        source_lang, target_lang: ISO 639-1 codes.
        config: decoding settings. Default ``method_config()``: ``methods.DEFAULT_METHOD``.
        max_kv_size: a rotating KV window (``None``: full cache).
        draft_model: ``(model, tokenizer)`` of a smaller model with the same vocabulary, for
            ``config.tail_guess``; ignored without it.
        glossary: a ``glossary.Glossary``: its entries for ``target_lang`` whose term occurs in
            the source are named in the prompt, after the source (``prompt.PromptBuilder.build``).

    Raises:
        ValueError: ``tail_guess`` without a draft model, or a draft model whose vocabulary differs.
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
        draft_model: tuple | None = None,
        glossary: Glossary | None = None,
    ):
        if draft_model is not None and not same_vocabulary(tokenizer, draft_model[1]):
            raise ValueError("the draft model's tokenizer differs from the model's: a tail guess needs the same vocabulary")
        self.model = model
        self.tokenizer = tokenizer
        config = method_config() if config is None else config
        self.config = config
        self.prompts = PromptBuilder(tokenizer, family, source_lang, target_lang)
        self.glossary = glossary
        self.cache = TokenCache(model, max_kv_size=max_kv_size)
        self._row = None  # the batch row holding this stream's KV while it is in a batch
        self.context_length = context_length(model)
        self.stops = StopRule(tokenizer, on_newline=config.stop_on_newline)
        self.draft_model = draft_model
        self.drafter = self._make_drafter(config)
        self.pipelined = pipelined_decode()  # the backend's policy (see ``engine.update.Job``)
        self._draft: list[int] = []
        self._last_source: str | None = None  # the last non-final source of this segment
        self._locked = 0  # leading tokens of the draft that are stable (forced)
        self._recent: list[list[int]] = []  # this segment's last outputs, for agreement
        self._context: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # committed (source, output)
        self._context_ids: tuple[int, ...] = ()  # the prompt ids of ``_context``
        self.history = History()  # earlier outputs, for ``history_drafts``
        self.caption = 0  # index of the open caption (segment) in this translator's life
        self.sampler = self._make_sampler(config)

    @property
    def target_lang(self) -> str:
        return self.prompts.target_lang

    @property
    def row(self):
        """Where this stream's KV lives: its own ``cache``, or its row while it is in a batch
        (``multistream``); its updates run on ``row.store`` either way."""
        return self.cache if self._row is None else self._row

    @row.setter
    def row(self, row) -> None:
        self._row = None if row is self.cache else row

    @staticmethod
    def _make_sampler(config: TranslatorConfig) -> Sampler | None:
        if config.temperature == 0:
            return None
        return Sampler(temperature=config.temperature, top_p=config.top_p, seed=config.seed)

    def _make_drafter(self, config: TranslatorConfig) -> TailDrafter | None:
        if not config.tail_guess:
            return None
        if self.draft_model is None:
            raise ValueError("tail_guess needs a draft model (a smaller model with the same tokenizer)")
        return TailDrafter(self.draft_model[0], self.stops, config.tail_guess)

    def reset(self) -> None:
        """Start a new segment: forget the draft (the KV cache is kept for its shared prefix)."""
        self._draft = []
        self._last_source = None
        self._locked = 0
        self._recent = []
        self.history.drop_segment()

    def with_config(self, config: TranslatorConfig) -> None:
        """Change settings between segments (the cache stays valid)."""
        self.config = config
        self.sampler = self._make_sampler(config)
        self.stops = StopRule(self.tokenizer, on_newline=config.stop_on_newline)
        self.drafter = self._make_drafter(config)
        self.reset()

    def update(self, source: str, *, final: bool = False) -> Update:
        """Translate the current source prefix; see ``Update``.

        Raises:
            ValueError: source is not a string, is empty or whitespace, or does not fit the
                model's context. The translator's state is unchanged.
        """
        step = self.begin(source, final)
        outcome = engine.run(self.row.store, [(self.row, step.job)])[0] if step.job else None
        return self.finish(step, outcome)

    def begin(self, source: str, final: bool) -> PendingUpdate:
        """Validate ``source`` and prepare the update's ``engine.Job``: the first half of
        ``update`` (``multistream`` runs many translators' jobs in one ``engine.run``)."""
        prompt, max_new = self._validated_prompt(source)
        cfg, row = self.config, self.row
        counters = (time.perf_counter(), row.forward_calls, row.tokens_fed, row.rebuilds)
        if self._unchanged(source, final):
            return PendingUpdate(source, final, prompt, None, *counters)
        locked = tuple(self._draft[: self._locked])  # promised to the viewer: kept even if the source shrank
        max_new = max(max_new, len(locked))
        draft = self._draft_tokens()[len(locked) : max_new] if cfg.uses_draft else []
        proposer = None
        if cfg.resync or cfg.ngram_drafts or cfg.history_drafts:
            pools = [*(self.history.pools() if cfg.history_drafts else ()), *([prompt.source] if cfg.ngram_drafts else ())]
            proposer = Proposer(old_draft=draft if cfg.resync else (), pools=pools, pool_len=cfg.ngram_len,
                                pool_beta=cfg.ngram_beta)
        head = [*prompt.ids, *locked]
        guess, guess_passes, guess_s = self._guess(head, draft, max_new - len(locked))
        job = engine.Job(head=head, locked=locked, draft=draft, beta=cfg.beta_for(final),
                         max_new=max_new, stops=self.stops, sampler=self.sampler, proposer=proposer,
                         pipelined=self.pipelined, guess=guess, reuse=cfg.policy != "rt-nocache",
                         rule=cfg.accept_rule, exact_tail=cfg.exact_tail)
        return PendingUpdate(source, final, prompt, job, *counters, guess_passes, guess_s)

    def _guess(self, head, draft, room: int) -> tuple[list[int], int, float]:
        """The draft model's tail guess (within the output budget), its passes and seconds."""
        if self.drafter is None or len(draft) >= room:
            return [], 0, 0.0
        calls, seconds = self.drafter.cache.forward_calls, self.drafter.seconds
        guess = self.drafter.guess(head, draft)[: room - len(draft)]
        return guess, self.drafter.cache.forward_calls - calls, self.drafter.seconds - seconds

    def finish(self, step: PendingUpdate, outcome: engine.Outcome | None) -> Update:
        """Record the outcome of an update begun with ``begin``: stats, display, the next draft."""
        cfg, row, end = self.config, self.row, time.perf_counter()
        job = step.job
        if outcome is None:  # unchanged source: the last output stands, no forward pass
            output, accepted, reused, verified_at = list(self._draft), 0, 0, end
        else:
            output, accepted, reused, verified_at = outcome.output, outcome.accepted, outcome.reused, outcome.verified_at
        proposer = job.proposer if job else None
        locked = len(job.locked) if job else self._locked
        stats = UpdateStats(
            policy=cfg.policy,
            beta=job.beta if job else cfg.beta_for(step.final),
            draft_tokens=len(job.draft) if job else 0,
            accepted=accepted,
            decoded=len(output) - accepted - locked if job else 0,
            output_tokens=len(output),
            forward_passes=row.forward_calls - step.calls0,
            tokens_fed=row.tokens_fed - step.fed0,
            reused_tokens=reused,
            prefill_s=verified_at - step.start,
            decode_s=end - verified_at,
            wall_s=end - step.start,
            cache_rebuilds=row.rebuilds - step.rebuilds0,
            resynced=proposer.resynced if proposer else 0,
            ngram_accepted=proposer.ngram_accepted if proposer else 0,
            proposals=proposer.attempts if proposer else 0,
            locked=locked,
            unchanged=int(job is None),
            tail_guessed=len(job.guess) if job else 0,
            tail_accepted=outcome.guess_accepted if outcome else 0,
            draft_model_passes=step.guess_passes,
            tail_s=step.guess_s,
        )
        if step.final:
            stable_tokens = len(output)
        else:  # a repeated source is no new evidence for agreement
            stable_tokens = self._agree(output) if job else self._locked
        display = self._display(output, step.final)
        stable = self._decode(output[:stable_tokens])
        if len(stable) > len(display):  # stable text is shown even where display mask-k would hide it
            display = stable
        stable = stable[: common_prefix_len(stable, display)]  # never a half character (byte tokens)
        update = Update(
            source=step.source,
            output_ids=tuple(output),
            output=self._decode(output),
            display=display,
            final=step.final,
            caption=self.caption,
            stats=stats,
            stable=stable,
            unstable=display[len(stable):],
        )
        if step.final:
            self.history.commit(output)
            self._remember(step.prompt.source, output)
            self.caption += 1
            self.reset()
        else:
            self.history.seen(output)
            self._draft = output
            self._last_source = step.source.strip()
        return update

    def _unchanged(self, source: str, final: bool) -> bool:
        """True when ``source`` repeats the last non-final source and the last output would
        come out again (greedy; for a final update, the same bias as a live one)."""
        cfg = self.config
        if self._last_source != source.strip() or cfg.policy == "rt-nocache":
            return False
        return not final or (cfg.temperature == 0 and cfg.beta_for(True) == cfg.beta_for(False))

    def _agree(self, output: list[int]) -> int:
        """Record a non-final output; return how many leading tokens are now locked."""
        n = self.config.agreement
        if n:
            self._recent = [*self._recent, output][-n:]
            if len(self._recent) == n:
                agreed = min(common_prefix_len(self._recent[0], other) for other in self._recent[1:]) if n > 1 else len(output)
                self._locked = max(self._locked, agreed)
        return self._locked

    def _remember(self, source_ids, output) -> None:
        """Keep a committed segment as context, within ``context_tokens`` (see module docstring)."""
        budget = self.config.context_tokens
        if not budget:
            return
        self._context.append((tuple(source_ids), tuple(output)))
        size = lambda pairs: len(self.prompts.context_ids(pairs))  # noqa: E731
        if size(self._context) > budget:
            while self._context and size(self._context) > budget // 2:
                self._context.pop(0)
        self._context_ids = self.prompts.context_ids(self._context)

    def clear_context(self) -> None:
        """Forget the committed segments kept as context."""
        self._context, self._context_ids = [], ()

    def check(self, source) -> None:
        """Raise ``ValueError`` if ``source`` could not be translated (see ``update``)."""
        self._validated_prompt(source)

    # -- helpers ---------------------------------------------------------------------------

    def _validated_prompt(self, source):
        if not isinstance(source, str):
            raise ValueError(f"source must be a string, got {type(source).__name__}")
        text = source.strip()
        if not text:
            raise ValueError("source is empty or whitespace")
        terms = tuple(self.glossary.matches(text, self.target_lang)) if self.glossary is not None else ()
        prompt = self.prompts.build(text, self._context_ids, terms)
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

def stream_translate(
    translator: StreamTranslator, updates: Iterable[SourceUpdate]
) -> Iterator[Update]:
    """Translate a stream of source updates, yielding an ``Update`` for each.

    A segment that ends without a final update is committed when the next segment starts (by
    ``segment_id`` change) or when the stream ends, by re-running its last source as final.
    """
    last: SourceUpdate | None = None
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
        model, tokenizer, family=family, source_lang=source_lang, target_lang=target_lang,
        config=replace(config or method_config(), display_mask_k=0),
    )
    return translator.update(text, final=True).output
