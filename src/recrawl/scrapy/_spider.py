"""The spider base class whose requests are recrawl's plan, cycle after cycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import scrapy
from itemadapter import ItemAdapter, is_item

from recrawl.crawl.loop import CrawlTask
from recrawl.scrapy._middleware import ATTEMPTS_KEY, HELD_KEY
from recrawl.scrapy._runtime import JSON_KEY, META_KEY, Recrawl

if TYPE_CHECKING:
    from scrapy.http import Response
    from twisted.python.failure import Failure

__all__ = ["RECORD_KEY", "RecrawlSpider"]

RECORD_KEY: Final = "recrawl_record"
"""Response meta key of a 304: the record it confirms (a dict), or None."""


class RecrawlSpider(scrapy.Spider):
    """A spider that fetches what recrawl plans.

    :meth:`start` registers :attr:`start_urls` (as pages of :attr:`page_type`)
    for discovery, then, every cycle (``cycle_hours`` of ``recrawl.toml``),
    asks the plan for the cycle's tasks and yields one request each (the
    task's validators as headers, the task in ``meta["recrawl"]``), and sleeps
    until the next cycle: the spider stays open until ``RECRAWL_RUN_FOR`` of
    crawl time has passed (forever without it). Paused sites get no request.

    Write :meth:`parse` as usual: the items it yields for a response are the
    page's record. A 304 goes to :meth:`parse_not_modified` instead (nothing
    to parse), with the record it confirms in ``response.meta["recrawl_record"]``.
    Requests the callbacks yield are ordinary Scrapy requests,
    outside the plan and not observed.
    """

    page_type: str = "page"
    """The page type ``start_urls`` are registered as (a table of ``[page_types]``)."""

    async def start(self) -> AsyncIterator[Any]:
        recrawl = Recrawl.of(self.crawler)
        await recrawl.register(getattr(self, "start_urls", ()), self.page_type)
        async for task in recrawl.cycles():
            if recrawl.target_for(task) is None:  # its JSON refused, no html_fields
                recrawl.not_fetched(task.url, disallowed=False)
                continue
            yield self.request_for(task)

    def request_for(self, task: CrawlTask) -> scrapy.Request:
        """The request for one planned fetch (override to add headers or cookies;
        keep the meta). For a page type with a ``json_url``, the request is for
        the page's JSON twin (``response.meta["recrawl_json"]`` is then True):
        the page type's ``fields`` read its body (``jmespath:``) when the
        callback yields no item; a twin that answers 404 or 410 is replaced by
        the page itself when the page type has ``html_fields``."""
        meta = Recrawl.meta_for(task)
        url = Recrawl.of(self.crawler).target_for(task) or task.url
        if url != task.url:
            meta[JSON_KEY] = True
        return scrapy.Request(
            url,
            callback=self._recrawl_parse,
            errback=self._recrawl_failed,
            headers=dict(task.headers),
            meta=meta,
            dont_filter=True,  # a revisit is the point
        )

    def parse(self, response: Response, **kwargs: Any) -> Any:
        """The items of a fetched page (nothing by default)."""
        return None

    def parse_not_modified(self, response: Response) -> Any:
        """Called for a 304 instead of :meth:`parse`: the page has not changed
        since recrawl's last fetch, and there is no body to parse.
        ``response.meta["recrawl_record"]`` (:data:`RECORD_KEY`) is the record
        that fetch gave (what its callback yielded, as :mod:`recrawl.scrapy`
        makes records), or None when this add-on did not keep it (the
        validators came from a fetch it did not see). Nothing by default:
        yield items from the record to pass them on again."""
        return None

    async def _recrawl_parse(self, response: Response) -> AsyncIterator[Any]:
        recrawl = Recrawl.of(self.crawler)
        meta = response.meta
        items: list[Mapping[str, Any]] = []
        try:
            if response.status == 304:
                sent = response.request.headers if response.request is not None else {}
                meta[RECORD_KEY] = recrawl.confirmed_record(meta[META_KEY]["url"], sent)
                result = self.parse_not_modified(response)
            else:
                result = self.parse(response)
            async for out in _each(result):
                if is_item(out):
                    items.append(ItemAdapter(out).asdict())
                yield out
        finally:
            held = meta.pop(HELD_KEY, None)
            if held is not None:
                recrawl.complete(held, response, items)
            recrawl.done(meta[META_KEY]["url"])

    def _recrawl_failed(self, failure: Failure) -> scrapy.Request | None:
        from scrapy.exceptions import IgnoreRequest
        from scrapy.spidermiddlewares.httperror import HttpError

        recrawl = Recrawl.of(self.crawler)
        request = failure.request  # type: ignore[attr-defined]
        task = request.meta[META_KEY]
        if isinstance(failure.value, HttpError):  # observed by the middleware already
            held = request.meta.pop(HELD_KEY, None)
            if held is not None:
                recrawl.complete(held, None, [])
            recrawl.done(task["url"])
        elif isinstance(failure.value, IgnoreRequest) and not request.meta.get(ATTEMPTS_KEY):
            why = str(failure.value)
            robots = "robots.txt" in why
            twin = robots and request.meta.get(JSON_KEY)
            if twin and recrawl.json_missing(task, f"robots.txt disallows {request.url}"):
                page: scrapy.Request = request.replace(url=task["url"])
                page.meta.pop(JSON_KEY, None)
                return page  # the page itself, as recrawl crawl does
            recrawl.not_fetched(task["url"], disallowed=robots)
        else:
            recrawl.done(task["url"])
        return None


async def _each(result: Any) -> AsyncIterator[Any]:
    if result is None:
        return
    if hasattr(result, "__aiter__"):
        async for x in result:
            yield x
        return
    if hasattr(result, "__await__"):
        got = await result
        async for x in _each(got):
            yield x
        return
    if isinstance(result, Iterable) and not isinstance(result, str | bytes | Mapping):
        for x in result:
            yield x
        return
    yield result  # one item or request
