"""ISO 639-1 language codes to the English names used in translation prompts."""

from __future__ import annotations

LANGUAGES = {
    "ar": "Arabic",
    "cs": "Czech",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "fr": "French",
    "hi": "Hindi",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ru": "Russian",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "vi": "Vietnamese",
    "zh": "Chinese",
}


def language_name(code: str) -> str:
    """The English name of an ISO 639-1 code.

    Raises:
        ValueError: the code is not known; the message lists the known codes.
    """
    if not isinstance(code, str):
        raise ValueError(f"language code must be a string, got {type(code).__name__}")
    name = LANGUAGES.get(code.strip().lower())
    if name is None:
        raise ValueError(f"unknown language code {code!r}; known: {', '.join(sorted(LANGUAGES))}")
    return name
