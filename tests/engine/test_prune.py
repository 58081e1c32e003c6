"""Pruning the observation log: pages keep what the deleted rows taught them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app
from recrawl.engine.engine import Engine
from recrawl.engine.ingest import PARSE_CHUNK, ingest_lines
from recrawl.engine.pipeline import prune_log, store_batch
from recrawl.engine.stats import compute_stats
from recrawl.observe.observation import parse_observation
from recrawl.store import SQLiteStore, SQLStore, SQLWrite

A = "https://shop.example/p/1"  # reached early, changes now and then
B = "https://shop.example/p/2"  # fails before its first success
C = "https://shop.example/p/3"  # reached, then fails across the horizon
D = "https://news.example/a"  # every fetch before the horizon


def line(url: str, t: float, status: int = 200, v: int | None = None, **kw: Any) -> str:
    raw: dict[str, Any] = {"url": url, "fetched_at": t, "status": status, "id": f"{url}@{t}"}
    if v is not None:
        raw["record"] = {"v": v}
    return json.dumps(raw | kw)


def history() -> list[str]:
    return [
        *(line(A, t, v=t // 300, bytes_received=1000 + t) for t in range(100, 1100, 100)),
        line(B, 100, 404),
        line(B, 200, 503),
        *(line(B, t, v=1) for t in (600, 700, 800)),
        line(C, 100, v=1),
        line(C, 200, 404),
        line(C, 600, 404),
        line(C, 900, v=2),
        line(D, 100, v=1, latency_ms=80),
        line(D, 300, v=2, latency_ms=120),
    ]


LATE = [  # after every page's last pruned fetch, before its last fetch: re-folds
    line(A, 520, v=9),
    line(B, 550, 503),
    line(C, 650, 404),
]
HORIZON = 500.0  # prune before this time


def _ingest(store: SQLStore, lines: list[str], batch: int = 4) -> None:
    for i in range(0, len(lines), batch):
        ingest_lines(store, lines[i : i + batch])


def _snapshot(store: SQLStore) -> dict[str, Any]:
    """What a user sees of the store but for the log: pages, buckets, stats."""
    b = store.buckets(0, 1e6)
    return {
        "pages": store.execute("SELECT * FROM pages ORDER BY id"),
        "buckets": store.execute("SELECT k, n, v FROM buckets ORDER BY k"),
        "daily": store.execute("SELECT k, n, v FROM buckets_daily ORDER BY k"),
        "stats": compute_stats(store.group_totals()),
        "bucket_arrays": (b.n.tolist(), b.outcomes.tolist(), b.latency.tolist()),
    }


def _obs(raw: str) -> Any:
    return parse_observation(json.loads(raw))


def test_a_late_report_after_a_prune_ends_as_with_the_whole_log(
    make_store: Callable[[], SQLStore],
) -> None:
    whole, pruned = make_store(), make_store()
    for s in (whole, pruned):
        _ingest(s, history())
    rep = prune_log(pruned, HORIZON)
    assert (rep.observations_removed, rep.pages_checkpointed) == (10, 4)
    assert pruned.observation_count() == whole.observation_count() - 10
    assert _snapshot(pruned) == _snapshot(whole)  # a prune changes nothing a user reads
    for s in (whole, pruned):
        res = store_batch(s, [_obs(x) for x in LATE])
        assert res.stored == 3 and res.reordered_pages == 3 and not res.refused
    assert _snapshot(pruned) == _snapshot(whole)
    for url in (A, B, C):  # the kept part of the log, its outcomes re-decided alike
        assert pruned.outcomes(url) == [(t, o) for t, o in whole.outcomes(url) if t >= HORIZON]
    assert pruned.outcomes(D) == []  # every fetch of D was pruned: only its state remains
    assert pruned.page(D) == whole.page(D)


def test_a_report_older_than_its_pages_pruned_log_is_refused_and_changes_nothing(
    make_store: Callable[[], SQLStore],
) -> None:
    store = make_store()
    _ingest(store, history())
    prune_log(store, HORIZON)
    before, count, version = _snapshot(store), store.observation_count(), store.version()
    batch = [_obs(line(A, 350, v=7)), _obs(line(A, 1200, v=7)), _obs(line(D, 50, 404))]
    res = store_batch(store, batch)
    assert res.stored == 1 and res.duplicates == 0
    assert [i for i, _ in res.refused] == [0, 2]
    why = res.refused[0][1]
    assert "1970-01-01T00:05:50Z" in why and "1970-01-01T00:06:40Z" in why and "pruned" in why
    assert "1970-01-01T00:05:00Z" in res.refused[1][1]  # D's last pruned fetch
    store_batch(store, [_obs(line(A, 350, v=7))])  # sent again: refused again, not a duplicate
    assert store.observation_count() == count + 1
    assert _snapshot(store)["pages"] != before["pages"]  # the report at 1200 was stored
    assert store.version() > version
    res = store_batch(store, [_obs(line(A, 350, v=7))])
    assert res.stored == 0 and res.duplicates == 0 and len(res.refused) == 1


@pytest.mark.parametrize("parallel", [False, True])
def test_a_refused_report_in_a_file_names_its_line(
    make_store: Callable[[], SQLStore], parallel: bool
) -> None:
    """A report older than its page's pruned log is rejected like a bad line:
    the error names the line, so the operator finds it in a big file."""
    store = make_store()
    _ingest(store, history())
    prune_log(store, HORIZON)
    # enough lines for the parallel parser; the bad line and the refused
    # report sit in the second chunk, after other good lines
    fill = [line(f"https://filler.example/{i}", 2000 + i) for i in range(2 * PARSE_CHUNK + 10)]
    lines = [*fill, "not json", line(A, 350, v=7), line(B, 2500, v=1)]
    rep = ingest_lines(store, lines, parallel=parallel)
    assert rep.rejected == 2 and rep.stored == len(fill) + 1
    bad_json, refused = rep.errors
    assert bad_json.line == len(fill) + 1
    assert refused.line == len(fill) + 2 and refused.field == "fetched_at"
    assert str(refused).startswith(f"line {len(fill) + 2}: field 'fetched_at': ")
    assert "pruned" in str(refused) and A in str(refused)


def test_refused_reports_leave_the_store_as_it_was(make_store: Callable[[], SQLStore]) -> None:
    store = make_store()
    _ingest(store, history())
    prune_log(store, HORIZON)
    before, version = _snapshot(store), store.version()
    res = store_batch(store, [_obs(line(A, 350, v=7)), _obs(line(C, 150, 503))])
    assert res.stored == 0 and len(res.refused) == 2
    assert _snapshot(store) == before and store.version() == version


def test_a_pruned_observation_sent_again_is_a_duplicate(
    make_store: Callable[[], SQLStore],
) -> None:
    store = make_store()
    _ingest(store, history())
    prune_log(store, HORIZON)
    before = _snapshot(store)
    rep = ingest_lines(store, history())
    assert rep.stored == 0 and rep.duplicates == len(history())
    assert _snapshot(store) == before


def test_a_second_prune_builds_on_the_first(make_store: Callable[[], SQLStore]) -> None:
    twice, once, whole = make_store(), make_store(), make_store()
    for s in (twice, once, whole):
        _ingest(s, history())
    prune_log(twice, 250)
    assert prune_log(twice, 250).observations_removed == 0  # nothing left to do
    rep = prune_log(twice, HORIZON)
    assert rep.observations_removed == 10 - 7
    prune_log(once, HORIZON)
    cps = "SELECT * FROM page_checkpoints ORDER BY page"
    assert twice.execute(cps) == once.execute(cps)
    for s in (twice, once, whole):
        store_batch(s, [_obs(x) for x in LATE])
    assert _snapshot(twice) == _snapshot(whole)


def test_a_prune_that_crashes_midway_leaves_pages_whole_and_a_rerun_finishes(
    make_store: Callable[[], SQLStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, reference = make_store(), make_store()
    for s in (store, reference):
        _ingest(s, history())
    prune_log(reference, HORIZON)
    real = SQLWrite.write_checkpoints
    calls = 0

    def crash_in_second(self: SQLWrite, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        got = real(self, *args)  # rows folded, checkpoints written, rows deleted ...
        if calls == 2:
            raise KeyboardInterrupt  # ... and the transaction never commits
        return got

    monkeypatch.setattr(SQLWrite, "write_checkpoints", crash_in_second)
    with pytest.raises(KeyboardInterrupt):
        prune_log(store, HORIZON, chunk_rows=1)  # one page per transaction
    monkeypatch.undo()
    pages = store.execute("SELECT id FROM pages ORDER BY id")
    done = {p for (p,) in store.execute("SELECT page FROM page_checkpoints")}
    assert len(done) == 1
    for (p,) in pages:  # each page either pruned and checkpointed, or untouched
        old = store.execute(
            "SELECT count(*) FROM observations WHERE page = ? AND fetched_at < ?", (p, HORIZON)
        )[0][0]
        assert (old == 0) == (p in done)
    rep = prune_log(store, HORIZON)
    assert rep.pages_checkpointed == 3
    cps = "SELECT * FROM page_checkpoints ORDER BY page"
    assert store.execute(cps) == reference.execute(cps)
    assert store.observation_count() == reference.observation_count()
    for s in (store, reference):
        store_batch(s, [_obs(x) for x in LATE])
    assert _snapshot(store) == _snapshot(reference)


def test_the_store_version_never_goes_down(make_store: Callable[[], SQLStore]) -> None:
    store = make_store()
    _ingest(store, [line(A, 1000, v=1), line(A, 2000, v=1)])
    _ingest(store, [line(B, 100, v=1), line(C, 150, v=1)])  # new pages: the newest rows, old
    v0 = store.version()
    assert prune_log(store, 500).observations_removed == 2
    v1 = store.version()
    assert v1 >= v0
    _ingest(store, [line(D, 3000, v=1)])
    v2 = store.version()
    assert v2 > v1
    store.remove_urls([D])  # its row was the newest
    assert store.version() >= v2
    _ingest(store, [line(B, 3000, v=2)])
    assert store.version() > v2


def test_a_prune_by_another_connection_is_seen_by_a_writer(
    connect: Callable[[], SQLStore],
) -> None:
    writer, operator = connect(), connect()
    _ingest(writer, history())
    prune_log(operator, HORIZON)
    res = store_batch(
        writer, [_obs(line(A, 350, v=7)), _obs(LATE[0])]
    )  # its cache predates the prune
    assert [i for i, _ in res.refused] == [0] and res.stored == 1


def test_stats_and_health_read_the_same_after_a_prune(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with SQLiteStore(db) as s:
        _ingest(s, history())
    runner = CliRunner()

    def read() -> tuple[str, Any, Any]:
        stats = runner.invoke(app, ["stats", "--db", db, "--json"])
        assert stats.exit_code == 0, stats.output
        with SQLiteStore(db) as s:
            eng = Engine(s)
            health = eng.health(1500.0, record=False)
            b = s.buckets(0, 1e6, daily=True)
            return stats.output, health, (b.n.tolist(), b.outcomes.tolist())

    before = read()
    res = runner.invoke(app, ["prune", "--db", db, "--before", "1970-01-01T00:08:20Z"])
    assert res.exit_code == 0, res.output
    assert read() == before


def test_the_command_prints_what_it_removed_and_vacuum_shrinks_the_file(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    lines = [
        line(f"https://shop.example/p/{i}", 1000.0 * k + i, v=k, etag=f"{k}-" + "x" * 300)
        for k in range(1, 21)
        for i in range(100)
    ]
    with SQLiteStore(db) as s:
        ingest_lines(s, lines)
    runner = CliRunner()
    res = runner.invoke(app, ["prune", "--db", db, "--before", "18000"])
    assert res.exit_code == 0, res.output
    assert "1,700 observations fetched before 1970-01-01 05:00:00Z removed" in res.output
    assert "100 pages checkpointed" in res.output and "--vacuum" in res.output
    res = runner.invoke(app, ["prune", "--db", db, "--before", "19000", "--vacuum"])
    assert res.exit_code == 0, res.output
    assert "100 observations" in res.output
    mb_before = float(res.output.split("file ")[1].split(" MB")[0])
    mb_after = float(res.output.split("before, ")[1].split(" MB")[0])
    assert mb_after < mb_before / 2
    with SQLiteStore(db) as s:
        assert s.observation_count() == 200
    res = runner.invoke(app, ["prune", "--db", db])
    assert res.exit_code == 2 and "--before or --keep-days" in res.output
    # the log spans 20,100 s: 30 days back from its newest fetch keeps all of it
    res = runner.invoke(app, ["prune", "--db", db, "--keep-days", "30"])
    assert res.exit_code == 0 and "0 observations" in res.output, res.output


def test_recrawl_ingest_names_a_report_older_than_the_pruned_log(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with SQLiteStore(db) as s:
        _ingest(s, history())
        prune_log(s, HORIZON)
    late = tmp_path / "late.jsonl"
    late.write_text(line(A, 1200, v=7) + "\n" + line(A, 350, v=7) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(late), "--db", db])
    assert res.exit_code == 1  # a rejection, named, and the good line stored
    assert "pruned" in res.output and "fetched_at" in res.output
    assert A in " ".join(res.output.split()).replace(" ", "")  # which report: its URL
    assert "1 observations stored, 0 already known, 1 rejected" in res.output


def test_the_service_answers_a_report_older_than_the_pruned_log_as_rejected(
    tmp_path: Path,
) -> None:
    from recrawl.config import Settings
    from recrawl.service import Service
    from recrawl.testing.server import ManualClock

    db = tmp_path / "s.db"
    with SQLiteStore(db) as s:
        _ingest(s, history())
        prune_log(s, HORIZON)
    store = SQLiteStore(db)
    svc = Service(Engine(store, Settings(), clock=ManualClock(2000.0)))
    try:
        body = "\n".join(["", line(A, 350, v=7), line(A, 1200, v=7), "not json"]).encode()
        got = svc.ingest_body(body)
        assert got["stored"] == 1 and got["accepted"] == 1
        assert [(r["index"], r["field"]) for r in got["rejected"]] == [(1, "fetched_at"), (3, None)]
        assert "pruned" in got["rejected"][0]["error"]
    finally:
        svc.writer.close()
        store.close()


def test_prune_refuses_a_future_horizon_and_names_its_option(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with SQLiteStore(db) as s:
        _ingest(s, history())
    runner = CliRunner()
    res = runner.invoke(app, ["prune", "--db", db, "--before", "2150-01-01T00:00:00Z"])
    assert res.exit_code == 2 and "in the future" in " ".join(res.output.split())
    with SQLiteStore(db) as s:
        assert s.observation_count() == len(history())  # nothing deleted
    res = runner.invoke(app, ["prune", "--db", db, "--before", "yesterday"])
    assert res.exit_code == 2 and "--before" in res.output and "--at" not in res.output
    res = runner.invoke(app, ["prune", "--db", db, "--before", "2150-01-01T00:00:00Z", "--force"])
    assert res.exit_code == 0, res.output
    with SQLiteStore(db) as s:
        assert s.observation_count() == 0


def test_a_dry_run_says_what_would_go_and_removes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with SQLiteStore(db) as s:
        _ingest(s, history())
        want = s.execute(
            "SELECT count(*), count(DISTINCT page) FROM observations WHERE fetched_at < ?",
            (HORIZON,),
        )[0]
    res = CliRunner().invoke(app, ["prune", "--db", db, "--before", str(HORIZON), "--dry-run"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert (
        f"would remove {want[0]} observations" in text and f"checkpointing {want[1]} pages" in text
    )
    with SQLiteStore(db) as s:
        assert s.observation_count() == len(history())
        assert s.execute("SELECT count(*) FROM page_checkpoints")[0][0] == 0
