"""``mlx-ssbd serve``: the live caption service (WebSocket sessions, batched across sessions)."""

from __future__ import annotations

import ipaddress
import logging
import sys
from urllib.parse import urlsplit, urlunsplit

from mlx_ssbd.asr.recognizer import asr_cards, asr_status
from mlx_ssbd.asr.streaming import StreamingConfig
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.service.options import ServiceOptions
from mlx_ssbd.service.scheduler import DEFAULT_CAPTION_ROUNDS, DEFAULT_DRAIN_S, DEFAULT_MAX_SESSIONS

import click

from .common import load, weights_option


@click.command(short_help="Serve live captions: WebSocket, speaker page, viewers, API.")
@click.option(
    "--model",
    "-m",
    default=None,
    help="Model name, local mlx-lm directory or HF id. [default: qwen2.5-coder-1.5b]",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: a free one)."
)
@click.option(
    "--max-sessions",
    type=click.IntRange(1),
    default=DEFAULT_MAX_SESSIONS,
    show_default=True,
    help="Open sessions at most; more get a 'busy' error.",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0.1),
    default=ServiceOptions.idle_timeout_s,
    show_default=True,
    help="Seconds a client that sends no valid message keeps its session.",
)
@click.option(
    "--handshake-timeout",
    type=click.FloatRange(min=0.1),
    default=ServiceOptions.handshake_timeout_s,
    show_default=True,
    help="Seconds a new connection has to send its first message.",
)
@click.option(
    "--head-timeout",
    type=click.FloatRange(min=0.1),
    default=ServiceOptions.head_timeout_s,
    show_default=True,
    help="Seconds a connection has to send a complete HTTP request head (slow or idle sockets are closed).",
)
@click.option(
    "--api-key",
    envvar="MLX_SSBD_API_KEY",
    default=None,
    help="Require this key (Authorization: Bearer KEY, or ?api_key= on the WebSocket) to open sessions "
    "and use the OpenAI API; viewer links need only the session id. Also $MLX_SSBD_API_KEY.",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="A browser origin (https://host:port) that may open sessions and POST, besides the server's "
    "own; repeatable; '*' allows any.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name clients reach the server by (its Host header), besides loopback names and IP "
    "addresses; repeatable; '*' allows any (other names are refused: DNS rebinding).",
)
@click.option(
    "--public-without-key",
    is_flag=True,
    help="Listen on a non-loopback --host without --api-key: anyone who can reach it may use the model "
    "and list every session.",
)
@click.option(
    "--max-viewers",
    type=click.IntRange(1),
    default=ServiceOptions.max_viewers,
    show_default=True,
    help="SSE viewers (caption pages) in all; more get 503.",
)
@click.option(
    "--keepalive",
    type=click.FloatRange(min=0.1),
    default=ServiceOptions.keepalive_s,
    show_default=True,
    help="Seconds of silence after which an SSE viewer gets a keep-alive comment (keep it below the "
    "proxy's timeouts).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=ServiceOptions.max_tokens,
    show_default=True,
    help="The largest max_tokens a chat completion may ask for.",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_DRAIN_S,
    show_default=True,
    help="On SIGTERM/SIGINT: seconds to commit every open caption and close every session before exiting.",
)
@click.option(
    "--max-message-bytes",
    type=click.IntRange(64),
    default=64 * 1024,
    show_default=True,
    help="A WebSocket message's size at most; a larger one gets a 'message_too_large' error.",
)
@click.option(
    "--max-source-chars",
    type=click.IntRange(1),
    default=4000,
    show_default=True,
    help="A source text's length at most (characters); a longer one gets an 'invalid_message' error.",
)
@click.option(
    "--max-targets",
    type=click.IntRange(1, 16),
    default=4,
    show_default=True,
    help="Caption languages of one session at most (each is a row of the batch).",
)
@click.option(
    "--store",
    envvar="MLX_SSBD_STORE",
    default=None,
    metavar="PATH|URL",
    help="Where sessions and committed captions are kept: a SQLite file (default: transcripts.sqlite3 "
    "beside the models, in $MLX_SSBD_HOME), or a PostgreSQL URL (postgresql://user@host/db) that "
    "replicas share, so any of them serves any session. Also $MLX_SSBD_STORE.",
)
@click.option(
    "--caption-rounds",
    type=click.IntRange(1),
    default=DEFAULT_CAPTION_ROUNDS,
    show_default=True,
    help="Batched caption rounds per step of a chat completion while a session's update is under way "
    "(1: they alternate; more: captions first, chat answers slower).",
)
@click.option(
    "--pause",
    type=click.FloatRange(0.0),
    default=SegmenterConfig.pause_s,
    show_default=True,
    help="Commit a session's open caption once its text has not changed for this many seconds (0: never): "
    "seconds of speech for audio, of arrival for text partials.",
)
@click.option(
    "--asr-model",
    default=None,
    help="The ASR model for every session's speech. [default: per session, whisper-tiny.en for English, "
    "whisper-base (prepared beforehand with `mlx-ssbd models prepare whisper-base`) for other languages]",
)
@click.option(
    "--asr-step",
    type=click.FloatRange(0.2, 10.0),
    default=StreamingConfig.step_s,
    show_default=True,
    help="Seconds of new audio between two recognitions of a session's speech (2: half the ASR work, "
    "captions up to a second later).",
)
@weights_option
def serve(
    model,
    host,
    port,
    max_sessions,
    idle_timeout,
    handshake_timeout,
    head_timeout,
    api_key,
    allow_origins,
    max_viewers,
    keepalive,
    max_tokens,
    drain_timeout,
    max_message_bytes,
    max_source_chars,
    max_targets,
    store,
    caption_rounds,
    pause,
    allow_hosts,
    public_without_key,
    asr_model,
    asr_step,
    weights,
):
    """Serve live captions over WebSocket at /v1/stream (protocol v1, see the README).

    One model per process; every session's next update runs in one batched step. SIGTERM or
    SIGINT drains: open captions are committed and every session is closed before the exit.
    """
    if api_key is not None and not api_key.strip():
        raise click.BadParameter("the API key is empty", param_hint="--api-key")
    if asr_model is not None and asr_model not in asr_cards():
        raise click.BadParameter(
            f"unknown ASR model; known: {', '.join(asr_cards())}", param_hint="--asr-model"
        )
    if api_key is None and not public_without_key and not _loopback(host):
        raise click.UsageError(
            f"--host {host} without --api-key would let anyone who can reach it use the model and "
            "read every session: give --api-key (or $MLX_SSBD_API_KEY), or --public-without-key "
            "to serve it so anyway"
        )
    try:
        from mlx_ssbd.service.connections import websocket_protocol
        from mlx_ssbd.service.protocol import Limits
        from mlx_ssbd.service.server import serve as run
        from mlx_ssbd.service.store import open_store

        websocket_protocol()
    except ImportError as error:
        raise click.ClickException(
            f"the service needs the serve extra ({error.name} is missing): pip install 'mlx-ssbd[serve]'"
        ) from None
    from mlx_ssbd.models.registry import models_home

    location = store or models_home() / "transcripts.sqlite3"
    try:  # before the model loads: a bad path or an unreachable database fails at once
        transcripts = open_store(location)
    except Exception as error:
        raise click.ClickException(
            f"cannot open the transcript store {_redacted(location)}: "
            f"{str(error).strip() or type(error).__name__}"
        ) from None
    loaded = load(model, weights=weights)
    logging.basicConfig(level=logging.WARNING, format="mlx-ssbd serve: %(levelname)s %(name)s: %(message)s")
    options = ServiceOptions(
        Limits(max_message_bytes, max_source_chars, max_targets=max_targets),
        idle_timeout,
        handshake_timeout,
        api_key,
        tuple(allow_origins),
        tuple(allow_hosts),
        max_viewers=max_viewers,
        max_tokens=max_tokens,
        keepalive_s=keepalive,
        head_timeout_s=head_timeout,
        asr_model=asr_model,
        asr_step_s=asr_step,
    )

    def ready(url: str) -> None:
        click.echo(
            f"mlx-ssbd serve: {loaded.name} on {url}, WebSocket {url.replace('http', 'ws', 1)}/v1/stream",
            err=True,
        )
        click.echo(url)  # stdout: the URL alone, for scripts (port 0 picks a free port)
        sys.stdout.flush()
        for name in [asr_model] if asr_model else asr_cards():
            click.echo(f"mlx-ssbd serve: speech: {asr_status(name, verify=False)}", err=True)

    try:
        run(
            loaded,
            host=host,
            port=port,
            max_sessions=max_sessions,
            options=options,
            store=transcripts,
            on_ready=ready,
            caption_rounds=caption_rounds,
            drain_timeout_s=drain_timeout,
            segmenter=SegmenterConfig(pause_s=pause or None),
        )
    except OSError as error:
        raise click.ClickException(str(error)) from None
    finally:
        transcripts.close()


def _loopback(host: str) -> bool:
    """``--host`` listens on this machine only (a loopback address or ``localhost``)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _redacted(location) -> str:
    """A store location fit for a message: a URL's password hidden."""
    parts = urlsplit(str(location))
    if parts.password is None:
        return str(location)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
