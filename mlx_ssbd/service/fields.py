"""Strict JSON and the checked fields of a client's message.

Contract: pure functions, no I/O. ``loads`` reads strict JSON; ``field``, ``string`` and ``number``
read one field of a parsed object, checked for type, range, length and characters. Each raises
``ProtocolError``, whose ``code`` names the kind of fault for the ``error`` event (or the HTTP
error) that answers it.
"""

from __future__ import annotations

import json
import math


class ProtocolError(ValueError):
    """A client message that cannot be served; ``code`` names the kind for the ``error`` event."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def loads(raw: str | bytes):
    """Strict JSON (no ``NaN``/``Infinity``, no number that overflows to infinity, nesting that
    Python can parse); raises ``ProtocolError`` ("invalid_json")."""
    try:
        return json.loads(raw, parse_constant=_not_a_number, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ProtocolError("invalid_json", f"not JSON: {clip(str(error))}") from None


def _not_a_number(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {clip(text)} is too large")
    return value


def clip(text: str, width: int = 40) -> str:
    """``text`` cut to ``width`` characters, for echoing a client's value in a message."""
    return text if len(text) <= width else text[: width - 3] + "..."


def field(obj: dict, key: str, kinds: tuple, what: str):
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ProtocolError("invalid_message", f"{key!r} must be {what}, got {clip(json.dumps(value))}")
    return value


def string(obj: dict, key: str, what: str, max_chars: int, *, lines: bool = False) -> str | None:
    """A string field: at most ``max_chars``, valid Unicode, no control characters (but tab and,
    with ``lines``, newlines)."""
    value = field(obj, key, (str,), what)
    if value is None:
        return None
    if len(value) > max_chars:
        code = "source_too_long" if key == "text" else "invalid_message"
        raise ProtocolError(code, f"{key!r} has {len(value)} characters; the limit is {max_chars}")
    allowed = "\t\n\r" if lines else "\t"
    if any(ch < " " and ch not in allowed or "\x7f" <= ch <= "\x9f" for ch in value):
        raise ProtocolError("invalid_message", f"{key!r} holds a control character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(
            "invalid_message", f"{key!r} holds a lone surrogate (not valid Unicode)"
        ) from None
    return value


def number(obj: dict, key: str, low: float, high: float, what: str, kinds: tuple = (int, float)):
    value = field(obj, key, kinds, what)
    if value is not None and not low <= value <= high:  # NaN is never in range
        raise ProtocolError(
            "invalid_message", f"{key!r} must be {what} in [{low:g}, {high:g}], got {clip(str(value))}"
        )
    return value
