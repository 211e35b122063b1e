"""``mlx-ssbd serve``: the live caption service (WebSocket sessions, batched across sessions)."""

from __future__ import annotations

import sqlite3
import sys

import click

from mlx_ssbd.service.scheduler import DEFAULT_CAPTION_ROUNDS, DEFAULT_MAX_SESSIONS

from .common import load


@click.command()
@click.option("--model", "-m", default=None, help="Model card name, local mlx-lm directory or HF id (default: the default card).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: a free one).")
@click.option("--max-sessions", type=click.IntRange(1), default=DEFAULT_MAX_SESSIONS, show_default=True,
              help="Open sessions at most; more get a 'busy' error.")
@click.option("--idle-timeout", type=click.FloatRange(min=0.1), default=300.0, show_default=True,
              help="Seconds a silent client keeps its session.")
@click.option("--max-message-bytes", type=click.IntRange(64), default=64 * 1024, show_default=True)
@click.option("--max-source-chars", type=click.IntRange(1), default=4000, show_default=True)
@click.option("--store", type=click.Path(dir_okay=False), default=None,
              help="SQLite transcript store (default: transcripts.sqlite3 beside the models, in $MLX_SSBD_HOME).")
@click.option("--caption-rounds", type=click.IntRange(1), default=DEFAULT_CAPTION_ROUNDS, show_default=True,
              help="Batched caption rounds per step of a chat completion while a session's update is under way "
                   "(1: they alternate; more: captions first, chat answers slower).")
def serve(model, host, port, max_sessions, idle_timeout, max_message_bytes, max_source_chars, store, caption_rounds):
    """Serve live captions over WebSocket at /v1/stream (protocol v1, see the README).

    One model per process; every session's next update runs in one batched step.
    """
    try:
        from mlx_ssbd.service.app import ServiceOptions
        from mlx_ssbd.service.protocol import Limits
        from mlx_ssbd.service.server import serve as run
        from mlx_ssbd.service.store import TranscriptStore
    except ImportError as error:
        raise click.ClickException(
            f"the service needs the serve extra ({error.name} is missing): pip install 'mlx-ssbd[serve]'") from None
    from mlx_ssbd.models.registry import models_home

    path = store or models_home() / "transcripts.sqlite3"
    try:  # before the model loads: a bad path fails at once
        transcripts = TranscriptStore(path)
    except (sqlite3.Error, OSError) as error:
        raise click.ClickException(f"cannot open the transcript store {path}: {error}") from None
    loaded = load(model)
    options = ServiceOptions(Limits(max_message_bytes, max_source_chars), idle_timeout)

    def ready(url: str) -> None:
        click.echo(f"mlx-ssbd serve: {loaded.name} on {url}, WebSocket {url.replace('http', 'ws', 1)}/v1/stream",
                   err=True)
        click.echo(url)  # stdout: the URL alone, for scripts (port 0 picks a free port)
        sys.stdout.flush()

    try:
        run(loaded, host=host, port=port, max_sessions=max_sessions, options=options, store=transcripts, on_ready=ready,
            caption_rounds=caption_rounds)
    except OSError as error:
        raise click.ClickException(str(error)) from None
