"""The page columns a plan reads (issue 30, service memory): only the columns
asked for, the planner's bins read a chunk at a time, sites and page types as
codes, the URL column of the last read taken again while the pages are the
same set, and PostgreSQL's rows fetched a chunk at a time (both backends)."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from recrawl.engine.ingest import ingest_lines
from recrawl.records.evidence import BIN_COLUMNS, EVIDENCE_COLUMNS, planner_bins
from recrawl.records.strings import CodeColumn, StringColumn
from recrawl.store import SQLStore

T0 = 1_700_000_000.0
DAY = 86400.0


def fill(store: SQLStore, pages: int = 300, days: int = 6) -> list[str]:
    """``pages`` pages on three sites, two page types, fetched daily (a third
    changing each day, every seventh fetch failing), a tenth never fetched."""
    urls = [f"https://s{p % 3}.example/{'ab'[p % 2]}/{p}" for p in range(pages)]
    store.add_urls(
        [(u, f"s{p % 3}.example", "ab"[p % 2], 1.0 + p % 4) for p, u in enumerate(urls)], T0
    )
    lines = []
    for d in range(days):
        for p, u in enumerate(urls):
            if p % 10 == 9:
                continue
            status = 503 if (d + p) % 7 == 3 else 200
            row = {"url": u, "fetched_at": T0 + d * DAY + p, "status": status,
                   "page_type": "ab"[p % 2], "record_hash": f"v{(d * (p % 3)) // 2}"}  # fmt: skip
            lines.append(json.dumps(row))
    for i in range(0, len(lines), 500):
        ingest_lines(store, lines[i : i + 500], parallel=False)
    return urls


PLAN = ("url", "site", "page_type", "value", "last_ok", "ev_nc", "ev_tc", "moved", "ev_bins")


def test_a_plan_reads_its_columns_alone_and_the_bins_as_it_plans_them(store: SQLStore) -> None:
    fill(store)
    full = store.page_columns()
    assert set(full) >= {"id", "avg_bytes", "fetches", "credits_total", "ev_bins"}
    assert full["ev_bins"].shape == (300, EVIDENCE_COLUMNS) and full["ev_bins"].any()
    got = store.page_columns(PLAN, planner_bins=True)
    assert set(got) == set(PLAN)
    for name in PLAN[3:-1]:
        np.testing.assert_array_equal(got[name], full[name], err_msg=name)
    assert got["url"] == full["url"] and isinstance(got["url"], StringColumn)
    for name in ("site", "page_type"):
        col = got[name]
        assert isinstance(col, CodeColumn) and col == full[name]
        assert col.codes.dtype == np.uint8 and col.names == sorted(set(col))
        assert np.asarray(col, dtype=object).tolist() == list(full[name])
    want = planner_bins(full["ev_bins"])
    assert want is not None and want.dtype == np.float16
    bins = got["ev_bins"]
    assert bins.dtype == np.float16 and bins.shape == (300, BIN_COLUMNS)
    np.testing.assert_array_equal(bins, want)
    # without planner_bins: the store's (n, 22) float32 columns
    np.testing.assert_array_equal(store.page_columns(["ev_bins"])["ev_bins"], full["ev_bins"])
    assert store.page_count() == 300


def test_bins_float16_cannot_hold_are_read_again_as_float32(store: SQLStore) -> None:
    urls = fill(store, pages=40, days=3)
    big = np.zeros(EVIDENCE_COLUMNS, dtype="<f4")
    big[2], big[BIN_COLUMNS - 1] = 7.0e4, 1.5  # a count float16 would make infinite
    with store._lock:  # (the blob as a page would hold it; no report makes one so large)
        store._db.execute("UPDATE pages SET ev_bins = ? WHERE url = ?", (big.tobytes(), urls[5]))
    full = store.page_columns()
    got = store.page_columns(PLAN, planner_bins=True)["ev_bins"]
    want = planner_bins(full["ev_bins"])
    assert want is not None and want.dtype == np.float32
    assert got.dtype == np.float32 and got.shape == (40, BIN_COLUMNS)
    np.testing.assert_array_equal(got, want)
    assert float(got.max()) == 7.0e4


def test_the_url_column_is_read_once_while_the_pages_are_the_same(
    make_store: Callable[[], SQLStore],
) -> None:
    store, other = make_store(), None
    urls = fill(store, pages=60, days=2)
    first = store.page_columns(PLAN, planner_bins=True)["url"]
    store.add_urls([(urls[0], "s0.example", "a", 1.0)], T0)  # known: the set is the same
    ingest_lines(store, [json.dumps({"url": urls[1], "fetched_at": T0 + 9 * DAY})])
    again = store.page_columns(PLAN, planner_bins=True)
    assert again["url"] is first  # one column for both plans
    assert store.page_columns()["url"] is first
    # a new page, a page removed, a page renamed by a redirect: read again
    store.add_urls([("https://s9.example/new", "s9.example", "a", 1.0)], T0)
    added = store.page_columns(["url"])["url"]
    assert added is not first and added == sorted([*urls, "https://s9.example/new"])
    store.remove_urls([urls[3]])
    removed = store.page_columns(["url"])["url"]
    assert removed is not added and urls[3] not in list(removed)
    moved = {"url": urls[4], "fetched_at": T0 + 10 * DAY, "status": 301,
             "moved_to": "https://s1.example/b/moved"}  # fmt: skip
    ingest_lines(store, [json.dumps(moved)])
    renamed = store.page_columns(["url"])["url"]
    assert renamed is not removed and "https://s1.example/b/moved" in list(renamed)
    assert urls[4] not in list(renamed)
    # the column is taken again only while a plan holds it
    del first, again, added, removed
    assert store.page_columns(["url"])["url"] is renamed
    del renamed
    assert store.page_columns(["url"])["url"] == store.page_columns()["url"]
    assert other is None


def test_a_read_during_which_pages_change_takes_its_own_urls(
    connect: Callable[[], SQLStore],
) -> None:
    store, writer = connect(), connect()
    urls = fill(store, pages=30, days=1)
    held = store.page_columns(["url"])["url"]
    reads = 0
    stream = store._stream

    def add_meanwhile(db: object, sql: str, chunk: int) -> object:
        nonlocal reads
        reads += 1
        if reads == 1:  # another process adds a page once the set was read
            writer.add_urls([("https://s0.example/late", "s0.example", "a", 1.0)], T0)
        return stream(db, sql, chunk)

    store._stream = add_meanwhile  # type: ignore[method-assign]
    got = store.page_columns(PLAN, planner_bins=True)
    if type(store).__name__ == "PostgresStore":  # one snapshot: the page comes next read
        assert reads == 1 and got["url"] is held and len(got["value"]) == 30
    else:  # SQLite: the URLs taken again do not match the rows: read with their own
        assert reads == 2 and got["url"] is not held
        assert list(got["url"]) == sorted([*urls, "https://s0.example/late"])
        assert len(got["value"]) == len(got["url"]) == 31
    assert len(store.page_columns(["url"])["url"]) == 31


def test_postgres_reads_the_pages_a_chunk_at_a_time_in_one_snapshot(
    make_store: Callable[[], SQLStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    if type(store).__name__ != "PostgresStore":
        pytest.skip("PostgreSQL's cursor")
    monkeypatch.setattr("recrawl.store._sql._PAGE_CHUNK", 7)
    urls = fill(store, pages=50, days=2)
    got = store.page_columns()
    assert got["url"] == sorted(urls) and len(got["ev_bins"]) == 50
    conn = store._db.conn  # type: ignore[attr-defined]
    assert conn.info.transaction_status == 0  # idle: the read's transaction ended
    assert conn.execute("SELECT count(*) FROM pg_cursors").fetchone()[0] == 0
    store.add_urls([("https://s0.example/after", "s0.example", "a", 1.0)], T0)
    assert store.page_count() == 51
