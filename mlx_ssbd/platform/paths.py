"""Where mlx-ssbd keeps files of its own (prepared models, cached COMET scores).

Contract: ``cache_home()`` is ``$MLX_SSBD_HOME`` when set, else ``mlx-ssbd`` under the per-user
cache directory (``$XDG_CACHE_HOME``, ``~/.cache``, or ``~/Library/Caches`` on macOS). Imports
nothing of MLX.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HOME_ENV = "MLX_SSBD_HOME"


def cache_home() -> Path:
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or (
        Path.home() / "Library" / "Caches" if sys.platform == "darwin" else Path.home() / ".cache"
    )
    return Path(cache) / "mlx-ssbd"
