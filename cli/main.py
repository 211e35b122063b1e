"""The ``mlx-ssbd`` command group, and its console entry point (``main``)."""

from __future__ import annotations

import os
import sys

import mlx_ssbd
from mlx_ssbd.platform import backend, gemv

import click

from .bench import bench
from .deploy import deploy
from .doctor import doctor
from .listen import listen
from .models_cmd import models
from .reproduce import reproduce
from .serve import serve
from .translate import translate

RESTARTED_ENV = "MLX_SSBD_KERNEL_BUILT"  # set in the process restarted after building the kernel


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(mlx_ssbd.__version__, prog_name="mlx-ssbd")
def cli():
    """Fast, low-flicker live translation with LLMs (Self-Speculative Biased Decoding on MLX)."""


cli.add_command(translate)
cli.add_command(listen)
cli.add_command(models)
cli.add_command(doctor)
cli.add_command(bench)
cli.add_command(reproduce)
cli.add_command(serve)
cli.add_command(deploy)


def main() -> None:
    """The ``mlx-ssbd`` command. On the first run on a machine whose BLAS can use the decode kernel
    (``platform.gemv``), it builds the kernel into the cache directory and starts again once, since
    the kernel must be loaded before ``mlx.core``; then every run loads it at import."""
    if backend.GEMV.buildable and RESTARTED_ENV not in os.environ:
        click.echo("mlx-ssbd: building the decode kernel (once per machine)...", err=True)
        library, note = gemv.build()
        if library is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os.environ[RESTARTED_ENV] = "1"
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
        click.echo(f"mlx-ssbd: {note}", err=True)
    cli()
