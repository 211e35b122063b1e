"""The live caption WebSocket protocol, version 1: the client's messages and a session's settings.

Contract: pure functions, no I/O. ``parse(raw, limits)`` turns one client frame into a
``SessionUpdate``, ``SourceMessage``, ``CloseMessage`` or ``ResumeMessage``, or raises
``ProtocolError`` (with the ``code`` the ``error`` event carries); ``Settings`` is what a session
runs with (and what the transcript store keeps of it). The server's events are built by
``service.events``.

Client messages (every field but ``type`` optional)::

    {"type": "session.update", "source": "en", "target": "de", "method": "ssbd", "beta": 0.2, "mask_k": 0}
    {"type": "session.update", "targets": ["de", "fr", "ja"]}  (several caption languages)
    {"type": "session.update", "glossary": {"de": {"weather station": "Wetterstation"}}}  (or TSV text)
    {"type": "session.update", "examples": {"de": {"Thank you all.": "Vielen Dank an alle."}}}  (TSV; "builtin"; "none")
    {"type": "session.update", "push": [{"platform": "zoom", "url": "https://wmcapi.zoom.us/..."},
                                        {"platform": "youtube", "lang": "de", "url": "http://..."}]}
    {"type": "source.update", "segment": "s1", "text": "so today", "final": false, "start": 0.0, "end": 1.2}
    {"type": "session.close"}
    {"type": "session.resume", "session": "sess_...", "resume_token": "..."}

``session.resume`` (the first message, instead of ``session.update``) takes up a session that no
live replica serves (its replica died or drained, or its client's connection dropped), given the
``resume_token`` that ``session.created`` gave its client (a secret: never in a viewer link, an
event for viewers or a transcript); an ended session is never reopened. The server answers
``session.resumed`` with the session's settings and ``captions`` (how many are committed; the next
caption has that number); the client then re-sends its open segment.

or, instead of ``source.update`` messages, speech: binary frames of 16 kHz mono signed 16-bit
little-endian PCM (``service.speech`` recognises them in the session's source language; a session
that speech starts runs ``methods.SPEECH_METHOD`` unless its client named a method or β).

Every field is checked (types, ranges, lengths, finite numbers, no control characters): a message
that fails gets an ``error`` event and changes nothing (the checks are ``service.fields``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ..live.glossary import (
    BUILTIN,
    EXAMPLES,
    GLOSSARY,
    NONE,
    Glossary,
    GlossaryError,
    Kind,
    examples_for,
    parse_json,
    parse_tsv,
    uncovered,
)
from ..live.languages import language_name
from ..live.methods import DEFAULT_METHOD, METHODS
from ..push.spec import PushError, PushSpec, parse_targets
from .fields import ProtocolError, clip, field, loads, number, string

PROTOCOL_VERSION = 1
STREAM_METHODS = tuple(m for m in METHODS if m != "rt-nocache")
MAX_SESSION_ID_CHARS = 64


@dataclass(frozen=True)
class Limits:
    """What one connection may send. Every field of a message is checked against these (and
    against its type); a message that breaks one gets an ``error`` event and changes nothing."""

    max_message_bytes: int = 64 * 1024
    max_source_chars: int = 4000
    max_segment_chars: int = 128  # a segment id
    max_time_s: float = 1e7  # audio times (``start``/``end``): finite, in [0, this]
    max_mask_k: int = 64
    max_targets: int = 4  # target languages of one session
    max_push: int = 8  # push targets of one session


@dataclass(frozen=True)
class Settings:
    """A session's translation settings (``session.update`` changes them). ``targets``: its
    caption languages, each a row of the batched engine (``target`` is the first)."""

    source: str = "en"
    targets: tuple[str, ...] = ("de",)
    method: str = DEFAULT_METHOD
    beta: float = METHODS[DEFAULT_METHOD].beta
    mask_k: int = 0
    glossary: dict | None = None  # {target: {source term: rendering}} (``live.glossary``)
    examples: dict | None = None  # {target: {source sentence: translation}} (``live.glossary.EXAMPLES``)
    examples_source: str | None = None  # the language the examples' sentences are in, where named
    # (platform, language or None, URL) as the client named them: secrets, never stored or echoed
    push: tuple[tuple[str, str | None, str], ...] = ()

    @property
    def target(self) -> str:
        return self.targets[0]

    def uncovered(self) -> dict[str, list[str]]:
        """The caption languages that the given glossary or example translations have nothing for,
        by which (``{"glossary": ["pt"]}``): those captions go without them. Empty where each
        covers every language or none was given."""
        missing = {kind: uncovered(self.targets, getattr(self, kind)) for kind in ("glossary", "examples")}
        return {kind: langs for kind, langs in missing.items() if langs}

    def push_specs(self) -> list[PushSpec]:
        """The push targets for these languages; raises ``ProtocolError`` (``invalid_push``)."""
        try:
            return parse_targets(self.push, self.targets)
        except PushError as error:
            raise ProtocolError("invalid_push", str(error)) from None

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "target": self.target,
            "targets": list(self.targets),
            "method": self.method,
            "beta": self.beta,
            "mask_k": self.mask_k,
            "glossary": self.glossary,
            "examples": self.examples,
            "examples_source": self.examples_source,
        }

    @classmethod
    def from_dict(cls, stored: dict) -> Settings:
        """The settings ``to_dict`` wrote (a stored session's), keys this version knows only."""
        known = {
            key: stored[key]
            for key in ("source", "method", "beta", "mask_k", "glossary", "examples", "examples_source")
            if key in stored
        }
        targets = stored.get("targets") or ([stored["target"]] if "target" in stored else None)
        return cls(**known, **({"targets": tuple(targets)} if targets else {}))


@dataclass(frozen=True)
class SessionUpdate:
    changes: dict

    def apply(self, settings: Settings) -> Settings:
        """The settings changed; raises ``ProtocolError`` when the source is among the targets, or
        the example translations are sentences of another language than the source."""
        changed = replace(settings, **self.changes)
        if changed.source in changed.targets:
            raise ProtocolError(
                "source_in_targets", f"the source language {changed.source!r} is also a target"
            )
        if changed.examples_source not in (None, changed.source):
            raise ProtocolError(
                "invalid_examples",
                f"the example translations are {changed.examples_source} sentences but the source "
                f"language is {changed.source}: give examples in {changed.source}",
            )
        changed.push_specs()  # the push targets fit the languages
        return changed


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


@dataclass(frozen=True)
class ResumeMessage:
    session: str
    resume_token: str


Message = SessionUpdate | SourceMessage | CloseMessage | ResumeMessage


def parse(raw: str | bytes, limits: Limits = Limits()) -> Message:
    """One client frame to a message; raises ``ProtocolError``.

    Strict JSON: ``NaN`` and ``Infinity`` (which Python's ``json`` reads and writes by default)
    and numbers that overflow to infinity are refused, as are nesting too deep to parse, strings
    with control characters or lone surrogates, and fields of the wrong type or out of range."""
    if len(raw) > limits.max_message_bytes:
        raise ProtocolError(
            "message_too_large", f"message of {len(raw)} bytes; the limit is {limits.max_message_bytes}"
        )
    obj = loads(raw)
    if not isinstance(obj, dict):
        raise ProtocolError("invalid_message", "a message must be a JSON object")
    kind = obj.get("type")
    if kind == "session.update":
        return _session_update(obj, limits)
    if kind == "source.update":
        return _source_update(obj, limits)
    if kind == "session.close":
        return CloseMessage()
    if kind == "session.resume":
        for key, what in (
            ("session", "the id of the session to resume"),
            ("resume_token", "the resume_token that session.created gave"),
        ):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise ProtocolError("invalid_message", f"{key!r} must be {what}")
        return ResumeMessage(
            string(obj, "session", "a session id", MAX_SESSION_ID_CHARS),
            string(obj, "resume_token", "a resume token", MAX_SESSION_ID_CHARS),
        )
    raise ProtocolError(
        "invalid_message",
        f"unknown message type {clip(json.dumps(kind))}; "
        "known: session.update, source.update, session.close, session.resume",
    )


def _language(obj: dict, key: str) -> str | None:
    code = string(obj, key, "a language code", 16)
    if code is None:
        return None
    try:
        language_name(code)
    except ValueError as error:
        raise ProtocolError("unknown_language", str(error)) from None
    return code.strip().lower()


def _targets(obj: dict, limits: Limits) -> tuple[str, ...] | None:
    """``targets`` (a list of language codes) or ``target`` (one), checked."""
    if "targets" in obj and "target" in obj:
        raise ProtocolError("invalid_message", "give 'target' or 'targets', not both")
    if "target" in obj:
        target = _language(obj, "target")
        return None if target is None else (target,)
    codes = obj.get("targets")
    if codes is None:
        return None
    if not isinstance(codes, list) or not codes:
        raise ProtocolError("invalid_message", "'targets' must be a non-empty list of language codes")
    if len(codes) > limits.max_targets:
        raise ProtocolError(
            "too_many_targets", f"{len(codes)} target languages; the limit is {limits.max_targets}"
        )
    targets = tuple(_language({"targets": code}, "targets") for code in codes)
    if len(set(targets)) != len(targets):
        raise ProtocolError("invalid_message", f"a target language is repeated: {', '.join(targets)}")
    return targets


def _glossary(value, kind: Kind = GLOSSARY) -> Glossary | None:
    """``glossary`` (or ``examples``): the JSON form (an object), or the text of a TSV or JSON file
    ("" clears it: None); for examples, ``"builtin"``: mlx-ssbd's own, ``"none"``: none, not even
    the model's own (``glossary.examples_for``)."""
    try:
        if kind is EXAMPLES and value in (BUILTIN, NONE):
            glossary = examples_for(value)
        elif isinstance(value, str):
            if not value.strip():
                return None
            text = value.strip()
            glossary = (
                parse_json(loads(text), kind.name, kind)
                if text.startswith("{")
                else parse_tsv(value, kind.name, kind)
            )
        else:
            glossary = parse_json(value, kind.name, kind)
    except (GlossaryError, ProtocolError) as error:
        raise ProtocolError(f"invalid_{kind.name}", str(error)) from None
    return glossary


def method_changes(method: str, beta: float | None = None) -> dict:
    """The settings a session runs ``method`` with: that ``beta``, or without one the method's own."""
    return {"method": method, "beta": METHODS[method].beta if beta is None else float(beta)}


def _session_update(obj: dict, limits: Limits) -> SessionUpdate:
    changes = {}
    if (source := _language(obj, "source")) is not None:
        changes["source"] = source
    if (targets := _targets(obj, limits)) is not None:
        changes["targets"] = targets
    method = string(obj, "method", "a method name", 32)
    if method is not None:
        if method not in STREAM_METHODS:
            raise ProtocolError(
                "unknown_method", f"unknown method {method!r}; known: {', '.join(STREAM_METHODS)}"
            )
    beta = number(obj, "beta", 0.0, 1.0, "a number")
    if method is not None:
        changes.update(method_changes(method, beta))
    elif beta is not None:
        changes["beta"] = float(beta)
    mask_k = number(obj, "mask_k", 0, limits.max_mask_k, "an integer", (int,))
    if mask_k is not None:
        changes["mask_k"] = mask_k
    if obj.get("glossary") is not None:
        glossary = _glossary(obj["glossary"])
        changes["glossary"] = None if glossary is None else glossary.to_json()
    if obj.get("examples") is not None:
        examples = _glossary(obj["examples"], EXAMPLES)
        changes["examples"] = None if examples is None else examples.to_json()
        changes["examples_source"] = None if examples is None else examples.source
    if (push := obj.get("push")) is not None:
        changes["push"] = _push(push, limits)
    return SessionUpdate(changes)


def _push(value, limits: Limits) -> tuple[tuple[str, str | None, str], ...]:
    """``push``: a list of ``{"platform", "lang" (optional), "url"}`` ([] removes them all)."""
    if not isinstance(value, list) or len(value) > limits.max_push:
        raise ProtocolError("invalid_push", f"'push' must be a list of at most {limits.max_push} targets")
    targets = []
    for each in value:
        if not isinstance(each, dict):
            raise ProtocolError("invalid_push", 'each push target is {"platform": ..., "url": ...}')
        platform = string(each, "platform", "a platform name", 16)
        url = string(each, "url", "the URL the platform gives", 2048)
        if not platform or not url:
            raise ProtocolError("invalid_push", "a push target needs 'platform' and 'url'")
        lang = _language(each, "lang")
        targets.append((platform.lower(), lang, url))
    return tuple(targets)


def _source_update(obj: dict, limits: Limits) -> SourceMessage:
    if not isinstance(obj.get("text"), str):
        raise ProtocolError("invalid_message", "'text' must be a string")
    text = string(obj, "text", "a string", limits.max_source_chars, lines=True)
    final = field(obj, "final", (bool,), "true or false")
    segment = obj.get("segment")
    if isinstance(segment, int) and not isinstance(segment, bool):
        segment = str(number(obj, "segment", 0, 2**53, "an id"))
    else:
        segment = string(obj, "segment", "a string", limits.max_segment_chars)
    start = number(obj, "start", 0.0, limits.max_time_s, "a number of seconds")
    end = number(obj, "end", 0.0, limits.max_time_s, "a number of seconds")
    if start is not None and end is not None and end < start:
        raise ProtocolError("invalid_message", f"'end' ({end:g}) is before 'start' ({start:g})")
    return SourceMessage(
        text,
        bool(final),
        segment,
        None if start is None else float(start),
        None if end is None else float(end),
    )
