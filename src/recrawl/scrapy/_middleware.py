"""The downloader middleware: every download of a planned URL is an observation."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from recrawl.scrapy._observation import bytes_received, bytes_sent, error_word
from recrawl.scrapy._runtime import JSON_KEY, META_KEY, Recrawl

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

__all__ = ["ATTEMPTS_KEY", "HELD_KEY", "RecrawlDownloaderMiddleware"]

HELD_KEY: Final = "recrawl_held"
"""Request meta key: the id of a 2xx observation waiting for its record."""

ATTEMPTS_KEY: Final = "recrawl_attempts"
"""Request meta key: how many times the request reached the downloader."""

_STARTED: Final = "recrawl_started"
_ENTERED: Final = "recrawl_entered"
_CARRY: Final = "recrawl_carry"
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_PERMANENT: Final = frozenset({301, 308})
_JSON_MISSING: Final = frozenset({404, 410})


class RecrawlDownloaderMiddleware:
    """Turns each download attempt of a planned request (one carrying the
    ``recrawl`` meta key) into an observation: responses of any status and
    failures (timeouts, DNS, refused or reset connections). It sits on the
    downloader side of every built-in middleware (order 950), so it sees
    each retry and each redirect hop as the network did, and the body as
    transferred. A redirect Scrapy follows is folded into the attempt that
    follows it, as ``recrawl crawl`` counts a chain: one observation of the
    planned URL, the bytes of every hop, ``moved_to`` the final URL when the
    first hop was permanent (301/308). A 2xx waits for the callback's items (its record); anything
    else is reported at once. Requests without the key (robots.txt, the
    spider's own follow-ups) are left alone.

    A request for a page's JSON twin (``json_url``, :data:`~recrawl.scrapy._runtime.JSON_KEY`)
    that answers 404 or 410 does not stand for the page: with ``html_fields``
    the page is requested instead (through the site's gate again, its
    observation carrying both requests' bytes, as a redirect hop), and
    directly for the rest of the crawl; without, the observation is the error
    ``json_missing``, as ``recrawl crawl`` reports it.
    """

    def __init__(self, recrawl: Recrawl, *, redirects: int = 20) -> None:
        self.recrawl = recrawl
        self.redirects = redirects
        """Scrapy's ``REDIRECT_MAX_TIMES`` (0: redirects are not followed)."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlDownloaderMiddleware:
        s = crawler.settings
        follow = s.getbool("REDIRECT_ENABLED", True)
        return cls(Recrawl.of(crawler), redirects=s.getint("REDIRECT_MAX_TIMES") if follow else 0)

    def _followed(self, request: Request, response: Response) -> bool:
        """Whether Scrapy's RedirectMiddleware will follow this response."""
        meta = request.meta
        return (
            response.status in _REDIRECTS
            and b"Location" in response.headers
            and not meta.get("dont_redirect", False)
            and not meta.get("handle_httpstatus_all", False)
            and response.status not in meta.get("handle_httpstatus_list", ())
            and meta.get("redirect_times", 0) < self.redirects
        )

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        """Stamp the attempt's start, once the site's gate lets it go (the
        request waits here, before Scrapy's slot); drop it when its site is
        paused, or when the site's robots.txt disallows it (checked again
        after Scrapy's own middleware: :meth:`Recrawl.robots_allows`)."""
        task = request.meta.get(META_KEY)
        if task is not None:
            site = task["site"]
            from scrapy.exceptions import IgnoreRequest
            from scrapy.utils.httpobj import urlparse_cached

            if not self.recrawl.robots_allows(request):
                raise IgnoreRequest("Forbidden by robots.txt")

            netloc = urlparse_cached(request).netloc.lower()
            if not await self.recrawl.enter(
                site, netloc=netloc, canary=task.get("reason") == "canary"
            ):
                raise IgnoreRequest(f"recrawl: site {site} paused")
            request.meta[_ENTERED] = True
            request.meta[_STARTED] = (self.recrawl.clock(), time.monotonic())
            request.meta[ATTEMPTS_KEY] = request.meta.get(ATTEMPTS_KEY, 0) + 1

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response | Request:
        task = request.meta.get(META_KEY)
        if task is None or _STARTED not in request.meta:
            return response
        raw = self._base(request, task)
        raw["status"] = response.status
        if request.meta.pop(_ENTERED, False):
            retry_after = response.headers.get(b"Retry-After")
            headers = {"Retry-After": retry_after.decode("latin-1")} if retry_after else {}
            self.recrawl.leave(task["site"], response.status, None, raw["latency_ms"], headers)
        raw["bytes_received"] += bytes_received(
            response.status, response.headers.items(), response.body
        )
        if request.meta.get(JSON_KEY):
            self.recrawl.json_request()
            if response.status in _JSON_MISSING:
                why = f"{request.url} answered {response.status}"
                if not self.recrawl.json_missing(task, why):
                    raw.pop("permanent", None)
                    self.recrawl.observed(self.recrawl.json_missing_observation(raw))
                    return response
                page = request.replace(url=task["url"])
                page.meta.pop(JSON_KEY, None)
                page.meta[_CARRY] = {
                    "at": raw["fetched_at"],
                    "bytes_sent": raw["bytes_sent"],
                    "bytes_received": raw["bytes_received"],
                    "latency_ms": raw["latency_ms"],
                    "permanent": raw.get("permanent", False),
                }
                return page
        if self._followed(request, response):
            request.meta[_CARRY] = {
                "at": raw["fetched_at"],
                "bytes_sent": raw["bytes_sent"],
                "bytes_received": raw["bytes_received"],
                "latency_ms": raw["latency_ms"],
                "permanent": raw.get("permanent", response.status in _PERMANENT),
            }
            return response
        if raw.pop("permanent", False):
            raw["moved_to"] = request.url
        etag = response.headers.get(b"ETag")
        last_modified = response.headers.get(b"Last-Modified")
        if etag:
            raw["etag"] = etag.decode("latin-1")
        if last_modified:
            raw["last_modified"] = last_modified.decode("latin-1")
        held = self.recrawl.observed(raw, hold=200 <= response.status < 300)
        if held is not None:
            request.meta[HELD_KEY] = held
        return response

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ) -> None:
        task = request.meta.get(META_KEY)
        if task is None or _STARTED not in request.meta:
            return None
        raw = self._base(request, task)
        raw["error"] = error_word(exception)
        if request.meta.pop(_ENTERED, False):
            self.recrawl.leave(task["site"], None, raw["error"], None, {})
        raw.pop("permanent", None)
        self.recrawl.observed(raw)
        return None

    def _base(self, request: Request, task: dict[str, Any]) -> dict[str, Any]:
        """The fields every attempt has: URL, when (crawl clock), bytes sent,
        latency (Scrapy's ``download_latency``, else the time since this
        attempt entered the downloader), route, validators sent."""
        meta = request.meta
        at, t0 = meta.pop(_STARTED)
        latency_s = meta.get("download_latency")
        if latency_s is None:
            latency_s = time.monotonic() - t0
        else:
            # the attempt waited for its slot before the download began
            at = max(at, self.recrawl.clock() - latency_s * self.recrawl.scale)
        proxy = meta.get("proxy")
        headers = request.headers
        raw: dict[str, Any] = {
            "url": task["url"],
            "fetched_at": at,
            "site": task["site"],
            "page_type": task["page_type"],
            "bytes_sent": bytes_sent(
                request.method, request.url, headers.items(), request.body, proxy
            ),
            "latency_ms": round(latency_s * 1000.0, 3),
            "route": str(proxy or ""),
            "conditional": bool(headers.get(b"If-None-Match") or headers.get(b"If-Modified-Since")),
        }
        if task.get("lease_id"):
            raw["lease_id"] = task["lease_id"]
        if task.get("reason") == "canary":
            raw["canary"] = task["url"]
        elif task.get("signal"):
            raw["signal"] = task["signal"]
        if meta.get("retry_times"):
            raw["retry"] = True
        carry = meta.pop(_CARRY, None)
        raw["bytes_received"] = 0
        if carry is not None:  # the hops of a redirect chain before this one
            raw["fetched_at"] = carry["at"]
            raw["bytes_sent"] += carry["bytes_sent"]
            raw["bytes_received"] = carry["bytes_received"]
            raw["latency_ms"] = round(raw["latency_ms"] + carry["latency_ms"], 3)
            raw["permanent"] = carry["permanent"]
        return raw
