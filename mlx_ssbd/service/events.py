"""The server's events: JSON objects for the live caption WebSocket and Server-Sent Events.

Contract: pure functions, no I/O; each builds one event from what the session layer reports.

Events: ``session.created`` (with ``resume_token``) / ``session.updated`` / ``session.resumed`` (the
settings in force, and ``uncovered``: ``{"glossary": [...], "examples": [...]}``, the caption
languages a given glossary or set of examples has nothing for, where any); ``translation.update``
(``target``, ``segment``, ``caption``, ``seq``, ``stable``, ``unstable``, ``end``: the audio time of
the newest word translated, when the client sent ``end``, and ``stats``); ``translation.commit``
(``target``, ``segment``, ``caption``, ``seq``, ``text``, ``start``, ``end``, ``reason``,
``stored``); ``transcript.stored`` (``captions``: commits sent with ``stored: false`` that the store
has taken since); ``transcription.update`` (speech sessions: ``segment``, ``text``, ``final``,
``start``, ``end``, what the recognizer heard); ``push.status`` (to the session's client only:
``target``, ``kind``: ``failing``, ``recovered``, ``undelivered`` or ``stopped``, ``message``,
``lines``); ``error`` (``code``, ``message``) and ``session.closed`` (``reason``: ``closed``,
``idle``, ``shutdown`` or ``error``). ``sse`` frames one event for an event stream;
``openai_error`` is the body of an HTTP error in OpenAI's shape.
"""

from __future__ import annotations

import json

from .protocol import PROTOCOL_VERSION, Settings


def error_event(code: str, message: str) -> dict:
    return {"type": "error", "code": code, "message": message}


def closed_event(session: str, reason: str | None = None) -> dict:
    """``session.closed``; ``reason`` (closed, idle, shutdown, error) for a live session's end."""
    return {"type": "session.closed", "session": session, **({"reason": reason} if reason else {})}


def push_event(report) -> dict:
    """``push.status`` from a ``push.delivery.PushReport`` (it names no secret)."""
    return {
        "type": "push.status",
        "target": report.target,
        "kind": report.kind,
        "message": report.message,
        "lines": report.lines,
    }


def openai_error(code: str, message: str) -> dict:
    """An HTTP error body in OpenAI's shape (chat completions, refused requests)."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


def sse(event: dict, event_id: int | None = None) -> str:
    """One Server-Sent Event carrying ``event`` as JSON; ``event_id``: its ``id:`` field (what a
    reconnecting ``EventSource`` sends back as ``Last-Event-ID``)."""
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}data: {json.dumps(event, ensure_ascii=False)}\n\n"


def settings_event(kind: str, session: str, settings: Settings, model: str, **extra) -> dict:
    """``session.created``, ``session.updated`` or ``session.resumed``: the settings in force, and
    ``uncovered`` where the given glossary or example translations lack a caption language."""
    missing = settings.uncovered()
    return {
        "type": kind,
        "session": session,
        "protocol": PROTOCOL_VERSION,
        "model": model,
        **settings.to_dict(),
        "push": [spec.name for spec in settings.push_specs()],  # platform, languages, host: no secrets
        **({"uncovered": missing} if missing else {}),
        **extra,
    }


def update_event(segment: str | None, event) -> dict:
    """``translation.update`` from a ``session.CaptionUpdate``."""
    stats = event.update.stats
    return {
        "type": "translation.update",
        "target": event.target,
        "segment": segment,
        "caption": event.caption,
        "seq": event.seq,
        "stable": event.update.stable,
        "unstable": event.update.unstable,
        "end": None if event.speech_end is None else round(event.speech_end, 3),
        "stats": {
            "forward_passes": stats.forward_passes,
            "accepted": stats.accepted,
            "draft_tokens": stats.draft_tokens,
            "output_tokens": stats.output_tokens,
            "wall_s": round(stats.wall_s, 4),
            "coalesced": event.coalesced,
        },
    }


def commit_event(segment: str | None, event, *, stored: bool = True) -> dict:
    """``translation.commit`` from a ``session.CaptionCommit``; ``stored``: it is in the transcript
    store (False only while the store fails: it is kept in memory until written)."""
    return {
        **_commit(event.target, segment, event.caption, event.text, event.start, event.end, event.reason),
        "seq": event.seq,
        "stored": stored,
    }


def stored_commit_event(caption) -> dict:
    """``translation.commit`` from a ``store.Caption`` (a viewer's replay; no ``seq``)."""
    return {
        **_commit(
            caption.target,
            caption.segment,
            caption.caption,
            caption.text,
            caption.start,
            caption.end,
            caption.reason,
        ),
        "stored": True,
    }


def transcription_event(partial) -> dict:
    """``transcription.update`` from an ASR partial (``live.translator.SourcePartial``)."""
    return {
        "type": "transcription.update",
        "segment": partial.segment_id,
        "text": partial.text,
        "final": partial.final,
        "start": None if partial.start is None else round(partial.start, 3),
        "end": None if partial.end is None else round(partial.end, 3),
    }


def _commit(target, segment, caption: int, text: str, start: float, end: float, reason: str) -> dict:
    return {
        "type": "translation.commit",
        "target": target,
        "segment": segment,
        "caption": caption,
        "text": text,
        "start": round(start, 3),
        "end": round(end, 3),
        "reason": reason,
    }
