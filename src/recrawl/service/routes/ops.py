"""For operators: Prometheus metrics, the liveness probe, the dashboard."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from recrawl import __version__
from recrawl.service.auth import Guards
from recrawl.service.responses import JSONResponse
from recrawl.service.schemas import ERROR_RESPONSES, Healthz
from recrawl.service.state import Service

__all__ = ["router"]


def router(svc: Service, guards: Guards) -> APIRouter:
    """``/metrics``, ``/healthz`` and the dashboard at ``/``."""
    out = APIRouter(tags=["read"])
    read = {"dependencies": [guards.read], "responses": {**ERROR_RESPONSES["read"]}}

    @out.get("/metrics", response_class=PlainTextResponse, **read)  # type: ignore[arg-type]
    def get_metrics() -> Response:
        """Prometheus text format."""
        from recrawl.service.metrics import CONTENT_TYPE, render_metrics

        return Response(render_metrics(svc), media_type=CONTENT_TYPE)

    # No token check, hence no 413 or 415 (refuse_too_large, refuse_undecodable):
    # it reads no body, so a body's coding or size cannot matter (the middleware
    # leaves one it cannot take unread), and a load balancer's probe gets 200
    # whatever it sends.
    # HEAD too (load balancers' probes may use it), kept out of the OpenAPI description
    @out.head("/healthz", include_in_schema=False)
    @out.get("/healthz", response_model=Healthz)
    def healthz() -> Any:
        """Liveness: the store answers (``GET`` or ``HEAD``)."""
        svc.store.outstanding_leases(svc.now())
        return JSONResponse({"status": "ok", "version": __version__})

    @out.get("/", response_class=HTMLResponse, **read)  # type: ignore[arg-type]
    def dashboard() -> HTMLResponse:
        """The dashboard: where the money goes, site health, freshness, the plan."""
        from recrawl.report.dashboard import render_dashboard

        return HTMLResponse(
            render_dashboard(svc.engine, now=svc.now(), plan=svc.plan(), health=svc.health())
        )

    return out
