"""The documents the CLI and the service both show, one type each.

``recrawl X --json`` and ``GET /v1/X`` print the ``as_dict()`` of the same
object, built by the same call, so the two edges cannot drift:

=====================================  ==========================================
document                               built by
=====================================  ==========================================
plan                                   :meth:`Engine.plan_dict <recrawl.engine.engine.Engine.plan_dict>`
budget                                 :class:`~recrawl.engine.engine.BudgetOutlook`
health, every site                     :class:`HealthOverview` (:func:`health_overview`)
health, one site                       :class:`SiteDetail` (:func:`site_detail`)
stats                                  :class:`~recrawl.engine.stats.Stats`
calibration                            :class:`CalibrationReport`
hints                                  :class:`~recrawl.engine.engine.HintReport`
pages                                  :class:`PageTable` (:meth:`Engine.pages <recrawl.engine.engine.Engine.pages>`)
=====================================  ==========================================

A site's row joins its health report (:meth:`SiteHealth.to_dict
<recrawl.health.SiteHealth.to_dict>`) with its controls (``paused``,
``cost_multiplier``, ``concurrency_cap``, ``band``, ``validators``; None for
a site without any) and its outstanding leases; a known site not evaluated
(no fetch in the scorer's window) has ``score`` None and band ``unknown``.
Rows come worst first: critical, degrading, healthy, unknown, then by score
and name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from recrawl.estimate.calibration import Calibration

__all__ = [
    "CalibrationReport",
    "HealthOverview",
    "PageTable",
    "SiteDetail",
    "SiteReader",
    "health_overview",
    "site_detail",
    "worst_first",
]

_BAND_ORDER = {"critical": 0, "degrading": 1, "healthy": 2, "unknown": 3}


def worst_first(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Health rows by band (critical, degrading, healthy, unknown), then score
    (none last) and site name."""
    return sorted(
        rows,
        key=lambda r: (
            _BAND_ORDER.get(str(r.get("band")), 9),
            r["score"] if r.get("score") is not None else 101,
            str(r["site"]),
        ),
    )


class SiteReader(Protocol):
    """What the health documents read of the store."""

    def sites(self) -> list[str]: ...

    def site_controls(self) -> dict[str, dict[str, Any]]: ...

    def outstanding_leases(self, now: float) -> dict[str, int]: ...

    def health_history(
        self, site: str | None = None, since: float = 0.0, until: float = float("inf")
    ) -> list[tuple[float, dict[str, Any]]]: ...

    def site_events(self, site: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class HealthOverview:
    """Every site's health, controls and outstanding leases, worst first
    (``recrawl health --json``, ``GET /v1/sites``).

    ``at`` is the evaluation time (unix seconds), ``paused`` the paused sites
    by name.
    """

    at: float
    sites: list[dict[str, Any]]
    paused: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "sites": self.sites, "paused": self.paused}


@dataclass(frozen=True)
class SiteDetail:
    """One site: its row of :class:`HealthOverview`, its recorded health since
    ``since`` (unix seconds, oldest first) and its events (pauses, resumes, band
    changes, validators; oldest first): ``recrawl site show SITE --json``,
    ``GET /v1/sites/{site}``."""

    row: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**self.row, "history": self.history, "events": self.events}


@dataclass(frozen=True)
class CalibrationReport:
    """:class:`~recrawl.estimate.calibration.Calibration` with the sites whose
    validators were turned off on its strength (``recrawl calibration --apply``;
    empty otherwise, and always over HTTP, where ``POST
    /v1/sites/{site}/validators`` acts): ``recrawl calibration --json``,
    ``GET /v1/calibration``."""

    calibration: Calibration
    turned_off: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**self.calibration.as_dict(), "turned_off": list(self.turned_off)}


@dataclass(frozen=True)
class PageTable:
    """What recrawl believes of each page (``recrawl pages --json``,
    ``GET /v1/pages``), built by :meth:`Engine.pages
    <recrawl.engine.engine.Engine.pages>`.

    ``at`` is the time of the model (unix seconds), ``site`` the site asked for
    (None: every site), ``sort`` the order of ``pages``, ``billing_unit`` the
    unit of each row's ``cost``; ``total`` counts the matching pages, of which
    ``pages`` holds the first ``limit`` (all by default); ``states`` counts the
    matching pages by state. The fields of a row are listed at
    :meth:`Engine.pages <recrawl.engine.engine.Engine.pages>`.
    """

    at: float
    site: str | None
    sort: str
    billing_unit: str
    total: int
    states: dict[str, int]
    pages: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "site": self.site,
            "sort": self.sort,
            "billing_unit": self.billing_unit,
            "total": self.total,
            "states": dict(self.states),
            "pages": self.pages,
        }


def health_overview(
    store: SiteReader,
    reports: Sequence[Mapping[str, Any]],
    *,
    at: float,
    now: float,
    site: str | None = None,
) -> HealthOverview:
    """Join health ``reports`` (evaluated at ``at``) with every known site's
    controls and the leases outstanding at ``now``; ``site``: that one only."""
    controls = store.site_controls()
    leases = store.outstanding_leases(now)
    by_site = {str(r["site"]): r for r in reports}
    names = set(store.sites()) | set(by_site) | set(controls)
    if site is not None:
        names &= {site}
    rows = []
    for s in names:
        row = dict(by_site.get(s) or {"site": s, "score": None, "band": "unknown"})
        row["controls"] = controls.get(s)
        row["leases_outstanding"] = leases.get(s, 0)
        rows.append(row)
    paused = sorted(s for s in names if (controls.get(s) or {}).get("paused"))
    return HealthOverview(at=at, sites=[dict(r) for r in worst_first(rows)], paused=paused)


def site_detail(
    store: SiteReader, overview: HealthOverview, site: str, *, since: float = 0.0
) -> SiteDetail | None:
    """The :class:`SiteDetail` of ``site`` from ``overview`` (None when it is not there)."""
    row = next((r for r in overview.sites if r["site"] == site), None)
    if row is None:
        return None
    history = [
        {
            "at": at,
            "score": r.get("score"),
            "raw_score": r.get("raw_score"),
            "band": r.get("band"),
            "reasons": r.get("reasons"),
        }
        for at, r in store.health_history(site, since=since)
    ]
    return SiteDetail(row=row, history=history, events=store.site_events(site))
