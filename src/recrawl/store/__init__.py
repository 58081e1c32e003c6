"""Where recrawl keeps pages, the observation log and per-site buckets.

:class:`Store` is the protocol every backend implements; :class:`SQLiteStore`
is the embedded default (one file, WAL mode, nothing to install).
:func:`open_store` picks the backend from a path or URL.
"""

from __future__ import annotations

import os
from typing import Any

from recrawl.store._protocol import (
    BatchResult,
    ContentHistory,
    EngineStore,
    GroupTotals,
    HintResult,
    HintRows,
    PruneReport,
    SharedPlanning,
    Store,
    WriteTx,
)
from recrawl.store._sql import SQLStore, SQLWrite
from recrawl.store.postgres import PostgresStore
from recrawl.store.sqlite import SQLiteStore

__all__ = [
    "BatchResult",
    "ContentHistory",
    "EngineStore",
    "GroupTotals",
    "HintResult",
    "HintRows",
    "PostgresStore",
    "PruneReport",
    "SQLStore",
    "SQLWrite",
    "SQLiteStore",
    "SharedPlanning",
    "Store",
    "WriteTx",
    "default_db",
    "open_store",
]


def default_db() -> str:
    """The store path: ``$RECRAWL_DB`` or ``./recrawl.db``."""
    return os.environ.get("RECRAWL_DB") or "recrawl.db"


def open_store(db: str | None = None, **kwargs: Any) -> SQLStore:
    """Open (creating if needed) the store at ``db``: a SQLite file path, or a
    ``postgresql://`` URL; default :func:`default_db`."""
    where = db or default_db()
    if where.startswith(("postgresql://", "postgres://")):
        return PostgresStore(where, **kwargs)
    return SQLiteStore(where, **kwargs)
