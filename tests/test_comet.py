"""COMET end to end, offline, on a tiny checkpoint built here: a random-weight 2-layer BERT encoder
saved locally and a COMET regression head on it. Its scores are meaningless; what is tested is that
every line of the path runs: the COMET environment's worker, loading a checkpoint the way
unbabel-comet saves them, batched scoring, the score cache, and COMET in a benchmark summary.

unbabel-comet cannot share this environment (it needs transformers < 5, mlx-lm >= 5.7): these
tests use the environment named by ``$MLX_SSBD_COMET_PYTHON``, or ``.venv-comet`` at the repository
root, which ``.ci/run`` builds (docs/development.md); without one they are skipped.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from mlx_ssbd.evaluation.scorers import Comet, add_scores

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("MLX_SSBD_COMET_PYTHON") or str(ROOT / ".venv-comet" / "bin" / "python")
pytestmark = pytest.mark.skipif(
    not Path(PYTHON).is_file(), reason="no COMET environment (.venv-comet; see docs/development.md)"
)

WORDS = "so today we talk about rules heute reden wir über regeln new people all".split()
SEGMENTS = [
    ("so today we talk", "heute reden wir", "heute reden wir"),
    ("about rules", "über Regeln", "über die Regeln"),
    ("new rules for all", "neue Regeln für alle", "neue Regeln für alle Menschen"),
]


BUILD = """
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from comet.models import RegressionMetric
from transformers import BertConfig, BertTokenizerFast

root, words = Path(sys.argv[1]), sys.argv[2].split()
encoder = root / "tiny-bert"
encoder.mkdir()
vocab = encoder / "vocab.txt"
vocab.write_text("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\\n")
BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(encoder)
BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
           intermediate_size=32, max_position_embeddings=64).save_pretrained(encoder)
torch.manual_seed(0)
model = RegressionMetric(encoder_model="BERT", pretrained_model=str(encoder), hidden_sizes=[8],
                         load_pretrained_weights=False, layer="mix", pool="avg")
folder = root / "tiny-comet"
(folder / "checkpoints").mkdir(parents=True)
torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "pytorch-lightning_version": pl.__version__, "epoch": 0, "global_step": 0},
           folder / "checkpoints" / "model.ckpt")
(folder / "hparams.yaml").write_text(yaml.safe_dump({**dict(model.hparams), "class_identifier":
"regression_metric"}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A COMET checkpoint laid out as unbabel-comet's are: MODEL/hparams.yaml and
    MODEL/checkpoints/model.ckpt, whose encoder is a local tiny BERT (config and vocabulary),
    built in the COMET environment."""
    root = tmp_path_factory.mktemp("comet")
    done = subprocess.run(
        [PYTHON, "-c", BUILD, str(root), " ".join(WORDS)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "tiny-comet" / "checkpoints" / "model.ckpt"


def columns(segments):
    return [list(column) for column in zip(*segments)]


def test_a_checkpoint_scores_every_segment_in_batches(checkpoint, tmp_path):
    scorer = Comet(str(checkpoint), python=PYTHON, cache_dir=tmp_path, batch_size=2, progress=False)
    scores = scorer.scores(*columns(SEGMENTS))
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert len(set(scores)) == 3  # different segments, different (meaningless) scores
    assert scorer.system_score(*columns(SEGMENTS)) == pytest.approx(sum(scores) / 3)
    assert scorer.label == "local checkpoint tiny-comet"


def test_scores_are_cached_per_segment(checkpoint, tmp_path):
    first = Comet(str(checkpoint), python=PYTHON, cache_dir=tmp_path, progress=False).scores(
        *columns(SEGMENTS[:2])
    )
    cached = Comet(str(checkpoint), python=str(tmp_path / "no-python"), cache_dir=tmp_path)
    assert cached.scores(*columns(SEGMENTS[:2])) == first  # from the cache: no COMET run at all
    with pytest.raises(ValueError, match="cannot run the COMET environment's Python"):
        cached.scores(*columns(SEGMENTS))  # a new segment needs COMET
    both = Comet(str(checkpoint), python=PYTHON, cache_dir=tmp_path, progress=False).scores(
        *columns(SEGMENTS)
    )
    assert both[:2] == first and len(json.loads(cached.cache_path.read_text())) == 3


def test_comet_in_a_benchmark_summary(checkpoint, tmp_path):
    records = [
        {"config": label, "final": True, "source": s, "output": h, "ref": r}
        for label in ("rt", "ssbd-b0.2")
        for s, h, r in SEGMENTS
    ]
    summary = {"configs": {"rt": {}, "ssbd-b0.2": {}}, "notes": []}
    add_scores(
        summary, records, comet=Comet(str(checkpoint), python=PYTHON, cache_dir=tmp_path, progress=False)
    )
    assert summary["configs"]["rt"]["comet"] == summary["configs"]["ssbd-b0.2"]["comet"]  # same outputs
    assert summary["configs"]["rt"]["comet_model"] == "local checkpoint tiny-comet" and not summary["notes"]


def test_what_cannot_score_is_a_clear_note(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    records = [{"config": "rt", "final": True, "source": "a", "output": "b", "ref": "c"}]
    for model, python, message in (
        (str(tmp_path / "none" / "model.ckpt"), PYTHON, "not found"),
        ("no-such/comet-model", PYTHON, "could not be downloaded"),
        ("Unbabel/wmt22-comet-da", sys.executable, "unbabel-comet is not installed"),
    ):
        summary = {"configs": {"rt": {}}, "notes": []}
        add_scores(summary, records, comet=Comet(model, python=python, cache_dir=tmp_path, progress=False))
        assert "comet" not in summary["configs"]["rt"] and message in summary["notes"][0]
