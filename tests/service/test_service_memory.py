"""What the service keeps a cycle long: the plan's tasks as columns (issue 30).

A plan's tasks were a list of dicts (about 430 bytes a task, 150 more for its
rate entry) and the lease pool a dict and a tuple a task on top; the task table
and the pool over it keep a plan of one task a page in about 230 bytes a page.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.engine.pipeline import store_batch
from recrawl.engine.tasks import TaskTable
from recrawl.observe.observation import parse_observation
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


def test_the_service_keeps_a_plan_of_a_task_a_page_in_under_300_bytes_a_page(
    tmp_path: Path,
) -> None:
    pages = 20_000
    engine = _engine(tmp_path, pages, site_concurrency=pages)
    gc.collect()
    tracemalloc.start()
    try:
        svc = Service(engine, replan_min_s=1e9)
        got = svc.lease("w", 10)
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        svc.writer.close()
    assert len(got) == 10 and len(svc.plan().tasks) > 0.9 * pages
    # measured 231 bytes a page at 100,000 pages; 712 with task dicts
    assert kept / pages < 300, f"{kept / pages:.0f} bytes a page"
    engine.store.close()
