"""A model's KV cache together with the token ids it holds.

Contract: ``TokenCache.layers`` is the plain mlx-lm per-layer cache list (as ``make_prompt_cache``
builds it) and ``TokenCache.tokens`` lists exactly the token ids whose keys and values it holds,
in order (the last one may still be a lazy ``mx.array`` after a pipelined decode step; it is
resolved before it is compared with anything). Every forward call goes through
``TokenCache.forward`` so the two never drift apart.
``rewind(n)`` keeps the first ``n`` tokens: it trims every layer through mlx-lm's cache API and
checks each returned count. Where a layer cannot be trimmed (a recurrent state of a hybrid model, a
sliding window that has wrapped) it goes back to the nearest checkpoint at or before ``n``
(``checkpoints``): a feed leaves one at each position its ``Feed.marks`` names, splitting its model
call there, so an update returns to the end of the shared prompt, the stable source or the draft's
start instead of to nothing. With no checkpoint to go back to, or a layer that trims short, the
cache is rebuilt empty, never silently corrupted. ``rewind`` returns how many tokens are kept and
the caller re-feeds what is missing, so correctness never depends on trimming.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from .checkpoints import Checkpoints, needs_checkpoints
from .requests import Fed

log = logging.getLogger(__name__)


def context_length(model) -> int | None:
    """The model's context window in tokens (what one stream's cache may hold), when its config
    states one."""
    args = getattr(model, "args", None)
    value = getattr(args, "max_position_embeddings", None)
    return int(value) if value else None


# Architectures whose ``Model.__call__`` is exactly backbone -> (tied embeddings | lm_head). For
# them the output layer (a 150k-row matmul for Qwen) runs only on the rows whose logits are used;
# any other architecture goes through its own ``__call__`` and the rows are sliced afterwards.
SPLIT_HEAD_TYPES = frozenset({"llama", "qwen2", "qwen3"})


def common_prefix_len(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two sequences (token ids, words, text).

    Slices are compared whole (at C speed), halving the span that holds the first difference."""
    if type(a) is not type(b):
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
        return n
    same, differs = 0, n  # a[:same] == b[:same]; the first difference is before ``differs``
    while differs - same > 1:
        middle = (same + differs) // 2
        if a[same:middle] == b[same:middle]:
            same = middle
        else:
            differs = middle
    return same


def input_ids(ids: Sequence, pad: int = 0) -> mx.array:
    """``(pad + len(ids),)`` uint32 model input: ``pad`` zeros, then ``ids``, whose last entry may be
    a lazy token (an ``mx.array`` not yet known on the host: a pipelined decode step)."""
    known = [0] * pad + [int(t) for t in (ids[:-1] if is_lazy(ids) else ids)]
    head = mx.array(known, dtype=mx.uint32)
    if is_lazy(ids):
        return mx.concatenate([head, ids[-1].reshape(1).astype(mx.uint32)])
    return head


def is_lazy(ids: Sequence) -> bool:
    """True when the last id is a lazy token (see ``input_ids``)."""
    return bool(ids) and isinstance(ids[-1], mx.array)


def held_prefix(tokens: list, ids: Sequence, held: int = 0) -> int:
    """How many leading ``ids`` a cache holding ``tokens`` holds, given that it holds the first
    ``held`` of them (``Feed.held``: only what follows is compared); a lazy last id (``input_ids``)
    is never held."""
    known = len(ids) - is_lazy(ids)
    start = min(held, known, len(tokens))
    if start == len(tokens):  # it holds nothing more (a decode step)
        return start
    tokens = resolved(tokens)
    if start == 0 and known == len(ids):
        return common_prefix_len(tokens, ids)
    return start + common_prefix_len(tokens[start:], ids[start:known])


def resolved(tokens: list) -> list:
    """``tokens`` with lazy entries replaced by their (by now computed) values, in place."""
    for i in range(len(tokens) - 1, -1, -1):
        if not isinstance(tokens[i], mx.array):
            break
        tokens[i] = int(tokens[i].item())
    return tokens


def model_logits(model, inputs: mx.array, layers, last: int) -> mx.array:
    """Run ``inputs`` (B, T) through ``model`` with cache ``layers``; return the logits of the
    last ``last`` positions, (B, last, vocab), lazy. The output layer runs on those rows only
    where the architecture allows it (``SPLIT_HEAD_TYPES``)."""
    args = getattr(model, "args", None)
    if last < inputs.shape[1] and getattr(args, "model_type", None) in SPLIT_HEAD_TYPES:
        hidden = model.model(inputs, layers)[:, -last:]
        if args.tie_word_embeddings:
            return model.model.embed_tokens.as_linear(hidden)
        return model.lm_head(hidden)
    return model(inputs, cache=layers)[:, -last:]


class TokenCache:
    """The KV cache of one model plus the ids it holds. Changed in place.

    Args:
        model: an mlx-lm model.
        max_kv_size: passed to ``make_prompt_cache`` (a rotating window for models without their
            own ``make_cache``); ``None`` for a full cache.
        make_layers: builds a fresh per-layer cache list; overrides ``max_kv_size``.
    """

    def __init__(self, model, *, max_kv_size: int | None = None, make_layers=None):
        self.model = model
        self._make_layers = make_layers or (lambda: make_prompt_cache(model, max_kv_size=max_kv_size))
        self.layers = self._make_layers()
        self.tokens: list[int] = []
        self.checkpoints = Checkpoints() if needs_checkpoints(self.layers) else None
        self.rebuilds = 0  # times a trim was impossible and the cache was rebuilt
        self.forward_calls = 0  # model calls made through this cache (cumulative)
        self.tokens_fed = 0  # tokens sent through the model (cumulative)

    def __len__(self) -> int:
        return len(self.tokens)

    def clear(self) -> None:
        """Drop everything (a fresh, empty cache)."""
        self.layers = self._make_layers()
        self.tokens = []
        if self.checkpoints is not None:
            self.checkpoints.clear()

    def rewind(self, n: int) -> int:
        """Keep the first ``n`` cached tokens; return how many are kept (``n``, or 0 on rebuild)."""
        n = max(0, min(n, len(self.tokens)))
        drop = len(self.tokens) - n
        if drop == 0:
            return n
        if self.checkpoints is not None:
            self.checkpoints.forget_after(n)
        if not all(layer.is_trimmable() for layer in self.layers):
            return self._restore(n)
        trimmed = [layer.trim(drop) for layer in self.layers]
        if any(t != drop for t in trimmed):
            return self._rebuild(f"asked to trim {drop}, layers trimmed {sorted(set(trimmed))}")
        del self.tokens[n:]
        return n

    def _restore(self, n: int) -> int:
        """Go back to the nearest checkpoint at or before ``n`` (or rebuild); return the tokens kept."""
        back = self.checkpoints.restore(n, self.layers, len(self.tokens)) if self.checkpoints else None
        if back is None:
            return self._rebuild(f"a layer cannot be trimmed and no checkpoint is at or before {n}")
        kept, self.layers = back
        del self.tokens[kept:]
        return kept

    def _rebuild(self, why: str) -> int:
        log.debug("KV cache rebuilt: %s", why)
        self.rebuilds += 1
        self.clear()
        return 0

    def reuse(self, ids: Sequence[int], *, keep_last: int = 1, held: int = 0) -> int:
        """Rewind to the longest prefix shared with ``ids``, leaving at least ``keep_last`` ids of
        ``ids`` to feed (their logits are needed). Returns the number of reused tokens. ``held``:
        the cache is known to hold the first ``held`` ids (``Feed.held``); they are not compared."""
        n = min(held_prefix(self.tokens, ids, held), max(0, len(ids) - keep_last))
        return self.rewind(n)

    def forward(self, ids: Sequence[int], *, logits_from: int = 0, marks: Sequence[int] = ()) -> mx.array:
        """Feed ``ids`` after the cached tokens; return the logits of rows ``logits_from`` on,
        ``(len(ids) - logits_from, vocab)`` (lazy). Where the cache keeps checkpoints, one is
        saved at each position in ``marks`` (counted from the cache's start) that this call
        reaches, the model call split there (one more call per mark inside ``ids``)."""
        if not ids:
            raise ValueError("forward needs at least one token")
        start = len(self.tokens)
        if self.checkpoints is not None:
            self.checkpoints.touch(m for m in marks if m <= start)
        marks = (
            {m - start for m in marks if start < m <= start + len(ids)}
            if self.checkpoints is not None
            else set()
        )
        cuts = sorted(marks | {len(ids)})
        parts, begin = [], 0
        for end in cuts:
            rows = end - max(begin, logits_from)  # rows of this part whose logits are asked for
            logits = model_logits(self.model, input_ids(ids[begin:end])[None], self.layers, max(rows, 1))
            if rows > 0:
                parts.append(logits[0])
            self.tokens.extend(t if isinstance(t, mx.array) else int(t) for t in ids[begin:end])
            if end in marks:
                self.checkpoints.save(start + end, self.layers)
            begin = end
        self.forward_calls += len(cuts)
        self.tokens_fed += len(ids)
        return parts[0] if len(parts) == 1 else mx.concatenate(parts)

    def feed(self, feeds, *, chunk: int | None = None) -> list[Fed]:
        """The ``engine`` feeder interface for one stream: ``feeds`` is ``[(self, Feed)]``; the
        cache is brought to ``Feed.ids`` (longest cached prefix reused, at least ``Feed.logits``
        ids fed) in one model call (one more per checkpoint it leaves, see ``forward``). Returns
        ``[Fed]``. With ``chunk``, at most ``chunk`` tokens go in per call, those whose logits are
        asked for too: the answer of a partial feed says ``done=False`` and carries the logits of
        its tokens among the asked-for ones as ``Fed.piece`` (``batch`` does the same)."""
        if len(feeds) != 1 or feeds[0][0] is not self:
            raise ValueError("a TokenCache serves one stream: itself")
        feed = feeds[0][1]
        ids, wanted = feed.ids, feed.logits
        rebuilds, calls = self.rebuilds, self.forward_calls
        reused = self.reuse(ids, keep_last=wanted, held=feed.held) if feed.reuse else self.rewind(0)
        new = len(ids) - reused
        if chunk is not None and new > chunk:
            first = min(max(0, len(ids) - wanted - reused), chunk - 1)  # the first row with logits
            logits = self.forward(ids[reused : reused + chunk], logits_from=first, marks=feed.marks)
            piece = logits if reused + chunk > len(ids) - wanted else None
            rebuilt, calls = self.rebuilds > rebuilds, self.forward_calls - calls
            return [Fed(logits[-1:], reused, chunk, rebuilt, done=False, calls=calls, piece=piece)]
        logits = self.forward(ids[reused:], logits_from=new - wanted, marks=feed.marks)
        return [Fed(logits, reused, new, self.rebuilds > rebuilds, calls=self.forward_calls - calls)]

    @property
    def feeder(self) -> TokenCache:
        """The engine feeder that serves this stream: the cache itself (a ``batch.BatchRow``'s is
        its batch), so a stream runs its updates on ``row.feeder`` wherever its KV lives."""
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys, values and states, checkpoints included."""
        saved = self.checkpoints.nbytes if self.checkpoints is not None else 0
        return saved + sum(getattr(layer, "nbytes", 0) for layer in self.layers)
