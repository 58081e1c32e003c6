"""Prometheus metrics of the service, computed from the store at each scrape.

Per site and page type: fetches, fetches per outcome (every outcome of
:data:`~recrawl.health.buckets.OUTCOMES`), changes detected, fetches without
change, wire bytes sent and received, credits, cost and cost per change (in the
billing unit, labelled ``unit``). Per site and signal (``sitemap``, ``feed``,
``listing``, ``schedule``: :meth:`~recrawl.engine.Engine.signal_costs`): its
reads, the fetches it caused, the changes they found, its cost and cost per
change. Per site: a fetch latency histogram (seconds), items that left every
listing,
health score (0–100), band (one series per band, 1 for the current one), parser
health score and band, the smoothed share of answers asking to slow down, pause,
concurrency cap, outstanding leases and the estimated freshness of its live
pages with their summed value. For the service: the current cycle's budget,
spend and length; observations accepted, stored and rejected, ingest requests,
leases handed out, the plan's tasks by reason (and ``recrawl_ingest_rate``,
deprecated: ``rate(recrawl_observations_accepted_total[1m])`` says the same).

The store's counts cover its whole history, so the counters only grow (until
the store is replaced) and count what any process stored, ``recrawl ingest``
included; they rise when an observation is stored, whatever its ``fetched_at``.
The cost keeps the billing unit as a label rather than in its name: the unit is
a setting (fetches, bytes or credits), one name for all three keeps the
dashboard and alerts the same whichever is configured, and a store whose unit
changes gets new series instead of one series mixing units. Bytes and credits
also have counters of their own, named after their unit.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.stats import (
    FreshnessModel,
    compute_stats,
    freshness_model,
    latency_sum_estimate_ms,
    site_latency,
)
from recrawl.estimate.rates import RESOLUTION_WARN_SHARE
from recrawl.health.buckets import LATENCY_EDGES_MS, OUTCOMES
from recrawl.service.writer import Writer
from recrawl.store import EngineStore

__all__ = [
    "CONTENT_TYPE",
    "FRESHNESS_EVERY_S",
    "LATENCY_LE_SECONDS",
    "MeteredService",
    "ServiceCollector",
    "render_metrics",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST
BANDS = ("healthy", "degrading", "critical", "unknown")
LATENCY_LE_SECONDS: Final = tuple(repr(float(e) / 1000.0) for e in LATENCY_EDGES_MS)
"""The ``le`` labels of ``recrawl_fetch_latency_seconds_bucket`` below ``+Inf``: the
store's latency bin edges (:data:`~recrawl.health.buckets.LATENCY_EDGES_MS`), seconds."""
FRESHNESS_EVERY_S: Final = 300.0
"""The freshness estimate re-reads the pages and re-estimates their change rates at most
this often (seconds), when observations were stored since (else once an hour), in a
thread of its own: meanwhile, and in between, each scrape evaluates the last model at
its own time."""
_FAR_FUTURE: Final = 4.0e9  # unix seconds (2096): the end of "every bucket"
_log = logging.getLogger("recrawl.service")


@dataclass
class _Kept:
    """A service's latest freshness model, the observation mark it was read at, and
    whether a thread is reading a newer one."""

    mark: int
    model: FreshnessModel
    busy: bool = False


_freshness_lock = threading.Lock()
_freshness: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


class MeteredService(Protocol):
    """What the metrics read of a running service (:class:`recrawl.service.state.Service`
    is one): its engine, store, settings and writer, its counters since start
    (observations accepted, stored, rejected; ingest requests; leases handed
    out), the ingest rate over the last minute (observations per second), the
    current plan, the cycle's length (seconds), budget and spend so far, and the
    latest health evaluation."""

    engine: Engine
    store: EngineStore
    settings: Settings
    writer: Writer
    accepted_total: int
    stored_total: int
    rejected_total: int
    ingest_requests: int
    leased_total: int

    @property
    def cycle_s(self) -> float: ...

    def now(self) -> float: ...

    def cycle_budget(self) -> float: ...

    def cycle_spent(self, now: float | None = None) -> float: ...

    def spend_check(self, now: float | None = None) -> tuple[int, float, float]: ...

    def ingest_rate(self) -> float: ...

    def plan(self, now: float | None = None) -> PlanResult: ...

    def refresh_health(self, now: float, *, force: bool = False) -> list[dict[str, Any]]: ...


class ServiceCollector(Collector):
    """Collects the service's metrics from the store and the service counters."""

    def __init__(self, service: MeteredService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        now = svc.now()
        yield from self._groups()
        yield from self._cheap_signals()
        yield self._latency()
        yield from self._health(now)
        yield from self._service(now)
        yield from self._freshness(now)

    def _groups(self) -> Iterator[Metric]:
        """Per site and page type, from the store's bucket sums."""
        svc = self.service
        unit = svc.settings.billing_unit
        totals = svc.store.group_totals()
        stats = compute_stats(totals, unit)
        gl = ["site", "page_type"]
        fetches = CounterMetricFamily("recrawl_fetches", "Fetches observed.", labels=gl)
        outcomes = CounterMetricFamily(
            "recrawl_outcomes",
            "Fetches observed by outcome (" + ", ".join(OUTCOMES) + ").",
            labels=[*gl, "outcome"],
        )
        changes = CounterMetricFamily(
            "recrawl_changes_detected", "Fetches that found a change.", labels=gl
        )
        without = CounterMetricFamily(
            "recrawl_fetches_without_change",
            "Revisits that found no change (unchanged or 304).",
            labels=gl,
        )
        sent = CounterMetricFamily(
            "recrawl_sent_bytes", "Wire bytes sent by fetches, headers included.", labels=gl
        )
        received = CounterMetricFamily(
            "recrawl_received_bytes",
            "Wire bytes received by fetches, headers included.",
            labels=gl,
        )
        credits = CounterMetricFamily(
            "recrawl_credits",
            "API credits charged, as reported (one per successful response when not reported).",
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
        for t, g in zip(totals, stats["groups"], strict=True):
            lv = [g["site"], g["page_type"]]
            fetches.add_metric(lv, g["fetches"])
            for o in OUTCOMES:
                outcomes.add_metric([*lv, o], float(t.outcomes.get(o, 0)))
            changes.add_metric(lv, g["changes_detected"])
            without.add_metric(lv, g["fetches_without_change"])
            sent.add_metric(lv, float(t.bytes_sent))
            received.add_metric(lv, float(t.bytes_received))
            credits.add_metric(lv, float(t.credits))
            cost.add_metric([*lv, unit], g["cost"])
            if g["cost_per_change"] is not None:
                per_change.add_metric([*lv, unit], g["cost_per_change"])
        yield from (fetches, outcomes, changes, without, sent, received, credits, cost, per_change)

    def _cheap_signals(self) -> Iterator[Metric]:
        """Per site and signal (sitemap, feed, listing, schedule): what it cost
        and the changes the fetches it caused found; items that left every listing."""
        engine = self.service.engine
        report = engine.signal_report()
        unit = report["unit"]
        sl = ["site", "signal"]
        reads = CounterMetricFamily(
            "recrawl_signal_reads", "A signal's own reads (sitemap, feed, listing page).", labels=sl
        )
        fetches = CounterMetricFamily(
            "recrawl_signal_fetches",
            "Fetches a signal caused (it proved the page changed; schedule: every other).",
            labels=sl,
        )
        changes = CounterMetricFamily(
            "recrawl_signal_changes", "Changes found by the fetches a signal caused.", labels=sl
        )
        cost = CounterMetricFamily(
            "recrawl_signal_cost",
            "A signal's reads and the fetches it caused, in the billing unit.",
            labels=[*sl, "unit"],
        )
        per_change = GaugeMetricFamily(
            "recrawl_signal_cost_per_change",
            "A signal's cost per change found, in the billing unit (absent with no change).",
            labels=[*sl, "unit"],
        )
        for c in report["signals"]:
            lv = [c["site"], c["signal"]]
            reads.add_metric(lv, c["reads"])
            fetches.add_metric(lv, c["fetches"])
            changes.add_metric(lv, c["changes"])
            cost.add_metric([*lv, unit], c["cost"])
            if c["per_change"] is not None:
                per_change.add_metric([*lv, unit], c["per_change"])
        delisted = GaugeMetricFamily(
            "recrawl_delisted_items",
            "Item pages that left every listing of the site.",
            labels=["site"],
        )
        for site, n in report["delisted"].items():
            delisted.add_metric([site], n)
        yield from (reads, fetches, changes, cost, per_change, delisted)

    def _latency(self) -> Metric:
        """Each site's fetch latency histogram, from the store's daily buckets."""
        hist = HistogramMetricFamily(
            "recrawl_fetch_latency_seconds",
            "Latency of the fetches that reported one, seconds, in the store's half-octave "
            "bins (10 ms to 116 s). The store keeps the bins, not the sum: _sum counts each "
            "fetch at its bin's geometric middle (within 19 % of its latency from 7 ms to "
            "116 s); the quantiles of _bucket are exact to the bin.",
            labels=["site"],
        )
        buckets = self.service.store.buckets(0.0, _FAR_FUTURE, daily=True)
        for site, counts in sorted(site_latency(buckets).items()):
            cum = counts.cumsum().tolist()
            pairs = [(le, float(c)) for le, c in zip(LATENCY_LE_SECONDS, cum, strict=False)]
            pairs.append(("+Inf", float(cum[-1])))
            hist.add_metric([site], pairs, latency_sum_estimate_ms(counts) / 1000.0)
        return hist

    def _health(self, now: float) -> Iterator[Metric]:
        """Per site: health, controls, leases."""
        svc = self.service
        score = GaugeMetricFamily(
            "recrawl_site_health_score", "Smoothed target health score (0-100).", labels=["site"]
        )
        band = GaugeMetricFamily(
            "recrawl_site_health_band", "1 for the site's current band.", labels=["site", "band"]
        )
        pscore = GaugeMetricFamily(
            "recrawl_site_parser_health_score",
            "Smoothed parser health score (0-100): records extracted from the site's "
            "responses against its normal (extract_failed above it lowers the score).",
            labels=["site"],
        )
        pband = GaugeMetricFamily(
            "recrawl_site_parser_health_band",
            "1 for the band of the site's parser health.",
            labels=["site", "band"],
        )
        throttle = GaugeMetricFamily(
            "recrawl_site_throttle_share",
            "Smoothed share of the site's answers asking to slow down (429, 503, "
            "Retry-After, or hard blocks above its normal); the site's concurrency is "
            "cut as it rises.",
            labels=["site"],
        )
        per_valid = {
            unit: GaugeMetricFamily(
                f"recrawl_site_{unit}_per_valid_record",
                f"{unit.capitalize()} the site's answers cost per record extracted, over the "
                "health window (window=current) and in the site's normal (window=normal): a "
                "site serving bigger pages or failing more extractions costs more per record.",
                labels=["site", "window"],
            )
            for unit in ("bytes", "credits")
        }
        for h in svc.refresh_health(now):
            site = h["site"]
            cost = h.get("cost") or {}
            for unit, fam in per_valid.items():
                for window, key in (("current", ""), ("normal", "_normal")):
                    v = cost.get(f"{unit}_per_record{key}")
                    if v is not None:
                        fam.add_metric([site, window], float(v))
            if h.get("score") is not None:
                score.add_metric([site], float(h["score"]))
            for b in BANDS:
                band.add_metric([site, b], 1.0 if h.get("band", "unknown") == b else 0.0)
            parser = h.get("parser")
            if isinstance(parser, dict):
                if parser.get("score") is not None:
                    pscore.add_metric([site], float(parser["score"]))
                for b in BANDS:
                    on = parser.get("band", "unknown") == b
                    pband.add_metric([site, b], 1.0 if on else 0.0)
            slow = h.get("throttle")
            if isinstance(slow, dict) and slow.get("share") is not None:
                throttle.add_metric([site], float(slow["share"]))
        yield from (score, band, pscore, pband, throttle, *per_valid.values())

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

    def _service(self, now: float) -> Iterator[Metric]:
        """The service's counters, the cycle's budget and spend, the plan."""
        svc = self.service
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
            "Deprecated: rate(recrawl_observations_accepted_total[1m]) says the same. "
            "Observations accepted per second over the last minute.",
            value=svc.ingest_rate(),
        )
        plan = svc.plan(now)  # the service's settings always give a budget
        unit = svc.settings.billing_unit
        budget = GaugeMetricFamily(
            "recrawl_cycle_budget",
            "The current planning cycle's budget in the billing unit.",
            labels=["unit"],
        )
        budget.add_metric([unit], svc.cycle_budget())
        spent = GaugeMetricFamily(
            "recrawl_cycle_spent",
            "What the current cycle has spent in the billing unit: leases at their planned "
            "cost until reported, then at the fetch's real cost; expired leases refunded.",
            labels=["unit"],
        )
        spent.add_metric([unit], svc.cycle_spent(now))
        yield from (budget, spent)
        n, expected, reported = svc.spend_check(now)
        yield GaugeMetricFamily(
            "recrawl_cycle_fetches_reported",
            "Fetches leased by this service and reported in the current cycle.",
            value=n,
        )
        for name, what, v in (
            ("expected", "what the plan expected them to cost", expected),
            ("reported", "what they reported costing (wire bytes or credits)", reported),
        ):
            g = GaugeMetricFamily(
                f"recrawl_cycle_fetch_cost_{name}",
                f"The current cycle's reported fetches: {what}, in the billing unit. "
                "reported / expected far from 1 means the plan's cost model is off.",
                labels=["unit"],
            )
            g.add_metric([unit], v)
            yield g
        yield GaugeMetricFamily(
            "recrawl_cycle_seconds", "Length of one planning cycle, seconds.", value=svc.cycle_s
        )
        tasks = GaugeMetricFamily(
            "recrawl_plan_tasks", "Tasks of the current plan by reason.", labels=["reason"]
        )
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

    def _freshness(self, now: float) -> Iterator[Metric]:
        """Per site: the live pages' estimated freshness and their summed value."""
        by_site = freshness_now(self.service, now)
        ratio = GaugeMetricFamily(
            "recrawl_freshness_ratio",
            "Estimated value-weighted share of the site's live pages whose stored copy "
            "still equals the live page: exp(-rate x time since the last successful "
            "fetch), 0 for a page never fetched (the change model's estimate).",
            labels=["site"],
        )
        value = GaugeMetricFamily(
            "recrawl_live_page_value",
            "Summed value of the site's live pages (the weight of its freshness ratio).",
            labels=["site"],
        )
        for site, (fresh, total) in sorted(by_site.items()):
            ratio.add_metric([site], fresh / total)
            value.add_metric([site], total)
        yield from (ratio, value)


def render_metrics(service: MeteredService) -> bytes:
    """The Prometheus text exposition of ``service``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return generate_latest(registry)


def freshness_now(service: MeteredService, now: float) -> dict[str, tuple[float, float]]:
    """Per site: ``(fresh value, live value)`` at ``now``
    (:meth:`~recrawl.engine.stats.FreshnessModel.by_site`). The model of the pages is
    read at the first call (empty when that fails: the error is logged), then again
    in a thread when :data:`FRESHNESS_EVERY_S` has passed and observations were
    stored since, at least once an hour (URLs added, sites paused), and when the
    clock went back; the scrapes meanwhile use the model they have."""
    mark = service.store.observation_mark()
    with _freshness_lock:
        kept = _freshness.get(service)
        if kept is not None and not kept.busy and not _still_good(kept, mark, now):
            kept.busy = True
            threading.Thread(
                target=_refresh, args=(service, kept, mark, now), name="recrawl-freshness",
                daemon=True,
            ).start()  # fmt: skip
    if kept is not None:
        return kept.model.by_site(now)
    try:
        model = freshness_model(service.engine, now)
    except Exception:
        _log.exception("estimating freshness failed")
        return {}
    with _freshness_lock:
        _freshness.setdefault(service, _Kept(mark, model))
    return model.by_site(now)


def _refresh(service: MeteredService, kept: _Kept, mark: int, now: float) -> None:
    try:
        model = freshness_model(service.engine, now)
    except Exception:  # the last model keeps serving; the next scrape retries
        _log.exception("estimating freshness failed")
        with _freshness_lock:
            kept.busy = False
        return
    with _freshness_lock:
        _freshness[service] = _Kept(mark, model)


def _still_good(kept: _Kept, mark: int, now: float) -> bool:
    age = now - kept.model.at
    return age >= 0.0 and (age < FRESHNESS_EVERY_S or (kept.mark == mark and age < 3600.0))
