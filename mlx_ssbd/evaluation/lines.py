"""A text stream's lines, read lazily in bounded pieces (the input side of ``streams``).

Contract: ``read_lines(path)`` yields ``(line number, text)`` for each line of a UTF-8 file, or
stdin for ``-``, as soon as it has arrived; a line longer than ``LINE_PIECE_BYTES`` comes as several
pieces with the same number (each but the last a ``LinePiece``), so any input streams through in
bounded memory. ``check_stream_path`` refuses a missing path or a folder before anything loads. A
stream that cannot be read raises ``StreamError`` naming the file and line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

LINE_PIECE_BYTES = 1 << 20  # lines are read in pieces of at most this many bytes


class StreamError(ValueError):
    """A stream cannot be read: the message names the file and line."""


def check_stream_path(path: str) -> None:
    """Raise ``StreamError`` unless ``path`` is ``-`` (stdin) or a file that exists: callers check
    before they load a model, so a wrong path is reported at once."""
    if path == "-":
        return
    p = Path(path)
    if not p.exists():
        raise StreamError(f"{path}: no such file")
    if p.is_dir():
        raise StreamError(f"{path}: is a directory, expected a text or JSONL file")


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file, or stdin for ``-``, read lazily; a line
    longer than ``LINE_PIECE_BYTES`` comes as several pieces with the same number, cut at a space
    (or, in a run of that many bytes without one, between two characters), each but the last a
    ``LinePiece``. Nothing is read ahead: a line is yielded as soon as it has arrived."""
    check_stream_path(path)
    if path == "-":
        stream = sys.stdin.buffer
        name = "<stdin>"
    else:
        stream = open(path, "rb")
        name = path
    try:
        number, carry = 1, b""
        while raw := carry + stream.readline(LINE_PIECE_BYTES - len(carry)):
            carry = b""
            whole = raw.endswith(b"\n") or len(raw) < LINE_PIECE_BYTES
            if not whole:
                raw, carry = _cut_piece(raw)
            if b"\x00" in raw:
                raise StreamError(f"{name}:{number}: binary data (NUL byte), expected UTF-8 text")
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise StreamError(f"{name}:{number}: invalid UTF-8 ({error.reason})") from None
            yield number, text if whole else LinePiece(text)
            number += whole
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


class LinePiece(str):
    """A piece of a line longer than ``LINE_PIECE_BYTES``, not its end (``read_lines``)."""


def _cut_piece(raw: bytes) -> tuple[bytes, bytes]:
    """``raw`` (a full piece of a longer line) cut after its last space or tab, else before the
    last UTF-8 character that starts in it: (the piece, the rest carried to the next)."""
    cut = max(raw.rfind(b" "), raw.rfind(b"\t")) + 1
    if cut == 0:
        cut = len(raw)
        while cut > 1 and raw[cut - 1] & 0xC0 == 0x80:  # inside a multi-byte character
            cut -= 1
        cut = cut - 1 if raw[cut - 1] >= 0xC0 else len(raw)
    return raw[:cut], raw[cut:]
