"""Engine.plan against the planner it wraps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.observe.observation import parse_observation
from recrawl.plan.planner import plan_cycle
from recrawl.store import SQLStore
from recrawl.testing.fetchlog import generate_fetch_log

START = 1_767_225_600.0
END = START + 30 * 86400.0


@pytest.mark.parametrize("policy", ["recrawl", "greedy", "proportional"])
def test_engine_plan_spends_the_score_pool_as_the_planner_does(store: SQLStore, policy: str):
    """The planner's model gets what the verify and re-estimate reserves leave
    (``reallocate``: "billing units per day available to the score pool"), as
    ``plan_cycle`` and the replay compute it: Engine.plan picks the same tasks."""
    engine = Engine(store, Settings())
    engine.ingest(
        parse_observation(o)
        for o in generate_fetch_log(12_000, n_pages=600, start=START, days=30.0, seed=3)
    )
    budget = 40.0  # fetches this hour: about 1.6 per page per day
    got = engine.plan(budget=budget, now=END, policy=policy, seed=7)
    pages, cols = engine.page_arrays(END)
    ref = plan_cycle(
        pages, budget, END, policy=policy, config=engine.planner_config(),
        rng=np.random.default_rng(7),
    )  # fmt: skip
    want = [(cols["url"][t["page"]], t["reason"], t["priority"]) for t in ref.to_tasks()]
    assert [(t["url"], t["reason"], t["priority"]) for t in got.tasks] == want
    assert got.spent == pytest.approx(ref.spent)


def test_a_plan_can_leave_whole_sites_out(tmp_path: Path) -> None:
    """What the crawl loop asks when some sites cannot take more this cycle."""
    from recrawl.store import open_store

    with open_store(str(tmp_path / "s.db")) as store:
        engine = Engine(store, Settings(budget_per_day=240))
        engine.add_urls(
            [{"url": f"http://{h}.example/{i}", "site": h} for h in ("a", "b") for i in range(20)],
            now=1e9,
        )
        plan = engine.plan(budget=10, now=1e9 + 3600, exclude_sites={"a"})
    assert len(plan.tasks) == 10 and {t["site"] for t in plan.tasks} == {"b"}


def test_the_plan_spends_its_whole_budget_when_the_reserves_took_some_of_the_best_pages(
    tmp_path: Path,
) -> None:
    """The score pool looked at the best ⌊left / cost⌋ + 1 pages only; the
    verification and re-estimation picks among them were skipped and nothing
    took their place: the sample crawl planned 49 fetches of a budget of 50."""
    from recrawl.store import SQLiteStore

    engine = Engine(SQLiteStore(tmp_path / "s.db"), Settings(token="t"))
    sample = Path(__file__).parents[2] / "src" / "recrawl" / "data" / "sample-fetches.jsonl"
    engine.ingest_lines(sample.read_text().splitlines())
    for budget in (50.0, 80.0):
        plan = engine.plan(budget=budget)
        assert plan.split().get("verify", 0) + plan.split().get("reestimate", 0) > 0
        assert plan.spent == pytest.approx(budget), plan.split()


def test_a_page_heavier_than_its_siblings_is_planned_at_its_own_cost(tmp_path: Path) -> None:
    """Issue 29, item 3: the cost of a fetch was its site and page type's
    average, the same for every page of the group; now each page's own,
    shrunk toward the group's (5 fetches' worth)."""
    from recrawl.engine.engine import COST_SHRINK_FETCHES
    from recrawl.store import SQLiteStore

    engine = Engine(SQLiteStore(tmp_path / "s.db"), Settings(token="t", billing_unit="bytes",
                                                             budget_per_day=1e6))  # fmt: skip
    t0 = 1_750_000_000.0
    sizes = {f"https://s.example/p{i}": 50_000 if i == 0 else 10_000 for i in range(10)}
    engine.ingest([
        parse_observation({"url": u, "fetched_at": t0 + d * 3600, "status": 200,
                           "bytes_received": b, "record": {"d": d}})
        for d in range(20) for u, b in sizes.items()
    ])  # fmt: skip
    pages, cols = engine.page_arrays(t0 + 21 * 3600)
    cost = dict(zip(cols["url"], pages.cost.tolist(), strict=True))
    group = sum(sizes.values()) / len(sizes)
    k = COST_SHRINK_FETCHES
    assert cost["https://s.example/p0"] == pytest.approx((20 * 50_000 + k * group) / (20 + k))
    assert cost["https://s.example/p1"] == pytest.approx((20 * 10_000 + k * group) / (20 + k))
    assert cost["https://s.example/p0"] > 3.5 * cost["https://s.example/p1"]
