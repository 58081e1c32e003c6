"""The exact censored-Poisson estimate and its binned fixed-size page state."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.estimate.censored import (
    BINS,
    CensoredEvidence,
    censored_posterior,
    censored_posterior_scalar,
    estimate_censored,
    fit_censored_priors,
    length_bin,
    update_censored,
)
from recrawl.estimate.rates import GroupPriors, estimate_rates, update_evidence_arrays

intervals = st.lists(
    st.tuples(st.floats(0.01, 60.0, allow_nan=False), st.booleans()), min_size=0, max_size=40
)
priors = st.tuples(st.floats(0.1, 20.0), st.floats(0.05, 50.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(intervals, min_size=1, max_size=6), priors)
def test_the_vectorised_estimate_matches_the_scalar_reference(
    pages: list[list[tuple[float, bool]]], prior: tuple[float, float]
) -> None:
    alpha, beta = prior
    page = [i for i, ivs in enumerate(pages) for _ in ivs]
    t = [x for ivs in pages for x, _ in ivs]
    ch = [c for ivs in pages for _, c in ivs]
    rate, sd = censored_posterior(page, t, ch, len(pages), alpha, beta)
    for i, ivs in enumerate(pages):
        want, want_sd = censored_posterior_scalar(
            [x for x, _ in ivs], [c for _, c in ivs], alpha, beta
        )
        assert rate[i] == pytest.approx(want, rel=1e-7)
        assert sd[i] == pytest.approx(want_sd, rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from([0.05, 0.3, 1.0, 3.0, 10.0, 40.0]), min_size=1, max_size=40),
    st.lists(st.booleans(), min_size=40, max_size=40),
    priors,
)
def test_the_binned_state_is_exact_when_a_bins_intervals_are_equal(
    lengths: list[float], changed: list[bool], prior: tuple[float, float]
) -> None:
    ch = changed[: len(lengths)]
    ev = CensoredEvidence.zeros(1)
    for t, c in zip(lengths, ch, strict=True):
        ev = update_censored(ev, [0], [t], [c], half_life_days=math.inf)
    p = GroupPriors(np.array([prior[0]]), np.array([prior[1]]))
    rate, sd = estimate_censored(ev, priors=p)
    want, want_sd = censored_posterior_scalar(lengths, ch, *prior)
    assert rate[0] == pytest.approx(want, rel=1e-5)  # float32 state
    assert sd[0] == pytest.approx(want_sd, rel=1e-4)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 60.0, allow_nan=False), st.booleans()), min_size=1, max_size=30
    )
)
def test_collapsing_the_bins_gives_back_todays_four_numbers(
    visits: list[tuple[float, bool]],
) -> None:
    ev = CensoredEvidence.zeros(1)
    old = [np.zeros(1) for _ in range(4)]
    for t, c in visits:
        ev = update_censored(ev, [0], [t], [c], half_life_days=180.0)
        update_evidence_arrays(*old, [0], [t], [c], half_life_days=180.0)
    for got, want in zip(ev.collapsed(), old, strict=True):
        assert got[0] == pytest.approx(want[0], rel=1e-4, abs=1e-5)


def test_a_page_changing_daily_revisited_after_1_or_30_days_is_estimated_near_1() -> None:
    # Issue 29's second row: today's estimator reads about 0.24 a day.
    rng = np.random.default_rng(3)
    pages, revisits = 400, 60
    t = rng.choice([1.0, 30.0], size=(revisits, pages))
    changed = rng.random((revisits, pages)) < -np.expm1(-1.0 * t)
    ev = CensoredEvidence.zeros(pages)
    old = [np.zeros(pages) for _ in range(4)]
    every = np.arange(pages)
    for k in range(revisits):
        ev = update_censored(ev, every, t[k], changed[k])
        update_evidence_arrays(*old, every, t[k], changed[k])
    new, sd = estimate_censored(ev)
    today, _ = estimate_rates(*old)
    assert np.median(today) < 0.4
    assert np.median(new) == pytest.approx(1.0, rel=0.1)
    assert np.all(sd > 0)


def test_regular_revisits_read_as_today() -> None:
    rng = np.random.default_rng(4)
    pages = 300
    ev = CensoredEvidence.zeros(pages)
    old = [np.zeros(pages) for _ in range(4)]
    every = np.arange(pages)
    for _ in range(60):
        ch = rng.random(pages) < -np.expm1(-0.2 * 7.0)
        ev = update_censored(ev, every, 7.0, ch)
        update_evidence_arrays(*old, every, np.full(pages, 7.0), ch)
    new, _ = estimate_censored(ev)
    today, _ = estimate_rates(*old)
    assert np.median(new) == pytest.approx(np.median(today), rel=0.02)


def test_priors_shrink_a_page_seen_once_toward_its_group() -> None:
    ev = CensoredEvidence.zeros(3)
    ev = update_censored(ev, [0, 1, 2], [1.0, 1.0, 1.0], [True, True, False])
    for _ in range(40):
        ev = update_censored(ev, [0, 1], [1.0, 1.0], [True, False])
    p = fit_censored_priors(ev, [0, 0, 1], 2)
    rate, _ = estimate_censored(ev, [0, 0, 1], priors=p)
    assert np.all(np.isfinite(rate)) and np.all(rate > 0)
    assert rate[0] > rate[1]  # changed at every daily visit against almost never


def test_state_size_and_bins() -> None:
    assert CensoredEvidence.zeros(10).bytes_per_page == 56
    assert BINS == 6
    assert length_bin([1 / 24, 0.25, 1.0, 3.0, 10.0, 90.0]).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        update_censored(CensoredEvidence.zeros(2), [0, 0], [1.0, 1.0], [True, True])
