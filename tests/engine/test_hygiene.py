"""Crawl hygiene in the plan: what a failed, gone or moved page costs the next
cycles, the per-host cap, and a cold start within its budget."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recrawl import InvalidObservation
from recrawl.config import Settings
from recrawl.engine.engine import COST_PRIOR, Engine
from recrawl.observe.observation import Observation, parse_observation
from recrawl.store import SQLiteStore, SQLStore

T0 = 1_700_000_000.0
HOUR = 3600.0
DAY = 86400.0


@pytest.fixture
def sqlite_store(tmp_path: Path):
    s = SQLiteStore(tmp_path / "hygiene.db")
    yield s
    s.close()


def test_max_per_host_from_the_settings_caps_a_hosts_tasks(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(max_per_host=3), clock=lambda: T0)
    engine.add_urls(
        [{"url": f"https://big.example/p/{i}"} for i in range(50)]
        + [{"url": f"https://small.example/p/{i}"} for i in range(2)],
        now=T0,
    )
    assert engine.planner_config().max_per_host == 3
    plan = engine.plan(budget=100.0, now=T0 + HOUR)
    per_host: dict[str, int] = {}
    for t in plan.tasks:
        host = t["url"].split("/")[2]
        per_host[host] = per_host.get(host, 0) + 1
    assert per_host == {"big.example": 3, "small.example": 2}


def test_no_cap_without_the_setting(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    assert engine.planner_config().max_per_host is None


def test_the_change_hazard_comes_from_the_settings(sqlite_store: SQLiteStore) -> None:
    default = Engine(sqlite_store, Settings(), clock=lambda: T0).planner_config()
    assert default.change_hazard_per_day == pytest.approx(1 / 730)
    engine = Engine(sqlite_store, Settings(change_hazard_per_day=0.0), clock=lambda: T0)
    assert engine.planner_config().change_hazard_per_day == 0.0
    with pytest.raises(ValueError, match="change_hazard_per_day"):
        Settings(change_hazard_per_day=-1.0)


@pytest.mark.parametrize(
    ("unit", "prior"), [("bytes", 256 * 1024), ("credits", 1.0), ("fetches", 1.0)]
)
def test_cold_start_plan_stays_within_its_budget(
    sqlite_store: SQLiteStore, unit: str, prior: float
) -> None:
    """5,000 URLs and no cost history: the first cycle plans what the budget pays
    for at the cost prior (256 KiB a fetch for bytes), not every URL."""
    per_fetch = {"bytes": 100_000.0, "credits": 1.0, "fetches": 1.0}[unit]
    per_day = 5000 * per_fetch  # about one fetch a page a day at a typical cost
    engine = Engine(
        sqlite_store, Settings(billing_unit=unit, budget_per_day=per_day), clock=lambda: T0
    )
    engine.add_urls([{"url": f"https://shop.example/p/{i}"} for i in range(5000)], now=T0)
    assert COST_PRIOR[unit] == prior
    budget = per_day / 24.0
    for cycle in range(3):
        plan = engine.plan(now=T0 + cycle * HOUR, seed=cycle)
        assert plan.spent <= budget
        assert sum(t["cost"] for t in plan.tasks) <= budget * (1 + 1e-9)
        assert len(plan.tasks) <= budget / prior + 1e-9
        assert len(plan.tasks) >= 0.9 * budget / prior - 1


def _fetch(url: str, t: float, status: int, **kw: object) -> Observation:
    return parse_observation({"url": url, "fetched_at": t, "status": status, **kw})


def _crawl(
    engine: Engine, start: float, cycles: int, answer: Callable[[str, float], dict[str, Any]]
) -> list[str]:
    """Plan → fetch → ingest, hourly from ``start``: the URLs fetched, in order.
    ``answer(url, t)`` is what the fetch of ``url`` at ``t`` saw (status, record ...)."""
    fetched: list[str] = []
    for c in range(cycles):
        now = start + c * HOUR
        plan = engine.plan(now=now, seed=c)
        got = []
        for k, task in enumerate(plan.tasks):
            t = now + 60.0 + k
            got.append(
                parse_observation({"url": task["url"], "fetched_at": t, **answer(task["url"], t)})
            )
            fetched.append(task["url"])
        engine.ingest(got)
    return fetched


BAD = "https://shop.example/p/0"


def _running_crawl(store: SQLiteStore, pages: int = 200) -> Engine:
    """``pages`` pages fetched once each over the last six days, at a budget of
    about one fetch a page every six days (hourly cycles)."""
    engine = Engine(store, Settings(budget_per_day=pages / 6.0), clock=lambda: T0)
    rng = random.Random(7)
    engine.ingest(
        _fetch(f"https://shop.example/p/{i}", T0 - rng.uniform(0, 6 * DAY), 200, record={"v": 0})
        for i in range(1, pages)
    )
    engine.ingest([_fetch(BAD, T0 - 6.5 * DAY, 200, record={"v": 0})])  # the stalest page
    return engine


def test_a_page_answering_500_takes_a_few_fetches_not_the_budget(sqlite_store: SQLiteStore) -> None:
    """200 pages at about one fetch a page every six days, for 48 hourly
    cycles, one page answering 500 every time: it backs off (1, 2, 4, 8, 16
    hours, then a day) instead of topping every plan."""
    engine = _running_crawl(sqlite_store)

    def answer(url: str, t: float) -> dict[str, Any]:
        if url == BAD:
            return {"status": 500}
        return {"status": 200, "record": {"v": int(t // (3 * DAY))}}

    fetched = _crawl(engine, T0, 48, answer)
    assert len(fetched) >= 45  # the budget still goes to the other pages
    assert 1 <= fetched.count(BAD) <= 7
    page = sqlite_store.page(BAD)
    assert page is not None and page.fails == fetched.count(BAD)


@pytest.mark.parametrize(
    "failure",
    [{"status": 503}, {"status": 403}, {"error": "timeout"}, {"status": 301}, {"status": 302}],
)
def test_any_failed_fetch_waits_at_least_a_cycle_then_longer(
    sqlite_store: SQLiteStore, failure: dict[str, Any]
) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(BAD, T0 - 30 * DAY, 200)])
    t = T0
    engine.ingest([parse_observation({"url": BAD, "fetched_at": t, **failure})])
    waits = []
    for _ in range(6):
        # the first hour after it is due, the plan offers it; not before
        offered = [
            h
            for h in range(1, 24 * 8)
            if any(x["url"] == BAD for x in engine.plan(budget=5.0, now=t + h * HOUR).tasks)
        ]
        assert offered
        waits.append(offered[0])
        t += offered[0] * HOUR
        engine.ingest([parse_observation({"url": BAD, "fetched_at": t, **failure})])
    assert waits == [1, 2, 4, 8, 16, 24]


def test_a_success_resets_the_back_off(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest(
        [_fetch(BAD, T0 - 30 * DAY, 200)] + [_fetch(BAD, T0 + h * HOUR, 500) for h in range(5)]
    )
    assert sqlite_store.page(BAD).fails == 5  # type: ignore[union-attr]
    engine.ingest([_fetch(BAD, T0 + 5 * HOUR, 200)])
    page = sqlite_store.page(BAD)
    assert page is not None and page.fails == 0 and page.last_ok == T0 + 5 * HOUR


def _offered_after(engine: Engine, url: str, t: float, most_days: int = 40) -> float | None:
    """Days after ``t`` of the first daily plan that offers ``url`` (None: none within ``most_days``)."""
    for d in range(1, most_days + 1):
        if any(x["url"] == url for x in engine.plan(budget=5.0, now=t + d * DAY + 1).tasks):
            return d
    return None


def test_gone_pages_are_rechecked_after_1_7_then_30_days(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(BAD, T0 - 30 * DAY, 200), _fetch(BAD, T0, 404)])
    assert not any(x["url"] == BAD for x in engine.plan(budget=5.0, now=T0 + 12 * HOUR).tasks)
    t, waits = T0, []
    for _ in range(4):
        d = _offered_after(engine, BAD, t)
        assert d is not None
        waits.append(d)
        t += d * DAY + 1
        engine.ingest([_fetch(BAD, t, 410)])
    assert waits == [1, 7, 30, 30]
    page = sqlite_store.page(BAD)
    assert page is not None and page.gone and page.fails == 5


def test_a_gone_page_answering_2xx_again_is_live(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(BAD, T0 - DAY, 404), _fetch(BAD, T0, 200, record={"v": 1})])
    page = sqlite_store.page(BAD)
    assert page is not None and not page.gone and page.fails == 0
    assert any(x["url"] == BAD for x in engine.plan(budget=5.0, now=T0 + 40 * DAY).tasks)


def test_adding_a_gone_url_again_revives_it(sqlite_store: SQLiteStore) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest(
        [_fetch(BAD, T0 - 30 * DAY, 200), _fetch(BAD, T0, 404), _fetch(BAD, T0 + DAY, 404)]
    )
    assert not any(x["url"] == BAD for x in engine.plan(budget=5.0, now=T0 + 2 * DAY).tasks)
    assert engine.add_urls([{"url": BAD}], now=T0 + 2 * DAY) == 0  # (not a new page)
    page = sqlite_store.page(BAD)
    assert page is not None and not page.gone and page.fails == 0 and page.fetches == 3
    assert any(x["url"] == BAD for x in engine.plan(budget=5.0, now=T0 + 2 * DAY + HOUR).tasks)


def _cleanup_log(title: str) -> list[Observation]:
    """200 item pages fetched every 2 hours for 16 days; in the last 4 hours,
    every fetch of the first 100 pages is a 200 whose title is ``title``."""
    out = []
    end = T0 + 16 * DAY
    for i in range(200):
        url = f"https://shop.example/item/{i}"
        t = T0 + (i % 12) * 600.0
        while t < end:
            removed = i < 100 and t >= end - 4 * HOUR
            out.append(
                parse_observation(
                    {
                        "url": url, "fetched_at": t, "status": 200, "page_type": "item",
                        "bytes_received": 30_000 if removed else 80_000, "latency_ms": 120.0,
                        "title": title if removed else f"Item {i}",
                        "record": {"name": "", "price": None} if removed else {"name": f"i{i}", "price": i},
                    }
                )
            )  # fmt: skip
            t += 2 * HOUR
    return out


def test_a_catalogue_clean_up_is_about_pages_not_the_sites_health(tmp_path: Path) -> None:
    """Half the items removed, served as 200 "Page not found": those pages are
    gone (re-checked rarely), and the site stays healthy; the same share of
    block pages ("Access denied") would cost it its health."""
    from recrawl.engine.ingest import ContentClassifier, ingest_observations

    scores = {}
    for title in ("Page not found", "Access denied"):
        with SQLiteStore(tmp_path / f"{title[:4]}.db") as store:
            ingest_observations(store, _cleanup_log(title), classifier=ContentClassifier())
            (report,) = Engine(store).health(T0 + 16 * DAY, record=False)
            scores[title] = report
            gone = sum(
                bool(p and p.gone)
                for p in (store.page(f"https://shop.example/item/{i}") for i in range(200))
            )
            assert gone == (100 if title == "Page not found" else 0)
    assert scores["Page not found"]["band"] == "healthy"
    assert "soft_block" not in scores["Page not found"]["reasons"]
    assert scores["Access denied"]["score"] < scores["Page not found"]["score"] - 10


OLD = "https://shop.example/old/1"
NEW = "https://shop.example/new/1"


def _planned(engine: Engine, now: float) -> set[str]:
    return {t["url"] for t in engine.plan(budget=50.0, now=now).tasks}


def test_a_permanent_redirect_moves_the_page_with_its_history(store: SQLStore) -> None:
    engine = Engine(store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(OLD, T0 - 10 * DAY, 200, record={"v": 1})])
    before = store.page(OLD)
    assert before is not None
    engine.ingest([_fetch(OLD, T0, 200, record={"v": 1}, moved_to=NEW)])
    assert store.page(OLD) is None
    page = store.page(NEW)
    assert page is not None and page.fetches == 2 and page.first_seen == before.first_seen
    assert page.last_ok == T0 and page.changes == 0  # the same record: no change
    planned = set().union(*(_planned(engine, T0 + d * DAY) for d in (1, 10, 40)))
    assert OLD not in planned and NEW in planned
    # the next fetch, at the new URL, continues the same page
    engine.ingest([_fetch(NEW, T0 + DAY, 200, record={"v": 2})])
    page = store.page(NEW)
    assert page is not None and page.fetches == 3 and page.changes == 1


def test_a_redirect_to_a_known_page_retires_the_old_one(store: SQLStore) -> None:
    engine = Engine(store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(OLD, T0 - 10 * DAY, 200), _fetch(NEW, T0 - 9 * DAY, 200)])
    engine.ingest([_fetch(OLD, T0, 200, moved_to=NEW)])
    assert store.page(OLD) is not None and store.page(NEW) is not None
    for d in (1, 10, 40, 400):
        planned = _planned(engine, T0 + d * DAY)
        assert OLD not in planned
    assert any(NEW in _planned(engine, T0 + d * DAY) for d in (1, 10, 40))
    # added again by hand: wanted again, planned again
    engine.add_urls([{"url": OLD}], now=T0 + DAY)
    assert OLD in _planned(engine, T0 + DAY + HOUR)


def test_a_redirect_not_followed_moves_the_page_and_the_new_url_is_fetched_next(
    sqlite_store: SQLiteStore,
) -> None:
    engine = Engine(sqlite_store, Settings(), clock=lambda: T0)
    engine.ingest([_fetch(OLD, T0 - 10 * DAY, 200), _fetch(OLD, T0, 301, moved_to=NEW)])
    page = sqlite_store.page(NEW)
    assert page is not None and page.fails == 0 and page.fetches == 2
    assert NEW in _planned(engine, T0 + HOUR)


def test_moved_to_is_canonicalised_and_checked() -> None:
    o = parse_observation(
        {
            "url": OLD,
            "fetched_at": 1,
            "status": 200,
            "moved_to": "HTTPS://Shop.Example/new/1?utm_source=x",
        }
    )
    assert o.moved_to == NEW
    assert parse_observation({"url": OLD, "fetched_at": 1, "status": 200}).moved_to is None
    with pytest.raises(InvalidObservation) as e:
        parse_observation({"url": OLD, "fetched_at": 1, "status": 200, "moved_to": "ftp://x/y"})
    assert e.value.field == "moved_to"
    with pytest.raises(InvalidObservation) as e:
        parse_observation({"url": OLD, "fetched_at": 1, "status": 200, "moved_to": 3})
    assert e.value.field == "moved_to"
