"""The learning ceiling of ``benchmarks/learning_bound.py``, on problems small enough to check.

The closing figure of issue 3 (no policy that learns the rates can reach 0.97
of the known-rate optimum on the log-uniform generated suite at 0.02) rests on
these programmes, so their bookkeeping and the duality bound are tested here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning_bound.py"


@pytest.fixture(scope="module")
def lb() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_bound", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_bound"] = module
    spec.loader.exec_module(module)
    return module


def _problem(
    lb: ModuleType, unit_days: float = 24.0, intervals: tuple[int, ...] = (1, 2, 4)
) -> object:
    return lb.Problem(
        days=365.0,
        unit_days=unit_days,
        intervals=intervals,
        min_rate=1 / 365,
        max_rate=1.0,
        grid=16,
    )


def test_expected_visits_by_time_add_up_to_the_policys_visits(lb: ModuleType) -> None:
    p = _problem(lb)
    for mu in (2.0, 7.0, 20.0):
        (_, visits, _, _), (_, table) = p.bayes(mu)
        by_time = p.visits_by_time(table)
        assert by_time[0] == 0.0
        assert by_time.sum() == pytest.approx(visits, rel=1e-9)
        (_, k_visits, _, _), k_by_time = p.known_policy(mu)
        assert k_by_time.sum() == pytest.approx(k_visits, rel=1e-9)


def test_a_flat_price_per_unit_of_time_is_the_one_price(lb: ModuleType) -> None:
    p = _problem(lb)
    flat = np.full(p.horizon + 1, 7.0)
    assert p.bayes(flat)[0] == pytest.approx(p.bayes(7.0)[0])
    assert p.known(flat) == pytest.approx(p.known(7.0))


def test_the_paced_ceiling_is_exact_where_the_budget_never_binds(lb: ModuleType) -> None:
    """A budget of one visit per unit of time, at a price every page's visit
    is worth: every policy's best is to visit every unit, and the bound must
    come to that policy's fresh days, neither more (a visit counted at the
    wrong time, or the free first fetch charged) nor less."""
    p = _problem(lb, intervals=(1,))
    every_unit = float(p.prior @ (p.fresh[0] * p.horizon))
    for learning in (True, False):
        res = lb.paced(p, 1.0 / p.unit, 0.5, learning=learning, iterations=10)
        assert res["fresh_days"] == pytest.approx(every_unit, rel=1e-3)


def _fresh_days(p: object, visits: list[int]) -> float:
    """Expected fresh days, over the prior, of visiting at these units (after the
    free visit at 0), Poisson changes."""
    times = [0, *visits, p.horizon]
    spans = np.diff(np.asarray(times, dtype=np.float64)) * p.unit
    return float(p.prior @ (-np.expm1(-np.outer(p.rate, spans)) / p.rate[:, None]).sum(1))


def test_the_paced_ceiling_is_above_revisiting_every_page_in_turn(lb: ModuleType) -> None:
    """Half the pages revisited at units 1, 3, 5, …, half at 2, 4, 6, …: half a
    visit per page in every unit, as the paced budget allows. The ceiling
    bounds every such policy, so it must lie above it."""
    p = _problem(lb, intervals=(1, 2, 3, 4))
    odd = list(range(1, p.horizon, 2))
    even = list(range(2, p.horizon, 2))
    in_turn = 0.5 * (_fresh_days(p, odd) + _fresh_days(p, even))
    budget = 0.5 / p.unit  # visits per page per day
    for learning in (True, False):
        res = lb.paced(p, budget, 5.0, learning=learning, iterations=30)
        assert res["fresh_days"] >= in_turn


def test_pacing_lowers_the_learning_ceiling_of_a_fresh_crawl(lb: ModuleType) -> None:
    """Every page starts together, so the first revisits cannot all come early:
    the ceiling with the budget paced lies below the year-long relaxation's,
    and knowing the rates is still worth more than learning them."""
    p = _problem(lb, intervals=(1, 2, 3, 4))
    visits = 0.02 * p.horizon * p.unit
    year, _ = lb.matched(p.bayes, visits)
    res = lb.paced(p, 0.02, year["mu"], learning=True, iterations=40)
    known = lb.paced(p, 0.02, year["mu"], learning=False, iterations=40)
    assert res["fresh_days"] < 0.99 * year["fresh_days"]
    assert res["fresh_days"] < known["fresh_days"]
    never = float(p.prior @ p.stop_fresh(p.horizon))
    assert res["fresh_days"] > never


def test_a_prior_drawn_from_given_rates_spans_them_and_counts_each(lb: ModuleType) -> None:
    """``--prior real``: the grid runs from the least rate to the greatest, and
    each rate counts once at its nearest grid point."""
    rates = np.array([0.001, 0.001, 0.01, 0.1])
    p = lb.Problem(
        days=365.0,
        unit_days=24.0,
        intervals=(1, 2),
        min_rate=1.0,
        max_rate=2.0,
        grid=3,
        prior_rates=rates,
    )
    assert p.rate == pytest.approx([0.001, 0.01, 0.1])
    assert p.prior == pytest.approx([0.5, 0.25, 0.25])
