"""Output sinks for ``translate --stream``: live terminal view, plain text, JSONL events, SRT, VTT.

Each sink gets every ``session.CaptionUpdate`` through ``update()``, every ``CaptionCommit``
through ``commit()``, and ``close()`` at the end (also on errors and Ctrl-C). Committed text is
written and flushed the moment it is final, so nothing produced is lost when a later line turns
out to be bad; SRT and VTT cues are streamed the same way, one per committed caption.

With several target languages (``make_sink(fmt, targets, output)``): JSONL events carry
``target`` (they always do); plain text and the live view label each line with its language (the
live view keeps one line per language); ``-o PATTERN`` with ``{lang}`` writes one file per
language (``RoutedSink``), which SRT and VTT need.
"""

from __future__ import annotations

import json
import shutil
import sys
import unicodedata

from mlx_ssbd.live import subtitles
from mlx_ssbd.live.session import CaptionCommit, CaptionUpdate

import click

CLEAR = "\r\033[K"
UP = "\033[1A"


def printable(text: str) -> str:
    """Drop control characters (a model can emit ESC and friends) before drawing to a terminal."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cc")


def display_width(text: str) -> int:
    """Terminal columns of ``text``: wide (CJK) characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def tail_to_width(text: str, width: int) -> str:
    """The end of ``text`` that fits ``width`` columns, with a leading ellipsis if cut."""
    if display_width(text) <= width:
        return text
    out, used = [], 1
    for ch in reversed(text):
        used += display_width(ch)
        if used > width:
            break
        out.append(ch)
    return "…" + "".join(reversed(out))


class Totals:
    """Running counts for the status line."""

    def __init__(self):
        self.output_tokens = self.accepted = self.draft = self.passes = self.rt_passes = 0
        self.coalesced = 0
        self.seconds = 0.0

    def add(self, stats, coalesced: int = 0) -> None:
        self.output_tokens += stats.output_tokens
        self.accepted += stats.accepted
        self.draft += stats.draft_tokens
        self.passes += stats.forward_passes
        self.rt_passes += max(1, stats.output_tokens)  # RT: one pass per output token (+ prefill)
        self.seconds += stats.wall_s
        self.coalesced += coalesced

    def line(self) -> str:
        tps = self.output_tokens / self.seconds if self.seconds else 0.0
        acc = f"{100 * self.accepted / self.draft:.0f}%" if self.draft else "-"
        saved = self.rt_passes - self.passes
        versus = f"{saved} fewer than RT" if saved >= 0 else f"{-saved} more than RT"
        skipped = f" | {self.coalesced} partials skipped" if self.coalesced else ""
        return f"{tps:.1f} tok/s | accepted {acc} of drafts | {self.passes} passes ({versus} would take){skipped}"


class TextSink:
    """Committed translations only, one line each (for pipes and files); ``labelled``: each line
    starts with its language (``de: ...``)."""

    def __init__(self, out=None, labelled: bool = False):
        self.out = out or sys.stdout
        self.labelled = labelled

    def label(self, event) -> str:
        return f"{event.target}: " if self.labelled else ""

    def update(self, event: CaptionUpdate) -> None:
        pass

    def commit(self, event: CaptionCommit) -> None:
        self.out.write(self.label(event) + event.text + "\n")
        self.out.flush()

    def close(self) -> None:
        pass


def update_event(event: CaptionUpdate | CaptionCommit) -> dict:
    """The JSONL ``update`` event (a commit's final update too)."""
    u = event.update
    return {
        "type": "update",
        "target": event.target,
        "caption": event.caption,
        "segment": event.segment,
        "seq": event.seq,
        "source": u.source,
        "output": u.output,
        "display": u.display,
        "stable": u.stable,
        "unstable": u.unstable,
        "final": u.final,
        "coalesced": event.coalesced,
        "at": round(event.at, 3),
        "stats": u.stats.to_dict(),
    }


def commit_event(event: CaptionCommit) -> dict:
    return {
        "type": "commit",
        "target": event.target,
        "caption": event.caption,
        "segment": event.segment,
        "seq": event.seq,
        "output": event.text,
        "source": event.source,
        "start": round(event.start, 3),
        "end": round(event.end, 3),
        "timed_by": event.timed_by,
        "reason": event.reason,
        "at": round(event.at, 3),
    }


class JsonlSink(TextSink):
    """One JSON event per update (``update``, the final one included) and per commit."""

    def _write(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def update(self, event: CaptionUpdate) -> None:
        self._write(update_event(event))

    def commit(self, event: CaptionCommit) -> None:
        self._write(update_event(event))
        self._write(commit_event(event))


class SrtSink(TextSink):
    """SubRip cues of the committed captions, timed by the ASR or the session clock: a caption
    longer than a cue holds (``line_chars``: ``subtitles.layout``) is several."""

    kind = "srt"

    def __init__(self, out=None, line_chars: int | None = None):
        super().__init__(out)
        self.cues = subtitles.Cues(self.kind, line_chars)
        if subtitles.header(self.kind):
            self.out.write(subtitles.header(self.kind))
            self.out.flush()

    def commit(self, event: CaptionCommit) -> None:
        text = self.cues.add(event.start, event.end, event.text)
        if text:
            self.out.write(text)
            self.out.flush()


class VttSink(SrtSink):
    """WebVTT cues (a ``WEBVTT`` header, then one cue per committed caption)."""

    kind = "vtt"


class LiveSink(TextSink):
    """The terminal view: committed lines scroll up, the current caption redraws in place on
    stdout, and a status line redraws below it on stderr."""

    def __init__(self, out=None, err=None, labelled: bool = False):
        super().__init__(out, labelled)
        self.err = err or sys.stderr
        self.totals = Totals()
        self.captions: dict[str | None, tuple[str, str]] = {}  # per language: (stable, unstable)
        self._drawn = 0  # caption lines drawn below the committed ones

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

    def _clear(self) -> None:
        if self._drawn:
            self.err.write(CLEAR)
            self.err.flush()
            self.out.write((UP + CLEAR) * self._drawn)
            self.out.flush()
            self._drawn = 0

    def _draw(self) -> None:
        width = self._width()
        for target, (stable, unstable) in self.captions.items():
            label = f"{target}: " if self.labelled else ""
            shown = tail_to_width(stable + unstable, width - len(label))
            cut = max(0, len(shown) - len(unstable)) if unstable else len(shown)  # stable part of what fits
            self.out.write(
                label + click.style(shown[:cut], bold=True) + click.style(shown[cut:], dim=True) + "\n"
            )
        self.out.flush()
        self.err.write(click.style(tail_to_width(self.totals.line(), width), dim=True))
        self.err.flush()
        self._drawn = len(self.captions)

    def update(self, event: CaptionUpdate) -> None:
        u = event.update
        self.totals.add(u.stats, event.coalesced)
        self._clear()
        self.captions[event.target] = (printable(u.stable), printable(u.unstable))
        self._draw()

    def commit(self, event: CaptionCommit) -> None:
        self.totals.add(event.update.stats, event.coalesced)
        self._clear()
        self.out.write(self.label(event) + printable(event.text) + "\n")
        self.captions[event.target] = ("", "")
        self._draw()

    def close(self) -> None:
        self._clear()
        self.err.write(self.totals.line() + "\n")
        self.err.flush()


class RoutedSink:
    """One sink per language (``sinks``), each event to its own; closes the files it was given."""

    def __init__(self, sinks: dict, files=()):
        self.sinks, self.files = sinks, list(files)

    def update(self, event: CaptionUpdate) -> None:
        self.sinks[event.target].update(event)

    def commit(self, event: CaptionCommit) -> None:
        self.sinks[event.target].commit(event)

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        for file in self.files:
            file.close()


SINKS = {"live": LiveSink, "text": TextSink, "jsonl": JsonlSink, "srt": SrtSink, "vtt": VttSink}
SINK_FORMATS = ("auto", *SINKS)
LANG = "{lang}"  # in an -o pattern: the language of each file


def make_sink(
    fmt: str, targets: tuple[str, ...] = ("de",), output: str | None = None, line_chars: int | None = None
):
    """The sink for ``fmt`` (module docstring); ``line_chars``: a subtitle line's characters at
    most (``subtitles.layout``). Raises ``click.UsageError`` for an impossible mix."""
    several = len(targets) > 1
    if fmt == "auto":
        fmt = "live" if sys.stdout.isatty() and output is None else "text"
    if line_chars is not None and fmt not in ("srt", "vtt"):
        raise click.UsageError(f"--cue-chars lays out subtitle cues: it needs --format srt or vtt, not {fmt}")
    if output is None:
        if several and fmt in ("srt", "vtt"):
            raise click.UsageError(
                f"{fmt} subtitles in several languages go to one file each: "
                f"-o PATTERN with {LANG}, e.g. -o talk.{LANG}.{fmt}"
            )
        return SINKS[fmt](labelled=True) if several else _sink(fmt, line_chars)
    if fmt == "live":
        raise click.UsageError(
            "the live view is for a terminal; with -o choose --format text, jsonl, srt or vtt"
        )
    if several and LANG not in output:
        raise click.UsageError(f"several languages need {LANG} in the -o pattern, e.g. -o talk.{LANG}.{fmt}")
    files = {}
    try:
        for target in targets:
            files[target] = open(output.replace(LANG, target), "w", encoding="utf-8")
    except OSError as error:
        for file in files.values():
            file.close()
        raise click.UsageError(f"cannot write {error.filename}: {error.strerror}") from None
    return RoutedSink(
        {target: _sink(fmt, line_chars, file) for target, file in files.items()}, files.values()
    )


def _sink(fmt: str, line_chars: int | None, out=None):
    return SINKS[fmt](out, line_chars) if fmt in ("srt", "vtt") else SINKS[fmt](out)
