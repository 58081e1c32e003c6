"""The FastAPI application: leases, observations, sites, pages, plan, stats, metrics.

:class:`~recrawl.service.state.Service` holds what the HTTP edge keeps between
requests (the cached plan of the current cycle, the last health evaluation,
ingest counters); :func:`create_app` wires it to the routes of
:mod:`recrawl.service.routes`. Every decision is a library call on the
:class:`~recrawl.engine.Engine` or a public store method.

The package, as a request meets it: :mod:`.body` (size limit and
decompression middlewares), :mod:`.auth` (the token checks, before any body
is read), :mod:`.schemas` (the typed bodies of requests and answers),
:mod:`.routes` (one router per area), :mod:`.responses` (JSON out, and every
error mapped to its HTTP status in one place), :mod:`.state` and
:mod:`.leases` (the service's memory and lease candidates), :mod:`.writer`
(the one writer thread), :mod:`.metrics` (Prometheus).

The planner runs in the loop:

* observations re-estimate pages as they are stored (the store folds them in);
* the plan is recomputed when a cycle (``cycle_hours``) begins, after
  ``replan_after`` new observations or a write by another process to the
  store (the CLI's ingest, URLs, resume: :meth:`~recrawl.store.SQLStore.outside_writes`,
  on SQLite and PostgreSQL; at most every ``replan_min_s`` seconds),
  and at once when a site's controls change (band action, resume) or URLs are
  registered; a recomputation inside a cycle spends only what the cycle has
  not yet handed out;
* health is evaluated at most every ``health_every_s`` seconds when new
  observations arrived; the band's actions (concurrency cap, effective cost,
  pause with canaries only) are applied by the engine to the site controls,
  which both the plan and :meth:`~recrawl.store.SQLStore.claim` obey.

Request bodies may come compressed (``Content-Encoding: gzip``, or ``deflate``
zlib-wrapped or raw: :class:`~recrawl.service.body.DecodeBody`); ``/docs`` and
``/redoc`` serve their scripts themselves (no CDN), so they work on an offline
crawl host.

Writes from fetchers go through one writer thread (:mod:`.writer`): bodies are
parsed in worker threads, concurrent reports are committed together in one
transaction and acknowledged once it has committed, and a lease runs before
the reports queued behind the transaction in progress.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from recrawl import __version__
from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service.auth import Guards
from recrawl.service.body import BodyLimit, DecodeBody
from recrawl.service.responses import install_error_handlers
from recrawl.service.routes import fetchers, model, ops, sites
from recrawl.service.state import Service, open_engine, validate_settings
from recrawl.store import SQLStore

__all__ = ["Service", "create_app"]


def create_app(
    engine_or_db: Engine | SQLStore | str | Path,
    settings: Settings | None = None,
    *,
    replan_after: int = 1000,
    replan_min_s: float = 5.0,
    health_every_s: float = 60.0,
    group_s: float = 0.05,
) -> FastAPI:
    """The recrawl HTTP service over an engine, a store or a store path.

    ``settings`` defaults to the engine's. Raises :class:`~recrawl.ConfigError`
    at start-up when the configuration cannot serve (no write token, no budget
    for a byte or credit billing unit). See :class:`Service` for the knobs.
    """
    if settings is None:
        settings = (
            engine_or_db.settings
            if isinstance(engine_or_db, Engine)
            else Settings.model_validate({})
        )
    validate_settings(settings)
    engine = open_engine(engine_or_db, settings)
    if engine.settings is not settings:
        engine.settings = settings
    svc = Service(
        engine,
        replan_after=replan_after,
        replan_min_s=replan_min_s,
        health_every_s=health_every_s,
        group_s=group_s,
    )
    # /docs and /redoc with their scripts and styles served by the app (no CDN:
    # crawl hosts are often offline or firewalled)
    app = FastAPIOffline(
        title="recrawl",
        version=__version__,
        summary="Lease fetch work under a budget, report observations, watch site health.",
        description="Writes need `Authorization: Bearer <token>`; reads need the read token "
        "when one is configured. Times are unix seconds; costs are in the billing unit.",
    )
    app.state.service = svc
    # the last added runs first: BodyLimit counts the bytes on the wire, then
    # DecodeBody bounds them decompressed
    app.add_middleware(DecodeBody, limit=settings.max_body_bytes)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    install_error_handlers(app)
    guards = Guards.of(settings.token or "", settings.read_token)
    for area in (fetchers, sites, model, ops):
        app.include_router(area.router(svc, guards))
    return app
