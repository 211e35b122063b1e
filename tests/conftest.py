"""Test setup. ``mlx_ssbd`` is imported before anything imports ``mlx.core`` so that the backend
policy can load an optimized BLAS (see ``mlx_ssbd.platform.backend``)."""

import os
import sys

import mlx_ssbd  # noqa: F401  (must precede every mlx.core import)

sys.path.insert(0, os.path.dirname(__file__))  # for `from tiny import ...`


import pytest

# Modules that start real servers, browsers, PostgreSQL, speech, COMET's own environment or
# benchmark scripts: all slow.
SLOW_MODULES = {
    "test_benchmark_engine",
    "test_benchmark_scripts",
    "test_benchmark_tools",
    "test_comet",
    "test_scheduler",
    "test_service_chat",
    "test_service_transcripts",
    "test_deployment",
    "test_real_model",
    "test_service",
    "test_service_fuzz",
    "test_service_languages",
    "test_service_limits",
    "test_service_replicas",
    "test_speaker_page",
    "test_speech",
    "test_store",
}


def pytest_collection_modifyitems(config, items):
    """``slow`` on every test of ``SLOW_MODULES`` and every integration test: ``pytest -m "not
    slow"`` is the edit-test loop's subset (docs/development.md); CI runs everything."""
    for item in items:
        if item.module.__name__ in SLOW_MODULES or item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def tok():
    """The byte-level tokenizer of the tiny models."""
    from tiny import byte_tokenizer

    return byte_tokenizer()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request):
    """A tiny random-weight model of each plain-attention family the engine tests run on."""
    from tiny import tiny_model

    return tiny_model(request.param, seed=7)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A tiny random-weight qwen2 model directory, converted from GGUF the way real models are."""
    from mlx_ssbd.models.gguf_import import convert_gguf

    from test_gguf_import import write_gguf
    from tiny import tiny_model

    root = tmp_path_factory.mktemp("tiny")
    write_gguf(root / "m.gguf", tiny_model("qwen2", seed=11), "qwen2")
    return str(convert_gguf(root / "m.gguf", root / "model", dtype="float32"))


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the whole run (``service.store.scratch_postgres``); skipped
    where missing."""
    from mlx_ssbd.service.store.scratch_postgres import MISSING, postgres_server

    if MISSING:
        pytest.skip(MISSING)
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def url(model_dir, tmp_path_factory):
    """A server on the tiny model (SQLite store, at most 3 sessions, English speech only: its ASR
    model is Whisper tiny.en), shared by a test module."""
    from serving import server

    store = tmp_path_factory.mktemp("store") / "t.sqlite3"
    with server(model_dir, store, "--max-sessions", "3", "--asr-model", "whisper-tiny.en") as (
        base,
        _,
    ):
        yield base


@pytest.fixture
def run(model_dir):
    """``mlx-ssbd ARGS --model <the tiny model>`` in this process (click's runner)."""
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    def invoke(*args, input=None):
        return CliRunner().invoke(cli, [*args, "--model", model_dir], input=input, catch_exceptions=False)

    return invoke


def write(tmp_path, name, content):
    """A file of ``content`` (text or bytes) in ``tmp_path``; its path as a string."""
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)
