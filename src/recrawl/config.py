"""Configuration: ``recrawl.toml``, validated at start-up, with environment overrides.

Example ``recrawl.toml``::

    billing_unit = "bytes"          # fetches | bytes | credits
    budget_per_day = 5e9            # in the billing unit
    cycle_hours = 1
    objective = "freshness"         # freshness | events
    block_markers = ["are you a robot"]   # extra challenge markers (title/body excerpt)

    [reserves]                      # shares of each cycle's budget
    discovery = 0.05
    reestimate = 0.03
    verify = 0.02

    [page_types.product]            # which record fields count as a change
    ignore = ["fetched_at", "ad_slot", "session"]

    [page_types.product.fields]     # what the crawl extracts and hashes (parsel / JMESPath)
    name = "h1.name::text"
    price = ".price::text"

    [crawl]                         # the fetch loop (recrawl crawl)
    user_agent = "acme-bot/1.0 (+https://acme.example/bot)"
    min_delay_s = 1.0               # between two requests to one site
    routes = { direct = "", pool-a = "http://proxy-a:3128" }
    sitemaps = ["https://shop.example/sitemap_index.xml"]   # besides robots.txt's
    feeds = ["https://news.example/feed.xml"]                # RSS or Atom

Environment variables override the file: ``RECRAWL_BILLING_UNIT``,
``RECRAWL_BUDGET_PER_DAY``, ``RECRAWL_CYCLE_HOURS``, ``RECRAWL_OBJECTIVE``,
``RECRAWL_TOKEN``, ``RECRAWL_READ_TOKEN``, ``RECRAWL_WEBHOOK``,
``RECRAWL_DURABILITY``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from recrawl._exceptions import ConfigError
from recrawl.observe.fingerprint import FieldRule
from recrawl.observe.observation import TRACKING_PARAMS

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_USER_AGENT",
    "TRACKING_PARAMS",
    "CrawlSettings",
    "ListingRule",
    "Reserves",
    "Settings",
    "load_settings",
]

DEFAULT_CONFIG = "recrawl.toml"


class Reserves(BaseModel):
    """Shares (0–1) of each cycle's budget kept for what the scorer cannot see."""

    model_config = ConfigDict(extra="forbid")

    discovery: float = Field(0.05, ge=0, le=1)
    reestimate: float = Field(0.03, ge=0, le=1)
    verify: float = Field(0.02, ge=0, le=1)

    @model_validator(mode="after")
    def _total(self) -> Reserves:
        if self.discovery + self.reestimate + self.verify > 0.9:
            raise ValueError("reserves take more than 90% of the budget")
        return self


DEFAULT_USER_AGENT: Final = "recrawl/{version} (+https://github.com/recrawl/recrawl)"
"""The user agent when ``crawl.user_agent`` is not set; ``{version}`` is replaced."""


def _version() -> str:
    try:
        return metadata.version("recrawl")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


class ListingRule(BaseModel):
    """A page type whose pages are listings: what each item shows
    (:class:`~recrawl.observe.extract.ListingExtractor`'s selectors)."""

    model_config = ConfigDict(extra="forbid")

    items: str
    """Selects each item on the page."""
    url: str
    """The item page's URL, read inside the item (``a::attr(href)``)."""
    summary: dict[str, str] = {}
    """Field name → selector read inside the item (price, stock, …)."""
    next: str | None = None
    """The link to the listing's next page, registered with the same page type."""
    max_pages: int = Field(20, ge=1, le=10_000)
    """Next pages registered per site, at most."""
    item_type: str | None = None
    """Page type of the items the listing reveals (None: the type of the site's
    other crawled pages)."""


class CrawlSettings(BaseModel):
    """How ``recrawl crawl`` fetches. Delays in seconds (of the crawl's clock:
    simulated seconds under ``--time-scale``), sizes in bytes."""

    model_config = ConfigDict(extra="forbid")

    user_agent: str | None = None
    """Sent on every request, and the token robots.txt rules are matched
    against (the part before the first ``/``). Default: :data:`DEFAULT_USER_AGENT`."""
    allow_private_networks: bool = False
    """Let the fetcher reach loopback, private and link-local addresses (after
    DNS resolution, redirects included). Off: whoever can add URLs cannot turn
    the crawler against the internal network."""
    concurrency: int = Field(32, ge=1, le=10_000)
    """Requests in flight across all sites."""
    min_delay_s: float = Field(1.0, ge=0)
    """Least time between two requests to one site (robots.txt Crawl-delay and
    the health band can make it longer)."""
    timeout_s: float = Field(30.0, gt=0)
    robots_ttl_s: float = Field(86400.0, gt=0)
    max_redirects: int = Field(5, ge=0, le=20)
    routes: dict[str, str] = {}
    """Route name → HTTP proxy URL (``""``: direct). Each fetch is recorded with
    its route; with none configured every fetch goes direct, route ``""``."""
    sitemaps: list[str] = []
    """Sitemap URLs the crawl reads (a ``<urlset>`` or an index, gzipped or
    not), besides the ``Sitemap:`` lines of each site's robots.txt. Each
    ``lastmod`` is a hint (source ``sitemap``), judged per site; pages it lists
    that the store lacks are registered for discovery."""
    feeds: list[str] = []
    """RSS or Atom feed URLs the crawl reads (source ``feed``), as ``sitemaps``."""
    robots_sitemaps: bool = True
    """Read the sitemaps each crawled site's robots.txt names."""
    signal_min_interval_s: float = Field(3600.0, gt=0)
    """Shortest time between two reads of one sitemap or feed, seconds: what a
    source that changes at every read gets (a fast site's feed)."""
    signal_max_interval_s: float = Field(86400.0, gt=0)
    """Longest time between two reads of one sitemap or feed, seconds: what a
    source that never shows a change drifts to."""
    listings: dict[str, ListingRule] = {}
    """Page type → :class:`ListingRule`: every fetch of a page of that type
    reads its items; a summary that changed since the crawl last saw it is a
    hint (source ``listing``) that the item changed, an unchanged one vouches
    for the item, new items are registered for discovery."""
    signal_share: float = Field(0.1, gt=0, le=1)
    """Most of ``budget_per_day`` sitemap and feed reads may take over any day
    (each read counts at its real cost in the billing unit): a large sitemap
    under byte billing is read less often."""

    @model_validator(mode="after")
    def _signals(self) -> CrawlSettings:
        if self.signal_min_interval_s > self.signal_max_interval_s:
            raise ValueError("signal_min_interval_s is longer than signal_max_interval_s")
        for url in (*self.sitemaps, *self.feeds):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"sitemap or feed {url!r} is not an http(s) URL")
        return self

    def agent(self) -> str:
        return (self.user_agent or DEFAULT_USER_AGENT).format(version=_version())


class Settings(BaseModel):
    """Everything a deployment configures. Budgets and costs are in ``billing_unit``."""

    model_config = ConfigDict(extra="forbid")

    billing_unit: Literal["fetches", "bytes", "credits"] = "fetches"
    budget_per_day: float | None = Field(None, gt=0, allow_inf_nan=False)
    cycle_hours: float = Field(1.0, gt=0, le=24 * 7)
    objective: Literal["freshness", "events"] = "freshness"
    reserves: Reserves = Reserves()
    half_life_days: float | None = Field(None, gt=0)
    page_types: dict[str, FieldRule] = {}
    block_markers: list[str] = []
    token: str | None = None
    read_token: str | None = None
    webhook: str | None = None
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    lease_seconds: float = Field(600.0, gt=0)
    site_concurrency: int = Field(4, ge=1)
    max_per_host: int | None = Field(None, ge=1)
    """Most tasks one host gets in one cycle's plan (None: no cap)."""
    tracking_params: tuple[str, ...] = TRACKING_PARAMS
    """Query parameters dropped when URLs are canonicalised (``*`` matches any
    suffix): they name the campaign, not the page."""
    durability: Literal["full", "normal"] = "full"
    """What an acknowledged write survives on the SQLite store. ``full``
    (``synchronous=FULL``): the commit is fsynced before the write returns, so
    it survives a crash of the process, of the operating system or a power
    loss. ``normal`` (``synchronous=NORMAL``): it survives a crash of the
    process; an operating-system crash or a power loss may lose the last
    transactions (never corrupt the file). PostgreSQL is always ``full``: it
    fsyncs its log on commit (unless the server runs with ``fsync = off`` or
    ``synchronous_commit = off``). Applied by each :class:`~recrawl.Engine`
    built with these settings."""
    crawl: CrawlSettings = CrawlSettings()

    def daily_budget(self, pages: int) -> float:
        """The budget per day, in the billing unit: ``budget_per_day``, or when
        none is set one fetch per page per day for the ``pages`` pages the store
        holds (what the service spends billing by fetches without a budget, and
        what the dashboard and page info model)."""
        return float(pages) if self.budget_per_day is None else self.budget_per_day


_ENV = {
    "RECRAWL_BILLING_UNIT": "billing_unit",
    "RECRAWL_BUDGET_PER_DAY": "budget_per_day",
    "RECRAWL_CYCLE_HOURS": "cycle_hours",
    "RECRAWL_OBJECTIVE": "objective",
    "RECRAWL_TOKEN": "token",
    "RECRAWL_READ_TOKEN": "read_token",
    "RECRAWL_WEBHOOK": "webhook",
    "RECRAWL_DURABILITY": "durability",
}


def _explain(exc: ValidationError, source: str) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{source}: {where}: {first['msg']}{more}"


def load_settings(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> Settings:
    """Read ``path`` (default ``./recrawl.toml`` when present), then apply the
    environment. Raises :class:`~recrawl.ConfigError` with one clear sentence."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    source = "defaults"
    if path is None and Path(DEFAULT_CONFIG).exists():
        path = DEFAULT_CONFIG
    if path is not None:
        p = Path(path)
        source = str(p)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not valid TOML: {exc}") from None
    from_env = {name: var for var, name in _ENV.items() if env.get(var)}
    for name, var in from_env.items():
        data[name] = env[var]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        top = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        raise ConfigError(_explain(exc, from_env.get(top) or source)) from None
