"""Several ``mlx-ssbd serve`` replicas behind HAProxy: the proxy configuration.

Contract: ``haproxy_config(listen, replicas)`` returns an HAProxy 2.x configuration that balances
by least connections over the replicas, checks each on ``GET /health`` every 1 s (down after 2
failures, up after 1 success; a draining replica answers 503, so it gets no new sessions), retries
a failed connection on another replica, and keeps a WebSocket session on its replica for its life
(a WebSocket is one tunnelled connection; the ``tunnel`` timeout bounds an idle one). A client
gets ``request_timeout`` (10 s) to send a whole request head (``timeout http-request``): sockets
that dribble headers are cut at the proxy and never reach a replica, which the replicas' HTTP
server (uvicorn, no header timeout) cannot do itself. One client address holds at most
``per_client`` connections at once (100; a venue's viewers behind one NAT address count together,
so raise it for such an audience); beyond, a new connection is refused at once. Server-Sent
Events are an ordinary response to HAProxy, bounded by ``http_timeout`` (client and server) between
two reads: the replicas send a keep-alive comment every ``serve --keepalive`` seconds (15), well
inside the default 60 s, so a silent talk never cuts its viewers. With replicas sharing a
PostgreSQL store any replica serves any viewer request; with a store per replica only the
WebSockets are balanced correctly. Use it as it is or as a starting point.
"""

from __future__ import annotations

from collections.abc import Sequence


def haproxy_config(
    listen: str,
    replicas: Sequence[str],
    *,
    maxconn: int = 500,
    tunnel_timeout: str = "1h",
    http_timeout: str = "60s",
    request_timeout: str = "10s",
    per_client: int = 100,
) -> str:
    """``listen`` and each replica as ``host:port``. ``maxconn``: client connections at most (HAProxy
    needs about two file descriptors per connection; it refuses to start beyond ``ulimit -n``)."""
    servers = "\n".join(
        f"    server r{i} {address} check inter 1s fall 2 rise 1" for i, address in enumerate(replicas, 1)
    )
    return f"""global
    maxconn {maxconn}

defaults
    mode http
    option redispatch
    retries 3
    timeout connect 2s
    timeout http-request {request_timeout}
    timeout client {http_timeout}
    timeout server {http_timeout}
    timeout tunnel {tunnel_timeout}

frontend captions
    bind {listen}
    stick-table type ip size 100k expire 60s store conn_cur
    tcp-request connection track-sc0 src
    tcp-request connection reject if {{ sc0_conn_cur gt {per_client} }}
    default_backend replicas

backend replicas
    balance leastconn
    option httpchk GET /health
    http-check expect status 200
{servers}
"""
