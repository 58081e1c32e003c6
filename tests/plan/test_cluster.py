"""recrawl.plan.cluster and recrawl.plan.dask: the same plan as the one-machine planner."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recrawl.estimate.rates import GroupPriors, fit_group_priors
from recrawl.plan.cluster import (
    LocalRunner,
    Partition,
    cluster_plan_cycle,
    cluster_reallocate,
    fit_priors,
    partition_of_sites,
    split_pages,
)
from recrawl.plan.freshness import marginal
from recrawl.plan.planner import (
    REASONS,
    PlannerConfig,
    PlanPages,
    group_priors,
    plan_cycle,
    reallocate,
)

DAY = 86_400.0
NOW = 1_800_000_000.0


def _pages(n: int, seed: int = 0, *, new_share: float = 0.01) -> PlanPages:
    """``n`` pages on ``n // 500`` sites (two page types each) with a year of revisits."""
    rng = np.random.default_rng(seed)
    n_sites = max(1, n // 500)
    site = rng.integers(0, n_sites, n)
    s = PlanPages(
        value=rng.choice(np.array([1.0, 2.0, 4.0, 8.0]), n),
        cost=rng.uniform(0.5, 2.0, n),
        site=site,
        host=site,
        group=site * 2 + rng.integers(0, 2, n),
        last_fetch=NOW - rng.uniform(0.0, 250.0, n) * DAY,
        first_seen=NOW - rng.choice(np.array([400.0, 300.0, 10.0]), n) * DAY,
        never_fetched=rng.random(n) < new_share,
        ev_nc=np.zeros(n),
        ev_tc=np.zeros(n),
        ev_nu=np.zeros(n),
        ev_tu=np.zeros(n),
        nutch_interval=np.full(n, 30 * DAY),
        site_cost_multiplier=np.where(rng.random(n_sites) < 0.1, 3.0, 1.0),
        site_paused=rng.random(n_sites) < 0.02,
    )
    rate = np.exp(rng.uniform(math.log(1 / 365), math.log(3.0), n))
    visits = rng.integers(1, 40, n)
    visits[rng.random(n) < 0.03] = 1  # a few pages still being learned
    interval = 365.0 / visits
    changes = rng.binomial(visits, -np.expm1(-rate * interval)).astype(np.float64)
    s.ev_nc[:], s.ev_tc[:] = changes, changes * interval
    s.ev_nu[:], s.ev_tu[:] = visits - changes, (visits - changes) * interval
    return s


def _gathered(runner: LocalRunner, n: int) -> tuple[np.ndarray, np.ndarray]:
    v, r = np.full(n, np.nan), np.full(n, np.nan)
    for p in runner.partitions:
        assert p.visits_per_day is not None and p.rate_per_day is not None
        v[p.page_id], r[p.page_id] = p.visits_per_day, p.rate_per_day
    return v, r


def _same_answers(n: int, n_partitions: int, cfg: PlannerConfig) -> None:
    pages = _pages(n)
    per_day = 0.1 * n
    per_cycle = per_day * cfg.cycle_hours / 24.0
    priors = group_priors(pages)
    one = reallocate(pages, per_day * cfg.score_pool_share(), NOW, config=cfg, priors=priors)
    runner = LocalRunner(split_pages(pages, n_partitions))
    model = cluster_reallocate(
        runner, per_day * cfg.score_pool_share(), NOW, config=cfg, priors=priors
    )
    visits, rate = _gathered(runner, n)
    np.testing.assert_allclose(rate, one.rate_per_day, rtol=1e-12)
    # the one-machine solver finds its multiplier partly on 0.05 % bins (to
    # about 2e-7): pages near the cut-off, where visits are most sensitive to
    # it, differ most; every page agrees to 1e-3 and the budget to 1e-9
    np.testing.assert_allclose(visits, one.visits_per_day, rtol=1e-3, atol=1e-6)
    cost = pages.cost * pages.site_cost_multiplier[pages.site]
    assert math.isclose(float(cost @ visits), float(cost @ one.visits_per_day), rel_tol=1e-9)
    # the learning floor was applied in both: some pages sit exactly on it
    assert np.count_nonzero(np.isclose(visits, visits.max(where=visits < 10, initial=0)))
    for seed in (1, 2):
        p1 = plan_cycle(
            pages, per_cycle, NOW, config=cfg, rng=np.random.default_rng(seed), model=one
        )
        p2 = cluster_plan_cycle(
            runner, per_cycle, NOW, model=model, config=cfg, rng=np.random.default_rng(seed)
        )
        for code, reason in enumerate(REASONS):
            a, b = p1.index[p1.reason == code], p2.index[p2.reason == code]
            # the same pages; ties at the score pool's cut-off may differ
            assert a.size == b.size, reason
            assert np.setdiff1d(a, b).size <= (2 if reason == "score" else 0), reason
        assert math.isclose(p1.spent, p2.spent, rel_tol=1e-3)
        assert p2.spent <= per_cycle * (1 + 1e-9)
        assert not np.isin(p2.index, np.flatnonzero(pages.site_paused[pages.site])).any()


def test_two_hundred_thousand_pages_get_the_one_machine_plan() -> None:
    _same_answers(200_000, 7, PlannerConfig(verify_share=0.02, reestimate_after_days=200.0))


def test_host_caps_hold_within_partitions() -> None:
    cfg = PlannerConfig(max_per_host=3, reestimate_after_days=200.0)
    pages = _pages(40_000, seed=3)
    per_cycle = 0.1 * 40_000 / 24
    one = reallocate(pages, 0.1 * 40_000 * cfg.score_pool_share(), NOW, config=cfg)
    runner = LocalRunner(split_pages(pages, 5))
    model = cluster_reallocate(
        runner, 0.1 * 40_000 * cfg.score_pool_share(), NOW, config=cfg, priors=group_priors(pages)
    )
    p1 = plan_cycle(pages, per_cycle, NOW, config=cfg, rng=np.random.default_rng(0), model=one)
    p2 = cluster_plan_cycle(
        runner, per_cycle, NOW, model=model, config=cfg, rng=np.random.default_rng(0)
    )
    _, per_host = np.unique(pages.host[p2.index], return_counts=True)
    assert per_host.max() == 3
    assert len(p2) == len(p1)
    assert np.setdiff1d(p1.index, p2.index).size <= 2


@pytest.mark.slow
def test_a_million_pages_get_the_one_machine_plan() -> None:
    _same_answers(1_000_000, 16, PlannerConfig())


def test_priors_fitted_from_partitions_match_when_the_sample_holds_every_page() -> None:
    pages = _pages(30_000, seed=4)
    runner = LocalRunner(split_pages(pages, 4))
    got, want = fit_priors(runner), group_priors(pages)
    np.testing.assert_allclose(got.alpha, want.alpha, rtol=1e-9)
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-9)
    # on a sample of a third: as close to the full fit as the one-machine
    # fit on a sample of that size is
    thinned = fit_priors(runner, sample_pages=10_000)
    ev = (pages.ev_nc, pages.ev_tc, pages.ev_nu, pages.ev_tu)
    own = fit_group_priors(*ev, pages.group, mask=~pages.never_fetched, sample_pages=10_000)

    def off(p: GroupPriors) -> float:
        return float(np.mean(np.abs(p.mean_rate / want.mean_rate - 1)))

    assert off(thinned) < 1.5 * off(own) + 0.01


def test_the_allocation_meets_the_optimality_condition_at_one_multiplier() -> None:
    pages = _pages(50_000, seed=5, new_share=0.0)
    cfg = PlannerConfig(learning_boost=0.0, probe_days=0.0)
    runner = LocalRunner(split_pages(pages, 3))
    cluster_reallocate(runner, 4_000.0, NOW, config=cfg, priors=group_priors(pages))
    visits, rate = _gathered(runner, len(pages))
    cost = pages.cost * pages.site_cost_multiplier[pages.site]
    on = visits > 1e-3
    mu = pages.value[on] * marginal(rate[on] / visits[on]) / (rate[on] * cost[on])
    assert mu.max() / mu.min() - 1 < 1e-8
    assert math.isclose(float(cost @ visits), 4_000.0, rel_tol=1e-12)


def test_partitions_keep_each_site_whole() -> None:
    pages = _pages(5_000)
    parts = split_pages(pages, 6)
    assert sum(len(p) for p in parts) == 5_000
    seen = [set(p.pages.site.tolist()) for p in parts]
    assert sum(len(s) for s in seen) == len(set().union(*seen))
    # consecutive site codes spread evenly over the partitions
    per_part = np.bincount(partition_of_sites(np.arange(1000), 8), minlength=8)
    assert per_part.min() > 90 and per_part.max() < 160
    big = max(parts, key=len)
    with pytest.raises(ValueError, match="ascending"):
        Partition(big.pages, big.page_id[::-1].copy())


def test_import_recrawl_does_not_import_dask() -> None:
    code = "import sys, recrawl, recrawl.plan.cluster; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_dask_cluster_over_parquet_gives_the_in_process_plan(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("pyarrow")
    from recrawl.plan.dask import open_partitions, write_partitions

    pages = _pages(60_000, seed=6)
    # some pages under complete observation: the Parquet files carry them
    pages.notified = np.random.default_rng(7).random(len(pages)) < 0.2
    cfg = PlannerConfig()
    priors = group_priors(pages)
    write_partitions(pages, str(tmp_path / "pages"), n_partitions=4)
    local = LocalRunner(split_pages(pages, 4))
    m1 = cluster_reallocate(local, 5_000.0, NOW, config=cfg, priors=priors)
    p1 = cluster_plan_cycle(local, 250.0, NOW, model=m1, config=cfg, rng=np.random.default_rng(0))
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        runner = open_partitions(client, str(tmp_path / "pages"))
        m2 = cluster_reallocate(runner, 5_000.0, NOW, config=cfg, priors=priors)
        p2 = cluster_plan_cycle(
            runner, 250.0, NOW, model=m2, config=cfg, rng=np.random.default_rng(0)
        )
    assert m2.log_multiplier == m1.log_multiplier
    np.testing.assert_array_equal(p2.index, p1.index)
    np.testing.assert_array_equal(p2.reason, p1.reason)


def test_plan_on_cluster_plans_through_a_scheduler_address(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("pyarrow")
    from recrawl.plan.dask import plan_on_cluster, write_partitions

    pages = _pages(30_000, seed=7)
    cfg = PlannerConfig()
    write_partitions(pages, str(tmp_path / "pages"), n_partitions=3)
    local = LocalRunner(split_pages(pages, 3))
    per_day = 200.0 * 24 / cfg.cycle_hours * cfg.score_pool_share()
    m1 = cluster_reallocate(local, per_day, NOW, config=cfg)  # priors fitted the same way
    p1 = cluster_plan_cycle(local, 200.0, NOW, model=m1, config=cfg, rng=np.random.default_rng(3))
    with distributed.LocalCluster(
        n_workers=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        plan, model = plan_on_cluster(
            cluster.scheduler_address,
            str(tmp_path / "pages"),
            200.0,
            NOW,
            config=cfg,
            rng=np.random.default_rng(3),
        )
    assert model.log_multiplier == m1.log_multiplier
    np.testing.assert_array_equal(plan.index, p1.index)
    assert plan.spent <= 200.0 * (1 + 1e-9)


@pytest.mark.parametrize("budget_share", [0.02, 0.1, 0.5])
def test_notified_pages_get_the_one_machine_allocation_and_plan(budget_share: float) -> None:
    """Pages under complete observation (a trusted listing or feed announces
    their changes, issue 28 item 4) are planned over partitions as on one
    machine: the same announced changes followed (the page on the budget's
    jump with the same share), the rest at the same multiplier, and the
    same cycle, announced changes first."""
    n = 40_000
    pages = _pages(n, seed=9, new_share=0.0)
    rng = np.random.default_rng(10)
    pages.notified = rng.random(n) < 0.3
    # a third of the notified pages have an announced change, a third are vouched for
    pages.known_stale = pages.notified & (rng.random(n) < 0.33)
    pages.checked_at = np.where(
        pages.notified & ~pages.known_stale, NOW - rng.uniform(0, 2, n) * DAY, np.nan
    )
    cfg = PlannerConfig(reestimate_after_days=200.0)
    per_day = budget_share * n
    priors = group_priors(pages)
    one = reallocate(pages, per_day * cfg.score_pool_share(), NOW, config=cfg, priors=priors)
    assert one.notified is not None and one.follow_probability is not None
    followed = one.follow_probability[one.notified]
    assert np.any(followed == 1.0) and np.any(followed == 0.0)  # the budget binds
    runner = LocalRunner(split_pages(pages, 5))
    model = cluster_reallocate(
        runner, per_day * cfg.score_pool_share(), NOW, config=cfg, priors=priors
    )
    visits, _ = _gathered(runner, n)
    np.testing.assert_allclose(visits, one.visits_per_day, rtol=1e-3, atol=1e-6)
    cost = pages.cost * pages.site_cost_multiplier[pages.site]
    assert math.isclose(float(cost @ visits), float(cost @ one.visits_per_day), rel_tol=1e-9)
    per_cycle = per_day * cfg.cycle_hours / 24.0
    p1 = plan_cycle(pages, per_cycle, NOW, config=cfg, rng=np.random.default_rng(1), model=one)
    p2 = cluster_plan_cycle(runner, per_cycle, NOW, model=model, config=cfg,
                            rng=np.random.default_rng(1))  # fmt: skip
    for code, reason in enumerate(REASONS):
        a, b = p1.index[p1.reason == code], p2.index[p2.reason == code]
        assert a.size == b.size, reason
        assert np.setdiff1d(a, b).size <= (2 if reason == "score" else 0), reason
    # announced changes are taken first: the score pool's first tasks
    score = p2.index[p2.reason == REASONS.index("score")]
    assert score.size and pages.known_stale[score[0]]
