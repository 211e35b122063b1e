"""Push targets as a user names them: ``PLATFORM[:LANG]=URL``, checked before any work.

Contract: pure functions, no I/O. ``parse_targets(values, languages)`` turns the user's push
specifications (the CLI's repeated ``--push``, or the service's ``push`` list) into
``PushSpec``-s, one per destination URL with the talk's languages it carries, or raises
``PushError`` with a message that names the bad value (never the URL's secret parts: ``redact``).

Platforms (docs/push.md cites each one's documentation):

* ``zoom``: the meeting's caption URL ("API token"), ``https://wmcapi.zoom.us/closedcaption?id=...``
  with its signature parameters (``id``, ``ns``, ``expire``, ``signature``); one URL carries
  every language it is given (each post says its ``lang``).
* ``youtube``: the stream's caption ingestion URL (``http://upload.youtube.com/closedcaption?cid=...``);
  one language per URL.
* ``teams``: the meeting's CART caption link (``https://api.captions.office.microsoft.com/cartcaption
  ?meetingid=...&token=...``); one language per link.
* ``obs``: obs-websocket 5 (``ws://[:PASSWORD@]HOST:PORT``); one language per OBS, in CEA-608 stream
  captions, which carry Latin script only (``push.text.cea608``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit


class PushError(ValueError):
    """A push specification that cannot be served; the message says why (no secrets)."""


@dataclass(frozen=True)
class Platform:
    name: str
    schemes: tuple[str, ...]
    required: tuple[str, ...]  # query parameters the URL must carry
    languages_per_url: int | None  # None: any number (each post names its language)
    line_chars: int  # a caption is cut into lines of at most this many characters
    example: str


PLATFORMS = {
    p.name: p
    for p in (
        Platform(
            "zoom",
            ("https", "http"),
            ("id", "ns", "expire", "signature"),
            None,
            80,
            "https://wmcapi.zoom.us/closedcaption?id=...&ns=...&expire=...&sparams=...&signature=...",
        ),
        Platform(
            "youtube", ("https", "http"), ("cid",), 1, 80, "http://upload.youtube.com/closedcaption?cid=..."
        ),
        Platform(
            "teams",
            ("https", "http"),
            ("meetingid", "token"),
            1,
            120,
            "https://api.captions.office.microsoft.com/cartcaption?meetingid=...&token=...",
        ),
        Platform("obs", ("ws", "wss"), (), 1, 32, "ws://:PASSWORD@127.0.0.1:4455"),
    )
}

# Scripts that CEA-608 stream captions cannot carry at all (``push.text.cea608`` maps the rest).
NOT_LATIN = frozenset({"ar", "hi", "ja", "ko", "ru", "uk", "zh"})

# Language and country, as Zoom's caption API documents them (its Japanese is "jp-JP").
ZOOM_LANGS = {
    "ar": "ar-SA", "cs": "cs-CZ", "de": "de-DE", "en": "en-US", "es": "es-ES", "fr": "fr-FR",
    "hi": "hi-IN", "it": "it-IT", "ja": "jp-JP", "ko": "ko-KR", "nl": "nl-NL", "pl": "pl-PL",
    "pt": "pt-PT", "ru": "ru-RU", "tr": "tr-TR", "uk": "uk-UA", "vi": "vi-VN", "zh": "zh-CN",
}  # fmt: skip
# BCP 47 tags (Teams): Zoom's but Japanese.
BCP47_LANGS = {**ZOOM_LANGS, "ja": "ja-JP"}


@dataclass(frozen=True)
class PushSpec:
    """One destination: a platform's URL and the talk's languages it gets (in the talk's order)."""

    platform: str
    url: str
    languages: tuple[str, ...]

    @property
    def name(self) -> str:
        """How reports name it: platform, languages and the URL's host (no secrets)."""
        return f"{self.platform}:{','.join(self.languages)} ({redact(self.url)})"


def redact(url: str) -> str:
    """``url`` without what may be secret: its user info, path parameters, query and fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<malformed URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else "<malformed URL>"


def split_spec(value: str) -> tuple[str, str | None, str]:
    """``PLATFORM[:LANG]=URL`` into its parts; raises ``PushError``."""
    head, eq, url = value.partition("=")
    if not eq or not url.strip():
        raise PushError(f"push target {head.strip()!r}: give PLATFORM[:LANG]=URL, e.g. zoom=https://...")
    platform, _, lang = head.strip().lower().partition(":")
    return platform, (lang.strip() or None), url.strip()


def check_url(platform: Platform, url: str) -> None:
    """The URL is one the platform takes; raises ``PushError`` naming what is missing."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise PushError(f"{platform.name}: malformed URL (example: {platform.example})") from None
    if parts.scheme not in platform.schemes or not parts.hostname:
        raise PushError(
            f"{platform.name}: {redact(url)} is not a {' or '.join(platform.schemes)} URL "
            f"(example: {platform.example})"
        )
    query = parse_qs(parts.query)
    missing = [key for key in platform.required if not query.get(key, [""])[0]]
    if missing:
        raise PushError(
            f"{platform.name}: the URL has no {', '.join(missing)} parameter{'s' * (len(missing) > 1)} "
            f"(copy the whole URL the platform gives; example: {platform.example})"
        )


def parse_targets(
    values: Iterable[str | tuple[str, str | None, str]], languages: tuple[str, ...]
) -> list[PushSpec]:
    """The push targets of a talk captioned in ``languages``; raises ``PushError``.

    Each value is ``PLATFORM[:LANG]=URL`` or its parts ``(platform, lang or None, url)``. Without
    a language a target gets every language of the talk (refused where the platform takes one a
    URL and the talk has several); the same URL named for several languages is one target.
    """
    merged: dict[tuple[str, str], list[str]] = {}
    for value in values:
        name, lang, url = split_spec(value) if isinstance(value, str) else value
        platform = PLATFORMS.get(name)
        if platform is None:
            raise PushError(f"unknown push platform {name!r}; known: {', '.join(PLATFORMS)}")
        check_url(platform, url)
        if lang is not None:
            lang = lang.lower()
            if lang not in languages:
                raise PushError(
                    f"{name}:{lang}: the talk is not captioned in {lang!r} (its languages: {', '.join(languages)})"
                )
        langs = [lang] if lang else list(languages)
        if platform.languages_per_url == 1 and len(langs) > 1:
            raise PushError(
                f"{name} takes one language per URL and the talk has {len(langs)}: "
                f"name it, e.g. --push {name}:{langs[0]}=URL"
            )
        if name == "obs" and (cjk := sorted(set(langs) & NOT_LATIN)):
            raise PushError(
                f"obs: CEA-608 stream captions carry Latin script only, not {', '.join(cjk)}; show those "
                "captions in OBS with a Browser Source of the session's viewer page (docs/push.md)"
            )
        for each in langs:
            if each not in merged.setdefault((name, url), []):
                merged[(name, url)].append(each)
    specs = []
    for (name, url), langs in merged.items():
        if PLATFORMS[name].languages_per_url == 1 and len(langs) > 1:
            raise PushError(
                f"{name} takes one language per URL; {redact(url)} is named for {', '.join(langs)}"
            )
        specs.append(PushSpec(name, url, tuple(lang for lang in languages if lang in langs)))
    return specs
