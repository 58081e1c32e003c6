"""The crawl loop: fetch what the plan says, politely, and report what was found.

- :mod:`~recrawl.crawl.fetch`: the async HTTP fetcher (httpx): pooled
  connections per route, wire bytes, redirects checked hop by hop.
- :mod:`~recrawl.crawl.safety`: no private, loopback or link-local targets
  unless ``allow_private_networks``.
- :mod:`~recrawl.crawl.robots`: robots.txt per site, cached on the crawl's clock.
- :mod:`~recrawl.crawl.politeness`: one site's pacing (:class:`SiteGate`), pure.
- :mod:`~recrawl.crawl.loop`: the cycle loop (:class:`Crawler`) over the
  embedded engine or a running service.
"""

from recrawl.crawl.fetch import DEFAULT_USER_AGENT, Fetcher, FetchRequest, FetchResult
from recrawl.crawl.loop import (
    Crawler,
    CrawlStats,
    CrawlTask,
    EmbeddedSource,
    ServiceSource,
    TaskSource,
    origin_of,
)
from recrawl.crawl.politeness import SiteGate, is_hard_failure, parse_retry_after
from recrawl.crawl.robots import RobotsCache, RobotsRules
from recrawl.crawl.safety import (
    ResolutionFailed,
    UnsafeTarget,
    is_public_address,
    resolve_and_check,
)

__all__ = [
    "DEFAULT_USER_AGENT",
    "CrawlStats",
    "CrawlTask",
    "Crawler",
    "EmbeddedSource",
    "FetchRequest",
    "FetchResult",
    "Fetcher",
    "ResolutionFailed",
    "RobotsCache",
    "RobotsRules",
    "ServiceSource",
    "SiteGate",
    "TaskSource",
    "UnsafeTarget",
    "is_hard_failure",
    "is_public_address",
    "origin_of",
    "parse_retry_after",
    "resolve_and_check",
]
