"""What ``/metrics`` says after known observations: outcome, byte and credit counters
per site and page type, the latency histogram per site, the cycle's spend against its
budget and the freshness estimate, read back from a live service."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.engine.stats import (
    LATENCY_REPRESENTATIVE_MS,
    latency_sum_estimate_ms,
    site_latency,
)
from recrawl.health.buckets import LATENCY_BINS, LATENCY_EDGES_MS, OUTCOMES, latency_bin
from recrawl.service import create_app
from recrawl.service.metrics import LATENCY_LE_SECONDS
from recrawl.store import open_store
from recrawl.testing.server import ManualClock, serve_in_thread

TOKEN = "metrics-token"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
Serve = Callable[..., AbstractContextManager[tuple[httpx.Client, ManualClock]]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    @contextmanager
    def run(**settings: Any) -> Iterator[tuple[httpx.Client, ManualClock]]:
        clock = ManualClock(1_790_000_000.0)
        s = Settings(token=TOKEN, **({"budget_per_day": 240.0} | settings))
        store = open_store(str(tmp_path / "recrawl.db"))
        engine = Engine(store, s, clock=clock)
        app = create_app(engine, s, replan_min_s=0.0, health_every_s=0.0)
        try:
            with (
                serve_in_thread(app) as base,
                httpx.Client(
                    base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
                ) as client,
            ):
                yield client, clock
        finally:
            store.close()

    return run


def scrape(client: httpx.Client) -> Samples:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def post(client: httpx.Client, items: list[dict[str, Any]]) -> None:
    r = client.post("/v1/observations", json=items)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == len(items) and not r.json()["rejected"], r.text


def obs(url: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"url": url, "fetched_at": t, "status": 200, "page_type": "product", **kw}


# latencies of a.example's fetches, ms (40 and 160 fall on bin edges: they count below them)
LATENCIES = [12.0, 40.0, 150.0, 160.0, 950.0, 130_000.0]


def known_observations(t0: float) -> list[dict[str, Any]]:
    """a.example/1: new, 3 changed, 2 unchanged, each with a latency; a.example/2 one
    429 without one; b.example/1: one new (a latency of 5 ms)."""
    records = [{"p": 0}, {"p": 1}, {"p": 2}, {"p": 3}, {"p": 3}, {"p": 3}]
    return [
        obs("https://a.example/1", t0 + 3600 * i, record=r, latency_ms=lat,
            bytes_sent=100, bytes_received=1000 * (i + 1), credits=2)
        for i, (r, lat) in enumerate(zip(records, LATENCIES, strict=True))
    ] + [
        obs("https://a.example/2", t0 + 100, status=429, bytes_sent=80, bytes_received=20),
        obs("https://b.example/1", t0 + 200, record={"q": 1}, latency_ms=5.0, page_type="list"),
    ]  # fmt: skip


def test_outcome_byte_and_credit_counters_count_the_observations(serve: Serve) -> None:
    with serve() as (client, clock):
        t0 = clock() - 86400
        post(client, known_observations(t0))
        m = scrape(client)
        a = {"site": "a.example", "page_type": "product"}
        got = {o: value(m, "recrawl_outcomes_total", **a, outcome=o) for o in OUTCOMES}
        assert got == {o: 0.0 for o in OUTCOMES} | {
            "new": 1.0,
            "changed": 3.0,
            "unchanged": 2.0,
            "hard_block": 1.0,  # the 429
        }
        assert value(m, "recrawl_fetches_total", **a) == 7.0
        assert value(m, "recrawl_changes_detected_total", **a) == 3.0
        assert value(m, "recrawl_fetches_without_change_total", **a) == 2.0
        assert value(m, "recrawl_sent_bytes_total", **a) == 6 * 100 + 80
        assert value(m, "recrawl_received_bytes_total", **a) == 21_000 + 20
        # credits as reported; the 429 reported none and is no successful response
        assert value(m, "recrawl_credits_total", **a) == 12.0
        b = {"site": "b.example", "page_type": "list"}
        assert value(m, "recrawl_outcomes_total", **b, outcome="new") == 1.0
        assert value(m, "recrawl_outcomes_total", **b, outcome="changed") == 0.0
        assert ("recrawl_outcomes_total", frozenset({**a, "page_type": "list"}.items())) not in m

        # counters: later observations add to them, nothing resets
        post(client, [obs("https://a.example/1", t0 + 7 * 3600, record={"p": 4}, latency_ms=20)])
        m2 = scrape(client)
        assert value(m2, "recrawl_outcomes_total", **a, outcome="changed") == 4.0
        assert value(m2, "recrawl_outcomes_total", **a, outcome="unchanged") == 2.0
        assert value(m2, "recrawl_fetch_latency_seconds_count", site="a.example") == 7.0
        assert value(m2, "recrawl_observations_accepted_total") == 9.0


def test_the_latency_histogram_counts_each_fetch_with_a_latency_in_its_bin(serve: Serve) -> None:
    with serve() as (client, clock):
        post(client, known_observations(clock() - 86400))
        m = scrape(client)
    site = {"site": "a.example"}
    # the 429 reported no latency: six fetches, not seven
    assert value(m, "recrawl_fetch_latency_seconds_count", **site) == len(LATENCIES)
    assert value(m, "recrawl_fetch_latency_seconds_bucket", **site, le="+Inf") == len(LATENCIES)
    cum = [
        value(m, "recrawl_fetch_latency_seconds_bucket", **site, le=le) for le in LATENCY_LE_SECONDS
    ]
    assert cum == [float(sum(x <= e for x in LATENCIES)) for e in LATENCY_EDGES_MS]
    assert value(m, "recrawl_fetch_latency_seconds_bucket", **site, le="0.04") == 2.0  # le: <=
    assert cum[-1] == 5.0  # 130 s is above the last edge (116 s): only in +Inf
    # the sum is estimated from the bins: within 2^(1/4) of each latency (above 7 ms)
    est = value(m, "recrawl_fetch_latency_seconds_sum", **site)
    assert sum(LATENCIES) / 1000 / 2**0.25 <= est <= sum(LATENCIES) / 1000 * 2**0.25
    assert value(m, "recrawl_fetch_latency_seconds_count", site="b.example") == 1.0
    assert value(m, "recrawl_fetch_latency_seconds_bucket", site="b.example", le="0.01") == 1.0


def test_site_latency_sums_the_bins_of_each_site() -> None:
    class Rows:
        sites = ("a", "b", "c")
        site = np.array([0, 1, 0], dtype=np.int64)
        latency = np.zeros((3, LATENCY_BINS), dtype=np.int64)

    Rows.latency[0, latency_bin(50)] = 2
    Rows.latency[2, latency_bin(50)] = 1
    Rows.latency[2, LATENCY_BINS - 1] = 4
    hist = site_latency(Rows())
    assert set(hist) == {"a", "b", "c"}
    assert hist["a"][latency_bin(50)] == 3 and hist["a"][-1] == 4 and hist["a"].sum() == 7
    assert hist["b"].sum() == 0 == hist["c"].sum()  # a site without latencies: zeros
    one = np.zeros(LATENCY_BINS)
    one[latency_bin(50)] = 1
    assert 50 / 2**0.25 <= latency_sum_estimate_ms(one) <= 50 * 2**0.25
    assert LATENCY_REPRESENTATIVE_MS[-1] > LATENCY_EDGES_MS[-1]


def test_spend_this_cycle_against_the_budget(serve: Serve) -> None:
    # bytes: a lease charges the plan's estimate, its report what the fetch moved
    with serve(billing_unit="bytes", budget_per_day=24 * 2_000_000.0) as (client, clock):
        t0 = clock() - 2 * 86400
        post(client, [
            obs(f"https://a.example/{i}", t0 + i, record={"p": i}, bytes_received=200_000)
            for i in range(20)
        ])  # fmt: skip
        clock.advance(1)
        m = scrape(client)
        assert value(m, "recrawl_cycle_budget", unit="bytes") == 2_000_000.0
        assert value(m, "recrawl_cycle_spent", unit="bytes") == 0.0
        assert value(m, "recrawl_cycle_seconds") == 3600.0
        plan = {t["url"]: t for t in client.get("/v1/plan").json()["tasks"]}
        r = client.post("/v1/leases", json={"worker": "w1", "max": 3})
        leased = r.json()["tasks"]
        assert len(leased) == 3, r.text
        charged = sum(plan[t["url"]]["cost"] for t in leased)
        m = scrape(client)
        assert value(m, "recrawl_cycle_spent", unit="bytes") == pytest.approx(charged)
        assert value(m, "recrawl_leases_total") == 3.0
        # the fetches moved far more than planned: the cycle is over its budget
        post(client, [
            obs(t["url"], clock(), lease_id=t["lease_id"], record={"p": "x"},
                bytes_sent=1_000, bytes_received=999_000)
            for t in leased
        ])  # fmt: skip
        m = scrape(client)
        assert value(m, "recrawl_cycle_spent", unit="bytes") == 3_000_000.0
        # the spend check: the three reported fetches, planned against reported
        assert value(m, "recrawl_cycle_fetches_reported") == 3.0
        assert value(m, "recrawl_cycle_fetch_cost_expected", unit="bytes") == pytest.approx(charged)
        assert value(m, "recrawl_cycle_fetch_cost_reported", unit="bytes") == 3_000_000.0
        assert value(m, "recrawl_cycle_spent", unit="bytes") > value(
            m, "recrawl_cycle_budget", unit="bytes"
        )
        clock.advance(3600)  # a new cycle starts from nothing
        m = scrape(client)
        assert value(m, "recrawl_cycle_spent", unit="bytes") == 0.0
        assert value(m, "recrawl_cycle_fetch_cost_reported", unit="bytes") == 0.0


def test_the_freshness_estimate_per_site_decays_until_the_next_fetch(serve: Serve) -> None:
    with serve() as (client, clock):
        t0 = clock() - 10 * 86400
        post(client, [  # a.example/1 changes at every daily visit; a.example/2 never answered
            obs("https://a.example/1", t0 + d * 86400, record={"p": d}) for d in range(10)
        ] + [
            obs("https://a.example/2", t0, status=503),
            obs("https://b.example/1", t0 + 9 * 86400, record={"q": 1}),
        ])  # fmt: skip
        m = scrape(client)
        fresh = value(m, "recrawl_freshness_ratio", site="a.example")
        assert value(m, "recrawl_live_page_value", site="a.example") == 2.0
        assert 0.0 < fresh < 0.5  # a page never fetched counts as stale
        assert 0.0 < value(m, "recrawl_freshness_ratio", site="b.example") <= 1.0
        clock.advance(3 * 86400)
        later = value(scrape(client), "recrawl_freshness_ratio", site="a.example")
        assert later < fresh
        # a fetch now: fresh again once the estimate has re-read the pages (5 minutes
        # on, in a thread of its own: the scrapes meanwhile evaluate the model they have)
        post(client, [obs("https://a.example/1", clock(), record={"p": 99})])
        clock.advance(301)
        deadline = time.monotonic() + 10
        while (again := value(scrape(client), "recrawl_freshness_ratio", site="a.example")) < 0.4:
            assert time.monotonic() < deadline, again
            time.sleep(0.02)
        assert math.isclose(again, 0.5, rel_tol=0.05)


def test_a_failing_parser_shows_in_its_own_band_not_the_sites(serve: Serve) -> None:
    with serve() as (client, clock):
        t0 = clock()
        post(client, [  # five quiet days, then half an hour of records that fail to extract
            obs(f"https://p.example/{i % 20}", t0 - (5 - d) * 86400 + i * 720, record={"n": d})
            for d in range(5) for i in range(120)
        ] + [
            obs(f"https://p.example/{i % 20}", t0 - 1800 + i * 9, outcome="extract_failed")
            for i in range(200)
        ])  # fmt: skip
        m = scrape(client)
    site = {"site": "p.example"}
    assert value(m, "recrawl_outcomes_total", **site, page_type="product",
                 outcome="extract_failed") == 200.0  # fmt: skip
    assert value(m, "recrawl_site_parser_health_band", **site, band="critical") == 1.0
    assert value(m, "recrawl_site_parser_health_score", **site) == 0.0
    assert value(m, "recrawl_site_health_band", **site, band="healthy") == 1.0
    assert value(m, "recrawl_site_throttle_share", **site) == 0.0


def test_the_cost_of_a_record_shows_against_the_sites_normal(serve: Serve) -> None:
    """Cost drift (issue 31: computed, never shown): pages three times as heavy
    for the last half hour cost three times the bytes per record extracted."""
    with serve() as (client, clock):
        t0 = clock()
        post(client, [
            obs(f"https://c.example/{i % 20}", t0 - (5 - d) * 86400 + i * 720, record={"n": d},
                bytes_received=10_000)
            for d in range(5) for i in range(120)
        ] + [
            obs(f"https://c.example/{i % 20}", t0 - 1800 + i * 9, record={"n": 9},
                bytes_received=30_000)
            for i in range(200)
        ])  # fmt: skip
        m = scrape(client)
        now = value(m, "recrawl_site_bytes_per_valid_record", site="c.example", window="current")
        normal = value(m, "recrawl_site_bytes_per_valid_record", site="c.example", window="normal")
        assert normal > 0 and now > 2.5 * normal, (now, normal)
