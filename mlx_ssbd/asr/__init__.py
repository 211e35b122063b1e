"""Speech in: audio sources, recognizers and the streaming policy that turns speech into ASR
partials for a ``LiveSession`` (``mlx-ssbd listen``, audio frames on the service's WebSocket).
Needs the ``mlx-ssbd[asr]`` extra for real recognition; the policy itself is pure Python."""
