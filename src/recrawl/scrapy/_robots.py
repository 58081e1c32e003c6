"""Scrapy's robots.txt parser, telling recrawl each site's ``Crawl-delay``.

Scrapy's ``RobotsTxtMiddleware`` obeys ``Disallow`` but keeps what else the
file says to itself. :class:`RecrawlRobotParser` is Scrapy's own Protego
parser (``ROBOTSTXT_PARSER``, which the add-on sets) that also reads the
``Crawl-delay`` (or ``Request-rate``, as :mod:`recrawl.crawl.robots` reads
them: the larger of the two) of the group the user agent matches, and hands
it to the site's :class:`~recrawl.crawl.politeness.SiteGate` the first time
the middleware asks about one of the site's URLs, before the request goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.robotstxt import ProtegoRobotParser
from scrapy.utils.python import to_unicode

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["RecrawlRobotParser", "crawl_delay_of"]


def crawl_delay_of(parser: Any, user_agent: str) -> float | None:
    """Seconds to leave between two requests for ``user_agent`` by a parsed
    :class:`protego.Protego`: ``Crawl-delay``, or ``Request-rate`` n/s as
    s/n seconds, the larger when both are set; None when neither is.

    >>> from protego import Protego
    >>> crawl_delay_of(Protego.parse("User-agent: *\\nCrawl-delay: 5\\nRequest-rate: 1/20s"), "x")
    20.0
    """
    delays: list[float] = []
    delay = parser.crawl_delay(user_agent)
    if delay is not None:
        delays.append(float(delay))
    rate = parser.request_rate(user_agent)
    if rate is not None and rate.requests > 0:
        delays.append(float(rate.seconds) / float(rate.requests))
    return max(delays) if delays else None


class RecrawlRobotParser(ProtegoRobotParser):
    """``ROBOTSTXT_PARSER = "recrawl.scrapy.RecrawlRobotParser"`` (the add-on's
    default): Scrapy's Protego parser, and the site's robots.txt delay for
    recrawl's gate (in the crawl clock's seconds, as ``recrawl crawl`` keeps
    it). A project that sets another parser keeps Scrapy's ``Disallow`` rules
    but no ``Crawl-delay``."""

    crawler: Crawler | None = None
    _told: frozenset[str] = frozenset()

    @classmethod
    def from_crawler(cls, crawler: Crawler, robotstxt_body: bytes) -> RecrawlRobotParser:
        parser: RecrawlRobotParser = super().from_crawler(crawler, robotstxt_body)
        parser.crawler = crawler
        return parser

    def allowed(self, url: str | bytes, user_agent: str | bytes) -> bool:
        ok = bool(super().allowed(url, user_agent))
        agent = to_unicode(user_agent)
        if self.crawler is not None and agent not in self._told:
            from recrawl.scrapy._runtime import Recrawl

            self._told = self._told | {agent}
            netloc = urlsplit(to_unicode(url)).netloc.lower()
            Recrawl.of(self.crawler).crawl_delay(netloc, crawl_delay_of(self.rp, agent))
        return ok
