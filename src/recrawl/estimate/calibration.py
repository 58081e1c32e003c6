"""Is the change model calibrated? Predicted against observed changes at revisits.

The planner spends the budget on what its rate estimates predict: a page of
estimated rate λ̂ revisited after ``t`` days has changed with probability
``p = 1 − e^(−λ̂t)``. If pages change more often than the model says (a site
started publishing daily, a field that should be ignored started changing on
every load), freshness falls while the plan looks right; if less often, money goes
to fetches that find nothing. This module checks the model against what the
revisits found: each revisit's predicted probability is computed from the
page's evidence *before* that revisit (exactly as the fold accumulated it),
so a page's own outcome never informs its prediction (the group priors,
fitted on the store's current evidence, hold a little of it: a small effect
across a group).

Selecting revisits by their predicted probability does not bias the check
(the outcome is compared with the prediction that chose it); what the plan
never revisits, it cannot check, which is what the planner's verification
share (a uniform random sample) is for.

Pure numpy, no I/O and no clock: :func:`revisit_predictions` turns fetch
histories into predictions, :func:`calibration_report` scores them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import NormalDist
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from recrawl.estimate.fold import page_rounds
from recrawl.estimate.rates import (
    DEFAULT_HALF_LIFE_DAYS,
    GroupPriors,
    estimate_rates,
    fit_group_priors,
    update_evidence_arrays,
)
from recrawl.records.evidence import BIN_COLUMNS, EVIDENCE_COLUMNS, bins_from_totals

__all__ = [
    "BIN_EDGES",
    "Calibration",
    "CalibrationBin",
    "GroupCalibration",
    "RevisitPredictions",
    "ValidatorCheck",
    "calibration_report",
    "revisit_predictions",
    "validator_checks",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]

_DAY: Final = 86400.0

BIN_EDGES: Final = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
"""Edges of the predicted-probability bins of :attr:`Calibration.bins`."""

Z_FLAG: Final = 3.0
"""A group (or the whole) is flagged when its observed changes are this many
standard deviations from the expected ones (and :data:`MIN_FLAG_REVISITS`)."""

RATIO_FLAG: Final = 0.2
"""… and observed ÷ expected is off by more than this share."""

MIN_FLAG_REVISITS: Final = 20
"""Revisits a group needs before it can be flagged."""

MIN_FLAG_EXPECTED: Final = 5.0
"""… and this many expected changes, and as many expected revisits without
one: with fewer, the normal approximation behind ``z`` flags chance."""

HISTORY_EDGES: Final = (0.0, 1.0, 3.0, 6.0)
"""Bins of :attr:`Calibration.by_history`: the (decayed) revisits of evidence
a page had before the revisit, 0–1, 1–3, 3–6 and 6 or more."""

# Codes of a content fetch for revisit_predictions.
UNCHANGED: Final = 0
"""A content fetch that found no change (``unchanged``, ``not_modified``)."""
CHANGED: Final = 1
"""A content fetch that found a change."""
FIRST: Final = 2
"""A page's first content (``new``): no revisit, it only starts the page's history."""


@dataclass(frozen=True, slots=True)
class RevisitPredictions:
    """One row per revisit inside the window, in page then time order.

    Attributes
    ----------
    page : ndarray of int
        Page index (as given to :func:`revisit_predictions`).
    at : ndarray of float
        Time of the revisit, unix seconds.
    interval_days : ndarray of float
        Days since the page's previous content fetch.
    predicted : ndarray of float
        Probability of a change over that interval, from the rate estimated
        on the evidence before the revisit.
    rate_per_day : ndarray of float
        That estimated rate.
    changed : ndarray of bool
        What the revisit found.
    row : ndarray of int
        Its position in the arrays given to :func:`revisit_predictions`.
    history : ndarray of float
        Revisits of evidence the page had before it (decayed, ``nc + nu``).
    end : tuple of five ndarrays
        Every page's state after all the fetches given: last content fetch
        (unix seconds, NaN for none) and evidence ``nc, tc, nu, tu`` (what the
        store's fold holds for it).
    """

    page: IntArray
    at: FloatArray
    interval_days: FloatArray
    predicted: FloatArray
    rate_per_day: FloatArray
    changed: BoolArray
    row: IntArray
    history: FloatArray
    end: tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]

    def __len__(self) -> int:
        return int(self.page.shape[0])


def revisit_predictions(
    page: ArrayLike,
    at: ArrayLike,
    kind: ArrayLike,
    group: ArrayLike,
    *,
    since: float = -math.inf,
    until: float = math.inf,
    start: tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike, ArrayLike] | None = None,
    priors: GroupPriors | None = None,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
    start_evidence: ArrayLike | None = None,
    hazard_per_day: float = 0.0,
) -> RevisitPredictions:
    """What the model predicted at each revisit, from the evidence before it.

    Parameters
    ----------
    page, at, kind : array_like
        The content fetches (those that reached the page; failed fetches tell
        nothing of changes and are left out by the caller): page index
        (0 … n_pages − 1), unix seconds, and :data:`CHANGED`,
        :data:`UNCHANGED` or :data:`FIRST`. Any order: they are sorted by
        page and time (stably).
    group : array_like of int
        Group code (site × page type) of every page, length ``n_pages``.
    since, until : float
        Only revisits at ``since ≤ at < until`` are predicted (the evidence
        still accumulates over all of them).
    start : tuple of five arrays, optional
        Each page's state before its first listed fetch (a pruned log's
        checkpoint): last content fetch (unix seconds, NaN for none) and the
        evidence ``nc, tc, nu, tu`` after it.
    priors : GroupPriors, optional
        Rate priors per group; fitted on the evidence at the end of the
        listed fetches if omitted (the planner's own, for a store's whole log).
    half_life_days : float
        Evidence half-life, days (the planner's).
    start_evidence : array_like, optional
        ``(n_pages, 22)`` each page's length bins and change-point test at
        ``start`` (:mod:`recrawl.records.evidence`); by default the bins of
        ``start``'s four numbers and the test at rest. They are folded as the
        store folds them, and the rates read from the bins, as the planner's.
    hazard_per_day : float
        Change-point hazard (the planner's ``change_hazard_per_day``): each
        page's evidence aged over the revisit interval by
        :func:`~recrawl.estimate.rates.evidence_weight`, as the planner ages
        it over the days since the page's last fetch. 0 (the default) ages it
        by the half-life only.

    Returns
    -------
    RevisitPredictions

    Examples
    --------
    One page fetched on days 0, 10 and 20, changed at both revisits:

    >>> r = revisit_predictions([0, 0, 0], [0.0, 864000.0, 1728000.0], [2, 1, 1], [0])
    >>> len(r), bool(r.changed.all()), bool(r.predicted[1] > r.predicted[0])
    (2, True, True)
    """
    pg = np.asarray(page, dtype=np.intp).reshape(-1)
    t = np.asarray(at, dtype=np.float64).reshape(-1)
    kd = np.asarray(kind, dtype=np.int64).reshape(-1)
    grp = np.asarray(group, dtype=np.intp).reshape(-1)
    if not (pg.shape == t.shape == kd.shape):
        raise ValueError("page, at and kind must have one value per fetch")
    n_pages = grp.shape[0]
    if pg.size and (pg.min() < 0 or pg.max() >= n_pages):
        raise ValueError("a page index is outside the group array")
    if not np.all(np.isfinite(t)):
        raise ValueError("fetch times must be finite")
    if not np.all((kd >= UNCHANGED) & (kd <= FIRST)):
        raise ValueError("kind must be 0 (unchanged), 1 (changed) or 2 (first)")
    if not (half_life_days > 0):
        raise ValueError("half_life_days must be > 0")
    order = np.lexsort((t, pg))
    pg, t, kd = pg[order], t[order], kd[order]

    last_ok = np.full(n_pages, np.nan)
    nc, tc, nu, tu = ev = [np.zeros(n_pages) for _ in range(4)]
    if start is not None:
        s_last, *s_ev = (np.asarray(a, dtype=np.float64).reshape(-1) for a in start)
        if any(a.shape != (n_pages,) for a in (s_last, *s_ev)):
            raise ValueError("start must hold one value per page in each of its five arrays")
        last_ok[:] = s_last
        for dst, src in zip(ev, s_ev, strict=True):
            dst[:] = np.nan_to_num(src, nan=0.0)
    # the pages' length bins and change-point test, folded as the store folds
    # them (a page starting from a checkpoint: its four numbers' bins, the test at rest)
    bins = np.zeros((n_pages, EVIDENCE_COLUMNS), dtype=np.float32)
    bins[:, :BIN_COLUMNS] = bins_from_totals(nc, tc)
    if start_evidence is not None:
        given = np.asarray(start_evidence, dtype=np.float32)
        if given.shape != bins.shape:
            raise ValueError(f"start_evidence must have shape {bins.shape}, got {given.shape}")
        bins[:] = given

    out_rows: list[IntArray] = []
    out_ev: list[FloatArray] = []
    out_bins: list[NDArray[np.float32]] = []
    for rows in page_rounds(pg):  # the r-th fetch of every page at once, as the fold does
        p = pg[rows]
        lo = last_ok[p]
        rev = (kd[rows] != FIRST) & ~np.isnan(lo)
        interval = np.where(rev, (t[rows] - np.where(rev, lo, 0.0)) / _DAY, 0.0)
        rev &= interval > 0  # two fetches at one instant carry no evidence (as the fold)
        if rev.any():
            rr, pr, iv = rows[rev], p[rev], interval[rev]
            keep = (t[rr] >= since) & (t[rr] < until)
            if keep.any():
                out_rows.append(rr[keep])
                out_ev.append(np.stack([e[pr[keep]] for e in ev] + [iv[keep]], axis=1))
                out_bins.append(bins[pr[keep], :BIN_COLUMNS])
            update_evidence_arrays(
                nc, tc, nu, tu, pr, iv, kd[rr] == CHANGED, half_life_days=half_life_days,
                bins=bins,
            )  # fmt: skip
        last_ok[p] = t[rows]

    if priors is None:
        priors = fit_group_priors(
            nc, tc, nu, tu, grp, mask=~np.isnan(last_ok), n_groups=int(grp.max(initial=-1)) + 1,
            bins=bins[:, :BIN_COLUMNS],
        )  # fmt: skip
    if out_rows:
        rows_all = np.concatenate(out_rows)
        e = np.concatenate(out_ev)
        o = np.argsort(rows_all, kind="stable")  # back to page, time order
        e_bins = np.concatenate(out_bins)[o]
        rows_all, e = rows_all[o], e[o]
    else:
        rows_all, e = np.zeros(0, dtype=np.intp), np.zeros((0, 5))
        e_bins = np.zeros((0, BIN_COLUMNS), dtype=np.float32)
    iv = e[:, 4]
    rate, _ = estimate_rates(
        e[:, 0], e[:, 1], e[:, 2], e[:, 3], grp[pg[rows_all]],
        priors=priors, elapsed_days=iv, half_life_days=half_life_days, bins=e_bins,
        hazard_per_day=hazard_per_day,
    )  # fmt: skip
    return RevisitPredictions(
        page=pg[rows_all],
        at=t[rows_all],
        interval_days=iv,
        predicted=-np.expm1(-rate * iv),
        rate_per_day=rate,
        changed=kd[rows_all] == CHANGED,
        row=order[rows_all],
        history=e[:, 0] + e[:, 2],
        end=(last_ok, nc, tc, nu, tu),
    )


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    """Revisits whose predicted probability lies in ``[lo, hi)`` (the last bin includes 1)."""

    lo: float
    hi: float
    revisits: int
    mean_predicted: float
    observed_share: float


@dataclass(frozen=True, slots=True)
class GroupCalibration:
    """Predicted against observed changes for one group of revisits."""

    name: str
    revisits: int
    expected_changes: float
    observed_changes: int
    z: float
    """``(observed − expected) / √Σp(1 − p)``, with a continuity correction of
    ½: beyond ±3, chance is an unlikely excuse."""
    threshold: float = Z_FLAG
    """The ``|z|`` from which :attr:`flagged` holds (higher when many groups
    are tested at once, so that one in hundreds is not flagged by chance)."""

    @property
    def ratio(self) -> float:
        """Observed ÷ expected changes (NaN when none were expected)."""
        return (
            self.observed_changes / self.expected_changes if self.expected_changes > 0 else math.nan
        )

    @property
    def enough(self) -> bool:
        """Whether there are enough revisits to judge: :data:`MIN_FLAG_REVISITS`,
        and :data:`MIN_FLAG_EXPECTED` expected changes and non-changes."""
        e = self.expected_changes
        return self.revisits >= MIN_FLAG_REVISITS and min(e, self.revisits - e) >= MIN_FLAG_EXPECTED

    @property
    def flagged(self) -> bool:
        """Whether the model is off here: :attr:`enough` revisits, ``|z|`` at
        least :attr:`threshold` and the ratio off by more than 20 %."""
        return (
            self.enough
            and abs(self.z) >= self.threshold
            and not (abs(self.ratio - 1.0) <= RATIO_FLAG)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "revisits": self.revisits,
            "expected_changes": round(self.expected_changes, 3),
            "observed_changes": self.observed_changes,
            "ratio": None if math.isnan(self.ratio) else round(self.ratio, 4),
            "z": None if math.isinf(self.z) else round(self.z, 3),
            "flagged": self.flagged,
        }


@dataclass(frozen=True, slots=True)
class Calibration:
    """How the change model's predictions at revisits compare with what they found.

    Attributes
    ----------
    overall : GroupCalibration
        All revisits.
    brier : float
        Mean of ``(p − changed)²`` (NaN without revisits); lower is better.
    brier_reference : float
        The same for a model that predicts the observed share of changes for
        every revisit: knowing nothing of pages or intervals.
    bins : list of CalibrationBin
        By predicted probability (:data:`BIN_EDGES`); a calibrated model has
        ``observed_share`` close to ``mean_predicted`` in every well-filled bin.
    groups : list of GroupCalibration
        Per group (site, or site and page type), most surprising first.
    validators : list of ValidatorCheck
        Per group with conditional revisits (:func:`validator_checks`).
    by_history : list of GroupCalibration
        By how much evidence the page had before the revisit
        (:data:`HISTORY_EDGES`): a model that is right on average can still
        overshoot on pages it barely knows.
    since, until : float
        The window checked, unix seconds (NaN when not given).
    validators_off : list of str
        The sites whose requests already go without validators.
    by : str
        What the groups are: ``site``, or ``group`` (site and page type).
    """

    overall: GroupCalibration
    brier: float
    brier_reference: float
    bins: list[CalibrationBin] = field(default_factory=list)
    groups: list[GroupCalibration] = field(default_factory=list)
    validators: list[ValidatorCheck] = field(default_factory=list)
    by_history: list[GroupCalibration] = field(default_factory=list)
    since: float = math.nan
    until: float = math.nan
    validators_off: list[str] = field(default_factory=list)
    by: str = "site"

    @property
    def hiding_changes(self) -> list[str]:
        """The groups whose 304s hide changes and whose validators are still
        on: send them none."""
        off = set(self.validators_off)
        return [v.name for v in self.validators if v.hides_changes and v.name not in off]

    @property
    def skill(self) -> float:
        """``1 − brier / brier_reference``: 0 is no better than the base rate,
        1 is perfect foresight (NaN without a reference)."""
        if not self.brier_reference > 0:
            return math.nan
        return 1.0 - self.brier / self.brier_reference

    def verdict(self) -> str:
        """One sentence for operators (no final full stop)."""
        text = self._model_verdict()
        hiding = self.hiding_changes
        if hiding:
            text += (
                f"; 304s (not modified) from {', '.join(hiding[:3])}"
                f"{' and more' if len(hiding) > 3 else ''} hide changes: send them no validators"
            )
        return text

    def _model_verdict(self) -> str:
        o = self.overall
        if o.revisits == 0:
            return "no revisits to check the change model against yet"
        text = (
            f"{o.revisits:,} revisits: {o.observed_changes:,} found a change where the model "
            f"expected {o.expected_changes:,.1f}"
        )
        flagged = [g for g in self.groups if g.flagged]
        off = ""
        if flagged:
            off = ", ".join(g.name for g in flagged[:3])
            off += f" and {len(flagged) - 3} more" if len(flagged) > 3 else ""
        if not o.enough:
            return text + "; too few revisits to judge"
        if o.flagged:
            if o.observed_changes > o.expected_changes:
                text += (
                    " — pages change more often than estimated: freshness is lower than planned"
                    " (a site's new publishing pace, or a record field that started changing"
                    " on every load)"
                )
            else:
                text += (
                    " — pages change less often than estimated: fetches are going to pages that"
                    " have not changed"
                )
            return text + (f"; most off: {off}" if off else "")
        if abs(o.z) < o.threshold:
            text += "; the model is calibrated"
        else:
            text += f"; observed ÷ expected {o.ratio:.2f}, within 20 %"
        return text + (f", but off for {off}" if off else "")

    def as_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return _num(x, 5)

        return {
            "since": num(self.since),
            "until": num(self.until),
            "overall": self.overall.as_dict(),
            "brier": num(self.brier),
            "brier_reference": num(self.brier_reference),
            "skill": num(self.skill),
            "verdict": self.verdict(),
            "bins": [
                {
                    "lo": b.lo,
                    "hi": b.hi,
                    "revisits": b.revisits,
                    "mean_predicted": num(b.mean_predicted),
                    "observed_share": num(b.observed_share),
                }
                for b in self.bins
            ],
            "groups": [g.as_dict() for g in self.groups],
            "validators": [v.as_dict() for v in self.validators],
            "by_history": [g.as_dict() for g in self.by_history],
            "validators_off": self.validators_off,
            "by": self.by,
        }


@dataclass(frozen=True, slots=True)
class ValidatorCheck:
    """Whether one site's conditional requests (ETag / Last-Modified) can be trusted.

    Revisits made with validators are answered ``304`` (not modified), or in
    full: unchanged or changed. A host may answer ``304`` while the content
    changed: then its conditional revisits find fewer changes than its
    revisits without validators (a verification sample, a fetcher that sends
    none) at the same predicted probability. The comparison is a likelihood
    ratio test of one factor ``r`` on the change rate of the conditional
    revisits, ``P(change) = 1 − (1 − p)^(k·r)``, with a rate factor ``k`` of
    its own for each band of estimated rate (so that a model merely off for
    the site, or samples that reach faster or slower pages, do not look like
    a lying server).
    """

    name: str
    conditional: int
    not_modified: int
    full_unchanged: int
    full_changed: int
    unconditional: int
    unconditional_changed: int
    expected_conditional: float
    """Changes the conditional revisits would have found, had they found them
    as often as the unconditional ones at the same estimated rate (NaN
    without a test)."""
    rate_ratio: float
    """``r``: changes found with validators ÷ without, as a rate factor (NaN
    without a test)."""
    z: float
    """Signed root of the likelihood ratio statistic for ``r = 1`` (NaN without a test)."""
    threshold: float = Z_FLAG
    """The ``−z`` from which :attr:`hides_changes` holds (higher when many
    sites are tested at once)."""
    tested: bool = False
    """Whether the test ran: :data:`MIN_FLAG_REVISITS` revisits of each kind
    in bands of estimated rate that hold both kinds, and no 304 reported as
    the answer to a request without validators (a fetcher that does not
    report ``conditional`` would make every full answer look unconditional)."""
    unreported_304: int = 0
    """304s to requests the reports called unconditional."""

    @property
    def honoured(self) -> float:
        """Share of the conditional revisits that found no change answered 304
        rather than in full (NaN when none found no change). A host whose
        304s hide changes counts its lies here too."""
        quiet = self.not_modified + self.full_unchanged
        return self.not_modified / quiet if quiet else math.nan

    @property
    def ignored(self) -> bool:
        """Validators sent and never honoured: at least :data:`MIN_FLAG_REVISITS`
        conditional revisits that found no change, none answered 304 (the
        bytes a 304 saves are never saved; sending validators costs little, so
        this is information, not a fault)."""
        quiet = self.not_modified + self.full_unchanged
        return quiet >= MIN_FLAG_REVISITS and self.not_modified == 0

    @property
    def hides_changes(self) -> bool:
        """304s while the content changed: :attr:`tested`, ``z ≤ −threshold``
        and the conditional revisits finding changes under 0.8 times as often."""
        return self.tested and self.z <= -self.threshold and self.rate_ratio < 1.0 - RATIO_FLAG

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "conditional": self.conditional,
            "not_modified": self.not_modified,
            "full_unchanged": self.full_unchanged,
            "full_changed": self.full_changed,
            "unconditional": self.unconditional,
            "unconditional_changed": self.unconditional_changed,
            "honoured": _num(self.honoured),
            "expected_conditional": _num(self.expected_conditional),
            "rate_ratio": _num(self.rate_ratio),
            "z": _num(self.z),
            "tested": self.tested,
            "unreported_304": self.unreported_304,
            "ignored": self.ignored,
            "hides_changes": self.hides_changes,
        }


def _num(x: float, digits: int = 4) -> float | None:
    """``x`` rounded for JSON; None for NaN or an infinity."""
    return None if not math.isfinite(x) else round(x, digits)


RATE_BANDS: Final = tuple(2.0 ** (k / 1.5) for k in range(-12, 4))
"""Edges (changes per day) of the bands of estimated rate that
:func:`validator_checks` compares within: a factor 2^(2/3) ≈ 1.59 apart,
from one change in 256 days to four a day (five bands a factor 3 apart let
samples of faster and slower pages flag 5 honest hosts in 100)."""

_EDGE: Final = 15.0  # |log factor| beyond which a fit has run off (all or none changed)


def _cloglog_ll(
    hazard: FloatArray, eta: FloatArray, c: BoolArray, seg: IntArray, n: int
) -> FloatArray:
    """Per segment, the log-likelihood of ``c`` under ``P = 1 − e^(−hazard·e^η)``."""
    mu = hazard * np.exp(eta)
    ll = np.where(c, np.log(-np.expm1(-np.maximum(mu, 1e-300))), -mu)
    return np.bincount(seg, weights=ll, minlength=n).astype(np.float64)


def _fit_strata(
    hazard: FloatArray,
    c: BoolArray,
    cond: BoolArray,
    stratum: IntArray,
    site_of: IntArray,
    n_sites: int,
    with_ratio: bool,
) -> tuple[FloatArray, FloatArray]:
    """Maximum likelihood of the intercepts (one per stratum) and, ``with_ratio``,
    one log rate ratio of the conditional revisits per site, under
    ``P = 1 − e^(−hazard·e^(a[stratum] + b[site]·cond))``, every site at once:
    Newton steps on the observed information (the log-likelihood is concave
    in η; the expected information, near zero for a revisit predicted near
    certain that found nothing, let the steps oscillate), the ratio's step by
    the Schur complement of the strata's, each site's step halved until its
    log-likelihood does not fall."""
    n_strata = len(site_of)
    a = np.zeros(n_strata)
    b = np.zeros(n_sites)
    site = site_of[stratum]
    cf = cond.astype(np.float64)

    def site_ll(a: FloatArray, b: FloatArray) -> FloatArray:
        return _cloglog_ll(hazard, a[stratum] + b[site] * cf, c, site, n_sites)

    ll = site_ll(a, b)
    for _ in range(100):
        mu = hazard * np.exp(a[stratum] + b[site] * cf)
        q = mu / np.maximum(np.expm1(np.minimum(mu, 700.0)), 1e-300)  # μ/(e^μ − 1)
        g = np.where(c, q, -mu)  # dℓ/dη
        w = np.where(c, np.maximum(q * (mu + q - 1.0), 0.0), mu)  # −d²ℓ/dη²
        u_a = np.bincount(stratum, weights=g, minlength=n_strata)
        i_aa = np.bincount(stratum, weights=w, minlength=n_strata) + 1e-9
        if with_ratio:
            u_b = np.bincount(site, weights=g * cf, minlength=n_sites)
            i_ab = np.bincount(stratum, weights=w * cf, minlength=n_strata)
            i_bb = np.bincount(site, weights=w * cf, minlength=n_sites)
            schur = i_bb - np.bincount(site_of, weights=i_ab * i_ab / i_aa, minlength=n_sites)
            rhs = u_b - np.bincount(site_of, weights=i_ab * u_a / i_aa, minlength=n_sites)
            ok = schur > 1e-9 * i_bb  # relative: the ratio is identified
            db = np.where(ok, rhs / np.where(ok, schur, 1.0), 0.0)
            da = (u_a - i_ab * db[site_of]) / i_aa
        else:
            db = np.zeros(n_sites)
            da = u_a / i_aa
        step = np.abs(db)
        np.maximum.at(step, site_of, np.abs(da))
        t = np.minimum(1.0, 2.0 / np.maximum(step, 1e-300))  # per site, never more than e²
        a_new, b_new, ll_new = a, b, ll
        for _ in range(40):
            a_new = np.clip(a + t[site_of] * da, -_EDGE, _EDGE)
            b_new = np.clip(b + t * db, -_EDGE, _EDGE)
            ll_new = site_ll(a_new, b_new)
            worse = ll_new < ll - 1e-12 * (1.0 + np.abs(ll))
            if not worse.any():
                break
            t = np.where(worse, t / 2, t)
        moved = max(
            float(np.abs(a_new - a).max(initial=0.0)), float(np.abs(b_new - b).max(initial=0.0))
        )
        gain = float((ll_new - ll).max(initial=0.0))
        a, b, ll = a_new, b_new, ll_new
        if moved < 1e-7 or gain < 1e-9:
            break
    return a, b


def validator_checks(
    predicted: ArrayLike,
    changed: ArrayLike,
    conditional: ArrayLike,
    not_modified: ArrayLike,
    groups: ArrayLike,
    names: Sequence[str] | None = None,
    rate_per_day: ArrayLike | None = None,
) -> list[ValidatorCheck]:
    """:class:`ValidatorCheck` of every group with a conditional revisit,
    those whose 304s hide changes first, then by conditional revisits.

    Parameters
    ----------
    predicted, changed : array_like
        As for :func:`calibration_report`.
    conditional : array_like of bool
        Whether each revisit carried validators.
    not_modified : array_like of bool
        Whether it was answered 304 (which only a conditional request gets).
    groups : array_like of int
        Group (site) code of each revisit.
    names : sequence of str, optional
        Name of each group code.
    rate_per_day : array_like of float, optional
        The estimated rate behind each prediction: revisits are compared
        within bands of it (:data:`RATE_BANDS`), so that pages of different
        speeds in the two samples are not mistaken for lies.

    Examples
    --------
    A host that answers 304 to every conditional request, changed or not:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.1, 0.6, 400)
    >>> truth = rng.random(400) < p
    >>> cond = np.arange(400) % 4 != 0
    >>> seen = truth & ~cond
    >>> (v,) = validator_checks(p, seen, cond, cond & ~seen, np.zeros(400, int), ["liar"])
    >>> v.hides_changes, v.full_changed, round(v.expected_conditional)
    (True, 0, 93)
    """
    p = np.asarray(predicted, dtype=np.float64).reshape(-1)
    c = np.asarray(changed, dtype=bool).reshape(-1)
    nm = np.asarray(not_modified, dtype=bool).reshape(-1)
    reported = np.asarray(conditional, dtype=bool).reshape(-1)
    cond = reported | nm
    g = np.asarray(groups, dtype=np.intp).reshape(-1)
    if not (p.shape == c.shape == cond.shape == nm.shape == g.shape):
        raise ValueError("every array must have one value per revisit")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("predicted probabilities must lie in [0, 1]")
    if g.size and g.min() < 0:
        raise ValueError("group codes must be ≥ 0")
    band = np.zeros(p.shape, dtype=np.intp)
    if rate_per_day is not None:
        r = np.asarray(rate_per_day, dtype=np.float64).reshape(-1)
        if r.shape != p.shape:
            raise ValueError("rate_per_day must have one value per revisit")
        band = np.searchsorted(np.array(RATE_BANDS), r)
    sites = np.unique(g[cond])
    if not sites.size:
        return []
    keep = np.isin(g, sites)
    p, c, nm, cond, g, band = p[keep], c[keep], nm[keep], cond[keep], g[keep], band[keep]
    reported = reported[keep]
    site = np.searchsorted(sites, g)
    n_sites = len(sites)

    def per_site(mask: BoolArray) -> IntArray:
        return np.bincount(site, weights=mask.astype(np.float64), minlength=n_sites).astype(int)

    n_cond, n_unc = per_site(cond), per_site(~cond)
    stats = {
        "not_modified": per_site(cond & nm),
        "full_unchanged": per_site(cond & ~nm & ~c),
        "full_changed": per_site(cond & ~nm & c),
        "unconditional_changed": per_site(~cond & c),
    }
    unreported = per_site(nm & ~reported)
    # the test compares within bands: count only the revisits (p > 0) in bands
    # that hold both kinds
    key = site * (len(RATE_BANDS) + 1) + band
    usable = p > 0
    _, inv = np.unique(key, return_inverse=True)
    both = (np.bincount(inv, weights=(usable & cond).astype(np.float64)) > 0) & (
        np.bincount(inv, weights=(usable & ~cond).astype(np.float64)) > 0
    )
    shared = usable & both[inv]
    tested = (
        (per_site(shared & cond) >= MIN_FLAG_REVISITS)
        & (per_site(shared & ~cond) >= MIN_FLAG_REVISITS)
        & (unreported == 0)
    )
    expected = np.full(n_sites, math.nan)
    ratio = np.full(n_sites, math.nan)
    z = np.full(n_sites, math.nan)
    if tested.any():
        m = tested[site] & (p > 0)
        hz = -np.log1p(-np.minimum(p[m], 1.0 - 1e-12))  # the model's hazard λ̂t
        cm, condm, sm = c[m], cond[m], site[m]
        strata, stratum = np.unique(sm * (len(RATE_BANDS) + 1) + band[m], return_inverse=True)
        site_of = strata // (len(RATE_BANDS) + 1)
        a1, b1 = _fit_strata(hz, cm, condm, stratum, site_of, n_sites, True)
        a0, _ = _fit_strata(hz, cm, condm, stratum, site_of, n_sites, False)
        ll1 = _cloglog_ll(hz, a1[stratum] + b1[sm] * condm, cm, sm, n_sites)
        ll0 = _cloglog_ll(hz, a0[stratum], cm, sm, n_sites)
        root = np.sqrt(2.0 * np.maximum(ll1 - ll0, 0.0))
        # at the unconditional revisits' rate: the full fit's bands with r = 1
        p1 = -np.expm1(-hz * np.exp(a1[stratum]))
        exp_c = np.bincount(sm, weights=p1 * condm, minlength=n_sites)
        expected = np.where(tested, exp_c, math.nan)
        ratio = np.where(tested, np.exp(b1), math.nan)
        z = np.where(tested, np.copysign(root, b1), math.nan)
    threshold = _threshold(int(tested.sum()))
    out = [
        ValidatorCheck(
            name=names[code] if names is not None else str(code),
            conditional=int(n_cond[k]),
            not_modified=int(stats["not_modified"][k]),
            full_unchanged=int(stats["full_unchanged"][k]),
            full_changed=int(stats["full_changed"][k]),
            unconditional=int(n_unc[k]),
            unconditional_changed=int(stats["unconditional_changed"][k]),
            expected_conditional=float(expected[k]),
            rate_ratio=float(ratio[k]),
            z=float(z[k]),
            threshold=threshold,
            tested=bool(tested[k]),
            unreported_304=int(unreported[k]),
        )
        for k, code in enumerate(sites.tolist())
    ]
    out.sort(key=lambda v: (not v.hides_changes, -v.conditional, v.name))
    return out


def _group(name: str, p: FloatArray, c: BoolArray, threshold: float = Z_FLAG) -> GroupCalibration:
    expected = float(p.sum())
    observed = int(np.count_nonzero(c))
    var = float(np.dot(p, 1.0 - p))
    gap = observed - expected
    if var > 0:
        z = math.copysign(max(abs(gap) - 0.5, 0.0), gap) / math.sqrt(var)
    else:  # every prediction certain: any disagreement is infinitely surprising
        z = 0.0 if abs(gap) < 0.5 else math.copysign(math.inf, gap)
    return GroupCalibration(name, int(p.shape[0]), expected, observed, z, threshold)


def _threshold(tests: int) -> float:
    """The ``|z|`` that ``tests`` groups tested at once pass by chance as
    rarely as one group passes :data:`Z_FLAG` (Bonferroni)."""
    if tests <= 1:
        return Z_FLAG
    tail = NormalDist().cdf(-Z_FLAG) / tests
    return max(Z_FLAG, -NormalDist().inv_cdf(tail))


def calibration_report(
    predicted: ArrayLike,
    changed: ArrayLike,
    groups: ArrayLike | None = None,
    names: Sequence[str] | None = None,
    *,
    conditional: ArrayLike | None = None,
    not_modified: ArrayLike | None = None,
    history: ArrayLike | None = None,
    rate_per_day: ArrayLike | None = None,
    since: float = math.nan,
    until: float = math.nan,
) -> Calibration:
    """Score predictions of change against what the revisits found.

    Parameters
    ----------
    predicted : array_like of float
        Predicted probability of a change at each revisit, in ``[0, 1]``.
    changed : array_like of bool
        Whether each revisit found one.
    groups : array_like of int, optional
        Group code of each revisit, for the per-group figures.
    names : sequence of str, optional
        Name of each group code (default: the code).
    conditional, not_modified : array_like of bool, optional
        Whether each revisit carried validators and was answered 304: with
        ``groups``, they give :attr:`Calibration.validators`.
    history : array_like of float, optional
        Revisits of evidence each page had before the revisit, for
        :attr:`Calibration.by_history`.
    rate_per_day : array_like of float, optional
        The estimated rate behind each prediction (:func:`validator_checks`
        compares within bands of it).
    since, until : float
        The window checked, unix seconds (kept on the result).

    Examples
    --------
    >>> c = calibration_report([0.5] * 100, [True, False] * 50)
    >>> c.overall.observed_changes, round(c.overall.expected_changes), c.overall.flagged
    (50, 50, False)
    """
    p = np.asarray(predicted, dtype=np.float64).reshape(-1)
    c = np.asarray(changed, dtype=bool).reshape(-1)
    if p.shape != c.shape:
        raise ValueError("predicted and changed must have one value per revisit")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("predicted probabilities must lie in [0, 1]")
    overall = _group("all", p, c)
    if p.size:
        brier = float(np.mean((p - c) ** 2))
        base = float(np.mean(c))
        reference = float(np.mean((base - c) ** 2))
    else:
        brier = reference = math.nan
    edges = np.array(BIN_EDGES)
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    bins = []
    for b in range(len(edges) - 1):
        m = which == b
        k = int(np.count_nonzero(m))
        bins.append(
            CalibrationBin(
                float(edges[b]),
                float(edges[b + 1]),
                k,
                float(p[m].mean()) if k else math.nan,
                float(c[m].mean()) if k else math.nan,
            )
        )
    per_group: list[GroupCalibration] = []
    if groups is not None and p.size:
        g = np.asarray(groups, dtype=np.intp).reshape(-1)
        if g.shape != p.shape:
            raise ValueError("groups must have one value per revisit")
        order = np.argsort(g, kind="stable")
        gs = g[order]
        cut = np.flatnonzero(np.diff(gs)) + 1
        chunks = np.split(order, cut)
        threshold = _threshold(len(chunks))
        for chunk in chunks:
            code = int(g[chunk[0]])
            name = names[code] if names is not None else str(code)
            per_group.append(_group(name, p[chunk], c[chunk], threshold))
        # flagged first (a table cut at its top rows still shows them), then most surprising
        per_group.sort(key=lambda x: (not x.flagged, -abs(x.z), x.name))
    checks: list[ValidatorCheck] = []
    if groups is not None and conditional is not None and p.size:
        nm = np.zeros(p.shape, dtype=bool) if not_modified is None else not_modified
        checks = validator_checks(p, c, conditional, nm, groups, names, rate_per_day)
    by_history: list[GroupCalibration] = []
    if history is not None and p.size:
        h = np.asarray(history, dtype=np.float64).reshape(-1)
        if h.shape != p.shape:
            raise ValueError("history must have one value per revisit")
        bounds = (*HISTORY_EDGES, math.inf)
        for lo, hi in pairwise(bounds):
            m = (h >= lo) & (h < hi)
            if m.any():
                name = f"{lo:g}+" if hi == math.inf else f"{lo:g}–{hi:g}"
                by_history.append(_group(name, p[m], c[m], _threshold(len(HISTORY_EDGES))))
    return Calibration(overall, brier, reference, bins, per_group, checks, by_history, since, until)
