"""Test setup. ``mlx_ssbd`` is imported before anything imports ``mlx.core`` so that the backend
policy can load an optimized BLAS (see ``mlx_ssbd.backend``)."""

import os
import sys

import mlx_ssbd  # noqa: F401  (must precede every mlx.core import)

sys.path.insert(0, os.path.dirname(__file__))  # for `from tiny import ...`
