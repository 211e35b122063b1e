"""The live caption service (``mlx-ssbd serve``): ``protocol`` (WebSocket protocol v1, pure),
``scheduler`` (one thread owns the model; every session's next update in one batched step),
``app`` (Starlette routes), ``server`` (uvicorn on a side thread, the scheduler on the main one).
Needs the ``serve`` extra (starlette, uvicorn)."""
