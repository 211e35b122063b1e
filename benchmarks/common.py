"""Paths every benchmark shares: the repository, its data, and repository-relative names.

Contract: constants and one pure function; nothing runs at import.
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
