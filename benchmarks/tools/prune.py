"""Result folders that no page links: superseded runs, which leave the tree (git keeps them).

    python -m benchmarks.tools.prune            # list them
    python -m benchmarks.tools.prune --remove   # git rm them, and a date's folder left with no step

A step's folder (``benchmarks/results/DATE-MACHINE/STEP``) is linked when the README or a page of
``docs/`` names its path; the results page (``tools.results_page``) links the newest run of every
step it shows on each kind of machine, so what is left unlinked is a run that a newer one on the
same kind of machine replaced, or one no page uses. A figure that a page quotes names its run's
folder, so it keeps that run.
After ``--remove``, each date's ``RESULTS.md`` is collected again from what stays
(``tools.collect``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks.common import REPO, RESULTS, relative


def pages(root: Path = REPO) -> str:
    """The text of every page that may link a result: the README and docs/*.md."""
    return "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])


def unlinked(results: Path = RESULTS, text: str | None = None) -> list[Path]:
    """The step folders under ``results`` whose repository path no page names."""
    text = pages() if text is None else text
    steps = sorted(p for run in results.iterdir() if run.is_dir() for p in run.iterdir() if p.is_dir())
    return [step for step in steps if relative(step) not in text]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remove", action="store_true", help="git rm them (else only list them)")
    args = parser.parse_args()
    gone = unlinked()
    for step in gone:
        print(relative(step))
    if not args.remove or not gone:
        return
    subprocess.run(["git", "rm", "-rq", "--", *(relative(p) for p in gone)], cwd=REPO, check=True)
    for run in sorted({step.parent for step in gone}):
        if not run.exists() or not any(p.is_dir() for p in run.iterdir()):
            subprocess.run(
                ["git", "rm", "-rq", "--ignore-unmatch", "--", relative(run)], cwd=REPO, check=True
            )
            continue
        collect = [sys.executable, "-m", "benchmarks.tools.collect", str(run)]
        subprocess.run(collect, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    print(f"removed {len(gone)} folders", file=sys.stderr)


if __name__ == "__main__":
    main()
