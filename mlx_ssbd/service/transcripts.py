"""Reading sessions back: the session list, transcripts (JSON, SRT, VTT), a session's languages.

Contract: ``Transcripts(scheduler)`` answers from the live sessions and the transcript store (so
also for ended sessions, across restarts, and for sessions another replica serves); its
``transcript`` and ``sessions`` are plain (not async) Starlette handlers, which Starlette runs in
its thread pool, so store reads never block the event loop that carries every WebSocket.
``targets_of(sid)`` is a session's target languages (None: no such session); ``language`` picks
the one a request asks for (``?lang=``; default: the first) or answers 404; ``page_language`` does
both for a page of one session. A store that cannot be
read answers 503 (``store_unavailable``); nothing here touches MLX.
"""

from __future__ import annotations

import logging
import re

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ..live import subtitles
from . import events
from .protocol import Settings
from .scheduler import Scheduler
from .store import SessionInfo

log = logging.getLogger(__name__)


class Transcripts:
    """See the module docstring."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler

    def stored(self, sid: str) -> SessionInfo | None:
        store = self.scheduler.store
        return store.session(sid) if store is not None else None

    def targets_of(self, sid: str, info: SessionInfo | None = None) -> tuple[str, ...] | None:
        """The session's target languages (None: no such session)."""
        if (session := self.scheduler.find(sid)) is not None:
            return session.settings.targets
        info = info or self.stored(sid)
        return None if info is None else Settings.from_dict(info.settings).targets

    @staticmethod
    def language(request: Request, targets: tuple[str, ...], lang: str | None = None) -> str | Response:
        """The language asked for (``?lang=``, or ``lang``; default: the first target), or a 404."""
        lang = (lang or request.query_params.get("lang") or targets[0]).lower()
        if lang not in targets:
            return JSONResponse(
                events.error_event(
                    "not_found",
                    f"this session has no {lang[:16]!r} captions; its languages: {', '.join(targets)}",
                ),
                status_code=404,
            )
        return lang

    def page_language(self, request: Request) -> tuple[str, tuple[str, ...], str] | Response:
        """For a page of the session ``{sid}``: its id, its languages and the one asked for, or the
        answer that refuses (404: no such session or language; 503: the store cannot be read)."""
        sid = request.path_params["sid"]
        try:
            if (targets := self.targets_of(sid)) is None:
                return PlainTextResponse(f"no session {sid[:80]!r}", status_code=404)
        except Exception as error:
            return store_unavailable(error)
        lang = self.language(request, targets)
        return lang if isinstance(lang, Response) else (sid, targets, lang)

    def transcript(self, request: Request) -> Response:
        """``GET /v1/sessions/{sid}/transcript.{kind}``: JSON (every language), SRT or VTT (one;
        ``?chars=N``: a subtitle line's characters at most, 0 one line a caption)."""
        sid, name = request.path_params["sid"], request.path_params["kind"]
        lang, _, kind = name.rpartition(".")  # transcript.srt, or transcript.de.srt for one language
        chars = request.query_params.get("chars", "")
        if kind != "json" and chars and not (re.fullmatch(r"[0-9]{1,4}", chars) and int(chars) <= 1000):
            return JSONResponse(
                events.error_event("invalid_request", "chars must be a whole number from 0 to 1000"),
                status_code=400,
            )
        store = self.scheduler.store
        try:
            info = self.stored(sid)
            live = self.scheduler.find(sid) is not None or info is not None and info.state == "live"
            targets = self.targets_of(sid, info)
            if kind not in ("json", "srt", "vtt") or targets is None:
                return JSONResponse(
                    events.error_event(
                        "not_found", f"no session {sid[:80]!r} with a {name[:16]!r} transcript"
                    ),
                    status_code=404,
                )
            asked = lang or kind != "json" or "lang" in request.query_params
            chosen = self.language(request, targets, lang) if asked else None
            if isinstance(chosen, Response):
                return chosen
            captions = store.captions(sid, target=chosen) if store is not None else []
        except Exception as error:
            return store_unavailable(error)
        if kind == "json":
            about = {"model": info.model, "settings": info.settings, "state": info.state} if info else {}
            return JSONResponse(
                {
                    "session": sid,
                    "live": live,
                    "targets": list(targets),
                    **about,
                    "captions": [c.to_dict() for c in captions],
                }
            )
        line_chars = int(chars) if chars else None  # ``subtitles.layout``'s: None, the conventions
        body = subtitles.document(kind, [(c.start, c.end, c.text) for c in captions], line_chars)
        return PlainTextResponse(body, media_type="text/vtt" if kind == "vtt" else "application/x-subrip")

    def sessions(self, request: Request) -> Response:
        """``GET /v1/sessions``: the newest sessions of every replica sharing the store."""
        try:
            limit = min(1000, max(1, int(request.query_params.get("limit", "100"))))
        except ValueError:
            return JSONResponse(
                events.error_event("invalid_request", "limit must be an integer"), status_code=400
            )
        store = self.scheduler.store
        if store is None:
            return JSONResponse({"sessions": []})
        try:
            return JSONResponse({"sessions": [info.to_dict() for info in store.sessions(limit)]})
        except Exception as error:
            return store_unavailable(error)


def store_unavailable(error: Exception) -> JSONResponse:
    log.error("the transcript store cannot be read: %s", error)
    return JSONResponse(
        events.error_event("store_unavailable", "the transcript store cannot be read; try again later"),
        status_code=503,
    )
