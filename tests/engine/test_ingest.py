from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.engine.ingest import ingest_lines
from recrawl.engine.stats import compute_stats
from recrawl.store import SQLiteStore, SQLStore
from recrawl.testing.fetchlog import write_fetch_log


def obs(url: str, t: float, **kw) -> str:
    return json.dumps({"url": url, "fetched_at": t, **kw})


U = "https://shop.example/p/1"


def test_outcomes_inferred_from_status_and_record(store: SQLStore):
    lines = [
        obs(U, 100, status=200, record={"price": 1}),
        obs(U, 200, status=200, record={"price": 1}),
        obs(U, 300, status=200, record={"price": 2}),
        obs(U, 400, status=304),
        obs(U, 500, status=429),
        obs(U, 600, error="connection_reset"),
        obs(U, 700, error="timeout"),
        obs(U, 800, status=503),
        obs(U, 900, status=404),
        obs(U, 1000, status=200, record={"price": 2}, outcome="soft_block"),
    ]
    rep = ingest_lines(store, lines)
    assert rep.stored == 10 and rep.rejected == 0
    assert [o for _, o in store.outcomes(U)] == [
        "new", "unchanged", "changed", "not_modified", "hard_block", "hard_block",
        "error", "error", "gone", "soft_block",
    ]  # fmt: skip
    page = store.page(U)
    assert page is not None
    assert (
        page.last_ok == 400 and page.last_change == 300 and page.changes == 1 and page.fetches == 10
    )


def test_same_id_twice_is_stored_once(store: SQLStore):
    a = obs(U, 100, status=200, id="a")
    rep = ingest_lines(store, [a, a, obs(U, 200, status=200, id="a")])
    assert rep.stored == 1 and rep.duplicates == 2
    rep = ingest_lines(store, [a])
    assert rep.stored == 0 and rep.duplicates == 1
    assert store.observation_count() == 1


def test_out_of_order_arrival_ends_as_if_in_time_order(make_store):
    rng = random.Random(3)
    versions = [1, 1, 2, 2, 2, 3, 1, 1]
    lines = [
        obs(U, 1000 + 100 * i, status=200, record={"v": v}, id=str(i))
        for i, v in enumerate(versions)
    ]
    ordered = make_store()
    ingest_lines(ordered, lines)
    shuffled = lines[:]
    rng.shuffle(shuffled)
    mixed = make_store()
    for line in shuffled:  # one batch per line: every arrival may be out of order
        ingest_lines(mixed, [line])
    assert mixed.outcomes(U) == ordered.outcomes(U)
    a, b = ordered.page(U), mixed.page(U)
    assert a is not None and b is not None
    assert (a.last_change, a.changes, a.fingerprint, a.ev_nc, a.ev_nu) == (
        b.last_change, b.changes, b.fingerprint, b.ev_nc, b.ev_nu,
    )  # fmt: skip
    assert compute_stats(mixed.group_totals()) == compute_stats(ordered.group_totals())


def test_bad_lines_named_good_lines_kept(store: SQLStore):
    lines = [
        obs(U, 1, status=200),
        '{"fetched_at": 2, "status": 200}',
        obs("ftp://x/", 3, status=200),
        "not json",
        obs(U, 5, status=200, bytes_received=-1),
        obs(U, 6, status=200, outcome="weird"),
        obs(U, 7, status=200),
    ]
    rep = ingest_lines(store, lines)
    assert rep.stored == 2 and rep.rejected == 5
    assert [(e.line, e.field) for e in rep.errors] == [
        (2, "url"), (3, "url"), (4, None), (5, "bytes_received"), (6, "outcome"),
    ]  # fmt: skip


def test_record_fields_rules_decide_what_a_change_is(store: SQLStore):
    from recrawl.observe.fingerprint import FieldRule

    rules = {"page": FieldRule(ignore=("fetched",))}
    lines = [obs(U, t, status=200, record={"p": 1, "fetched": t}) for t in (1, 2, 3)]
    ingest_lines(store, lines, rules=rules)
    assert [o for _, o in store.outcomes(U)] == ["new", "unchanged", "unchanged"]


def test_stats_counts_revisits_changes_and_cost(store: SQLStore):
    lines = [
        obs(U, 1, status=200, record={"p": 1}, bytes_sent=100, bytes_received=900),
        obs(U, 2, status=200, record={"p": 2}, bytes_sent=100, bytes_received=900),
        obs(U, 3, status=304, bytes_sent=100, bytes_received=50),
        obs(U, 4, status=429, bytes_sent=100, bytes_received=10, credits=0),
        obs("https://news.example/a", 1, status=200, record={"t": 1}, page_type="article"),
    ]
    ingest_lines(store, lines)
    s = compute_stats(store.group_totals(), "bytes")
    shop = next(g for g in s["groups"] if g["site"] == "shop.example")
    assert shop == {
        "site": "shop.example", "page_type": "page", "fetches": 4, "revisits": 3,
        "changes_detected": 1, "fetches_without_change": 1, "cost": 2260.0, "cost_per_change": 2260.0,
    }  # fmt: skip
    assert s["total"]["observations"] == 5 and s["total"]["changes_detected"] == 1
    credits = compute_stats(store.group_totals(), "credits")
    shop_c = next(g for g in credits["groups"] if g["site"] == "shop.example")
    assert shop_c["cost"] == 3.0  # two 200s and a 304 cost a credit each; the 429 reported 0


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # state, ppid, ...


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _proc_stat(int(d.name))) and int(st[1]) == pid:
            out.append(int(d.name))
    return out


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie waiting to be reaped has exited)."""
    return [p for p in pids if (st := _proc_stat(p)) is not None and st[0] not in ("Z", "X")]


def test_kill_9_then_reingest_stores_every_observation_once(tmp_path: Path):
    log = tmp_path / "big.jsonl"
    write_fetch_log(str(log), 120_000, n_pages=5000, with_ids=False)
    db = tmp_path / "crash.db"
    cmd = [sys.executable, "-m", "recrawl.cli.main", "ingest", str(log), "--db", str(db), "-q"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some batches have landed, then kill
        time.sleep(0.2)
        try:  # a read-only look, which never waits for the writer
            ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                n = ro.execute("SELECT count(*) FROM observations").fetchone()[0]
            finally:
                ro.close()
        except sqlite3.Error:
            n = 0
        if n >= 20_000:
            break
    workers = _children(proc.pid)
    assert workers, "a 120,000-line log is parsed in worker processes"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # its parsing processes notice and leave too, rather than wait forever
    deadline = time.monotonic() + 15
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(workers), f"parse workers outlived the killed ingest: {_alive(workers)}"
    partial = SQLiteStore(db)
    stored_before = partial.observation_count()
    partial.close()
    assert 0 < stored_before < 120_000, "the kill should land mid-ingest"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    assert "already known" in done.stdout
    s = SQLiteStore(db)
    assert s.observation_count() == 120_000
    assert (
        s.execute(
            "SELECT count(*) FROM (SELECT key FROM observations GROUP BY key HAVING count(*) > 1)"
        )[0][0]
        == 0
    )
    assert s.execute("SELECT sum(n) FROM buckets")[0][0] == 120_000
    s.close()


def test_soft_blocks_and_challenges_detected_without_reported_outcome(store: SQLStore):
    from recrawl.engine.ingest import ContentClassifier

    lines = [obs(U, t, status=200, bytes_received=50_000, record={"price": t}) for t in (1, 2, 3)]
    lines += [
        obs(U, 4, status=200, bytes_received=1_200, record={"price": 3}),  # far smaller than normal
        obs(U, 5, status=200, bytes_received=49_000, record={}),  # empty record
        obs(U, 6, status=200, bytes_received=9_000, title="Just a moment..."),
        obs(U, 7, status=403, body_excerpt='<div class="g-recaptcha">'),
        obs(U, 8, status=200, bytes_received=51_000, record={"price": 3}),
    ]
    ingest_lines(store, lines, classifier=ContentClassifier())
    assert [o for _, o in store.outcomes(U)] == [
        "new", "changed", "changed", "soft_block", "soft_block", "challenge", "challenge", "unchanged",
    ]  # fmt: skip


def test_two_fetches_at_the_same_instant_are_stored(store: SQLStore):
    lines = [
        obs(U, 100, status=200, record={"p": 1}),
        obs(U, 200, status=200, record={"p": 2}, id="a"),
        obs(U, 200, status=200, record={"p": 3}, id="b"),
    ]
    rep = ingest_lines(store, lines)
    assert rep.stored == 3
    page = store.page(U)
    assert page is not None and page.changes == 2


def test_an_empty_store_has_no_totals_and_no_buckets(store: SQLStore):
    assert store.group_totals() == []
    assert store.buckets(0, 2e9).n.shape == (0,)
    assert store.buckets(0, 2e9, daily=True).n.shape == (0,)


def _bucket_rows(b: Any) -> dict[tuple[Any, ...], list[float]]:
    return {
        (
            b.sites[b.site[i]],
            b.page_types[b.page_type[i]],
            b.routes[b.route[i]],
            int(b.bucket_start[i]),
        ): [
            float(b.n[i]),
            *b.outcomes[i].tolist(),
            float(b.bytes_received[i]),
            float(b.credits[i]),
            *b.latency[i].tolist(),
        ]
        for i in range(len(b))
    }


def _old_vectors(s: Any, mat: Any, *, sparse: bool) -> list[Any]:
    """Rows of ``mat`` as ``s`` stored bucket vectors of any width."""
    from recrawl.store._sql import pack_sparse

    if isinstance(s, SQLiteStore):
        return pack_sparse(mat) if sparse else [r.astype("<f8").tobytes() for r in mat]
    return list(mat.tolist())


def _old_unvectors(s: Any, values: list[Any], width: int, *, sparse: bool) -> Any:
    """The inverse of :func:`_old_vectors`."""
    import numpy as np

    from recrawl.store._sql import unpack_sparse

    if isinstance(s, SQLiteStore):
        if sparse:
            return unpack_sparse(values, width)
        return np.frombuffer(b"".join(values), dtype="<f8").reshape(len(values), width)
    return np.array(values, dtype=np.float64).reshape(len(values), width)


def _as_schema_6(s: Any) -> None:
    """Drop what schema 7 added: the pages' and checkpoints' length bins."""
    db = s._db
    db.execute("ALTER TABLE pages DROP COLUMN ev_bins")
    db.execute("ALTER TABLE page_checkpoints DROP COLUMN ev_bins")
    db.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")


def _as_before_bins(p: Any) -> Any:
    """``p`` as a store from before the length bins reads it: its changed
    intervals in the bin of their mean length (so its estimate is as it was)."""
    from recrawl.records.evidence import blob_from_totals

    if p is None:
        return None
    return dataclasses.replace(p, ev_bins=blob_from_totals(p.ev_nc, p.ev_tc))


def _no_bins(p: Any) -> Any:
    return None if p is None else dataclasses.replace(p, ev_bins=b"")


def _as_schema_5(s: Any) -> None:
    """Drop what schema 6 added: the pages' failure counts and retirement, the checkpoints' counts."""
    db = s._db
    _as_schema_6(s)
    db.execute("ALTER TABLE pages DROP COLUMN fails")
    db.execute("ALTER TABLE pages DROP COLUMN moved_to")
    db.execute("ALTER TABLE page_checkpoints DROP COLUMN fails")
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")


def _as_schema_4(s: Any) -> None:
    """Rewrite the bucket vectors of ``s`` as schema 4 kept them: without their
    last figure, the fetches that failed before their page's first success."""
    from recrawl.store._sql import SPARSE_TABLES

    db = s._db
    for table in ("buckets", "buckets_daily"):
        sparse = table in SPARSE_TABLES
        rows = db.execute(f"SELECT k, v FROM {table}").fetchall()
        old = s._unvectors([r[1] for r in rows], sparse=sparse)[:, :-1]
        db.executemany(
            f"UPDATE {table} SET v = ? WHERE k = ?",
            list(zip(_old_vectors(s, old, sparse=sparse), [r[0] for r in rows], strict=True)),
        )
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")


def _as_schema_3(s: Any) -> None:
    """Rewrite the observation log of ``s`` as schema 3 kept it: one column per field."""
    from recrawl.observe.batch import LOG_FIELDS

    db = s._db
    rows = db.execute("SELECT seq, key, page, fetched_at, outcome, fixed, rest FROM observations")
    wide = [(*r[:6], *orjson.loads(r[6])) for r in rows.fetchall()]
    db.execute("DROP TABLE observations")
    cols = ("seq", "key", "page", "fetched_at", "outcome", "fixed", *LOG_FIELDS)
    db.execute(
        "CREATE TABLE observations (seq BIGINT PRIMARY KEY, key BIGINT NOT NULL, "
        "page BIGINT NOT NULL, fetched_at DOUBLE PRECISION NOT NULL, outcome TEXT NOT NULL, "
        "fixed TEXT, status INTEGER, error TEXT, record_hash TEXT, record_empty INTEGER, "
        "etag TEXT, last_modified TEXT, bytes_sent INTEGER, bytes_received INTEGER, "
        "credits DOUBLE PRECISION, rendered INTEGER, latency_ms DOUBLE PRECISION, "
        "route TEXT, conditional INTEGER, lease_id TEXT, id TEXT)"
    )
    db.executemany(
        f"INSERT INTO observations ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [tuple(int(v) if isinstance(v, bool) else v for v in r) for r in wide],
    )
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")


def _as_schema_2(s: Any) -> None:
    """Also rewrite the bucket tables as schema 2 kept them: (start, series) keys, whole vectors."""
    from recrawl.store._sql import BUCKET_WIDTH, SPARSE_TABLES

    db = s._db
    for table in ("buckets", "buckets_daily"):
        rows = db.execute(f"SELECT k, n, v FROM {table}").fetchall()
        sparse = table in SPARSE_TABLES
        dense = _old_unvectors(s, [r[2] for r in rows], BUCKET_WIDTH - 1, sparse=sparse)
        db.execute(f"DROP TABLE {table}")
        db.execute(
            f"CREATE TABLE {table} (start BIGINT NOT NULL, series BIGINT NOT NULL, "
            f"n BIGINT NOT NULL, v {s.dialect['VEC']} NOT NULL, PRIMARY KEY (start, series))"
        )
        old = _old_vectors(s, dense, sparse=False)
        db.executemany(
            f"INSERT INTO {table} VALUES (?, ?, ?, ?)",
            [
                ((k >> 32) * 900, k & 0xFFFFFFFF, n, v)
                for (k, n, _), v in zip(rows, old, strict=True)
            ],
        )
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6])
def test_an_older_store_is_migrated_with_its_log_and_buckets(
    make_store, tmp_path: Path, version: int
):
    """A schema 2 to 6 store is brought to the current schema when opened: its
    buckets, totals and page states are unchanged (the failed first fetches
    schema 4 did not count are counted from the log, and so are the
    consecutive failures schema 5 did not keep; the length bins schema 6 did
    not keep read as each page's mean changed length), and its migrated log
    still re-folds a page when a late report arrives (the same result as a
    store that was never migrated, but for the bins of the pages not re-folded)."""
    from recrawl.store import PostgresStore
    from recrawl.store._sql import SCHEMA_VERSION

    log = tmp_path / "log.jsonl"
    write_fetch_log(str(log), 650)
    lines = log.read_text().splitlines()
    late = json.loads(lines[100])  # an earlier, second report of a page fetched since
    late.update(id="late-1", fetched_at=late["fetched_at"] - 60, status=200, record_hash="zz")
    rest = [json.dumps(late), *lines[600:]]

    ref = make_store()
    ingest_lines(ref, lines[:600])
    ingest_lines(ref, rest)

    s = make_store()
    ingest_lines(s, lines[:600])
    fifteen, daily = s.buckets(0, 2e9), s.buckets(0, 2e9, daily=True)
    totals = s.group_totals()
    assert sum(g.outcomes["failed_first"] for g in totals) > 0
    urls = sorted({json.loads(x)["url"] for x in lines})
    before = s.outcomes_many(urls)
    states = [s.page(u) for u in urls]
    assert any(p and p.fails for p in states)  # (the log has failing pages)
    s._db.execute("BEGIN IMMEDIATE")
    if version == 6:
        _as_schema_6(s)
    else:
        _as_schema_5(s)
    if version <= 4:
        _as_schema_4(s)
    if version <= 3:
        _as_schema_3(s)
    if version == 2:
        _as_schema_2(s)
    s._db.execute("COMMIT")

    s = SQLiteStore(s.path) if isinstance(s, SQLiteStore) else PostgresStore(s._url)  # migrates
    try:
        got = s.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        assert got == [(str(SCHEMA_VERSION),)]
        assert s.group_totals() == totals
        assert _bucket_rows(s.buckets(0, 2e9)) == _bucket_rows(fifteen)
        assert _bucket_rows(s.buckets(0, 2e9, daily=True)) == _bucket_rows(daily)
        assert s.outcomes_many(urls) == before
        assert [s.page(u) for u in urls] == [_as_before_bins(p) for p in states]
        assert fifteen.n.sum() == 600
        rep = ingest_lines(s, rest)  # new observations, one of them late: the page is re-folded
        assert rep.reordered_pages == 1
        assert s.buckets(0, 2e9).n.sum() == 651
        assert [_no_bins(s.page(u)) for u in urls] == [_no_bins(ref.page(u)) for u in urls]
        assert s.outcomes_many(urls) == ref.outcomes_many(urls)
        assert _bucket_rows(s.buckets(0, 2e9)) == _bucket_rows(ref.buckets(0, 2e9))
        assert s.observation_count() == 651
        assert s.group_totals() == ref.group_totals()
        assert ingest_lines(s, lines).stored == 0  # the keys came through too
    finally:
        s.close()
        ref.close()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.lists(
            st.one_of(st.just(0.0), st.floats(-1e12, 1e12), st.just(float("nan"))),
            min_size=49,
            max_size=49,
        ),
        max_size=8,
    )
)
def test_sparse_bucket_vectors_round_trip(rows: list[list[float]]) -> None:
    import numpy as np

    from recrawl.store._sql import pack_sparse, unpack_sparse

    m = np.array(rows, dtype=np.float64).reshape(len(rows), 49)
    packed = pack_sparse(m)
    assert all(len(b) == 8 * (1 + np.count_nonzero(r)) for b, r in zip(packed, m, strict=True))
    assert np.array_equal(unpack_sparse(packed, 49), m, equal_nan=True)
    assert np.array_equal(unpack_sparse(packed[::-1], 49)[::-1], m, equal_nan=True)
    wider = unpack_sparse(packed, 50)  # a vector of schema 4 read as schema 5: a 0 appended
    assert np.array_equal(wider[:, :49], m, equal_nan=True) and not wider[:, 49].any()


@pytest.mark.parametrize("shuffled", [False, True])
def test_buckets_add_up_across_batches_and_connections(tmp_path: Path, shuffled: bool):
    """Buckets straddling batches, written by two connections in turn, out of order or not,
    hold what one ingest of the whole log gives."""
    import numpy as np

    log = tmp_path / "log.jsonl"
    write_fetch_log(str(log), 3000)
    lines = log.read_text().splitlines()
    ref = SQLiteStore(tmp_path / "ref.db")
    ingest_lines(ref, lines)
    if shuffled:
        random.Random(7).shuffle(lines)
    a, b = SQLiteStore(tmp_path / "x.db"), SQLiteStore(tmp_path / "x.db")
    for i in range(0, len(lines), 250):
        ingest_lines(a if i % 750 else b, lines[i : i + 250])
    for daily in (False, True):
        want = _bucket_rows(ref.buckets(0, 2e9, daily=daily))
        got = _bucket_rows(a.buckets(0, 2e9, daily=daily))
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert np.allclose(got[k], v), k
    assert [g.outcomes for g in a.group_totals()] == [g.outcomes for g in ref.group_totals()]
    for s in (ref, a, b):
        s.close()


def test_a_store_from_before_the_length_bins_keeps_its_estimates(make_store, tmp_path: Path):
    """Issue 29: a schema 6 store (four evidence numbers a page) opened by this
    recrawl estimates every page's rate as it did (the binned estimator reads a
    page without bins as all its changed intervals at their mean length), and
    once its pages are revisited they carry their own bins."""
    import numpy as np

    from recrawl.estimate.rates import estimate_rates, fit_group_priors
    from recrawl.store import PostgresStore

    log = tmp_path / "log.jsonl"
    write_fetch_log(str(log), 1500)
    lines = log.read_text().splitlines()
    s = make_store()
    ingest_lines(s, lines[:1200])

    def today(cols: dict[str, Any]) -> Any:  # the estimator before the bins
        ev = [cols[k] for k in ("ev_nc", "ev_tc", "ev_nu", "ev_tu")]
        return estimate_rates(*ev, priors=fit_group_priors(*ev))[0]

    def now(cols: dict[str, Any]) -> Any:  # the estimator the planner uses
        ev = [cols[k] for k in ("ev_nc", "ev_tc", "ev_nu", "ev_tu")]
        bins = cols["ev_bins"]
        return estimate_rates(*ev, priors=fit_group_priors(*ev, bins=bins), bins=bins)[0]

    old = s.page_columns()
    assert (old["ev_nc"] > 0).sum() > 20
    s._db.execute("BEGIN IMMEDIATE")
    _as_schema_6(s)
    s._db.execute("COMMIT")
    s = SQLiteStore(s.path) if isinstance(s, SQLiteStore) else PostgresStore(s._url)  # migrates
    try:
        cols = s.page_columns()
        np.testing.assert_allclose(now(cols), today(old), rtol=1e-3)
        ingest_lines(s, lines[1200:])
        assert s.page_columns()["ev_bins"].sum() > cols["ev_bins"].sum()
    finally:
        s.close()


def test_parsing_processes_and_this_process_store_the_same(
    make_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A large input is parsed in other processes, which also compute the
    observations' columns for the store; the result is the same as parsing
    here: pages, outcomes, buckets, the log, duplicates and rejected lines.
    (Chunks of 1,000 lines instead of 5,000: the same paths, a fifth of the
    rows to store twice.)"""
    import recrawl.engine.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "PARSE_CHUNK", 1000)
    log = tmp_path / "log.jsonl"
    write_fetch_log(str(log), 3 * ingest_module.PARSE_CHUNK)
    routes = ["pool-a", "pool-b", "résidentiel", ""]  # bucket series are split by route
    lines = []
    for i, text in enumerate(log.read_text().splitlines()):
        o = json.loads(text)
        o["route"] = routes[i % len(routes)]
        if i % 97 == 0:  # the reporter's own canary check, summed into the buckets
            o["canary"] = "mismatch" if i % 2 else "ok"
        lines.append(json.dumps(o))
    lines[7] = '{"url": "ftp://x/", "fetched_at": 1}'  # rejected
    lines += lines[100:150]  # duplicates, across chunks
    random.Random(3).shuffle(lines)  # late reports: pages re-folded
    a, b = make_store(), make_store()
    ra = ingest_lines(a, lines, parallel=True, batch_size=800)
    rb = ingest_lines(b, lines, parallel=False, batch_size=800)
    assert (ra.stored, ra.duplicates, ra.rejected) == (rb.stored, rb.duplicates, rb.rejected)
    assert ra.rejected == 1 and ra.duplicates == 50 and ra.reordered_pages > 0
    assert ra.outcomes == rb.outcomes
    urls = sorted({json.loads(x)["url"] for x in lines if "ftp:" not in x})
    assert len(urls) >= 200
    assert [a.page(u) for u in urls] == [b.page(u) for u in urls]
    assert a.outcomes_many(urls) == b.outcomes_many(urls)
    buckets = _bucket_rows(a.buckets(0, 2e9))
    assert buckets == _bucket_rows(b.buckets(0, 2e9))
    assert {k[2] for k in buckets} == set(routes)
    got, want = a.buckets(0, 2e9), b.buckets(0, 2e9)
    assert int(got.canary_mismatch.sum()) > 0 and int(got.canary_ok.sum()) > 0
    for field in ("canary_ok", "canary_mismatch"):
        assert sorted(getattr(got, field).tolist()) == sorted(getattr(want, field).tolist())
    logs = [
        s.execute("SELECT key, fetched_at, outcome, fixed, rest FROM observations ORDER BY key")
        for s in (a, b)
    ]
    assert logs[0] == logs[1] and len(logs[0]) == ra.stored


def test_a_line_not_utf8_is_rejected_and_the_others_stored(store: SQLStore):
    """A byte that is not UTF-8, read with errors="surrogateescape" (as the CLI
    reads), is a lone surrogate: its line is rejected by number, the rest stored."""
    lines = [
        obs(U, 1, status=200),
        '{"url": "https://shop.example/caf\udce9", "fetched_at": 2, "status": 200}',
        obs(U, 3, status=200),
        '{"url": "https://q.example/ms", "fetched_at": 1796000000000, "status": 200}',
        obs(U, 5, status=200),
    ]
    rep = ingest_lines(store, lines)
    assert (rep.stored, rep.rejected) == (3, 2)
    assert [(e.line, e.field) for e in rep.errors] == [(2, None), (4, "fetched_at")]
    assert str(rep.errors[0]).startswith("line 2: not valid UTF-8 text")
    assert "milliseconds" in str(rep.errors[1])
    assert [t for t, _ in store.outcomes(U)] == [1, 3, 5]


def test_a_csv_row_not_utf8_is_rejected_and_the_others_stored(store: SQLStore, tmp_path: Path):
    path = tmp_path / "log.csv"
    path.write_bytes(
        b"\xef\xbb\xbfurl,fetched_at,status,title\n"  # with a byte-order mark
        b"https://shop.example/p/1,1,200,ok\n"
        b"https://shop.example/p/1,2,200,caf\xe9\n"  # Latin-1, not UTF-8
        b"https://shop.example/p/1,3,200,\n"
    )
    with path.open(encoding="utf-8", errors="surrogateescape") as f:  # the BOM stays
        rep = ingest_lines(store, f, fmt="csv")
    assert (rep.stored, rep.rejected) == (2, 1)
    assert [(e.line, e.field) for e in rep.errors] == [(3, "title")]
    assert str(rep.errors[0]) == "line 3: field 'title': not valid UTF-8 text (byte 0xE9)"
    assert [t for t, _ in store.outcomes(U)] == [1, 3]


def test_lines_not_utf8_are_rejected_by_the_parsing_processes_too(make_store, tmp_path: Path):
    from recrawl.engine.ingest import PARSE_CHUNK

    path = tmp_path / "log.jsonl"
    n = 2 * PARSE_CHUNK + 100  # enough lines to be parsed in other processes
    bad = {3, PARSE_CHUNK + 7, 2 * PARSE_CHUNK + 50}  # 0-based, in three chunks
    with path.open("wb") as f:
        for i in range(n):
            url = f"https://shop.example/p/{i % 500}"
            text = obs(url, 1000 + i, status=200).encode()
            if i in bad:
                text = text.replace(b"/p/", b"/caf\xe9/")
            f.write(text + b"\n")
    a, b = make_store(), make_store()
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as f:
        ra = ingest_lines(a, f, parallel=True)
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as f:
        rb = ingest_lines(b, f, parallel=False)
    for rep in (ra, rb):
        assert (rep.read, rep.stored, rep.rejected) == (n - 3, n - 3, 3)
        assert [e.line for e in rep.errors] == sorted(i + 1 for i in bad)
        assert all("not valid UTF-8 text (byte 0xE9" in str(e) for e in rep.errors)
    assert [str(e) for e in ra.errors] == [str(e) for e in rb.errors]
    assert a.observation_count() == b.observation_count() == n - 3


def test_numbers_beyond_their_columns_are_rejected_and_the_others_stored(store: SQLStore):
    lines = [
        obs(U, 1, status=200),
        obs(U, 2, status=200, bytes_received=1e300),
        obs(U, 3, status=200),
        f'{{"url": "{U}", "fetched_at": 4, "status": 200, "bytes_sent": 9223372036854775808}}',
        obs(U, 5, status=200, latency_ms=1.5e308),
        obs(U, 6, status=200, credits=1e300),
        obs(U, 7, status=1e300),
        obs(U, 8, status=200, record={"a": 1e300, "b": 18446744073709551615}),
        obs(U, 9, status=200, route="pool\u0000a"),
        obs(U, 10, status=200),
    ]
    rep = ingest_lines(store, lines)
    assert (rep.stored, rep.rejected) == (4, 6)
    assert [(e.line, e.field) for e in rep.errors] == [
        (2, "bytes_received"), (4, "bytes_sent"), (5, "latency_ms"), (6, "credits"),
        (7, "status"), (9, "route"),
    ]  # fmt: skip
    assert [t for t, _ in store.outcomes(U)] == [1, 3, 8, 10]


def test_a_huge_number_in_a_large_file_is_rejected_by_the_parsing_processes(store: SQLStore):
    from recrawl.engine.ingest import PARSE_CHUNK

    n = 2 * PARSE_CHUNK + 100  # parsed in other processes
    bad = {7: 1e300, PARSE_CHUNK + 3: 2**63, 2 * PARSE_CHUNK + 50: 2**64 - 1}  # 0-based
    lines = [
        obs(f"https://shop.example/p/{i % 500}", 1000 + i, status=200, bytes_received=bad.get(i, 9))
        for i in range(n)
    ]
    rep = ingest_lines(store, lines, batch_size=PARSE_CHUNK, parallel=True)
    assert (rep.read, rep.stored, rep.rejected) == (n - 3, n - 3, 3)
    assert [(e.line, e.field) for e in rep.errors] == [(i + 1, "bytes_received") for i in bad]
    assert store.observation_count() == n - 3


def test_csv_long_field_bad_row_and_header_case(store: SQLStore):
    lines = [
        "URL, Fetched_At ,status,title\n",
        f"{U},1,200,{'x' * 200_000}\n",  # over the csv module's default 128 KiB
        f"{U},2,200,a\rb\n",  # a bare carriage return in an unquoted field
        f"{U},3,200,ok\n",
    ]
    rep = ingest_lines(store, lines, fmt="csv")
    assert (rep.stored, rep.rejected) == (2, 1)
    assert [(e.line, e.field) for e in rep.errors] == [(3, None)]
    assert [t for t, _ in store.outcomes(U)] == [1, 3]


def test_csv_without_url_column_is_rejected_not_silently_empty(store: SQLStore):
    rep = ingest_lines(store, [f"{U},1,200\n", f"{U},2,200\n"], fmt="csv")  # no header row
    assert (rep.stored, rep.rejected) == (0, 1)
    (e,) = rep.errors
    assert e.line == 1 and "no 'url' column" in str(e) and "no header row" in str(e)


def test_a_classifier_of_ones_own_keeps_the_usual_garbage_collection(store: SQLStore):
    """Bulk ingest collects cyclic garbage rarely (its batches make none), but a
    caller's classifier may leave cycles on every call (a parsed HTML tree with
    parent links): with one, the collector runs as often as usual."""
    import gc

    from recrawl.engine.ingest import GC_GEN0, GC_GEN0_BULK

    seen: list[int] = []

    def mine(o, page):  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold()[0])
        return None

    lines = [obs(U, 100 + i, status=200, record={"p": i}) for i in range(3)]
    ingest_lines(store, lines, classifier=mine)
    assert seen and set(seen) == {GC_GEN0}
    inside: list[int] = []
    ingest_lines(store, lines, on_batch=lambda rep: inside.append(gc.get_threshold()[0]))
    assert set(inside) == {GC_GEN0_BULK}


def test_observations_built_in_code_are_not_taken_for_repeats(store: SQLStore):
    """Library callers may build Observation objects themselves (no key): three
    distinct fetches are three, the same one twice is still one."""
    from recrawl.engine.ingest import ingest_observations
    from recrawl.observe.observation import Observation

    def fetch(i: int, **kw: Any) -> Observation:
        return Observation(
            url=f"https://a.example/{i}", fetched_at=1000.0 + i, site="a.example",
            page_type="page", status=200, **kw,
        )  # fmt: skip

    rep = ingest_observations(store, [fetch(0), fetch(1), fetch(2)])
    assert (rep.stored, rep.duplicates) == (3, 0)
    rep = ingest_observations(store, [fetch(1), fetch(3, id="x"), fetch(3, id="x")])
    assert (rep.stored, rep.duplicates) == (1, 2)
    assert store.observation_count() == 4


def test_engine_ingest_runs_the_content_checks_with_the_configured_block_markers(store: SQLStore):
    from recrawl.config import Settings
    from recrawl.engine.engine import Engine
    from recrawl.observe.observation import parse_observation

    def fetch(t: float, **kw: Any) -> Any:
        return parse_observation({"url": U, "fetched_at": t, "status": 200, **kw})

    engine = Engine(store, Settings(block_markers=["please hold, checking your browser"]))
    rep = engine.ingest(
        [fetch(t, bytes_received=50_000, record={"price": t}) for t in (1, 2, 3)]
        + [
            fetch(4, bytes_received=1_200, record={"price": 3}),  # far smaller than normal
            fetch(5, bytes_received=48_000, title="Please hold, checking your browser"),
        ]
    )
    assert rep.stored == 5
    assert [o for _, o in store.outcomes(U)] == [
        "new", "changed", "changed", "soft_block", "challenge",
    ]  # fmt: skip
