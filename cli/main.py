"""The ``mlx-ssbd`` command group, and its console entry point (``main``)."""

from __future__ import annotations

import mlx_ssbd

import click

from .bench import bench
from .deploy import deploy
from .doctor import doctor
from .listen import listen
from .models_cmd import models
from .reproduce import reproduce
from .serve import serve
from .translate import translate


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
    """The ``mlx-ssbd`` command."""
    cli()
