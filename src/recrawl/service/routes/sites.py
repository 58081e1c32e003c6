"""Sites and pages: health and controls, a page's state."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import unquote

from fastapi import APIRouter, Query, Request

from recrawl._exceptions import NotFound
from recrawl.observe.observation import normalize_url
from recrawl.service.auth import Guards, JSONBodyRoute
from recrawl.service.body import Scope
from recrawl.service.responses import JSONResponse
from recrawl.service.schemas import (
    ERROR_RESPONSES,
    CanariesDoc,
    CanaryDoc,
    CanaryRemoved,
    CanaryRemoveRequest,
    CanaryRequest,
    PageInfo,
    PagesDoc,
    PauseAnswer,
    PauseRequest,
    ResumeAnswer,
    SiteDetailDoc,
    SitesDoc,
    ValidatorsAnswer,
    ValidatorsRequest,
)
from recrawl.service.state import Service

__all__ = ["page_target", "router"]

# -- the page a request names ----------------------------------------------------------------

_PAGES_PREFIX = "/v1/pages/"


def page_target(scope: Scope, url: str) -> str:
    """The page URL that ``GET /v1/pages/{url}`` names, before normalisation.

    ``url`` is the path remainder the server has already percent-decoded once;
    the raw one (``raw_path``) says what the client sent. When the raw remainder
    starts with ``http://`` or ``https://`` (any case) it is the URL appended raw
    and is taken as sent (its ``%XX`` escapes kept); otherwise it is the URL
    percent-encoded once and is decoded once. Either way, the request's query
    string is the URL's when the URL has none of its own (an appended raw URL's
    query string arrives as the request's).
    """
    remainder: str | None = None
    raw_path = scope.get("raw_path")
    if isinstance(raw_path, bytes):
        raw = raw_path.split(b"?", 1)[0].decode("latin-1")
        _, sep, tail = raw.partition(_PAGES_PREFIX)
        if sep and unquote(tail) == url:
            remainder = tail
    if remainder is None:  # no raw path to go by: what the server decoded
        target = url
    elif remainder[:8].lower().startswith(("http://", "https://")):
        target = remainder
    else:
        target = unquote(remainder)
    query = scope.get("query_string", b"").decode("latin-1")
    if query and "?" not in target:
        target += "?" + query
    return target


def router(svc: Service, guards: Guards) -> APIRouter:
    """Site controls (writes), site health and pages (reads)."""
    errors = ERROR_RESPONSES
    out = APIRouter()
    controls = APIRouter(
        route_class=JSONBodyRoute,
        dependencies=[guards.write],
        tags=["write"],
        responses={**errors["write"], **errors["site"]},
    )

    @controls.post("/v1/sites/{site}/pause", response_model=PauseAnswer)
    def pause_site(site: str, body: PauseRequest | None = None) -> Any:
        """Pause a site by hand: none of its pages is planned or leased (its
        canaries still run) until a human resumes it; health never lifts it.
        ``recorded`` is false when it was paused already."""
        body = body or PauseRequest()
        return JSONResponse(svc.pause(site, by=body.by, reason=body.reason))

    @controls.post("/v1/sites/{site}/validators", response_model=ValidatorsAnswer)
    def site_validators(site: str, body: ValidatorsRequest) -> Any:
        """Send conditional requests to a site's pages or not: off, its leases carry
        no validators (for a host whose 304s hide changes: ``GET /v1/calibration``).
        Recorded in its history; ``recorded`` is false when it already was so."""
        done = svc.engine.set_validators(
            site, body.on, by=body.by, reason=body.reason, now=svc.now()
        )
        return JSONResponse({"site": site, "validators": body.on, "recorded": done})

    @controls.post("/v1/sites/{site}/resume", response_model=ResumeAnswer)
    def resume_site(site: str) -> Any:
        """Lift a site's pause: the owner has decided to go on."""
        return JSONResponse(svc.resume(site, by="api"))

    out.include_router(controls)
    canary_writes = APIRouter(
        route_class=JSONBodyRoute,
        dependencies=[guards.write],
        tags=["write"],
        responses={**errors["write"]},
    )

    @canary_writes.post("/v1/canaries", response_model=CanaryDoc)
    def add_canary(body: CanaryRequest) -> Any:
        """Declare (or replace) a canary: a stable page whose right answer is
        known. One that parses but carries the wrong value lowers its site's
        health (``canary_mismatch``). As ``recrawl canary add``."""
        doc = svc.engine.add_canary(
            body.url, body.expectations(), site=body.site, every_s=body.every_minutes * 60.0
        )
        svc.invalidate()
        return JSONResponse(doc)

    @canary_writes.post("/v1/canaries/remove", response_model=CanaryRemoved)
    def remove_canary(body: CanaryRemoveRequest) -> Any:
        """Withdraw a canary: a page made for it leaves the store with its log,
        a page of another type stays. As ``recrawl canary remove``."""
        removed = svc.engine.remove_canary(body.url)
        if removed:
            svc.invalidate()
        return JSONResponse({"url": body.url, "removed": removed})

    out.include_router(canary_writes)
    reads = APIRouter(dependencies=[guards.read], tags=["read"], responses={**errors["read"]})

    @reads.get("/v1/canaries", response_model=CanariesDoc)
    def get_canaries() -> Any:
        """Every declared canary: what it must carry, how often it is fetched, its
        last fetch. As ``recrawl canary list --json``."""
        return JSONResponse({"canaries": svc.engine.canaries()})

    @reads.get("/v1/sites", response_model=SitesDoc)
    def get_sites() -> Any:
        """Every site's health, controls and leases, worst first: as ``recrawl
        health --json``, from the last evaluation (at most ``health_every_s`` old
        when observations arrived since; ``at`` says when)."""
        return JSONResponse(svc.overview().as_dict())

    @reads.get(
        "/v1/sites/{site}",
        response_model=SiteDetailDoc,
        responses={**errors["site"], **errors["query"]},
    )
    def get_site(site: str, since: float = 0.0) -> Any:
        """One site's health, its history since ``since`` (unix seconds) and
        events: as ``recrawl site show SITE --json``."""
        detail = svc.site(site, since)
        if detail is None:
            raise NotFound("unknown site")
        return JSONResponse(detail.as_dict())

    @reads.get(
        "/v1/pages",
        response_model=PagesDoc,
        responses={**errors["site"], **errors["query"]},
    )
    def get_pages(
        site: str | None = None,
        sort: Literal["rate", "due", "value", "cost"] = "rate",
        limit: Annotated[int, Query(ge=0, le=100_000)] = 100,
    ) -> Any:
        """What recrawl believes of each page (of ``site``), the first ``limit`` by
        ``sort``: its change rate per day with a 90 % interval, the evidence, cost,
        visits a day, next due time and state. As ``recrawl pages --json``
        (which lists every page)."""
        table = svc.engine.pages(site=site, now=svc.now(), limit=limit, sort=sort)
        return JSONResponse(table.as_dict())

    @reads.get("/v1/pages/{url:path}", response_model=PageInfo, responses={**errors["page"]})
    def get_page(url: str, request: Request) -> Any:
        """A page's state, change-rate estimate (per day, with its standard
        deviation) and when it is next due. Append the URL raw
        (``/v1/pages/https://a.example/x?q=1``) or percent-encode it once as a whole
        (``/v1/pages/https%3A%2F%2Fa.example%2Fx%3Fq%3D1``)."""
        try:
            target = normalize_url(page_target(request.scope, url))
        except ValueError:  # the URL parser's word on a path that names no URL
            raise NotFound("not an absolute http(s) URL") from None
        info = svc.engine.page_info(target, now=svc.now())
        if info is None:
            raise NotFound("unknown page")
        info["leased"] = target in svc.store.leased_urls(svc.now())
        return JSONResponse(info)

    out.include_router(reads)
    return out
