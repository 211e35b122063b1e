"""The live caption WebSocket protocol, version 1: parsing client messages, building events.

Contract: pure functions, no I/O. ``parse(raw, limits)`` turns one client frame into a
``SessionUpdate``, ``SourceMessage`` or ``CloseMessage``, or raises ``ProtocolError`` (with the
``code`` the ``error`` event carries); ``*_event`` build the server's JSON events.

Client messages (every field but ``type`` optional)::

    {"type": "session.update", "source": "en", "target": "de", "method": "ssbd", "beta": 0.2, "mask_k": 0}
    {"type": "source.update", "segment": "s1", "text": "so today", "final": false, "start": 0.0, "end": 1.2}
    {"type": "session.close"}

or, instead of ``source.update`` messages, speech: binary frames of 16 kHz mono signed 16-bit
little-endian PCM (``service.speech`` recognises them; English only with Whisper tiny.en).

Server events: ``session.created`` / ``session.updated`` (the settings in force),
``translation.update`` (``segment``, ``caption``, ``seq``, ``stable``, ``unstable``, ``end``: the
audio time of the newest word translated, when the client sent ``end``, and ``stats``),
``translation.commit`` (``segment``, ``caption``, ``seq``, ``text``, ``start``, ``end``, ``reason``),
``transcription.update`` (speech sessions: ``segment``, ``text``, ``final``, ``start``, ``end``,
what the recognizer heard), ``error`` (``code``, ``message``) and ``session.closed``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ..live.languages import language_name
from ..live.translator import DEFAULT_BETA, METHODS

PROTOCOL_VERSION = 1
STREAM_METHODS = tuple(m for m in METHODS if m != "rt-nocache")


class ProtocolError(ValueError):
    """A client message that cannot be served; ``code`` names the kind for the ``error`` event."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Limits:
    """What one connection may send."""

    max_message_bytes: int = 64 * 1024
    max_source_chars: int = 4000


@dataclass(frozen=True)
class Settings:
    """A session's translation settings (``session.update`` changes them)."""

    source: str = "en"
    target: str = "de"
    method: str = "ssbd"
    beta: float = DEFAULT_BETA
    mask_k: int = 0

    def to_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "method": self.method, "beta": self.beta,
                "mask_k": self.mask_k}


@dataclass(frozen=True)
class SessionUpdate:
    changes: dict

    def apply(self, settings: Settings) -> Settings:
        return replace(settings, **self.changes)


@dataclass(frozen=True)
class SourceMessage:
    text: str
    final: bool = False
    segment: str | None = None
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True)
class CloseMessage:
    pass


Message = SessionUpdate | SourceMessage | CloseMessage


def parse(raw: str | bytes, limits: Limits = Limits()) -> Message:
    """One client frame to a message; raises ``ProtocolError``."""
    if len(raw) > limits.max_message_bytes:
        raise ProtocolError("message_too_large", f"message of {len(raw)} bytes; the limit is {limits.max_message_bytes}")
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError("invalid_json", f"not JSON: {error}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("invalid_message", "a message must be a JSON object")
    kind = obj.get("type")
    if kind == "session.update":
        return _session_update(obj)
    if kind == "source.update":
        return _source_update(obj, limits)
    if kind == "session.close":
        return CloseMessage()
    raise ProtocolError("invalid_message",
                        f"unknown message type {kind!r}; known: session.update, source.update, session.close")


def _field(obj: dict, key: str, kinds: tuple, what: str):
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ProtocolError("invalid_message", f"{key!r} must be {what}, got {json.dumps(value)}")
    return value


def _session_update(obj: dict) -> SessionUpdate:
    changes = {}
    for key in ("source", "target"):
        code = _field(obj, key, (str,), "a language code")
        if code is not None:
            try:
                language_name(code)
            except ValueError as error:
                raise ProtocolError("unknown_language", str(error)) from None
            changes[key] = code.strip().lower()
    method = _field(obj, "method", (str,), "a method name")
    if method is not None:
        if method not in STREAM_METHODS:
            raise ProtocolError("unknown_method", f"unknown method {method!r}; known: {', '.join(STREAM_METHODS)}")
        changes["method"] = method
    beta = _field(obj, "beta", (int, float), "a number in [0, 1]")
    if beta is not None:
        if not 0.0 <= beta <= 1.0:
            raise ProtocolError("invalid_message", f"'beta' must be in [0, 1], got {beta}")
        changes["beta"] = float(beta)
    mask_k = _field(obj, "mask_k", (int,), "a non-negative integer")
    if mask_k is not None:
        if mask_k < 0:
            raise ProtocolError("invalid_message", f"'mask_k' must be >= 0, got {mask_k}")
        changes["mask_k"] = mask_k
    return SessionUpdate(changes)


def _source_update(obj: dict, limits: Limits) -> SourceMessage:
    text = obj.get("text")
    if not isinstance(text, str):
        raise ProtocolError("invalid_message", "'text' must be a string")
    if len(text) > limits.max_source_chars:
        raise ProtocolError("source_too_long", f"source of {len(text)} characters; the limit is {limits.max_source_chars}")
    final = _field(obj, "final", (bool,), "true or false")
    segment = _field(obj, "segment", (str, int), "a string")
    start = _field(obj, "start", (int, float), "a number of seconds")
    end = _field(obj, "end", (int, float), "a number of seconds")
    return SourceMessage(text, bool(final), None if segment is None else str(segment),
                         None if start is None else float(start), None if end is None else float(end))


def error_event(code: str, message: str) -> dict:
    return {"type": "error", "code": code, "message": message}


def settings_event(kind: str, session: str, settings: Settings, model: str) -> dict:
    return {"type": kind, "session": session, "protocol": PROTOCOL_VERSION, "model": model, **settings.to_dict()}


def update_event(segment: str | None, event) -> dict:
    """``translation.update`` from a ``session.CaptionUpdate``."""
    stats = event.update.stats
    return {"type": "translation.update", "segment": segment, "caption": event.caption, "seq": event.seq,
            "stable": event.update.stable, "unstable": event.update.unstable,
            "end": None if event.speech_end is None else round(event.speech_end, 3),
            "stats": {"forward_passes": stats.forward_passes, "accepted": stats.accepted,
                      "draft_tokens": stats.draft_tokens, "output_tokens": stats.output_tokens,
                      "wall_s": round(stats.wall_s, 4), "coalesced": event.coalesced}}


def commit_event(segment: str | None, event) -> dict:
    """``translation.commit`` from a ``session.CaptionCommit``."""
    return {**_commit(segment, event.caption, event.text, event.start, event.end, event.reason), "seq": event.seq}

def stored_commit_event(caption) -> dict:
    """``translation.commit`` from a ``store.Caption`` (a viewer's replay; no ``seq``)."""
    return _commit(caption.segment, caption.caption, caption.text, caption.start, caption.end, caption.reason)


def transcription_event(partial) -> dict:
    """``transcription.update`` from an ASR partial (``live.translator.SourceUpdate``)."""
    return {"type": "transcription.update", "segment": partial.segment_id, "text": partial.text,
            "final": partial.final, "start": None if partial.start is None else round(partial.start, 3),
            "end": None if partial.end is None else round(partial.end, 3)}


def _commit(segment, caption: int, text: str, start: float, end: float, reason: str) -> dict:
    return {"type": "translation.commit", "segment": segment, "caption": caption, "text": text,
            "start": round(start, 3), "end": round(end, 3), "reason": reason}
