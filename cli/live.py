"""Output sinks for ``translate --stream``: the live terminal view, plain text, JSONL events.

Each sink gets every ``Update`` through ``update()``, a committed segment through ``commit()``,
and ``close()`` at the end (also on errors and Ctrl-C). Committed text is written and flushed the
moment it is final, so nothing produced is lost when a later line turns out to be bad.
"""

from __future__ import annotations

import json
import shutil
import sys
import unicodedata

import click

from mlx_ssbd import Update

CLEAR = "\r\033[K"
UP = "\033[1A"


def printable(text: str) -> str:
    """Drop control characters (a model can emit ESC and friends) before drawing to a terminal."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cc")


class Totals:
    """Running counts for the status line."""

    def __init__(self):
        self.output_tokens = self.accepted = self.draft = self.passes = self.rt_passes = 0
        self.seconds = 0.0

    def add(self, u: Update) -> None:
        s = u.stats
        self.output_tokens += s.output_tokens
        self.accepted += s.accepted
        self.draft += s.draft_tokens
        self.passes += s.forward_passes
        self.rt_passes += max(1, s.output_tokens)  # RT: one pass per output token (+ prefill)
        self.seconds += s.wall_s

    def line(self) -> str:
        tps = self.output_tokens / self.seconds if self.seconds else 0.0
        acc = f"{100 * self.accepted / self.draft:.0f}%" if self.draft else "-"
        saved = self.rt_passes - self.passes
        return f"{tps:.1f} tok/s | accepted {acc} of drafts | {self.passes} passes ({saved:+d} vs RT)"


class TextSink:
    """Committed translations only, one line each (for pipes and files)."""

    def __init__(self, out=None):
        self.out = out or sys.stdout

    def update(self, u: Update) -> None:
        pass

    def commit(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        pass


class JsonlSink(TextSink):
    """One JSON event per update and one per committed segment."""

    def update(self, u: Update) -> None:
        event = {"type": "update", "segment": u.segment, "source": u.source, "output": u.output,
                 "display": u.display, "final": u.final, "stats": u.stats.to_dict()}
        self.out.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.out.flush()

    def commit(self, text: str) -> None:
        self.out.write(json.dumps({"type": "commit", "output": text}, ensure_ascii=False) + "\n")
        self.out.flush()


class LiveSink(TextSink):
    """The terminal view: committed lines scroll up, the current caption redraws in place on
    stdout, and a status line redraws below it on stderr."""

    def __init__(self, out=None, err=None):
        super().__init__(out)
        self.err = err or sys.stderr
        self.totals = Totals()
        self.caption = ""
        self._drawn = False

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

    def _clear(self) -> None:
        if self._drawn:
            self.err.write(CLEAR)
            self.err.flush()
            self.out.write(UP + CLEAR)
            self.out.flush()
            self._drawn = False

    def _draw(self) -> None:
        width = self._width()
        caption = self.caption if len(self.caption) <= width else "…" + self.caption[-(width - 1):]
        self.out.write(click.style(caption, bold=True) + "\n")
        self.out.flush()
        self.err.write(click.style(self.totals.line()[:width], dim=True))
        self.err.flush()
        self._drawn = True

    def update(self, u: Update) -> None:
        self.totals.add(u)
        self.caption = "" if u.final else printable(u.display)
        self._clear()
        self._draw()

    def commit(self, text: str) -> None:
        self._clear()
        self.out.write(printable(text) + "\n")
        self.caption = ""
        self._draw()

    def close(self) -> None:
        self._clear()
        self.err.write(self.totals.line() + "\n")
        self.err.flush()


def make_sink(fmt: str):
    if fmt == "auto":
        fmt = "live" if sys.stdout.isatty() else "text"
    return {"live": LiveSink, "text": TextSink, "jsonl": JsonlSink}[fmt]()
