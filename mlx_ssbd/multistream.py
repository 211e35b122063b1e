"""Many streams in one batched forward: a captioning service translating several talks at once.

Contract: ``MultiStreamTranslator(translators)`` drives several ``StreamTranslator``s that share
one model, so that each model call serves all of them: one batched forward for the verify passes
of every stream with an update, then batched decode steps until every stream has stopped. Each
translator keeps its own KV cache; for a step the caches are merged into mlx-lm's
``BatchKVCache`` (left padded) and extracted back afterwards, so single-stream and batched use can
be mixed freely. Outputs equal what each translator produces alone (tested), sampled ones too:
each translator keeps its own sampler and PRNG key, which the batched steps draw from in the same
order as a single-stream update does.

Equal lengths for the verify pass: every stream feeds the same number L of tokens. A stream with
fewer new tokens re-feeds the last few tokens of its own cache; one whose whole sequence is
shorter than L is left padded (its own cache is then empty, so the padding stays contiguous).

Not in batched mode: resync/n-gram lookahead, and caches other than mlx-lm's ``KVCache`` (a
translator configured so raises ``ValueError``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache

from .translator import PendingUpdate, StreamTranslator, Update
from .verify import decide


class MultiStreamTranslator:
    """Runs the updates of several translators together; see the module docstring."""

    def __init__(self, translators: Sequence[StreamTranslator]):
        if not translators:
            raise ValueError("need at least one translator")
        model = translators[0].model
        for tr in translators:
            cfg = tr.config
            if tr.model is not model:
                raise ValueError("all translators must share one model")
            if cfg.resync or cfg.ngram_drafts:
                raise ValueError("batched streams do not support resync/n-gram lookahead")
            if not all(isinstance(layer, KVCache) for layer in tr.cache.layers):
                raise ValueError("batched streams need plain KVCache layers")
        self.model = model
        self.translators = list(translators)

    def update(self, sources: Sequence[tuple[str, bool] | None]) -> list[Update | None]:
        """One step: ``sources[i]`` is ``(text, final)`` for translator i, or None to skip it.

        Raises:
            ValueError: a source is invalid (named by index); no translator changes state.
        """
        if len(sources) != len(self.translators):
            raise ValueError(f"expected {len(self.translators)} sources, got {len(sources)}")
        pending: list[tuple[StreamTranslator, PendingUpdate]] = []
        for index, (tr, item) in enumerate(zip(self.translators, sources)):
            if item is not None:
                try:
                    tr.check(item[0])
                except ValueError as error:
                    raise ValueError(f"stream {index}: {error}") from None
        for tr, item in zip(self.translators, sources):
            if item is not None:
                pending.append((tr, tr.begin(*item)))
        if not pending:
            return [None] * len(sources)

        checks = self._verify(pending)
        after_verify = time.perf_counter()
        outputs = self._decode(pending, checks)
        done = iter(tr.finish(step, out, accepted, reused, after_verify)
                    for (tr, step), out, (accepted, _, reused) in zip(pending, outputs, checks))
        return [next(done) if item is not None else None for item in sources]

    # -- the batched verify pass -----------------------------------------------------------

    def _verify(self, pending) -> list[tuple[int, int, int]]:
        """(accepted, next token, reused) per stream, from one batched forward."""
        fulls = [[*step.head, *step.draft] for _, step in pending]
        reused = [tr.cache.reuse(full, keep_last=len(step.draft) + 1) for (tr, step), full in zip(pending, fulls)]
        width = max(len(full) - r for full, r in zip(fulls, reused))
        starts, pads = [], []
        for (tr, _), full, r in zip(pending, fulls, reused):
            refeed = min(r, width - (len(full) - r))  # re-feed cached tokens to reach the width
            start = tr.cache.rewind(r - refeed)
            starts.append(start)
            pads.append(width - (len(full) - start))
        inputs = mx.array([[0] * pad + full[start:] for full, start, pad in zip(fulls, starts, pads)], dtype=mx.uint32)
        layers = self._merge([tr for tr, _ in pending], pads)
        logits = self.model(inputs, cache=layers)  # (B, width, V): ONE forward for all streams

        decided = mx.stack([
            decide(logits[b, width - len(step.draft) - 1 :], step.draft, step.beta, tr.sampler)
            for b, (tr, step) in enumerate(pending)
        ]).tolist()  # one host sync for every stream

        checks = []
        for b, ((tr, step), full, start) in enumerate(zip(pending, fulls, starts)):
            tr.cache.adopt([layer.extract(b) for layer in layers], full, fed=width)
            accepted, next_token = decided[b]
            tr.cache.rewind(len(step.head) + accepted)
            checks.append((accepted, next_token, start))
        return checks

    def _merge(self, translators: Sequence[StreamTranslator], pads: Sequence[int]) -> list[BatchKVCache]:
        layers = []
        for index in range(len(translators[0].cache.layers)):
            layer = BatchKVCache.merge([tr.cache.layers[index] for tr in translators])
            if any(pads):  # input padding of streams whose own cache is empty: contiguous on the left
                extra = mx.array(pads)
                layer.left_padding = layer.left_padding + extra
                layer.offset = layer.offset - extra
            layers.append(layer)
        return layers

    # -- batched decode steps ----------------------------------------------------------------

    def _decode(self, pending, checks) -> list[list[int]]:
        outputs = [[*step.locked, *step.draft[:accepted]] for (_, step), (accepted, _, _) in zip(pending, checks)]
        tokens = [next_token for _, next_token, _ in checks]
        fed = [list(tr.cache.tokens) for tr, _ in pending]
        steps = [0] * len(pending)
        batch = list(range(len(pending)))  # stream indices in the current batch, in row order
        layers = self._merge([pending[i][0] for i in batch], [0] * len(batch))
        while batch:
            keep = []
            for i in batch:
                tr, step = pending[i]
                if tr.is_stop(tokens[i]) or len(outputs[i]) >= step.max_new:
                    continue
                outputs[i].append(tokens[i])
                if len(outputs[i]) < step.max_new:
                    keep.append(i)
            for row, i in enumerate(batch):
                if i not in keep:  # finished: take its cache out of the batch
                    pending[i][0].cache.adopt([layer.extract(row) for layer in layers], fed[i],
                                              fed=steps[i], calls=steps[i])
            if not keep:
                break
            if keep != batch:
                rows = [batch.index(i) for i in keep]
                for layer in layers:
                    layer.filter(mx.array(rows))
                batch = keep
            logits = self.model(mx.array([[tokens[i]] for i in batch], dtype=mx.uint32), cache=layers)
            chosen = self._choose(logits[:, -1], [pending[i][0].sampler for i in batch]).tolist()  # one sync
            for i, token in zip(batch, chosen):
                fed[i].append(tokens[i])
                steps[i] += 1
                tokens[i] = token
        return outputs

    @staticmethod
    def _choose(logits: mx.array, samplers) -> mx.array:
        """Next token per row: argmax, or the row's own sampler."""
        if not any(samplers):
            return mx.argmax(logits, axis=-1)
        return mx.stack([sampler(row) if sampler else mx.argmax(row)
                         for row, sampler in zip(logits, samplers)]).astype(mx.uint32)
