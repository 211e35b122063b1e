"""Greedy (or sampled) decoding from a known next token.

Contract: ``decode(cache, first, ...)`` yields output tokens starting with ``first`` (a
token already chosen, e.g. the correction from a verify pass) until a stop token (not yielded),
a stop string, or ``max_tokens`` tokens. Each yielded token except a final one cut by
``max_tokens`` has been fed to the cache, so on return the cache holds prompt + accepted + all
yielded tokens (``cache.tokens`` is the exact record). One host sync per token, as in
``mlx_lm.generate_step``: the next step is dispatched with ``mx.async_eval`` before the current
token is handed to the caller, and no step is computed past a stop token. A stop token (EOS, end of
turn, or any token the caller's predicate rejects, such as one holding a newline) is neither
yielded nor fed, so it never enters the output or the next update's draft.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import mlx.core as mx

from .cache import TokenCache


def decode(
    cache: TokenCache,
    first: int,
    *,
    max_tokens: int,
    is_stop: Callable[[int], bool],
    sampler: Callable[[mx.array], mx.array] | None = None,
) -> Iterator[int]:
    """Yield tokens from ``first`` on; see the module docstring.

    Args:
        cache: the model cache holding everything before ``first``.
        first: the first output token (not yet fed).
        max_tokens: the most tokens to yield.
        is_stop: True for a token that ends the output; it is never yielded nor fed.
        sampler: picks the next token from logits (lazy); None for greedy argmax.
    """
    choose = sampler or mx.argmax
    token = first
    produced = 0
    while produced < max_tokens and not is_stop(token):
        produced += 1
        if produced < max_tokens:
            next_token = choose(cache.forward_one(token))
            mx.async_eval(next_token)
        else:
            next_token = None
        yield token
        if next_token is None:
            return
        token = next_token.item()  # the one host sync per token
