"""Greedy (or sampled) decoding from a known next token, optionally checking proposed drafts.

Contract: ``decode(cache, first, ...)`` yields output tokens starting with ``first`` (a
token already chosen, e.g. the correction from a verify pass) until a stop token (not yielded),
a stop string, or ``max_tokens`` tokens. Each yielded token except a final one cut by
``max_tokens`` has been fed to the cache, so on return the cache holds prompt + accepted + all
yielded tokens (``cache.tokens`` is the exact record). One host sync per token, as in
``mlx_lm.generate_step``: the next step is dispatched with ``mx.async_eval`` before the current
token is handed to the caller, and no step is computed past a stop token. A stop token (EOS, end of
turn, or any token the caller's predicate rejects, such as one holding a newline) is neither
yielded nor fed, so it never enters the output or the next update's draft.

With ``propose`` (a ``lookahead.Proposer``), each step first asks for a proposed continuation of
the output; a proposal is checked with ``verify.verify`` in one biased pass (the same rule and β
as the update's draft) and its accepted tokens are yielded at once. With β = 0 every accepted
token is the greedy token, so the output equals plain greedy decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import mlx.core as mx

from .cache import TokenCache
from .verify import verify


def decode(
    cache: TokenCache,
    first: int,
    *,
    max_tokens: int,
    is_stop: Callable[[int], bool],
    sampler: Callable[[mx.array], mx.array] | None = None,
    propose=None,
    beta: float = 0.0,
    prefix: Sequence[int] = (),
) -> Iterator[int]:
    """Yield tokens from ``first`` on; see the module docstring.

    Args:
        cache: the model cache holding everything before ``first``.
        first: the first output token (not yet fed).
        max_tokens: the most tokens to yield.
        is_stop: True for a token that ends the output; it is never yielded nor fed.
        sampler: picks the next token from logits (lazy); None for greedy argmax. With proposals
            it is a ``sampling.Sampler`` (biased speculative sampling).
        propose: maps the output so far to proposed next tokens (``lookahead.Proposer``); None: none.
        beta: the bias towards a proposal.
        prefix: the output accepted before ``first`` (proposals match against prefix + yielded).
    """
    choose = sampler or mx.argmax
    output = list(prefix)
    token, produced = first, 0
    while produced < max_tokens and not is_stop(token):
        produced += 1
        output.append(token)
        proposal = propose(output)[: max_tokens - produced] if propose else []
        if proposal:
            accepted, stopped, next_token = _check_proposal(cache, token, proposal, beta, sampler, is_stop)
            propose.accepted(len(accepted))
            yield token
            yield from accepted
            if stopped:
                return
            output += accepted
            produced += len(accepted)
            token = next_token
        elif produced < max_tokens:
            next_token = choose(cache.forward_one(token))
            mx.async_eval(next_token)
            yield token
            token = next_token.item()  # the one host sync per token
        else:
            yield token
            return


def _check_proposal(cache, token, proposal, beta, sampler, is_stop) -> tuple[list[int], bool, int]:
    """Feed ``token`` and verify ``proposal`` after it in one pass.

    Returns the accepted tokens before any stop token, whether a stop token ended the output, and
    the next token. A stop token inside the accepted run is dropped from the cache with what follows.
    """
    check = verify(cache, [*cache.tokens, token], proposal, beta, sampler)
    accepted = []
    for t in proposal[: check.accepted]:
        if is_stop(t):
            break
        accepted.append(t)
    stopped = len(accepted) < check.accepted
    if stopped:
        cache.rewind(len(cache.tokens) - (check.accepted - len(accepted)))
    return accepted, stopped, check.next_token
