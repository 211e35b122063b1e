"""Many streams in one batched forward: a captioning service translating several talks at once.

Contract: ``MultiStreamTranslator(translators)`` moves the KV caches of several
``StreamTranslator``s that share one model into one persistent ``batch.BatchCache`` and runs their
updates together with ``engine.run``: one batched model call per step for every stream that
needs one (the verify passes of all streams, then decode steps and lookahead proposals), one host
sync per step. The update algorithm is the very one a translator runs alone (``engine``), so the
outputs equal each translator's own, greedy and sampled (each keeps its own sampler and PRNG key,
drawn in the same order). Streams join (``add``) and leave (``remove``, which hands the translator
its KV back) between updates; a stream without work in a step is parked out of the batch (see
``batch``).

Only full ``KVCache`` layers can be batched (a rotating window raises ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine import update as engine
from ..engine.batch import BatchCache
from .translator import StreamTranslator, Update


class MultiStreamTranslator:
    """Runs the updates of several translators together; see the module docstring."""

    def __init__(self, translators: Sequence[StreamTranslator] = (), *, model=None):
        if not translators and model is None:
            raise ValueError("need at least one translator, or the model")
        self.model = model if model is not None else translators[0].model
        self.batch = BatchCache(self.model)
        self.translators: list[StreamTranslator] = []
        for translator in translators:
            self.add(translator)

    def add(self, translator: StreamTranslator) -> None:
        """Let ``translator`` join the batch (its cache moves in as a new row)."""
        if translator.model is not self.model:
            raise ValueError("all translators must share one model")
        if translator in self.translators:
            raise ValueError("this translator is already in the batch")
        translator.row = self.batch.join(translator.cache)
        self.translators.append(translator)

    def remove(self, translator: StreamTranslator) -> None:
        """Take ``translator`` out of the batch; its KV goes back into its own cache."""
        self.batch.leave(translator.row, into=translator.cache)
        translator.row = translator.cache
        self.translators.remove(translator)

    def update(self, sources: Sequence[tuple[str, bool] | None]) -> list[Update | None]:
        """One step: ``sources[i]`` is ``(text, final)`` for translator i, or None to skip it.

        Raises:
            ValueError: a source is invalid (named by index); no translator changes state.
        """
        if len(sources) != len(self.translators):
            raise ValueError(f"expected {len(self.translators)} sources, got {len(sources)}")
        for index, (tr, item) in enumerate(zip(self.translators, sources)):
            if item is not None:
                try:
                    tr.check(item[0])
                except ValueError as error:
                    raise ValueError(f"stream {index}: {error}") from None
        steps = [tr.begin(*item) if item is not None else None for tr, item in zip(self.translators, sources)]
        work = [(tr.row, step.job) for tr, step in zip(self.translators, steps) if step and step.job]
        outcomes = iter(engine.run(self.batch, work))
        return [tr.finish(step, next(outcomes) if step.job else None) if step else None
                for tr, step in zip(self.translators, steps)]
