"""Where the money goes: fetches, changes detected and cost per change.

Pure functions over the store's per-(site, page_type) bucket sums; and, for the
service's ``/metrics``, each site's latency histogram from the store's buckets
(:func:`site_latency`) and the live pages' estimated freshness (:func:`freshness_model`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from recrawl.health.buckets import LATENCY_BINS
from recrawl.plan.planner import PlannerConfig, PlanPages, reallocate
from recrawl.store import GroupTotals

__all__ = [
    "LATENCY_REPRESENTATIVE_MS",
    "BillingUnit",
    "FreshnessModel",
    "LatencyRows",
    "PageSource",
    "Stats",
    "compute_stats",
    "freshness_model",
    "latency_sum_estimate_ms",
    "site_latency",
]

BillingUnit = Literal["fetches", "bytes", "credits"]


def _cost(g: GroupTotals, unit: BillingUnit) -> float:
    if unit == "bytes":
        return float(g.bytes_sent + g.bytes_received)
    if unit == "credits":
        return g.credits
    return float(g.fetches)


def _first_fetches(g: GroupTotals) -> int:
    """Fetches of pages not fetched successfully before: the first success
    (``new``) and the failures before it (``failed_first``)."""
    return g.outcomes.get("new", 0) + g.outcomes.get("failed_first", 0)


def _row(
    site: str, page_type: str, fetches: int, first: int, changed: int, without: int, cost: float
) -> dict[str, Any]:
    return {
        "site": site,
        "page_type": page_type,
        "fetches": fetches,
        "revisits": fetches - first,
        "changes_detected": changed,
        "fetches_without_change": without,
        "cost": cost,
        "cost_per_change": (cost / changed) if changed else None,
    }


@dataclass(frozen=True)
class Stats:
    """Where the money goes (``recrawl stats --json``, ``GET /v1/stats``): one
    row per site and page type (``groups``) and a ``total``, costs in ``unit``.
    Built by :meth:`of`; see :func:`compute_stats` for what each figure counts."""

    unit: BillingUnit
    groups: list[dict[str, Any]]
    total: dict[str, Any]

    @classmethod
    def of(cls, groups: Sequence[GroupTotals], unit: BillingUnit = "fetches") -> Stats:
        """The stats of the store's per-(site, page_type) bucket sums."""
        d = compute_stats(groups, unit)
        return cls(unit=unit, groups=d["groups"], total=d["total"])

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "groups": self.groups, "total": self.total}


def compute_stats(groups: Sequence[GroupTotals], unit: BillingUnit = "fetches") -> dict[str, Any]:
    """Per site and page type: fetches, revisits, changes detected, fetches that
    found no change, cost (in ``unit``) and cost per change detected; plus a total.

    A revisit is a fetch of a page fetched successfully before: neither a
    page's first success (outcome ``new``) nor a fetch that failed before it (a
    404, a block, a timeout on a URL never reached) is one, so a crawl whose new
    URLs often fail does not look as if it revisited them. A revisit answered
    ``304 Not Modified`` is a fetch without change. Cost follows the billing
    unit: every fetch (``fetches``), every wire byte sent or received, headers
    included (``bytes``), or credits as reported, one per successful response
    when not reported (``credits``). ``cost_per_change`` is None with no change.
    """
    out = []
    tot = {"fetches": 0, "first": 0, "changed": 0, "without": 0, "cost": 0.0}
    for g in groups:
        o = g.outcomes
        without = o.get("unchanged", 0) + o.get("not_modified", 0)
        cost = _cost(g, unit)
        first = _first_fetches(g)
        out.append(_row(g.site, g.page_type, g.fetches, first, o.get("changed", 0), without, cost))
        tot["fetches"] += g.fetches
        tot["first"] += first
        tot["changed"] += o.get("changed", 0)
        tot["without"] += without
        tot["cost"] += cost
    total = _row(
        "",
        "",
        int(tot["fetches"]),
        int(tot["first"]),
        int(tot["changed"]),
        int(tot["without"]),
        float(tot["cost"]),
    )
    del total["site"], total["page_type"]
    total = {"observations": int(tot["fetches"]), **total}
    return {"unit": unit, "groups": out, "total": total}


# -- for /metrics: each site's latency histogram and the freshness estimate ------------------

LATENCY_REPRESENTATIVE_MS: Final = np.array(
    [10.0 * 2.0 ** (k / 2.0 - 0.25) for k in range(LATENCY_BINS)]
)
"""One latency per histogram bin, milliseconds, for a sum estimated from the bins: the
geometric middle of a half-octave bin (its upper edge over 2^¼; for the first bin, 0–10
ms, 8.4 ms; for the overflow bin above 116 s, its lower edge times 2^¼). Every latency in
a bin other than those two is within a factor 2^¼ (19 %) of it."""


class LatencyRows(Protocol):
    """What :func:`site_latency` reads of the store's buckets
    (:class:`~recrawl.health.score.BucketArrays`)."""

    @property
    def sites(self) -> tuple[str, ...]: ...

    @property
    def site(self) -> npt.NDArray[np.int64]: ...

    @property
    def latency(self) -> npt.NDArray[np.int64]: ...


def site_latency(buckets: LatencyRows) -> dict[str, npt.NDArray[np.int64]]:
    """Each site's latency histogram over ``buckets`` (every page type, route and
    bucket): fetches per bin of :data:`~recrawl.health.buckets.LATENCY_EDGES_MS`
    (``(lo, hi]`` milliseconds), the overflow bin last. A site with buckets but no
    latency reported has a histogram of zeros."""
    sums = np.zeros((len(buckets.sites), LATENCY_BINS), dtype=np.int64)
    if len(buckets.site):
        np.add.at(sums, np.asarray(buckets.site), np.asarray(buckets.latency, dtype=np.int64))
    return {s: sums[i] for i, s in enumerate(buckets.sites)}


def latency_sum_estimate_ms(counts: npt.ArrayLike) -> float:
    """The summed latency, milliseconds, of the fetches a histogram counts, each read at
    its bin's :data:`LATENCY_REPRESENTATIVE_MS` (the store's buckets keep the bins, not
    the sum)."""
    return float(np.dot(np.asarray(counts, dtype=np.float64), LATENCY_REPRESENTATIVE_MS))


class PageSource(Protocol):
    """What :func:`freshness_model` reads of an :class:`~recrawl.engine.Engine`."""

    def page_arrays(
        self,
        now: float,
        exclude: set[str] | None = None,
        *,
        signals: bool = True,
        exclude_sites: Collection[str] = (),
    ) -> tuple[PlanPages, dict[str, Any]]: ...

    def planner_config(self) -> PlannerConfig: ...


@dataclass(frozen=True)
class FreshnessModel:
    """The live pages (neither gone, moved nor canaries) as the freshness estimate
    needs them: site, value, last successful fetch (NaN: never) and change rate
    estimated at ``at``. Built by :func:`freshness_model`; read with :meth:`by_site`."""

    at: float
    sites: tuple[str, ...]
    site: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    last_ok: npt.NDArray[np.float64]
    rate_per_s: npt.NDArray[np.float64]

    def by_site(self, t: float) -> dict[str, tuple[float, float]]:
        """Per site with live value: ``(fresh, total)`` at ``t`` (unix seconds), where
        ``total`` sums the live pages' values and ``fresh`` sums each value times
        the probability that our copy still equals the live page,
        ``exp(−λ·(t − last successful fetch))`` (0 for a page never fetched), as the
        HTML dashboard's freshness estimate. ``fresh / total`` is the site's
        estimated freshness (0–1)."""
        never = np.isnan(self.last_ok)
        age = np.maximum(t - np.where(never, t, self.last_ok), 0.0)
        p = np.where(never, 0.0, np.exp(-self.rate_per_s * age))
        n = len(self.sites)
        fresh = np.bincount(self.site, weights=self.value * p, minlength=n)
        total = np.bincount(self.site, weights=self.value, minlength=n)
        return {
            s: (float(fresh[i]), float(total[i])) for i, s in enumerate(self.sites) if total[i] > 0
        }


def freshness_model(engine: PageSource, now: float) -> FreshnessModel:
    """The live pages of ``engine``'s store with their change rates estimated at
    ``now`` (the planner's estimates, as :meth:`~recrawl.engine.Engine.budget_outlook`
    reads them): one read of every page and one rate estimate, so a caller that
    asks often should keep the model a while and call :meth:`FreshnessModel.by_site`."""
    pages, cols = engine.page_arrays(now, signals=False)
    live = np.asarray(cols.get("live", np.zeros(0, dtype=bool)), dtype=bool)
    if not live.any():
        empty = np.zeros(0)
        return FreshnessModel(now, (), np.zeros(0, dtype=np.int64), empty, empty, empty)
    model = reallocate(pages, 1.0, now, policy="uniform", config=engine.planner_config())
    names, codes = np.unique(np.asarray(cols["site"], dtype=object)[live].astype(str),
                             return_inverse=True)  # fmt: skip
    return FreshnessModel(
        at=now,
        sites=tuple(str(s) for s in names),
        site=codes.astype(np.int64).reshape(-1),
        value=np.asarray(pages.value, dtype=np.float64)[live],
        last_ok=np.asarray(cols["last_ok"], dtype=np.float64)[live],
        rate_per_s=np.asarray(model.rate_per_day, dtype=np.float64)[live] / 86400.0,
    )
