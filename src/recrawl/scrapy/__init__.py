"""recrawl in a Scrapy project: the plan schedules the spider's revisits.

Five lines of settings (``pip install "recrawl[scrapy]"``, Scrapy 2.13 or
later, its default asyncio reactor)::

    ADDONS = {"recrawl.scrapy.RecrawlAddon": 500}
    RECRAWL_DB = "recrawl.db"          # or RECRAWL_SERVICE_URL + RECRAWL_TOKEN
    RECRAWL_CONFIG = "recrawl.toml"    # budget, billing unit, page types ...
    RECRAWL_RUN_FOR = "20d"            # crawl time; default: until stopped

and a spider deriving from :class:`RecrawlSpider`.

- :class:`RecrawlAddon` installs :class:`RecrawlDownloaderMiddleware` and
  recrawl's politeness defaults.
- :class:`RecrawlSpider` asks the plan for each cycle's tasks and sleeps
  between cycles (no busy loop, no ``DontCloseSpider``: an unfinished
  ``start()`` keeps Scrapy's engine open).
- :class:`RecrawlDownloaderMiddleware` lets each planned request go when its
  site's :class:`~recrawl.crawl.politeness.SiteGate` allows (``recrawl
  crawl``'s slots, spacing, Retry-After, back-off, throttle and band) and
  makes every download attempt of a planned URL an observation (responses of any status, timeouts, DNS errors,
  refused or reset connections; each retry too), reported to the store or
  service in batches.
- :class:`RecrawlRobotParser` (``ROBOTSTXT_PARSER``) is Scrapy's Protego
  parser that also gives each site's robots.txt ``Crawl-delay`` to its gate.

**The record rule.** A 2xx page's record is what its callback yielded: one
item is the record, several are ``{"items": [...]}``; when the page type
lists ``fields`` in ``recrawl.toml``, only those fields of the items count.
A callback that yields no item falls back to the page type's ``fields``
extracted from the body (as ``recrawl crawl`` does), else to a hash of the
body. The store fingerprints the record as in ingest, so "changed" means
the scraped data changed.

Scrapy stats under ``recrawl/``: ``observations``, ``not_modified`` (304s),
``failed`` (errors and statuses ≥ 400; ``failed/timeout``,
``failed/dns``, ``failed/connection_reset`` ... by error), ``retries``, ``stored``,
``rejected``, ``cycles``, ``tasks``, ``budget`` and ``spent`` (billing unit),
``disallowed`` (robots.txt), ``items``, ``registered``, ``held``
(Retry-After holds), ``paused_sites``, ``not_fetched`` (dropped before the
network), ``json_requests`` and ``json_fallbacks`` (a page type's
``json_url``: requests for the JSON twins, twins missing after which the page
was fetched); with an embedded
store, the store's outcomes: ``new``, ``changed``, ``unchanged``, ``gone``,
``error``, ``blocked``.
"""

from recrawl.scrapy._addon import RecrawlAddon
from recrawl.scrapy._middleware import RecrawlDownloaderMiddleware
from recrawl.scrapy._robots import RecrawlRobotParser
from recrawl.scrapy._spider import RecrawlSpider

__all__ = ["RecrawlAddon", "RecrawlDownloaderMiddleware", "RecrawlRobotParser", "RecrawlSpider"]
