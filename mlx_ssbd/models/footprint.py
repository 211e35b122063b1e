"""How much disk and memory a prepared model takes.

Contract: ``footprint(directory, compute_itemsize, scales_as_stored)`` reads only the safetensors
headers (no weights) and returns ``Footprint(disk, memory)`` in bytes: ``disk`` is the size of the
directory's files; ``memory`` is the weights' size once loaded: packed quantized weights as
stored, floating tensors (norms, dense layers) in the compute dtype (``compute_itemsize``: 4 on
the CPU, where they are cast to fp32; None: as stored, on a GPU), and quantized layers' scales and
biases as stored when ``scales_as_stored`` (the CPU kernel reads them so), else in the compute
dtype.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "U8": 1,
    "I8": 1,
    "I64": 8,
    "U16": 2,
    "I16": 2,
    "BOOL": 1,
}
_FLOATING = ("F64", "F32", "F16", "BF16")


@dataclass(frozen=True)
class Footprint:
    disk: int
    memory: int


def footprint(
    directory: str | Path, compute_itemsize: int | None = None, scales_as_stored: bool = True
) -> Footprint:
    directory = Path(directory)
    disk = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    memory = 0
    for shard in sorted(directory.glob("*.safetensors")):
        with open(shard, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in info["shape"]:
                count *= dim
            size = _ITEMSIZE.get(info["dtype"], 4)
            quantization = name.endswith((".scales", ".biases"))
            if compute_itemsize and info["dtype"] in _FLOATING and not (quantization and scales_as_stored):
                size = compute_itemsize
            memory += count * size
    return Footprint(disk, memory)


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB"
