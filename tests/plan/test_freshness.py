"""Freshness math: the seed's table, F(λ, f), and the optimal allocation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.plan.freshness import (
    allocation_value,
    budget_for_freshness,
    captured_change_rate,
    freshness_gain,
    inverse_marginal,
    marginal,
    optimal_allocation,
    time_averaged_freshness,
)

rates = st.floats(min_value=1e-4, max_value=100.0)
positive = st.floats(min_value=1e-3, max_value=100.0)


def seed_freshness_gain(rate: float, days_since_visit: float, interval_days: float) -> float:
    """The seed essay's code, verbatim."""
    p_stale = 1 - math.exp(-rate * days_since_visit)
    fresh_after = (1 - math.exp(-rate * interval_days)) / rate if rate > 0 else interval_days
    return p_stale * fresh_after


def test_reproduces_the_seed_table() -> None:
    # change every 15 min, hourly, 6-hourly, daily, weekly, monthly, yearly
    per_day = [96.0, 24.0, 4.0, 1.0, 1 / 7, 1 / 30, 1 / 365]
    table = [0.010, 0.042, 0.241, 0.400, 0.124, 0.032, 0.003]
    got = freshness_gain(np.array(per_day), 1.0, 1.0)
    assert np.round(got, 3).tolist() == table


@given(rate=st.floats(min_value=0.0, max_value=500.0), t=positive, interval=positive)
def test_freshness_gain_matches_the_seed_code(rate: float, t: float, interval: float) -> None:
    assert freshness_gain(rate, t, interval) == pytest.approx(
        seed_freshness_gain(rate, t, interval), rel=1e-9, abs=1e-12
    )


def test_scalars_give_floats_and_arrays_broadcast() -> None:
    assert isinstance(freshness_gain(1.0, 1.0, 1.0), float)
    assert freshness_gain([1.0, 2.0], [[1.0], [2.0]], 1.0).shape == (2, 2)


def test_time_averaged_freshness_edges() -> None:
    assert time_averaged_freshness(0.0, 1.0) == 1.0
    assert time_averaged_freshness(1.0, 0.0) == 0.0
    assert time_averaged_freshness(1.0, 1e9) == pytest.approx(1.0)
    assert time_averaged_freshness(1.0, 1.0) == pytest.approx(1 - math.exp(-1))


@given(lam=rates, f=positive)
def test_time_averaged_freshness_is_the_average_of_the_stale_curve(lam: float, f: float) -> None:
    # F = f ∫₀^{1/f} e^(−λt) dt, by the trapezoid rule on a fine grid
    t = np.linspace(0.0, min(1.0 / f, 60.0 / lam), 200_001)
    numeric = f * np.trapezoid(np.exp(-lam * t), t)
    assert time_averaged_freshness(lam, f) == pytest.approx(numeric, rel=1e-4)


@given(lam=rates, f=positive)
def test_more_visits_never_hurt(lam: float, f: float) -> None:
    assert time_averaged_freshness(lam, 1.5 * f) >= time_averaged_freshness(lam, f) - 1e-12
    assert captured_change_rate(lam, 1.5 * f) >= captured_change_rate(lam, f) - 1e-12
    assert captured_change_rate(lam, f) <= min(lam, f) + 1e-12


@given(x=st.floats(min_value=1e-14, max_value=1 - 1e-12))
def test_inverse_marginal_inverts(x: float) -> None:
    r = float(inverse_marginal(x))
    assert marginal(r) == pytest.approx(x, rel=1e-5)
    assert float(inverse_marginal(x, polish=True)) == pytest.approx(r, rel=1e-5)


def test_inverse_marginal_out_of_range() -> None:
    assert inverse_marginal([0.0, -1.0, 1.0, 2.0]).tolist() == [0.0, 0.0, math.inf, math.inf]


@st.composite
def problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    n = draw(st.integers(min_value=1, max_value=40))
    lam = np.array(draw(st.lists(st.floats(1e-3, 50.0), min_size=n, max_size=n)))
    w = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 4.0, 8.0]), min_size=n, max_size=n)))
    c = np.array(draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n)))
    budget = draw(st.floats(0.01, 10.0)) * n
    return lam, w, c, budget


@settings(max_examples=60, deadline=None)
@given(problem=problems(), objective=st.sampled_from(["freshness", "events"]))
def test_allocation_spends_the_budget_and_meets_the_optimality_conditions(
    problem: tuple[np.ndarray, np.ndarray, np.ndarray, float], objective: str
) -> None:
    lam, w, c, budget = problem
    a = optimal_allocation(lam, budget, weight=w, cost=c, objective=objective)  # type: ignore[arg-type]
    f = a.visits_per_day
    assert np.all(f >= 0)
    assert float(np.dot(c, f)) == pytest.approx(budget, rel=1e-6)
    mu = a.multiplier
    visited = f > 0
    # KKT: w g(λ/f) / λ = μ c for visited pages (÷λ only for freshness)
    scale = lam if objective == "freshness" else np.ones_like(lam)
    lhs = w[visited] * marginal(lam[visited] / f[visited]) / scale[visited]
    assert np.allclose(lhs, mu * c[visited], rtol=1e-3)
    # unvisited pages could not reach μ c even with their first visit
    assert np.all(w[~visited] / scale[~visited] <= mu * c[~visited] * (1 + 1e-3))


@settings(max_examples=40, deadline=None)
@given(problem=problems(), objective=st.sampled_from(["freshness", "events"]))
def test_allocation_beats_uniform_and_proportional(
    problem: tuple[np.ndarray, np.ndarray, np.ndarray, float], objective: str
) -> None:
    lam, w, c, budget = problem
    best = optimal_allocation(lam, budget, weight=w, cost=c, objective=objective)  # type: ignore[arg-type]
    uniform = np.full_like(lam, budget / c.sum())
    proportional = lam * budget / np.dot(c, lam)
    value = allocation_value(lam, best.visits_per_day, weight=w, objective=objective)  # type: ignore[arg-type]
    for other in (uniform, proportional):
        assert value >= allocation_value(lam, other, weight=w, objective=objective) - 1e-9  # type: ignore[arg-type]


def test_freshness_penalises_the_fastest_pages_and_events_chases_them() -> None:
    lam = np.array([96.0, 1.0, 1 / 7, 1 / 365])
    fresh = optimal_allocation(lam, 1.0).visits_per_day
    events = optimal_allocation(lam, 1.0, objective="events").visits_per_day
    assert fresh[0] == 0.0  # the 15-minute page is not worth chasing
    assert fresh[1] > fresh[2] > fresh[3] > 0
    assert np.argmax(events) == 0
    assert np.all(np.diff(events) < 0)


def test_value_and_cost_move_visits() -> None:
    lam = np.array([0.5, 0.5])
    by_value = optimal_allocation(lam, 1.0, weight=[4.0, 1.0]).visits_per_day
    by_cost = optimal_allocation(lam, 1.0, cost=[1.0, 4.0]).visits_per_day
    assert by_value[0] > by_value[1]
    assert by_cost[0] > by_cost[1]


def test_pages_without_change_get_no_visits_and_bad_input_is_refused() -> None:
    a = optimal_allocation([0.0, 1.0], 2.0)
    assert a.visits_per_day[0] == 0.0
    assert a.visits_per_day[1] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        optimal_allocation([1.0], 0.0)
    with pytest.raises(ValueError):
        optimal_allocation([1.0], 1.0, cost=[0.0])


def test_large_allocation_matches_a_small_one_on_the_same_distribution() -> None:
    rng = np.random.default_rng(3)
    lam = np.exp(rng.normal(-4.0, 2.0, 200_000))
    big = optimal_allocation(lam, 0.05 * lam.size)
    small = optimal_allocation(lam[:2000], 0.05 * 2000)
    assert big.multiplier == pytest.approx(small.multiplier, rel=0.1)


def test_budget_for_freshness_is_the_least_that_reaches_the_target() -> None:
    rng = np.random.default_rng(3)
    lam = np.exp(rng.uniform(np.log(1 / 365), 0.0, 500))
    w = rng.choice([1.0, 4.0], 500)
    c = rng.uniform(0.5, 2.0, 500)

    def mean_freshness(f: np.ndarray) -> float:
        return float(np.dot(w, time_averaged_freshness(lam, f)) / w.sum())

    opt = budget_for_freshness(lam, 0.9, weight=w, cost=c)
    uni = budget_for_freshness(lam, 0.9, weight=w, cost=c, allocation="uniform")
    for b, visits in (
        (opt, lambda b: optimal_allocation(lam, b, weight=w, cost=c).visits_per_day),
        (uni, lambda b: np.full(500, b / c.sum())),
    ):
        assert mean_freshness(visits(b)) >= 0.9
        assert mean_freshness(visits(b * (1 - 1e-4))) < 0.9
    # the optimum needs markedly less than one interval for every page
    assert opt < 0.8 * uni
    # one page: the frequency at which F(λ, f) = target
    f = budget_for_freshness([2.0], 0.8)
    assert time_averaged_freshness(2.0, f) == pytest.approx(0.8, abs=1e-6)


def test_budget_for_freshness_with_static_pages_and_bad_input() -> None:
    # three of four pages never change: 75 % freshness costs nothing
    assert budget_for_freshness([0.0, 0.0, 0.0, 1.0], 0.75) == 0.0
    assert budget_for_freshness([0.0, 0.0, 0.0, 1.0], 0.8) > 0.0
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="target"):
            budget_for_freshness([1.0], bad)
    with pytest.raises(ValueError, match="one entry per page"):
        budget_for_freshness([1.0, 2.0], 0.5, cost=[1.0])
    with pytest.raises(ValueError, match="costs > 0"):
        budget_for_freshness([1.0], 0.5, cost=[0.0])
    for rate in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="rates must be finite"):
            budget_for_freshness([rate, 1.0], 0.5)
    with pytest.raises(ValueError, match="positive weight"):
        budget_for_freshness([1.0], 0.5, weight=[0.0])
    with pytest.raises(ValueError, match="allocation"):
        budget_for_freshness([1.0], 0.5, allocation="greedy")  # type: ignore[arg-type]


def test_budget_for_freshness_on_many_pages_lands_on_the_target() -> None:
    # above 50,000 pages the search runs on a histogram first, then on every page
    rng = np.random.default_rng(5)
    n = 60_000
    lam = np.exp(rng.uniform(np.log(1e-3), np.log(5.0), n))
    lam[:6_000] = 0.0  # static pages: fresh for free
    w = rng.choice([1.0, 2.0, 8.0], n)
    c = rng.uniform(0.2, 3.0, n)
    for target in (0.5, 0.95):
        opt = budget_for_freshness(lam, target, weight=w, cost=c)
        f = optimal_allocation(lam, opt, weight=w, cost=c).visits_per_day
        assert np.dot(w, time_averaged_freshness(lam, f)) / w.sum() == pytest.approx(
            target, abs=1e-7
        )
        uni = budget_for_freshness(lam, target, weight=w, cost=c, allocation="uniform")
        got = np.dot(w, time_averaged_freshness(lam, np.full(n, uni / c.sum()))) / w.sum()
        assert got == pytest.approx(target, abs=1e-9)
        assert opt < uni


def _reaches(lam: list[float], target: float) -> None:
    budget = budget_for_freshness(lam, target)
    for b, ok in ((budget, True), (budget - 1e-4, False)):
        f = optimal_allocation(lam, b).visits_per_day
        got = allocation_value(lam, f) / len(lam)
        assert (got >= target - 1e-6) if ok else (got < target)
    f = optimal_allocation(lam, budget).visits_per_day
    assert allocation_value(lam, f) / len(lam) == pytest.approx(target, abs=1e-6)


@pytest.mark.parametrize(
    ("lam", "target"), [([1.0], 0.02), ([1.0], 0.01), ([0.1, 1, 10, 100], 0.2)]
)
def test_budget_for_freshness_across_the_cut_off(lam: list[float], target: float) -> None:
    # the least budget leaves a page on the cut-off (r beyond the table's 38)
    _reaches(lam, target)


@pytest.mark.parametrize("objective", ["events", "freshness"])
def test_many_page_allocation_is_monotone_in_the_budget(objective: str) -> None:
    rng = np.random.default_rng(0)
    n = 60_000
    lam = np.exp(rng.uniform(-12, 8, n))
    c = np.exp(rng.uniform(-5, 5, n))
    w = np.exp(rng.uniform(-3, 3, n))
    prev = np.zeros(n)
    for budget in np.geomspace(0.01, 1e5, 30):
        a = optimal_allocation(lam, budget, weight=w, cost=c, objective=objective)  # type: ignore[arg-type]
        f = a.visits_per_day
        assert float(np.dot(c, f)) == pytest.approx(budget, rel=1e-9)
        assert np.all(f >= prev * (1 - 1e-9))
        visited = f > 0
        scale = lam if objective == "freshness" else np.ones(n)
        lhs = w[visited] * marginal(lam[visited] / f[visited]) / scale[visited]
        assert np.allclose(lhs, a.multiplier * c[visited], rtol=1e-4)
        prev = f


@pytest.mark.parametrize("budget", [1e-6, 0.05, 3.0, 400.0])
def test_many_pages_sharing_a_few_rates_split_as_a_few_pages_would(budget: float) -> None:
    # a fresh crawl: most pages carry their group's prior rate, so the many-page
    # solver meets long runs of one key; each copy must get what one page gets
    lam = np.array([0.02, 0.5, 2.0, 40.0])
    copies = 20_000
    one = optimal_allocation(lam, budget).visits_per_day
    many = optimal_allocation(np.repeat(lam, copies), budget * copies).visits_per_day
    rows = many.reshape(lam.size, copies)
    assert np.all(rows == rows[:, :1])  # identical pages, identical visits
    # the many-page solver bins its keys 0.05 % wide: its μ is that close
    assert rows[:, 0] == pytest.approx(one, rel=1e-4)


def test_bad_input_is_refused_with_a_value_error() -> None:
    bad_calls = [
        lambda: optimal_allocation([math.nan, 1.0], 1.0),
        lambda: optimal_allocation([-1.0, 1.0], 1.0),
        lambda: optimal_allocation([math.inf, 1.0], 1.0),
        lambda: optimal_allocation([1.0, 1.0], 1.0, weight=[math.nan, 1.0]),
        lambda: optimal_allocation([1.0, 1.0], 1.0, weight=[-1.0, 1.0]),
        lambda: optimal_allocation([1.0, 1.0], 1.0, weight=[math.inf, 1.0]),
        lambda: optimal_allocation([1.0, 1.0], 1.0, cost=[math.nan, 1.0]),
        lambda: optimal_allocation([1.0, 1.0], 1.0, cost=[math.inf, 1.0]),
        lambda: optimal_allocation([1.0, 1.0], math.nan),
        lambda: optimal_allocation([1.0, 1.0], math.inf),
        lambda: optimal_allocation([[1.0, 1.0]], 1.0),
        lambda: optimal_allocation([1.0, 1.0], 1.0, cost=[1.0, 1.0, 1.0]),
        lambda: budget_for_freshness([1.0, 1.0], 0.5, weight=[math.nan, 1.0]),
        lambda: budget_for_freshness([1.0, 1.0], 0.5, weight=[math.inf, 1.0]),
        lambda: budget_for_freshness([1.0, 1.0], 0.5, cost=[math.inf, 1.0]),
        lambda: allocation_value([1.0], [1.0], objective="x"),  # type: ignore[arg-type]
        lambda: freshness_gain(1.0, -1.0, 1.0),
        lambda: captured_change_rate(-1.0, 1.0),
        lambda: time_averaged_freshness(-1.0, 1.0),
    ]
    for call in bad_calls:
        with pytest.raises(ValueError):
            call()
    # a scalar rate is one page, as before
    assert optimal_allocation(1.0, 1.0).visits_per_day.tolist() == [1.0]


def test_formula_edges() -> None:
    assert math.isnan(freshness_gain(math.nan, 1.0, 1.0))
    assert math.isnan(time_averaged_freshness(math.nan, 1.0))
    assert math.isnan(captured_change_rate(math.nan, 1.0))
    assert math.isnan(float(inverse_marginal(math.nan)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert freshness_gain(0.0, 1.0, math.inf) == 0.0
        assert captured_change_rate(1.0, math.inf) == 1.0
        assert time_averaged_freshness(1.0, math.inf) == 1.0


def test_freshness_gain_broadcasts_its_inputs() -> None:
    got = freshness_gain(np.array([1.0]), np.array([1.0]), np.array([1.0, 2.0]))
    want = [freshness_gain(1.0, 1.0, 1.0), freshness_gain(1.0, 1.0, 2.0)]
    assert np.allclose(got, want)


def test_reveal_read_rate_counts_from_the_last_read_within_bounds() -> None:
    from recrawl.plan.freshness import reveal_read_rate, reveal_weight

    rates, values = np.r_[np.ones(30), 3.0 * np.ones(10)], np.ones(40)
    cycle = 1 / 24
    got = [reveal_read_rate(rates, values, d, cycle) for d in (0.0, 0.01, 0.1, 0.3, 0.8, 5.0)]
    # a cycle at least, one mean item interval (1 / 1.5 days) at most
    assert got[0] == got[1] == 24.0 and got[2] == pytest.approx(10.0)
    assert got[3] == pytest.approx(1 / 0.3) and got[4] == got[5] == pytest.approx(1.5)
    # the value it gives grows with the time since the last read
    worth = [reveal_weight(rates, values, 60.0, f) for f in got]
    assert all(a <= b for a, b in itertools.pairwise(worth)), worth
    # nothing moves: only the cycle bounds it
    assert reveal_read_rate(np.zeros(3), np.ones(3), 10.0, cycle) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        reveal_read_rate(rates, values, -1.0, cycle)
