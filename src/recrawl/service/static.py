"""Static assets of the dashboard: plotly.js, served once and cached by browsers.

Mounted by :func:`recrawl.service.create_app` (``app.include_router(router())``).
The script's URL (:data:`recrawl.report.assets.PLOTLY_PATH`) names plotly's
version, so it is cached for a year as immutable; the ETag lets a client that
revalidates anyway get ``304 Not Modified`` without the 4.8 MB body. No token
is asked: it is the published plotly.js, and a ``<script>`` tag sends none.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from recrawl.report.assets import PLOTLY_PATH, plotly_etag, plotly_js

__all__ = ["CACHE_CONTROL", "router"]

CACHE_CONTROL = "public, max-age=31536000, immutable"
"""A year, and no revalidation while fresh: the URL changes with the content."""


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or etag in tags


def router() -> APIRouter:
    """``GET``/``HEAD`` :data:`~recrawl.report.assets.PLOTLY_PATH`."""
    out = APIRouter(tags=["read"])

    @out.head(PLOTLY_PATH, include_in_schema=False)
    @out.get(PLOTLY_PATH, include_in_schema=False)
    def plotly_script(request: Request) -> Response:
        """plotly.js for the dashboard at ``/``."""
        etag = plotly_etag()
        headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
        if _matches(request.headers.get("if-none-match"), etag):
            return Response(status_code=304, headers=headers)
        return Response(plotly_js(), media_type="text/javascript; charset=utf-8", headers=headers)

    return out
