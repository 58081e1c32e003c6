"""``recrawl stats``: a revisit is a fetch of a page fetched successfully before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app
from recrawl.engine.ingest import ingest_lines
from recrawl.engine.stats import compute_stats
from recrawl.store import SQLStore

runner = CliRunner()


def obs(url: str, t: float, **kw: object) -> str:
    return json.dumps({"url": url, "fetched_at": t, **kw})


A, B, C, D = (f"https://shop.example/{p}" for p in "abcd")
# New URLs that often fail: a 404 before a first success, a 503 and a 403 on
# URLs never reached, and a page reached, revisited twice (the last a 404).
LOG = [
    obs(A, 1000, status=404),
    obs(A, 90000, status=200, record={"p": 1}),
    obs(A, 180000, status=200, record={"p": 2}),
    obs(B, 1000, status=503),
    obs(B, 2000, error="timeout"),
    obs(C, 1000, status=403),
    obs(D, 1000, status=200, record={"p": 1}),
    obs(D, 90000, status=200, record={"p": 1}),
    obs(D, 180000, status=404),
]


def test_failed_first_fetches_are_not_revisits(tmp_path: Path) -> None:
    """Nine fetches, of which three revisits (A's second 200, D's 200 and 404):
    the 404, 503, timeout and 403 of URLs never reached are first fetches, as
    the first 200 of A and D are."""
    log = tmp_path / "log.jsonl"
    log.write_text("".join(line + "\n" for line in LOG))
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(log), "--db", db]).exit_code == 0
    res = runner.invoke(app, ["stats", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    (shop,) = data["groups"]
    got = (
        shop["fetches"],
        shop["revisits"],
        shop["changes_detected"],
        shop["fetches_without_change"],
    )
    assert got == (9, 3, 1, 1)
    assert data["total"]["revisits"] == 3 and data["total"]["observations"] == 9


@pytest.mark.parametrize(
    ("batches", "revisits"),
    [
        # a late 200 before a 404 already stored: the 404 becomes a (failed) revisit
        ([[obs(A, 10, status=404)], [obs(A, 5, status=200)]], 1),
        # a late 404 before the first 200: it is a failed first fetch, not a revisit
        ([[obs(A, 10, status=200), obs(A, 20, status=200)], [obs(A, 5, status=404)]], 1),
        # a late 429 between two failures: all three before the first success
        (
            [
                [obs(A, 10, status=404), obs(A, 30, status=200), obs(A, 40, status=304)],
                [obs(A, 20, status=429), obs(A, 50, status=200)],
            ],
            2,
        ),
        # a late success before everything: the failures after it are revisits
        (
            [
                [obs(A, 10, status=404), obs(A, 20, error="timeout")],
                [obs(A, 5, status=200), obs(B, 1, status=500)],
            ],
            2,
        ),
    ],
)
def test_late_reports_move_the_first_success(
    make_store, batches: list[list[str]], revisits: int
) -> None:
    """A report arriving after later ones re-decides which fetches came before a
    page's first success; the stats then equal those of the log ingested in
    time order, on either store."""
    late, ordered = make_store(), make_store()
    for batch in batches:
        ingest_lines(late, batch)
    everything = sorted(
        (line for batch in batches for line in batch), key=lambda x: json.loads(x)["fetched_at"]
    )
    ingest_lines(ordered, everything)
    got = compute_stats(late.group_totals())
    assert got == compute_stats(ordered.group_totals())
    assert got["total"]["revisits"] == revisits


def test_stats_of_a_store_read_after_each_batch(store: SQLStore) -> None:
    """The revisit count a fetcher reporting in small batches sees grows by one per revisit."""
    seen = []
    for line in LOG:
        ingest_lines(store, [line])
        seen.append(compute_stats(store.group_totals())["total"]["revisits"])
    assert seen == [0, 0, 1, 1, 1, 1, 1, 2, 3]


@pytest.mark.parametrize(
    ("lines", "revisits"),
    [
        # a crawler that already kept validators: its first fetch of a page is a 304
        ([obs(A, 10, status=304)], 0),
        ([obs(A, 10, status=503), obs(A, 20, status=304), obs(A, 30, status=304)], 1),
        # a reporter's own outcome on a page the store never reached
        (
            [
                obs(A, 10, status=200, outcome="unchanged"),
                obs(A, 20, status=200, outcome="changed"),
            ],
            1,
        ),
    ],
)
def test_a_first_success_that_is_not_new_is_not_a_revisit(
    make_store, lines: list[str], revisits: int
) -> None:
    store = make_store()
    ingest_lines(store, lines)
    assert compute_stats(store.group_totals())["total"]["revisits"] == revisits
    late = make_store()  # the same log arriving newest first: re-folded, same count
    for line in reversed(lines):
        ingest_lines(late, [line])
    assert compute_stats(late.group_totals())["total"]["revisits"] == revisits


def test_bucket_rows_of_an_older_layout_read_with_zeros(store: SQLStore) -> None:
    """A recrawl of the previous layout still running beside an upgraded store
    writes bucket vectors one figure short: they read, the missing figure as 0."""
    from recrawl.store._sql import BUCKET_WIDTH

    ingest_lines(store, [obs(A, 86400 * 3, status=200, record={"p": 1})])
    before = compute_stats(store.group_totals())
    (k, v), *_ = store._db.execute("SELECT k, v FROM buckets_daily").fetchall()
    short = store._unvectors([v], sparse=False)[:, : BUCKET_WIDTH - 1]
    store._db.execute(
        "INSERT INTO buckets_daily (k, n, v) VALUES (?, ?, ?)",
        (k + (1 << 40), 1, store._vectors(short, sparse=False)[0]),
    )
    got = compute_stats(store.group_totals())
    assert got["total"]["observations"] == 2 * before["total"]["observations"]
