"""What every benchmark shares: the repository, its data, repository-relative names, chrF++.

Contract: constants and pure functions; nothing runs at import.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "benchmarks" / "data"


def relative(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it, else its file name: reports
    name no machine's absolute paths."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return Path(path).name


def chrf(commits: list[str], reference: str) -> float:
    """Document chrF++ of the committed captions (joined) against one reference text."""
    from sacrebleu.metrics import CHRF

    return CHRF(word_order=2).corpus_score([" ".join(commits)], [[reference]]).score
