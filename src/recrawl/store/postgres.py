"""PostgreSQL: the store for several machines.

Same schema and behaviour as the SQLite store. Writers are serialised with a
transaction-level advisory lock (what ``BEGIN IMMEDIATE`` does in SQLite), so
ingests from several processes or machines apply each page's observations in
time order. Open it with a URL: ``--db postgresql://user@host/dbname``; an
optional ``?options=-csearch_path%3Dname`` selects a schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from .._exceptions import StoreError
from ._sql import _WIDTH, SQLStore

__all__ = ["PostgresStore"]

_LOCK_KEY = 0x72656372  # "recr": the advisory lock every writer takes


@lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (recrawl's SQL has no literal ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class _Conn:
    """A psycopg connection with the small sqlite3-like surface the SQL store uses."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.in_transaction = False

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        head = sql.lstrip()[:16].upper()
        if head.startswith("BEGIN"):
            self.conn.execute("BEGIN")
            self.in_transaction = True
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            return None
        if head.startswith(("COMMIT", "ROLLBACK")):
            self.in_transaction = False
        return self.conn.execute(_pg(sql), args or None)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(_pg(sql), rows)

    def executescript(self, script: str) -> None:
        self.conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))  # one migrator at a time
        try:
            for stmt in script.split(";"):
                if stmt.strip():
                    self.conn.execute(stmt)
        finally:
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))

    def close(self) -> None:
        self.conn.close()


class PostgresStore(SQLStore):
    """The store in a PostgreSQL database at ``url`` (tables created if missing)."""

    dialect: ClassVar[dict[str, str]] = {
        "REAL": "DOUBLE PRECISION",
        "BIGINT": "BIGINT",
        "SEQ": "BIGSERIAL PRIMARY KEY",
        "PAGEID": "BIGINT PRIMARY KEY",
        "WR": "",
        "VEC": "DOUBLE PRECISION[]",
        "JSON_ROW": "json_build_array({})::text",
        "SPARSE": "",
    }

    def __init__(
        self,
        url: str,
        *,
        half_life_days: float | None = None,
        maintain_buckets: bool = True,
    ) -> None:
        self.path = re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)  # never print a password
        self._url = url
        super().__init__(half_life_days=half_life_days, maintain_buckets=maintain_buckets)

    def _vectors(self, mat: np.ndarray[Any, np.dtype[np.float64]], *, sparse: bool) -> list[Any]:
        out: list[Any] = mat.tolist()
        return out

    def _unvectors(
        self, values: Sequence[Any], *, sparse: bool
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        return np.array(values, dtype=np.float64).reshape(len(values), _WIDTH)

    def _after_copy(self, db: Any, table: str, column: str) -> None:
        # the copied rows kept their ids: the serial's next value must follow them
        db.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
            f"(SELECT coalesce(max({column}), 0) + 1 FROM {table}), false)"
        )

    def _claim_keys(self, db: Any, keys: list[int]) -> set[int]:
        rows = db.execute(
            "INSERT INTO observation_keys SELECT unnest(?::bigint[]) "
            "ON CONFLICT (key) DO NOTHING RETURNING key",
            (keys,),
        ).fetchall()
        return {k for (k,) in rows}

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError("PostgreSQL needs psycopg: pip install 'recrawl[postgres]'") from None
        try:
            return _Conn(psycopg.connect(self._url, autocommit=True))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.path}: {exc}".strip()) from None
