"""What an operator sets for the web side of ``mlx-ssbd serve``: access, limits and timeouts.

Contract: ``ServiceOptions`` is a frozen dataclass with a working default for every field (the
CLI's defaults come from here); ``check()`` raises ``ValueError`` naming a bad value.
"""

from __future__ import annotations

from dataclasses import dataclass

from .outbox import DEFAULT_LIMIT
from .protocol import Limits

BAD_MESSAGE_WINDOW_S = 10.0


@dataclass(frozen=True)
class ServiceOptions:
    """Args:
    limits: what one WebSocket message may hold (``protocol.Limits``).
    idle_timeout_s: a session whose client sends no valid message for this long is closed.
    handshake_timeout_s: a new connection must send its first message within this, or it is
        closed (a silent socket holds no session slot for long).
    api_key: when set, ``/v1/stream``, ``/v1/chat/completions`` and ``/v1/models`` need it
        (``Authorization: Bearer KEY``, or ``?api_key=KEY`` on the WebSocket); viewer links of
        one session (its caption page, events and transcripts) need only the session id.
    allowed_origins: browser origins (``scheme://host[:port]``) that may open a WebSocket or
        POST besides the server's own; ``"*"`` allows any.
    allowed_hosts: host names (``Host`` header) the server answers to besides loopback names
        and IP addresses (``guard``); ``"*"`` allows any.
    max_outbox: events waiting for one slow reader (client or viewer) before live updates are
        dropped, then the reader is disconnected (``outbox``).
    max_viewers: SSE viewers in all; ``max_viewers_per_session`` of one session.
    max_chat_bytes: a chat completion request's body at most.
    max_tokens: a chat completion's ``max_tokens`` at most.
    max_audio_s: seconds of a session's audio waiting to be recognised at most.
    asr_model: the ASR card that hears every session's speech; None: for each source language
        the card that hears it (``asr.recognizer.asr_card_for``).
    asr_step_s: seconds of new audio between two recognitions of a session's buffer (``listen
        --step``).
    max_bad_messages: a connection sending more bad messages than this within
        ``BAD_MESSAGE_WINDOW_S`` is closed (1008): a flood of junk costs the others nothing.
    keepalive_s: an SSE stream sends a comment after this long without an event, so that
        proxies keep it open.
    head_timeout_s: a connection must send a complete HTTP request head within this, or it is
        closed (``connections``: slow or idle sockets hold nothing viewers and health checks need).
    """

    limits: Limits = Limits()
    idle_timeout_s: float = 300.0
    handshake_timeout_s: float = 10.0
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_outbox: int = DEFAULT_LIMIT
    max_viewers: int = 1000
    max_viewers_per_session: int = 200
    max_chat_bytes: int = 1 << 20
    max_tokens: int = 4096
    max_audio_s: float = 30.0
    asr_model: str | None = None
    asr_step_s: float = 1.0
    max_bad_messages: int = 50
    keepalive_s: float = 15.0
    head_timeout_s: float = 10.0

    def check(self) -> None:
        for name in (
            "idle_timeout_s",
            "handshake_timeout_s",
            "head_timeout_s",
            "max_outbox",
            "max_viewers",
            "max_viewers_per_session",
            "max_chat_bytes",
            "max_tokens",
            "max_audio_s",
            "asr_step_s",
            "max_bad_messages",
            "keepalive_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty")
