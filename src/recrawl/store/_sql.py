"""The SQL store shared by the SQLite and PostgreSQL backends.

All SQL of recrawl lives here, written once in the dialect both engines
accept (``INSERT ... ON CONFLICT``, ``?`` placeholders translated for
PostgreSQL). A backend supplies a connection with ``execute``,
``executemany``, ``executescript`` and ``in_transaction``, and the column types
of its DDL. Each write is one transaction that starts with ``BEGIN IMMEDIATE``
(on PostgreSQL: ``BEGIN`` and a transaction-level advisory lock), so writers are
serialised and what a write method has returned is durable.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final

import numpy as np

from .._exceptions import StoreError
from ..buckets import BUCKET_SECONDS, LATENCY_BINS, LATENCY_EDGES_MS, OUTCOMES
from ..canary import canary_mismatches
from ..health import BucketArrays
from ..observation import Observation
from ..pagestate import CONTENT_OUTCOMES, Classifier, PageState, apply_observation, fixed_outcome
from ._protocol import BatchResult, GroupTotals

__all__ = ["SQLStore"]

SCHEMA_VERSION: Final = 1
_OUT_IDX: Final = {o: i for i, o in enumerate(OUTCOMES)}
_EDGES: Final = [float(e) for e in LATENCY_EDGES_MS]
# Layout of one bucket delta: n, outcome counts, then the scalar sums, then the histogram.
_SCALARS: Final = (
    "bytes_sent", "bytes_received", "credits", "rendered", "conditional",
    "canary_ok", "canary_mismatch", "lat_count", "lat_sum",
)  # fmt: skip
_O0: Final = 1
_S0: Final = _O0 + len(OUTCOMES)
_H0: Final = _S0 + len(_SCALARS)
_WIDTH: Final = _H0 + LATENCY_BINS
_BUCKET_COLS: Final = (
    ["n"] + [f"o_{o}" for o in OUTCOMES] + list(_SCALARS) + [f"h{i}" for i in range(LATENCY_BINS)]
)

_PAGE_COLS: Final = (
    "url", "site", "page_type", "value", "first_seen", "last_fetch", "last_ok", "last_change",
    "fingerprint", "etag", "last_modified", "fetches", "changes", "bytes_total", "credits_total",
    "avg_bytes", "ev_nc", "ev_tc", "ev_nu", "ev_tu", "nutch_interval", "gone",
)  # fmt: skip
_OBS_COLS: Final = (
    "key", "url", "fetched_at", "status", "error", "fixed", "outcome", "record_hash",
    "record_empty", "etag", "last_modified", "bytes_sent", "bytes_received", "credits",
    "rendered", "latency_ms", "route", "conditional", "lease_id", "id",
)  # fmt: skip

# One bucket table per resolution (15 minutes, whole UTC days), the same columns.
_BUCKET_BODY: Final = (
    "site TEXT NOT NULL, page_type TEXT NOT NULL, route TEXT NOT NULL, start {BIGINT} NOT NULL, "
    + ", ".join(
        f"{c} {'{REAL}' if c in ('credits', 'lat_sum') else '{BIGINT}'} NOT NULL DEFAULT 0"
        for c in _BUCKET_COLS
    )
    + ", PRIMARY KEY (start, site, page_type, route)"
)
_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pages (
    url TEXT PRIMARY KEY,
    site TEXT NOT NULL,
    page_type TEXT NOT NULL,
    value {{REAL}} NOT NULL DEFAULT 1,
    first_seen {{REAL}} NOT NULL,
    last_fetch {{REAL}}, last_ok {{REAL}}, last_change {{REAL}},
    fingerprint TEXT, etag TEXT, last_modified TEXT,
    fetches INTEGER NOT NULL DEFAULT 0,
    changes INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    credits_total {{REAL}} NOT NULL DEFAULT 0,
    avg_bytes {{REAL}} NOT NULL DEFAULT 0,
    ev_nc {{REAL}} NOT NULL DEFAULT 0, ev_tc {{REAL}} NOT NULL DEFAULT 0,
    ev_nu {{REAL}} NOT NULL DEFAULT 0, ev_tu {{REAL}} NOT NULL DEFAULT 0,
    nutch_interval {{REAL}} NOT NULL DEFAULT 2592000,
    gone INTEGER NOT NULL DEFAULT 0
) {{WR}};
CREATE INDEX IF NOT EXISTS pages_site ON pages (site, page_type);
CREATE TABLE IF NOT EXISTS observation_keys (key {{BIGINT}} PRIMARY KEY);
CREATE TABLE IF NOT EXISTS observations (
    seq {{SEQ}},
    key {{BIGINT}} NOT NULL,
    url TEXT NOT NULL,
    fetched_at {{REAL}} NOT NULL,
    status INTEGER, error TEXT,
    fixed TEXT,
    outcome TEXT NOT NULL,
    record_hash TEXT, record_empty INTEGER NOT NULL DEFAULT 0,
    etag TEXT, last_modified TEXT,
    bytes_sent INTEGER NOT NULL DEFAULT 0, bytes_received INTEGER NOT NULL DEFAULT 0,
    credits {{REAL}},
    rendered INTEGER NOT NULL DEFAULT 0,
    latency_ms {{REAL}},
    route TEXT NOT NULL DEFAULT '',
    conditional INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT, id TEXT
);
CREATE INDEX IF NOT EXISTS observations_url_time ON observations (url, fetched_at);
CREATE TABLE IF NOT EXISTS buckets ({_BUCKET_BODY}) {{WR}};
CREATE TABLE IF NOT EXISTS buckets_daily ({_BUCKET_BODY}) {{WR}};
CREATE TABLE IF NOT EXISTS sites (
    site TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0,
    cost_multiplier {{REAL}} NOT NULL DEFAULT 1,
    concurrency_cap INTEGER,
    band TEXT NOT NULL DEFAULT 'unknown',
    updated_at {{REAL}}
);
CREATE TABLE IF NOT EXISTS site_events (
    id {{SEQ}}, site TEXT NOT NULL, at {{REAL}} NOT NULL, kind TEXT NOT NULL, detail TEXT
);
CREATE TABLE IF NOT EXISTS health_history (
    site TEXT NOT NULL, at {{REAL}} NOT NULL, report TEXT NOT NULL, PRIMARY KEY (site, at)
) {{WR}};
CREATE TABLE IF NOT EXISTS health_state (site TEXT PRIMARY KEY, at {{REAL}} NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    url TEXT PRIMARY KEY, lease_id TEXT NOT NULL UNIQUE, worker TEXT NOT NULL, site TEXT NOT NULL,
    reason TEXT NOT NULL, leased_at {{REAL}} NOT NULL, expires_at {{REAL}} NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_site ON leases (site);
CREATE TABLE IF NOT EXISTS canaries (
    url TEXT PRIMARY KEY, site TEXT NOT NULL, expect TEXT NOT NULL,
    every_s {{REAL}} NOT NULL, added_at {{REAL}} NOT NULL
);
"""

_BUCKET_UPSERT: Final = (
    f"INSERT INTO {{table}} (site, page_type, route, start, {', '.join(_BUCKET_COLS)}) "
    f"VALUES (?, ?, ?, ?, {', '.join('?' * len(_BUCKET_COLS))}) "
    "ON CONFLICT (start, site, page_type, route) DO UPDATE SET "
    + ", ".join(f"{c} = {{table}}.{c} + excluded.{c}" for c in _BUCKET_COLS)
)
_PAGE_UPSERT: Final = (
    f"INSERT INTO pages ({', '.join(_PAGE_COLS)}) "
    f"VALUES ({', '.join('?' * len(_PAGE_COLS))}) ON CONFLICT (url) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _PAGE_COLS[1:])
)
_OBS_INSERT: Final = (
    f"INSERT INTO observations ({', '.join(_OBS_COLS)}) VALUES ({', '.join('?' * len(_OBS_COLS))})"
)
_CHUNK: Final = 500
_DAY_S: Final = 86400


def _ikey(key: bytes) -> int:
    """The observation's idempotency key as the table's 64-bit integer primary key."""
    return int.from_bytes(key[:8], "big", signed=True)


def _chunks(items: Sequence[Any], n: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


_BW: Final = BUCKET_SECONDS


def _aggregate(
    bidx: dict[tuple[str, str, str, int], int],
    row: list[int],
    out: list[int],
    num: list[tuple[float, float, float, bool, bool]],
    lrow: list[int],
    lat: list[float],
    can: list[tuple[int, int]],
) -> dict[tuple[str, str, str, int], list[float]]:
    """One batch's bucket deltas, summed with numpy (layout: see ``_BUCKET_COLS``)."""
    r = len(bidx)
    mat = np.zeros((r, _WIDTH))
    rows = np.asarray(row, dtype=np.int64)
    mat[:, 0] = np.bincount(rows, minlength=r)
    k = len(OUTCOMES)
    mat[:, _O0 : _O0 + k] = np.bincount(
        rows * k + np.asarray(out, dtype=np.int64), minlength=r * k
    ).reshape(r, k)
    nums = np.asarray(num, dtype=np.float64).reshape(len(num), 5)
    for c in range(5):
        mat[:, _S0 + c] = np.bincount(rows, weights=nums[:, c], minlength=r)
    if can:
        cj = np.asarray(can, dtype=np.int64)
        np.add.at(mat, (cj[:, 0], _S0 + cj[:, 1]), 1.0)
    if lat:
        lr = np.asarray(lrow, dtype=np.int64)
        la = np.asarray(lat, dtype=np.float64)
        mat[:, _S0 + 7] = np.bincount(lr, minlength=r)
        mat[:, _S0 + 8] = np.bincount(lr, weights=la, minlength=r)
        bins = np.searchsorted(LATENCY_EDGES_MS, la, side="left")
        mat[:, _H0:] = np.bincount(lr * LATENCY_BINS + bins, minlength=r * LATENCY_BINS).reshape(
            r, LATENCY_BINS
        )
    values = mat.tolist()
    return {key: values[j] for key, j in bidx.items()}


def _page_from_row(row: Sequence[Any]) -> PageState:
    p = PageState(url=row[0], site=row[1], page_type=row[2], value=row[3], first_seen=row[4])
    (
        p.last_fetch, p.last_ok, p.last_change, p.fingerprint, p.etag, p.last_modified,
        p.fetches, p.changes, p.bytes_total, p.credits_total, p.avg_bytes,
        p.ev_nc, p.ev_tc, p.ev_nu, p.ev_tu, p.nutch_interval,
    ) = row[5:21]  # fmt: skip
    p.gone = bool(row[21])
    return p


def _page_row(p: PageState) -> tuple[Any, ...]:
    return (
        p.url, p.site, p.page_type, p.value, p.first_seen, p.last_fetch, p.last_ok,
        p.last_change, p.fingerprint, p.etag, p.last_modified, p.fetches, p.changes,
        p.bytes_total, p.credits_total, p.avg_bytes, p.ev_nc, p.ev_tc, p.ev_nu, p.ev_tu,
        p.nutch_interval, int(p.gone),
    )  # fmt: skip


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
        "WR": "WITHOUT ROWID",
    }
    path: str

    def __init__(
        self, *, half_life_days: float | None = None, maintain_buckets: bool = True
    ) -> None:
        self.half_life_days = half_life_days
        # Off only to measure what bucket maintenance costs ingest (benchmarks/health_speed.py).
        self.maintain_buckets = maintain_buckets
        self._lock = threading.RLock()
        self._db: Any = self._connect()
        try:
            self._db.executescript(_DDL.format(**self.dialect))
            self._db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
                (str(SCHEMA_VERSION),),
            )
        except Exception as exc:
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from None

    def _connect(self) -> Any:
        raise NotImplementedError

    # -- writing ---------------------------------------------------------------------------

    def ingest(
        self,
        observations: Sequence[Observation],
        *,
        classifier: Classifier | None = None,
    ) -> BatchResult:
        result = BatchResult()
        if not observations:
            return result
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                self._ingest_locked(db, observations, classifier, result)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return result

    def _ingest_locked(
        self,
        db: Any,
        observations: Sequence[Observation],
        classifier: Classifier | None,
        result: BatchResult,
    ) -> None:
        unique: dict[bytes, Observation] = {}
        for o in observations:
            k8 = o.key[:8]
            if k8 in unique:
                result.duplicates += 1
            else:
                unique[k8] = o
        keys = list(unique)
        for chunk in _chunks(keys):
            q = f"SELECT key FROM observation_keys WHERE key IN ({','.join('?' * len(chunk))})"
            for (k,) in db.execute(q, [_ikey(c) for c in chunk]):
                del unique[k.to_bytes(8, "big", signed=True)]
                result.duplicates += 1
        todo = sorted(unique.values(), key=lambda o: (o.url, o.fetched_at))
        if not todo:
            return
        urls = list(dict.fromkeys(o.url for o in todo))
        pages: dict[str, PageState] = {}
        for chunk in _chunks(urls):
            q = f"SELECT {', '.join(_PAGE_COLS)} FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
            for row in db.execute(q, chunk):
                pages[row[0]] = _page_from_row(row)

        canaries = self._canaries(db)
        deltas: dict[tuple[str, str, str, int], list[float]] = {}
        obs_rows: list[tuple[Any, ...]] = []
        rebuild: list[str] = []
        counts = result.outcomes
        hl = self.half_life_days
        mb = self.maintain_buckets
        bidx: dict[tuple[str, str, str, int], int] = {}
        b_row: list[int] = []
        b_out: list[int] = []
        b_num: list[tuple[float, float, float, bool, bool]] = []
        b_lrow: list[int] = []
        b_lat: list[float] = []
        b_can: list[tuple[int, int]] = []
        current_url = ""
        page: PageState | None = None
        out_of_order = False
        for o in todo:
            if o.url != current_url:
                current_url = o.url
                page = pages.get(o.url)
                if page is None:
                    page = PageState(
                        url=o.url, site=o.site, page_type=o.page_type, first_seen=o.fetched_at
                    )
                    pages[o.url] = page
                out_of_order = page.last_fetch is not None and o.fetched_at < page.last_fetch
                if out_of_order:
                    rebuild.append(o.url)
            assert page is not None
            fixed = fixed_outcome(o, page, classifier)
            if out_of_order:
                outcome = fixed or "unchanged"
            else:
                outcome = apply_observation(page, o, fixed, half_life_days=hl)
            counts[outcome] = counts.get(outcome, 0) + 1
            obs_rows.append(
                (
                    _ikey(o.key),
                    o.url,
                    o.fetched_at,
                    o.status,
                    o.error,
                    fixed,
                    outcome,
                    o.record_hash,
                    int(o.record_empty),
                    o.etag,
                    o.last_modified,
                    o.bytes_sent,
                    o.bytes_received,
                    o.credits,
                    int(o.rendered),
                    o.latency_ms,
                    o.route,
                    int(o.conditional),
                    o.lease_id,
                    o.id,
                )
            )
            if not mb:
                continue
            bk = (page.site, page.page_type, o.route, int(o.fetched_at // _BW) * _BW)
            j = bidx.get(bk)
            if j is None:
                j = bidx[bk] = len(bidx)
            b_row.append(j)
            b_out.append(_OUT_IDX[outcome])
            b_num.append(
                (o.bytes_sent, o.bytes_received, o.billed_credits(), o.rendered, o.conditional)
            )
            if o.latency_ms is not None:
                b_lrow.append(j)
                b_lat.append(o.latency_ms)
            if o.canary is not None:
                b_can.append((j, 6 if o.canary == "mismatch" else 5))
            elif (
                canaries
                and o.url in canaries
                and o.record is not None
                and outcome in CONTENT_OUTCOMES
            ):
                b_can.append((j, 6 if canary_mismatches(o.record, canaries[o.url]) else 5))
        result.stored = len(todo)
        if mb:
            deltas = _aggregate(bidx, b_row, b_out, b_num, b_lrow, b_lat, b_can)
        db.executemany(_OBS_INSERT, obs_rows)
        db.executemany("INSERT INTO observation_keys VALUES (?)", [(r[0],) for r in obs_rows])
        leases = [(o.lease_id,) for o in todo if o.lease_id is not None]
        if leases:
            db.executemany("DELETE FROM leases WHERE lease_id = ?", leases)
        for url in rebuild:
            self._rebuild_page(db, pages[url], deltas, counts)
        result.reordered_pages = len(rebuild)
        db.executemany(_PAGE_UPSERT, [_page_row(p) for p in pages.values()])
        if not self.maintain_buckets:
            return
        db.executemany(
            _BUCKET_UPSERT.format(table="buckets"), [(*k, *v) for k, v in deltas.items()]
        )
        # the same deltas summed per whole UTC day, for the baselines
        day_index: dict[tuple[str, str, str, int], int] = {}
        rows_day = [
            day_index.setdefault((site, ptype, route, start - start % _DAY_S), len(day_index))
            for site, ptype, route, start in deltas
        ]
        daily = np.zeros((len(day_index), _WIDTH))
        np.add.at(daily, np.asarray(rows_day, dtype=np.int64), np.asarray(list(deltas.values())))
        db.executemany(
            _BUCKET_UPSERT.format(table="buckets_daily"),
            [(*k, *v) for k, v in zip(day_index, daily.tolist(), strict=True)],
        )

    def _rebuild_page(
        self,
        db: Any,
        page: PageState,
        deltas: dict[tuple[str, str, str, int], list[float]],
        counts: dict[str, int],
    ) -> None:
        """Re-fold a page's whole log in time order, fixing outcomes that depended on order."""
        page.reset_history()
        rows = db.execute(
            "SELECT seq, fetched_at, status, error, fixed, outcome, record_hash, etag, "
            "last_modified, bytes_sent, bytes_received, credits, route "
            "FROM observations WHERE url = ? ORDER BY fetched_at, seq",
            (page.url,),
        ).fetchall()
        fixes: list[tuple[str, int]] = []
        for seq, t, status, error, fixed, old, rh, etag, lm, bs, br, cr, route in rows:
            o = Observation(
                url=page.url, fetched_at=t, site=page.site, page_type=page.page_type,
                status=status, error=error, record_hash=rh, etag=etag, last_modified=lm,
                bytes_sent=bs, bytes_received=br, credits=cr, route=route,
            )  # fmt: skip
            new = apply_observation(page, o, fixed, half_life_days=self.half_life_days)
            if new != old:
                fixes.append((new, seq))
                bk = (page.site, page.page_type, route, int(t // BUCKET_SECONDS) * BUCKET_SECONDS)
                d = deltas.get(bk)
                if d is None:
                    d = deltas[bk] = [0.0] * _WIDTH
                d[_O0 + _OUT_IDX[old]] -= 1
                d[_O0 + _OUT_IDX[new]] += 1
                counts[old] = counts.get(old, 0) - 1
                counts[new] = counts.get(new, 0) + 1
        db.executemany("UPDATE observations SET outcome = ? WHERE seq = ?", fixes)

    def add_urls(self, rows: Iterable[tuple[str, str, str, float]], now: float) -> int:
        new = {r[0]: r for r in rows}
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                urls = list(new)
                for chunk in _chunks(urls):
                    q = f"SELECT url FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
                    for (u,) in db.execute(q, chunk):
                        del new[u]
                db.executemany(
                    "INSERT INTO pages (url, site, page_type, value, first_seen) VALUES (?, ?, ?, ?, ?)",
                    [(u, s, t, v, now) for u, s, t, v in new.values()],
                )
                db.execute(
                    "INSERT INTO meta VALUES ('urls_version', '1') ON CONFLICT (key) DO UPDATE "
                    "SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT)"
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return len(new)

    # -- reading ---------------------------------------------------------------------------

    def version(self) -> int:
        """A number that grows whenever observations or pages are added (cheap to read)."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce((SELECT max(seq) FROM observations), 0), "
                "coalesce((SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'urls_version'), 0)"
            ).fetchone()
        return int(row[0]) * 1_000_003 + int(row[1])

    def observation_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM observations").fetchone()[0])

    def page(self, url: str) -> PageState | None:
        """The current state of one page (``url`` as normalised), or None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_PAGE_COLS)} FROM pages WHERE url = ?", (url,)
            ).fetchone()
        return None if row is None else _page_from_row(row)

    def outcomes(self, url: str) -> list[tuple[float, str]]:
        """``(fetched_at, outcome)`` of every stored fetch of ``url``, in time order."""
        with self._lock:
            return [
                (t, o)
                for t, o in self._db.execute(
                    "SELECT fetched_at, outcome FROM observations WHERE url = ? ORDER BY fetched_at, seq",
                    (url,),
                )
            ]

    def validators(self, urls: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """``url → (etag, last_modified)`` for the known pages among ``urls``."""
        out: dict[str, tuple[str | None, str | None]] = {}
        with self._lock:
            for chunk in _chunks(list(urls)):
                q = f"SELECT url, etag, last_modified FROM pages WHERE url IN ({','.join('?' * len(chunk))})"
                for u, e, lm in self._db.execute(q, chunk):
                    out[u] = (e, lm)
        return out

    def outcomes_many(self, urls: Sequence[str]) -> dict[str, list[tuple[float, str]]]:
        """:meth:`outcomes` for several pages in one read."""
        out: dict[str, list[tuple[float, str]]] = {u: [] for u in urls}
        with self._lock:
            for chunk in _chunks(list(urls)):
                q = (
                    "SELECT url, fetched_at, outcome FROM observations "
                    f"WHERE url IN ({','.join('?' * len(chunk))}) ORDER BY url, fetched_at, seq"
                )
                for u, t, o in self._db.execute(q, chunk):
                    out[u].append((t, o))
        return out

    def group_totals(self) -> list[GroupTotals]:
        sums = ", ".join(f"sum(o_{o})" for o in OUTCOMES)
        with self._lock:
            rows = self._db.execute(
                f"SELECT site, page_type, sum(n), {sums}, sum(bytes_sent), sum(bytes_received), "
                "sum(credits) FROM buckets GROUP BY site, page_type ORDER BY site, page_type"
            ).fetchall()
        k = len(OUTCOMES)
        return [
            GroupTotals(
                site=r[0],
                page_type=r[1],
                fetches=int(r[2]),
                outcomes={o: int(v) for o, v in zip(OUTCOMES, r[3 : 3 + k], strict=True)},
                bytes_sent=int(r[3 + k]),
                bytes_received=int(r[4 + k]),
                credits=float(r[5 + k]),
            )
            for r in rows
        ]

    def buckets(
        self, since: float, until: float, sites: Sequence[str] | None = None, *, daily: bool = False
    ) -> BucketArrays:
        """Buckets with ``since <= start < until``; ``daily`` reads whole UTC days instead."""
        cols = ", ".join(_BUCKET_COLS)
        table = "buckets_daily" if daily else "buckets"
        q = f"SELECT site, page_type, route, start, {cols} FROM {table} WHERE start >= ? AND start < ?"
        args: list[Any] = [int(since), int(until)]
        if sites:
            q += f" AND site IN ({','.join('?' * len(sites))})"
            args.extend(sites)
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        arr = np.array([r[3:] for r in rows], dtype=np.float64).reshape(len(rows), 1 + _WIDTH)
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
            latency=arr[:, 1 + _H0 :],
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
            self._db.execute(
                "INSERT INTO canaries VALUES (?, ?, ?, ?, ?) ON CONFLICT (url) DO UPDATE SET "
                "site = excluded.site, expect = excluded.expect, every_s = excluded.every_s, "
                "added_at = excluded.added_at",
                (url, site, json.dumps(expect, sort_keys=True), every_s, now),
            )
            self._db.execute(
                "INSERT INTO pages (url, site, page_type, value, first_seen) VALUES (?, ?, 'canary', 1, ?) "
                "ON CONFLICT (url) DO NOTHING",
                (url, site, now),
            )

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
        """Per site: ``paused``, ``cost_multiplier``, ``concurrency_cap``, ``band``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT site, paused, cost_multiplier, concurrency_cap, band FROM sites"
            ).fetchall()
        return {
            r[0]: {
                "paused": bool(r[1]),
                "cost_multiplier": r[2],
                "concurrency_cap": r[3],
                "band": r[4],
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
                    db.execute(
                        "INSERT INTO site_events (site, at, kind, detail) VALUES (?, ?, ?, ?)",
                        (site, now, event, detail),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

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
    ) -> list[dict[str, Any]]:
        """Lease up to ``limit`` of ``candidates`` (``(url, site, reason)``, best first).

        Atomic: a URL is leased to one worker at a time; expired leases return
        to the pool first; a site never has more outstanding leases than its
        cap in ``site_caps``. Returns ``{"lease_id", "url", "site", "reason",
        "expires_at"}`` dicts.
        """
        caps = site_caps or {}
        out: list[dict[str, Any]] = []
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM leases WHERE expires_at <= ?", (now,))
                held = {u for (u,) in db.execute("SELECT url FROM leases")}
                per_site = dict(
                    db.execute("SELECT site, count(*) FROM leases GROUP BY site").fetchall()
                )
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

    # -- planner input ---------------------------------------------------------------------

    def page_columns(self) -> dict[str, Any]:
        """Every page's planning state as columns (lists and numpy arrays).

        Keys: ``url``, ``site``, ``page_type`` (lists of str); ``value``,
        ``first_seen``, ``last_ok``, ``last_fetch`` (unix seconds, NaN when
        never), ``ev_nc``, ``ev_tc``, ``ev_nu``, ``ev_tu``, ``nutch_interval``
        (seconds), ``avg_bytes`` (float64 arrays); ``gone`` (bool array).
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT url, site, page_type, value, first_seen, last_ok, last_fetch, ev_nc, ev_tc, "
                "ev_nu, ev_tu, nutch_interval, avg_bytes, gone FROM pages ORDER BY url"
            ).fetchall()
        cols: dict[str, Any] = {
            "url": [r[0] for r in rows],
            "site": [r[1] for r in rows],
            "page_type": [r[2] for r in rows],
        }
        num = np.array([r[3:] for r in rows], dtype=np.float64).reshape(len(rows), 11)
        for i, name in enumerate(
            ("value", "first_seen", "last_ok", "last_fetch", "ev_nc", "ev_tc", "ev_nu", "ev_tu",
             "nutch_interval", "avg_bytes")
        ):  # fmt: skip
            cols[name] = num[:, i]
        cols["gone"] = num[:, 10] > 0
        return cols

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
