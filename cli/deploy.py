"""``mlx-ssbd deploy``: configuration for running replicas of ``serve`` behind a proxy."""

from __future__ import annotations

import re

from mlx_ssbd.service.deploy import haproxy_config

import click


def _address(ctx, param, values):
    """``host:port`` each, with a port in 1-65535."""
    for value in [values] if isinstance(values, str) else values:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(f"{value!r} is not host:port", ctx=ctx, param=param)
    return values


def _duration(ctx, param, value):
    """An HAProxy time: a number with an optional unit (us, ms, s, m, h, d)."""
    if not re.fullmatch(r"\d+(us|ms|s|m|h|d)?", value):
        raise click.BadParameter(f"{value!r} is not an HAProxy time such as 60s or 1h", ctx=ctx, param=param)
    return value


@click.group(short_help="Configuration for serve replicas behind HAProxy.")
def deploy():
    """Configuration for replicas of `mlx-ssbd serve` (see docs/deployment.md)."""


@deploy.command(short_help="Print an HAProxy configuration for the replicas.")
@click.option(
    "--listen",
    default="0.0.0.0:8000",
    show_default=True,
    callback=_address,
    help="Where HAProxy listens (host:port).",
)
@click.option(
    "--replica",
    "replicas",
    multiple=True,
    required=True,
    callback=_address,
    metavar="HOST:PORT",
    help="A replica's address; repeat for each.",
)
@click.option(
    "--maxconn",
    type=click.IntRange(1),
    default=500,
    show_default=True,
    help="Client connections at most (about two file descriptors each).",
)
@click.option(
    "--http-timeout",
    default="60s",
    show_default=True,
    callback=_duration,
    help="HAProxy's client/server timeout: keep it above serve --keepalive (15 s).",
)
@click.option(
    "--tunnel-timeout",
    default="1h",
    show_default=True,
    callback=_duration,
    help="An idle WebSocket's timeout.",
)
@click.option(
    "--request-timeout",
    default="10s",
    show_default=True,
    callback=_duration,
    help="Time a client has to send a whole request head (slow-header sockets are cut).",
)
@click.option(
    "--per-client",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Connections one client address may hold at once (viewers behind one NAT address count together).",
)
def haproxy(listen, replicas, maxconn, http_timeout, tunnel_timeout, request_timeout, per_client):
    """Print an HAProxy configuration for the replicas (least connections, health checks, retries)."""
    click.echo(
        haproxy_config(
            listen,
            replicas,
            maxconn=maxconn,
            tunnel_timeout=tunnel_timeout,
            http_timeout=http_timeout,
            request_timeout=request_timeout,
            per_client=per_client,
        ),
        nl=False,
    )
