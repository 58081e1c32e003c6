"""The allocation with pages under complete observation (recrawl.plan.notified),
and how the recrawl policy's cycles treat them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.plan.freshness import Objective, allocation_value, optimal_allocation
from recrawl.plan.notified import notified_allocation, rest_spend
from recrawl.plan.planner import PlannerConfig, PlanPages, plan_cycle, reallocate

DAY = 86_400.0
NOW = 1_800_000_000.0
NO_RESERVES = PlannerConfig(discovery_share=0.0, reestimate_share=0.0, verify_share=0.0)


def pages(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rate = np.exp(rng.uniform(math.log(0.01), math.log(20.0), n))
    value = rng.choice([1.0, 2.0, 4.0], n)
    cost = rng.uniform(0.5, 2.0, n)
    return rate, value, cost


def joint_value(
    rate: np.ndarray, value: np.ndarray, visits: np.ndarray, p: np.ndarray,
    notified: np.ndarray, objective: Objective,
) -> float:  # fmt: skip
    """The objective of an allocation where the notified pages' changes are
    announced: a followed page is fresh a share p of the time (freshness) or
    has p λ of its changes caught (events)."""
    rest = ~notified
    own = allocation_value(rate[rest], visits[rest], weight=value[rest], objective=objective)
    gain = p * value if objective == "freshness" else p * value * rate
    return own + float(gain[notified].sum())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    share=st.floats(0.0, 1.0),
    budget=st.floats(0.5, 200.0),
    objective=st.sampled_from(["freshness", "events"]),
)
def test_the_joint_allocation_spends_the_budget_and_beats_ignoring_the_notices(
    seed: int, share: float, budget: float, objective: Objective
) -> None:
    rate, value, cost = pages(60, seed)
    notified = np.random.default_rng(seed + 1).random(60) < share
    visits, p = notified_allocation(rate, value, cost, budget, objective, notified)
    assert np.all((p >= 0) & (p <= 1)) and np.all(p[~notified] == 0)
    spent = float(np.dot(cost, visits))
    need = float(np.dot(cost[notified], rate[notified]))  # every notice followed
    if notified.all() and need < budget:
        assert spent == pytest.approx(need) and np.all(p == 1)
    else:
        assert spent == pytest.approx(budget, rel=1e-6)
    # the best returns are followed first
    ret = value / (cost * rate) if objective == "freshness" else value / cost
    followed, left = notified & (p > 0), notified & (p < 1)
    if followed.any() and left.any():
        assert ret[followed].min() >= ret[left].max() * (1 - 1e-9) or (
            np.count_nonzero(notified & (p > 0) & (p < 1)) == 1
        )
    # the notices can only help: at least what the same budget buys when they
    # are ignored (every page visited on its own, the notified ones caught by
    # their visits alone)
    blind = optimal_allocation(rate, budget, weight=value, cost=cost, objective=objective)
    plain = allocation_value(rate, blind.visits_per_day, weight=value, objective=objective)
    got = joint_value(rate, value, visits, p, notified, objective)
    assert got >= plain * (1 - 1e-6)


def test_without_notified_pages_it_is_the_optimal_allocation() -> None:
    rate, value, cost = pages(50, 3)
    visits, p = notified_allocation(rate, value, cost, 20.0, "freshness", np.zeros(50, bool))
    ref = optimal_allocation(rate, 20.0, weight=value, cost=cost).visits_per_day
    assert np.allclose(visits, ref) and not p.any()


@pytest.mark.parametrize("objective", ["freshness", "events"])
def test_rest_spend_is_what_the_optimal_allocation_spends_at_its_multiplier(
    objective: Objective,
) -> None:
    rate, value, cost = pages(200, 5)
    for budget in (3.0, 30.0, 300.0):
        a = optimal_allocation(rate, budget, weight=value, cost=cost, objective=objective)
        assert rest_spend(a.multiplier, rate, value, cost, objective) == pytest.approx(
            budget, rel=1e-4
        )


def test_a_page_changing_too_fast_to_follow_is_dropped_for_the_rest() -> None:
    # ten pages changing daily, one notified changing 50 times a day: following
    # it would cost 50 fetches a day for one page's freshness
    rate = np.r_[np.ones(10), 50.0]
    notified = np.r_[np.zeros(10, bool), True]
    visits, p = notified_allocation(rate, np.ones(11), np.ones(11), 10.0, "freshness", notified)
    assert p[-1] == 0 and visits[-1] == 0
    assert visits[:10] == pytest.approx(np.ones(10))


def known(n: int, seed: int = 0) -> PlanPages:
    """Pages with a year of weekly revisits, rates from 1/month to 2/day."""
    rng = np.random.default_rng(seed)
    s = PlanPages.new(n, now=NOW - 400 * DAY)
    s.never_fetched[:] = False
    rate = np.exp(rng.uniform(math.log(1 / 30), math.log(2.0), n))
    changes = rng.binomial(50, -np.expm1(-rate * 7.0))
    s.ev_nc[:], s.ev_tc[:] = changes, changes * 7.0
    s.ev_nu[:], s.ev_tu[:] = 50 - changes, (50 - changes) * 7.0
    s.last_fetch[:] = NOW - rng.uniform(0, 10, n) * DAY
    return s


def test_vouched_notified_pages_get_no_visit_even_with_budget_to_spare() -> None:
    s = known(40)
    s.notified = np.zeros(40, bool)
    s.notified[:20] = True
    s.checked_at = np.full(40, np.nan)
    s.checked_at[:20] = NOW - 600.0  # the source read ten minutes ago: unchanged
    s.known_stale = np.zeros(40, bool)
    s.known_stale[[3, 7]] = True  # ... but for these two
    s.checked_at[[3, 7]] = np.nan
    model = reallocate(s, 200.0, NOW, config=NO_RESERVES)
    assert model.notified is not None and model.follow_probability is not None
    assert np.all(model.follow_probability[:20] == 1)  # a generous budget follows all
    plan = plan_cycle(s, 100.0, NOW, config=NO_RESERVES, model=model)
    chosen = plan.index.tolist()
    assert chosen[:2] in ([3, 7], [7, 3])  # the announced changes first
    assert not set(chosen) & (set(range(20)) - {3, 7})  # no visit of their own
    assert set(range(20, 40)) <= set(chosen)  # the budget left goes to the others


def test_a_silent_source_makes_a_notified_page_due_again() -> None:
    s = known(40)
    s.notified = np.ones(40, bool)
    s.checked_at = np.full(40, NOW - 600.0)
    model = reallocate(s, 20.0, NOW, config=NO_RESERVES)
    assert len(plan_cycle(s, 10.0, NOW, config=NO_RESERVES, model=model)) == 0
    # the source not read for thirty days: each page has changed once on
    # average since it last vouched, and is due as if it had no source
    s.checked_at[:] = NOW - 30 * DAY
    plan = plan_cycle(s, 10.0, NOW, config=NO_RESERVES, model=model)
    assert len(plan) == 10


def test_an_announced_change_not_worth_following_takes_only_spare_budget() -> None:
    s = known(30)
    s.ev_nc[0], s.ev_tc[0], s.ev_nu[0], s.ev_tu[0] = 500.0, 50.0, 0.0, 0.0  # ~10 a day
    s.notified = np.zeros(30, bool)
    s.notified[0] = True
    s.known_stale = np.zeros(30, bool)
    s.known_stale[0] = True
    model = reallocate(s, 3.0, NOW, config=NO_RESERVES)
    assert model.follow_probability is not None and model.follow_probability[0] == 0
    plan = plan_cycle(s, 2.0, NOW, config=NO_RESERVES, model=model)
    assert 0 not in plan.index.tolist()
    # a budget larger than every other candidate: it is taken last
    plan = plan_cycle(s, 40.0, NOW, config=NO_RESERVES, model=model)
    assert plan.index.tolist()[-1] == 0
