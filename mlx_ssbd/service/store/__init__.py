"""Where a service keeps its sessions and committed captions, and how their events reach viewers.

Contract: ``open_store(location)`` opens a ``base.TranscriptStore``: a PostgreSQL URL
(``postgresql://...``: ``postgres.PostgresStore``, for replicas that share it) or a file path
(``sqlite.SQLiteStore``, the embedded default). ``store.bus`` is where a session's events are
published and viewers subscribe (``bus``): in the process for SQLite, through the database
(``LISTEN``/``NOTIFY``) for PostgreSQL, so a viewer on any replica sees every session.
"""

from __future__ import annotations

from pathlib import Path

from .base import SCHEMA_VERSION, Caption, NotResumable, SessionInfo, TranscriptStore

__all__ = ["SCHEMA_VERSION", "Caption", "NotResumable", "SessionInfo", "TranscriptStore", "open_store"]


def open_store(location: str | Path, **kwargs) -> TranscriptStore:
    """The store at ``location`` (module docstring); ``kwargs`` go to the backend."""
    if str(location).startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(str(location), **kwargs)
    from .sqlite import SQLiteStore

    return SQLiteStore(location, **kwargs)
