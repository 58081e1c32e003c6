"""The engine: library calls that join the store, the planner and health.

The CLI, the HTTP service and the fetcher are thin edges over one
:class:`Engine`; none of them holds logic the others lack. The clock is
injected (``clock``) so a simulation can run days in seconds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from recrawl._exceptions import ConfigError, InvalidObservation
from recrawl.config import Settings
from recrawl.engine.alerts import AlertQueue, alert_events, log_alert
from recrawl.engine.ingest import (
    ContentClassifier,
    IngestReport,
    ingest_lines,
    ingest_observations,
)
from recrawl.engine.results import PageTable
from recrawl.engine.stats import compute_stats
from recrawl.engine.tasks import TaskRates, TaskTable
from recrawl.estimate.calibration import (
    Calibration,
    RevisitPredictions,
    calibration_report,
    revisit_predictions,
)
from recrawl.estimate.hints import (
    HINT_LAG_DEFAULT_S,
    TRUSTED_MEANS,
    Hint,
    HintVerdict,
    SourceTrust,
    ranges,
    reporting_lag,
    revisit_moves,
    signal_state,
    source_trust,
)
from recrawl.estimate.pagestate import NUTCH_DEFAULT_S
from recrawl.estimate.rates import DEFAULT_HALF_LIFE_DAYS, RateResolution, rate_resolution
from recrawl.observe.observation import Observation, host_of, normalize_url, show_value
from recrawl.plan.backoff import due, retry_wait_s
from recrawl.plan.cluster import SUPPORTED_POLICIES
from recrawl.plan.freshness import allocation_value, budget_for_freshness, optimal_allocation
from recrawl.plan.planner import (
    REASONS,
    SCORE,
    Plan,
    PlannerConfig,
    PlanPages,
    group_priors,
    plan_cycle,
    reallocate,
)
from recrawl.records.evidence import EVIDENCE_COLUMNS, planner_bins
from recrawl.records.pages import evidence_blob
from recrawl.records.signals import SignalCost, signal_costs
from recrawl.records.strings import CodeColumn, string_hashes
from recrawl.store import ContentHistory, EngineStore, HintResult, HintRows

__all__ = ["COST_PRIOR", "LAG_MEANS", "Engine", "HintReport", "PlanResult", "url_registration"]

DAY_S = 86400.0
COST_PRIOR: Final[dict[str, float]] = {"bytes": 256.0 * 1024, "credits": 1.0, "fetches": 1.0}
COST_SHRINK_FETCHES: Final = 5.0
"""Fetches' worth of weight the site × page type cost has in a page's own
cost: ``(what the page's fetches cost + 5 × the group's) / (its fetches + 5)``."""
"""Cost of one fetch, in each billing unit, assumed until the buckets hold
costs learned from fetches (:meth:`Engine.cost_prior`): 256 KiB of wire bytes
(a page of HTML with its headers, on the heavy side), one credit, one fetch.
A constant of the engine (not a setting): the first fetches replace it."""
_log = logging.getLogger(__name__)
HINT_TRUST_DAYS = 90.0
"""Days of revisits :meth:`Engine.hint_trust` judges the sources on, for the plan."""
_TRUST_TTL_S = 3600.0  # the plan's trust in the hint sources is judged again hourly
HINT_FUTURE_S = 300.0
"""Hints read (``seen_at``) more than this many seconds after the engine's clock
are refused (:meth:`Engine.ingest_hints`): a clock gone wrong, or a typo, would
vouch for pages until then."""
LAG_MEANS = (
    "Lag: how long after a page changes the source reports it (the 90th percentile of "
    "first seen minus lastmod over its moves; one day with fewer than 10 moves); a "
    "trusted source vouches for a page only until its latest read minus its lag."
)
"""What the lag means, in a sentence for people (the CLI's report and the service's)."""


@dataclass(frozen=True)
class HintReport:
    """Each hint source, and how far it is trusted per site (:meth:`Engine.hint_report`)."""

    days: float
    until: float | None
    sources: list[dict[str, Any]]
    trust: list[SourceTrust]
    lags: dict[tuple[str, str], float]

    def as_dict(self) -> dict[str, Any]:
        """As ``recrawl hints --json`` and ``GET /v1/hints``."""
        return {
            "days": self.days,
            "until": self.until,
            "sources": self.sources,
            "trust": [
                t.to_dict() | {"lag_s": self.lags.get((t.site, t.source))} for t in self.trust
            ],
            "trusted_means": TRUSTED_MEANS,
            "lag_means": LAG_MEANS,
        }


@dataclass(frozen=True)
class _Revisits:
    """The content revisits of a window (see :meth:`Engine._revisits`): the
    page columns, the history read, the rows of it kept (``keep``: fetches of
    pages still there, canaries left out) and the predictions made for them."""

    cols: dict[str, Any]
    history: ContentHistory
    keep: np.ndarray[Any, np.dtype[np.intp]]
    pred: RevisitPredictions
    since: float
    end: float


@dataclass
class PlanResult:
    """One cycle's plan: tasks best first, with what the cycle spends."""

    at: float
    budget: float
    spent: float
    tasks: Sequence[dict[str, Any]]
    """Best first: a :class:`~recrawl.engine.tasks.TaskTable` from
    :meth:`Engine.plan` (columns, each task a dict when read), or a list."""
    rates: Mapping[str, tuple[float, float]]
    """URL → the planned page's rate estimate and its sd, per day (not canaries)."""
    resolution: RateResolution | None = None
    """How many live pages' rates the revisits only bound from below (None: no pages)."""
    unit: str = "fetches"
    """The billing unit of ``budget``, ``spent`` and each task's ``cost``."""
    signals: Mapping[str, str] = field(default_factory=dict)
    """URL → the hint source that proved the planned page changed (a trusted
    ``sitemap``, ``feed``, ``listing``...), for the score tasks a signal caused; the
    fetcher reports it as the observation's ``signal``."""

    def split(self) -> dict[str, int]:
        """How many tasks each reason holds (score, discovery, reestimate, verify, canary)."""
        tasks = self.tasks
        table = tasks if isinstance(tasks, TaskTable) else None
        out: dict[str, int] = {}
        for t in tasks[: table.head] if table is not None else tasks:
            out[t["reason"]] = out.get(t["reason"], 0) + 1
        if table is not None and len(table.reason):
            # the rows' reasons counted as codes, in the order they first come
            # (a dict a task made 170 bytes a task of garbage at each /metrics scrape)
            codes, first, counts = np.unique(table.reason, return_index=True, return_counts=True)
            for i in np.argsort(first, kind="stable").tolist():
                name = REASONS[int(codes[i])]
                out[name] = out.get(name, 0) + int(counts[i])
        return out

    def as_dict(
        self,
        headers: Mapping[str, Mapping[str, str]] | None = None,
        *,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """The document of ``recrawl plan --json`` and ``GET /v1/plan``: the first
        ``limit`` tasks (all by default; ``tasks_total`` counts them all), each
        with its change-rate estimate (per day, None for canaries) and the
        ``headers`` its lease carries (see :meth:`Engine.plan_dict`) and the
        ``signal`` that proved the page changed (None: the schedule's)."""
        shown = self.tasks if limit is None else self.tasks[:limit]
        got = headers or {}
        tasks = []
        table = self.tasks if isinstance(self.tasks, TaskTable) else None
        for i, t in enumerate(shown):
            rate = table.rate_of(i) if table is not None else self.rates.get(t["url"])
            tasks.append(
                {
                    **t,
                    "headers": dict(got.get(t["url"], {})),
                    "rate_per_day": rate[0] if rate else None,
                    "rate_sd_per_day": rate[1] if rate else None,
                    "signal": self.signals.get(t["url"]),
                }
            )
        return {
            "at": self.at,
            "budget": self.budget,
            "spent": self.spent,
            "unit": self.unit,
            "split": self.split(),
            "rate_resolution": self.resolution.as_dict() if self.resolution else None,
            "tasks_total": len(self.tasks),
            "tasks": tasks,
        }


def _narrow(codes: np.ndarray[Any, Any], names: int) -> np.ndarray[Any, Any]:
    """``codes`` (into ``names`` names) in the narrowest unsigned integer that holds them."""
    dtype = np.uint8 if names <= 1 << 8 else np.uint16 if names <= 1 << 16 else np.int64
    return codes.astype(dtype)


def _constant(value: np.generic, n: int) -> np.ndarray[Any, Any]:
    """``n`` times ``value`` as a read-only view of it (no memory a page)."""
    return np.broadcast_to(value, (n,))


def _pair_codes(
    a: np.ndarray[Any, np.dtype[np.int64]],
    b: np.ndarray[Any, np.dtype[np.int64]],
    na: int,
    nb: int,
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Each ``(a, b)`` pair's rank among the distinct pairs, sorted (``a``
    codes of ``na`` names, ``b`` of ``nb``): ``np.unique``'s inverse, by a
    table of the ``na × nb`` pairs when it is small (no sort of every page,
    and its four arrays a page).

    >>> _pair_codes(np.array([1, 0, 1]), np.array([0, 2, 0]), 2, 3).tolist()
    [1, 0, 1]
    """
    pair = a * nb + b
    if na * nb > 4 * len(pair) + 1024:  # (a table larger than the pages)
        _, inverse = np.unique(pair, return_inverse=True)
        return inverse.astype(np.int64).reshape(-1)
    seen = np.zeros(na * nb, dtype=bool)
    seen[pair] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return rank[pair]


def _codes(values: Iterable[str]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], list[str]]:
    """Each value's index in the sorted list of the distinct values, and that list.

    One dictionary lookup a value: no array of fixed-width copies of the
    strings (as ``np.unique`` sorts them: 60 to 100 bytes a page, twice).

    >>> _codes(["b", "a", "b"])
    (array([1, 0, 1]), ['a', 'b'])
    """
    if isinstance(values, CodeColumn):  # coded already, its names sorted
        return values.codes.astype(np.int64), list(values.names)
    seen: dict[str, int] = {}
    first = np.fromiter((seen.setdefault(str(v), len(seen)) for v in values), np.int64)
    names = sorted(seen)
    rank = np.empty(len(names), np.int64)
    rank[[seen[name] for name in names]] = np.arange(len(names))
    return rank[first], names


_PLAN_COLUMNS: Final = (
    "url", "site", "page_type", "value", "first_seen", "last_ok", "last_fetch", "ev_nc",
    "ev_tc", "ev_nu", "ev_tu", "nutch_interval", "gone", "fails", "moved", "ev_bins",
)  # fmt: skip
"""The page columns :meth:`Engine.page_arrays` makes a plan's arrays of
(besides the cost history billing by bytes or credits, and the page ids
when hints are stored)."""
_PAGE_SORTS: Final = ("rate", "due", "value", "cost")
"""The orders of :meth:`Engine.pages`."""


def _nan_none(a: np.ndarray[Any, Any]) -> list[float | None]:
    """``a`` as a list, None where it is NaN."""
    out = a.astype(object)
    out[np.isnan(a)] = None
    return list(out.tolist())


def _id_index(ids: np.ndarray[Any, Any], *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A lookup array from page id to the position of that id in ``ids`` (−1:
    not there), long enough to be indexed by every id of ``ids`` and ``others``."""
    top = max([int(a.max()) for a in (ids, *others) if len(a)], default=-1)
    out = np.full(top + 1, -1, dtype=np.intp)
    out[ids] = np.arange(len(ids))
    return out


def _recode(
    codes: np.ndarray[Any, np.dtype[np.int64]], names: list[str], into: list[str]
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``codes`` (indexes of ``names``) as indexes of ``into`` (−1: not there)."""
    where = {name: i for i, name in enumerate(into)}
    table = np.array([where.get(name, -1) for name in names] + [-1], dtype=np.int64)
    out: np.ndarray[Any, np.dtype[np.int64]] = table[codes]
    return out


def _by_whom(by: str, reason: str) -> str:
    """A site event's detail for a human's decision: ``by ana: owner asked``."""
    return f"by {by}" + (f": {reason}" if reason else "")


def url_registration(row: dict[str, Any]) -> tuple[str, str, str, float]:
    """``(url, site, page_type, value)`` for a URL registration dict, validated.

    ``url`` is normalised, ``site`` defaults to its host, ``page_type`` to
    ``page``, ``value`` to 1. Raises ValueError (or KeyError without ``url``).

    >>> url_registration({"url": "HTTPS://Shop.Example/p/1", "value": 2})
    ('https://shop.example/p/1', 'shop.example', 'page', 2.0)
    """
    try:
        url = normalize_url(str(row["url"]))
    except ValueError as exc:
        raise ValueError(f"field 'url': {exc}") from None
    raw = row.get("value", 1.0)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"field 'value': {show_value(raw)} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"field 'value': must be a number ≥ 0, got {show_value(raw)}")
    page_type = str(row.get("page_type") or "page")
    if page_type == "canary":
        raise ValueError(
            "field 'page_type': 'canary' is reserved for canaries (recrawl canary add)"
        )
    return url, str(row.get("site") or host_of(url)), page_type, value


def url_items(
    items: Iterable[Any],
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, Any, str | None, str]]]:
    """Registration items as a client posts them (a URL string, or an object
    with ``url`` and any of ``site``, ``page_type``, ``value``), each checked
    with :func:`url_registration`: ``(good, bad)``, ``good`` as ``(index,
    row)`` with the URL normalised and only the keys given, ``bad`` as
    ``(index, url as given or None, field or None, reason)``; one bad item
    never hides another or the good ones."""
    good: list[tuple[int, dict[str, Any]]] = []
    bad: list[tuple[int, Any, str | None, str]] = []
    for i, item in enumerate(items):
        row = {"url": item} if isinstance(item, str) else item
        if not isinstance(row, dict):
            bad.append((i, None, None, "not a URL string nor an object with a url"))
            continue
        given = row.get("url")
        if given is None:
            bad.append((i, None, "url", "is missing"))
            continue
        try:
            url = url_registration(row)[0]
        except (ValueError, TypeError) as exc:
            field, _, reason = str(exc).partition(": ")
            named = field.startswith("field '")
            bad.append((i, given, field[7:-1] if named else None, reason if named else str(exc)))
            continue
        keys = ("site", "page_type", "value")
        good.append((i, {"url": url, **{k: row[k] for k in keys if row.get(k) is not None}}))
    return good, bad


@dataclass
class BudgetOutlook:
    """What freshness costs at the current rate estimates (see :meth:`Engine.budget_outlook`)."""

    at: float
    pages: int
    """Live, revisitable pages counted (fetched at least once, value > 0, site not paused)."""
    never_fetched: int
    """Live pages without a fetch yet: no rate of their own, not counted."""
    budget_per_day: float | None
    freshness_at_budget: dict[str, float] | None
    """Mean freshness at ``budget_per_day``: ``optimal``, the planner's split of
    what its reserves leave (their fetches refresh pages too: a lower bound), and
    ``uniform``, one interval for every page."""
    targets: list[dict[str, float]]
    """Per target: ``freshness``; the daily budget the ``optimal`` split needs and
    ``uniform`` needs; and ``configure``, the ``budget_per_day`` that leaves the
    planner ``optimal`` after its reserves."""
    resolution: RateResolution | None
    reserve_share: float = 0.0
    """Share of each cycle the planner keeps for verification and re-estimation."""
    unit: str = "fetches"
    """The billing unit of every budget here."""

    def as_dict(self) -> dict[str, Any]:
        """The document of ``recrawl budget --json`` and ``GET /v1/budget``."""
        return {
            "at": self.at,
            "unit": self.unit,
            "pages": self.pages,
            "never_fetched": self.never_fetched,
            "budget_per_day": self.budget_per_day,
            "reserve_share": self.reserve_share,
            "freshness_at_budget": self.freshness_at_budget,
            "targets": self.targets,
            "rate_resolution": self.resolution.as_dict() if self.resolution else None,
        }


class Engine:
    """recrawl's main loop over one store.

    Parameters
    ----------
    store : EngineStore
        Where pages, observations and health live.
    settings : Settings
        Billing unit, budget per day, cycle length, objective, reserves.
    clock : callable
        Returns unix seconds; ``time.time`` by default.
    """

    def __init__(
        self,
        store: EngineStore,
        settings: Settings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings or Settings()
        if settings is not None:  # what its acknowledged writes survive (without: the store's own)
            store.set_durability(settings.durability)
        self.clock = clock
        self.classifier = ContentClassifier(self.settings.block_markers)
        """The content checks every ingest through this engine runs: block-page
        markers (the built-in ones and ``settings.block_markers``), bodies far
        smaller than normal, empty records. The CLI and the service ingest
        through it too, so all three classify alike."""
        # page_info's model, re-solved each hour or when the store changed
        self._model_cache: tuple[tuple[int, int], Any, dict[str, int]] | None = None
        self._alerts: AlertQueue | None = None  # started at the first alert with a webhook
        # the plan's trust in the hint sources and their reporting lags, judged
        # again each hour (key: hour; kept in the store's meta too), and the
        # latest hints (key: hints_version)
        self._trust_cache: tuple[int, list[SourceTrust], dict[tuple[str, str], float]] | None = None
        self._hint_cache: tuple[int, HintRows] | None = None

    # -- observations ----------------------------------------------------------------------

    def ingest(
        self,
        observations: Iterable[Observation],
        *,
        on_batch: Callable[[IngestReport], None] | None = None,
        now: float | None = None,
    ) -> IngestReport:
        """Store observations (idempotent; durable when this returns), with the
        content checks of :attr:`classifier`. Given ``now`` (unix seconds), one
        fetched more than :data:`~recrawl.engine.pipeline.FUTURE_TOLERANCE_S`
        (an hour) after it is rejected: a wrong clock or date. Not checked by
        default: a simulation may report ahead of a clock it does not move."""
        return ingest_observations(
            self.store, observations, classifier=self.classifier, on_batch=on_batch, now=now
        )

    def ingest_lines(
        self,
        lines: Iterable[str],
        *,
        fmt: Literal["jsonl", "csv"] = "jsonl",
        on_batch: Callable[[IngestReport], None] | None = None,
        on_error: Callable[[InvalidObservation], None] | None = None,
        now: float | None = None,
    ) -> IngestReport:
        """Parse and store JSONL (or CSV) lines as ``recrawl ingest`` does: the
        configured page types' field rules, the content checks of
        :attr:`classifier`; bad lines reported (:func:`recrawl.engine.ingest.ingest_lines`),
        among them, given ``now`` (unix seconds; ``recrawl ingest`` passes the
        time), lines dated more than an hour after it."""
        return ingest_lines(
            self.store, lines, fmt=fmt, rules=self.settings.page_types,
            classifier=self.classifier, on_batch=on_batch, on_error=on_error, now=now,
        )  # fmt: skip

    def stats(self, unit: str | None = None) -> dict[str, Any]:
        """The same dict as ``recrawl stats --json``."""
        u = unit or self.settings.billing_unit
        return compute_stats(self.store.group_totals(), u)  # type: ignore[arg-type]

    def add_urls(self, rows: Iterable[dict[str, Any]], now: float | None = None) -> int:
        """Register URLs for discovery: dicts with ``url`` and optional ``site``,
        ``page_type``, ``value``; returns how many were new. A known URL that is
        gone or retired by a redirect is revived: planned again, its failure
        count cleared, its history kept. Raises ValueError naming a bad URL
        (nothing is stored then)."""
        t = self.clock() if now is None else now
        return self.store.add_urls([url_registration(r) for r in rows], t)

    def update_values(self, rows: Iterable[dict[str, Any]]) -> int:
        """Re-tier known URLs: dicts with ``url`` and ``value`` (≥ 0). The planner
        splits the budget by the new values from its next plan; a page's history
        stays. URLs the store does not know are skipped. Returns how many pages'
        values changed. Raises ValueError naming a bad URL or value (nothing is
        changed then)."""
        changes = []
        for r in rows:
            if "value" not in r:
                raise ValueError(f"no value to set for {show_value(r.get('url'))}")
            url, _, _, value = url_registration({"url": r["url"], "value": r["value"]})
            changes.append((url, value))
        return self.store.set_values(changes)

    def remove_urls(self, urls: Iterable[str]) -> int:
        """Forget URLs: their pages, fetch logs, leases and canary declarations
        leave the store; stats and health keep the counts they already hold. A
        URL reported or registered again later starts over as a new page.
        Returns how many were known. Raises ValueError naming a bad URL."""
        return self.store.remove_urls([url_registration({"url": u})[0] for u in urls])

    # -- canaries

    def canaries(self) -> list[dict[str, Any]]:
        """Every declared canary, by site and URL: ``url``, ``site``, ``expect``
        (field → value), ``every_s`` (seconds between fetches), ``added_at``
        and ``last_fetch`` (unix seconds, None before its first fetch)."""
        return self.store.canaries()

    def add_canary(
        self,
        url: str,
        expect: Mapping[str, str],
        *,
        site: str | None = None,
        every_s: float = 3600.0,
    ) -> dict[str, Any]:
        """Declare (or replace) a canary: ``url`` (normalised) must carry
        ``expect``, fetched every ``every_s`` seconds (1 minute to 30 days)
        outside the budget; ``site`` defaults to its host. Returns the
        declaration as :meth:`canaries` lists it. Raises ValueError for a bad
        URL, expectation or cadence."""
        norm = normalize_url(url)
        if not expect:
            raise ValueError("a canary needs at least one expected field")
        if not (60.0 <= every_s <= 30 * DAY_S):
            raise ValueError("every must be between 1 minute and 30 days")
        the_site = site or host_of(norm)
        self.store.add_canary(norm, the_site, dict(expect), every_s, self.clock())
        return next(c for c in self.store.canaries() if c["url"] == norm)

    def remove_canary(self, url: str) -> bool:
        """Withdraw the canary on ``url``: a page made for it (page type
        ``canary``) leaves the store with its log, as :meth:`remove_urls`; a
        page of another type stays and is planned as before. Returns whether a
        canary was declared there. Raises ValueError for a bad URL."""
        norm = normalize_url(url)
        if norm not in {c["url"] for c in self.store.canaries()}:
            return False
        page = self.store.page(norm)
        if page is not None and page.page_type == "canary":
            return self.store.remove_urls([norm]) > 0
        return self.store.remove_canary(norm)

    def log_end(self) -> float | None:
        """The newest fetch the store knows of (unix seconds; a pruned page's
        included), None when it holds no fetch."""
        last = np.asarray(self.store.page_columns()["last_fetch"], dtype=np.float64)
        last = last[np.isfinite(last)]
        return float(last.max()) if len(last) else None

    def urls(
        self, *, site: str | None = None, page_type: str | None = None
    ) -> list[dict[str, Any]]:
        """The registered and reported URLs (canaries' own pages left out; see
        :meth:`~recrawl.store.EngineStore.canaries`), by URL: each with its
        ``site``, ``page_type``, ``value``, ``first_seen`` and ``last_fetch``
        (unix seconds, None when never fetched) and ``state``: ``new`` (never
        fetched), ``known``, ``gone`` or ``moved`` (retired by a redirect).
        ``site`` and ``page_type`` keep only theirs."""
        cols = self.store.page_columns()
        rows: list[dict[str, Any]] = []
        for i, url in enumerate(cols["url"]):
            s, t = cols["site"][i], cols["page_type"][i]
            if t == "canary" or (site is not None and s != site):
                continue
            if page_type is not None and t != page_type:
                continue
            last = float(cols["last_fetch"][i])
            fetched = math.isfinite(last)
            if bool(cols["moved"][i]):
                state = "moved"
            elif bool(cols["gone"][i]):
                state = "gone"
            else:
                state = "known" if fetched else "new"
            rows.append(
                {
                    "url": url, "site": s, "page_type": t, "value": float(cols["value"][i]),
                    "first_seen": float(cols["first_seen"][i]),
                    "last_fetch": last if fetched else None, "state": state,
                }
            )  # fmt: skip
        return rows

    # -- planning --------------------------------------------------------------------------

    def _unit_costs(self) -> dict[tuple[str, str], float]:
        """Cost of one fetch per (site, page type), learned from the buckets, in the billing unit."""
        unit = self.settings.billing_unit
        if unit == "fetches":
            return {}
        out: dict[tuple[str, str], float] = {}
        for g in self.store.group_totals():
            if g.fetches:
                total = g.bytes_sent + g.bytes_received if unit == "bytes" else g.credits
                out[(g.site, g.page_type)] = max(total / g.fetches, 1e-9)
        return out

    def cost_prior(self, known: Mapping[tuple[str, str], float]) -> float:
        """The cost assumed for one fetch of a (site, page type) whose cost is not
        learned yet, in the billing unit: the dearest learned cost when some
        are known, else :data:`COST_PRIOR` (bytes: 256 KiB; credits and
        fetches: 1). A guess on the high side keeps a cold start within its
        budget: guessing low, the first cycles would plan far more fetches than
        the budget pays for."""
        if known:
            return max(known.values())
        return COST_PRIOR[self.settings.billing_unit]

    def page_arrays(
        self,
        now: float,
        exclude: set[str] | None = None,
        *,
        signals: bool = True,
        exclude_sites: Collection[str] = (),
        columns: Collection[str] | None = None,
        local_policy: str | None = None,
    ) -> tuple[PlanPages, dict[str, Any]]:
        """The planner's arrays for every page, and the columns they came from
        (only ``columns`` when given: the others are let go once read, which
        lowers the peak of a plan by a third).

        With ``local_policy``, the arrays are for a plan of that policy in
        this process, which does not write them: what it does not read is a
        read-only view of one number, not an array a page (the host codes
        without ``max_per_host``, the Nutch intervals but for ``nutch``),
        and so is the cost when every page has the same.

        The columns also hold ``live``: pages neither gone, retired (moved) nor
        canaries, whether ``exclude`` holds them or not; and ``due``: pages
        whose back-off after a failed fetch, or re-check wait when gone, is
        over at ``now`` (:func:`recrawl.plan.backoff.due`). ``active`` (what
        the plan may offer) is the due pages that are live or gone, minus
        ``exclude`` and the pages of ``exclude_sites``. The freshness math still counts from the last
        *successful* fetch (``last_fetch`` of the arrays).
        With ``signals``, ``checked_at`` and ``known_stale`` come from the
        latest hints of the sources trusted on each page's site
        (:meth:`_hint_signals`); without hints in the store, they stay None.
        """
        unit = self.settings.billing_unit
        hints = self.store.hints_version() if signals else 0
        if columns is None:
            cols = self.store.page_columns()
        else:
            # only what the arrays and ``columns`` are made of (no cost
            # history billing by fetches, no page ids without hints), the
            # bins as the planner reads them: 150 bytes a page less at the peak
            need = {*_PLAN_COLUMNS, *columns}
            if local_policy is not None and local_policy != "nutch":
                need.discard("nutch_interval")
            if unit != "fetches":
                need |= {"fetches", "bytes_total" if unit == "bytes" else "credits_total"}
            if hints:
                need.add("id")
            cols = self.store.page_columns(need, planner_bins=True)
        n = len(cols["url"])
        bins = planner_bins(cols.get("ev_bins"))
        if columns is not None:
            for name in ("ev_bins", "avg_bytes"):
                if name not in columns:
                    cols.pop(name, None)
        site_code, site_names = _codes(cols["site"])
        type_code, type_names = _codes(cols["page_type"])
        # (site, page type) pairs in the order of their names, as site_code's
        group_code = _pair_codes(site_code, type_code, len(site_names), len(type_names))
        lean = local_policy is not None
        if lean and self.settings.max_per_host is None:
            host_code = _constant(np.int64(0), n)  # no host cap: the hosts go unread
        else:
            host_code, _ = _codes(u.split("/", 3)[2] for u in cols["url"])
        costs = self._unit_costs()
        if costs:
            default = self.cost_prior(costs)
            cost = np.array(
                [
                    costs.get((s, t), default)
                    for s, t in zip(cols["site"], cols["page_type"], strict=True)
                ]
            )
        else:
            prior = self.cost_prior({})
            cost = _constant(np.float64(prior), n) if lean else np.full(n, prior)
        if unit != "fetches" and n:
            # each page's own cost a fetch, shrunk toward its site and type's
            # (issue 29, item 3): a page twice as heavy as its siblings is
            # planned at about twice their cost once it has a few fetches
            paid = cols["bytes_total"] if unit == "bytes" else cols["credits_total"]
            fetched = cols["fetches"].astype(np.float64)
            cost = (paid + COST_SHRINK_FETCHES * cost) / (fetched + COST_SHRINK_FETCHES)
        if columns is not None:
            for name in ("fetches", "bytes_total", "credits_total"):
                if name not in columns:
                    cols.pop(name, None)
        controls = self.store.site_controls()
        mult = np.array(
            [float(controls.get(s, {}).get("cost_multiplier") or 1.0) for s in site_names]
        )
        paused = np.array([bool(controls.get(s, {}).get("paused")) for s in site_names], dtype=bool)
        never = np.isnan(cols["last_ok"])
        last = np.where(never, cols["first_seen"], cols["last_ok"])
        page_kind = ~cols["moved"]
        if "canary" in type_names:
            page_kind &= type_code != type_names.index("canary")
        cols["live"] = ~cols["gone"] & page_kind
        # a failed fetch is a visit: a page that failed (or went gone: then it
        # is re-checked rarely) waits its back-off after its last fetch
        cols["due"] = due(
            cols["last_fetch"], cols["fails"], cols["gone"], now,
            cycle_s=self.settings.cycle_hours * 3600.0,
        )  # fmt: skip
        active = page_kind & cols["due"]
        if exclude and n:
            # by hash first: no string made but for the few pages that may be excluded
            maybe = np.isin(string_hashes(cols["url"]), [hash(u) for u in exclude])
            for i in np.flatnonzero(maybe).tolist():
                if cols["url"][i] in exclude:
                    active[i] = False
        if exclude_sites and n:
            skipped = np.isin(np.asarray(site_names, dtype=object), list(exclude_sites))
            active &= ~skipped[site_code]
        pages = PlanPages(
            value=np.asarray(cols["value"], dtype=np.float64),
            cost=cost,
            site=_narrow(site_code, len(site_names)) if lean else site_code,
            host=host_code,
            group=group_code.astype(np.int32) if lean and len(group_code) < 1 << 31 else group_code,
            last_fetch=last,
            first_seen=cols["first_seen"],
            never_fetched=never,
            ev_nc=cols["ev_nc"],
            ev_tc=cols["ev_tc"],
            ev_nu=cols["ev_nu"],
            ev_tu=cols["ev_tu"],
            nutch_interval=_constant(np.float64(NUTCH_DEFAULT_S), n)
            if lean and local_policy != "nutch"
            else np.nan_to_num(cols["nutch_interval"], nan=NUTCH_DEFAULT_S),
            site_cost_multiplier=mult if len(mult) else np.ones(1),
            site_paused=paused if len(paused) else np.zeros(1, dtype=bool),
            active=active,
            ev_bins=bins,
        )
        if hints and n:
            checked, stale, notified = self._hint_signals(
                now, cols, site_code, site_names, version=hints
            )
            if checked is not None:
                pages = replace(pages, checked_at=checked, known_stale=stale, notified=notified)
        if columns is not None:
            cols = {name: cols[name] for name in columns if name in cols}
        return pages, cols

    # -- cheap signals (recrawl.hints) -------------------------------------------------------

    def ingest_hints(
        self,
        hints: Iterable[Hint],
        *,
        add_urls: bool = False,
        on_batch: Callable[[HintResult], None] | None = None,
    ) -> HintResult:
        """Store hints (:meth:`~recrawl.store.EngineStore.ingest_hints`, ``on_batch`` called with
        the running totals after each transaction); the next plan judges the
        sources again.

        Hints read (``seen_at``) more than :data:`HINT_FUTURE_S` after the
        engine's clock are refused: counted in :attr:`HintResult.future`, not
        stored (one would vouch for its page until then).
        """
        limit = self.clock() + HINT_FUTURE_S
        future = 0

        def timely() -> Iterator[Hint]:
            nonlocal future
            for h in hints:
                if h.seen_at > limit:
                    future += 1
                else:
                    yield h

        def counted(r: HintResult) -> None:
            if on_batch is not None:
                on_batch(replace(r, future=r.future + future))

        result = self.store.ingest_hints(
            timely(), add_urls=add_urls, on_batch=None if on_batch is None else counted
        )
        result.future += future
        return result

    def hint_trust(
        self, *, days: float = HINT_TRUST_DAYS, until: float | None = None
    ) -> list[SourceTrust]:
        """How far each source's ``lastmod`` agreed with what the revisits of
        the last ``days`` found, per site and source (:func:`recrawl.hints.source_trust`).

        The window ends at ``until`` (unix seconds; default: the newest fetch in
        the log), as :meth:`calibration`'s. A revisit counts for a source when
        the source listed the page at the revisit's previous fetch already and
        was read again after the revisit; it ``moved`` when one of the
        source's ``lastmod`` values for the page falls between the two fetches.
        Empty without hints.
        """
        if not (0 < days < math.inf):
            raise ValueError("days must be a positive number")
        if self.store.hints_version() == 0:
            return []
        latest = self.store.hint_state()
        if not len(latest):
            return []
        rv = self._revisits(days, until)
        pred = rv.pred
        if not len(pred.page):
            return []
        prev = pred.at - pred.interval_days * DAY_S
        log = self.store.hint_log(float(prev.min()))
        index = _id_index(rv.cols["id"], latest.page, log.page)
        site_code, site_names = _codes(rv.cols["site"])
        # each (page, source) pair the latest hints hold, by page: a revisit
        # meets every source that lists its page, all sources at once
        n_src = max(len(latest.sources), 1)
        l_idx = index[latest.page]
        order = np.flatnonzero(l_idx >= 0)
        order = order[np.lexsort((latest.source[order], l_idx[order]))]
        pair_page, pair_src = l_idx[order], latest.source[order]
        lo = np.searchsorted(pair_page, pred.page, side="left")
        count = np.searchsorted(pair_page, pred.page, side="right") - lo
        rev = np.repeat(np.arange(len(pred.page)), count)
        pair = ranges(lo, count)
        # the log's rows, on the same pairs (−1: a pair the latest hints lack)
        g_idx = index[log.page]
        g_src = _recode(log.source, log.sources, latest.sources)
        key = pair_page * n_src + pair_src
        g_key = g_idx * n_src + g_src
        at = np.minimum(np.searchsorted(key, g_key), max(len(key) - 1, 0))
        g_pair = np.where((g_idx >= 0) & (g_src >= 0) & (len(key) > 0) & (key[at] == g_key), at, -1)
        in_log = g_pair >= 0
        covered, moved = revisit_moves(
            pair, prev[rev], pred.at[rev], g_pair[in_log], log.lastmod[in_log],
            latest.first_seen[order], latest.last_seen[order],
        )  # fmt: skip
        return source_trust(
            site_code[pred.page[rev]],
            pair_src[pair],
            covered,
            moved,
            pred.changed[rev],
            site_names,
            latest.sources,
            # a move must tell more than the model knew (hints.MIN_LIFT)
            predicted=pred.predicted[rev],
        )

    def hint_lags(
        self, *, days: float = HINT_TRUST_DAYS, until: float | None = None
    ) -> dict[tuple[str, str], float]:
        """Each source's reporting lag per site, in seconds: how long after a
        page's ``lastmod`` the source is read with it (its sitemap regenerated
        every few days, a feed cached, plus the time between reads).

        :func:`recrawl.hints.reporting_lag` of the ``lastmod`` moves first
        seen in the ``days`` before ``until`` (default: the newest fetch in
        the log, as :meth:`hint_trust`'s window); a page's first listing by a
        source is no move (its ``lastmod`` may be months old). A pair without
        a move gets :data:`recrawl.hints.HINT_LAG_DEFAULT_S`. Empty without hints. A source vouches for
        a page only until its latest read minus its lag
        (:func:`recrawl.hints.signal_state`).
        """
        if not (0 < days < math.inf):
            raise ValueError("days must be a positive number")
        if self.store.hints_version() == 0:
            return {}
        latest = self.store.hint_state()
        if not len(latest):
            return {}
        cols = self.store.page_columns()
        end = until
        if end is None:
            last = cols["last_fetch"]
            end = float(np.nanmax(last)) if np.any(~np.isnan(last)) else self.clock()
        log = self.store.hint_log(first_seen_after=end - days * DAY_S)
        keep = log.first_seen <= end
        site_code, site_names = _codes(cols["site"]) if len(cols["url"]) else (None, [])
        out: dict[tuple[str, str], float] = {}
        pairs: set[tuple[str, str]] = set()
        index = _id_index(cols["id"], latest.page, log.page)
        l_idx = index[latest.page]
        if site_code is not None:
            known = l_idx >= 0
            pair_rows = zip(
                site_code[l_idx[known]].tolist(), latest.source[known].tolist(), strict=True
            )
            for s, k in set(pair_rows):
                pairs.add((site_names[s], latest.sources[k]))
        n_src = max(len(latest.sources), 1)
        g_src = _recode(log.source, log.sources, latest.sources)
        g_idx = index[log.page]
        # when the source first listed the page: a log row then is no move
        lkey = latest.page * n_src + latest.source
        order = np.argsort(lkey)
        lkey_sorted = lkey[order]
        gkey = log.page * n_src + g_src
        pos = np.minimum(np.searchsorted(lkey_sorted, gkey), max(len(lkey_sorted) - 1, 0))
        found = (g_src >= 0) & (len(lkey_sorted) > 0)
        if len(lkey_sorted):
            found &= lkey_sorted[pos] == gkey
        listed = np.full(len(gkey), np.inf)
        listed[found] = latest.first_seen[order[pos[found]]]
        keep &= found & (g_idx >= 0) & (log.first_seen > listed)
        if site_code is not None and keep.any():
            seen, lastmod = log.first_seen[keep], log.lastmod[keep]
            key = site_code[g_idx[keep]] * n_src + g_src[keep]
            keys, inv = np.unique(key, return_inverse=True)
            for i, k in enumerate(keys.tolist()):
                mine = inv == i
                pair = (site_names[k // n_src], latest.sources[k % n_src])
                out[pair] = reporting_lag(seen[mine], lastmod[mine])
        return {p: out.get(p, HINT_LAG_DEFAULT_S) for p in sorted(pairs)}

    def hint_report(
        self, *, days: float = HINT_TRUST_DAYS, until: float | None = None
    ) -> HintReport:
        """The hint sources, their trust (:meth:`hint_trust`) and lags
        (:meth:`hint_lags`) over the same window."""
        return HintReport(
            days=days,
            until=until,
            sources=self.store.hint_sources(),
            trust=self.hint_trust(days=days, until=until),
            lags=self.hint_lags(days=days, until=until),
        )

    # -- what each signal cost and found (recrawl.records.signals) ---------------------------

    def signal_costs(self, *, site: str | None = None) -> list[SignalCost]:
        """What each cheap signal cost and found on each site (of ``site``),
        cheapest change first: ``recrawl signals``, ``GET /v1/signals``, the
        dashboard and ``/metrics``.

        A signal's cost is its own reads (sitemaps, feeds, listing pages:
        observations with ``signal_read``) plus the fetches it caused (the plan
        fetched a page because the signal proved it changed: the observation's
        ``signal``), in the billing unit; its changes are those the fetches it
        caused found. ``schedule`` is every other fetch. Cost per change is
        cost over changes (None before a change). Running totals since the
        store began keeping them."""
        rows = self.store.signal_spend()
        if site is not None:
            rows = [r for r in rows if r[0] == site]
        return signal_costs(rows, self.settings.billing_unit)

    def signal_report(self, *, site: str | None = None) -> dict[str, Any]:
        """``recrawl signals --json`` and ``GET /v1/signals``: the billing
        ``unit``, :meth:`signal_costs` as dicts, and per site the items that
        left every listing (``delisted``)."""
        delisted: dict[str, int] = {}
        for s, _ in self.store.listing_left().values():
            if site is None or s == site:
                delisted[s] = delisted.get(s, 0) + 1
        return {
            "unit": self.settings.billing_unit,
            "signals": [c.as_dict() for c in self.signal_costs(site=site)],
            "delisted": dict(sorted(delisted.items())),
        }

    def add_signal_reads(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Count reads of signals that are no observation (a sitemap or feed
        fetch): each row ``site``, ``signal``, ``bytes`` (wire bytes, headers
        included) and ``credits`` (default: one for a successful read, as a
        fetch). Returns how many were counted."""
        acc: dict[tuple[str, str], list[float]] = {}
        n = 0
        for r in rows:
            g = acc.setdefault((str(r["site"]), str(r["signal"])), [0.0, 0.0, 0.0])
            g[0] += 1
            g[1] += float(r.get("bytes") or 0)
            g[2] += float(r.get("credits", 1.0) or 0)
            n += 1
        self.store.add_signal_spend(
            [(site, sig, int(g[0]), g[1], g[2], 0, 0.0, 0.0, 0) for (site, sig), g in acc.items()]
        )
        return n

    def note_listing_left(self, rows: Iterable[tuple[str, str, float | None]]) -> None:
        """Note item pages that left every listing of their site (``(url, site,
        at)``: unix seconds, when noticed) or came back (``at`` None). A noted
        item is no longer vouched for, nor proven changed, by its listing
        hints; ``recrawl pages`` shows it ``delisted``."""
        self.store.set_listing_left(list(rows))

    def _judged_hints(self, now: float) -> tuple[list[SourceTrust], dict[tuple[str, str], float]]:
        """The plan's trust in the hint sources and their lags (:meth:`hint_trust`,
        :meth:`hint_lags` over :data:`HINT_TRUST_DAYS`), judged at most once an
        hour of ``now``: kept in memory, and in the store's meta as a
        :class:`~recrawl.estimate.hints.HintVerdict` so that the
        next process (``recrawl plan`` run again) reuses a judgement of the
        same hour rather than replaying the fetch log once more."""
        hour = int(now // _TRUST_TTL_S)
        if self._trust_cache is not None and self._trust_cache[0] == hour:
            return self._trust_cache[1], self._trust_cache[2]
        got = self._stored_verdict(hour)
        if got is None:
            trust = self.hint_trust()
            lags = self.hint_lags()
            got = (trust, lags)
            verdict = HintVerdict(
                trust=tuple(trust), lags=lags, hour=hour,
                hints_version=self.store.hints_version(), days=HINT_TRUST_DAYS,
            )  # fmt: skip
            try:
                self.store.set_hint_verdict(verdict.to_json())
            except Exception:  # a read-only store: judged again next time
                _log.debug("cannot keep the hint verdict", exc_info=True)
        self._trust_cache = (hour, *got)
        return got

    def _stored_verdict(
        self, hour: int
    ) -> tuple[list[SourceTrust], dict[tuple[str, str], float]] | None:
        """The judgement :meth:`_judged_hints` kept in the store for ``hour``, if any."""
        raw = self.store.hint_verdict()
        if raw is None:
            return None
        try:
            v = HintVerdict.from_json(raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if v.hour != hour or v.days != HINT_TRUST_DAYS:
            return None
        if v.hints_version > self.store.hints_version():
            return None  # another store's, or one rebuilt since
        return list(v.trust), dict(v.lags)

    def _hint_signals(
        self,
        now: float,
        cols: dict[str, Any],
        site_code: np.ndarray[Any, np.dtype[np.int64]],
        site_names: list[str],
        *,
        version: int | None = None,
    ) -> tuple[
        np.ndarray[Any, np.dtype[np.float64]] | None,
        np.ndarray[Any, np.dtype[np.bool_]] | None,
        np.ndarray[Any, np.dtype[np.bool_]] | None,
    ]:
        """The planner's ``checked_at``, ``known_stale`` and ``notified`` for the pages of
        ``cols`` (:meth:`~recrawl.store.EngineStore.page_columns`; ``site_code`` indexes
        ``site_names``, one per page): each trusted (site, source)
        pair's latest hints through :func:`recrawl.hints.signal_state` against
        the page's last success, several sources combined (the latest
        vouching, any change proven; ``notified``: listed by a source trusted
        both ways, :attr:`~recrawl.plan.planner.PlanPages.notified`).
        ``(None, None, None)`` when no source is trusted on any site, or the
        store holds no hints (one read of a counter).

        The trust (:meth:`hint_trust` over :data:`HINT_TRUST_DAYS`: it reads
        and replays the fetch log, seconds on a large store) is judged again at
        most once an hour of ``now``, whatever was written meanwhile (a trust
        built on weeks of revisits moves little in an hour); the latest hints
        are read again whenever hints were written.
        """
        if version is None:
            version = self.store.hints_version()
        if version == 0:
            return None, None, None
        trust, lags = self._judged_hints(now)
        trusted = {(t.site, t.source): t for t in trust if t.quiet or t.changes}
        if not trusted:
            return None, None, None
        if self._hint_cache is None or self._hint_cache[0] != version:
            self._hint_cache = (version, self.store.hint_state())
        latest = self._hint_cache[1]
        n = len(cols["url"])
        # per (site, source): trusted to vouch, to prove, and its lag
        n_src = len(latest.sources)
        quiet = np.zeros((len(site_names) + 1, n_src), dtype=bool)  # (last row: no page)
        proves = np.zeros_like(quiet)
        lag = np.full(quiet.shape, HINT_LAG_DEFAULT_S)
        s_index = {name: i for i, name in enumerate(site_names)}
        k_index = {name: k for k, name in enumerate(latest.sources)}
        for (site, source), t in trusted.items():
            i, k = s_index.get(site), k_index.get(source)
            if i is not None and k is not None:
                quiet[i, k], proves[i, k] = t.quiet, t.changes
                lag[i, k] = lags.get((site, source), HINT_LAG_DEFAULT_S)
        # every hint row at once, each against its page's last success
        idx = _id_index(cols["id"], latest.page)[latest.page]
        known = idx >= 0
        row_site = np.where(known, site_code[np.where(known, idx, 0)], len(site_names))
        src = latest.source
        c, st = signal_state(
            np.where(known, cols["last_ok"][np.where(known, idx, 0)], np.nan),
            latest.lastmod, latest.last_seen, quiet[row_site, src], proves[row_site, src],
            lastmod_seen=latest.lastmod_seen, now=now, lag=lag[row_site, src],
        )  # fmt: skip
        left = self.store.listing_left()
        if left and "listing" in k_index:
            # an item that left every listing of its site: the listing no longer speaks for it
            urls = cols["url"]
            rows = np.flatnonzero(known & (src == k_index["listing"]))
            out = [urls[j] in left for j in idx[rows].tolist()]
            known[rows[np.array(out, dtype=bool)]] = False
        checked = np.full(n, np.nan)
        vouched = known & ~np.isnan(c)
        np.fmax.at(checked, idx[vouched], c[vouched])  # the latest vouching source
        stale = np.zeros(n, dtype=bool)
        stale[idx[known & st]] = True  # any change proven
        # the source that proved each stale page changed: of several, the first to say so
        proven = np.full(n, None, dtype=object)
        rows = np.flatnonzero(known & st)
        if rows.size:
            rows = rows[np.lexsort((latest.lastmod_seen[rows], idx[rows]))]
            _, first = np.unique(idx[rows], return_index=True)
            rows = rows[first]
            proven[idx[rows]] = np.asarray(latest.sources, dtype=object)[src[rows]]
        cols["signal"] = proven
        notified = np.zeros(n, dtype=bool)
        both = quiet[row_site, src] & proves[row_site, src]
        notified[idx[known & both & ~np.isnan(latest.last_seen)]] = True
        return checked, stale, notified

    def planner_config(self) -> PlannerConfig:
        """The planner settings from the configuration."""
        s = self.settings
        kw: dict[str, Any] = {
            "cycle_hours": s.cycle_hours,
            "discovery_share": s.reserves.discovery,
            "reestimate_share": s.reserves.reestimate,
            "verify_share": s.reserves.verify,
        }
        if s.half_life_days is not None:
            kw["half_life_days"] = s.half_life_days
        if s.change_hazard_per_day is not None:
            kw["change_hazard_per_day"] = s.change_hazard_per_day
        if s.max_per_host is not None:
            kw["max_per_host"] = s.max_per_host
        return PlannerConfig(**kw)

    def plan(
        self,
        *,
        budget: float | None = None,
        now: float | None = None,
        objective: str | None = None,
        policy: str = "recrawl",
        exclude: set[str] | None = None,
        seed: int | None = None,
        exclude_sites: Collection[str] = (),
        cluster: str | None = None,
        parquet: str | None = None,
    ) -> PlanResult:
        """The next cycle's tasks: canaries that are due (outside the budget, also
        on paused sites), then the planner's choice under ``budget`` (billing
        units for one cycle; default ``budget_per_day`` × cycle length), none of
        the URLs in ``exclude`` nor of the pages of ``exclude_sites``.

        With ``cluster`` (default: the ``cluster`` setting), a Dask
        scheduler's address, the page state is exported as partitioned
        Parquet under ``parquet`` (default :meth:`cluster_root`) and the
        allocation and the cycle are computed on that cluster
        (:func:`recrawl.plan.dask.plan_on_cluster`): the same tasks up to ties
        at a cut-off (and, past 100,000 pages with revisits, priors fitted on
        a sample). Only the ``recrawl`` policy is planned there (ConfigError
        otherwise); :class:`~recrawl.ClusterUnreachable` when the scheduler
        does not answer.
        """
        t = self.clock() if now is None else now
        s = self.settings
        address = cluster or s.cluster
        if address and policy not in SUPPORTED_POLICIES:
            raise ConfigError(
                f"policy {policy!r} is not planned on a cluster; choose from {', '.join(SUPPORTED_POLICIES)}"
            )
        if budget is None:
            if s.budget_per_day is None:
                raise ValueError("no budget: pass one, or set budget_per_day in recrawl.toml")
            budget = s.budget_per_day * s.cycle_hours / 24.0
        if budget < 0 or not math.isfinite(budget):
            raise ValueError("the budget must be a non-negative number")
        obj: Literal["freshness", "events"] = (
            "events" if (objective or s.objective) == "events" else "freshness"
        )
        # of the columns, what the plan reads (the others, 150 bytes a page, go before it plans)
        pages, cols = self.page_arrays(
            t,
            exclude,
            exclude_sites=exclude_sites,
            columns=("url", "site", "page_type", "live", "signal"),
            local_policy=None if address else policy,
        )
        tasks: list[dict[str, Any]] = []
        for c in self.store.canaries():
            due = c["last_fetch"] is None or t - c["last_fetch"] >= c["every_s"]
            if due and not (exclude and c["url"] in exclude):
                tasks.append(
                    {"url": c["url"], "site": c["site"], "page_type": "canary", "reason": "canary",
                     "priority": math.inf, "expected_gain": 0.0, "cost": 0.0}
                )  # fmt: skip
        spent = 0.0
        resolution = None
        table: TaskTable | None = None
        signals: dict[str, str] = {}
        if len(pages):
            cfg = self.planner_config()
            # live fetched pages, leased or not; paused sites learn nothing until resumed
            learning = cols["live"] & ~pages.never_fetched & ~pages.site_paused[pages.site]
            resolution = rate_resolution(
                pages.ev_nc,
                pages.ev_tc,
                pages.ev_nu,
                pages.ev_tu,
                mask=learning,
                half_life_days=cfg.half_life_days,
            )
            rng = np.random.default_rng(seed if seed is not None else int(t) // 3600)
            plan: Plan
            if address:
                from recrawl.plan.dask import plan_on_cluster

                root = parquet or self.cluster_root()
                plan, _ = plan_on_cluster(
                    address, root, budget, t, pages=pages, objective=obj, config=cfg, rng=rng
                )
                rate, rate_sd = plan.rate_per_day, plan.rate_sd_per_day
            else:
                # the model gets the score pool, as plan_cycle and the replay give it
                per_day = budget * 24.0 / cfg.cycle_hours * cfg.score_pool_share(policy)
                model = reallocate(pages, per_day, t, policy=policy, objective=obj, config=cfg)
                plan = plan_cycle(
                    pages,
                    budget,
                    t,
                    policy=policy,
                    objective=obj,
                    config=cfg,
                    rng=rng,
                    model=model,
                )
                del pages, learning  # (the page arrays go before the plan's rates are taken)
                rate, rate_sd = model.rate_per_day[plan.index], model.rate_sd_per_day[plan.index]
                del model
            spent = plan.spent
            table = TaskTable(
                tasks, cols["url"], cols["site"], cols["page_type"], plan.index,
                plan.reason, plan.expected_gain, plan.cost, plan.priority, rate, rate_sd,
            )  # fmt: skip
            proven = cols.get("signal")
            if proven is not None:
                urls = cols["url"]
                # the score's tasks: a verification or re-estimation sample is not the signal's doing
                signals = {
                    urls[p]: str(proven[p])
                    for p, r in zip(plan.index.tolist(), plan.reason.tolist(), strict=True)
                    if r == SCORE and proven[p] is not None
                }
        if table is None:
            table = TaskTable.of(tasks)
        return PlanResult(
            at=t, budget=budget, spent=spent, tasks=table, rates=TaskRates(table),
            resolution=resolution, unit=s.billing_unit, signals=signals,
        )  # fmt: skip

    def cluster_root(self) -> str:
        """Where :meth:`plan` exports the page state for a cluster: the
        ``cluster_parquet`` setting, else ``<store>.parquet`` beside a SQLite
        store (``crawl.db`` → ``crawl.parquet``), else ``./recrawl.parquet``;
        a local directory as an absolute path (workers started elsewhere read it)."""
        if self.settings.cluster_parquet:
            return self.settings.cluster_parquet
        path = str(getattr(self.store, "path", "") or "")
        if path and "://" not in path and path != ":memory:":
            p = Path(path).absolute()
            beside = p.with_suffix(".parquet")
            return str(beside if beside != p else p.with_name(p.name + ".parquet"))
        return str(Path("recrawl.parquet").absolute())

    def plan_dict(self, plan: PlanResult, *, limit: int | None = None) -> dict[str, Any]:
        """``plan`` as ``recrawl plan --json`` and ``GET /v1/plan`` show it
        (:meth:`PlanResult.as_dict`), each task with the headers its lease would
        carry: validators for a conditional request, none for verification (the
        unconditional sample the 304 check needs) or canary tasks."""
        shown = plan.tasks if limit is None else plan.tasks[:limit]
        return plan.as_dict(self.headers_for_tasks(shown), limit=limit)

    def budget_outlook(
        self,
        targets: Sequence[float] = (0.8, 0.9, 0.95),
        *,
        budget_per_day: float | None = None,
        now: float | None = None,
    ) -> BudgetOutlook:
        """What each mean freshness would cost per day, at the rates estimated now.

        For the live pages with a fetch (value-weighted, at their effective
        cost): the daily budget at which the optimal allocation, and one
        interval for every page, reach each target under the Poisson model
        (:func:`recrawl.freshness.budget_for_freshness`); and the freshness
        ``budget_per_day`` (default: the configured one) buys. Model figures:
        pages whose revisits only bound their rate from below (``resolution``)
        may change faster than assumed, and these budgets then be too low.
        The planner keeps shares of each cycle for verification and
        re-estimation outside its split: each target's ``configure`` is the
        ``budget_per_day`` that leaves the split what it needs.
        """
        t = self.clock() if now is None else now
        targets = sorted(set(targets))
        for x in targets:
            if not 0.0 < x < 1.0:
                raise ValueError(f"a freshness target must be between 0 and 1, got {x}")
        if budget_per_day is None:
            budget_per_day = self.settings.budget_per_day
        elif budget_per_day <= 0 or not math.isfinite(budget_per_day):
            raise ValueError("the budget must be a positive number")
        pages, cols = self.page_arrays(t, signals=False)
        live = cols["live"] & ~pages.site_paused[pages.site]
        mask = live & ~pages.never_fetched & (pages.value > 0)
        cfg = self.planner_config()
        # the planner's model gets what verification and re-estimation leave
        # (discovery's share too, but only while pages wait for a first fetch)
        reserve = cfg.verify_share + cfg.reestimate_share
        resolution = None
        out_targets: list[dict[str, float]] = []
        at_budget = None
        if mask.any():
            resolution = rate_resolution(
                pages.ev_nc, pages.ev_tc, pages.ev_nu, pages.ev_tu,
                mask=mask, half_life_days=cfg.half_life_days,
            )  # fmt: skip
            rate = reallocate(pages, 1.0, t, policy="uniform", config=cfg).rate_per_day[mask]
            w = pages.value[mask]
            c = (pages.cost * pages.site_cost_multiplier[pages.site])[mask]
            for x in targets:
                need = {
                    a: budget_for_freshness(rate, x, weight=w, cost=c, allocation=a)
                    for a in ("optimal", "uniform")
                }
                out_targets.append(
                    {"freshness": x, **need, "configure": need["optimal"] / (1.0 - reserve)}
                )
            if budget_per_day is not None:
                split = budget_per_day * (1.0 - reserve)
                opt = optimal_allocation(rate, split, weight=w, cost=c).visits_per_day
                uni = budget_per_day / float(c.sum())
                at_budget = {
                    a: allocation_value(rate, f, weight=w) / float(w.sum())
                    for a, f in (("optimal", opt), ("uniform", uni))
                }
        return BudgetOutlook(
            at=t,
            pages=int(mask.sum()),
            never_fetched=int((live & pages.never_fetched).sum()),
            budget_per_day=budget_per_day,
            freshness_at_budget=at_budget,
            targets=out_targets,
            resolution=resolution,
            reserve_share=reserve,
            unit=self.settings.billing_unit,
        )

    def calibration(
        self,
        *,
        days: float = 30.0,
        by: Literal["site", "group"] = "site",
        until: float | None = None,
    ) -> Calibration:
        """Whether the change model predicted what the revisits of the last
        ``days`` found (:mod:`recrawl.calibration`).

        The window ends at ``until`` (unix seconds; default: the newest fetch
        in the log, so an old log is checked over its own last days). Each
        revisit's prediction comes from its page's evidence before it (the
        fold's, replayed from the log and, after a prune, from the page's
        checkpoint) and the planner's current group priors; canaries are left
        out. ``by`` groups the figures per ``site`` or per ``group`` (site and
        page type). Sites whose 304s hide changes are compared within bands
        of estimated rate (:func:`recrawl.calibration.validator_checks`);
        :meth:`apply_calibration` acts on them.
        """
        if not (0 < days < math.inf):
            raise ValueError("days must be a positive number")
        if by not in ("site", "group"):
            raise ValueError("by must be 'site' or 'group'")
        rv = self._revisits(days, until)
        cols, h, keep, pred = rv.cols, rv.history, rv.keep, rv.pred
        since, end = rv.since, rv.end
        src = keep[pred.row]
        if by == "site":
            groups, names = _codes([cols["site"][i] for i in pred.page.tolist()])
        else:
            groups, names = _codes(
                [f"{cols['site'][i]} / {cols['page_type'][i]}" for i in pred.page.tolist()]
            )
        cal = calibration_report(
            pred.predicted, pred.changed, groups, names,
            conditional=h.conditional[src], not_modified=h.not_modified[src],
            history=pred.history, rate_per_day=pred.rate_per_day, since=since, until=end,
        )  # fmt: skip
        return replace(cal, validators_off=sorted(self.store.sites_without_validators()), by=by)

    def _revisits(self, days: float, until: float | None) -> _Revisits:
        """The content revisits of the ``days`` before ``until`` (default: the
        newest fetch in the log), ``until`` included, canaries left out: the
        fetch log read once (:meth:`~recrawl.store.EngineStore.content_history`) and replayed
        (:func:`recrawl.calibration.revisit_predictions`), each revisit with its
        interval and what it found, for :meth:`calibration` and :meth:`hint_trust`."""
        pages, cols = self.page_arrays(self.clock(), signals=False)
        end = until
        if end is None:
            last = cols["last_fetch"]
            end = float(np.nanmax(last)) if np.any(~np.isnan(last)) else self.clock()
        since = end - days * 86400.0
        stop = float(np.nextafter(end, math.inf))  # the window includes ``end``
        h = self.store.content_history(since, stop)
        index = {u: i for i, u in enumerate(cols["url"])}
        canary = np.asarray(cols["page_type"], dtype=object) == "canary"
        for c in self.store.canaries():  # declared on a page of any type
            if c["url"] in index:
                canary[index[c["url"]]] = True
        # page id → index in cols (−1: removed since, or a canary)
        ids = np.fromiter(h.urls, np.int64, len(h.urls))
        at_index = np.fromiter((index.get(u, -1) for u in h.urls.values()), np.intp, len(ids))
        known = at_index >= 0
        at_index[known] = np.where(canary[at_index[known]], -1, at_index[known])
        o = np.argsort(ids)
        ids, at_index = ids[o], at_index[o]
        if len(ids):
            pos = np.minimum(np.searchsorted(ids, h.page), len(ids) - 1)
            pg = np.where(ids[pos] == h.page, at_index[pos], -1)
        else:
            pg = np.full(len(h.page), -1, dtype=np.intp)
        keep = np.flatnonzero(pg >= 0)
        n = len(cols["url"])
        first = np.full(n, np.nan)
        ev = np.zeros((4, n))
        evidence = np.zeros((n, EVIDENCE_COLUMNS), dtype=np.float32)
        for pid, (lo, *e) in h.checkpoints.items():
            i = index.get(h.urls.get(pid, ""), -1)
            if i >= 0:
                first[i] = lo
                ev[:, i] = e
                blob = evidence_blob(h.checkpoint_evidence.get(pid), e[0], e[1])
                evidence[i] = np.frombuffer(blob, dtype="<f4")
        hl = self.store.half_life_days
        pred = revisit_predictions(
            pg[keep], h.fetched_at[keep], h.kind[keep], pages.group, since=since, until=stop,
            start=(first, ev[0], ev[1], ev[2], ev[3]), priors=group_priors(pages),
            half_life_days=DEFAULT_HALF_LIFE_DAYS if hl is None else hl,
            start_evidence=evidence, hazard_per_day=self.planner_config().change_hazard_per_day,
        )  # fmt: skip
        return _Revisits(cols, h, keep, pred, since, end)

    def apply_calibration(self, cal: Calibration, *, now: float | None = None) -> list[str]:
        """Send no more validators to the sites whose 304s hide changes
        (:attr:`Calibration.hiding_changes` of a report by site), recorded
        with the figures; returns those turned off now. Nothing turns them
        back on by itself: a human does (:meth:`set_validators`), as for a
        pause."""
        if cal.by != "site":
            raise ValueError("validators are turned off per site: check the calibration by site")
        t = self.clock() if now is None else now
        done = []
        for v in cal.validators:
            if v.name in cal.hiding_changes:
                detail = (
                    f"by calibration: {v.full_changed} changes found by {v.conditional} "
                    f"conditional revisits where {v.expected_conditional:.1f} were expected "
                    f"({v.not_modified} answered 304; z {v.z:.1f})"
                )
                if self.store.set_validators(v.name, False, now=t, detail=detail):
                    done.append(v.name)
        return done

    def headers_for(self, url: str) -> dict[str, str]:
        """Validators for a conditional request to ``url`` (empty when unknown)."""
        return self.headers_for_many([url]).get(url, {})

    def headers_for_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
        """Validators for each task's fetch (``url`` and ``reason`` of each):
        none for a verification task (the unconditional sample that tells a
        host whose 304s hide changes, :meth:`calibration`) or a canary (a 304
        carries no record to check)."""
        return self.headers_for_many(
            [t["url"] for t in tasks if t.get("reason") not in ("verify", "canary")]
        )

    def headers_for_many(self, urls: Sequence[str]) -> dict[str, dict[str, str]]:
        """:meth:`headers_for` for several URLs in one store read."""
        out: dict[str, dict[str, str]] = {}
        for url, (etag, lm) in self.store.validators(urls).items():
            h: dict[str, str] = {}
            if etag:
                h["If-None-Match"] = etag
            if lm:
                h["If-Modified-Since"] = lm
            out[url] = h
        return out

    def page_info(self, url: str, now: float | None = None) -> dict[str, Any] | None:
        """A page's state, its change-rate estimate with uncertainty, and when it is next due."""
        t = self.clock() if now is None else now
        try:
            url = normalize_url(url)
        except ValueError:
            return None
        p = self.store.page(url)
        if p is None:
            return None
        model, index = self._page_model(t)
        i = index.get(url)
        if i is None:  # registered after the model was solved
            return None
        visits = float(model.visits_per_day[i])
        last = p.last_ok if p.last_ok is not None else p.first_seen
        return {
            "url": p.url,
            "site": p.site,
            "page_type": p.page_type,
            "value": p.value,
            "first_seen": p.first_seen,
            "last_fetch": p.last_fetch,
            "last_ok": p.last_ok,
            "last_change": p.last_change,
            "fetches": p.fetches,
            "changes": p.changes,
            "etag": p.etag,
            "last_modified": p.last_modified,
            "gone": p.gone,
            "rate_per_day": float(model.rate_per_day[i]),
            "rate_sd_per_day": float(model.rate_sd_per_day[i]),
            "visits_per_day": visits,
            "next_due": (last + DAY_S / visits) if visits > 0 else None,
        }

    def _page_model(
        self, t: float, arrays: tuple[PlanPages, dict[str, Any]] | None = None
    ) -> tuple[Any, dict[str, int]]:
        """The model of :meth:`page_info` and :meth:`pages` at ``t`` and each URL's
        row in it: solved once an hour or when the store changed (from ``arrays``,
        :meth:`page_arrays` at ``t`` without signals, when given)."""
        key = (int(t // 3600), self.store.version())
        cached = self._model_cache
        fits = arrays is None or (cached is not None and len(cached[2]) == len(arrays[1]["url"]))
        if cached is not None and cached[0] == key and fits:
            return cached[1], cached[2]
        pages, cols = arrays if arrays is not None else self.page_arrays(t, signals=False)
        per_day = self.settings.daily_budget(len(pages))
        model = reallocate(pages, per_day, t, config=self.planner_config())
        index = {u: j for j, u in enumerate(cols["url"])}
        self._model_cache = (key, model, index)
        return model, index

    def pages(
        self,
        *,
        site: str | None = None,
        now: float | None = None,
        limit: int | None = None,
        sort: str = "rate",
    ) -> PageTable:
        """What recrawl believes of every page (of ``site``): ``recrawl pages
        --json`` and ``GET /v1/pages``.

        The model is :meth:`page_info`'s (solved once for all pages, from one
        read of the page columns). ``sort``: ``rate`` (fastest first), ``due``
        (soonest first, pages without a due time last), ``value`` or ``cost``
        (highest first); ties keep the store's order (by URL). ``limit``: the
        first so many rows (all by default). Raises :class:`~recrawl.NotFound`
        for a site without pages and ValueError for another ``sort``.

        Each row: ``url``, ``site``, ``page_type``, ``value``; ``state``:
        ``moved`` (retired by a permanent redirect), ``gone`` (re-checked
        rarely), ``canary``, ``paused`` (its site is paused), ``backing_off``
        (its last ``fails`` fetches failed), ``new`` (never fetched),
        ``delisted`` (an item that left every listing of its site:
        :meth:`note_listing_left`) or ``ok``;
        ``rate_per_day`` (the estimated changes per day), ``rate_sd_per_day``
        and a 90 % interval ``rate_low_per_day`` – ``rate_high_per_day``: the
        estimator's Laplace approximation is normal in ln λ with standard
        deviation ``rate_sd_per_day / rate_per_day``, so the interval is
        ``rate × exp(∓1.645 × sd / rate)`` (a point when the sd is 0); the
        evidence behind it, decayed with the evidence half-life as of the last
        fetch (:mod:`recrawl.estimate.rates`): ``evidence_changed`` and
        ``evidence_unchanged`` (revisit intervals that showed a change, and
        none) and ``evidence_days`` (their total length); ``cost``: one fetch
        in the billing unit as the planner counts it (its site × page type's
        learned cost, or the cost prior, times the site's cost multiplier);
        ``visits_per_day`` (the allocation's target, 0 for none) and
        ``cost_per_day``; ``next_due`` (unix seconds): the last success, or
        discovery, plus one allocated interval; for a page backing off or
        gone, when its wait after the last fetch ends; None for a page with
        no visits allocated, moved, or on a paused site; ``first_seen``,
        ``last_fetch``, ``last_ok`` (unix seconds, None when never) and
        ``fails``.
        """
        if sort not in _PAGE_SORTS:
            raise ValueError(f"sort must be one of {', '.join(_PAGE_SORTS)}, got {sort!r}")
        if limit is not None and limit < 0:
            raise ValueError("limit must be a whole number ≥ 0")
        t = self.clock() if now is None else now
        pages, cols = self.page_arrays(t, signals=False)
        model, _ = self._page_model(t, (pages, cols))
        n = len(cols["url"])
        site_of = np.asarray(cols["site"], dtype=object)
        if site is None:
            rows = np.arange(n)
        else:
            rows = np.flatnonzero(site_of == site)
            if not rows.size:
                from recrawl._exceptions import NotFound

                raise NotFound(f"no site {site!r} in the store")
        rate = model.rate_per_day[rows]
        sd = model.rate_sd_per_day[rows]
        visits = model.visits_per_day[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.where(rate > 0, np.exp(1.645 * sd / rate), 1.0)
        cost = pages.cost[rows] * pages.site_cost_multiplier[pages.site[rows]]
        moved = cols["moved"][rows]
        gone = cols["gone"][rows]
        fails = cols["fails"][rows]
        paused = pages.site_paused[pages.site[rows]]
        canary = np.asarray(cols["page_type"], dtype=object)[rows] == "canary"
        never = pages.never_fetched[rows]
        last_fetch = cols["last_fetch"][rows]
        state = np.full(len(rows), "ok", dtype=object)
        left = self.store.listing_left()
        delisted = np.zeros(len(rows), dtype=bool)
        if left:
            urls = cols["url"]
            delisted[:] = [urls[j] in left for j in rows.tolist()]
        # the first that holds wins: fill from the last to the first
        for name, mask in (
            ("delisted", delisted),
            ("new", never),
            ("backing_off", fails > 0),
            ("paused", paused),
            ("canary", canary),
            ("gone", gone),
            ("moved", moved),
        ):
            state[mask] = name
        with np.errstate(divide="ignore"):
            due_at = np.where(visits > 0, pages.last_fetch[rows] + DAY_S / visits, np.nan)
        waiting = (fails > 0) | gone
        if waiting.any():
            wait = retry_wait_s(fails, gone, cycle_s=self.settings.cycle_hours * 3600.0)
            due_at = np.where(waiting, last_fetch + wait, due_at)
        due_at[moved | (paused & ~canary)] = np.nan
        order = self._page_order(sort, rate, due_at, cols["value"][rows], cost)
        if limit is not None:
            order = order[:limit]
        names, counts = np.unique(state.astype(str), return_counts=True)
        ev = rows[order]
        columns: dict[str, list[Any]] = {
            "url": [cols["url"][j] for j in ev.tolist()],
            "site": site_of[ev].tolist(),
            "page_type": np.asarray(cols["page_type"], dtype=object)[ev].tolist(),
            "value": cols["value"][ev].tolist(),
            "state": state[order].tolist(),
            "rate_per_day": rate[order].tolist(),
            "rate_low_per_day": (rate / spread)[order].tolist(),
            "rate_high_per_day": (rate * spread)[order].tolist(),
            "rate_sd_per_day": sd[order].tolist(),
            "evidence_changed": cols["ev_nc"][ev].tolist(),
            "evidence_unchanged": cols["ev_nu"][ev].tolist(),
            "evidence_days": (cols["ev_tc"][ev] + cols["ev_tu"][ev]).tolist(),
            "cost": cost[order].tolist(),
            "visits_per_day": visits[order].tolist(),
            "cost_per_day": (cost * visits)[order].tolist(),
            "next_due": _nan_none(due_at[order]),
            "first_seen": _nan_none(cols["first_seen"][ev]),
            "last_fetch": _nan_none(last_fetch[order]),
            "last_ok": _nan_none(cols["last_ok"][ev]),
            "fails": fails[order].tolist(),
        }
        keys = list(columns)
        out = [dict(zip(keys, vals, strict=True)) for vals in zip(*columns.values(), strict=True)]
        return PageTable(
            at=t,
            site=site,
            sort=sort,
            billing_unit=self.settings.billing_unit,
            total=len(rows),
            states={str(k): int(c) for k, c in zip(names, counts, strict=True)},
            pages=out,
        )

    @staticmethod
    def _page_order(
        sort: str, rate: Any, due_at: Any, value: Any, cost: Any
    ) -> np.ndarray[Any, np.dtype[np.intp]]:
        """The row order of :meth:`pages` (stable: ties keep the store's order)."""
        if sort == "due":
            key = np.where(np.isnan(due_at), np.inf, due_at)
        else:
            key = -{"rate": rate, "value": value, "cost": cost}[sort]
        return np.argsort(key, kind="stable")

    # -- health ----------------------------------------------------------------------------

    def evaluate_health(
        self,
        times: Sequence[float],
        *,
        sites: Sequence[str] | None = None,
        warmup_s: float = 3 * 3600.0,
    ) -> list[list[Any]]:
        """Score every site at each of ``times`` (ascending unix seconds), smoothing
        carried from one to the next, using only buckets before each time.

        Smoothing starts ``warmup_s`` before the first time, in 15-minute steps,
        so a single evaluation ``--at`` a past time gives the same answer as a
        scorer that had been running all along. Returns one list of
        :class:`~recrawl.health.SiteHealth` per requested time.
        """
        from recrawl.health.buckets import BUCKET_SECONDS
        from recrawl.health.score import HealthState, compute_baselines, evaluate_sites

        cfg = self.settings.health_config()  # the defaults, with recrawl.toml's [health]
        if not times:
            return []
        first, last = float(times[0]), float(times[-1])
        day0 = int(first // DAY_S) * DAY_S
        daily = self.store.buckets(day0 - (cfg.baseline_days + 2) * DAY_S, last, sites, daily=True)
        recent = self.store.buckets(
            first - warmup_s - cfg.current_max_s - BUCKET_SECONDS, last, sites
        )
        baselines: dict[int, Any] = {}

        def base_for(t: float) -> Any:
            d = int(t // DAY_S)
            if d not in baselines:
                baselines[d] = compute_baselines(daily, t, cfg)
            return baselines[d]

        state = HealthState()
        steps = list(np.arange(first - warmup_s, first, BUCKET_SECONDS))
        for t in steps:
            evaluate_sites(recent, float(t), state, cfg, baselines=base_for(float(t)))
        out = []
        for t in times:
            out.append(evaluate_sites(recent, float(t), state, cfg, baselines=base_for(float(t))))
        return out

    def site_caps(self) -> dict[str, int]:
        """Concurrency cap per site from its health: 0 when paused, halved when degrading."""
        default = self.settings.site_concurrency
        caps = {}
        for site, c in self.store.site_controls().items():
            if c["paused"]:
                caps[site] = 0
            elif c["concurrency_cap"] is not None:
                caps[site] = int(c["concurrency_cap"])
            else:
                caps[site] = default
        return caps

    def health(
        self,
        at: float | None = None,
        *,
        site: str | None = None,
        record: bool = True,
    ) -> list[dict[str, Any]]:
        """Every site's health as ``recrawl health --json`` shows it, worst first.

        With ``record`` (the live path), the result is kept in the history and
        each band's action is applied: degrading halves the site's concurrency
        cap and raises its effective cost; critical pauses the site (only
        canaries run) and alerts the owner. Never an escalation; a paused site
        stays paused until a human resumes it (:meth:`resume`).
        """
        t = self.clock() if at is None else at
        (results,) = self.evaluate_health([t], sites=[site] if site else None)
        reports = [h.to_dict() for h in results]
        if record:
            self._apply_actions(t, reports)
            self.store.record_health(t, reports, {})
        order = {"critical": 0, "degrading": 1, "unknown": 3, "healthy": 2}
        reports.sort(
            key=lambda r: (
                order.get(r["band"], 9),
                r["score"] if r["score"] is not None else 101,
                r["site"],
            )
        )
        return reports

    def _alert_queue(self) -> AlertQueue:
        if self._alerts is None:
            a = self.settings.alerts
            self._alerts = AlertQueue(retries=a.retries, timeout_s=a.timeout_s)
        return self._alerts

    def _parser_bands_before(self, reports: list[dict[str, Any]], now: float) -> dict[str, str]:
        """The last recorded parser band of each site whose parser band is
        degrading or critical now (the others cannot alert)."""
        out: dict[str, str] = {}
        for r in reports:
            if (r.get("parser") or {}).get("band") in ("degrading", "critical"):
                past = self.store.health_history(r["site"], since=now - 7 * 86400.0, until=now)
                out[r["site"]] = (
                    (past[-1][1].get("parser") or {}).get("band", "unknown") if past else "unknown"
                )
        return out

    def _apply_actions(self, now: float, reports: list[dict[str, Any]]) -> None:
        controls = self.store.site_controls()
        parser_before = self._parser_bands_before(reports, now)
        before = {
            r["site"]: (
                controls.get(r["site"], {}).get("band", "unknown"),
                parser_before.get(r["site"], "unknown"),
            )
            for r in reports
        }
        paused: list[str] = []
        self._band_actions(now, reports, controls, paused)
        a = self.settings.alerts
        events = alert_events(
            reports, before, paused=paused, crawl_owner=a.crawl_owner or self.settings.webhook,
            parser_owner=a.parser_owner, bands=a.bands, at=now,
        )  # fmt: skip
        for e in events:
            if e.url is None:
                log_alert(e)
            else:
                self._alert_queue().post(e)

    def _band_actions(
        self,
        now: float,
        reports: list[dict[str, Any]],
        controls: dict[str, dict[str, Any]],
        paused: list[str],
    ) -> None:
        default = self.settings.site_concurrency
        for r in reports:
            site, band, action = r["site"], r["band"], r["action"]
            c = controls.get(site, {"paused": False, "band": "unknown"})
            if band == "unknown":
                continue
            changed = c.get("band") != band
            if band == "critical":
                if not c["paused"] and not self._recently_resumed(site, now):
                    detail = f"score {r['score']}, reasons: {', '.join(r['reasons'])}"
                    self.store.set_site_controls(
                        site,
                        now=now,
                        paused=True,
                        concurrency_cap=0,
                        band=band,
                        event="pause",
                        detail=detail,
                    )
                    paused.append(site)
                elif changed:
                    self.store.set_site_controls(
                        site,
                        now=now,
                        band=band,
                        event="band",
                        detail=band,
                        concurrency_cap=0 if c["paused"] else c.get("concurrency_cap"),
                    )
                continue
            factor = float(action.get("concurrency_factor") or 1.0)
            mult = float(action.get("cost_multiplier") or 1.0)
            cap = (
                0
                if c["paused"]
                else (max(1, int(default * factor)) if band == "degrading" else None)
            )
            if not changed and (c.get("cost_multiplier"), c.get("concurrency_cap")) == (mult, cap):
                continue  # nothing to write: most evaluations change nothing
            self.store.set_site_controls(
                site, now=now, cost_multiplier=mult, concurrency_cap=cap,
                band=band, event="band" if changed else None, detail=band,
            )  # fmt: skip

    def _recently_resumed(self, site: str, now: float) -> bool:
        events = [e for e in self.store.site_events(site) if e["kind"] == "resume"]
        return bool(events) and now - events[-1]["at"] < 3600.0

    def _controls_of(self, site: str) -> dict[str, Any]:
        """A site's controls (empty when none were ever set); raises
        :class:`~recrawl.NotFound` for a site the store does not know (a typo
        would otherwise change nothing)."""
        controls = self.store.site_controls()
        if site not in controls and site not in self.store.sites():
            from recrawl._exceptions import NotFound

            raise NotFound(f"no site {site!r} in the store")
        return controls.get(site, {})

    def pause(
        self, site: str, *, by: str = "operator", reason: str = "", now: float | None = None
    ) -> bool:
        """A human's pause: the planner leaves the site out and leases give none of
        its pages until a human resumes it (:meth:`resume`); health never lifts it.

        Returns False, recording nothing, when the site is already paused. Raises
        :class:`~recrawl.NotFound` for a site the store does not know (a typo
        would otherwise pause nothing).
        """
        t = self.clock() if now is None else now
        if self._controls_of(site).get("paused"):
            return False
        self.store.set_site_controls(
            site,
            now=t,
            paused=True,
            concurrency_cap=0,
            event="pause",
            detail=_by_whom(by, reason),
        )
        return True

    def set_validators(
        self,
        site: str,
        on: bool,
        *,
        by: str = "operator",
        reason: str = "",
        now: float | None = None,
    ) -> bool:
        """Send conditional requests (ETag / Last-Modified) to ``site`` or not:
        off, leases and :meth:`headers_for` give its pages no validators, so
        every fetch gets the full page (for a host that answers 304 while the
        content changed, :meth:`calibration`). Recorded in the site's history;
        returns False, recording nothing, when it already was so. Raises
        :class:`~recrawl.NotFound` for a site the store does not know."""
        t = self.clock() if now is None else now
        self._controls_of(site)
        return self.store.set_validators(site, on, now=t, detail=_by_whom(by, reason))

    def resume(self, site: str, *, by: str = "operator", now: float | None = None) -> None:
        """A human's way back from a pause: recorded, and the site runs again at
        its normal concurrency (the next critical band an hour on pauses it again)."""
        t = self.clock() if now is None else now
        self._controls_of(site)
        self.store.set_site_controls(
            site,
            now=t,
            paused=False,
            cost_multiplier=1.0,
            concurrency_cap=None,
            event="resume",
            detail=f"by {by}",
        )
