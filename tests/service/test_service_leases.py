"""Lease accounting under re-plans, replicas on one store, and per-site caps (issue 30).

The service's state (:class:`~recrawl.service.state.Service`) is driven
directly, without HTTP, on a :class:`~recrawl.clock.ManualClock`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import orjson
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service.state import Service
from recrawl.store import SQLiteStore, SQLStore
from recrawl.testing.server import ManualClock

T0 = 1_750_000_000.0


def _settings(**kw: Any) -> Settings:
    return Settings(**{"token": "t", "cycle_hours": 24.0, **kw})


def _service(store: SQLStore, settings: Settings, clock: ManualClock, **kw: Any) -> Service:
    return Service(Engine(store, settings, clock=clock), **{"replan_min_s": 0.0, **kw})


def _report(svc: Service, tasks: list[dict[str, Any]], at: float) -> None:
    body = b"\n".join(
        orjson.dumps({"url": t["url"], "fetched_at": at, "status": 200, "lease_id": t["lease_id"]})
        for t in tasks
    )
    answer = svc.ingest_body(body)
    assert answer["rejected"] == [], answer


def _lease_all(svc: Service, worker: str = "w") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while got := svc.lease(worker, 1000):
        out += got
    return out


def _settle(svc: Service, timeout: float = 10.0) -> None:
    """Wait for a background re-plan to land."""
    deadline = time.monotonic() + timeout
    while svc._replanning and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not svc._replanning


@pytest.fixture
def services() -> Iterator[Callable[[Service], Service]]:
    """Close what a test opened: ``services(svc)`` registers ``svc``."""
    with ExitStack() as stack:

        def keep(svc: Service) -> Service:
            stack.callback(svc.store.close)
            stack.callback(svc.writer.close)
            return svc

        yield keep


# -- 1. an expired lease returns its budget and its URL, whatever re-plans happened -----------


def test_expired_leases_all_come_back_after_several_replans_in_one_cycle(
    tmp_path: Any, services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    n = 991
    settings = _settings(budget_per_day=float(n), lease_seconds=5.0, site_concurrency=n)
    svc = services(_service(SQLiteStore(tmp_path / "s.db"), settings, clock))
    svc.engine.add_urls([{"url": f"https://s{i % 50}.example/p{i}"} for i in range(n)], now=T0)
    svc.invalidate()
    first = _lease_all(svc)
    assert len(first) == n
    clock.advance(6)
    assert len(_lease_all(svc)) == n  # the same plan: they come back
    for k in range(4):
        # a re-plan in the same cycle (a URL registered) while the leases are live
        svc.engine.add_urls([{"url": f"https://extra.example/{k}"}], now=clock())
        svc.invalidate()
        svc.plan()
        clock.advance(6)  # the leases expire unreported
        again = _lease_all(svc)
        _settle(svc)
        again += _lease_all(svc)
        assert len(again) == n, f"re-plan {k}: {len(again)} of {n} came back"
    clock.advance(6)
    # a re-plan after they expired: the whole budget again, nothing spent
    svc.invalidate()
    plan = svc.plan()
    assert plan.budget == pytest.approx(n)
    assert len(_lease_all(svc)) == n


def test_a_late_report_of_an_expired_lease_charges_the_cycle(
    tmp_path: Any, services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=10.0, lease_seconds=5.0, site_concurrency=100)
    svc = services(_service(SQLiteStore(tmp_path / "s.db"), settings, clock))
    svc.engine.add_urls([{"url": f"https://a.example/p{i}"} for i in range(30)], now=T0)
    svc.invalidate()
    first = _lease_all(svc)
    assert len(first) == 10
    clock.advance(6)
    _report(svc, first[:4], clock())  # four reports after their leases expired
    svc.invalidate()
    plan = svc.plan()
    assert plan.budget == pytest.approx(6.0)  # the four fetches happened: they count


def test_a_url_reported_while_the_next_plan_is_computed_is_not_leased_from_it(
    tmp_path: Any, services: Callable[[Service], Service]
) -> None:
    """The plan computed in the background read the store before these
    reports: its pool drops them from the store's log once installed (and
    the service keeps no set of every URL reported meanwhile)."""
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=7200.0, site_concurrency=1000, cycle_hours=1.0)
    svc = services(_service(SQLiteStore(tmp_path / "s.db"), settings, clock, replan_after=5))
    urls = [f"https://s{i % 7}.example/p{i}" for i in range(300)]
    svc.engine.add_urls([{"url": u} for u in urls], now=T0)
    svc.invalidate()
    first = svc.lease("w", 20)
    _report(svc, first, clock())  # enough reports to ask for a new plan
    reported = {t["url"] for t in first}
    late = [u for u in urls if u not in reported][:30]
    plan_of = svc.engine.plan

    def plan_then_report(**kw: Any) -> Any:
        got = plan_of(**kw)  # (it read the store before the reports below)
        svc.ingest_body(
            b"\n".join(orjson.dumps({"url": u, "fetched_at": clock(), "status": 200}) for u in late)
        )
        return got

    svc.engine.plan = plan_then_report  # type: ignore[method-assign]
    clock.advance(60)
    svc.plan()  # the new plan is computed in the background
    svc.replan_after = 10**9  # (and no third one: the reports below came after its read)
    _settle(svc)
    svc.engine.plan = plan_of  # type: ignore[method-assign]
    assert svc._lease_pool is None  # installed: the pool of the plan before is gone
    rest = {t["url"] for t in _lease_all(svc)}
    assert rest and not rest & set(late), "a URL reported during the re-plan was leased"
    assert svc._done == set()  # its pool dropped them: none kept beyond (no canary here)


# -- 2. two replicas on one store ---------------------------------------------------------------


def test_two_replicas_never_lease_what_the_other_was_told_or_a_live_lease(
    connect: Callable[[], SQLStore], services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(
        budget_per_day=600.0,
        lease_seconds=3 * 86400.0,
        site_concurrency=1000,
        # no verification fetches: a re-plan may choose to verify a page just
        # fetched, a second fetch the plan asked for and not what this checks
        reserves={"verify": 0.0},
    )
    a = services(_service(connect(), settings, clock, replan_after=40, group_s=0.005))
    b = services(_service(connect(), settings, clock, replan_after=40, group_s=0.005))
    replicas = (a, b)
    a.engine.add_urls([{"url": f"https://s{i % 40}.example/p{i}"} for i in range(2000)], now=T0)
    for cycle in range(3):
        for svc in replicas:
            svc.invalidate()
            svc.plan()
        leased, reported = _lease_and_report(replicas, clock, lessees=16, rounds=8)
        assert len(reported) > 100, len(reported)
        again = [(u, at, by) for u, at, by in leased if u in reported and at > reported[u][0]]
        assert not again, f"cycle {cycle}: {len(again)} URLs leased again after their report"
        urls = [u for u, _, _ in leased]
        # leases never expire here: a URL leased twice had a live lease or a report
        assert len(urls) == len(set(urls)), f"cycle {cycle}: a URL was leased twice"
        clock.advance(settings.cycle_hours * 3600)


def _lease_and_report(
    replicas: tuple[Service, Service], clock: ManualClock, *, lessees: int, rounds: int
) -> tuple[list[tuple[str, int, str]], dict[str, tuple[int, str]]]:
    """``lessees`` threads lease 5 tasks ``rounds`` times, alternately from each
    replica, and report them at once to the other: ``(leased, reported)``,
    ``leased`` as ``(url, event number when asked, replica and reason)``,
    ``reported`` as ``url → (event number when first answered, replica)``."""
    lock = threading.Lock()
    events = 0
    leased: list[tuple[str, int, str]] = []
    reported: dict[str, tuple[int, str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(lessees)

    def work(i: int) -> None:
        nonlocal events
        try:
            start.wait()
            for step in range(rounds):
                svc = replicas[(i + step) % 2]
                with lock:
                    asked = events = events + 1
                got = svc.lease(f"w{i}", 5)
                name = "ab"[svc is replicas[1]]
                with lock:
                    leased.extend((t["url"], asked, name + t["reason"]) for t in got)
                if got:
                    to = replicas[(i + step + 1) % 2]  # report to the other replica
                    _report(to, got, clock())
                    with lock:
                        done = events = events + 1
                        for t in got:
                            reported.setdefault(t["url"], (done, "ab"[to is replicas[1]]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(lessees)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return leased, reported


# -- 3. the per-site cap holds from a site's first lease ---------------------------------------


def test_the_site_cap_holds_for_a_site_without_controls(
    tmp_path: Any, services: Callable[[Service], Service]
) -> None:
    clock = ManualClock(T0)
    settings = _settings(budget_per_day=500.0, site_concurrency=4)
    svc = services(_service(SQLiteStore(tmp_path / "s.db"), settings, clock))
    svc.engine.add_urls([{"url": f"https://new.example/p{i}"} for i in range(100)], now=T0)
    svc.engine.add_urls([{"url": f"https://other{i}.example/"} for i in range(10)], now=T0)
    assert svc.store.site_controls() == {}  # no site has a row
    svc.invalidate()
    got = svc.lease("w", 200)
    per_site: dict[str, int] = {}
    for t in got:
        per_site[t["site"]] = per_site.get(t["site"], 0) + 1
    assert per_site["new.example"] == 4
    assert len(got) == 14
    assert svc.lease("w", 200) == []
    assert max(svc.store.outstanding_leases(clock()).values()) == 4
    # a site's own cap (a row) still wins over the default
    svc.store.set_site_controls("new.example", now=clock(), concurrency_cap=6)
    assert len(svc.lease("w", 200)) == 2
