"""Where the money goes: fetches, changes detected and cost per change.

Pure functions over the store's per-(site, page_type) bucket sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from recrawl.store import GroupTotals

__all__ = ["BillingUnit", "Stats", "compute_stats"]

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
