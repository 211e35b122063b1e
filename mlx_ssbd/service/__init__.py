"""The live caption service (``mlx-ssbd serve``).

``protocol`` (WebSocket protocol v1: every client field checked; pure), ``scheduler`` (one thread
owns the model; every session's next update in one batched round; failures kept to their session;
the drain), ``session`` (a client's session), ``journal`` and ``store`` (commits written before
they are sent, kept in memory while the store fails), ``app`` (the routes) with ``stream`` (one
WebSocket session), ``viewers`` (SSE), ``chat`` and ``chat_http`` (OpenAI chat with Predicted
Outputs), ``guard`` (API key, Origin), ``outbox`` (a bounded queue per reader), ``options`` (the
operator's limits), ``speech`` (audio frames through the recognizer), ``deploy`` (HAProxy), and
``server`` (uvicorn on a side thread, the scheduler on the main one). Needs the ``serve`` extra
(starlette, uvicorn)."""
