"""What the service keeps a cycle long: the plan's tasks as columns (issue 30).

A plan's tasks were a list of dicts (about 430 bytes a task, 150 more for its
rate entry) and the lease pool a dict and a tuple a task on top; the task table
over the page columns (URLs packed in one buffer) and the pool over it (URL
hashes, sorted) keep a plan of one task a page in about 150 bytes a page.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.pipeline import store_batch
from recrawl.engine.tasks import TaskRates, TaskTable
from recrawl.observe.observation import parse_observation
from recrawl.records.strings import StringColumn
from recrawl.service.leases import LeasePool
from recrawl.service.replicas import decode_plan, encode_plan
from recrawl.service.state import Service
from recrawl.store import SQLiteStore
from recrawl.testing.server import ManualClock

T0 = 1_750_000_000.0


def _engine(tmp_path: Path, pages: int, **kw: Any) -> Engine:
    clock = ManualClock(T0)
    settings = Settings(token="t", cycle_hours=1.0, budget_per_day=24.0 * pages, **kw)
    engine = Engine(SQLiteStore(tmp_path / "s.db"), settings, clock=clock)
    urls = [f"https://site{p % 20}.example/item/{p}" for p in range(pages)]
    engine.add_urls([{"url": u, "page_type": "product"} for u in urls], now=T0)
    raw = [{"url": u, "fetched_at": T0 + 10, "status": 200, "fingerprint": "a"} for u in urls]
    store_batch(engine.store, [parse_observation(r) for r in raw])
    engine.store.add_canary(
        "https://site0.example/canary", "site0.example", {"title": "ok"}, 60.0, T0
    )
    clock.advance(5 * 3600)
    return engine


def test_the_task_table_reads_as_the_list_of_task_dicts(tmp_path: Path) -> None:
    engine = _engine(tmp_path, 400)
    plan = engine.plan()
    table = plan.tasks
    assert isinstance(table, TaskTable) and table.head == 1
    rows = list(table)
    assert len(rows) == len(table) > 300
    assert rows[0]["reason"] == "canary" and {r["reason"] for r in rows[1:]} <= {
        "score",
        "verify",
        "discovery",
        "reestimate",
    }
    assert table == rows and table[5] == rows[5] and table[-1] == rows[-1]
    assert table[2:7] == rows[2:7]
    assert set(rows[1]) == {"url", "site", "page_type", "reason", "expected_gain", "cost",
                            "priority"}  # fmt: skip
    with pytest.raises(IndexError):
        table[len(table)]
    # each planned page's rate, by URL or in the plan's document
    doc = plan.as_dict()
    assert doc["tasks"][0]["rate_per_day"] is None
    url = rows[3]["url"]
    assert plan.rates[url] == (doc["tasks"][3]["rate_per_day"], doc["tasks"][3]["rate_sd_per_day"])
    assert len(plan.rates) == len(rows) - 1
    orjson.dumps(doc)  # JSON all through


def test_a_published_plan_reads_back_the_same(tmp_path: Path) -> None:
    plan = _engine(tmp_path, 300).plan()
    back = decode_plan(encode_plan(plan))
    assert back.tasks == plan.tasks
    assert back.as_dict() == plan.as_dict()
    assert (back.budget, back.spent, back.unit, back.resolution) == (
        plan.budget, plan.spent, plan.unit, plan.resolution,
    )  # fmt: skip


def test_the_service_plans_a_task_a_page_in_under_600_bytes_a_page_and_keeps_200(
    tmp_path: Path,
) -> None:
    """What the service holds once it has planned (the plan and the lease
    pool), and the most it held while planning, in Python objects and numpy
    arrays (tracemalloc; SQLite's page cache and the allocator's slack are
    not counted)."""
    pages = 20_000
    engine = _engine(tmp_path, pages, site_concurrency=pages)
    gc.collect()
    tracemalloc.start()
    try:
        svc = Service(engine, replan_min_s=1e9)
        got = svc.lease("w", 10)
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        svc.writer.close()
    assert len(got) == 10 and len(svc.plan().tasks) > 0.9 * pages
    # measured 171 kept and 477 at the peak (243 and 980 with a list of URLs,
    # a dict of them in the pool, and the page columns joined from chunks; 712
    # kept with task dicts)
    assert kept / pages < 200, f"{kept / pages:.0f} bytes a page kept"
    assert peak / pages < 600, f"{peak / pages:.0f} bytes a page at the peak"
    engine.store.close()


def test_the_lease_pool_tells_urls_of_one_hash_apart_and_leases_a_url_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool finds a URL by its hash, then compares the string: here every
    URL has the same hash. A URL planned twice is leased once (its first
    task), a head task of a URL before its row, a canary apart."""
    monkeypatch.setattr("builtins.hash", lambda _: 7)  # (the packed column's and the pool's)
    urls = StringColumn.of([f"https://s.example/{i}" for i in range(6)])
    assert set(urls.hashes.tolist()) == {7}
    canary = "https://s.example/canary"
    head = [
        {"url": urls[4], "site": "s.example", "page_type": "page", "reason": "verify",
         "expected_gain": 0.0, "cost": 1.0, "priority": 9.0},
        {"url": canary, "site": "s.example", "page_type": "canary", "reason": "canary",
         "expected_gain": 0.0, "cost": 0.0, "priority": float("inf")},
    ]  # fmt: skip
    page = np.array([0, 1, 2, 0, 3, 4, 5])
    f = np.ones(len(page))
    table = TaskTable(head, urls, ["s.example"] * 6, ["page"] * 6, page,
                      np.zeros(len(page), np.int8), f, f, f, f, f)  # fmt: skip
    plan = PlanResult(at=T0, budget=9.0, spent=9.0, tasks=table, rates=TaskRates(table))
    pool = LeasePool(plan, done={urls[5]})
    assert pool.canaries == [(canary, "s.example", "canary")]
    leased = [c[0] for c in pool.candidates()]
    assert leased == [urls[4], urls[0], urls[1], urls[2], urls[3]]
    pool.drop(urls[1])
    assert [c[0] for c in pool.candidates()] == [urls[4], urls[0], urls[2], urls[3]]
    assert pool.holds(urls[5]) and pool.holds(canary) and not pool.holds("https://s.example/9")
    assert pool.task(urls[4])["reason"] == "verify" and pool.task(urls[3]) == table[6]
