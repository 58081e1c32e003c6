"""Change-rate bias under irregular revisits: today's estimator, the binned censored one, the exact MLE.

Issue 29's table, reproduced: per row 2,000 pages with one true Poisson
change rate, each revisited 60 times, every interval drawn with equal
probability from the row's lengths (days); a revisit sees whether the page
changed since the previous one. Printed as JSON, per row, the median (and
the 10th and 90th percentiles) of:

``today``
    :func:`recrawl.estimate.rates.estimate_rates` on the four evidence
    numbers folded by :func:`~recrawl.estimate.rates.update_evidence_arrays`
    (every changed interval read at their mean length), the prior fitted
    over the row by :func:`~recrawl.estimate.rates.fit_group_priors`.
``binned``
    :func:`recrawl.estimate.censored.estimate_censored` on the
    :class:`~recrawl.estimate.censored.CensoredEvidence` folded by
    :func:`~recrawl.estimate.censored.update_censored` (six length bins),
    same half-life, the prior fitted over the row by
    :func:`~recrawl.estimate.censored.fit_censored_priors` (the same EM under
    the censored likelihood).
``wired``
    What the planner estimates (:func:`recrawl.plan.planner.reallocate`,
    default config) for pages whose revisits were folded as the replay and
    the store fold them (:func:`~recrawl.estimate.rates.fold_revisits` with
    the pages' length bins and change-point test; the planner reads the bins,
    :attr:`~recrawl.plan.planner.PlanPages.ev_bins`),
    read at each page's last revisit; ``wired_within_10pct`` is its median
    against the true rate.
``exact_posterior``
    :func:`~recrawl.estimate.censored.censored_posterior` over every interval
    with the same decay weights and the binned estimator's prior: what the
    binned one approximates; ``binning_error`` is the largest and the median
    relative difference between the two over the row's pages.
``exact_mle``
    The censored maximum-likelihood estimate over every interval, no prior
    and no decay (α = β = 1e-9): the issue's right-hand column.

Three more rows spread the intervals log-uniformly over a range
(:data:`LOG_UNIFORM_ROWS`), so lengths differ inside each bin: their
``binning_error`` is the approximation's.

``within_10pct`` says whether the binned median is within 10 % of the true
rate, and ``can_tell`` whether the row's revisits can tell the rate at all
(some interval no longer than 1/rate).

Run: ``.venv/bin/python benchmarks/rate_bias.py [--pages N] [--revisits N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from recrawl.estimate.censored import (
    CensoredEvidence,
    censored_posterior,
    estimate_censored,
    fit_censored_priors,
    update_censored,
)
from recrawl.estimate.rates import (
    DEFAULT_HALF_LIFE_DAYS,
    estimate_rates,
    fold_revisits,
    update_evidence_arrays,
)
from recrawl.plan.planner import PlanPages, reallocate
from recrawl.records.evidence import BIN_COLUMNS, EVIDENCE_COLUMNS

DAY = 86_400.0

ROWS: tuple[tuple[float, tuple[float, ...]], ...] = (
    (0.2, (1.0, 30.0)),
    (1.0, (1.0, 30.0)),
    (1.0, (0.25, 14.0)),
    (1.0, (1.0, 7.0)),
    (3.0, (1.0, 7.0)),
    # regular revisits: the new estimator must be no worse than today's
    (1.0, (1.0,)),
    (0.2, (7.0,)),
    (0.05, (3.0,)),
)

LOG_UNIFORM_ROWS: tuple[tuple[float, float, float], ...] = (
    (1.0, 0.1, 30.0),
    (0.3, 0.5, 20.0),
    (3.0, 0.05, 7.0),
)
"""Rates with intervals spread log-uniformly over ``[lo, hi]`` days: lengths
differ inside each bin, so these rows measure the binning's error."""


def _q(x: np.ndarray) -> dict[str, float]:
    lo, med, hi = np.percentile(x, [10, 50, 90])
    return {"median": round(float(med), 4), "p10": round(float(lo), 4), "p90": round(float(hi), 4)}


def wired_rates(t: np.ndarray, changed: np.ndarray, half_life_days: float) -> np.ndarray:
    """The planner's rates for pages revisited after ``t[k]`` days (``(revisits,
    pages)``), folded as the replay folds them, read at each one's last revisit."""
    revisits, pages = t.shape
    ev = [np.zeros(pages) for _ in range(4)]
    bins = np.zeros((pages, EVIDENCE_COLUMNS), dtype=np.float32)  # with the change-point test
    every = np.arange(pages)
    prev = np.zeros(pages)
    for k in range(revisits):
        at = prev + t[k] * DAY
        fold_revisits(*ev, every, prev, at, changed[k], half_life_days=half_life_days, bins=bins)
        prev = at
    now = float(prev.max())
    state = PlanPages.new(pages, now=now)
    state.never_fetched[:] = False
    state.ev_nc, state.ev_tc, state.ev_nu, state.ev_tu = ev
    state.ev_bins = np.ascontiguousarray(bins[:, :BIN_COLUMNS])
    model = reallocate(state, 0.1 * pages, now)
    return model.rate_per_day


def run_row(
    rate: float,
    lengths: tuple[float, ...],
    pages: int,
    revisits: int,
    rng: np.random.Generator,
    *,
    log_uniform: bool = False,
) -> dict[str, Any]:
    """One row of the table (see the module docstring); with ``log_uniform``
    the intervals are spread log-uniformly between the two lengths."""
    if log_uniform:
        lo, hi = np.log(lengths[0]), np.log(lengths[1])
        t = np.exp(rng.uniform(lo, hi, size=(revisits, pages)))
    else:
        t = rng.choice(np.asarray(lengths), size=(revisits, pages))
    changed = rng.random((revisits, pages)) < -np.expm1(-rate * t)
    hl = DEFAULT_HALF_LIFE_DAYS
    ev4 = [np.zeros(pages) for _ in range(4)]
    ev = CensoredEvidence.zeros(pages)
    every = np.arange(pages)
    t0 = time.perf_counter()
    for k in range(revisits):
        update_evidence_arrays(*ev4, every, t[k], changed[k], half_life_days=hl)
    today, _ = estimate_rates(*ev4)
    t1 = time.perf_counter()
    for k in range(revisits):
        ev = update_censored(ev, every, t[k], changed[k], half_life_days=hl)
    priors = fit_censored_priors(ev)
    binned, binned_sd = estimate_censored(ev, priors=priors)
    t2 = time.perf_counter()
    wired = wired_rates(t, changed, hl)
    t3 = time.perf_counter()
    # The same intervals, flat, with their decay by age at the end.
    age = np.cumsum(t[::-1], axis=0)[::-1] - t  # days from each interval's end to the last visit
    page = np.broadcast_to(every, t.shape).ravel()
    exact_post, _ = censored_posterior(
        page, t.ravel(), changed.ravel(), pages, priors.alpha[0], priors.beta[0],
        weights=np.exp2(-age / hl).ravel(),
    )  # fmt: skip
    mle, _ = censored_posterior(page, t.ravel(), changed.ravel(), pages, 1e-9, 1e-9)
    rel = np.abs(binned / exact_post - 1.0)
    med = float(np.median(binned))
    return {
        "true_rate_per_day": rate,
        "intervals_days": ({"log_uniform": list(lengths)} if log_uniform else list(lengths)),
        "can_tell": bool(min(lengths) <= 1.0 / rate),
        "today": _q(today),
        "binned": _q(binned),
        "binned_sd_median": round(float(np.median(binned_sd)), 4),
        "exact_posterior": _q(exact_post),
        "exact_mle": _q(mle),
        "binning_error": {
            "max": round(float(rel.max()), 5),
            "median": round(float(np.median(rel)), 6),
        },
        "within_10pct": abs(med / rate - 1.0) <= 0.10,
        "wired": _q(wired),
        "wired_within_10pct": abs(float(np.median(wired)) / rate - 1.0) <= 0.10,
        "seconds": {
            "today": round(t1 - t0, 3),
            "binned": round(t2 - t1, 3),
            "wired": round(t3 - t2, 3),
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--revisits", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = [run_row(r, lengths, args.pages, args.revisits, rng) for r, lengths in ROWS]
    rows += [
        run_row(r, (lo, hi), args.pages, args.revisits, rng, log_uniform=True)
        for r, lo, hi in LOG_UNIFORM_ROWS
    ]
    report = {
        "pages_per_row": args.pages,
        "revisits": args.revisits,
        "seed": args.seed,
        "half_life_days": DEFAULT_HALF_LIFE_DAYS,
        "bytes_per_page": {"today": 4 * 8, "binned": CensoredEvidence.zeros(1).bytes_per_page},
        "rows": rows,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
