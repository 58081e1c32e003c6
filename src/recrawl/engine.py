"""The engine: library calls that join the store, the planner and health.

The CLI, the HTTP service and the fetcher are thin edges over one
:class:`Engine`; none of them holds logic the others lack. The clock is
injected (``clock``) so a simulation can run days in seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import Settings
from .ingest import IngestReport, ingest_observations
from .observation import Observation, normalize_url
from .pagestate import NUTCH_DEFAULT_S
from .planner import PageState as PageArrays
from .planner import PlannerConfig, plan_cycle, reallocate
from .stats import compute_stats
from .store import SQLiteStore

__all__ = ["Engine", "PlanResult"]

DAY_S = 86400.0


@dataclass
class PlanResult:
    """One cycle's plan: tasks best first, with what the cycle spends."""

    at: float
    budget: float
    spent: float
    tasks: list[dict[str, Any]]
    rates: dict[str, tuple[float, float]]

    def split(self) -> dict[str, int]:
        """How many tasks each reason holds (score, discovery, reestimate, verify, canary)."""
        out: dict[str, int] = {}
        for t in self.tasks:
            out[t["reason"]] = out.get(t["reason"], 0) + 1
        return out


def _codes(values: Sequence[str]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], list[str]]:
    uniq, inv = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
    return inv.astype(np.int64), [str(u) for u in uniq]


class Engine:
    """recrawl's main loop over one store.

    Parameters
    ----------
    store : SQLiteStore
        Where pages, observations and health live.
    settings : Settings
        Billing unit, budget per day, cycle length, objective, reserves.
    clock : callable
        Returns unix seconds; ``time.time`` by default.
    """

    def __init__(
        self,
        store: SQLiteStore,
        settings: Settings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings or Settings()
        self.clock = clock

    # -- observations ----------------------------------------------------------------------

    def ingest(self, observations: Iterable[Observation]) -> IngestReport:
        """Store observations (idempotent; durable when this returns)."""
        return ingest_observations(self.store, observations)

    def stats(self, unit: str | None = None) -> dict[str, Any]:
        """The same dict as ``recrawl stats --json``."""
        u = unit or self.settings.billing_unit
        return compute_stats(self.store.group_totals(), u)  # type: ignore[arg-type]

    def add_urls(self, rows: Iterable[dict[str, Any]], now: float | None = None) -> int:
        """Register URLs for discovery: dicts with ``url`` and optional ``site``,
        ``page_type``, ``value``. Raises ValueError naming a bad URL."""
        t = self.clock() if now is None else now
        clean = []
        for r in rows:
            url = normalize_url(str(r["url"]))
            site = str(r.get("site") or url.split("/", 3)[2].rpartition("@")[2].split(":")[0])
            value = float(r.get("value", 1.0))
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"value of {url} must be a non-negative number")
            clean.append((url, site, str(r.get("page_type") or "page"), value))
        return self.store.add_urls(clean, t)

    # -- planning --------------------------------------------------------------------------

    def _unit_costs(self, sites: list[str], types: list[str]) -> dict[tuple[str, str], float]:
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

    def page_arrays(
        self, now: float, exclude: set[str] | None = None
    ) -> tuple[PageArrays, dict[str, Any]]:
        """The planner's arrays for every page, and the columns they came from."""
        cols = self.store.page_columns()
        n = len(cols["url"])
        site_code, site_names = _codes(cols["site"]) if n else (np.zeros(0, np.int64), [])
        group_code, _ = (
            _codes([f"{s}\0{t}" for s, t in zip(cols["site"], cols["page_type"], strict=True)])
            if n
            else (np.zeros(0, np.int64), [])
        )
        hosts = [u.split("/", 3)[2] for u in cols["url"]]
        host_code, _ = _codes(hosts) if n else (np.zeros(0, np.int64), [])
        costs = self._unit_costs(site_names, [])
        if costs:
            default = float(np.median(list(costs.values())))
            cost = np.array(
                [
                    costs.get((s, t), default)
                    for s, t in zip(cols["site"], cols["page_type"], strict=True)
                ]
            )
        else:
            cost = np.ones(n)
        controls = self.store.site_controls()
        mult = np.array(
            [float(controls.get(s, {}).get("cost_multiplier") or 1.0) for s in site_names]
        )
        paused = np.array([bool(controls.get(s, {}).get("paused")) for s in site_names], dtype=bool)
        never = np.isnan(cols["last_ok"])
        last = np.where(never, cols["first_seen"], cols["last_ok"])
        active = ~cols["gone"] & (np.asarray(cols["page_type"], dtype=object) != "canary")
        if exclude:
            active &= ~np.isin(np.asarray(cols["url"], dtype=object), list(exclude))
        pages = PageArrays(
            value=cols["value"].astype(np.float64),
            cost=cost,
            site=site_code,
            host=host_code,
            group=group_code,
            last_fetch=last,
            first_seen=cols["first_seen"],
            never_fetched=never,
            ev_nc=cols["ev_nc"],
            ev_tc=cols["ev_tc"],
            ev_nu=cols["ev_nu"],
            ev_tu=cols["ev_tu"],
            nutch_interval=np.nan_to_num(cols["nutch_interval"], nan=NUTCH_DEFAULT_S),
            site_cost_multiplier=mult if len(mult) else np.ones(1),
            site_paused=paused if len(paused) else np.zeros(1, dtype=bool),
            active=active,
        )
        return pages, cols

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
    ) -> PlanResult:
        """The next cycle's tasks: canaries that are due (outside the budget, also
        on paused sites), then the planner's choice under ``budget`` (billing
        units for one cycle; default ``budget_per_day`` × cycle length)."""
        t = self.clock() if now is None else now
        s = self.settings
        if budget is None:
            if s.budget_per_day is None:
                raise ValueError("no budget: pass one, or set budget_per_day in recrawl.toml")
            budget = s.budget_per_day * s.cycle_hours / 24.0
        if budget < 0 or not math.isfinite(budget):
            raise ValueError("the budget must be a non-negative number")
        obj = objective or s.objective
        pages, cols = self.page_arrays(t, exclude)
        tasks: list[dict[str, Any]] = []
        for c in self.store.canaries():
            due = c["last_fetch"] is None or t - c["last_fetch"] >= c["every_s"]
            if due and not (exclude and c["url"] in exclude):
                tasks.append(
                    {"url": c["url"], "site": c["site"], "page_type": "canary", "reason": "canary",
                     "priority": math.inf, "expected_gain": 0.0, "cost": 0.0}
                )  # fmt: skip
        rates: dict[str, tuple[float, float]] = {}
        spent = 0.0
        if len(pages):
            cfg = self.planner_config()
            per_day = budget * 24.0 / cfg.cycle_hours
            model = reallocate(pages, per_day, t, policy=policy, objective=obj, config=cfg)  # type: ignore[arg-type]
            rng = np.random.default_rng(seed if seed is not None else int(t) // 3600)
            plan = plan_cycle(
                pages,
                budget,
                t,
                policy=policy,
                objective=obj,
                config=cfg,
                rng=rng,
                model=model,  # type: ignore[arg-type]
            )
            spent = plan.spent
            for task in plan.to_tasks():
                i = task.pop("page")
                url = cols["url"][i]
                rates[url] = (float(model.rate_per_day[i]), float(model.rate_sd_per_day[i]))
                tasks.append(
                    {"url": url, "site": cols["site"][i], "page_type": cols["page_type"][i], **task}
                )
        return PlanResult(at=t, budget=budget, spent=spent, tasks=tasks, rates=rates)

    def headers_for(self, url: str) -> dict[str, str]:
        """Validators for a conditional request to ``url`` (empty when unknown)."""
        p = self.store.page(url)
        h: dict[str, str] = {}
        if p is not None:
            if p.etag:
                h["If-None-Match"] = p.etag
            if p.last_modified:
                h["If-Modified-Since"] = p.last_modified
        return h

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
        pages, cols = self.page_arrays(t)
        i = cols["url"].index(url)
        cfg = self.planner_config()
        per_day = self.settings.budget_per_day or float(len(pages))
        model = reallocate(pages, per_day, t, config=cfg)
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
