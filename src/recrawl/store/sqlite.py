"""The embedded store: one SQLite file in WAL mode, nothing to install.

WAL lets one writer (a fetcher reporting, an ingest) proceed while readers plan.
Each batch is one ``BEGIN IMMEDIATE`` transaction. What a write has returned
survives according to ``durability``: with ``"full"`` (the default,
``synchronous=FULL``) the commit was fsynced, and survives a crash of the
process, of the operating system and a power loss; with ``"normal"``
(``synchronous=NORMAL``) it survives a crash of the process, while an
operating-system crash or a power loss may lose the last transactions (the
file stays consistent either way).

A full disk, or the database's size limit (``PRAGMA max_page_count``), is
:class:`~recrawl.StoreFull`: the write that met it is rolled back whole and
what was committed before stays.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from recrawl._exceptions import StoreError, StoreFull
from recrawl.store._sql import SQLStore, pack_sparse

__all__ = ["DURABILITY", "SQLiteStore"]

_CACHE_KIB: Final = 16384
"""SQLite's page cache on the store's connection, KiB (``PRAGMA cache_size``).
16 MB, not 128: a plan's scan of the pages filled it with pages read once
(128 bytes a page of a 1 M-page store), and ingest on that store took the
same CPU a report with either (52-61 µs, 50,000 reports of random pages;
the file's pages come from the operating system's cache)."""
DURABILITY: Final = {"full": "FULL", "normal": "NORMAL"}
"""Each ``durability`` and the ``PRAGMA synchronous`` it sets."""
_FULL_MESSAGE = (
    "the store {path!r} is full (no space left on its disk, or the database reached "
    "its size limit): this write was rolled back and nothing of it is stored; what was "
    "stored before is intact. Free space and send it again"
)


class _Connection(sqlite3.Connection):
    """A connection whose statements raise :class:`~recrawl.StoreFull` for
    ``SQLITE_FULL``, and whose ``ROLLBACK`` is a no-op once SQLite has rolled
    the transaction back itself (as it may on a full disk), so the error that
    caused the rollback is the one raised."""

    store_path = ""

    @contextlib.contextmanager
    def _full_is_store_full(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL:
                message = _FULL_MESSAGE.format(path=self.store_path)
                raise StoreFull(f"{message} ({exc})") from exc
            raise

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql == "ROLLBACK" and not self.in_transaction:
            return self.cursor()
        with self._full_is_store_full():
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        with self._full_is_store_full():
            return super().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        with self._full_is_store_full():
            return super().executescript(sql_script)


def _checked(durability: str) -> Literal["full", "normal"]:
    if durability not in DURABILITY:
        raise StoreError(f"durability must be 'full' or 'normal', not {durability!r}")
    return durability  # type: ignore[return-value]


def _sparse(v: bytes) -> bytes:
    """A whole bucket vector made sparse (the migration from schema 2)."""
    return pack_sparse(np.frombuffer(v, dtype="<f8").reshape(1, -1))[0]


class SQLiteStore(SQLStore):
    """The store in one SQLite file at ``path`` (created if missing), its
    writes as durable as ``durability`` says (see the module)."""

    def __init__(
        self,
        path: str | Path,
        *,
        half_life_days: float | None = None,
        maintain_buckets: bool = True,
        durability: Literal["full", "normal"] = "full",
    ) -> None:
        self.path = str(path)
        self._wal = False  # the file is in WAL mode (set by _connect)
        self._planner_fd: int | None = None  # the planning role's file lock (hold_planner)
        self.durability = _checked(durability)
        super().__init__(half_life_days=half_life_days, maintain_buckets=maintain_buckets)

    def set_durability(self, durability: Literal["full", "normal"]) -> None:
        """``"full"``: every commit from now on is fsynced before it returns;
        ``"normal"``: not (see the module)."""
        _checked(durability)
        with self._lock:
            if durability != self.durability:
                self._db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
                self.durability = durability

    def outside_writes(self) -> int | None:
        """SQLite's ``data_version``: it moves with every commit of another connection."""
        with self._lock:
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def hold_planner(self) -> bool:
        """Take, or keep, the planning role (see :meth:`SQLStore.hold_planner
        <recrawl.store.SQLStore.hold_planner>`): an exclusive ``flock`` on the
        file ``<database>-planner`` beside the database, held until the store
        closes or its process ends. An in-memory store always holds it."""
        if self._planner_fd is not None or self.path in ("", ":memory:"):
            return True
        try:
            import fcntl
        except ImportError:  # not a POSIX system: one process is assumed
            return True
        try:
            fd = os.open(f"{self.path}-planner", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._planner_fd = fd
        return True

    def release_planner(self) -> None:
        fd, self._planner_fd = self._planner_fd, None
        if fd is not None:
            os.close(fd)  # closing the file releases its lock

    def close(self) -> None:
        self.release_planner()
        super().close()

    def vacuum(self) -> None:
        """Rewrite the file without the space of deleted rows (``VACUUM``, then the
        write-ahead log emptied), so it shrinks; needs about its size free on disk."""
        with self._lock:
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def size_bytes(self) -> int:
        """The database's size in bytes: the file's, once the write-ahead log is
        copied back into it (free pages included)."""
        return self._pragma("page_count") * self._pragma("page_size")

    def free_bytes(self) -> int:
        """Bytes of the database's free pages: space deleted rows left, reused by
        new rows (``VACUUM`` gives it back to the disk)."""
        return self._pragma("freelist_count") * self._pragma("page_size")

    def _pragma(self, name: str) -> int:
        with self._lock:
            return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])

    def _connect(self) -> Any:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=30.0,
                factory=_Connection,
            )
            db.store_path = self.path
            db.create_function("recrawl_sparse", 1, _sparse, deterministic=True)
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._wal = str(mode).lower() == "wal"  # "memory" for an in-memory store
            db.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")
            db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            db.execute("PRAGMA temp_store=MEMORY")
            # Checkpoint every 64 MB of WAL rather than 4 MB: with the small
            # batches fetchers report over HTTP, checkpoints otherwise dominate
            # (measured: +60 % ingest with batches of 500, no change at 5,000).
            db.execute("PRAGMA wal_autocheckpoint=16384")
            db.execute("PRAGMA journal_size_limit=67108864")
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from None
        return db

    def _open_reader(self) -> Any:
        """A second connection to the file, for the reads that run outside the
        store's lock: in WAL mode its read transactions see a snapshot while
        this store's writes go on. None for an in-memory or temporary store
        (a second connection would open another, empty database) and a file not
        in WAL mode (a reader there would hold writers back)."""
        if not self._wal or self.path in ("", ":memory:"):
            return None
        try:
            db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            try:
                db.execute("PRAGMA query_only=ON")
                # as the store's: the ORDER BY of a long read sorts in memory
                db.execute("PRAGMA cache_size=-131072")
                db.execute("PRAGMA temp_store=MEMORY")
            except BaseException:
                db.close()
                raise
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StoreError(f"cannot open a reader of the store {self.path!r}: {exc}") from None
        return db
