"""The allocation when some pages' changes are announced (complete observations).

A trusted source that both vouches for a page (shows it unchanged) and proves
its changes (shows each one: a sitemap's ``lastmod``, a feed, a listing's
summary) observes the page completely, Kolobov et al.'s "complete
observations" case (NeurIPS 2019): the page is known fresh until the source
shows a change, and known stale from then until it is fetched. It needs no
visits of its own; what is left to choose is the probability ``p`` with which
an announced change is fetched.

Fetched on each announcement it is followed in, a page of rate ``λ`` (changes
per day), value ``w`` and cost ``c`` is fresh whenever its latest change was
fetched, a share ``p`` of the time, for ``p λ`` fetches a day: under the
freshness objective, value ``p w`` at ``p λ c`` billing units a day, a return of
``w / (λ c)`` per unit, whatever ``p``. Under the events objective every such
fetch catches a change: ``w / c``. The return being linear in ``p``, a notified
page is followed (``p = 1``) when its return beats the multiplier ``μ`` of the
rest of the allocation, not at all below it: the notified pages are taken best
return first as long as the next one's return is at least the ``μ`` that the
other pages get from the budget left (a bisection on what the rest spends at
that return, :func:`rest_spend`). The first page not followed in full is
followed with the probability that brings the rest's multiplier to its return.

Both returns are the limits of the unnotified marginal at no visits (``g → 1``):
a page the plain allocation would visit at all is worth following once
announced, and costs its changes' fetches rather than a visit rate of its
own, which is what frees budget for the rest.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from recrawl.plan.freshness import Objective, inverse_marginal, optimal_allocation

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

__all__ = ["notified_allocation", "notified_return", "rest_spend"]


def notified_return(
    rate: FloatArray, value: FloatArray, cost: FloatArray, objective: Objective
) -> FloatArray:
    """What a billing unit spent following a notified page's changes buys:
    ``w / (λ c)`` (freshness, per unit) or ``w / c`` (events); 0 where the
    page never changes or has no value.

    >>> notified_return(np.array([0.5, 2.0]), np.ones(2), np.ones(2), "freshness")
    array([2. , 0.5])
    """
    useful = (rate > 0) & (value > 0) & (cost > 0)
    per = cost * rate if objective == "freshness" else cost
    out: FloatArray = np.divide(value, per, out=np.zeros(rate.shape[0]), where=useful)
    return out


def rest_spend(
    multiplier: float,
    rate: FloatArray,
    value: FloatArray,
    cost: FloatArray,
    objective: Objective,
) -> float:
    """What the optimal allocation of these pages spends (billing units a day)
    where its multiplier is ``multiplier``: each page visited where its
    marginal equals ``μ c``, ``f = λ / g⁻¹(μ c λ / w)`` (freshness) or
    ``λ / g⁻¹(μ c / w)`` (events), none where even a first visit is worth less.

    >>> rest_spend(1.0, np.ones(3), np.ones(3), np.ones(3), "freshness")
    0.0
    >>> round(rest_spend(0.2642411, np.ones(1), np.ones(1), np.ones(1), "freshness"), 4)
    1.0
    """
    useful = (rate > 0) & (value > 0)
    if not np.any(useful):
        return 0.0
    lam, w, c = rate[useful], value[useful], cost[useful]
    x = multiplier * c / w
    if objective == "freshness":
        x = x * lam
    r = inverse_marginal(x, polish=True)
    with np.errstate(divide="ignore"):
        f = np.where(r > 0, lam / np.where(r > 0, r, 1.0), np.inf)
    return float(np.dot(c, f))


def notified_allocation(
    rate: FloatArray,
    value: FloatArray,
    cost: FloatArray,
    budget_per_day: float,
    objective: Objective,
    notified: BoolArray,
) -> tuple[FloatArray, FloatArray]:
    """The optimal allocation with the ``notified`` pages' changes announced.

    Parameters
    ----------
    rate, value, cost : ndarray
        Each page's change rate (changes per day), value weight and cost of
        a fetch (billing units, > 0).
    budget_per_day : float
        Billing units a day (> 0).
    objective : {"freshness", "events"}
    notified : ndarray of bool
        The pages under complete observation.

    Returns
    -------
    visits : ndarray
        Visits a day: the optimal allocation's for the other pages, and for a
        notified page the fetches its announced changes cost, ``p λ``.
    p : ndarray
        The probability a notified page's announced change is fetched (0 for
        the others).

    Examples
    --------
    Two pages changing daily, one notified, a budget of one fetch a day: the
    notified page's changes cost a fetch a day and buy its whole freshness,
    more than any visit rate of the other page; with a budget of two, the
    other page gets the fetch that is left.

    >>> lam, w, c = np.ones(2), np.ones(2), np.ones(2)
    >>> v, p = notified_allocation(lam, w, c, 1.0, "freshness", np.array([True, False]))
    >>> v.round(3).tolist(), p.tolist()
    ([1.0, 0.0], [1.0, 0.0])
    >>> v, p = notified_allocation(lam, w, c, 2.0, "freshness", np.array([True, False]))
    >>> v.round(3).tolist(), p.tolist()
    ([1.0, 1.0], [1.0, 0.0])
    """
    n = rate.shape[0]
    visits = np.zeros(n)
    prob = np.zeros(n)
    ret = notified_return(rate, value, cost, objective)
    cand = np.flatnonzero(notified & (ret > 0))
    order = cand[np.argsort(-ret[cand], kind="stable")]
    follow = cost[order] * rate[order]  # billing units a day each costs, followed
    spend = np.concatenate([[0.0], np.cumsum(follow)])  # of the first k, k = 0…
    rest = ~notified
    r_rate, r_value, r_cost = rate[rest], value[rest], cost[rest]

    def wanted(k: int) -> float:
        """What the rest spends at the return of the ``k``-th best notified page."""
        return rest_spend(float(ret[order[k - 1]]), r_rate, r_value, r_cost, objective)

    # the largest k whose k-th page is followed in full: the rest, at that
    # page's return as its multiplier, fits in what the first k leave
    lo, hi = 0, order.size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if spend[mid] + wanted(mid) <= budget_per_day:
            lo = mid
        else:
            hi = mid - 1
    prob[order[:lo]] = 1.0
    left = budget_per_day - float(spend[lo])
    if lo < order.size:  # the next page, followed with the share left at its return
        j = order[lo]
        share = (left - wanted(lo + 1)) / float(follow[lo])
        prob[j] = min(1.0, max(share, 0.0))
        left -= prob[j] * float(follow[lo])
    visits[notified] = prob[notified] * rate[notified]
    if left > 1e-12 * budget_per_day and np.any((r_rate > 0) & (r_value > 0)):
        got = optimal_allocation(r_rate, left, weight=r_value, cost=r_cost, objective=objective)
        visits[rest] = got.visits_per_day
    return visits, prob
