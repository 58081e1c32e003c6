"""Change-rate estimation: censored MLE, empirical-Bayes shrinkage, decay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.estimate.rates import (
    RateResolution,
    estimate_rates,
    evidence_weight,
    fit_group_priors,
    rate_resolution,
    raw_rates,
    update_evidence,
    update_evidence_arrays,
)


def simulate_revisits(
    rates: np.ndarray,
    visits: np.ndarray,
    rng: np.random.Generator,
    *,
    mean_interval_days: float = 7.0,
    half_life_days: float = math.inf,
    jitter: float = 0.5,
) -> tuple[np.ndarray, ...]:
    """Evidence of pages with known rates, revisited at irregular intervals.

    Intervals are uniform in ``mean × [1 − jitter, 1 + jitter]``.
    """
    n = rates.size
    ev = [np.zeros(n) for _ in range(4)]
    for k in range(int(visits.max())):
        idx = np.flatnonzero(visits > k)
        t = mean_interval_days * rng.uniform(1 - jitter, 1 + jitter, idx.size)
        changed = rng.random(idx.size) < -np.expm1(-rates[idx] * t)
        update_evidence_arrays(*ev, idx, t, changed, half_life_days=half_life_days)
    return tuple(ev)


def log_error(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return np.abs(np.log(np.maximum(estimate, 1e-6) / truth))


@settings(max_examples=50, deadline=None)
@given(
    steps=st.lists(st.tuples(st.floats(0.01, 400.0), st.booleans()), min_size=1, max_size=20),
    half_life=st.sampled_from([30.0, 180.0, math.inf]),
)
def test_scalar_and_vectorised_updates_agree(
    steps: list[tuple[float, bool]], half_life: float
) -> None:
    scalar = (0.0, 0.0, 0.0, 0.0)
    arrays = [np.zeros(3) for _ in range(4)]
    for interval, changed in steps:
        scalar = update_evidence(*scalar, interval, changed, half_life_days=half_life)
        update_evidence_arrays(*arrays, [1], [interval], [changed], half_life_days=half_life)
    assert [a[1] for a in arrays] == pytest.approx(list(scalar))
    assert all(a[0] == 0.0 and a[2] == 0.0 for a in arrays)  # other pages untouched


def test_decay_halves_old_evidence_after_one_half_life() -> None:
    ev = update_evidence(0.0, 0.0, 0.0, 0.0, 10.0, True, half_life_days=100.0)
    ev = update_evidence(*ev, 100.0, False, half_life_days=100.0)
    assert ev == pytest.approx((0.5, 5.0, 1.0, 100.0))
    with pytest.raises(ValueError):
        update_evidence(*ev, 0.0, False)


def test_censored_estimate_is_not_biased_low_for_fast_pages() -> None:
    # daily visits to pages that change about three times a day
    rng = np.random.default_rng(0)
    truth = np.full(2000, 3.0)
    ev = simulate_revisits(truth, np.full(2000, 200), rng, mean_interval_days=0.5)
    naive = ev[0] / (ev[1] + ev[3])  # changes / observed time
    rate, _ = estimate_rates(*ev)
    assert np.median(naive) < 0.75 * 3.0  # the naive estimate is badly low
    assert np.median(rate) == pytest.approx(3.0, rel=0.1)


def test_closed_form_is_the_likelihood_maximum_for_regular_intervals() -> None:
    # n intervals of length I, X of them changed: MLE = −ln(1 − X/n) / I
    n, x, interval = 40.0, 13.0, 2.0
    nc, tc, nu, tu = x, x * interval, n - x, (n - x) * interval
    closed = math.log(1 + tc / tu) * nc / tc
    assert closed == pytest.approx(-math.log(1 - x / n) / interval)
    grid = np.linspace(0.01, 1.0, 100_000)
    loglik = nc * np.log1p(-np.exp(-grid * interval)) - grid * tu
    assert closed == pytest.approx(grid[np.argmax(loglik)], abs=1e-4)
    # and the estimator lands on it when the evidence dwarfs the prior
    rate, _ = estimate_rates([nc * 1000], [tc * 1000], [nu * 1000], [tu * 1000], priors=None)
    assert rate[0] == pytest.approx(closed, rel=1e-3)


def test_error_against_known_rates_and_shrinkage_wins_for_few_revisits() -> None:
    rng = np.random.default_rng(7)
    n_groups, per_group = 40, 100
    groups = np.repeat(np.arange(n_groups), per_group)
    # each group has its own typical rate; pages scatter around it
    group_rate = np.exp(rng.uniform(math.log(1 / 200), math.log(2.0), n_groups))
    truth = group_rate[groups] * np.exp(rng.normal(0.0, 0.5, groups.size))
    visits = rng.integers(1, 41, groups.size)
    ev = simulate_revisits(truth, visits, rng)
    rate, sd = estimate_rates(*ev, groups)
    raw = raw_rates(*ev)

    few = visits <= 3
    many = visits >= 30
    err_shrunk_few = float(np.median(log_error(rate[few], truth[few])))
    err_raw_few = float(np.median(log_error(raw[few], truth[few])))
    err_many = float(np.median(log_error(rate[many], truth[many])))
    # a sensible estimate from three revisits, a much better one from thirty
    assert err_shrunk_few < 0.6 * err_raw_few
    assert err_shrunk_few < 1.0  # within a factor e of the truth for half of them
    assert err_many < 0.35
    # many revisits: the page's own evidence dominates (close to the raw estimate)
    assert float(np.median(np.abs(np.log(rate[many] / np.maximum(raw[many], 1e-9))))) < 0.15
    # the uncertainty means something: about two-thirds within one sd
    inside = np.abs(rate - truth) <= sd
    assert 0.45 < float(inside[many].mean()) < 0.9
    assert float(np.median(sd[few] / rate[few])) > float(np.median(sd[many] / rate[many]))


def test_no_evidence_gives_the_group_mean() -> None:
    rng = np.random.default_rng(1)
    truth = np.r_[np.full(300, 0.02), np.full(300, 0.3)]
    groups = np.r_[np.zeros(300, int), np.ones(300, int)]
    ev = simulate_revisits(truth, np.full(600, 30), rng)
    ev = tuple(np.r_[e, 0.0, 0.0] for e in ev)  # two new pages, one per group
    rate, _ = estimate_rates(*ev, np.r_[groups, 0, 1])
    assert rate[-2] == pytest.approx(0.02, rel=0.3)
    assert rate[-1] == pytest.approx(0.3, rel=0.3)


def test_time_decay_relearns_a_page_that_changes_behaviour() -> None:
    rng = np.random.default_rng(3)
    n = 500
    rate_before, rate_after = 0.02, 0.5
    results = {}
    for half_life in (60.0, math.inf):
        ev = [np.zeros(n) for _ in range(4)]
        # four half-lives after the change, the new behaviour has been learned
        for rate, days in ((rate_before, 720.0), (rate_after, 240.0)):
            for _ in range(int(days / 3)):
                t = np.full(n, 3.0)
                changed = rng.random(n) < -np.expm1(-rate * t)
                update_evidence_arrays(*ev, np.arange(n), t, changed, half_life_days=half_life)
        results[half_life] = float(np.median(estimate_rates(*ev)[0]))
    assert results[60.0] == pytest.approx(rate_after, rel=0.25)
    assert results[math.inf] < 0.5 * rate_after  # without decay the past dominates


def test_elapsed_time_weakens_old_evidence() -> None:
    # a page believed static drifts back toward its group as it goes unvisited
    nc = np.array([5.0, 0.0])
    tc = np.array([50.0, 0.0])
    nu = np.array([45.0, 30.0])
    tu = np.array([450.0, 900.0])
    priors = fit_group_priors(nc, tc, nu, tu)
    fresh, _ = estimate_rates(nc, tc, nu, tu, priors=priors)
    stale, _ = estimate_rates(
        nc, tc, nu, tu, priors=priors, elapsed_days=[0.0, 720.0], half_life_days=180.0
    )
    assert stale[0] == fresh[0]
    assert stale[1] > fresh[1]


@settings(max_examples=60, deadline=None)
@given(
    elapsed=st.floats(0.0, 2000.0),
    later=st.floats(0.0, 500.0),
    half_life=st.sampled_from([30.0, 180.0, math.inf]),
    hazard=st.sampled_from([0.0, 1 / 730, 1 / 60]),
)
def test_evidence_weight_is_the_decay_times_the_chance_no_jump_happened(
    elapsed: float, later: float, half_life: float, hazard: float
) -> None:
    w, w_later = evidence_weight(
        [elapsed, elapsed + later], half_life_days=half_life, hazard_per_day=hazard
    )
    no_jump = math.exp(-hazard * elapsed)
    decay = 2.0 ** (-elapsed / half_life)
    assert w == pytest.approx(decay * no_jump, rel=1e-12, abs=1e-300)
    assert 0.0 <= w_later <= w <= 1.0


@settings(max_examples=60, deadline=None)
@given(
    nc=st.floats(0.0, 40.0),
    interval=st.floats(0.1, 60.0),
    nu=st.floats(0.0, 40.0),
    elapsed=st.floats(0.0, 1500.0),
    hazard=st.sampled_from([1 / 730, 1 / 90]),
)
def test_hazard_discounts_the_evidence_and_leans_toward_the_group(
    nc: float, interval: float, nu: float, elapsed: float, hazard: float
) -> None:
    # one page under its group's prior: with the hazard, its estimate is the
    # one of its evidence discounted by e^(−h t) (and the half-life), and it lies
    # between the estimate without the hazard and the group's mean α/β
    ev = [np.array([nc, 3.0]), np.array([nc * interval, 20.0]),
          np.array([nu, 10.0]), np.array([nu * interval, 100.0])]  # fmt: skip
    priors = fit_group_priors(*ev)
    group_mean = float(priors.alpha[0] / priors.beta[0])
    aged, _ = estimate_rates(*ev, priors=priors, elapsed_days=[elapsed, 0.0], hazard_per_day=hazard)
    w = float(evidence_weight([elapsed], hazard_per_day=hazard)[0])
    discounted, _ = estimate_rates(*(np.array([a[0] * w, a[1]]) for a in ev), priors=priors)
    plain, _ = estimate_rates(*ev, priors=priors, elapsed_days=[elapsed, 0.0])
    assert aged[0] == pytest.approx(discounted[0], rel=1e-9)
    lo, hi = sorted((plain[0], group_mean))
    assert lo * (1 - 1e-9) <= aged[0] <= hi * (1 + 1e-9)


def test_hazard_is_refused_when_negative_or_infinite() -> None:
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="hazard_per_day"):
            evidence_weight([1.0], hazard_per_day=bad)
        with pytest.raises(ValueError, match="hazard_per_day"):
            estimate_rates([1.0], [1.0], [1.0], [1.0], hazard_per_day=bad)


def test_priors_are_finite_for_degenerate_groups() -> None:
    pri = fit_group_priors(
        [0.0, 0.0, 3.0], [0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [20.0, 0.0, 0.0], [0, 1, 2]
    )
    assert np.all(np.isfinite(pri.alpha)) and np.all(pri.alpha > 0)
    assert np.all(np.isfinite(pri.beta)) and np.all(pri.beta > 0)
    rate, sd = estimate_rates(
        [0.0, 0.0, 3.0], [0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [20.0, 0.0, 0.0], [0, 1, 2]
    )
    assert np.all(np.isfinite(rate)) and np.all(rate > 0) and np.all(sd > 0)


def test_prior_is_not_biased_low_by_pages_faster_than_their_visits() -> None:
    # rates from one a year to one a day, visited every ~50 days: the fast
    # pages change in every interval, so their own estimates say little
    rng = np.random.default_rng(5)
    truth = np.exp(rng.uniform(math.log(1 / 365), 0.0, 3000))
    ev = simulate_revisits(truth, np.full(3000, 7), rng, mean_interval_days=50.0)
    moments = fit_group_priors(*ev, iterations=0)
    fitted = fit_group_priors(*ev)
    assert float(fitted.mean_rate[0]) > 1.3 * float(moments.mean_rate[0])
    errors = {}
    for name, pri in (("moments", moments), ("fitted", fitted)):
        rate, _ = estimate_rates(*ev, priors=pri)
        errors[name] = float(np.median(log_error(rate, truth)))
    assert errors["fitted"] < 0.85 * errors["moments"]


def test_prior_fit_on_a_sample_agrees_with_the_full_fit() -> None:
    rng = np.random.default_rng(11)
    groups = np.r_[np.zeros(40, int), np.ones(20_000, int), np.full(3000, 2)]
    truth = np.r_[np.full(40, 0.5), np.full(20_000, 0.02), np.full(3000, 0.1)]
    truth *= np.exp(rng.normal(0.0, 0.7, truth.size))
    ev = simulate_revisits(truth, rng.integers(2, 20, truth.size), rng)
    full = fit_group_priors(*ev, groups, sample_pages=10**9)
    sampled = fit_group_priors(*ev, groups, sample_pages=2000)
    assert sampled.mean_rate == pytest.approx(full.mean_rate, rel=0.15)
    assert sampled.alpha == pytest.approx(full.alpha, rel=0.3)
    # the small group keeps every page and its own, much faster, prior
    assert float(sampled.mean_rate[0]) > 5 * float(sampled.mean_rate[1])


def test_prior_fit_with_more_groups_than_the_sample() -> None:
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(3000), 3)
    fast = groups % 2 == 0
    truth = np.where(fast, 0.3, 0.01)
    ev = simulate_revisits(truth, np.full(truth.size, 10), rng)
    pri = fit_group_priors(*ev, groups, sample_pages=500)
    assert np.all(np.isfinite(pri.alpha)) and np.all(pri.beta > 0)
    # every group, sampled or not, leans toward its own pages
    assert float(np.median(pri.mean_rate[0::2])) > 1.5 * float(np.median(pri.mean_rate[1::2]))


def test_rate_resolution_says_when_revisits_are_too_far_apart_to_learn_rates() -> None:
    # 300 pages changing between once a year and once a day, revisited for a
    # year: every 50 days (what 0.02 fetches per page per day affords), then
    # every 5 days
    rng = np.random.default_rng(3)
    rate = np.exp(rng.uniform(np.log(1 / 365), 0.0, 300))

    def after_a_year(interval: float) -> RateResolution:
        ev = [np.zeros(300) for _ in range(4)]
        for _ in range(int(365 / interval)):
            changed = rng.random(300) < -np.expm1(-rate * interval)
            update_evidence_arrays(*ev, np.arange(300), np.full(300, interval), changed)
        return rate_resolution(*ev)

    sparse, dense = after_a_year(50.0), after_a_year(5.0)
    assert sparse.revisited == dense.revisited == 300
    # every page faster than about one change in 10 days (over a third of
    # them) changed at all 7 revisits; at 5 days apart, only the fastest did
    assert sparse.share > np.mean(rate > 0.1)
    assert dense.share < 0.5 * sparse.share
    assert sparse.median_interval_days == pytest.approx(50.0)
    assert dense.median_interval_days == pytest.approx(5.0)
    # operators are told so in words, and warned only in the first case
    assert "changed at every revisit (median 50 days apart)" in sparse.summary()
    assert "one change in 5 days" in dense.summary()
    assert sparse.advice() is not None and dense.advice() is None
    # a page that once found nothing new is not bounded any more, masked pages do not count
    one = rate_resolution([3.0, 3.0], [30.0, 30.0], [0.0, 1.0], [0.0, 10.0], mask=[True, False])
    assert (one.revisited, one.changed_every_revisit) == (1, 1)
    none = rate_resolution([3.0], [30.0], [1.0], [10.0])
    assert none.changed_every_revisit == 0 and np.isnan(none.median_interval_days)
    assert rate_resolution([], [], [], []).share == 0.0


@pytest.mark.parametrize(("half_life", "interval"), [(180.0, 300.0), (30.0, 50.0), (30.0, 100.0)])
def test_sparse_revisits_that_always_change_stay_bounded_below(
    half_life: float, interval: float
) -> None:
    # decay keeps the changed evidence of sparse revisits near 1 (1.46 at 300
    # days with a 180-day half-life): sparse is when the warning matters most
    ev = (0.0, 0.0, 0.0, 0.0)
    for _ in range(20):
        ev = update_evidence(*ev, interval, True, half_life_days=half_life)
    r = rate_resolution(*([x] for x in ev), half_life_days=half_life)
    assert (r.changed_every_revisit, r.median_interval_days) == (1, pytest.approx(interval))
    # one changed revisit alone is not a pattern
    once = update_evidence(0.0, 0.0, 0.0, 0.0, interval, True, half_life_days=half_life)
    single = rate_resolution(*([x] for x in once), half_life_days=half_life)
    assert single.revisited == 1 and single.changed_every_revisit == 0


def test_rate_resolution_speaks_in_days_or_hours() -> None:
    def summary(interval_days: float) -> str:
        n, t = 2.0, 2.0 * interval_days
        return rate_resolution([n], [t], [0.0], [0.0]).summary()

    assert summary(47.1).endswith("one change in 47 days")
    assert summary(1.0).endswith(
        "(median 1 day apart): their rates are only known to exceed about one change in 1 day"
    )
    assert summary(0.5).endswith("one change in 12 hours")


def _sound_evidence(n: int) -> list[np.ndarray]:
    return [np.full(n, 2.0), np.full(n, 5.0), np.full(n, 2.0), np.full(n, 5.0)]


@pytest.mark.parametrize("field", range(4))
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -3.0])
def test_one_page_of_bad_evidence_counts_as_none_and_spares_the_others(
    field: int, bad: float
) -> None:
    n = 1000
    clean = _sound_evidence(n)
    ev = _sound_evidence(n)
    ev[field][7] = bad
    groups = np.arange(n) % 2
    rate, sd = estimate_rates(*ev, groups)
    assert np.all(np.isfinite(rate)) and np.all(rate > 0) and np.all(np.isfinite(sd))
    # the bad page is a page without evidence, as in the prior fit
    none = _sound_evidence(n)
    for a in none:
        a[7] = 0.0
    want, want_sd = estimate_rates(*none, groups)
    assert np.array_equal(rate, want) and np.array_equal(sd, want_sd)
    pri = fit_group_priors(*ev, groups)
    ref = fit_group_priors(*none, groups)
    assert np.array_equal(pri.alpha, ref.alpha) and np.array_equal(pri.beta, ref.beta)
    # the other pages are barely moved (the bad page no longer informs the prior)
    base, _ = estimate_rates(*clean, groups)
    assert rate[np.arange(n) != 7] == pytest.approx(base[np.arange(n) != 7], rel=1e-3)
    # with the estimate's own decay too
    rate_el, _ = estimate_rates(*ev, groups, elapsed_days=np.full(n, 3.0))
    assert np.all(np.isfinite(rate_el))


def test_empty_evidence_gives_empty_estimates() -> None:
    rate, sd = estimate_rates([], [], [], [])
    assert rate.shape == sd.shape == (0,)
    empty = np.zeros(0)
    pri = fit_group_priors(empty, empty, empty, empty)
    assert pri.alpha.shape == (1,) and np.all(np.isfinite(pri.mean_rate))
    pri = fit_group_priors(empty, empty, empty, empty, np.zeros(0, dtype=np.int64), n_groups=3)
    assert pri.alpha.shape == (3,) and np.all(pri.mean_rate > 0)
    rate, sd = estimate_rates(empty, empty, empty, empty, np.zeros(0, dtype=np.int64))
    assert rate.shape == (0,)


@pytest.mark.parametrize("interval", [math.inf, -math.inf, math.nan, 0.0, -1.0])
def test_update_evidence_refuses_a_non_finite_or_non_positive_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="interval_days"):
        update_evidence(0.0, 0.0, 0.0, 0.0, interval, False)
    ev = [np.zeros(3) for _ in range(4)]
    with pytest.raises(ValueError, match="interval_days"):
        update_evidence_arrays(*ev, [0, 2], [1.0, interval], [True, False])
    assert not any(a.any() for a in ev)  # nothing applied


def test_update_evidence_arrays_refuses_what_it_would_corrupt() -> None:
    def fresh(dtype: type = np.float64) -> list[np.ndarray]:
        return [np.zeros(3, dtype=dtype) for _ in range(4)]

    ev = fresh()
    with pytest.raises(ValueError, match="repeats"):
        update_evidence_arrays(*ev, [0, 0], [1.0, 2.0], [True, True])
    with pytest.raises(TypeError, match="index"):
        update_evidence_arrays(*ev, [0.7], [1.0], [True])
    with pytest.raises(ValueError, match="index"):
        update_evidence_arrays(*ev, [3], [1.0], [True])
    with pytest.raises(ValueError, match="index"):
        update_evidence_arrays(*ev, [-1], [1.0], [True])
    with pytest.raises(ValueError, match="one entry per page revisited"):
        update_evidence_arrays(*ev, [0, 1], [1.0, 2.0, 3.0], [True, True])
    assert not any(a.any() for a in ev)
    for dtype in (np.int64, np.int32, bool):
        with pytest.raises(TypeError, match="floating-point"):
            update_evidence_arrays(*fresh(dtype), [0], [1.0], [True])
    with pytest.raises(TypeError, match="floating-point"):
        update_evidence_arrays([0.0, 0.0], *fresh()[:3], [0], [1.0], [True])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one shape"):
        update_evidence_arrays(np.zeros(4), *fresh()[:3], [0], [1.0], [True])


def test_update_evidence_arrays_takes_a_boolean_mask_as_its_pages() -> None:
    ev = [np.zeros(3) for _ in range(4)]
    update_evidence_arrays(*ev, [True, False, True], [2.0, 4.0], [True, False])
    by_index = [np.zeros(3) for _ in range(4)]
    update_evidence_arrays(*by_index, np.array([0, 2]), [2.0, 4.0], [True, False])
    for a, b in zip(ev, by_index, strict=True):
        assert np.array_equal(a, b)
    assert ev[0].tolist() == [1.0, 0.0, 0.0] and ev[3].tolist() == [0.0, 0.0, 4.0]
    with pytest.raises(ValueError, match="boolean index"):
        update_evidence_arrays(*ev, [True, False], [1.0], [True])
    # nothing to fold is fine, whatever the empty index's dtype
    update_evidence_arrays(*ev, [], [], [])
    update_evidence_arrays(*ev, [False, False, False], [], [])
    assert ev[0].tolist() == [1.0, 0.0, 0.0]
