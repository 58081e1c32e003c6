"""What the model says: the plan, what freshness costs, calibration, hint trust, stats.

Each answer is the document ``recrawl X --json`` prints (the same object's
``as_dict()``, see :mod:`recrawl.engine.results`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field

from recrawl.engine.engine import HINT_TRUST_DAYS
from recrawl.engine.results import CalibrationReport
from recrawl.engine.stats import Stats
from recrawl.service.auth import Guards
from recrawl.service.responses import JSONResponse
from recrawl.service.schemas import (
    ERROR_RESPONSES,
    BudgetDoc,
    CalibrationDoc,
    HintReportDoc,
    PlanDoc,
    SignalsDoc,
    StatsDoc,
)
from recrawl.service.state import Service

__all__ = ["router"]

Freshness = Annotated[float, Field(gt=0, lt=1)]
PositiveDays = Annotated[float, Query(gt=0, allow_inf_nan=False)]


def router(svc: Service, guards: Guards) -> APIRouter:
    """The read routes of the model."""
    errors = ERROR_RESPONSES
    reads = APIRouter(
        dependencies=[guards.read],
        tags=["read"],
        responses={**errors["read"]},
    )
    query = {**errors["query"]}

    @reads.get("/v1/plan", response_model=PlanDoc, responses=query)
    def get_plan(limit: Annotated[int, Query(ge=0, le=100_000)] = 100) -> Any:
        """The current cycle's plan: budget, spend, split by reason and the first tasks,
        each with the ``headers`` its lease would carry (as ``recrawl plan --json``)."""
        return JSONResponse(svc.engine.plan_dict(svc.plan(), limit=limit))

    @reads.get("/v1/budget", response_model=BudgetDoc, responses=query)
    def get_budget(
        freshness: Annotated[list[Freshness] | None, Query()] = None,
        per_day: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    ) -> Any:
        """What each mean freshness would cost a day at the learned rates, and what
        ``per_day`` (default: the configured budget) buys: as ``recrawl budget --json``.
        Repeat ``freshness`` (between 0 and 1) for several targets (default 0.8, 0.9, 0.95)."""
        outlook = svc.engine.budget_outlook(
            *([freshness] if freshness else []), budget_per_day=per_day, now=svc.now()
        )
        return JSONResponse(outlook.as_dict())

    @reads.get("/v1/calibration", response_model=CalibrationDoc, responses=query)
    def get_calibration(
        days: PositiveDays = 30.0,
        by: Annotated[Literal["site", "group"], Query()] = "site",
    ) -> Any:
        """Did the change model predict what the revisits of the last ``days`` (before
        the newest fetch) found, and can each site's 304s be trusted? As ``recrawl
        calibration --json`` (``turned_off`` is empty: ``POST
        /v1/sites/{site}/validators`` acts on it), recomputed at most once an hour
        (the report reads a whole window of the log)."""
        return JSONResponse(CalibrationReport(svc.calibration(days, by)).as_dict())

    @reads.get("/v1/hints", response_model=HintReportDoc, responses=query)
    def get_hints(days: PositiveDays = HINT_TRUST_DAYS) -> Any:
        """Each hint source, and how far its ``lastmod`` agreed with the revisits of
        the last ``days`` per site: which the plan trusts. As ``recrawl hints --json``."""
        return JSONResponse(svc.hint_report(days))

    @reads.get("/v1/signals", response_model=SignalsDoc, responses=query)
    def get_signals(
        site: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    ) -> Any:
        """What each cheap signal (sitemap, feed, listing, ``schedule``: no signal)
        cost per change found, per site: its reads plus the fetches it caused,
        over the changes those found. As ``recrawl signals --json``."""
        return JSONResponse(svc.engine.signal_report(site=site))

    @reads.get("/v1/stats", response_model=StatsDoc)
    def get_stats() -> Any:
        """Where the money goes: the same JSON as ``recrawl stats --json``."""
        stats = Stats.of(svc.store.group_totals(), svc.settings.billing_unit)
        return JSONResponse(stats.as_dict())

    return reads
