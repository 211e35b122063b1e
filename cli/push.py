"""``--push PLATFORM[:LANG]=URL`` for ``translate`` and ``listen``: captions to Zoom, YouTube Live,
Teams CART and OBS while they are written to the terminal or files.

``push_specs(values, targets)`` checks every target before the model loads (a ``UsageError``
naming what is wrong, never the URL's secrets). ``PushSink`` wraps the output sink: every
committed caption goes to the sink first, then to the push thread (``mlx_ssbd.push.delivery``),
so a slow or dead target never delays the captions; with ``stable`` the locked words of the open
caption (``--agree``) go out as they lock (whole words only: a word is whole once a space follows
it), and the rest of it at its commit. Reports from the
targets (failing, recovered, lines given up) are written to stderr between captions, and a
summary per target at the end.
"""

from __future__ import annotations

import importlib.util
import queue
import sys
import time

from mlx_ssbd.live.session import CaptionCommit, CaptionUpdate
from mlx_ssbd.push.delivery import PushHub
from mlx_ssbd.push.spec import PushError, PushSpec, parse_targets

import click

DRAIN_S = 10.0  # at the end, targets get this long to deliver what waits

push_option = click.option(
    "--push",
    "push",
    multiple=True,
    metavar="PLATFORM[:LANG]=URL",
    envvar="MLX_SSBD_PUSH",
    help="Also send committed captions to zoom, youtube, teams or obs (repeatable; without :LANG "
    "every target language; URLs in $MLX_SSBD_PUSH, space-separated, stay out of ps). docs/push.md.",
)


def push_specs(values: tuple[str, ...], targets: tuple[str, ...]) -> list[PushSpec]:
    """The push targets, checked; raises ``click.UsageError``."""
    try:
        specs = parse_targets(values, targets)
    except PushError as error:
        raise click.UsageError(f"--push: {error}") from None
    needs = {"httpx"} | ({"simpleobsws"} if any(s.platform == "obs" for s in specs) else set())
    missing = sorted(name for name in needs if importlib.util.find_spec(name) is None)
    if specs and missing:
        raise click.UsageError(f"--push needs {', '.join(missing)}: pip install 'mlx-ssbd[push]'")
    return specs


class PushSink:
    """``sink`` plus the push targets ``specs`` (on a push thread of its own until ``close``)."""

    def __init__(self, sink, specs: list[PushSpec], targets: tuple[str, ...], *, stable: bool = False):
        self.sink, self.stable = sink, stable
        self.default_lang = targets[0]
        self.reports: queue.SimpleQueue = queue.SimpleQueue()
        self.hub = PushHub()
        self.pusher = self.hub.open(specs, self.reports.put)
        self.origin = time.time()  # the session's clock 0 in Unix time (YouTube's timestamps)
        self.sent: dict[str, str] = {}  # per language: the open caption's text pushed so far

    def _tell(self) -> None:
        while not self.reports.empty():
            report = self.reports.get()
            click.echo(f"push {report.target}: {report.message}", err=True)

    def _submit(self, event: CaptionUpdate | CaptionCommit, text: str) -> None:
        if isinstance(event, CaptionCommit):
            spoken = event.start
        else:  # a stable piece of the open caption: its newest words
            spoken = event.speech_end if event.speech_end is not None else event.pushed_at
        lang = event.target or self.default_lang
        self.pusher.submit(lang, text, spoken_at=self.origin + spoken, caption=event.caption)

    def update(self, event: CaptionUpdate) -> None:
        self._tell()
        self.sink.update(event)
        if self.stable:  # the locked words that are whole (a space after them) and not yet sent
            lang, stable = event.target or self.default_lang, event.update.stable
            sent, whole = self.sent.get(lang, ""), stable[: stable.rfind(" ") + 1]
            if whole.startswith(sent) and whole[len(sent) :].strip():
                self._submit(event, whole[len(sent) :])
                self.sent[lang] = whole

    def commit(self, event: CaptionCommit) -> None:
        self._tell()
        self.sink.commit(event)
        lang = event.target or self.default_lang
        sent = self.sent.pop(lang, "")
        rest = event.text[len(sent) :] if event.text.startswith(sent) else event.text
        if rest.strip():
            self._submit(event, rest)

    def close(self) -> None:
        try:
            self.sink.close()
        finally:
            try:
                stats = self.pusher.finish(DRAIN_S).result(DRAIN_S + 30)
            finally:
                self.hub.close()
            self._tell()
            for each in stats:
                delay = f", delay p50 {each['delay_p50_s']:.2f} s" if each["delay_p50_s"] is not None else ""
                click.echo(
                    f"push {each['target']}: {each['delivered']} lines delivered, "
                    f"{each['undelivered']} not{delay}"
                    + (f" ({each['state']})" if each["state"] == "stopped" else ""),
                    err=True,
                )
            sys.stderr.flush()
