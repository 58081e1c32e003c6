"""The time view's sums: they add up to the store's totals and follow a site's normal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recrawl.engine.pipeline import store_batch
from recrawl.engine.stats import compute_stats
from recrawl.observe.observation import parse_observation
from recrawl.report.timeline import (
    money_over_time,
    routes_over_time,
    signals_over_time,
    step_starts,
)
from recrawl.store import SQLiteStore

DAY = 86400.0
T0 = 1_767_225_600.0  # a UTC midnight


def _store(tmp_path: Path) -> SQLiteStore:
    """Two sites over 20 days; b.example starts answering 403 to half its requests
    on day 18 and gets three times slower."""
    obs = []
    for day in range(20):
        for i in range(120):
            for site in ("a.example", "b.example"):
                t = T0 + day * DAY + i * 700
                hostile = site == "b.example" and day >= 18
                blocked = hostile and i % 2 == 0
                obs.append(
                    {"url": f"https://{site}/p{i % 30}", "fetched_at": t, "site": site,
                     "page_type": "item" if i % 3 else "list",
                     "status": 403 if blocked else 200, "latency_ms": 600 if hostile else 200,
                     "record": {"v": (day * 120 + i) // 90}, "bytes_received": 1000,
                     "id": f"{site}-{day}-{i}"}
                )  # fmt: skip
    store = SQLiteStore(tmp_path / "t.db")
    store_batch(store, [parse_observation(o) for o in sorted(obs, key=lambda o: o["fetched_at"])])
    return store


@pytest.mark.parametrize("daily", [False, True])
def test_the_steps_add_up_to_the_stores_totals(tmp_path: Path, daily: bool) -> None:
    with _store(tmp_path) as store:
        b = store.buckets(0, 2e9, daily=daily)
        m = money_over_time(b, T0, T0 + 20 * DAY, DAY, "bytes")
        stats = compute_stats(store.group_totals(), "bytes")
    assert len(m.starts) == 20
    assert m.groups == [(g["site"], g["page_type"]) for g in stats["groups"]]
    for g, row in enumerate(stats["groups"]):
        assert m.fetches[g].sum() == row["fetches"]
        assert m.changes[g].sum() == row["changes_detected"]
        assert m.without_change[g].sum() == row["fetches_without_change"]
        assert m.cost[g].sum() == pytest.approx(row["cost"])
    sites, spend = m.spend_by_site()
    assert sites == ["a.example", "b.example"]
    assert spend.sum() == pytest.approx(stats["total"]["cost"])
    per_change = m.cost_per_change
    assert np.all(np.isnan(per_change[m.changes == 0]))


def test_a_range_keeps_only_its_steps(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        b = store.buckets(0, 2e9)
    m = money_over_time(b, T0 + 2 * DAY, T0 + 3 * DAY, 3600.0)
    assert len(m.starts) == 24 and m.starts[0] == T0 + 2 * DAY
    assert m.fetches.sum() == 2 * 120  # one day of two sites
    assert len(step_starts(T0 + 10, T0 + 3600, 3600.0)) == 1


def test_blocks_and_latency_rise_against_the_sites_normal(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        s = signals_over_time(
            store.buckets(0, 2e9, daily=True), store.buckets(0, 2e9, daily=True),
            T0 + 10 * DAY, T0 + 20 * DAY, DAY,
        )  # fmt: skip
    a, b = s.sites.index("a.example"), s.sites.index("b.example")
    assert np.all(s.hard_block[a] == 0) and np.all(s.requests == 120)
    assert s.hard_block[b, -1] == pytest.approx(0.5) and s.hard_block[b, :8].max() == 0
    # the normal is the stable days before: no blocks, 200 ms (the histogram's bin)
    assert np.all(s.normal_hard_block[b] == 0)
    assert s.p95_ms[b, -1] > 2 * s.normal_p95_ms[b, -1]
    assert s.p95_ms[a, -1] == pytest.approx(s.normal_p95_ms[a, -1])


def test_refusals_by_route_show_which_route_is_refused() -> None:
    from recrawl.health.buckets import LATENCY_BINS, OUTCOMES
    from recrawl.health.score import BucketArrays

    rows = []  # two routes over two hours: pool-b refused half its requests in the second
    for hour in range(2):
        for route in ("pool-a", "pool-b"):
            out = np.zeros(len(OUTCOMES))
            refused = 50 if (route, hour) == ("pool-b", 1) else 0
            out[OUTCOMES.index("hard_block")] = refused
            out[OUTCOMES.index("unchanged")] = 100 - refused
            rows.append((route, T0 + hour * 3600, out))
    b = BucketArrays.from_labels(
        site=["a.example"] * 4, page_type=["item"] * 4, route=[r for r, _, _ in rows],
        bucket_start=[t for _, t, _ in rows], n=[100] * 4, outcomes=[o for _, _, o in rows],
        latency=np.zeros((4, LATENCY_BINS)),
    )  # fmt: skip
    r = routes_over_time(b, T0, T0 + 2 * 3600, 3600.0)
    assert r.routes == ["pool-a", "pool-b"]
    assert r.refused.tolist() == [[0.0, 0.0], [0.0, 0.5]]
    assert r.requests.tolist() == [[100, 100], [100, 100]]
