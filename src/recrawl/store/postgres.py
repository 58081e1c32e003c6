"""PostgreSQL: the store for several machines.

Same schema and behaviour as the SQLite store. Writers are serialised with a
transaction-level advisory lock (what ``BEGIN IMMEDIATE`` does in SQLite), so
ingests from several processes or machines apply each page's observations in
time order. Open it with a URL: ``--db postgresql://user@host/dbname``; an
optional ``?options=-csearch_path%3Dname`` selects a schema.

Writes by other connections are announced: a statement-level trigger on the
tables a plan reads (pages, through the ``meta`` counter every write to pages
bumps; site controls; canaries) sends a ``NOTIFY`` on
:data:`CHANNEL` carrying the schema's name, and
:meth:`PostgresStore.outside_writes` counts those that came from another
connection (what SQLite's ``data_version`` tells). The first open of a store
creates those triggers; like the rest of the schema's DDL, that needs the owner
of the tables. A pooler in session mode (PgBouncer ``pool_mode = session``) is
fine; one that pools transactions cannot carry ``LISTEN``: give a service that
must see other processes' writes a direct connection.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from recrawl._exceptions import StoreError, StoreFull
from recrawl.store._sql import BUCKET_WIDTH, SQLStore, padded_buckets

__all__ = ["CHANNEL", "PostgresStore"]

_log = logging.getLogger(__name__)

_LOCK_KEY = 0x72656372  # "recr": the advisory lock every writer takes, per schema
# (the second key: the schema's, so stores in other schemas of the database
# neither wait for nor block this one's writers)
_KEYS = f"{_LOCK_KEY}, hashtext(coalesce(current_schema(), ''))"
_WRITE_LOCK = f"SELECT pg_advisory_xact_lock({_KEYS})"  # until the transaction ends
# the planning role among replicas: a session lock on its own connection, which
# the holder's death (its connection closed) releases
_PLANNER_KEYS = f"{_LOCK_KEY + 1}, hashtext(coalesce(current_schema(), ''))"

#: The ``LISTEN``/``NOTIFY`` channel on which a committed write to a watched
#: table is announced; the payload is the schema of the table.
CHANNEL = "recrawl_writes"
# What a plan reads: pages, site controls and canaries. Pages are watched
# through ``meta``: every transaction that writes pages (ingest, URLs, canaries)
# bumps the ``pages_gen`` counter there, on which the page caches of other
# connections already rely. A trigger on pages itself would run once per row
# of an ingest (psycopg's executemany runs one statement per row): 3 to 9 µs
# each, measured, against once per transaction on meta.
_WATCHED = ("meta", "sites", "canaries")
_TRIGGER = "recrawl_notify"
_NOTIFY_FUNCTION = f"""
CREATE OR REPLACE FUNCTION recrawl_notify_write() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    PERFORM pg_notify('{CHANNEL}', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$body$
"""


@lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (recrawl's SQL has no literal ``?`` or ``%``)."""
    return sql.replace("?", "%s")


def _raise_full(exc: Exception) -> None:
    """:class:`~recrawl.StoreFull` for the server's ``disk_full`` (SQLSTATE 53100)."""
    if getattr(exc, "sqlstate", None) == "53100":
        raise StoreFull(
            f"the PostgreSQL store is full (no space left on the server's disk): this write "
            f"was rolled back and nothing of it is stored; what was stored before is intact. "
            f"Free space and send it again ({exc})"
        ) from exc


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
            self.conn.execute(_WRITE_LOCK)
            return None
        if head.startswith(("COMMIT", "ROLLBACK")):
            self.in_transaction = False
        try:
            return self.conn.execute(_pg(sql), args or None)
        except Exception as exc:
            _raise_full(exc)
            raise

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            try:
                with self.conn.cursor() as cur:
                    cur.executemany(_pg(sql), rows)
            except Exception as exc:
                _raise_full(exc)
                raise

    def executescript(self, script: str) -> None:
        self.conn.execute(f"SELECT pg_advisory_lock({_KEYS})")  # one migrator at a time
        try:
            for stmt in script.split(";"):
                if stmt.strip():
                    self.conn.execute(stmt)
        finally:
            self.conn.execute(f"SELECT pg_advisory_unlock({_KEYS})")

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
        "BYTES": "BYTEA",
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
        self._own_pid = 0  # the backend of the store's connection (set by _connect)
        self._listen: Any = None  # the LISTEN connection, opened by the first outside_writes
        self._listen_lock = threading.Lock()
        self._listen_failed = False  # since the last failure to listen (logged once)
        self._schema: str | None = None
        self._foreign = 0
        self._planner_conn: Any = None  # holds the planning role's session lock
        self._planner_held = False
        self._planner_lock = threading.Lock()
        super().__init__(half_life_days=half_life_days, maintain_buckets=maintain_buckets)
        try:
            self._watch_writes()
        except Exception as exc:
            self._db.close()
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from None

    def _vectors(self, mat: np.ndarray[Any, np.dtype[np.float64]], *, sparse: bool) -> list[Any]:
        out: list[Any] = mat.tolist()
        return out

    def _unvectors(
        self, values: Sequence[Any], *, sparse: bool
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        if all(len(v) == BUCKET_WIDTH for v in values):
            return np.array(values, dtype=np.float64).reshape(len(values), BUCKET_WIDTH)
        return padded_buckets(values)  # vectors of an older, shorter layout

    def _columns(self, db: Any, table: str) -> set[str]:
        rows = db.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def _after_copy(self, db: Any, table: str, column: str) -> None:
        # the copied rows kept their ids: the serial's next value must follow them
        db.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
            f"(SELECT coalesce(max({column}), 0) + 1 FROM {table}), false)"
        )

    def _after_bulk(self, db: Any, *tables: str) -> None:
        # fresh statistics: without them (autovacuum off, or not yet run) the
        # planner takes a large table for a small one and scans it whole for
        # every lookup of a few pages (the fold's hint-log read: 100 ms a batch)
        for table in tables:
            db.execute(f"ANALYZE {table}")  # (autocommit: a transaction of its own)

    def _claim_keys(self, db: Any, keys: list[int]) -> set[int]:
        rows = db.execute(
            "INSERT INTO observation_keys SELECT unnest(?::bigint[]) "
            "ON CONFLICT (key) DO NOTHING RETURNING key",
            (keys,),
        ).fetchall()
        return {k for (k,) in rows}

    def _connect(self) -> Any:
        conn = self._psycopg_connect()
        try:
            # the server process, which notifications name: behind a pooler, the
            # id told at connection (``conn.info.backend_pid``) is the pooler's own
            self._own_pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        except Exception as exc:
            conn.close()
            raise StoreError(f"cannot connect to {self.path}: {exc}".strip()) from None
        return _Conn(conn)

    def _psycopg_connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError("PostgreSQL needs psycopg: pip install 'recrawl[postgres]'") from None
        try:
            return psycopg.connect(self._url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.path}: {exc}".strip()) from None

    def _open_reader(self) -> Any:
        """A second connection, for the reads that run outside the store's lock
        (each in a ``REPEATABLE READ`` read-only transaction: one snapshot)."""
        return _Conn(self._psycopg_connect())

    @contextlib.contextmanager
    def _pages_snapshot(self, db: Any) -> Iterator[None]:
        """One snapshot for the reads of :meth:`page_columns` (its count, rows
        and the set they are of), in a read-only transaction its cursor lives in."""
        db.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):  # (the error that ended the read is raised)
                db.conn.execute("ROLLBACK")
            raise
        db.conn.execute("COMMIT")

    def _stream(self, db: Any, sql: str, chunk: int) -> Any:
        """A server-side cursor, ``chunk`` rows a fetch: psycopg's default
        cursor holds every row of the result at once (a few hundred bytes a
        page, for the whole table)."""
        cur = db.conn.cursor(name="recrawl_page_columns")
        cur.itersize = chunk
        cur.execute(_pg(sql))
        return cur

    def _begin_read(self, db: Any) -> None:
        # straight to psycopg: _Conn's BEGIN would take the writers' advisory lock
        db.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def _watch_writes(self) -> None:
        """Create the triggers that announce writes on :data:`CHANNEL`, unless there
        (opening a store that has them writes nothing). It takes the owner of the
        tables, as the schema's own DDL does."""
        conn = self._db.conn
        have = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname = %s AND tgrelid = ANY(%s::regclass[])",
            (_TRIGGER, list(_WATCHED)),
        ).fetchone()[0]
        if have == len(_WATCHED):
            return
        with conn.transaction():
            conn.execute(_WRITE_LOCK)  # one migrator
            conn.execute(_NOTIFY_FUNCTION)
            for table in _WATCHED:
                # DROP and CREATE rather than CREATE OR REPLACE TRIGGER (PostgreSQL 14+)
                conn.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON {table}")
                conn.execute(
                    f"CREATE TRIGGER {_TRIGGER} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
                    f"ON {table} FOR EACH STATEMENT EXECUTE FUNCTION recrawl_notify_write()"
                )

    def outside_writes(self) -> int:
        """How many transactions of other connections wrote to the pages, site
        controls or canaries of this store since the first call (which returns 0).

        Writes through this store object do not count; those of another
        ``PostgresStore`` on the same database and schema do, in this process or
        another. Reads the notifications already received on a connection that
        listens on :data:`CHANNEL`, without waiting for the database (but for
        opening that connection, at the first call). When that connection
        breaks, the count moves by one (writes may have gone unseen) and the
        connection is opened again at once (when that fails, at the next call).

        A failure to listen (the connection lost, or one that cannot be opened)
        is logged at WARNING on the ``recrawl.store.postgres`` logger with the
        error, once until listening works again, which is logged at INFO.
        """
        import psycopg

        with self._listen_lock:
            for _ in range(2):  # a connection found lost is opened again at once
                try:
                    if self._listen is None:
                        conn = self._psycopg_connect()
                        try:
                            self._schema = conn.execute("SELECT current_schema()").fetchone()[0]
                            conn.execute(f"LISTEN {CHANNEL}")
                        except BaseException:
                            conn.close()
                            raise
                        self._listen = conn
                        if self._listen_failed:
                            self._listen_failed = False
                            _log.info(
                                "listening for other connections' writes to %s again", self.path
                            )
                    while True:  # each call yields what one read from the socket brought
                        got = list(self._listen.notifies(timeout=0))
                        if not got:
                            break
                        self._foreign += sum(
                            n.pid != self._own_pid and n.payload == self._schema for n in got
                        )
                    break
                except (psycopg.Error, StoreError) as exc:
                    self._listen_broke(exc)
                    if self._listen is None:  # cannot open it: the next call tries again
                        break
                    # lost: what came meanwhile is unknown. Listening again before
                    # returning covers the writes after the caller reads the store.
                    self._listen.close()
                    self._listen = None
                    self._foreign += 1
            return self._foreign

    def _listen_broke(self, exc: Exception) -> None:
        """Log the first failure to listen since listening last worked."""
        if self._listen_failed:
            return
        self._listen_failed = True
        error = " ".join(str(exc).split())  # psycopg's messages run over several lines
        if self._listen is None:
            _log.warning(
                "cannot listen for other connections' writes to %s, trying again at each "
                "call (their writes go unnoticed meanwhile): %s",
                self.path,
                error,
            )
        else:
            _log.warning(
                "lost the connection listening for other connections' writes to %s, "
                "opening it again: %s",
                self.path,
                error,
            )

    def hold_planner(self) -> bool:
        """Take, or keep, the planning role (see :meth:`SQLStore.hold_planner
        <recrawl.store.SQLStore.hold_planner>`): a session advisory lock
        (``pg_try_advisory_lock``, per schema) on a connection of its own, which
        the server releases when that connection ends: the holder's process
        died, or the network between them broke. Checked at each call: a
        connection found broken has lost the role, and the lock is tried again."""
        with self._planner_lock:
            conn = self._planner_conn
            if conn is not None and self._planner_held:
                try:
                    conn.execute("SELECT 1")
                    return True
                except Exception:  # the session is gone, and the lock with it
                    self._drop_planner_conn()
                    conn = None
            try:
                if conn is None:
                    conn = self._psycopg_connect()
                    self._planner_conn = conn
                got = conn.execute(f"SELECT pg_try_advisory_lock({_PLANNER_KEYS})").fetchone()
            except Exception as exc:
                _log.warning("cannot try the planning role on %s: %s", self.path, exc)
                self._drop_planner_conn()
                return False
            self._planner_held = bool(got[0])
            return self._planner_held

    def _drop_planner_conn(self) -> None:
        conn, self._planner_conn = self._planner_conn, None
        self._planner_held = False
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def release_planner(self) -> None:
        with self._planner_lock:
            if self._planner_conn is not None and self._planner_held:
                with contextlib.suppress(Exception):  # at once, not when the server notices
                    self._planner_conn.execute(f"SELECT pg_advisory_unlock({_PLANNER_KEYS})")
            self._drop_planner_conn()

    def close(self) -> None:
        self.release_planner()
        with self._listen_lock:
            if self._listen is not None:
                self._listen.close()
                self._listen = None
        super().close()
