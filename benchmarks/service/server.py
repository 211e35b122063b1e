"""A ``mlx-ssbd serve`` for a service benchmark: started as a subprocess on 127.0.0.1 (a free port,
a scratch transcript store), the commit it runs, its resident memory, and the ``source.update``
message a replayed ASR partial becomes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def source_message(partial) -> str:
    """The ``source.update`` message of one ASR partial (``SourcePartial``), with its audio times."""
    return json.dumps(
        {
            "type": "source.update",
            "segment": partial.segment_id,
            "text": partial.text,
            "final": partial.final,
            "start": partial.start,
            "end": partial.end,
        }
    )


def server_code(cwd: Path) -> str:
    """The commit of the ``mlx_ssbd`` a server started in ``cwd`` runs (``+changes`` when its tree
    has uncommitted ones): ``PYTHONPATH`` picks it, e.g. a git worktree of an older commit."""
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mlx_ssbd, pathlib; print(pathlib.Path(mlx_ssbd.__file__).parent.parent)",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git = lambda *a: subprocess.run(["git", "-C", where, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (
        "+changes" if git("status", "--porcelain", "--untracked-files=no", "--", "mlx_ssbd") else ""
    )


def start_server(
    model: str, store: Path | str, max_sessions: int, extra: Sequence[str] = (), *, cwd: Path | None = None
):
    """``store``: a SQLite file (the server starts in its directory) or a PostgreSQL URL (give ``cwd``)."""
    # Started in a scratch directory: with ``-m`` Python puts the working directory first on
    # sys.path, which would shadow a PYTHONPATH worktree with the checkout it runs from.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_ssbd_cli",
            "serve",
            "--model",
            model,
            "--port",
            "0",
            "--store",
            str(store),
            "--max-sessions",
            str(max_sessions),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=cwd or Path(store).parent,
    )
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, url


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
