"""The SQL store shared by the SQLite and PostgreSQL backends.

All SQL of recrawl lives here, written once in the dialect both engines
accept (``INSERT ... ON CONFLICT``, ``?`` placeholders translated for
PostgreSQL). A backend supplies a connection with ``execute``,
``executemany``, ``executescript`` and ``in_transaction``, and the column types
of its DDL. Each write is one transaction that starts with ``BEGIN IMMEDIATE``
(on PostgreSQL: ``BEGIN`` and a transaction-level advisory lock), so writers are
serialised and what a write method has returned is committed (fsynced too
unless a SQLite store runs with ``durability = "normal"``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any, ClassVar, Final, Literal

import numpy as np
import orjson
from numpy.typing import NDArray

from recrawl._exceptions import StoreError
from recrawl.observe.batch import CANARY_CODES, LOG_FIELDS, ObservationColumns
from recrawl.observe.observation import Observation, host_of
from recrawl.observe.sitemaps import Hint
from recrawl.records.buckets import (
    BUCKET_SECONDS,
    LATENCY_BINS,
    LATENCY_EDGES_MS,
    OUTCOMES,
    BucketArrays,
)
from recrawl.records.evidence import EVIDENCE_COLUMNS, PlannerBins, bins_from_blobs
from recrawl.records.pages import (
    CONTENT_OUTCOMES,
    MUTABLE_FIELDS,
    ROW_FIELDS,
    PageArrays,
    PageState,
    new_page_row,
    page_from_row,
    page_row,
)
from recrawl.records.signals import SPEND_COLUMNS, SpendRow
from recrawl.records.strings import CodeBuilder, StringColumn
from recrawl.store._protocol import ContentHistory, GroupTotals, HintResult, HintRows
from recrawl.store.hintfold import fold_hints

__all__ = ["SQLStore", "SQLWrite"]

_log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 7
_OUT_IDX: Final = {o: i for i, o in enumerate(OUTCOMES)}
_EDGES: Final = [float(e) for e in LATENCY_EDGES_MS]
# Layout of one bucket delta: n, outcome counts, then the scalar sums, then the
# histogram, then the fetches that failed before their page's first success (a
# failed first fetch is not a revisit; last, since schema 5, so that the sparse
# vectors of older stores read the same).
_SCALARS: Final = (
    "bytes_sent", "bytes_received", "credits", "rendered", "conditional",
    "canary_ok", "canary_mismatch", "lat_count", "lat_sum",
)  # fmt: skip
_O0: Final = 1
_S0: Final = _O0 + len(OUTCOMES)
_H0: Final = _S0 + len(_SCALARS)
_F0: Final = _H0 + LATENCY_BINS
BUCKET_WIDTH: Final = _F0 + 1
_BUCKET_COLS: Final = (
    ["n"]
    + [f"o_{o}" for o in OUTCOMES]
    + list(_SCALARS)
    + [f"h{i}" for i in range(LATENCY_BINS)]
    + ["failed_first"]
)

_SPEND_UPSERT: Final = (
    f"INSERT INTO signal_spend ({', '.join(SPEND_COLUMNS)}) VALUES "
    f"({', '.join('?' * len(SPEND_COLUMNS))}) ON CONFLICT (site, signal) DO UPDATE SET "
    + ", ".join(f"{c} = signal_spend.{c} + excluded.{c}" for c in SPEND_COLUMNS[2:])
)


def _spend_row(r: Sequence[Any]) -> SpendRow:
    return (
        str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4]),
        int(r[5]), float(r[6]), float(r[7]), int(r[8]),
    )  # fmt: skip


_PAGE_NUMBERS: Final = (
    ("value", np.float64), ("first_seen", np.float64), ("last_ok", np.float64),
    ("last_fetch", np.float64), ("ev_nc", np.float64), ("ev_tc", np.float64),
    ("ev_nu", np.float64), ("ev_tu", np.float64), ("nutch_interval", np.float64),
    ("avg_bytes", np.float64), ("gone", np.bool_), ("fails", np.int64), ("moved", np.bool_),
    ("fetches", np.int64), ("bytes_total", np.float64), ("credits_total", np.float64),
)  # fmt: skip
"""The number columns of :meth:`SQLStore.page_columns`, in the order it selects them."""
_PAGE_SQL: Final = {"moved": "CASE WHEN moved_to IS NULL THEN 0 ELSE 1 END"}
"""The expression :meth:`SQLStore.page_columns` selects for a number column
that is not a column of ``pages`` of that name."""
PAGE_COLUMNS: Final = (
    "id", "url", "site", "page_type", *(name for name, _ in _PAGE_NUMBERS), "ev_bins",
)  # fmt: skip
"""The keys of :meth:`SQLStore.page_columns`."""
_PAGE_CHUNK = 2_000
"""Rows of the pages table :meth:`SQLStore.page_columns` reads at once. Its
row tuples are freed after each chunk, but the memory they took stays with
the process (Python's allocator keeps an arena while one object in it
lives, and the URLs read meanwhile live on): 10,000 rows a chunk instead
of 50,000 took a 100,000-page service's peak from 1,226 to 814 bytes a page.
A chunk of 2,000 (a row about 1 KB as tuples) holds 2 MB at once; 10,000
held 10 MB, a third of the peak of the page columns at 100,000 pages
(tracemalloc: 450 -> 345 bytes a page), and the reads took no longer."""
_OBS_COLS: Final = ("key", "page", "fetched_at", "outcome", "fixed", "rest")
# The log: an observation's page, time and outcomes as columns, its other
# fields (LOG_FIELDS) as one JSON array in ``rest``. A row of six columns costs
# SQLite a third less to insert than one of twenty (measured), and the log is
# only read page by page.

# Buckets: one row per (start, series), where a series is one (site, page_type,
# route). The row's integer key ``k`` is the bucket's number (start //
# BUCKET_SECONDS) shifted left by 32 bits, plus the series id: one B-tree,
# ordered by time, and one integer to seek on upsert (a composite primary key
# is a second B-tree, measured ~40 % slower). The figures of a bucket are one
# float64 vector ``v`` (layout ``_BUCKET_COLS``); a sparse log has about as many
# 15-minute buckets as observations, most of whose 49 figures are zero, so in
# SQLite a 15-minute vector is stored sparse (a 64-bit mask of the nonzero
# columns, then their values: ~80 bytes instead of 392) while the daily ones,
# few and dense, are stored whole. ``n`` (fetches) is also a column, for quick sums.
_DDL: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pages (
    id {PAGEID},
    url TEXT NOT NULL UNIQUE,
    site TEXT NOT NULL,
    page_type TEXT NOT NULL,
    value {REAL} NOT NULL DEFAULT 1,
    first_seen {REAL} NOT NULL,
    last_fetch {REAL}, last_ok {REAL}, last_change {REAL},
    fingerprint TEXT, etag TEXT, last_modified TEXT,
    fetches INTEGER NOT NULL DEFAULT 0,
    changes INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    credits_total {REAL} NOT NULL DEFAULT 0,
    avg_bytes {REAL} NOT NULL DEFAULT 0,
    ev_nc {REAL} NOT NULL DEFAULT 0, ev_tc {REAL} NOT NULL DEFAULT 0,
    ev_nu {REAL} NOT NULL DEFAULT 0, ev_tu {REAL} NOT NULL DEFAULT 0,
    ev_bins {BYTES},
    nutch_interval {REAL} NOT NULL DEFAULT 2592000,
    fails INTEGER NOT NULL DEFAULT 0,
    gone INTEGER NOT NULL DEFAULT 0,
    moved_to TEXT
);
CREATE INDEX IF NOT EXISTS pages_site ON pages (site, page_type);
CREATE TABLE IF NOT EXISTS observation_keys (key {BIGINT} PRIMARY KEY);
CREATE TABLE IF NOT EXISTS observations (
    seq {SEQ},
    key {BIGINT} NOT NULL,
    page {BIGINT} NOT NULL,
    fetched_at {REAL} NOT NULL,
    outcome TEXT NOT NULL,
    fixed TEXT,
    rest TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS observations_page_time ON observations (page, fetched_at);
CREATE TABLE IF NOT EXISTS series (
    id {PAGEID}, site TEXT NOT NULL, page_type TEXT NOT NULL, route TEXT NOT NULL,
    UNIQUE (site, page_type, route)
);
CREATE TABLE IF NOT EXISTS buckets (k {PAGEID}, n {BIGINT} NOT NULL, v {VEC} NOT NULL);
CREATE TABLE IF NOT EXISTS buckets_daily (k {PAGEID}, n {BIGINT} NOT NULL, v {VEC} NOT NULL);
CREATE TABLE IF NOT EXISTS sites (
    site TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0,
    cost_multiplier {REAL} NOT NULL DEFAULT 1,
    concurrency_cap INTEGER,
    band TEXT NOT NULL DEFAULT 'unknown',
    updated_at {REAL}
);
CREATE TABLE IF NOT EXISTS site_events (
    id {SEQ}, site TEXT NOT NULL, at {REAL} NOT NULL, kind TEXT NOT NULL, detail TEXT
);
CREATE TABLE IF NOT EXISTS health_history (
    site TEXT NOT NULL, at {REAL} NOT NULL, report TEXT NOT NULL, PRIMARY KEY (site, at)
) {WR};
CREATE TABLE IF NOT EXISTS health_state (site TEXT PRIMARY KEY, at {REAL} NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    url TEXT PRIMARY KEY, lease_id TEXT NOT NULL UNIQUE, worker TEXT NOT NULL, site TEXT NOT NULL,
    reason TEXT NOT NULL, leased_at {REAL} NOT NULL, expires_at {REAL} NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_site ON leases (site);
CREATE INDEX IF NOT EXISTS leases_expiry ON leases (expires_at);
CREATE TABLE IF NOT EXISTS canaries (
    url TEXT PRIMARY KEY, site TEXT NOT NULL, expect TEXT NOT NULL,
    every_s {REAL} NOT NULL, added_at {REAL} NOT NULL
);
CREATE TABLE IF NOT EXISTS page_checkpoints (
    page {PAGEID},
    until {REAL} NOT NULL,
    reached INTEGER NOT NULL,
    first_seen {REAL} NOT NULL,
    last_fetch {REAL}, last_ok {REAL}, last_change {REAL},
    fingerprint TEXT, etag TEXT, last_modified TEXT,
    fetches {BIGINT} NOT NULL, changes {BIGINT} NOT NULL, bytes_total {BIGINT} NOT NULL,
    credits_total {REAL} NOT NULL, avg_bytes {REAL} NOT NULL,
    ev_nc {REAL} NOT NULL, ev_tc {REAL} NOT NULL, ev_nu {REAL} NOT NULL, ev_tu {REAL} NOT NULL,
    ev_bins {BYTES},
    nutch_interval {REAL} NOT NULL, fails {BIGINT} NOT NULL DEFAULT 0, gone INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS hints (
    page {BIGINT} NOT NULL, source TEXT NOT NULL,
    lastmod {REAL} NOT NULL, first_seen {REAL} NOT NULL, last_seen {REAL} NOT NULL,
    lastmod_seen {REAL} NOT NULL,
    PRIMARY KEY (page, source)
) {WR};
CREATE TABLE IF NOT EXISTS hint_log (
    page {BIGINT} NOT NULL, source TEXT NOT NULL, lastmod {REAL} NOT NULL,
    first_seen {REAL} NOT NULL,
    PRIMARY KEY (page, source, lastmod)
) {WR};
CREATE TABLE IF NOT EXISTS published_plan (
    one INTEGER PRIMARY KEY, generation {BIGINT} NOT NULL, cycle {BIGINT} NOT NULL,
    mark {BIGINT} NOT NULL, body {BYTES} NOT NULL
);
CREATE TABLE IF NOT EXISTS cycle_spend (
    cycle {BIGINT} PRIMARY KEY, spent {REAL} NOT NULL, refunds {BIGINT} NOT NULL
);
CREATE TABLE IF NOT EXISTS signal_spend (
    site TEXT NOT NULL, signal TEXT NOT NULL,
    reads {BIGINT} NOT NULL, read_bytes {REAL} NOT NULL, read_credits {REAL} NOT NULL,
    fetches {BIGINT} NOT NULL, fetch_bytes {REAL} NOT NULL, fetch_credits {REAL} NOT NULL,
    changes {BIGINT} NOT NULL,
    PRIMARY KEY (site, signal)
);
CREATE TABLE IF NOT EXISTS listing_left (
    url TEXT PRIMARY KEY, site TEXT NOT NULL, at {REAL} NOT NULL
);
"""
# A page's ``fails`` counts its consecutive failed fetches (the back-off of
# recrawl.plan.backoff); ``moved_to``, set by ingest, retires a page whose URL
# answered a permanent redirect to a URL that already was a page (the page is
# never planned again). Both came with schema 6.
#
# Replicas (several services on one store, ``Settings.replicas``): the plan the
# planning replica published last (``published_plan``, one row: its
# generation, cycle, observation mark and the plan as compressed JSON) and
# what each plan cycle has spent so far, every replica's leases and reports
# included (``cycle_spend``). Both tables are created when a store is opened:
# no migration.
#
# ``ev_bins`` (schema 7): the page's changed intervals by length bin (12
# float32) and its change-point test (10 float32) as one 88-byte blob
# (recrawl.records.evidence), for the censored likelihood of each page's own
# intervals. NULL (every page of a store migrated from schema 6, until its next
# revisit) reads as all of the page's changed intervals in the bin of their
# mean length ev_tc / ev_nc, the test at rest: exactly the estimate the four
# numbers gave, so a migrated store keeps its estimates.
#
# What each cheap signal cost and found, per site (``signal_spend``, one row
# per (site, signal), running totals: :data:`recrawl.records.signals.SPEND_COLUMNS`):
# its own reads (sitemaps, feeds, listing pages) and the fetches it caused,
# with their wire bytes and credits (the cost in any billing unit is computed
# when read), and the changes those fetches found; the signal ``schedule`` is
# every other fetch. ``listing_left``: item pages that left every listing of
# their site (URL, site, when the crawl noticed). Both tables are created when
# a store is opened: no migration (a store without them had no such figures).
#
# A page's checkpoint (``page_checkpoints``, written by ``prune``): its state
# after the observations that were deleted from its log, all fetched at or
# before ``until`` (unix seconds: the last of them), folded in the log's order
# from a reset page, and whether one of them reached the page (``reached``:
# the failed-first counting of a re-fold needs it). Columns: MUTABLE_FIELDS.
# Stores of schema 5 gain the (empty) table when opened: no migration.
#
# Cheap signals (:mod:`recrawl.hints`): ``hints`` holds the latest word of each
# source on each page (its ``lastmod``, when the source first and last listed
# the page: unix seconds; and ``lastmod_seen``, when it first gave the page its
# current ``lastmod``: that ``lastmod``'s ``first_seen`` in the log); ``hint_log`` each distinct ``lastmod`` a source gave
# a page, with when it was first seen, so a sitemap read again unchanged only
# moves ``last_seen``. Stores of schema 5 gain both (empty) when opened.

# URLs with an observation stored after a mark (sequence numbers: the range
# of the log's primary key), for claim and reported_since
_REPORTED_SINCE: Final = (
    "SELECT o.seq, p.url FROM observations o JOIN pages p ON p.id = o.page WHERE o.seq > ?"
)

_VEC_UPSERT: Final = (
    "INSERT INTO {table} (k, n, v) VALUES (?, ?, ?) "
    "ON CONFLICT (k) DO UPDATE SET n = excluded.n, v = excluded.v"
)
_KEY_SHIFT: Final = 32
_SERIES_MASK: Final = (1 << _KEY_SHIFT) - 1
SPARSE_TABLES: Final = frozenset({"buckets"})
_PAGE_INSERT: Final = f"INSERT INTO pages (id, {', '.join(ROW_FIELDS)}) VALUES ({', '.join('?' * (len(ROW_FIELDS) + 1))})"
_PAGE_UPDATE: Final = (
    f"UPDATE pages SET {', '.join(f'{c} = ?' for c in MUTABLE_FIELDS)} WHERE id = ?"
)
_ID_CACHE_MAX: Final = 65_536
"""URL → page id entries :class:`SQLStore` keeps in memory (about 170 bytes
each: the entry, the URL and the id): the ids of the pages its last writes
touched; the others are read from the ``url`` index (a 1 M-entry cache held
170 MB, and a crawl that visits its pages in turn seldom finds one there)."""
_PAGE_SLOTS: Final = 131_072
"""Slots of the page state cache (:meth:`SQLStore._keep_pages`): a page's
state stays in slot ``id % slots`` until another page takes it, so the pages
reported again soon are read from memory. About 450 bytes a slot once filled
(260 of columns, the URL, fingerprint and validators), 60 MB in all; it was
one row per page id up to 500,000, 130 MB of columns on a large store. With
65,536 slots, ingest of 1 M observations over 100,000 pages
(``benchmarks/ingest.py``) lost 40 % of its speed: a third of the pages were
read from the store again at each visit."""
_GROUP_IDS_MAX: Final = 1 << 22  # page ids whose (site, page_type) group is kept, 4 bytes each
_OBS_INSERT: Final = (
    f"INSERT INTO observations ({', '.join(_OBS_COLS)}) VALUES ({', '.join('?' * len(_OBS_COLS))})"
)
_CHUNK: Final = 500
_MANY_ROWS: Final = 10_000  # rows written at once that call for SQLStore._after_bulk
_DAY_S: Final = 86400
_CP_COLS: Final = ("until", "reached", *MUTABLE_FIELDS)
_CP_UPSERT: Final = (
    f"INSERT INTO page_checkpoints (page, {', '.join(_CP_COLS)}) "
    f"VALUES ({', '.join('?' * (len(_CP_COLS) + 1))}) ON CONFLICT (page) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _CP_COLS)
)
_mutable: Final = attrgetter(*MUTABLE_FIELDS)  # a page's MUTABLE_FIELDS (gone as a bool)
HINT_BATCH: Final = 50_000
"""Hints :meth:`SQLStore.ingest_hints` stores per transaction."""
_HINT_INSERT: Final = (
    "INSERT INTO hints (page, source, lastmod, first_seen, last_seen, lastmod_seen) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_HINT_UPDATE: Final = (
    "UPDATE hints SET lastmod = ?, first_seen = ?, last_seen = ?, lastmod_seen = ? "
    "WHERE page = ? AND source = ?"
)
_HINT_LOG_UPSERT: Final = (
    "INSERT INTO hint_log (page, source, lastmod, first_seen) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (page, source, lastmod) DO UPDATE SET first_seen = CASE "
    "WHEN excluded.first_seen < hint_log.first_seen THEN excluded.first_seen "
    "ELSE hint_log.first_seen END"
)


def _iso(t: float) -> str:
    """Unix seconds as an ISO-8601 UTC time (to the second), for messages."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_CONDITIONAL_AT: Final = LOG_FIELDS.index("conditional")
_VALIDATORS_OFF: Final = "validators_off:"  # meta key of a site whose validators are off
_CONTENT_SQL: Final = ", ".join(f"'{o}'" for o in sorted(CONTENT_OUTCOMES))
_FAR_FUTURE: Final = (
    1e300  # an unbounded ``until`` in SQL (a parameter cannot be inf on every backend)
)


def _hint_rows(cur: Any, width: int) -> HintRows:
    """:class:`HintRows` from a cursor over ``page, source, lastmod, first_seen[,
    last_seen, lastmod_seen]``."""
    code: dict[str, int] = {}
    parts: list[list[NDArray[Any]]] = [[] for _ in range(6)]
    while rows := cur.fetchmany(100_000):
        n = len(rows)
        parts[0].append(np.fromiter((r[0] for r in rows), np.int64, n))
        parts[1].append(np.fromiter((code.setdefault(r[1], len(code)) for r in rows), np.int64, n))
        for j in range(2, width):
            parts[j].append(np.fromiter((r[j] for r in rows), np.float64, n))

    def cat(j: int, dtype: Any) -> Any:
        return np.concatenate(parts[j]) if parts[j] else np.zeros(0, dtype=dtype)

    page = cat(0, np.int64)
    return HintRows(
        page=page,
        source=cat(1, np.int64),
        sources=list(code),
        lastmod=cat(2, np.float64),
        first_seen=cat(3, np.float64),
        last_seen=cat(4, np.float64) if width > 4 else np.full(len(page), np.nan),
        lastmod_seen=cat(5, np.float64) if width > 5 else np.full(len(page), np.nan),
    )


def padded_buckets(rows: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Bucket vectors of mixed lengths (an older layout's are shorter) as one
    matrix of the current width, zeros where a vector ends early."""
    out = np.zeros((len(rows), BUCKET_WIDTH))
    for i, r in enumerate(rows):
        if len(r) > BUCKET_WIDTH:
            raise StoreError(
                f"a bucket vector has {len(r)} figures, more than this version's {BUCKET_WIDTH}: "
                "the store was written by a newer recrawl"
            )
        out[i, : len(r)] = r
    return out


def _bkey(key: int) -> bytes:
    """An observation's key as the table stores it (the first 8 bytes of its idempotency key)."""
    return key.to_bytes(8, "big", signed=True)


def _chunks(items: Sequence[Any], n: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


_BW: Final = BUCKET_SECONDS


def _cache_size(top: int, have: int, most: int = _GROUP_IDS_MAX) -> int:
    """New length of an array kept by page id that must reach id ``top − 1`` (doubling)."""
    return min(max(top, 2 * have, 1024), most)


def bucket_key(start: Any, series: Any) -> Any:
    """The ``k`` of the bucket of ``series`` starting at ``start`` (seconds, a multiple of
    BUCKET_SECONDS); works on integers and int64 arrays alike."""
    return ((start // _BW) << _KEY_SHIFT) | series


def pack_sparse(mat: np.ndarray[Any, np.dtype[np.float64]]) -> list[bytes]:
    """Each row of ``mat`` as a sparse vector: a little-endian 64-bit mask of its
    nonzero columns, then those values (float64, column order).

    >>> m = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.5]])
    >>> [len(b) for b in pack_sparse(m)]
    [16, 24]
    >>> unpack_sparse(pack_sparse(m), 3).tolist()
    [[0.0, 2.0, 0.0], [1.0, 0.0, 3.5]]
    """
    m = np.ascontiguousarray(mat, dtype="<f8")
    r = m.shape[0]
    nz = m != 0
    cnt = nz.sum(axis=1)
    head = np.arange(r) + np.concatenate(([0], np.cumsum(cnt)[:-1])).astype(np.intp)
    out = np.empty(r + int(cnt.sum()), dtype="<u8")
    bits = np.zeros((r, 8), dtype=np.uint8)
    packed = np.packbits(nz, axis=1, bitorder="little")
    bits[:, : packed.shape[1]] = packed
    out[head] = bits.view("<u8").ravel()
    value = np.ones(len(out), dtype=bool)
    value[head] = False
    out[value] = m[nz].view("<u8")
    raw = out.tobytes()
    ends = ((head + 1 + cnt) * 8).tolist()
    return [raw[a:b] for a, b in zip((head * 8).tolist(), ends, strict=True)]


def unpack_sparse(
    blobs: Sequence[bytes], width: int = BUCKET_WIDTH
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The inverse of :func:`pack_sparse`: one dense row per vector."""
    n = len(blobs)
    dense = np.zeros((n, width))
    if not n:
        return dense
    buf = np.frombuffer(b"".join(blobs), dtype="<u8")
    lens = np.fromiter(map(len, blobs), dtype=np.intp, count=n) // 8
    head = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.intp)
    masks = np.ascontiguousarray(buf[head]).view(np.uint8).reshape(n, 8)
    nz = np.unpackbits(masks, axis=1, count=width, bitorder="little").view(bool)
    value = np.ones(len(buf), dtype=bool)
    value[head] = False
    dense[nz] = buf[value].view("<f8")
    return dense


class SQLStore:
    """Pages, the observation log and per-site buckets in a SQL database.

    Safe to share between threads of one process (a lock serialises use of the
    connection); several processes may open the same database.
    Use :class:`~recrawl.store.SQLiteStore` or :class:`~recrawl.store.PostgresStore`.
    """

    #: Column types of the DDL for this backend.
    dialect: ClassVar[dict[str, str]] = {
        "REAL": "REAL",
        "BIGINT": "INTEGER",
        "SEQ": "INTEGER PRIMARY KEY",
        "PAGEID": "INTEGER PRIMARY KEY",
        "WR": "WITHOUT ROWID",
        "VEC": "BLOB",
        "BYTES": "BLOB",
        "JSON_ROW": "json_array({})",
        "SPARSE": "recrawl_sparse",
    }
    path: str

    def __init__(
        self, *, half_life_days: float | None = None, maintain_buckets: bool = True
    ) -> None:
        self.half_life_days = half_life_days
        # Off only to measure what bucket maintenance costs ingest (benchmarks/health_speed.py).
        self.maintain_buckets = maintain_buckets
        self._lock = threading.RLock()
        # url -> page id. Ids never change and are never reused (``remove_urls``
        # keeps a floor under new ones), so the cache stays right when other
        # processes write, but for removals, which the ``urls_removed`` counter in
        # ``meta`` announces; entries are added only after the transaction that
        # created them has committed.
        self._ids: dict[str, int] = {}
        self._removals_seen = 0
        # the URL column page_columns read last and the set of pages it is of
        # (_page_set): taken again while that column lives (a plan holds it)
        # and the pages are the same
        self._last_urls: tuple[tuple[int, int, int], weakref.ref[StringColumn]] | None = None
        # The state of recently written pages, page ``id`` in slot ``id %
        # len(_slot_id)`` when ``_slot_id`` holds ``id`` there (−1: empty),
        # valid while no other connection has written pages (the ``pages_gen``
        # counter in ``meta``); at most _PAGE_SLOTS slots.
        self._cache: PageArrays | None = None
        self._slot_id = np.zeros(0, dtype=np.int64)
        # Each cached page's (site, page_type) group for the buckets (an index of
        # _group_keys; -1: not known), with the same validity as the page cache.
        self._group_of = np.zeros(0, dtype=np.int32)
        self._group_code: dict[tuple[str, str], int] = {}
        self._group_keys: list[tuple[str, str]] = []
        self._gen: int | None = None
        self._series: dict[tuple[str, str, str], int] = {}  # cleared when a write rolls back
        # Per bucket table, the keys (sorted) and rows (dense vectors) this
        # store's last committed ingest wrote: the next batch adds to them in
        # numpy instead of a per-row function in SQL. Same validity as the page cache.
        self._bucket_rows: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
        # The connection of long reads (``content_history``), which run in one
        # snapshot of their own instead of holding ``_lock``: opened at the first
        # such read, by the process in ``_reader_pid``, one read at a time.
        self._reader: Any = None
        self._reader_pid = 0
        self._reader_lock = threading.Lock()
        self._closed = False
        self._db: Any = self._connect()
        try:
            found = self._schema_version()
            if found in (2, 3, 4, 5, 6):
                self._migrate(found)
                found = SCHEMA_VERSION
            if found is not None and found != SCHEMA_VERSION:
                raise StoreError(
                    f"the store {self.path!r} has schema version {found}; this recrawl needs "
                    f"{SCHEMA_VERSION}. Ingest the fetch logs into a new store."
                )
            self._db.executescript(_DDL.format(**self.dialect))
            if found is None:  # opening an existing store writes nothing
                self._db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
                    (str(SCHEMA_VERSION),),
                )
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from None

    durability: str = "full"
    """What a write that returned survives (see :class:`~recrawl.Settings`'s
    ``durability``); on PostgreSQL always ``"full"``."""

    def set_durability(self, durability: Literal["full", "normal"]) -> None:
        """Make the writes from now on ``"full"``ly durable (fsynced at commit)
        or ``"normal"`` (SQLite only; PostgreSQL fsyncs its log at every commit
        whatever is asked here)."""

    def _connect(self) -> Any:
        raise NotImplementedError

    def _open_reader(self) -> Any | None:
        """A new connection to this store for long reads, or None when the backend
        cannot open one that sees the store's data in a snapshot while writers
        go on (those reads then hold the store's lock on its own connection)."""
        return None

    def _begin_read(self, db: Any) -> None:
        """Start a read-only transaction on the reader ``db``: its statements
        all see the store as it was at its first one."""
        db.execute("BEGIN")

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        """A connection on which to run a long read without holding up the
        store's other operations: the reader (see :meth:`_open_reader`), in one
        read transaction, so that all the statements run in the block see one
        snapshot of the store; where the backend has none, the store's own
        connection under its lock (each statement then sees its own snapshot).

        A reader that fails is closed; the next read opens another. One that
        cannot be opened (logged at WARNING) leaves the read on the store's
        connection, under its lock.
        """
        with self._reader_lock:
            db = self._reader
            if db is not None and self._reader_pid != os.getpid():
                # opened before a fork: the parent's to use and close, not this process's
                db = self._reader = None
            if db is None and not self._closed:
                try:
                    db = self._reader = self._open_reader()
                except StoreError as exc:  # the read can still hold the store, as it did
                    _log.warning("long reads of %s hold the store: %s", self.path, exc)
                self._reader_pid = os.getpid()
            if db is not None:
                try:
                    self._begin_read(db)
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    self._reader = None
                    with suppress(Exception):  # already failing with the read's error
                        db.close()
                    raise
                return
        with self._lock:
            yield self._db

    def _migrate(self, found: int) -> None:
        """Bring a store of schema ``found`` (2 to 6) to :data:`SCHEMA_VERSION`.
        One transaction: a crash leaves the store as it was."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            found = self._schema_version() or SCHEMA_VERSION  # another process may have done it
            if found == 2:
                self._buckets_from_2(db)
            if found in (2, 3):
                self._observations_from_3(db)
            if found in (2, 3, 4):
                self._failed_first_from_4(db)
            if found in (2, 3, 4, 5):
                self._pages_from_5(db)
            if found in (2, 3, 4, 5, 6):
                self._bins_from_6(db)
            if found < SCHEMA_VERSION:
                # other connections (an older recrawl still running) drop their
                # cached pages and bucket rows and read the new layout
                self._bump_pages_gen(db, self._pages_gen(db))
            db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _buckets_from_2(self, db: Any) -> None:
        """Schema 2 to 3: the buckets keyed by one integer (and sparse in SQLite)."""
        for table in ("buckets", "buckets_daily"):
            sparse = self.dialect["SPARSE"] if table in SPARSE_TABLES else ""
            db.execute(
                f"CREATE TABLE {table}_3 (k {self.dialect['PAGEID']}, "
                f"n {self.dialect['BIGINT']} NOT NULL, v {self.dialect['VEC']} NOT NULL)"
            )
            db.execute(
                f"INSERT INTO {table}_3 (k, n, v) SELECT "
                f"((start / {_BW}) * {1 << _KEY_SHIFT}) + series, n, {sparse}(v) "
                f"FROM {table}"
            )
            db.execute(f"DROP TABLE {table}")
            db.execute(f"ALTER TABLE {table}_3 RENAME TO {table}")

    def _observations_from_3(self, db: Any) -> None:
        """Schema 3 to 4: the log's own fields of an observation in one JSON array (``rest``)."""
        d = self.dialect
        db.execute(
            f"CREATE TABLE observations_4 (seq {d['SEQ']}, key {d['BIGINT']} NOT NULL, "
            f"page {d['BIGINT']} NOT NULL, fetched_at {d['REAL']} NOT NULL, "
            "outcome TEXT NOT NULL, fixed TEXT, rest TEXT NOT NULL)"
        )
        rest = d["JSON_ROW"].format(", ".join(LOG_FIELDS))
        db.execute(
            "INSERT INTO observations_4 (seq, key, page, fetched_at, outcome, fixed, rest) "
            f"SELECT seq, key, page, fetched_at, outcome, fixed, {rest} FROM observations"
        )
        db.execute("DROP TABLE observations")  # and its index, made again by the DDL
        db.execute("ALTER TABLE observations_4 RENAME TO observations")
        self._after_copy(db, "observations", "seq")

    def _after_copy(self, db: Any, table: str, column: str) -> None:
        """What a backend must do after rows with explicit ids were copied into ``table``."""

    def _after_bulk(self, db: Any, *tables: str) -> None:
        """What a backend must do, outside a transaction, after many rows were
        written to ``tables`` at once (:data:`_MANY_ROWS` or more), for its
        queries to keep their indexes."""

    def _failed_first_from_4(self, db: Any) -> None:
        """Schema 4 to 5: every bucket vector gains its last figure, the first
        fetches other than ``new`` (failures before a page's first success, and
        that success when its outcome is not ``new``), counted from the log into
        the buckets that exist (a store kept without buckets stays so). Vectors
        shorter than the layout read with zeros at the end (:meth:`_unvectors`),
        so only the rows that get a count are written: the migration is one
        pass over the log, and a writer of the old layout still running beside
        the new code leaves short rows that read rightly. The log of a schema-4
        store is whole: ``prune`` came with schema 5."""
        content = ", ".join(f"'{o}'" for o in sorted(CONTENT_OUTCOMES))
        rows = db.execute(
            "SELECT p.site, p.page_type, o.fetched_at, o.rest FROM ("
            "SELECT page, fetched_at, outcome, rest, "
            f"sum(CASE WHEN outcome IN ({content}) THEN 1 ELSE 0 END) OVER "
            "(PARTITION BY page ORDER BY fetched_at, seq ROWS UNBOUNDED PRECEDING) AS reached "
            "FROM observations) o JOIN pages p ON p.id = o.page "
            f"WHERE o.outcome <> 'new' AND o.reached = (CASE WHEN o.outcome IN ({content}) "
            "THEN 1 ELSE 0 END)"
        )
        series = {
            (site, ptype, route): i
            for i, site, ptype, route in db.execute("SELECT id, site, page_type, route FROM series")
        }
        route_at = LOG_FIELDS.index("route")
        fifteen: dict[int, int] = {}
        daily: dict[int, int] = {}
        for site, ptype, t, rest in rows:  # streamed, not fetched whole
            sid = series.get((site, ptype, orjson.loads(rest)[route_at]))
            if sid is None:
                continue
            start = int(t // _BW) * _BW
            k = bucket_key(start, sid)
            fifteen[k] = fifteen.get(k, 0) + 1
            k = bucket_key(start - start % _DAY_S, sid)
            daily[k] = daily.get(k, 0) + 1
        for table, add in (("buckets", fifteen), ("buckets_daily", daily)):
            sparse = table in SPARSE_TABLES
            for chunk in _chunks(sorted(add)):
                q = f"SELECT k, v FROM {table} WHERE k IN ({','.join('?' * len(chunk))})"
                found = db.execute(q, chunk).fetchall()
                if not found:
                    continue
                mat = self._unvectors([v for _, v in found], sparse=sparse).copy()
                mat[:, _F0] += [add[k] for k, _ in found]
                db.executemany(
                    f"UPDATE {table} SET v = ? WHERE k = ?",
                    zip(self._vectors(mat, sparse=sparse), [k for k, _ in found], strict=True),
                )

    def _pages_from_5(self, db: Any) -> None:
        """Schema 5 to 6: pages (and their checkpoints) gain ``fails``, the
        consecutive failed fetches, counted from the log for the pages whose
        last fetch failed (a checkpoint's is 0: a failing run that began
        before the pruned horizon counts from it), and pages gain ``moved_to``
        (NULL: not retired)."""
        added = False
        adds = (
            ("pages", "fails", "INTEGER NOT NULL DEFAULT 0"),
            ("pages", "moved_to", "TEXT"),
            ("page_checkpoints", "fails", f"{self.dialect['BIGINT']} NOT NULL DEFAULT 0"),
        )
        for table, column, kind in adds:
            have = self._columns(db, table)
            # (no table: the DDL makes it, with the column)
            if have and column not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                added = added or (table, column) == ("pages", "fails")
        if not added:
            return
        failing = db.execute(
            "SELECT id, last_ok FROM pages WHERE last_fetch IS NOT NULL "
            "AND (last_ok IS NULL OR last_fetch > last_ok)"
        ).fetchall()
        since = dict(failing)
        counts: list[tuple[int, int]] = []
        for chunk in _chunks(list(since)):
            rows = db.execute(
                "SELECT page, fetched_at, outcome FROM observations "
                f"WHERE page IN ({','.join('?' * len(chunk))}) ORDER BY page, fetched_at, seq",
                chunk,
            ).fetchall()
            for pid, group in groupby(rows, key=itemgetter(0)):
                fails, gone, ok = 0, False, since[pid]
                for _, t, outcome in group:
                    if ok is not None and t <= ok:
                        continue
                    if outcome in CONTENT_OUTCOMES:  # (as apply_observation counts)
                        fails, gone = 0, False
                    else:
                        fails = fails + 1 if outcome != "gone" or gone else 1
                        gone = gone or outcome == "gone"
                if fails:
                    counts.append((fails, pid))
        db.executemany("UPDATE pages SET fails = ? WHERE id = ?", counts)

    def _bins_from_6(self, db: Any) -> None:
        """Schema 6 to 7: pages and their checkpoints gain ``ev_bins``, NULL: read
        as the bin of the page's mean changed length (the estimate it had)."""
        for table in ("pages", "page_checkpoints"):
            have = self._columns(db, table)
            if have and "ev_bins" not in have:  # (no table: the DDL makes it, with the column)
                db.execute(f"ALTER TABLE {table} ADD COLUMN ev_bins {self.dialect['BYTES']}")

    def _columns(self, db: Any, table: str) -> set[str]:
        """The columns of ``table`` (empty: no such table), in the transaction of ``db``."""
        return {r[0] for r in db.execute("SELECT name FROM pragma_table_info(?)", (table,))}

    def _schema_version(self) -> int | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except Exception:  # no meta table yet: a new store
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            return None
        return None if row is None else int(row[0])

    # -- writing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One small write transaction on the store's connection, under its
        lock: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the block raises."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _bump_own_pages_gen(self, db: Any) -> int:
        """Bump ``pages_gen`` inside a write; returns the generation it was at
        (this store's caches stay valid if they were at it: see :meth:`_pages_written`)."""
        gen = self._pages_gen(db)
        self._bump_pages_gen(db, gen)
        return gen

    def _pages_written(self, gen: int) -> None:
        """After the commit of a write that bumped ``pages_gen`` from ``gen``:
        this store's own write, so its caches follow when they were current."""
        if self._gen == gen:
            self._gen = gen + 1

    @contextmanager
    def writing(self) -> Iterator[SQLWrite]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``; rolled back
        if the block raises), with the data operations of :class:`SQLWrite`.
        The ingest pipeline (:func:`recrawl.engine.pipeline.store_batch`) and
        the prune run in these. Writers are serialised, in this process and
        across processes sharing the store."""
        with self._lock:
            db = self._db
            tx = SQLWrite(self, db)
            try:
                db.execute("BEGIN IMMEDIATE")
                gen = self._pages_gen(db)
                if gen != self._gen:  # another connection wrote pages: forget their state
                    self._slot_id[:] = -1
                    self._group_of[:] = -1
                    self._bucket_rows.clear()
                self._gen = None  # until this transaction has committed
                yield tx
                self._bump_pages_gen(db, gen)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                self._series.clear()
                self._bucket_rows.clear()
                raise
            self._gen = gen + 1
            self._remember_ids(tx.new_ids)

    def log_counts_before(self, before: float) -> list[tuple[int, int]]:
        """``(page id, rows)`` of the pages with log rows fetched before ``before``, by id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT page, count(*) FROM observations WHERE fetched_at < ? "
                "GROUP BY page ORDER BY page",
                (before,),
            ).fetchall()
        return [(int(p), int(c)) for p, c in rows]

    def _pages_gen(self, db: Any) -> int:
        return self._meta_int(db, "pages_gen")

    def _bump_pages_gen(self, db: Any, gen: int) -> None:
        """Count a write to pages, so other connections know their cached states are stale."""
        self._set_meta(db, "pages_gen", gen + 1)

    def _remember_ids(self, new_ids: dict[str, int]) -> None:
        if len(self._ids) + len(new_ids) > _ID_CACHE_MAX:
            self._ids.clear()  # bounded memory: start again from the store
        self._ids.update(new_ids)

    def _claim_keys(self, db: Any, keys: list[int]) -> Collection[int]:
        """Record ``keys`` (distinct) as stored; returns those that were not already
        there: ``keys`` itself when none was (the common case builds no set)."""
        rows: list[tuple[int]] = []
        for chunk in _chunks(keys, 20_000):
            rows += db.execute(
                "INSERT INTO observation_keys SELECT value FROM json_each(?) WHERE true "
                "ON CONFLICT (key) DO NOTHING RETURNING key",
                (orjson.dumps(list(chunk)).decode(),),
            ).fetchall()
        if len(rows) == len(keys):
            return keys
        return {k for (k,) in rows}

    def _known_ids(self, db: Any, urls: Sequence[str]) -> list[int | None]:
        """The id of each of ``urls`` (None: not a page yet), from the cache, then the store."""
        removals = self._meta_int(db, "urls_removed")
        if removals != self._removals_seen:  # pages were removed: cached ids may be gone
            self._ids.clear()
            self._removals_seen = removals
        found: list[int | None] = list(map(self._ids.get, urls))
        missing = [u for u, i in zip(urls, found, strict=True) if i is None]
        if missing:
            stored: dict[str, int] = {}
            for chunk in _chunks(missing):
                q = f"SELECT url, id FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
                stored.update(db.execute(q, chunk).fetchall())
            if stored:
                found = [
                    stored.get(u) if i is None else i for u, i in zip(urls, found, strict=True)
                ]
        return found

    def _page_ids(self, db: Any, urls: Sequence[str]) -> dict[str, int]:
        """Ids of the known pages among ``urls`` (from the cache, then the store)."""
        return {u: i for u, i in zip(urls, self._known_ids(db, urls), strict=True) if i is not None}

    def _next_page_id(self, db: Any) -> int:
        """One above every id a page ever had (removed pages' ids are not reused)."""
        top = int(db.execute("SELECT coalesce(max(id), 0) FROM pages").fetchone()[0])
        return max(top, self._meta_int(db, "page_id_floor")) + 1

    def _meta(self, db: Any, key: str) -> str | None:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _meta_int(self, db: Any, key: str) -> int:
        value = self._meta(db, key)
        return 0 if value is None else int(value)

    def _meta_float(self, db: Any, key: str) -> float | None:
        value = self._meta(db, key)
        return None if value is None else float(value)

    def _set_meta(self, db: Any, key: str, value: object) -> None:
        db.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, str(value)),
        )

    def _count_in_meta(self, db: Any, key: str, by: int = 1) -> int:
        """Add ``by`` to the counter ``key`` in ``meta``; returns its new value."""
        value = self._meta_int(db, key) + by
        self._set_meta(db, key, value)
        return value

    def _move_pages(
        self, db: Any, moves: dict[int, tuple[str, int | None]], new_ids: dict[str, int]
    ) -> None:
        """Permanent redirects: page id → (target URL, status of the report).
        A page whose target is no page yet takes the target's URL, with its
        history (a redirect not followed, a 3xx, leaves no failure to back
        off from: the new URL is fetched as soon as the plan wants it); one
        whose target is a page already is retired (``moved_to``: never
        planned again). In the caller's transaction; ``new_ids`` gets the
        renamed pages' URLs, for the id cache after the commit."""
        renamed = 0
        for pid, (target, status) in moves.items():
            (tid,) = self._known_ids(db, [target])
            if tid == pid:
                continue
            if tid is not None:
                db.execute("UPDATE pages SET moved_to = ? WHERE id = ?", (target, pid))
                continue
            old = db.execute("SELECT url FROM pages WHERE id = ?", (pid,)).fetchone()[0]
            redirect = status is not None and 300 <= status < 400
            db.execute(
                "UPDATE pages SET url = ?, fails = CASE WHEN ? THEN 0 ELSE fails END WHERE id = ?",
                (target, redirect, pid),
            )
            self._ids.pop(old, None)
            new_ids.pop(old, None)
            new_ids[target] = pid
            renamed += 1
            slot = self._slot_of(pid)
            if slot is not None:
                assert self._cache is not None
                self._cache.url[slot] = target
                if redirect:
                    self._cache.fails[slot] = 0
        if renamed:  # other connections' url → id caches: start again from the store
            self._count_in_meta(db, "urls_removed")

    def _upsert_buckets(
        self,
        db: Any,
        table: str,
        keys: np.ndarray[Any, np.dtype[np.int64]],
        mat: np.ndarray[Any, np.dtype[np.float64]],
        *,
        consume: bool = False,
    ) -> None:
        """Add the rows ``mat`` to the buckets ``keys`` (repeats summed) of ``table``.

        The current value of a bucket comes from the rows this store wrote last
        (a batch in time order mostly touches those), else, for a key not above
        the table's largest, from the table; the sums are written whole. With
        ``consume``, when ``keys`` are already strictly increasing (the 15-minute
        deltas of :meth:`_bucket_deltas` are), the sums are made in ``mat`` itself.
        """
        if len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1])):
            total = mat if consume else mat.copy()
        else:
            keys, inv = np.unique(keys, return_inverse=True)
            if len(keys) == len(inv):
                total = np.empty_like(mat)
                total[inv] = mat
            else:  # the rows of each key made adjacent, then summed run by run
                order = np.argsort(inv, kind="stable")
                runs = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
                total = np.add.reduceat(mat[order], runs, axis=0)
        sparse = table in SPARSE_TABLES
        last = self._bucket_rows.get(table)
        hit = np.zeros(len(keys), dtype=bool)
        if last is not None and len(last[0]):
            pos = np.minimum(np.searchsorted(last[0], keys), len(last[0]) - 1)
            hit = last[0][pos] == keys
            total[hit] += last[1][pos[hit]]
        klist = keys.tolist()
        row = db.execute(f"SELECT max(k) FROM {table}").fetchone()
        top = -1 if row is None or row[0] is None else int(row[0])
        maybe = keys <= top
        maybe[hit] = False
        if maybe.any():  # may exist already: read them
            where = {klist[i]: i for i in np.flatnonzero(maybe).tolist()}
            found: list[tuple[int, Any]] = []
            for chunk in _chunks(list(where), _CHUNK):
                q = f"SELECT k, v FROM {table} WHERE k IN ({','.join('?' * len(chunk))})"
                found.extend(db.execute(q, chunk).fetchall())
            if found:
                at = [where[k] for k, _ in found]
                total[at] += self._unvectors([v for _, v in found], sparse=sparse)
        db.executemany(
            _VEC_UPSERT.format(table=table),
            list(
                zip(
                    klist,
                    np.rint(total[:, 0]).astype(np.int64).tolist(),
                    self._vectors(total, sparse=sparse),
                    strict=True,
                )
            ),
        )
        self._bucket_rows[table] = (keys, total)

    def _series_ids(
        self, db: Any, triples: Sequence[tuple[str, str, str]]
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Ids of (site, page_type, route) series, created when new (in this transaction)."""
        cache = self._series
        missing = [k for k in dict.fromkeys(triples) if k not in cache]
        if missing:
            for i, site, ptype, route in db.execute(
                "SELECT id, site, page_type, route FROM series"
            ):
                cache[(site, ptype, route)] = i
            new = [k for k in missing if k not in cache]
            if new:
                nid = int(db.execute("SELECT coalesce(max(id), 0) + 1 FROM series").fetchone()[0])
                rows = [(nid + i, *k) for i, k in enumerate(new)]
                db.executemany(
                    "INSERT INTO series (id, site, page_type, route) VALUES (?, ?, ?, ?)", rows
                )
                for i, *k in rows:
                    cache[(k[0], k[1], k[2])] = i
        return np.array([cache[k] for k in triples], dtype=np.int64)

    def _vectors(self, mat: np.ndarray[Any, np.dtype[np.float64]], *, sparse: bool) -> list[Any]:
        """Each row of ``mat`` as this backend stores a bucket vector (SQLite: bytes,
        :func:`pack_sparse` when ``sparse``, else float64 little-endian)."""
        if sparse:
            return pack_sparse(mat)
        raw = np.ascontiguousarray(mat, dtype="<f8").tobytes()
        w = 8 * mat.shape[1]
        return [raw[i : i + w] for i in range(0, len(raw), w)]

    def _unvectors(
        self, values: Sequence[Any], *, sparse: bool
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The inverse of :meth:`_vectors`: one row per stored vector; one written
        in an older, shorter layout reads with zeros for the figures it lacks."""
        if sparse:
            return unpack_sparse(values)
        raw = b"".join(values)
        if len(raw) == 8 * BUCKET_WIDTH * len(values):
            return np.frombuffer(raw, dtype="<f8").reshape(len(values), BUCKET_WIDTH)
        return padded_buckets([np.frombuffer(v, dtype="<f8") for v in values])

    def _load_pages(
        self,
        db: Any,
        urls: list[str],
        page_id: np.ndarray[Any, np.dtype[np.int64]],
        created: list[int],
        earliest: list[Observation],
    ) -> PageArrays:
        """The state of ``urls`` (ids ``page_id``) before this batch: from the cache, else the store."""
        cache = self._cache
        slots = len(self._slot_id)
        hit = np.zeros(len(urls), dtype=bool)
        if cache is not None and slots:
            hit = self._slot_id[page_id % slots] == page_id
        made = np.zeros(len(urls), dtype=bool)
        made[created] = True
        fetch = np.flatnonzero(~hit & ~made)
        rows_by_id: dict[int, tuple[Any, ...]] = {}
        cols = ", ".join(ROW_FIELDS)
        for chunk in _chunks(page_id[fetch].tolist()):
            q = f"SELECT id, {cols} FROM pages WHERE id IN ({','.join('?' * len(chunk))})"
            for row in db.execute(q, chunk):
                rows_by_id[row[0]] = row[1:]
        miss = np.flatnonzero(~hit)
        rows = []
        for j in miss.tolist():
            row = rows_by_id.get(int(page_id[j]))
            if row is None:
                o = earliest[j]
                row = new_page_row(urls[j], o.site, o.page_type, o.fetched_at)
            rows.append(row)
        if cache is not None and not len(miss):  # every page in the cache
            return cache.take(page_id % slots)
        fresh = PageArrays.from_rows(rows)
        if cache is None or not hit.any():
            return fresh
        got = np.flatnonzero(hit)
        both = PageArrays.concat(cache.take(page_id[got] % slots), fresh)
        return both.take(np.argsort(np.concatenate([got, miss]), kind="stable"))

    def _keep_pages(
        self, page_id: np.ndarray[Any, np.dtype[np.int64]], pages: PageArrays, stale: list[int]
    ) -> None:
        """Remember the pages' state after this batch (``stale`` rows are forgotten).

        Page ``id`` goes to slot ``id % slots``, taking it from the page there;
        the slots double, from 1,024 up to :data:`_PAGE_SLOTS`, while the
        pages held and written would fill more than half of them (a store
        that wrote few pages keeps few slots, however high their ids)."""
        keep = np.ones(len(page_id), dtype=bool)
        keep[stale] = False
        rows = np.flatnonzero(keep)
        if len(rows):
            want = int(np.count_nonzero(self._slot_id >= 0)) + len(rows)
            n = len(self._slot_id)
            if n < _PAGE_SLOTS and (not n or want > n // 2):
                self._grow_slots(
                    min(max(1 << (2 * want - 1).bit_length(), 2 * n, 1024), _PAGE_SLOTS)
                )
            n = len(self._slot_id)
            # one row a slot: the batch's last for a slot two of its pages share
            slot = page_id[rows] % n
            last = len(slot) - 1 - np.unique(slot[::-1], return_index=True)[1]
            rows, slot = rows[last], slot[last]
            assert self._cache is not None
            self._cache.put(slot, pages.take(rows))
            self._slot_id[slot] = page_id[rows]
        self._forget_pages(page_id[stale])

    def _grow_slots(self, n: int) -> None:
        """Make the page state cache ``n`` slots, its pages moved to theirs."""
        old, cache = self._slot_id, self._cache
        grown = (cache or PageArrays.from_rows([])).grown(n)
        ids = np.full(n, -1, dtype=np.int64)
        held = np.flatnonzero(old >= 0)
        if cache is not None and len(held):
            at = old[held] % n
            grown.put(at, cache.take(held))
            ids[at] = old[held]
        self._cache, self._slot_id = grown, ids

    def _slot_of(self, pid: int) -> int | None:
        """The page state cache's slot holding page ``pid``, None when it holds none."""
        n = len(self._slot_id)
        if n and self._slot_id[pid % n] == pid:
            return pid % n
        return None

    def _forget_pages(self, ids: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        """Take pages ``ids`` out of the page state cache."""
        n = len(self._slot_id)
        if n and len(ids):
            slot = ids % n
            self._slot_id[slot[self._slot_id[slot] == ids]] = -1

    def _page_groups(
        self, page_id: np.ndarray[Any, np.dtype[np.int64]], pages: PageArrays
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Each page's (site, page_type) group: an index of ``_group_keys``.

        Kept by page id for the pages the page cache may hold (a page's site and
        page type never change), so a batch of known pages needs no Python loop.
        """
        known = self._group_of
        inside = page_id < len(known)
        gp = np.full(len(page_id), -1, dtype=np.int64)
        gp[inside] = known[page_id[inside]]
        miss = np.flatnonzero(gp < 0)
        if len(miss):
            code, keys = self._group_code, self._group_keys
            for j in miss.tolist():
                key = (pages.site[j], pages.page_type[j])
                c = code.get(key)
                if c is None:
                    c = code[key] = len(keys)
                    keys.append(key)
                gp[j] = c
            keep = miss[page_id[miss] < _GROUP_IDS_MAX]
            if len(keep):
                top = int(page_id[keep].max()) + 1
                if top > len(known):
                    size = _cache_size(top, len(known))
                    known = np.concatenate([known, np.full(size - len(known), -1, np.int32)])
                    self._group_of = known
                known[page_id[keep]] = gp[keep]
        return gp

    def _bucket_deltas(
        self,
        db: Any,
        todo: Sequence[Observation],
        cols: ObservationColumns,
        pidx: np.ndarray[Any, np.dtype[np.intp]],
        codes: np.ndarray[Any, np.dtype[np.int64]],
        gp: np.ndarray[Any, np.dtype[np.int64]],
        canary: np.ndarray[Any, Any],
        failed_first: np.ndarray[Any, np.dtype[np.bool_]],
    ) -> tuple[Any, Any, Any]:
        """One batch's bucket deltas as ``(series, start, matrix)`` (layout: ``_BUCKET_COLS``).

        ``gp`` is the group of each page of the batch (:meth:`_page_groups`);
        ``failed_first`` marks the fetches that failed before their page's first success.
        """
        # routes by the hash the parsing processes computed: no loop over the batch
        _, first, ro = np.unique(cols.route_hash, return_index=True, return_inverse=True)
        route_names = [todo[i].route for i in first.tolist()]
        nr = len(route_names)
        pair = gp[pidx] * nr + ro  # (site, page_type) group and route of each observation
        pairs, pair_inv = np.unique(pair, return_inverse=True)
        group_keys = self._group_keys
        sid = self._series_ids(
            db, [(*group_keys[x // nr], route_names[x % nr]) for x in pairs.tolist()]
        )[pair_inv]
        tb = np.floor_divide(cols.fetched_at, _BW).astype(np.int64)
        t0 = int(tb.min())
        ns = int(sid.max()) + 1
        # window-major, as the buckets table orders its keys (its upsert then needs no sort)
        keys, rows = np.unique((tb - t0) * ns + sid, return_inverse=True)
        r = len(keys)
        mat = np.zeros((r, BUCKET_WIDTH))
        mat[:, 0] = np.bincount(rows, minlength=r)
        k = len(OUTCOMES)
        mat[:, _O0 : _O0 + k] = np.bincount(rows * k + codes, minlength=r * k).reshape(r, k)

        for c, vals in enumerate(
            (cols.bytes_sent, cols.bytes_received, cols.billed, cols.rendered, cols.conditional)
        ):
            mat[:, _S0 + c] = np.bincount(rows, weights=vals, minlength=r)
        lat = cols.latency_ms
        has = ~np.isnan(lat)
        if has.any():
            lr = rows[has]
            la = lat[has]
            mat[:, _S0 + 7] = np.bincount(lr, minlength=r)
            mat[:, _S0 + 8] = np.bincount(lr, weights=la, minlength=r)
            bins = np.searchsorted(LATENCY_EDGES_MS, la, side="left")
            mat[:, _H0:_F0] = np.bincount(
                lr * LATENCY_BINS + bins, minlength=r * LATENCY_BINS
            ).reshape(r, LATENCY_BINS)
        if canary.any():  # each fetch's canary result (the reporter's, or checked at ingest)
            for code, col in ((CANARY_CODES["ok"], _S0 + 5), (CANARY_CODES["mismatch"], _S0 + 6)):
                mat[:, col] += np.bincount(rows, weights=canary == code, minlength=r)
        mat[:, _F0] = np.bincount(rows, weights=failed_first, minlength=r)
        return keys % ns, (keys // ns + t0) * _BW, mat

    def _vouch_rows(
        self, db: Any, pids: NDArray[np.int64], since: NDArray[np.float64] | None
    ) -> list[tuple[int, str, float, float, float]]:
        """The hint-log rows of the pages ``pids`` as ``(page, source, lastmod,
        first_seen, listed)`` (``listed``: when the row's source first listed the
        page): all of them (``since`` None), or, for one revisit of each page
        (``since``: rows prev and at), per source the rows it reads folded into
        one (the earliest ``lastmod`` and sighting: all it takes)."""
        got: list[tuple[int, str, float, float, float]] = []
        d = self.dialect
        triple = f"(CAST(? AS {d['BIGINT']}), CAST(? AS {d['REAL']}), CAST(? AS {d['REAL']}))"
        # (300 pages, 900 values: under the 999 of SQLite builds before 3.32)
        for chunk in _chunks(range(len(pids)), 300):
            args: list[Any] = []
            if since is None:  # every row of the pages
                args = [int(pids[k]) for k in chunk]
                q = (
                    "SELECT h.page, h.source, h.lastmod, h.first_seen, l.first_seen "
                    "FROM hint_log h JOIN hints l ON l.page = h.page AND l.source = h.source "
                    f"WHERE h.page IN ({','.join('?' * len(chunk))})"
                )
            else:
                for k in chunk:
                    args += [int(pids[k]), float(since[0, k]), float(since[1, k])]
                q = (
                    f"WITH v (page, since, until) AS (VALUES {','.join([triple] * len(chunk))}) "
                    "SELECT h.page, h.source, min(h.lastmod), min(h.first_seen), "
                    "min(l.first_seen) "
                    # (CROSS JOIN: SQLite then walks v and seeks each page in the indexes)
                    "FROM v CROSS JOIN hint_log h CROSS JOIN hints l WHERE h.page = v.page "
                    "AND h.lastmod > v.since AND h.first_seen > v.since "
                    "AND h.first_seen <= v.until "
                    "AND l.page = h.page AND l.source = h.source AND l.first_seen <= v.since "
                    "GROUP BY h.page, h.source"
                )
            got.extend(db.execute(q, args))
        return got

    def add_urls(self, rows: Iterable[tuple[str, str, str, float]], now: float) -> int:
        new = {r[0]: r for r in rows}
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                known = self._page_ids(db, list(new))
                for u in known:
                    del new[u]
                # a known URL added again is wanted again: gone or retired, it
                # is revived (its history kept), its failures forgotten
                revived = [
                    i
                    for chunk in _chunks(list(known.values()))
                    for (i,) in db.execute(
                        f"UPDATE pages SET gone = 0, fails = 0, moved_to = NULL WHERE id IN "
                        f"({','.join('?' * len(chunk))}) AND (gone <> 0 OR moved_to IS NOT NULL) "
                        "RETURNING id",
                        chunk,
                    ).fetchall()
                ]
                if revived:
                    self._forget_pages(np.array(revived, dtype=np.int64))
                nid = self._next_page_id(db)
                ids = {u: nid + i for i, u in enumerate(new)}
                db.executemany(
                    "INSERT INTO pages (id, url, site, page_type, value, first_seen) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(ids[u], u, s, t, v, now) for u, s, t, v in new.values()],
                )
                self._count_in_meta(db, "urls_version")
                gen = self._pages_gen(db)
                self._bump_pages_gen(db, gen)
                db.execute("COMMIT")
                if self._gen == gen:  # only new pages were added: the cache stays right
                    self._gen = gen + 1
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._remember_ids(ids)
            return len(new)

    # -- cheap signals (recrawl.hints) -----------------------------------------------------

    def ingest_hints(
        self,
        hints: Iterable[Hint],
        *,
        add_urls: bool = False,
        batch_size: int = HINT_BATCH,
        on_batch: Callable[[HintResult], None] | None = None,
    ) -> HintResult:
        """Keep what sitemaps, feeds and listings say of pages' last changes.

        Per page and source, the latest hint (by ``seen_at``: its ``lastmod``,
        and when the source first and last listed the page) and a log of each
        distinct ``lastmod`` with when it was first seen: a sitemap read again
        unchanged adds no log rows, it only moves ``last_seen`` (and read at the
        same time again, writes nothing). Hints may come in any order. A hint
        for a URL the store does not know (URLs as normalised) is counted and
        skipped, unless ``add_urls`` registers the URL as a new page, as
        ``recrawl urls add`` does (site: its host, page type ``page``, value 1,
        discovered when first seen). One transaction per ``batch_size``
        hints, under the store's lock like :meth:`ingest`; ``on_batch`` gets
        the running totals after each.
        """
        total = HintResult()
        batch: list[Hint] = []
        for h in hints:
            batch.append(h)
            if len(batch) >= batch_size:
                total.add(self._ingest_hint_batch(batch, add_urls))
                batch = []
                if on_batch is not None:
                    on_batch(total)
        if batch:
            total.add(self._ingest_hint_batch(batch, add_urls))
            if on_batch is not None:
                on_batch(total)
        if total.stored >= _MANY_ROWS:  # once, after the whole read
            with self._lock:
                self._after_bulk(self._db, "hints", "hint_log")
        return total

    def _ingest_hint_batch(self, batch: Sequence[Hint], add_urls: bool) -> HintResult:
        """One transaction of :meth:`ingest_hints`."""
        res = HintResult()
        urls = list(dict.fromkeys(h.url for h in batch))
        new_ids: dict[str, int] = {}
        gen = None
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                ids = dict(zip(urls, self._known_ids(db, urls), strict=True))
                missing = [u for u, i in ids.items() if i is None]
                if add_urls and missing:
                    first: dict[str, float] = {}
                    for h in batch:
                        if ids[h.url] is None and h.seen_at < first.get(h.url, math.inf):
                            first[h.url] = h.seen_at
                    nid = self._next_page_id(db)
                    for k, u in enumerate(missing):
                        new_ids[u] = ids[u] = nid + k
                    db.executemany(
                        "INSERT INTO pages (id, url, site, page_type, value, first_seen) "
                        "VALUES (?, ?, ?, 'page', 1, ?)",
                        [(new_ids[u], u, host_of(u), first[u]) for u in missing],
                    )
                    self._count_in_meta(db, "urls_version")
                    gen = self._pages_gen(db)
                    self._bump_pages_gen(db, gen)
                    res.added_urls = len(missing)
                # each (page, source): [lastmod, first_seen, last_seen,
                # 0 as read | 1 changed | 2 new, lastmod_seen]
                state: dict[tuple[int, str], list[float]] = {}
                for chunk in _chunks(sorted({i for i in ids.values() if i is not None})):
                    q = (
                        "SELECT page, source, lastmod, first_seen, last_seen, lastmod_seen "
                        f"FROM hints WHERE page IN ({','.join('?' * len(chunk))})"
                    )
                    for p, src, lm, fs, ls, lms in db.execute(q, chunk):
                        state[(p, src)] = [lm, fs, ls, 0, lms]
                log, moved = fold_hints(batch, ids.__getitem__, state, res)
                for chunk in _chunks(sorted({p for p, _ in moved})):
                    q = (
                        "SELECT page, source, lastmod, first_seen FROM hint_log "
                        f"WHERE page IN ({','.join('?' * len(chunk))})"
                    )
                    for p, src, lm, fs in db.execute(q, chunk):
                        st = state[(p, src)] if (p, src) in moved else None
                        if st is not None and st[0] == lm and fs < st[4]:
                            st[4] = fs
                new = [(p, src, *st[:3], st[4]) for (p, src), st in state.items() if st[3] == 2]
                changed = [(*st[:3], st[4], p, src) for (p, src), st in state.items() if st[3] == 1]
                db.executemany(_HINT_INSERT, new)
                db.executemany(_HINT_UPDATE, changed)
                db.executemany(
                    _HINT_LOG_UPSERT, [(p, src, lm, t) for (p, src, lm), t in log.items()]
                )
                if new or changed:
                    # planners judge their trust in the sources again (recrawl.engine)
                    self._count_in_meta(db, "hints_version")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self._remember_ids(new_ids)
            if gen is not None and self._gen == gen:  # only new pages: the cache stays right
                self._gen = gen + 1
        return res

    def hints_version(self) -> int:
        """A number that grows with every write of hints (cheap to read)."""
        with self._lock:
            return self._meta_int(self._db, "hints_version")

    def hint_state(self) -> HintRows:
        """The latest hint of every page and source: its ``lastmod``, when the
        source first and last listed the page, and when it first gave the page
        that ``lastmod`` (``lastmod_seen``; read on the store's reader,
        like :meth:`content_history`)."""
        with self._snapshot() as db:
            cur = db.execute(
                "SELECT page, source, lastmod, first_seen, last_seen, lastmod_seen FROM hints "
                "ORDER BY page, source"
            )
            return _hint_rows(cur, 6)

    def hint_log(
        self, lastmod_after: float = -math.inf, *, first_seen_after: float = -math.inf
    ) -> HintRows:
        """Each distinct ``lastmod`` a source gave a page (those after
        ``lastmod_after`` and first seen after ``first_seen_after``, unix
        seconds), with when it was first seen: what
        :func:`recrawl.hints.revisit_moves` matches with the revisits."""
        lo = lastmod_after if lastmod_after > -math.inf else -_FAR_FUTURE
        lo_seen = first_seen_after if first_seen_after > -math.inf else -_FAR_FUTURE
        with self._snapshot() as db:
            cur = db.execute(
                "SELECT page, source, lastmod, first_seen FROM hint_log "
                "WHERE lastmod > ? AND first_seen > ? ORDER BY page, source, lastmod",
                (lo, lo_seen),
            )
            return _hint_rows(cur, 4)

    def hint_verdict(self) -> str | None:
        """What :meth:`set_hint_verdict` kept (None: nothing yet)."""
        with self._lock:
            return self._meta(self._db, "hint_verdict")

    def set_hint_verdict(self, value: str) -> None:
        """Keep a planner's judgement of the hint sources (JSON, from
        :class:`recrawl.engine.Engine`), for the next process to reuse. It
        counts as no write of hints (``hints_version`` stays)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                self._set_meta(db, "hint_verdict", value)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def hint_sources(self) -> list[dict[str, Any]]:
        """Per source: ``pages`` it lists, ``lastmods`` (rows of its log), and
        when it was ``first_seen`` and ``last_seen`` (unix seconds)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT source, count(*), min(first_seen), max(last_seen) FROM hints "
                "GROUP BY source ORDER BY source"
            ).fetchall()
            logged = dict(
                self._db.execute("SELECT source, count(*) FROM hint_log GROUP BY source").fetchall()
            )
        return [
            {
                "source": src,
                "pages": int(n),
                "lastmods": int(logged.get(src, 0)),
                "first_seen": float(fs),
                "last_seen": float(ls),
            }
            for src, n, fs, ls in rows
        ]

    def set_values(self, rows: Iterable[tuple[str, float]]) -> int:
        """Set the value of known pages: ``(url, value)``, URLs as normalised;
        unknown URLs are skipped. Returns how many pages' values changed."""
        want = dict(rows)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                have: dict[str, float] = {}
                for chunk in _chunks(list(want)):
                    q = f"SELECT url, value FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
                    have.update(db.execute(q, chunk).fetchall())
                changed = [(want[u], u) for u, v in have.items() if v != want[u]]
                if changed:
                    # ingest never writes a value back, so no page cache goes stale;
                    # the URLs' version tells planners to plan again
                    db.executemany("UPDATE pages SET value = ? WHERE url = ?", changed)
                    self._count_in_meta(db, "urls_version")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return len(changed)

    def remove_urls(self, urls: Sequence[str]) -> int:
        """Delete pages (URLs as normalised) with their observations, leases,
        canary declarations and hints; returns how many were pages. The buckets
        keep what they counted, and the observations' keys stay claimed, so a
        log sent again does not bring a removed page back; a new observation
        does, as a new page (ids are never reused)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                ids: dict[str, int] = {}
                for chunk in _chunks(list(dict.fromkeys(urls))):
                    q = f"SELECT url, id FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
                    ids.update(db.execute(q, chunk).fetchall())
                if ids:
                    top = self._next_page_id(db) - 1
                    seq_top = self._max_seq(db)
                    for chunk in _chunks(list(ids)):
                        marks = ",".join("?" * len(chunk))
                        pids = [ids[u] for u in chunk]
                        db.execute(f"DELETE FROM observations WHERE page IN ({marks})", pids)
                        db.execute(f"DELETE FROM page_checkpoints WHERE page IN ({marks})", pids)
                        db.execute(f"DELETE FROM pages WHERE id IN ({marks})", pids)
                        db.execute(f"DELETE FROM leases WHERE url IN ({marks})", chunk)
                        db.execute(f"DELETE FROM canaries WHERE url IN ({marks})", chunk)
                        db.execute(f"DELETE FROM hints WHERE page IN ({marks})", pids)
                        db.execute(f"DELETE FROM hint_log WHERE page IN ({marks})", pids)
                    self._keep_seq_high(db, seq_top)
                    self._count_in_meta(db, "hints_version")
                    self._set_meta(db, "page_id_floor", top)
                    removals = self._count_in_meta(db, "urls_removed")
                    self._count_in_meta(db, "urls_version")
                    gen = self._pages_gen(db)
                    self._bump_pages_gen(db, gen)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if ids:
                self._ids.clear()  # this store's own removals: no cached id may outlive them
                self._removals_seen = removals
                if self._gen == gen:
                    self._gen = gen + 1
            return len(ids)

    def _prune_hint_log(self, db: Any, pages: list[int]) -> int:
        """Delete the hint log's ``lastmod`` values of ``pages`` that no revisit
        left in the log can fall on: those not after the page's checkpointed
        last success (every revisit from there on starts at or after it), but
        for the latest of each source. Returns the rows deleted."""
        removed = 0
        for chunk in _chunks(pages):
            cur = db.execute(
                f"DELETE FROM hint_log WHERE page IN ({','.join('?' * len(chunk))}) "
                "AND lastmod <= (SELECT c.last_ok FROM page_checkpoints c "
                "WHERE c.page = hint_log.page) "
                "AND lastmod <> (SELECT h.lastmod FROM hints h "
                "WHERE h.page = hint_log.page AND h.source = hint_log.source)",
                chunk,
            )
            removed += max(cur.rowcount, 0)
        return removed

    # -- reading ---------------------------------------------------------------------------

    def version(self) -> int:
        """A number that grows whenever observations or pages are added (cheap to read).

        It never goes down: when deleting rows (a prune, a removal) lowers the
        log's largest ``seq``, ``meta.seq_offset`` makes up the difference."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce((SELECT max(seq) FROM observations), 0) "
                "+ coalesce((SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'seq_offset'), 0), "
                "coalesce((SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'urls_version'), 0)"
            ).fetchone()
        return int(row[0]) * 1_000_003 + int(row[1])

    def _max_seq(self, db: Any) -> int:
        return int(db.execute("SELECT coalesce(max(seq), 0) FROM observations").fetchone()[0])

    def _keep_seq_high(self, db: Any, top_before: int) -> None:
        """After rows were deleted from the log (``top_before``: its largest ``seq``
        before): keep :meth:`version` from going down, and from standing still
        when SQLite hands the deleted ``seq`` values out again."""
        drop = top_before - self._max_seq(db)
        if drop > 0:
            self._count_in_meta(db, "seq_offset", by=drop)

    def observation_count(self) -> int:
        """Observations in the log (those pruned from it no longer count)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM observations").fetchone()[0])

    def page(self, url: str) -> PageState | None:
        """The current state of one page (``url`` as normalised), or None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(ROW_FIELDS)} FROM pages WHERE url = ?", (url,)
            ).fetchone()
        return None if row is None else page_from_row(row)

    def outcomes(self, url: str) -> list[tuple[float, str]]:
        """``(fetched_at, outcome)`` of every fetch of ``url`` in the log, in time order.

        Fetches pruned from the log (:meth:`prune`) are not listed: the page's
        state (:meth:`page`: its fetch count, last success, change evidence)
        and the buckets still count them."""
        with self._lock:
            return [
                (t, o)
                for t, o in self._db.execute(
                    "SELECT o.fetched_at, o.outcome FROM observations o JOIN pages p ON p.id = o.page "
                    "WHERE p.url = ? ORDER BY o.fetched_at, o.seq",
                    (url,),
                )
            ]

    def validators(self, urls: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """``url → (etag, last_modified)`` for the known pages among ``urls``;
        ``(None, None)`` for those of a site whose validators are off
        (:meth:`set_validators`)."""
        out: dict[str, tuple[str | None, str | None]] = {}
        with self._lock:
            off = self._validators_off(self._db)
            for chunk in _chunks(list(urls)):
                q = (
                    "SELECT url, site, etag, last_modified FROM pages "
                    f"WHERE url IN ({','.join('?' * len(chunk))})"
                )
                for u, site, e, lm in self._db.execute(q, chunk):
                    out[u] = (None, None) if site in off else (e, lm)
        return out

    def _validators_off(self, db: Any) -> set[str]:
        # one meta row per site (``validators_off:SITE``): a toggle writes one row
        # (a key range would follow the database's collation, not the bytes)
        rows = db.execute(
            f"SELECT key FROM meta WHERE substr(key, 1, {len(_VALIDATORS_OFF)}) = ?",
            (_VALIDATORS_OFF,),
        )
        return {str(k)[len(_VALIDATORS_OFF) :] for (k,) in rows}

    def sites_without_validators(self) -> set[str]:
        """The sites whose requests are sent without validators (:meth:`set_validators`)."""
        with self._lock:
            return self._validators_off(self._db)

    def set_validators(self, site: str, on: bool, *, now: float, detail: str) -> bool:
        """Send conditional requests (ETag / Last-Modified) to ``site``'s pages
        or not; the change is recorded in its history (``validators_on`` or
        ``validators_off``, with ``detail``). Returns False, recording
        nothing, when it already was so."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                key = _VALIDATORS_OFF + site
                db.execute(
                    "INSERT INTO sites (site) VALUES (?) ON CONFLICT (site) DO NOTHING", (site,)
                )
                if (self._meta(db, key) is None) == on:
                    db.execute("ROLLBACK")
                    return False
                if on:
                    db.execute("DELETE FROM meta WHERE key = ?", (key,))
                else:
                    self._set_meta(db, key, now)
                self._site_event(db, site, now, "validators_on" if on else "validators_off", detail)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return True

    def outcomes_many(self, urls: Sequence[str]) -> dict[str, list[tuple[float, str]]]:
        """:meth:`outcomes` for several pages in one read."""
        out: dict[str, list[tuple[float, str]]] = {u: [] for u in urls}
        with self._lock:
            for chunk in _chunks(list(urls)):
                q = (
                    "SELECT p.url, o.fetched_at, o.outcome FROM observations o "
                    "JOIN pages p ON p.id = o.page "
                    f"WHERE p.url IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY p.url, o.fetched_at, o.seq"
                )
                for u, t, o in self._db.execute(q, chunk):
                    out[u].append((t, o))
        return out

    def pruned_last_success(self, urls: Sequence[str]) -> dict[str, float]:
        """``url → fetched_at`` of the last successful fetch among each page's
        pruned observations (pages without a checkpoint, or whose pruned
        fetches all failed, are left out): what :meth:`outcomes_many` no
        longer lists."""
        out: dict[str, float] = {}
        with self._lock:
            for chunk in _chunks(list(urls)):
                q = (
                    "SELECT p.url, c.last_ok FROM page_checkpoints c JOIN pages p ON p.id = c.page "
                    f"WHERE c.last_ok IS NOT NULL AND p.url IN ({','.join('?' * len(chunk))})"
                )
                out.update((u, float(t)) for u, t in self._db.execute(q, chunk))
        return out

    def content_history(self, since: float, until: float = math.inf) -> ContentHistory:
        """The fetches that reached the content (``new``, ``changed``,
        ``unchanged``, ``not_modified``) before ``until`` of every page reached
        in ``[since, until)``, in page and time order, with whether each one
        from ``since`` on was conditional, and the checkpoints of those pages
        whose log was pruned (their state before the listed fetches): what
        :mod:`recrawl.calibration` replays. One statement, so a prune running
        meanwhile cannot show a fetch both in the log and in a checkpoint.

        It runs on the store's reader connection, in one read transaction, so
        ingests, leases and prunes go on meanwhile (they are not seen); on an
        in-memory SQLite store, which has no reader, it holds the store."""
        hi = until if until < math.inf else _FAR_FUTURE
        recent = (
            "SELECT DISTINCT page FROM observations WHERE fetched_at >= ? AND fetched_at < ? "
            f"AND outcome IN ({_CONTENT_SQL})"
        )
        q = (
            "SELECT page, fetched_at, CASE outcome WHEN 'changed' THEN 1 WHEN 'new' THEN 2 "
            "WHEN 'not_modified' THEN 3 ELSE 0 END, CASE WHEN fetched_at >= ? THEN rest END, NULL, NULL, NULL, NULL, seq, NULL "
            f"FROM observations WHERE outcome IN ({_CONTENT_SQL}) AND fetched_at < ? "
            f"AND page IN ({recent}) "
            "UNION ALL SELECT page, last_ok, -1, NULL, ev_nc, ev_tc, ev_nu, ev_tu, -1, ev_bins "
            f"FROM page_checkpoints WHERE page IN ({recent}) ORDER BY 1, 2, 9"
        )
        at = _CONDITIONAL_AT
        pages: list[NDArray[np.int64]] = []
        times: list[NDArray[np.float64]] = []
        codes: list[NDArray[np.int64]] = []
        cond: list[NDArray[np.bool_]] = []
        start: dict[int, tuple[float, ...]] = {}
        blobs: dict[int, bytes | None] = {}
        with self._snapshot() as db:
            cur = db.execute(q, (since, hi, since, hi, since, hi))
            while rows := cur.fetchmany(100_000):
                log = [r for r in rows if r[2] >= 0]
                if len(log) < len(rows):
                    for r in rows:
                        if r[2] < 0:
                            lo = math.nan if r[1] is None else float(r[1])
                            start[int(r[0])] = (lo, *(float(x) for x in r[4:8]))
                            blobs[int(r[0])] = None if r[9] is None else bytes(r[9])
                n = len(log)
                pages.append(np.fromiter((r[0] for r in log), np.int64, n))
                times.append(np.fromiter((r[1] for r in log), np.float64, n))
                codes.append(np.fromiter((r[2] for r in log), np.int64, n))
                cond.append(
                    np.fromiter(
                        (r[3] is not None and orjson.loads(r[3])[at] is True for r in log),
                        np.bool_,
                        n,
                    )
                )
            urls = dict(
                db.execute(f"SELECT id, url FROM pages WHERE id IN ({recent})", (since, hi))
            )

        def cat(parts: list[Any], dtype: Any) -> Any:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        code = cat(codes, np.int64)
        return ContentHistory(
            page=cat(pages, np.int64),
            fetched_at=cat(times, np.float64),
            kind=np.where(code == 3, 0, code),
            not_modified=code == 3,
            conditional=cat(cond, np.bool_),
            urls={int(k): str(u) for k, u in urls.items()},
            checkpoints=start,
            checkpoint_evidence=blobs,
        )

    def group_totals(self) -> list[GroupTotals]:
        with self._lock:
            rows = self._db.execute(
                "SELECT s.site, s.page_type, b.v FROM buckets_daily b "
                f"JOIN series s ON s.id = b.k & {_SERIES_MASK}"
            ).fetchall()
        groups: dict[tuple[str, str], int] = {}
        gi = np.array([groups.setdefault((r[0], r[1]), len(groups)) for r in rows], dtype=np.intp)
        sums = np.zeros((len(groups), BUCKET_WIDTH))
        np.add.at(sums, gi, self._unvectors([r[2] for r in rows], sparse=False))
        out = []
        for (site, ptype), row in sorted(zip(groups, sums.tolist(), strict=True)):
            out.append(
                GroupTotals(
                    site=site,
                    page_type=ptype,
                    fetches=round(row[0]),
                    # and, under their own key, the fetches that failed before their page's first success
                    outcomes={o: round(row[_O0 + i]) for i, o in enumerate(OUTCOMES)}
                    | {"failed_first": round(row[_F0])},
                    bytes_sent=round(row[_S0]),
                    bytes_received=round(row[_S0 + 1]),
                    credits=row[_S0 + 2],
                )
            )
        return out

    def buckets(
        self, since: float, until: float, sites: Sequence[str] | None = None, *, daily: bool = False
    ) -> BucketArrays:
        """Buckets with ``since <= start < until``; ``daily`` reads whole UTC days instead."""
        table = "buckets_daily" if daily else "buckets"
        q = (
            f"SELECT s.site, s.page_type, s.route, b.k, b.v FROM {table} b "
            f"JOIN series s ON s.id = b.k & {_SERIES_MASK} WHERE b.k >= ? AND b.k < ?"
        )
        # since <= start < until, for starts on the bucket grid
        args: list[Any] = [-(-math.ceil(x) // _BW) << _KEY_SHIFT for x in (since, until)]
        if sites:
            q += f" AND s.site IN ({','.join('?' * len(sites))})"
            args.extend(sites)
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        arr = np.empty((len(rows), 1 + BUCKET_WIDTH))
        arr[:, 0] = (np.array([r[3] for r in rows], dtype=np.int64) >> _KEY_SHIFT) * _BW
        arr[:, 1:] = self._unvectors([r[4] for r in rows], sparse=table in SPARSE_TABLES)
        k = len(OUTCOMES)
        s = 1 + _S0
        return BucketArrays.from_labels(
            site=[r[0] for r in rows],
            page_type=[r[1] for r in rows],
            route=[r[2] for r in rows],
            bucket_start=arr[:, 0],
            n=arr[:, 1],
            outcomes=arr[:, 2 : 2 + k],
            bytes_sent=arr[:, s],
            bytes_received=arr[:, s + 1],
            credits=arr[:, s + 2],
            rendered=arr[:, s + 3],
            canary_ok=arr[:, s + 5],
            canary_mismatch=arr[:, s + 6],
            latency=arr[:, 1 + _H0 : 1 + _F0],
        )

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one read query (for the other modules of the store package and tests)."""
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    # -- canaries --------------------------------------------------------------------------

    def _canaries(self, db: Any) -> dict[str, dict[str, str]]:
        return {u: json.loads(e) for u, e in db.execute("SELECT url, expect FROM canaries")}

    def add_canary(
        self, url: str, site: str, expect: dict[str, str], every_s: float, now: float
    ) -> None:
        """Declare (or replace) a canary: ``url`` must carry ``expect`` (field → value)."""
        with self._lock:
            with self._write() as db:
                db.execute(
                    "INSERT INTO canaries VALUES (?, ?, ?, ?, ?) ON CONFLICT (url) DO UPDATE SET "
                    "site = excluded.site, expect = excluded.expect, every_s = excluded.every_s, "
                    "added_at = excluded.added_at",
                    (url, site, json.dumps(expect, sort_keys=True), every_s, now),
                )
                new: dict[str, int] = {}
                if not self._page_ids(db, [url]):
                    new[url] = self._next_page_id(db)
                    db.execute(
                        "INSERT INTO pages (id, url, site, page_type, value, first_seen) "
                        "VALUES (?, ?, ?, 'canary', 1, ?)",
                        (new[url], url, site, now),
                    )
                gen = self._bump_own_pages_gen(db)
            self._pages_written(gen)
            self._remember_ids(new)

    def remove_canary(self, url: str) -> bool:
        """Withdraw the canary declared on ``url`` (as normalised); its page, if
        any, stays. Returns whether one was declared."""
        with self._lock:
            with self._write() as db:
                found = bool(db.execute("SELECT 1 FROM canaries WHERE url = ?", (url,)).fetchall())
                if found:
                    db.execute("DELETE FROM canaries WHERE url = ?", (url,))
                    gen = self._bump_own_pages_gen(db)
            if found:
                self._pages_written(gen)
            return found

    def canaries(self) -> list[dict[str, Any]]:
        """Every canary with its expectation, cadence (seconds) and last fetch (unix seconds)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.url, c.site, c.expect, c.every_s, c.added_at, p.last_fetch "
                "FROM canaries c LEFT JOIN pages p ON p.url = c.url ORDER BY c.site, c.url"
            ).fetchall()
        return [
            {
                "url": u,
                "site": s,
                "expect": json.loads(e),
                "every_s": ev,
                "added_at": a,
                "last_fetch": lf,
            }
            for u, s, e, ev, a, lf in rows
        ]

    # -- sites -----------------------------------------------------------------------------

    def site_controls(self) -> dict[str, dict[str, Any]]:
        """Per site: ``paused``, ``cost_multiplier``, ``concurrency_cap``, ``band``,
        ``validators`` (False when its requests go without them)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT site, paused, cost_multiplier, concurrency_cap, band FROM sites"
            ).fetchall()
            off = self._validators_off(self._db)
        return {
            r[0]: {
                "paused": bool(r[1]),
                "cost_multiplier": r[2],
                "concurrency_cap": r[3],
                "band": r[4],
                "validators": r[0] not in off,
            }
            for r in rows
        }

    def set_site_controls(
        self,
        site: str,
        *,
        now: float,
        paused: bool | None = None,
        cost_multiplier: float | None = None,
        concurrency_cap: int | None = None,
        band: str | None = None,
        event: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Update a site's controls (None leaves a field as is); ``event`` is recorded."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "INSERT INTO sites (site) VALUES (?) ON CONFLICT (site) DO NOTHING", (site,)
                )
                db.execute(
                    "UPDATE sites SET paused = coalesce(?, paused), "
                    "cost_multiplier = coalesce(?, cost_multiplier), concurrency_cap = ?, "
                    "band = coalesce(?, band), updated_at = ? WHERE site = ?",
                    (
                        None if paused is None else int(paused),
                        cost_multiplier,
                        concurrency_cap,
                        band,
                        now,
                        site,
                    ),
                )
                if event is not None:
                    self._site_event(db, site, now, event, detail)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    @staticmethod
    def _site_event(db: Any, site: str, at: float, kind: str, detail: str | None) -> None:
        db.execute(
            "INSERT INTO site_events (site, at, kind, detail) VALUES (?, ?, ?, ?)",
            (site, at, kind, detail),
        )

    def site_events(self, site: str | None = None) -> list[dict[str, Any]]:
        """Recorded site events (pauses, resumes, band changes), oldest first."""
        q = "SELECT site, at, kind, detail FROM site_events"
        args: tuple[Any, ...] = ()
        if site is not None:
            q += " WHERE site = ?"
            args = (site,)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY at, id", args).fetchall()
        return [{"site": s, "at": a, "kind": k, "detail": d} for s, a, k, d in rows]

    def sites(self) -> list[str]:
        """Every site that has pages."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT site FROM pages ORDER BY site")]

    # -- health history --------------------------------------------------------------------

    def record_health(
        self, at: float, reports: Sequence[dict[str, Any]], states: dict[str, Any]
    ) -> None:
        """Keep each site's health report at ``at`` and the scorer's smoothing state."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT INTO health_history VALUES (?, ?, ?) "
                    "ON CONFLICT (site, at) DO UPDATE SET report = excluded.report",
                    [(r["site"], at, json.dumps(r)) for r in reports],
                )
                db.executemany(
                    "INSERT INTO health_state VALUES (?, ?, ?) "
                    "ON CONFLICT (site) DO UPDATE SET at = excluded.at, state = excluded.state",
                    [(site, at, json.dumps(st)) for site, st in states.items()],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def health_states(self) -> dict[str, tuple[float, Any]]:
        """The last smoothing state per site: ``site → (at, state)``."""
        with self._lock:
            rows = self._db.execute("SELECT site, at, state FROM health_state").fetchall()
        return {s: (a, json.loads(st)) for s, a, st in rows}

    def health_history(
        self, site: str | None = None, since: float = 0.0, until: float = float("inf")
    ) -> list[tuple[float, dict[str, Any]]]:
        """``(at, report)`` pairs, oldest first."""
        q = "SELECT at, report FROM health_history WHERE at >= ? AND at <= ?"
        args: list[Any] = [since, until if until != float("inf") else 1e18]
        if site is not None:
            q += " AND site = ?"
            args.append(site)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY at, site", args).fetchall()
        return [(a, json.loads(r)) for a, r in rows]

    # -- leases ----------------------------------------------------------------------------

    def claim(
        self,
        candidates: Sequence[tuple[str, str, str]],
        *,
        worker: str,
        limit: int,
        now: float,
        ttl_s: float,
        site_caps: dict[str, int] | None = None,
        reported_since: int | None = None,
    ) -> list[dict[str, Any]]:
        """Lease up to ``limit`` of ``candidates`` (``(url, site, reason)``, best first).

        Atomic: a URL is leased to one worker at a time; expired leases return
        to the pool first; a site never has more outstanding leases than its
        cap in ``site_caps``; with ``reported_since`` (an
        :meth:`observation_mark`), a URL of which an observation was stored
        after that mark is not leased (reported since the caller's plan, to
        this process or another: the check runs inside the write transaction,
        so a report committed before the claim is always seen). Returns
        ``{"lease_id", "url", "site", "reason", "expires_at"}`` dicts.
        """
        caps = site_caps or {}
        out: list[dict[str, Any]] = []
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM leases WHERE expires_at <= ?", (now,))
                # only the candidates' leases and their sites' counts: cheap with many out
                held: set[str] = set()
                for chunk in _chunks([c[0] for c in candidates]):
                    q = f"SELECT url FROM leases WHERE url IN ({','.join('?' * len(chunk))})"
                    held.update(u for (u,) in db.execute(q, chunk))
                if reported_since is not None:
                    held.update(u for _, u in db.execute(_REPORTED_SINCE, (reported_since,)))
                capped = sorted({c[1] for c in candidates if c[1] in caps})
                per_site: dict[str, int] = {}
                for chunk in _chunks(capped):
                    q = (
                        "SELECT site, count(*) FROM leases "
                        f"WHERE site IN ({','.join('?' * len(chunk))}) GROUP BY site"
                    )
                    per_site.update(db.execute(q, chunk).fetchall())
                rows = []
                for url, site, reason in candidates:
                    if len(out) >= limit:
                        break
                    if url in held:
                        continue
                    cap = caps.get(site)
                    if cap is not None and per_site.get(site, 0) >= cap:
                        continue
                    lease_id = secrets.token_urlsafe(12)
                    held.add(url)
                    per_site[site] = per_site.get(site, 0) + 1
                    rows.append((url, lease_id, worker, site, reason, now, now + ttl_s))
                    out.append(
                        {
                            "lease_id": lease_id,
                            "url": url,
                            "site": site,
                            "reason": reason,
                            "expires_at": now + ttl_s,
                        }
                    )
                db.executemany("INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return out

    def observation_mark(self) -> int:
        """The last stored observation's sequence number (0 for none): a mark
        for :meth:`reported_since` and :meth:`claim`'s ``reported_since``.

        Observations are numbered in commit order (every writer holds the
        store's write lock). A prune that deletes the newest observations may
        let SQLite number later ones from below an earlier mark."""
        with self._lock:
            row = self._db.execute("SELECT max(seq) FROM observations").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def reported_since(self, mark: int) -> tuple[int, set[str]]:
        """The URLs of which an observation was stored after ``mark`` (an
        :meth:`observation_mark`), and the mark of the last of them (``mark``
        when none): read the observations stored since, by sequence number."""
        with self._lock:
            rows = self._db.execute(_REPORTED_SINCE, (mark,)).fetchall()
        return max((int(q) for q, _ in rows), default=mark), {u for _, u in rows}

    def outstanding_leases(self, now: float) -> dict[str, int]:
        """Unexpired leases per site."""
        with self._lock:
            return dict(
                self._db.execute(
                    "SELECT site, count(*) FROM leases WHERE expires_at > ? GROUP BY site", (now,)
                ).fetchall()
            )

    def leased_urls(self, now: float) -> set[str]:
        """URLs currently leased (unexpired)."""
        with self._lock:
            return {
                u
                for (u,) in self._db.execute("SELECT url FROM leases WHERE expires_at > ?", (now,))
            }

    # -- replicas: one planner, its plan published, the cycle's spend shared ----------------

    def hold_planner(self) -> bool:
        """Take, or keep, the planning role among the services sharing this
        store: True while this store object holds it. The role is a lock that
        its holder's death releases (PostgreSQL: a session advisory lock;
        SQLite: a lock on a file beside the database), so another replica
        takes it at its next try. A store no other process can open (an
        in-memory one) always holds it."""
        return True

    def release_planner(self) -> None:
        """Give the planning role up (closing the store does too)."""

    def publish_plan(self, cycle: int, mark: int, body: bytes) -> int:
        """Publish a plan for the other replicas: ``body`` (opaque bytes), the
        plan cycle it is for and the :meth:`observation_mark` read before it
        was computed. Replaces the previous one; returns its generation (1, 2, …
        over the store's life)."""
        with self._write() as db:
            row = db.execute("SELECT generation FROM published_plan WHERE one = 1").fetchone()
            generation = (int(row[0]) if row else 0) + 1
            db.execute("DELETE FROM published_plan")
            db.execute(
                "INSERT INTO published_plan VALUES (1, ?, ?, ?, ?)", (generation, cycle, mark, body)
            )
        return generation

    def published_plan(self, after: int = 0) -> tuple[int, int, int, bytes] | None:
        """The last published plan as ``(generation, cycle, mark, body)`` when
        its generation is above ``after``, else None."""
        with self._lock:
            row = self._db.execute(
                "SELECT generation, cycle, mark, body FROM published_plan "
                "WHERE one = 1 AND generation > ?",
                (after,),
            ).fetchone()
        if row is None:
            return None
        return int(row[0]), int(row[1]), int(row[2]), bytes(row[3])

    def add_cycle_spend(self, cycle: int, delta: float) -> float:
        """Add ``delta`` (billing units, negative for a refund: an expired
        lease) to what plan cycle ``cycle`` has spent, never below 0, and
        return the new total. Refunds are counted (:meth:`cycle_spend`).
        Cycles more than two before ``cycle`` are forgotten."""
        with self._write() as db:
            got = db.execute(
                "SELECT spent, refunds FROM cycle_spend WHERE cycle = ?", (cycle,)
            ).fetchone()
            total = max((float(got[0]) if got else 0.0) + delta, 0.0)
            refunds = (int(got[1]) if got else 0) + (delta < 0)
            if got is None:
                db.execute("INSERT INTO cycle_spend VALUES (?, ?, ?)", (cycle, total, refunds))
                db.execute("DELETE FROM cycle_spend WHERE cycle < ?", (cycle - 2,))
            else:
                db.execute(
                    "UPDATE cycle_spend SET spent = ?, refunds = ? WHERE cycle = ?",
                    (total, refunds, cycle),
                )
        return total

    def cycle_spend(self, cycle: int) -> tuple[float, int]:
        """What plan cycle ``cycle`` has spent so far, and how many refunds
        (:meth:`add_cycle_spend` with a negative amount) it had: a planner
        seeing refunds it did not make re-plans, since leases of its plan
        came back to the pool."""
        with self._lock:
            got = self._db.execute(
                "SELECT spent, refunds FROM cycle_spend WHERE cycle = ?", (cycle,)
            ).fetchone()
        return (float(got[0]), int(got[1])) if got else (0.0, 0)

    # -- what the cheap signals cost and found ---------------------------------------------

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        """Add ``rows`` to the per-(site, signal) totals (:data:`SPEND_COLUMNS`):
        a signal's reads that are no observation (sitemaps, feeds)."""
        if rows:
            with self._write() as db:
                db.executemany(_SPEND_UPSERT, rows)

    def signal_spend(self) -> list[SpendRow]:
        """Every (site, signal)'s totals, as :data:`SPEND_COLUMNS` tuples, by site and signal."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(SPEND_COLUMNS)} FROM signal_spend ORDER BY site, signal"
            ).fetchall()
        return [_spend_row(r) for r in rows]

    def set_listing_left(self, rows: Sequence[tuple[str, str, float | None]]) -> None:
        """Note item pages that left every listing (``(url, site, at)``) or came
        back (``at`` None: the note is removed)."""
        if not rows:
            return
        with self._write() as db:
            db.executemany(
                "INSERT INTO listing_left VALUES (?, ?, ?) ON CONFLICT (url) DO UPDATE "
                "SET site = excluded.site, at = excluded.at",
                [r for r in rows if r[2] is not None],
            )
            db.executemany(
                "DELETE FROM listing_left WHERE url = ?", [(r[0],) for r in rows if r[2] is None]
            )

    def listing_left(self) -> dict[str, tuple[str, float]]:
        """Item pages that left every listing: URL → (site, when noticed)."""
        with self._lock:
            rows = self._db.execute("SELECT url, site, at FROM listing_left").fetchall()
        return {str(u): (str(site), float(at)) for u, site, at in rows}

    # -- planner input ---------------------------------------------------------------------

    def page_columns(
        self, columns: Collection[str] | None = None, *, planner_bins: bool = False
    ) -> dict[str, Any]:
        """Every page's planning state as columns (sequences and numpy arrays).

        Keys: ``id`` (page ids, int64 array); ``url`` (a
        :class:`~recrawl.records.strings.StringColumn`, 51 bytes a URL
        instead of a list's 90); ``site``, ``page_type`` (each a
        :class:`~recrawl.records.strings.CodeColumn`: a small code a page);
        ``value``, ``first_seen``, ``last_ok``, ``last_fetch`` (unix seconds,
        NaN when never), ``ev_nc``, ``ev_tc``, ``ev_nu``, ``ev_tu``,
        ``nutch_interval`` (seconds), ``avg_bytes`` (float64 arrays);
        ``ev_bins`` (the length bins and change-point test, ``(n, 22)``
        float32, :mod:`recrawl.records.evidence`); ``fails`` (consecutive
        failed fetches, int64 array); ``gone`` and ``moved`` (retired by a
        permanent redirect to another page) (bool arrays); ``fetches``
        (int64), ``bytes_total`` and ``credits_total`` (float64): what the
        page's fetches cost so far (what its cost is learned from).

        Only the keys of ``columns`` when given (a plan reads less than half
        the bytes); with ``planner_bins``, ``ev_bins`` as the planner reads
        them (:func:`~recrawl.records.evidence.planner_bins`: the bins
        alone, float16 when they fit), read a chunk at a time.
        """
        want = set(PAGE_COLUMNS if columns is None else columns)
        half = reuse = True
        while True:
            cols = self._page_columns(want, planner=planner_bins, half=half, reuse=reuse)
            if not isinstance(cols, str):
                return cols
            # read again: a bin did not fit float16 (the planner reads float32),
            # or the pages changed while their URLs were taken from the last read
            half, reuse = (False, reuse) if cols == "bins" else (half, False)

    def _page_set(self, db: Any) -> tuple[int, int, int]:
        """What tells one set of pages (and their URLs) from another: how many,
        the highest id (ids only grow, and are never reused) and the count of
        removals and renames (``urls_removed``)."""
        n, top = db.execute("SELECT count(*), coalesce(max(id), 0) FROM pages").fetchone()
        return int(n), int(top), self._meta_int(db, "urls_removed")

    def _page_columns(
        self, want: set[str], *, planner: bool, half: bool, reuse: bool = True
    ) -> dict[str, Any] | Literal["bins", "changed"]:
        """:meth:`page_columns` of the keys ``want``; with ``planner``, the
        planner's bins (with ``half`` as float16: ``"bins"`` when a number
        did not fit). With ``reuse``, the URL column of the last read is
        taken again when the pages are the same set (a re-plan while the plan
        before serves holds one URL column, not two): ``"changed"`` when
        they changed during the read."""
        bins = "ev_bins" in want
        planner = bins and planner
        urls = StringColumn()
        codes: dict[str, CodeBuilder] = {
            name: CodeBuilder() for name in ("site", "page_type") if name in want
        }
        with self._lock, self._pages_snapshot(self._db):
            db = self._db
            pages_set = self._page_set(db)
            size = pages_set[0]
            last = self._last_urls
            shared = last[1]() if reuse and last is not None and last[0] == pages_set else None
            strings = [*(["url"] if "url" in want and shared is None else []), *codes]
            numbers = [
                (name, dtype)
                for name, dtype in _PAGE_NUMBERS
                if name in want or (bins and name in ("ev_nc", "ev_tc"))
            ]
            select = [*strings, "id", *(_PAGE_SQL.get(n, n) for n, _ in numbers)]
            if bins:
                select.append("ev_bins")
            k = len(strings) + 1
            if "url" in strings:
                urls.reserve(size)
            # the columns made at their size, filled a chunk at a time: joining
            # chunks held every column twice at the end (a third of the peak)
            cols: dict[str, Any] = {"id": np.empty(size, np.int64)}
            for name, dtype in numbers:
                if name in want:
                    cols[name] = np.empty(size, dtype)
            if planner:
                fold = PlannerBins(size, half=half)
            elif bins:
                cols["ev_bins"] = np.empty((size, EVIDENCE_COLUMNS), np.float32)
            sql = f"SELECT {', '.join(select)} FROM pages ORDER BY url"
            at = 0
            with closing(self._stream(db, sql, _PAGE_CHUNK)) as cur:
                # in chunks: the rows as Python tuples cost about 1 KB a page at once
                while rows := cur.fetchmany(_PAGE_CHUNK):
                    n = len(rows)
                    if at + n > size:  # another process added pages since the count
                        size = max(at + n, 2 * size)
                        for name, col in cols.items():
                            cols[name] = np.resize(col, (size, *col.shape[1:]))
                        if planner:
                            fold.resize(size)
                    for j, name in enumerate(strings):
                        got = [r[j] for r in rows]
                        if name == "url":
                            urls.extend(got)
                        else:
                            codes[name].extend(got)
                    cols["id"][at : at + n] = np.fromiter((r[k - 1] for r in rows), np.int64, n)
                    m = len(numbers)
                    part = np.array([r[k : k + m] for r in rows], dtype=np.float64).reshape(n, m)
                    for i, (name, _) in enumerate(numbers):
                        if name in cols:
                            cols[name][at : at + n] = part[:, i]
                    if bins:
                        ev = [name for name, _ in numbers]
                        chunk = bins_from_blobs(
                            [r[k + m] for r in rows],
                            part[:, ev.index("ev_nc")],
                            part[:, ev.index("ev_tc")],
                        )
                        if planner:
                            fold.put(at, chunk)
                        else:
                            cols["ev_bins"][at : at + n] = chunk
                    at += n
            # the set the rows came from, when nothing was added or removed meanwhile
            same = self._page_set(db) == pages_set and at == pages_set[0]
            if shared is not None and not same:
                return "changed"
            if "url" in strings:
                self._last_urls = (pages_set, weakref.ref(urls)) if same else None
        if "id" not in want:
            del cols["id"]
        if at < size:
            cols = {name: col[:at] for name, col in cols.items()}
        if planner:
            got_bins = fold.result(at)
            if got_bins is None:
                return "bins"
            cols["ev_bins"] = got_bins
        if "url" in want:
            cols["url"] = urls if shared is None else shared
        for name, build in codes.items():
            cols[name] = build.column()
        return cols

    def page_count(self) -> int:
        """How many pages the store holds (every row of :meth:`page_columns`)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pages").fetchone()[0])

    def _pages_snapshot(self, db: Any) -> AbstractContextManager[None]:
        """The reads of :meth:`page_columns` in one snapshot where the
        database needs a transaction for it (PostgreSQL overrides; SQLite's
        statement is one, and the set of pages is checked after)."""
        return nullcontext()

    def _stream(self, db: Any, sql: str, chunk: int) -> Any:
        """A cursor over the rows of ``sql``, fetched ``chunk`` at a time as
        the caller asks (SQLite steps its statement; PostgreSQL overrides:
        its default cursor would hold every row at once)."""
        return db.execute(sql)

    def outside_writes(self) -> int | None:
        """A number that changes when another connection (another process: the
        CLI, a second service) commits to the store; None when the store cannot
        tell. Writes through this store object do not change it."""
        return None

    def vacuum(self) -> None:
        """Give the space of deleted rows back: SQLite rewrites the whole file
        (``VACUUM``: it needs about the file's size free on disk and holds the
        store while it runs); PostgreSQL marks the log's for reuse (plain ``VACUUM``)."""
        with self._lock:
            self._db.execute("VACUUM observations")

    def close(self) -> None:
        with self._reader_lock:  # waits for a read in progress
            self._closed = True
            if self._reader is not None:
                if self._reader_pid == os.getpid():
                    self._reader.close()
                self._reader = None
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SQLWrite:
    """The data operations of one write transaction of a :class:`SQLStore`
    (made by :meth:`SQLStore.writing`; valid inside its ``with`` block only).

    They read and write rows and keep the store's caches right; what the rows
    mean (which reports are new, a page's state after a batch) is decided by
    :mod:`recrawl.engine.pipeline`. Page ids are ``int``, times unix seconds.
    """

    def __init__(self, store: SQLStore, db: Any) -> None:
        self._s = store
        self._db = db
        self.new_ids: dict[str, int] = {}
        """Pages created or renamed in this transaction (url → id), for the
        store's id cache once it has committed."""

    @property
    def half_life_days(self) -> float | None:
        """The evidence half-life the store was opened with (None: the default)."""
        return self._s.half_life_days

    @property
    def maintain_buckets(self) -> bool:
        """Whether the store keeps the buckets (off only to measure their cost)."""
        return self._s.maintain_buckets

    # -- keys and ids

    def claim_keys(self, keys: list[int]) -> Collection[int]:
        """Record observation ``keys`` (distinct) as stored; returns those that
        were not already (``keys`` itself when none was)."""
        return self._s._claim_keys(self._db, keys)

    def forget_keys(self, keys: list[int]) -> None:
        """Take back keys claimed in this transaction (a refused report)."""
        self._db.executemany("DELETE FROM observation_keys WHERE key = ?", [(k,) for k in keys])

    def known_ids(self, urls: Sequence[str]) -> list[int | None]:
        """The id of each of ``urls`` (None: not a page yet)."""
        return self._s._known_ids(self._db, urls)

    def new_page_ids(self, urls: Sequence[str]) -> list[int]:
        """Ids for new pages ``urls`` (rows written by :meth:`write_pages`);
        ids are never reused."""
        next_id = self._s._next_page_id(self._db)
        ids = list(range(next_id, next_id + len(urls)))
        self.new_ids.update(zip(urls, ids, strict=True))
        return ids

    # -- pages

    def load_pages(
        self,
        urls: list[str],
        page_id: NDArray[np.int64],
        created: list[int],
        earliest: list[Observation],
    ) -> PageArrays:
        """The state of pages ``urls`` (ids ``page_id``; ``created``: positions of
        pages new in this transaction, whose first report is in ``earliest``)."""
        return self._s._load_pages(self._db, urls, page_id, created, earliest)

    def write_pages(
        self,
        page_id: NDArray[np.int64],
        pages: PageArrays,
        created: list[int],
        written: list[int],
    ) -> None:
        """Write the state ``pages`` (ids ``page_id``): insert the ``created``
        positions, update the others but ``written`` (already written one by
        one with :meth:`update_page`, and not kept in the cache)."""
        s, db = self._s, self._db
        if created:
            db.executemany(
                _PAGE_INSERT,
                [(int(page_id[j]), *r) for j, r in zip(created, pages.rows(created), strict=True)],
            )
        s._keep_pages(page_id, pages, written)
        done = np.zeros(len(page_id), dtype=bool)
        done[created] = True
        done[written] = True
        upd = np.flatnonzero(~done)
        if len(upd):
            upd = upd[np.argsort(page_id[upd])]  # in id order: fewer B-tree pages touched
            db.executemany(_PAGE_UPDATE, pages.rows(upd, then=page_id[upd].tolist()))

    def update_page(self, page_id: int, page: PageState) -> None:
        """Write one page's state."""
        self._db.execute(_PAGE_UPDATE, (*page_row(page)[4:], page_id))

    def move_pages(self, moves: dict[int, tuple[str, int | None]]) -> None:
        """Permanent redirects: page id → (target URL, status of the report); see
        :meth:`SQLStore._move_pages`."""
        self._s._move_pages(self._db, moves, self.new_ids)

    # -- the log

    def pruned_until(self) -> float | None:
        """The latest checkpoint of any page (None: the log was never pruned)."""
        return self._s._meta_float(self._db, "pruned_until")

    def checkpoint_until(self, page_ids: Sequence[int]) -> dict[int, float]:
        """Each checkpointed page's last pruned fetch, of ``page_ids``."""
        until: dict[int, float] = {}
        for chunk in _chunks(list(page_ids)):
            q = f"SELECT page, until FROM page_checkpoints WHERE page IN ({','.join('?' * len(chunk))})"
            until.update(self._db.execute(q, chunk).fetchall())
        return until

    def append_observations(
        self, rows: Sequence[tuple[int, int, float, str, str | None, str]]
    ) -> None:
        """Log rows ``(key, page, fetched_at, outcome, fixed, rest)``."""
        self._db.executemany(_OBS_INSERT, rows)

    def release_leases(self, lease_ids: Sequence[str]) -> None:
        """End the leases ``lease_ids`` (their fetches were reported)."""
        self._db.executemany("DELETE FROM leases WHERE lease_id = ?", [(x,) for x in lease_ids])

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        """Add ``rows`` to the per-(site, signal) totals (:data:`SPEND_COLUMNS`)."""
        self._db.executemany(_SPEND_UPSERT, rows)

    def page_checkpoint(self, page_id: int) -> tuple[Any, ...] | None:
        """The page's checkpoint from ``reached`` on (None: its log was never pruned)."""
        row = self._db.execute(
            f"SELECT {', '.join(_CP_COLS[1:])} FROM page_checkpoints WHERE page = ?", (page_id,)
        ).fetchone()
        return None if row is None else tuple(row)

    def page_log(self, page_id: int) -> list[tuple[int, int, float, str | None, str, str]]:
        """The page's log rows ``(key, seq, fetched_at, fixed, outcome, rest)`` in time order."""
        rows: list[tuple[int, int, float, str | None, str, str]] = self._db.execute(
            "SELECT key, seq, fetched_at, fixed, outcome, rest "
            "FROM observations WHERE page = ? ORDER BY fetched_at, seq",
            (page_id,),
        ).fetchall()
        return rows

    def set_outcomes(self, fixes: Sequence[tuple[str, int]]) -> None:
        """Correct logged outcomes: ``(outcome, seq)`` pairs."""
        if fixes:
            self._db.executemany("UPDATE observations SET outcome = ? WHERE seq = ?", fixes)

    # -- hints and canaries

    def hint_verdict(self) -> str | None:
        """The kept hint-trust verdict, as :class:`~recrawl.store.SQLStore.set_hint_verdict` wrote it."""
        return self._s._meta(self._db, "hint_verdict")

    def vouch_rows(
        self, page_ids: NDArray[np.int64], since: NDArray[np.float64] | None
    ) -> list[tuple[int, str, float, float, float]]:
        """Hint-log rows of ``page_ids``: see :meth:`SQLStore._vouch_rows`."""
        return self._s._vouch_rows(self._db, page_ids, since)

    def canaries(self) -> dict[str, dict[str, str]]:
        """Declared canaries: url → expected fields."""
        return self._s._canaries(self._db)

    # -- buckets

    def add_to_buckets(
        self,
        todo: Sequence[Observation],
        cols: ObservationColumns,
        pidx: NDArray[np.intp],
        codes: NDArray[np.int64],
        page_id: NDArray[np.int64],
        pages: PageArrays,
        canary: NDArray[Any],
        failed_first: NDArray[np.bool_],
        adjust: dict[tuple[str, str, str, int], list[float]],
    ) -> None:
        """Add a batch to the 15-minute and daily buckets: ``todo`` (columns
        ``cols``) sorted by page (``pidx`` into ``page_id``/``pages``) with their
        outcome ``codes``, canary results and failed-first marks; ``adjust``:
        corrections of earlier rows by (site, page type, route, bucket start),
        outcome deltas in :data:`~recrawl.records.buckets.OUTCOMES` order then
        the failed-first delta."""
        s, db = self._s, self._db
        groups = s._page_groups(page_id, pages)
        series, start, mat = s._bucket_deltas(
            db, todo, cols, pidx, codes, groups, canary, failed_first
        )
        if adjust:  # outcome corrections from re-folded pages
            extra = list(adjust)
            series = np.concatenate(
                [series, s._series_ids(db, [(a, b, c) for a, b, c, _ in extra])]
            )
            start = np.concatenate([start, np.array([k[3] for k in extra], dtype=np.int64)])
            more = np.zeros((len(extra), BUCKET_WIDTH))
            d = np.array(list(adjust.values()), dtype=np.float64)
            k = len(OUTCOMES)
            more[:, _O0 : _O0 + k] = d[:, :k]
            more[:, _F0] = d[:, k]
            mat = np.vstack([mat, more])
        if len(series) and int(series.max()) > _SERIES_MASK:
            raise StoreError("more than 2**32 bucket series (site, page type, route)")
        # the same deltas per whole UTC day, for the baselines (first: the
        # 15-minute upsert sums into ``mat`` in place)
        s._upsert_buckets(db, "buckets_daily", bucket_key(start - start % _DAY_S, series), mat)
        s._upsert_buckets(db, "buckets", bucket_key(start, series), mat, consume=True)

    # -- pruning

    def log_before(
        self, pages: list[int], before: float
    ) -> tuple[
        dict[int, tuple[Any, ...]],
        dict[int, PageState],
        list[tuple[int, float, str | None, str, str]],
    ]:
        """For ``pages``: their checkpoints (``until``, ``reached``, state), their
        current states, and their log rows fetched before ``before`` as
        ``(page, fetched_at, fixed, outcome, rest)`` by page and time."""
        db = self._db
        cps: dict[int, tuple[Any, ...]] = {}
        state: dict[int, PageState] = {}
        rows: list[tuple[int, float, str | None, str, str]] = []
        for chunk in _chunks(pages):
            marks = ",".join("?" * len(chunk))
            q = f"SELECT page, {', '.join(_CP_COLS)} FROM page_checkpoints WHERE page IN ({marks})"
            cps.update((r[0], tuple(r[1:])) for r in db.execute(q, chunk))
            q = f"SELECT id, {', '.join(ROW_FIELDS)} FROM pages WHERE id IN ({marks})"
            state.update((r[0], page_from_row(r[1:])) for r in db.execute(q, chunk))
            rows += db.execute(
                "SELECT page, fetched_at, fixed, outcome, rest FROM observations "
                f"WHERE page IN ({marks}) AND fetched_at < ? ORDER BY page, fetched_at, seq",
                [*chunk, before],
            ).fetchall()
        return cps, state, rows

    def write_checkpoints(
        self, checkpoints: Sequence[tuple[int, float, bool, PageState]], before: float
    ) -> int:
        """Write ``(page, until, reached, state)`` checkpoints and delete those
        pages' log rows fetched before ``before``; returns the rows deleted."""
        s, db = self._s, self._db
        if not checkpoints:
            return 0
        seq_top = s._max_seq(db)
        db.executemany(
            _CP_UPSERT,
            [
                (pid, until, int(reached), *_mutable(page)[:-1], int(page.gone))
                for pid, until, reached, page in checkpoints
            ],
        )
        removed = 0
        for chunk in _chunks([c[0] for c in checkpoints]):
            cur = db.execute(
                f"DELETE FROM observations WHERE page IN ({','.join('?' * len(chunk))}) "
                "AND fetched_at < ?",
                [*chunk, before],
            )
            removed += cur.rowcount
        s._keep_seq_high(db, seq_top)
        return removed

    def prune_hint_log(self, pages: list[int]) -> int:
        """See :meth:`SQLStore._prune_hint_log`; returns the rows deleted."""
        return self._s._prune_hint_log(self._db, pages)

    def pruned(self, until: float) -> None:
        """Note that the log holds no row before ``until`` for some page (the
        refusal horizon of late reports grows to it)."""
        s, db = self._s, self._db
        if until > (s._meta_float(db, "pruned_until") or -math.inf):
            s._set_meta(db, "pruned_until", repr(until))
