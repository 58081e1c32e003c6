"""Prometheus metrics of the service, computed from the store at each scrape.

Per site and page type: fetches, changes detected, fetches without change,
cost and cost per change (in the billing unit, labelled ``unit``). Per site:
health score (0–100), band (one series per band, 1 for the current one),
pause, concurrency cap and outstanding leases. For the service: observations
accepted, stored and rejected, ingest requests, leases handed out, the ingest
rate over the last minute (observations per second) and the plan's tasks by reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.estimate.rates import RESOLUTION_WARN_SHARE
from recrawl.service.writer import Writer
from recrawl.store import SQLStore

__all__ = ["CONTENT_TYPE", "MeteredService", "ServiceCollector", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
BANDS = ("healthy", "degrading", "critical", "unknown")


class MeteredService(Protocol):
    """What the metrics read of a running service (:class:`recrawl.service.state.Service`
    is one): its engine, store, settings and writer, its counters since start
    (observations accepted, stored, rejected; ingest requests; leases handed
    out), the ingest rate over the last minute (observations per second), the
    current plan and the latest health evaluation."""

    engine: Engine
    store: SQLStore
    settings: Settings
    writer: Writer
    accepted_total: int
    stored_total: int
    rejected_total: int
    ingest_requests: int
    leased_total: int

    def now(self) -> float: ...

    def ingest_rate(self) -> float: ...

    def plan(self, now: float | None = None) -> PlanResult: ...

    def refresh_health(self, now: float, *, force: bool = False) -> list[dict[str, Any]]: ...


class ServiceCollector(Collector):
    """Collects the service's metrics from the store and the service counters."""

    def __init__(self, service: MeteredService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        unit = svc.settings.billing_unit
        stats = svc.engine.stats()
        gl = ["site", "page_type"]
        fetches = CounterMetricFamily("recrawl_fetches", "Fetches observed.", labels=gl)
        changes = CounterMetricFamily(
            "recrawl_changes_detected", "Fetches that found a change.", labels=gl
        )
        without = CounterMetricFamily(
            "recrawl_fetches_without_change",
            "Revisits that found no change (unchanged or 304).",
            labels=gl,
        )
        cost = CounterMetricFamily(
            "recrawl_cost", "Cost of fetches in the billing unit.", labels=[*gl, "unit"]
        )
        per_change = GaugeMetricFamily(
            "recrawl_cost_per_change",
            "Cost per change detected in the billing unit (absent with no change).",
            labels=[*gl, "unit"],
        )
        for g in stats["groups"]:
            lv = [g["site"], g["page_type"]]
            fetches.add_metric(lv, g["fetches"])
            changes.add_metric(lv, g["changes_detected"])
            without.add_metric(lv, g["fetches_without_change"])
            cost.add_metric([*lv, unit], g["cost"])
            if g["cost_per_change"] is not None:
                per_change.add_metric([*lv, unit], g["cost_per_change"])
        yield from (fetches, changes, without, cost, per_change)

        now = svc.now()
        score = GaugeMetricFamily(
            "recrawl_site_health_score", "Smoothed target health score (0-100).", labels=["site"]
        )
        band = GaugeMetricFamily(
            "recrawl_site_health_band", "1 for the site's current band.", labels=["site", "band"]
        )
        for h in svc.refresh_health(now):
            if h.get("score") is not None:
                score.add_metric([h["site"]], float(h["score"]))
            for b in BANDS:
                band.add_metric([h["site"], b], 1.0 if h.get("band", "unknown") == b else 0.0)
        yield from (score, band)

        paused = GaugeMetricFamily(
            "recrawl_site_paused", "1 when the site is paused.", labels=["site"]
        )
        cap = GaugeMetricFamily(
            "recrawl_site_concurrency_cap", "Outstanding leases allowed.", labels=["site"]
        )
        for site, c in svc.store.site_controls().items():
            paused.add_metric([site], 1.0 if c["paused"] else 0.0)
            if c["concurrency_cap"] is not None:
                cap.add_metric([site], float(c["concurrency_cap"]))
        yield from (paused, cap)

        leases = GaugeMetricFamily(
            "recrawl_leases_outstanding", "Unexpired leases per site.", labels=["site"]
        )
        for site, n in sorted(svc.store.outstanding_leases(now).items()):
            leases.add_metric([site], float(n))
        yield leases

        yield CounterMetricFamily(
            "recrawl_observations_accepted",
            "Valid observations acknowledged over HTTP (new or already known).",
            value=svc.accepted_total,
        )
        yield CounterMetricFamily(
            "recrawl_observations_stored",
            "New observations stored over HTTP.",
            value=svc.stored_total,
        )
        yield CounterMetricFamily(
            "recrawl_observations_rejected",
            "Observations rejected over HTTP.",
            value=svc.rejected_total,
        )
        yield CounterMetricFamily(
            "recrawl_ingest_requests", "Observation batches received.", value=svc.ingest_requests
        )
        yield CounterMetricFamily(
            "recrawl_leases", "Tasks leased to workers.", value=svc.leased_total
        )
        yield CounterMetricFamily(
            "recrawl_ingest_transactions",
            "Store transactions that committed observations received over HTTP "
            "(concurrent batches are committed together).",
            value=svc.writer.groups,
        )
        yield GaugeMetricFamily(
            "recrawl_ingest_rate",
            "Observations accepted per second over the last minute.",
            value=svc.ingest_rate(),
        )
        tasks = GaugeMetricFamily(
            "recrawl_plan_tasks", "Tasks of the current plan by reason.", labels=["reason"]
        )
        plan = svc.plan(now)  # the service's settings always give a budget
        for reason, n in sorted(plan.split().items()):
            tasks.add_metric([reason], float(n))
        yield tasks
        if plan.resolution is not None and plan.resolution.revisited:
            yield GaugeMetricFamily(
                "recrawl_rates_bounded_below_share",
                "Share of revisited live pages that changed at every revisit they remember: "
                "their rate is only known to exceed one change per revisit interval (from "
                f"{RESOLUTION_WARN_SHARE:g}, the budget is too small to learn which change "
                "much faster). Absent until a page has been revisited.",
                value=plan.resolution.share,
            )


def render_metrics(service: MeteredService) -> bytes:
    """The Prometheus text exposition of ``service``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return generate_latest(registry)
