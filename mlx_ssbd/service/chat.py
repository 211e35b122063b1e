"""OpenAI-compatible chat completions with Predicted Outputs, verified in one pass.

Contract: ``parse_request(body, max_tokens=...)`` validates a ``POST /v1/chat/completions`` body
into a ``ChatRequest`` or raises ``fields.ProtocolError`` (a 400 with OpenAI's error shape).
``ChatEngine(loaded).rounds(request, on_text)`` runs it on the model's thread as a generator that
does one model call per step (the scheduler steps it between the live sessions' batched rounds, so
a long answer does not hold them) and returns a ``ChatResult``; ``complete`` runs it to the end
in one go. ``on_text`` (optional) gets the answer's text piece by
piece as tokens are decided: first ``""`` once the request is accepted (it fits the context),
then the text the verify pass accepted from the prediction, then a piece per decoded token (a
piece is held back while it ends in an incomplete UTF-8 character), so the pieces join to the
answer. If ``on_text`` raises ``Cancelled`` (its client went away), decoding stops there.
``response`` builds the non-streaming JSON, ``chunk`` / ``usage_chunk`` the streaming chunks.

Predicted Outputs (``prediction: {"type": "content", "content": "..."}``): the prediction is the
draft of one engine update (``engine.update``): verified in ONE forward pass and decoding resumes
where it diverges. By default the verification is exact (beta = 0, as OpenAI's predictions are
lossless: the completion is what plain greedy decoding gives); ``prediction_beta`` (an extension)
biases it towards the prediction, as SSBD does. ``usage.completion_tokens_details`` reports
``accepted_prediction_tokens`` (prediction tokens kept by the verify pass) and
``rejected_prediction_tokens`` (the rest). The prompt cache persists across requests: a request
that shares its leading tokens with the previous one (the same system prompt, a growing source)
feeds only the rest.

Served: ``messages`` (system/user/assistant, string content or text parts), ``max_tokens`` /
``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``, ``stream`` (with
``stream_options.include_usage``). Refused with a clear 400: ``n`` > 1, ``stop``, ``tools``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import mlx.core as mx

from ..engine.cache import TokenCache, context_length
from ..engine.planner import PREFILL_CHUNK
from ..engine.sampling import Sampler
from ..engine.stops import StopRule
from ..engine.update import Job, Runner
from ..platform.backend import on_generation_stream
from .fields import ProtocolError

DEFAULT_MAX_TOKENS = 512  # a request's max_tokens when it gives none
MAX_TOKENS_LIMIT = 4096  # the largest max_tokens a request may ask for (``serve --max-tokens``)
FALLBACK_CONTEXT = 32768  # prompt and answer tokens at most when the model does not give its context
ROLES = ("system", "user", "assistant", "developer")


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict]
    prediction: str | None
    beta: float
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stream: bool
    include_usage: bool
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")
    created: int = field(default_factory=lambda: int(time.time()))


class Cancelled(Exception):
    """Raised by an ``on_text`` callback whose client went away: stop decoding."""


@dataclass(frozen=True)
class ChatResult:
    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int
    accepted: int
    rejected: int
    cached_tokens: int


def _bad(message: str, code: str = "invalid_request_error") -> ProtocolError:
    return ProtocolError(code, message)


def parse_request(body, *, max_tokens: int = MAX_TOKENS_LIMIT) -> ChatRequest:
    """The request in ``body`` (parsed JSON); ``max_tokens``: the most it may ask for."""
    limit = max_tokens
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    for unsupported in ("tools", "functions", "stop", "logprobs", "response_format"):
        if body.get(unsupported):
            raise _bad(f"{unsupported!r} is not supported by this server", "unsupported_parameter")
    if body.get("n", 1) != 1:
        raise _bad("only n = 1 is supported", "unsupported_parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list")
    cleaned = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise _bad(f"messages[{i}] needs a role among {', '.join(ROLES)}")
        role = "system" if message["role"] == "developer" else message["role"]
        cleaned.append({"role": role, "content": _text(message.get("content"), f"messages[{i}].content")})
    prediction = body.get("prediction")
    if prediction is not None:
        if not isinstance(prediction, dict) or prediction.get("type") != "content":
            raise _bad('\'prediction\' must be {"type": "content", "content": ...}')
        prediction = _text(prediction.get("content"), "prediction.content")
    beta = _number(body, "prediction_beta", 0.0, 0.0, 1.0)
    temperature = _number(body, "temperature", 0.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise _bad("'top_p' must be in (0, 1]")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= limit:
        raise _bad(f"'max_tokens' must be an integer in [1, {limit}]")
    seed = body.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise _bad("'seed' must be an integer in [0, 2**63)")
    stream = body.get("stream", False)
    options = body.get("stream_options") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict):
        raise _bad("'stream' must be true or false and 'stream_options' an object")
    return ChatRequest(
        cleaned,
        prediction,
        beta,
        max_tokens,
        temperature,
        top_p,
        seed,
        stream,
        bool(options.get("include_usage")),
    )


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise _bad(f"{where} must be a string or a list of text parts")


def _number(body: dict, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"{key!r} must be a number in [{low:g}, {high:g}]")
    return float(value)


class ChatEngine:
    """Runs chat requests on one persistent prompt cache (the model's thread only)."""

    def __init__(self, loaded, prefill_chunk: int = PREFILL_CHUNK):
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
        self.loaded = loaded
        self.prefill_chunk = prefill_chunk
        self.cache = TokenCache(loaded.model)
        self.stops = StopRule(loaded.tokenizer, on_newline=False)
        self.context = context_length(loaded.model) or FALLBACK_CONTEXT

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        text = self.loaded.tokenizer.apply_chat_template(
            request.messages, tokenize=False, add_generation_prompt=True
        )
        return list(self.loaded.tokenizer.encode(text, add_special_tokens=False))

    def complete(self, request: ChatRequest, on_text: Callable[[str], None] | None = None) -> ChatResult:
        """The whole completion at once (see ``rounds``)."""
        steps = self.rounds(request, on_text)
        while True:
            try:
                next(steps)
            except StopIteration as end:
                return end.value

    def rounds(
        self, request: ChatRequest, on_text: Callable[[str], None] | None = None
    ) -> Generator[None, None, ChatResult]:
        """The completion, one model call per step: a prompt longer than ``prefill_chunk``
        uncached tokens is fed a chunk per step, then the rest of it with the prediction (its
        verify pass), then one decode step (or proposal) per step; returns its ``ChatResult``.
        Raises ``ProtocolError`` at the first step when the prompt does not fit the context (before
        ``on_text`` is called), ``Cancelled`` at the step where ``on_text`` did. One completion
        runs at a time on the engine's cache: the next starts after this one ended."""
        tok = self.loaded.tokenizer
        prompt = self.prompt_ids(request)
        draft = list(tok.encode(request.prediction, add_special_tokens=False)) if request.prediction else []
        if len(prompt) >= self.context:
            raise _bad(
                f"the prompt has {len(prompt)} tokens; the model's context is {self.context}",
                "context_length_exceeded",
            )
        max_new = min(request.max_tokens, self.context - len(prompt))
        draft = draft[:max_new]
        sampler = (
            Sampler(request.temperature, request.top_p, seed=request.seed)
            if request.temperature > 0
            else None
        )
        pieces = TextPieces(tok.decode, on_text) if on_text is not None else None
        job = Job(
            head=prompt,
            locked=(),
            draft=draft,
            beta=request.beta,
            max_new=max_new,
            stops=self.stops,
            sampler=sampler,
            progress=pieces.grew if pieces else None,
        )
        if on_text is not None:
            on_text("")
        cached = self.cache.reuse(prompt)
        for end in range(cached + self.prefill_chunk, len(prompt), self.prefill_chunk):
            with on_generation_stream():  # a long prompt: one chunk per step, all but its last part
                mx.eval(
                    self.cache.forward(prompt[len(self.cache) : end], logits_from=end - len(self.cache) - 1)
                )
            yield
        runner, outcomes = Runner(self.cache), []
        runner.add(self.cache, job, outcomes.append)
        while runner.busy:
            runner.round()
            if runner.busy:
                yield
        output = outcomes[0].output
        text = tok.decode(output)
        if pieces is not None:
            pieces.end(text)
        return ChatResult(
            text=text,
            finish_reason="length" if len(output) >= max_new else "stop",
            prompt_tokens=len(prompt),
            completion_tokens=len(output),
            accepted=outcomes[0].accepted,
            rejected=len(draft) - outcomes[0].accepted,
            cached_tokens=min(cached, outcomes[0].reused),
        )


class TextPieces:
    """Turns a growing list of token ids into the new text since the last call."""

    def __init__(self, decode: Callable[[list[int]], str], on_text: Callable[[str], None]):
        self.decode, self.on_text, self.sent = decode, on_text, ""

    def grew(self, output: list[int]) -> None:
        text = self.decode(output)
        if text.endswith("\ufffd") or not text.startswith(self.sent):
            return  # half a character, or the tokenizer reworded earlier text: wait for more
        self._send(text)

    def end(self, text: str) -> None:
        """The whole answer: send what is still held back."""
        if text.startswith(self.sent):
            self._send(text)

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent):
            piece, self.sent = text[len(self.sent) :], text
            self.on_text(piece)


def _usage(result: ChatResult) -> dict:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": result.accepted,
            "rejected_prediction_tokens": result.rejected,
        },
    }


def response(request: ChatRequest, result: ChatResult, model: str) -> dict:
    """The non-streaming ``chat.completion`` object."""
    return {
        "id": request.id,
        "object": "chat.completion",
        "created": request.created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "finish_reason": result.finish_reason,
            }
        ],
        "usage": _usage(result),
    }


def chunk(request: ChatRequest, model: str, delta: dict, finish_reason: str | None = None) -> dict:
    """One streaming ``chat.completion.chunk``: the first carries ``{"role": "assistant"}``, the
    content ones ``{"content": piece}``, the last an empty delta and the finish reason."""
    return {
        "id": request.id,
        "object": "chat.completion.chunk",
        "created": request.created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(request: ChatRequest, result: ChatResult, model: str) -> dict:
    """The chunk after the last, when ``stream_options.include_usage`` asks for it."""
    return {**chunk(request, model, {}), "choices": [], "usage": _usage(result)}
