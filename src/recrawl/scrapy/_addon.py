"""The Scrapy add-on: ``ADDONS = {"recrawl.scrapy.RecrawlAddon": 500}``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from recrawl.config import load_settings
from recrawl.scrapy._middleware import RecrawlDownloaderMiddleware
from recrawl.scrapy._robots import RecrawlRobotParser

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["MIDDLEWARE_ORDER", "RecrawlAddon"]

MIDDLEWARE_ORDER: Final = 950
"""Where the observation middleware sits: past every built-in downloader
middleware (HttpCache is 900), next to the network."""


class RecrawlAddon:
    """Installs the observation middleware and recrawl's politeness defaults.

    Settings it reads (Scrapy settings, or a spider's ``custom_settings``):

    ``RECRAWL_DB``
        The store (a SQLite path or a ``postgresql://`` URL), planned in this
        process; or ``RECRAWL_SERVICE_URL`` (+ ``RECRAWL_TOKEN``, else
        ``$RECRAWL_TOKEN``) to lease tasks from a running ``recrawl serve``.
    ``RECRAWL_CONFIG``
        ``recrawl.toml`` (default: ``./recrawl.toml`` when present): budget,
        billing unit, cycle, page types, ``[crawl]``.
    ``RECRAWL_RUN_FOR``
        How long the spider runs, crawl time (``20d``, ``6h``); default: until stopped.
    ``RECRAWL_TIME_SCALE``, ``RECRAWL_CLOCK_ORIGIN``
        Simulation only, as ``recrawl crawl --time-scale/--clock-origin``:
        crawl time runs ``scale`` times faster from ``REAL=VIRTUAL``.

    Defaults it sets at the add-on priority (a project's own setting wins):
    ``USER_AGENT`` from ``[crawl]``, ``ROBOTSTXT_OBEY = True``,
    ``ROBOTSTXT_PARSER`` = :class:`~recrawl.scrapy.RecrawlRobotParser` (Scrapy's
    Protego parser that also hands each site's ``Crawl-delay`` to recrawl),
    ``CONCURRENT_REQUESTS_PER_DOMAIN`` from ``site_concurrency``, and
    ``DOWNLOAD_DELAY`` from ``[crawl] min_delay_s`` (in real seconds: divided
    by the time scale); under a time scale, ``AUTOTHROTTLE_START_DELAY`` and
    ``AUTOTHROTTLE_MAX_DELAY`` divided by it too (Scrapy's defaults, 5 and 60
    s, would be hours of crawl time).

    AutoThrottle may be on: it only adds to a slot's delay, and each request
    still waits for its site's gate (Retry-After, back-off, band, Crawl-delay).
    """

    def update_settings(self, settings: BaseSettings) -> None:
        settings.set_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", RecrawlDownloaderMiddleware, MIDDLEWARE_ORDER
        )
        rc = load_settings(settings.get("RECRAWL_CONFIG"))
        scale = settings.getfloat("RECRAWL_TIME_SCALE", 1.0) or 1.0
        settings.set("USER_AGENT", rc.crawl.agent(), priority="addon")
        settings.set("ROBOTSTXT_OBEY", True, priority="addon")
        settings.set("ROBOTSTXT_PARSER", RecrawlRobotParser, priority="addon")
        settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", rc.site_concurrency, priority="addon")
        settings.set("DOWNLOAD_DELAY", rc.crawl.min_delay_s / scale, priority="addon")
        if scale != 1.0:  # AutoThrottle's delays are real seconds too
            for name, default in (
                ("AUTOTHROTTLE_START_DELAY", 5.0),
                ("AUTOTHROTTLE_MAX_DELAY", 60.0),
            ):
                real = settings.getfloat(name, default)
                settings.set(name, real / scale, priority="addon")
