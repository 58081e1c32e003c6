"""What fetchers write: URLs to discover or forget, leases, observations, hints."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator

from recrawl.engine.engine import HINT_FUTURE_S, url_items
from recrawl.estimate.hints import parse_lastmod
from recrawl.observe.compression import is_gzip
from recrawl.observe.observation import SHOWN_CHARS
from recrawl.service.auth import Guards, JSONBodyRoute
from recrawl.service.body import inflate
from recrawl.service.responses import JSONResponse
from recrawl.service.schemas import (
    ERROR_RESPONSES,
    MAX_URLS,
    OBSERVATIONS_BODY,
    URLS_BODY,
    HintsAnswer,
    IngestAnswer,
    LeaseRequest,
    Leases,
    SignalsCounted,
    SignalsReport,
    UrlList,
    UrlsAdded,
    UrlsRemoved,
)
from recrawl.service.state import MAX_REJECTED, Service

__all__ = ["router"]


def _lastmod(value: str | None) -> str | None:
    """``value`` if it reads as a time (:func:`~recrawl.estimate.hints.parse_lastmod`);
    a ValueError is a 422 naming the parameter."""
    if value is not None:
        parse_lastmod(value)
    return value


def _url_body(body: Any) -> tuple[list[Any], bool]:
    """A ``POST /v1/urls`` body's items and ``update``; a body of another shape
    is a 422 in one sentence."""

    def invalid(field: str, why: str) -> RequestValidationError:
        return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": why}])

    if isinstance(body, dict):
        items, update = body.get("urls"), body.get("update", False)
        if not isinstance(items, list):
            raise invalid("urls", 'must be a list of URLs (the body is {"urls": [...]})')
        if not isinstance(update, bool):
            raise invalid("update", "must be true or false")
    elif isinstance(body, list):
        items, update = body, False
    else:
        raise invalid("", 'must be a JSON array of URLs, or {"urls": [...]}')
    if len(items) > MAX_URLS:
        raise invalid("urls", f"holds {len(items):,} URLs, at most {MAX_URLS:,} a request")
    return items, update


def show_url(url: Any) -> str | None:
    """A posted URL as an answer echoes it: None when it is not a string, cut
    at :data:`~recrawl.observe.observation.SHOWN_CHARS` characters."""
    if not isinstance(url, str):
        return None
    return url if len(url) <= SHOWN_CHARS else url[:SHOWN_CHARS] + "…"


def router(svc: Service, guards: Guards) -> APIRouter:
    """The write routes of fetchers."""
    errors = ERROR_RESPONSES
    common: dict[str, Any] = {
        "dependencies": [guards.write],
        "tags": ["write"],
        "responses": {**errors["write"]},
    }
    writes = APIRouter(**common)
    # bodies read as JSON whatever the Content-Type (``curl -d`` sends a form's);
    # its routes carry the token check themselves (JSONBodyRoute runs it first)
    json_writes = APIRouter(route_class=JSONBodyRoute, **common)

    @json_writes.post("/v1/urls", response_model=UrlsAdded, openapi_extra=URLS_BODY)
    def post_urls(body: Annotated[Any, Body(include_in_schema=False)]) -> Any:
        """Register URLs for discovery: a JSON array, or ``{"urls": [...], "update":
        false}``, each item a URL string or ``{url, site, page_type, value}``.
        Good items are registered even when others are rejected (as ``recrawl
        urls add`` does); each rejected one is named by its index. With
        ``update``, known URLs given a ``value`` take it."""
        items, update = _url_body(body)
        good, bad = url_items(items)
        rows = [r for _, r in good]
        added = svc.engine.add_urls(rows, now=svc.now())
        updated = svc.engine.update_values([r for r in rows if "value" in r]) if update else 0
        if added or updated:
            svc.invalidate()
        rejected = [{"index": i, "url": show_url(u), "field": f, "error": e} for i, u, f, e in bad]
        return JSONResponse(
            {"received": len(items), "added": added, "updated": updated, "rejected": rejected}
        )

    @json_writes.post("/v1/urls/remove", response_model=UrlsRemoved)
    def remove_urls(body: UrlList) -> Any:
        """Forget URLs: their pages, fetch logs, leases and canaries leave the
        store (stats and health keep their counts); one reported again later
        starts over as a new page."""
        removed = svc.engine.remove_urls(body.urls)
        if removed:
            svc.invalidate()
        return JSONResponse({"received": len(body.urls), "removed": removed})

    @json_writes.post("/v1/leases", response_model=Leases)
    async def post_leases(body: LeaseRequest) -> Any:
        """Lease up to ``max`` fetch tasks from the current plan to ``worker``.

        A URL is leased to one worker at a time; a lease not reported before
        ``expires_at`` returns its URL to the plan; each site's concurrency cap
        and pause (from its health band) are respected.
        """
        tasks = await asyncio.wrap_future(
            svc.writer.submit(lambda: svc.lease(body.worker, body.max))
        )
        return JSONResponse({"tasks": tasks})

    @json_writes.post("/v1/signals", response_model=SignalsCounted)
    async def post_signals(body: SignalsReport) -> Any:
        """Report what a crawl's signals did that is no observation: ``reads`` of
        sitemaps and feeds (``site``, ``signal``, wire ``bytes``, ``credits``),
        counted in each signal's cost (``GET /v1/signals``); ``delisted`` items
        that left every listing of their site (``at`` null: listed again)."""

        def work() -> tuple[int, int]:
            n = svc.engine.add_signal_reads(r.model_dump() for r in body.reads)
            svc.engine.note_listing_left((d.url, d.site, d.at) for d in body.delisted)
            return n, len(body.delisted)

        reads, delisted = await asyncio.wrap_future(svc.writer.submit(work))
        return JSONResponse({"reads": reads, "delisted": delisted})

    @writes.post(
        "/v1/observations",
        response_model=IngestAnswer,
        openapi_extra=OBSERVATIONS_BODY,
        responses={**errors["body"]},
    )
    async def post_observations(request: Request) -> Any:
        """Report fetch observations (NDJSON or a JSON array). Good items are stored
        even when others are rejected; the answer comes once they are on disk."""
        body = await request.body()
        good, where, rejected = await run_in_threadpool(svc.parse_and_count, body)
        share = await asyncio.wrap_future(svc.submit_observations(good))
        return JSONResponse(svc.answer(good, where, rejected, share))

    @writes.post("/v1/hints", response_model=HintsAnswer, responses={**errors["body"]})
    async def post_hints(
        request: Request,
        source: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
        seen_at: Annotated[str | None, AfterValidator(_lastmod), Query()] = None,
        add_urls: bool = False,
    ) -> Any:
        """Report what a sitemap, feed or listing says of pages' last changes: a
        sitemap (``<urlset>``, read now unless ``seen_at``) or hint lines (JSON
        objects with ``url``, ``lastmod``, ``seen_at``, ``source``; the query's
        ``source`` and ``seen_at`` are their defaults). Good hints are stored even
        when others are rejected; hints for unknown URLs are counted and skipped
        unless ``add_urls``. As ``recrawl hints add``; ``GET /v1/hints`` tells
        which sources the plan trusts."""
        when = parse_lastmod(seen_at) if seen_at is not None else None
        body = await request.body()
        if is_gzip(body):  # gzipped, without a Content-Encoding saying so
            # bounded decompressed as DecodeBody bounds a body that says so
            body = await run_in_threadpool(inflate, body, "gzip", svc.settings.max_body_bytes)
        good, bad, count = await run_in_threadpool(
            lambda: svc.parse_hints(body, source=source, seen_at=when)
        )
        result = await asyncio.wrap_future(svc.ingest_hints(good, add_urls=add_urls))
        if result.future:
            count += result.future
            if len(bad) < MAX_REJECTED:
                bad.append(
                    {
                        "line": None,
                        "field": "seen_at",
                        "error": f"{result.future} hints seen after now (seen_at more than "
                        f"{HINT_FUTURE_S / 60:g} minutes after the service's clock): not stored",
                    }
                )
        return JSONResponse(
            {
                "received": len(good) + count - result.future,
                "stored": result.stored,
                "unchanged": result.unchanged,
                "unknown": result.unknown,
                "added_urls": result.added_urls,
                "rejected": count,
                "errors": bad,
            }
        )

    out = APIRouter()
    out.include_router(json_writes)
    out.include_router(writes)
    return out
