"""Many streams in one batched forward: a captioning service translating several talks at once.

Contract: ``MultiStreamTranslator(translators)`` moves the KV caches of several
``StreamTranslator``s that share one model into one persistent ``batch.BatchCache`` and runs their
updates together with ``engine.run``: one batched model call per round for every stream that needs
one (the verify passes of all streams, then decode steps and lookahead proposals; on a CPU rows of
very different widths go in separate calls: ``batch``), one host sync per round. The update
algorithm is the very one a translator runs alone (``engine``), so the outputs equal each
translator's own, greedy and sampled (each keeps its own sampler and PRNG key, drawn in the same
order). Streams join (``add``) and leave (``remove``, which hands the translator its KV back)
between updates; a stream without work in a round is parked out of the batch (see ``batch``).

Two ways to drive it: ``update(sources)`` runs one update of each named stream to the end
together; ``submit(translator, text, final, done)`` starts one stream's update at any time and
``round()`` runs one round of every update under way (one model call), so an update joins the
batch as soon as its source comes, while the others are mid-way (a live service, ``scheduler``).

A long prompt is fed ``chunk`` tokens per round (``batch``): the other streams' rounds go on
meanwhile. The outputs are the same (up to floating-point rounding, as any two shapes of a
matrix product are); an update fed in chunks counts one model pass per chunk.

Only full ``KVCache`` layers share a model call: a stream of a hybrid model (recurrent layers) or
with a sliding window runs in the same rounds with a model call of its own (``batch.SoloRow``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from ..engine import update as engine
from ..engine.batch import BatchCache
from ..engine.planner import PREFILL_CHUNK
from .records import Update
from .translator import StreamTranslator


class MultiStreamTranslator:
    """Runs the updates of several translators together; see the module docstring."""

    def __init__(
        self, translators: Sequence[StreamTranslator] = (), *, model=None, chunk: int | None = PREFILL_CHUNK
    ):
        if not translators and model is None:
            raise ValueError("need at least one translator, or the model")
        self.model = model if model is not None else translators[0].model
        self.batch = BatchCache(self.model, chunk)
        self.runner = engine.Runner(self.batch)
        self.translators: list[StreamTranslator] = []
        for translator in translators:
            self.add(translator)

    def add(self, translator: StreamTranslator) -> None:
        """Let ``translator`` join the batch (its cache moves in as a new row)."""
        if translator.model is not self.model:
            raise ValueError("all translators must share one model")
        if translator in self.translators:
            raise ValueError("this translator is already in the batch")
        translator.attach(self.batch)
        self.translators.append(translator)

    def remove(self, translator: StreamTranslator) -> None:
        """Take ``translator`` out of the batch; its KV goes back into its own cache. An update of
        it under way is abandoned (its ``done`` is never called; the translator stays as it was
        before that update began)."""
        self.runner.cancel(translator.row)
        translator.detach()
        self.translators.remove(translator)

    @property
    def busy(self) -> bool:
        """Some submitted update has not ended yet."""
        return self.runner.busy

    def running(self, translator: StreamTranslator) -> bool:
        """An update of ``translator`` is under way."""
        return self.runner.running(translator.row)

    def submit(
        self, translator: StreamTranslator, text: str, final: bool, done: Callable[[Update], None]
    ) -> None:
        """Start ``translator``'s update to ``(text, final)``; ``done(update)`` is called from the
        ``round`` in which it ends (at once when the source is unchanged). A translator runs one
        update at a time.

        Raises:
            ValueError: the source is invalid, or an update of ``translator`` is under way; the
                translator's state is unchanged.
        """
        if self.running(translator):
            raise ValueError("this translator's update is under way")
        pending = translator.begin(text, final)
        if pending.job is None:
            done(translator.finish(pending, None))
            return
        self.runner.add(
            translator.row, pending.job, lambda outcome: done(translator.finish(pending, outcome))
        )

    def round(self) -> None:
        """One round of every submitted update (one batched model call, one host sync)."""
        self.runner.round()

    def update(self, sources: Sequence[tuple[str, bool] | None]) -> list[Update | None]:
        """One update of each stream named: ``sources[i]`` is ``(text, final)`` for translator i, or None to skip it.

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
        results: list[Update | None] = [None] * len(sources)
        for index, (tr, item) in enumerate(zip(self.translators, sources)):
            if item is not None:
                self.submit(tr, *item, functools.partial(results.__setitem__, index))
        while self.busy:
            self.round()
        return results
