"""The policies as a table: one rule per policy, and the harmonic-staleness allocation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl import ConfigError
from recrawl.plan.planner import (
    POLICIES,
    POLICY_RULES,
    Overdue,
    PlanPages,
    PolicyRule,
    harmonic_allocation,
    plan_cycle,
    policy_rule,
    reallocate,
)
from recrawl.sim.replay import generate_traces, replay

DAY = 86_400.0


def test_every_policy_is_a_row_and_an_unknown_one_names_the_choices() -> None:
    assert tuple(POLICY_RULES) == POLICIES
    assert {"recrawl", "greedy", "uniform", "proportional", "nutch", "harmonic"} <= set(POLICIES)
    with pytest.raises(ConfigError, match="choose from recrawl, greedy"):
        policy_rule("foo")
    with pytest.raises(ValueError, match="unknown policy"):  # a ConfigError is a ValueError
        plan_cycle(PlanPages.new(3, now=0.0), budget=1.0, now=1.0, policy="foo")


def _fetched(n: int, rng: np.random.Generator) -> PlanPages:
    s = PlanPages.new(n, now=0.0)
    s.last_fetch[:] = rng.uniform(0, 10 * DAY, n)
    s.never_fetched[:] = False
    rate = rng.lognormal(-1.0, 1.5, n)
    s.ev_nc[:] = rate * 20
    s.ev_tc[:] = 20.0
    s.ev_nu[:] = 5.0
    s.ev_tu[:] = 5.0 / np.maximum(rate, 1e-3)
    return s


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.floats(1e-4, 1e3), min_size=1, max_size=40),
    budget=st.floats(1e-3, 1e3),
)
def test_harmonic_spends_the_budget_and_starves_no_page(rates: list[float], budget: float) -> None:
    rate = np.array(rates)
    cost = np.linspace(1.0, 3.0, rate.size)
    v = harmonic_allocation(rate, np.ones(rate.size), cost, budget, "freshness")
    assert np.all(v > 0)  # never starves a page that changes
    assert float(np.dot(cost, v)) == pytest.approx(budget, rel=1e-6)
    # at equal costs a faster page gets at least as many visits
    same = harmonic_allocation(rate, np.ones(rate.size), np.ones(rate.size), budget, "freshness")
    order = np.argsort(rate, kind="stable")
    assert np.all(np.diff(same[order]) >= -1e-9 * budget)


def test_harmonic_keeps_visiting_a_page_too_fast_for_the_optimal_allocation() -> None:
    rate = np.array([0.01, 0.1, 1.0, 200.0])
    ones = np.ones(4)
    harm = harmonic_allocation(rate, ones, ones, 2.0, "freshness")
    opt = POLICY_RULES["recrawl"].allocate(rate, ones, ones, 2.0, "freshness")  # type: ignore[misc]
    assert opt[3] == 0.0  # freshness cannot be bought there: the optimum gives up
    assert harm[3] > 0.0 and harm[3] < 2.0  # harmonic keeps a bounded share


def test_a_new_policy_is_a_new_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner asks the table, not a chain of ifs: a row added with an
    allocation of its own is planned like any other."""

    def slowest_first(rate, value, cost, budget, objective):  # type: ignore[no-untyped-def]
        inv = 1.0 / rate
        return inv * (budget / float(np.dot(inv, cost)))

    rule = PolicyRule("slowest", "visits inversely proportional to the rate",
                      estimates=True, allocate=slowest_first, ranking=Overdue)  # fmt: skip
    monkeypatch.setitem(POLICY_RULES, "slowest", rule)
    s = _fetched(200, np.random.default_rng(3))
    model = reallocate(s, 20.0, 11 * DAY, policy="slowest")
    rate = model.rate_per_day
    assert np.corrcoef(model.visits_per_day, 1.0 / rate)[0, 1] > 0.99
    plan = plan_cycle(s, 5.0, 11 * DAY, policy="slowest", model=model)
    assert 0 < len(plan) <= 5


def test_harmonic_plans_and_replays() -> None:
    s = _fetched(500, np.random.default_rng(1))
    plan = plan_cycle(s, 10.0, 11 * DAY, policy="harmonic")
    assert len(plan) == 10 and plan.spent == pytest.approx(10.0)
    traces = generate_traces("poisson", pages=60, days=60, seed=2)
    got = replay(traces, 0.1, policies=["harmonic", "uniform"], seed=0)["policies"]
    assert 0.0 < got["harmonic"]["freshness"] <= 1.0
