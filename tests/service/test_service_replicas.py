"""Several services on one store with ``replicas = true`` (issue 32): one plans
at a time and publishes its plan, the others lease from it, a cycle's spend
is counted in the store, and the planner's death hands planning over.

Each replica is a :class:`~recrawl.service.state.Service` over its own store
connection, driven without HTTP on a :class:`~recrawl.clock.ManualClock`;
the last test kills a real ``recrawl serve`` process holding the planner
lock on PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import pg_schema
from test_service import AUTH, _server_process
from test_service_leases import _lease_all, _lease_and_report, _report, _service, _settle, services

from recrawl._exceptions import ConfigError
from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service.state import Service
from recrawl.store import PostgresStore, SQLStore
from recrawl.testing.memory import MemoryStore
from recrawl.testing.server import ManualClock, free_port

__all__ = ["services"]  # the fixture, imported from test_service_leases

T0 = 1_750_000_000.0


def _settings(**kw: Any) -> Settings:
    return Settings(**{"token": "t", "cycle_hours": 24.0, "replicas": True, **kw})


def _count_plans(svc: Service) -> list[float]:
    """Record every plan ``svc``'s engine computes (the budget it was given)."""
    calls: list[float] = []
    plan = svc.engine.plan

    def counted(*a: Any, **kw: Any) -> Any:
        calls.append(float(kw.get("budget", a[0] if a else 0.0)))
        return plan(*a, **kw)

    svc.engine.plan = counted  # type: ignore[method-assign]
    return calls


def test_one_replica_plans_the_other_leases_from_its_published_plan(
    connect: Callable[[], SQLStore], services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=600.0, lease_seconds=3 * 86400.0, site_concurrency=1000,
                         reserves={"verify": 0.0})  # fmt: skip
    a = services(_service(connect(), settings, clock, replan_after=40, group_s=0.005))
    b = services(_service(connect(), settings, clock, replan_after=40, group_s=0.005))
    plans_a, plans_b = _count_plans(a), _count_plans(b)
    a.engine.add_urls([{"url": f"https://s{i % 40}.example/p{i}"} for i in range(2000)], now=T0)
    replicas = (a, b)
    for cycle in range(3):
        a.invalidate()  # plan the new cycle now, not in the background
        first = a.plan()
        assert a._leader and not b._leader
        assert [t["url"] for t in b.plan().tasks] == [t["url"] for t in first.tasks]
        leased, reported = _lease_and_report(replicas, clock, lessees=16, rounds=8)
        _settle(a)
        assert len(reported) > 100, len(reported)
        urls = [u for u, _, _ in leased]
        assert len(urls) == len(set(urls)), f"cycle {cycle}: a URL was leased twice"
        again = [(u, at, by) for u, at, by in leased if u in reported and at > reported[u][0]]
        assert not again, f"cycle {cycle}: {len(again)} URLs leased again after their report"
        # both replicas' leases count in one spend, which both report
        spent, _ = a.store.cycle_spend(int(clock() // a.cycle_s))  # type: ignore[attr-defined]
        assert spent == pytest.approx(len(urls)) and b.cycle_spent() == pytest.approx(spent)
        assert len(urls) <= a.cycle_budget() + 1
        clock.advance(settings.cycle_hours * 3600)
    # the follower never planned while the planner published a plan for its cycle
    assert plans_b == [] and len(plans_a) >= 3
    # a re-plan by the planner spends what is left after both replicas' leases
    a.invalidate()
    leased_a = len(_lease_all(a, "x"))
    b.invalidate()
    leased_b = len(_lease_all(b, "y"))
    a.invalidate()
    last = a.plan()
    assert last.budget == pytest.approx(max(a.cycle_budget() - leased_a - leased_b, 0.0))


def test_expired_leases_of_both_replicas_come_back_and_refund_the_shared_spend(
    connect: Callable[[], SQLStore], services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=200.0, lease_seconds=5.0, site_concurrency=1000)
    a = services(_service(connect(), settings, clock))
    b = services(_service(connect(), settings, clock))
    a.engine.add_urls([{"url": f"https://s{i % 7}.example/p{i}"} for i in range(300)], now=T0)
    a.plan()
    first = _lease_all(a, "a") + _lease_all(b, "b")
    assert len(first) > 150
    assert len({t["url"] for t in first}) == len(first)
    assert b.cycle_spent() == pytest.approx(len(first))
    # the planner re-plans twice while the leases are out
    a.invalidate()
    a.plan()
    a.invalidate()
    a.plan()
    clock.advance(6.0)  # every lease expires unreported: the planner re-plans
    again = _lease_all(b, "b2") + _lease_all(a, "a2")
    _settle(a)
    again += _lease_all(b, "b2") + _lease_all(a, "a2")
    assert {t["url"] for t in first} == {t["url"] for t in again}
    _report(a, again, clock())
    _settle(a)
    assert a.cycle_spent() == pytest.approx(len(again))


def test_the_planner_role_passes_to_the_other_replica_when_its_holder_goes(
    connect: Callable[[], SQLStore], services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=100.0)
    a = _service(connect(), settings, clock)
    b = services(_service(connect(), settings, clock))
    plans_b = _count_plans(b)
    a.engine.add_urls([{"url": f"https://s.example/p{i}"} for i in range(50)], now=T0)
    a.plan()
    b.plan()
    assert a._leader and not b._leader and plans_b == []
    generation = b._published
    a.writer.close()
    a.store.close()  # what the holder's death does to its lock
    clock.advance(600.0)  # the same cycle
    b.plan()
    _settle(b)
    assert b._leader and len(plans_b) == 1
    assert b._published > generation  # and it published its plan


def test_replicas_need_a_shared_store() -> None:
    with pytest.raises(ConfigError, match="replicas"):
        Service(Engine(MemoryStore(), _settings()))


def test_killing_the_planning_server_hands_planning_to_the_other_replica(
    tmp_path: Path, services: Callable[[Service], Service]
) -> None:
    """A ``recrawl serve`` process plans and publishes; kill -9 it and the
    other replica (on the same PostgreSQL schema) plans at its next request."""
    url = next(schema := pg_schema())
    try:
        store = PostgresStore(url)
        Engine(store, _settings()).add_urls(
            [{"url": f"https://s.example/p{i}"} for i in range(50)], now=time.time()
        )
        port = free_port()
        with _server_process(tmp_path, url, port, RECRAWL_REPLICAS="true",
                             RECRAWL_BUDGET_PER_DAY="100", RECRAWL_CYCLE_HOURS="24") as proc:  # fmt: skip
            # its first plan takes the planner lock
            r = httpx.get(f"http://127.0.0.1:{port}/v1/plan", headers=AUTH, timeout=30)
            assert r.status_code == 200, r.text
            b = services(Service(Engine(PostgresStore(url), _settings(budget_per_day=100.0)),
                                 replan_min_s=0.0))  # fmt: skip
            plans_b = _count_plans(b)
            assert len(b.plan().tasks) == len(r.json()["tasks"]) and not b._leader
            assert plans_b == []
            proc.kill()
            proc.wait()
            deadline = time.monotonic() + 10
            while not b._leader and time.monotonic() < deadline:
                b.plan()  # the server's session ends with it, and its lock
                time.sleep(0.05)
            _settle(b)
            assert b._leader and len(plans_b) == 1
        store.close()
    finally:
        next(schema, None)
