"""The phone viewer page of a session, and the QR code that opens it.

Contract: ``Watch(transcripts, policy)`` serves two routes (both 404 for an unknown session,
503 when the store cannot be read):

* ``GET /watch/{id}``: the page for phones (``web/watch.*``): large captions of one language fed
  by the session's viewer events, a picker among the talk's languages (``?lang=`` preselects
  one), text size, light and dark, ``aria-live`` for screen readers, and an opt-in "Listen" that
  speaks each new committed caption with the browser's speech synthesis.
* ``GET /v1/sessions/{id}/qr.png`` and ``qr.svg``: a QR code (``segno``) of the page's absolute
  link, as the request reached this server (its ``Host``, and its scheme: a proxy's
  ``X-Forwarded-Proto`` counts from the addresses in uvicorn's ``FORWARDED_ALLOW_IPS``, by default
  this machine); ``?lang=`` is carried into the link.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from .transcripts import Transcripts

PAGE = Path(__file__).parent / "web" / "watch.html"
QR_KINDS = {"png": "image/png", "svg": "image/svg+xml"}
QR_SCALE = 8  # pixels per module: a link's code is about 300 px wide, sharp on any screen


class Watch:
    def __init__(self, transcripts: Transcripts, policy: str):
        self.transcripts, self.policy = transcripts, policy
        self.template = PAGE.read_text(encoding="utf-8")

    def page(self, request: Request) -> Response:
        """``GET /watch/{id}``."""
        if isinstance(found := self.transcripts.page_language(request), Response):
            return found
        sid, targets, lang = found
        config = json.dumps({"session": sid, "languages": list(targets), "lang": lang}).replace("</", "<\\/")
        body = self.template.replace("{{CONFIG}}", config).replace('lang="en"', f'lang="{html.escape(lang)}"')
        return HTMLResponse(body, headers={"Content-Security-Policy": self.policy})

    def qr(self, request: Request) -> Response:
        """``GET /v1/sessions/{id}/qr.png`` (``.svg``)."""
        kind = request.path_params["kind"]
        if kind not in QR_KINDS:
            return PlainTextResponse("a QR code is qr.png or qr.svg", status_code=404)
        if isinstance(found := self.transcripts.page_language(request), Response):
            return found
        sid, _, lang = found
        link = f"{str(request.base_url).rstrip('/')}/watch/{quote(sid, safe='')}"
        if "lang" in request.query_params:
            link += f"?lang={quote(lang)}"
        try:
            import segno
        except ImportError:
            return PlainTextResponse("QR codes need segno: pip install 'mlx-ssbd[serve]'", status_code=501)
        out = io.BytesIO()
        segno.make(link, error="m").save(out, kind=kind, scale=QR_SCALE, border=4, light="#fff")
        return Response(out.getvalue(), media_type=QR_KINDS[kind], headers={"Cache-Control": "no-store"})
