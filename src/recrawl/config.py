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

    [page_types.offer]              # records fetched from a JSON twin of each page
    json_url = "{url}.json"         # parts: {url} {scheme} {host} {origin} {path} {query} {search}
    fields = { price = "jmespath:price" }
    html_fields = { price = ".price::text" }   # the page's, when its JSON is missing

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
import string
import tomllib
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urljoin, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from recrawl._exceptions import ConfigError
from recrawl.observe.fingerprint import FieldRule
from recrawl.observe.observation import TRACKING_PARAMS

if TYPE_CHECKING:
    from recrawl.health.score import HealthConfig

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_USER_AGENT",
    "JSON_URL_PARTS",
    "TRACKING_PARAMS",
    "CrawlSettings",
    "ListingRule",
    "PageTypeRule",
    "Reserves",
    "Settings",
    "json_origin_differs",
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


class AlertSettings(BaseModel):
    """Where alerts go (``[alerts]``) and how they are delivered
    (:mod:`recrawl.engine.alerts`): from a queue, retried, never blocking."""

    model_config = ConfigDict(extra="forbid")

    crawl_owner: str | None = None
    """Webhook for site health: a site paused, and the ``bands`` entered
    (default: the top-level ``webhook``)."""
    parser_owner: str | None = None
    """Webhook for parser health: a site's extraction degrading or critical."""
    bands: list[Literal["degrading", "critical"]] = ["critical"]
    """Site bands that alert the crawl owner: ``critical`` (the pause) always
    does; add ``degrading`` to hear of the slow-down too."""
    retries: int = Field(5, ge=0, le=20)
    """Further attempts after a failed delivery (a connection error, a
    timeout, a 5xx, 408 or 429), 1 s apart, then doubling."""
    timeout_s: float = Field(5.0, gt=0)
    """Timeout of one delivery, seconds."""

    @field_validator("crawl_owner", "parser_owner")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"webhook {value!r} is not an http(s) URL")
        return value


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


JSON_URL_PARTS: Final = ("url", "scheme", "host", "origin", "path", "query", "search")
"""The parts a ``json_url`` template may name, of the page's URL
``http://shop.example:8080/p/1?x=2``: ``url`` (all of it), ``scheme``
(``http``), ``host`` (``shop.example:8080``, the port kept), ``origin``
(``http://shop.example:8080``), ``path`` (``/p/1``), ``query`` (``x=2``) and
``search`` (``?x=2``, empty without a query)."""


def _url_parts(url: str) -> dict[str, str]:
    p = urlsplit(url)
    return {
        "url": url,
        "scheme": p.scheme,
        "host": p.netloc,
        "origin": f"{p.scheme}://{p.netloc}",
        "path": p.path or "/",
        "query": p.query,
        "search": f"?{p.query}" if p.query else "",
    }


def json_origin_differs(page: str, json_url: str) -> bool:
    """Whether ``json_url`` is on another origin (scheme, host, port) than ``page``.

    >>> json_origin_differs("http://a.example/p/1", "http://a.example:80/p/1.json")
    False
    >>> json_origin_differs("http://a.example/p/1", "http://api.a.example/p/1.json")
    True
    """

    def key(url: str) -> tuple[str, str, int | None]:
        p = urlsplit(url)
        try:
            port = p.port or {"http": 80, "https": 443}.get(p.scheme)
        except ValueError:
            return (p.scheme, "", -1)
        return (p.scheme.lower(), (p.hostname or "").lower(), port)

    return key(page) != key(json_url)


def _check_template(template: str) -> str:
    """``template`` when it names only :data:`JSON_URL_PARTS` and at least one
    part of the page's URL, else ValueError saying what is wrong."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"json_url {template!r} is not a template: {exc}") from None
    names = [name for _, name, _, _ in parsed if name is not None]
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in JSON_URL_PARTS:
            raise ValueError(
                f"json_url {template!r}: unknown part {{{name}}}; "
                f"known: {', '.join('{' + n + '}' for n in JSON_URL_PARTS)}"
            )
        if spec or conv:
            raise ValueError(f"json_url {template!r}: {{{name}}} takes no conversion or format")
    if not any(n in ("url", "path", "query", "search") for n in names):
        raise ValueError(
            f"json_url {template!r} names no part of the page's URL "
            "({url}, {path}, {query} or {search}): every page would fetch the same URL"
        )
    for page in ("http://shop.example/p/1", "https://shop.example:8443/p/1?q=1"):
        made = urljoin(page, template.format(**_url_parts(page)))
        if urlsplit(made).scheme not in ("http", "https"):
            raise ValueError(f"json_url {template!r} does not make an http(s) URL")
        if json_origin_differs(page, made):
            raise ValueError(
                f"json_url {template!r} leads to another site ({made} for the page {page}): "
                "the crawl fetches a page's JSON only from the page's own scheme, host and port"
            )
    return template


class PageTypeRule(FieldRule):
    """A ``[page_types.NAME]`` table: :class:`~recrawl.observe.fingerprint.FieldRule`
    (what a change is, what the crawl extracts) and where the crawl fetches a
    page's record from."""

    json_url: str | Callable[[str], str] | None = None
    """Fetch the record from this URL instead of the page: a template naming
    parts of the page's URL (:data:`JSON_URL_PARTS`: ``"{url}.json"``,
    ``"{origin}/api{path}.json{search}"``; a relative result is resolved
    against the page's URL), or, from Python, a function of the page's URL
    returning the JSON URL. It must stay on the page's origin (scheme, host
    and port): a template that leaves it is a configuration error, a
    function's result that leaves it is refused by the crawl. The page type's
    ``fields`` then read the JSON body (``jmespath:`` selectors)."""
    html_fields: tuple[tuple[str, str], ...] = ()
    """With ``json_url``: the same fields as ``fields``, read from the page's
    HTML (CSS or XPath selectors) when the crawl fetches the page instead of
    its JSON (the JSON answered 404 or 410, robots.txt disallows it, or it is
    refused), so that the record stays comparable. Without them such a page is
    not fetched. Written as a TOML table."""

    @field_validator("html_fields", mode="before")
    @classmethod
    def _html_pairs(cls, value: Any) -> Any:
        return tuple(value.items()) if isinstance(value, Mapping) else value

    @field_validator("json_url")
    @classmethod
    def _template(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _check_template(value)
        return value

    @model_validator(mode="after")
    def _fallback(self) -> PageTypeRule:
        if self.html_fields:
            if self.json_url is None:
                raise ValueError("html_fields is for a page type with a json_url")
            if {k for k, _ in self.html_fields} != {k for k, _ in self.fields}:
                raise ValueError(
                    "html_fields must name the same fields as fields "
                    f"({sorted(k for k, _ in self.fields)})"
                )
        return self

    def json_url_for(self, url: str) -> str | None:
        """The URL the crawl fetches for the page at ``url`` (None: the page
        itself). Not checked against the page's origin here: the crawl does.

        >>> PageTypeRule(json_url="{url}.json").json_url_for("http://a.example/p/1")
        'http://a.example/p/1.json'
        >>> PageTypeRule(json_url="/api{path}{search}").json_url_for("http://a.example/p/1?v=2")
        'http://a.example/api/p/1?v=2'
        """
        if self.json_url is None:
            return None
        if isinstance(self.json_url, str):
            made = self.json_url.format(**_url_parts(url))
        else:
            made = str(self.json_url(url))
        return urljoin(url, made)


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
    change_hazard_per_day: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Chance per page-day that a page's change rate jumps (None: the
    planner's default, one jump per page every two years): an unvisited
    page's evidence is weighed by ``e^(−h t)``, ``t`` days after its last
    fetch (:attr:`recrawl.plan.planner.PlannerConfig.change_hazard_per_day`)."""
    page_types: dict[str, PageTypeRule] = {}
    block_markers: list[str] = []
    token: str | None = None
    read_token: str | None = None
    webhook: str | None = None
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    lease_seconds: float = Field(600.0, gt=0)
    site_concurrency: int = Field(4, ge=1)
    replicas: bool = False
    """Several ``recrawl serve`` processes share this store (PostgreSQL, or one
    SQLite file on one machine): set it on every one of them. One replica
    plans at a time (it holds the store's planner lock) and publishes each
    plan in the store; the others lease from the published plan; what a
    cycle spends is counted in the store, every replica's leases and reports
    included. When the planning replica dies, its lock is released and
    another takes planning over at its next request."""
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
    cluster: str | None = None
    """A Dask scheduler's address (``tcp://scheduler:8786``): every plan
    (``recrawl plan``, the service's leases, ``recrawl crawl``) is then made
    on that cluster over the page state exported to ``cluster_parquet``
    (:func:`recrawl.plan.dask.plan_on_cluster`; the ``cluster`` extra, the
    ``recrawl`` policy only). None: on this machine."""
    cluster_parquet: str | None = None
    """Where the page state is exported for the cluster: a directory every
    worker reads, or a URL :mod:`pyarrow.fs` opens (``s3://bucket/pages``).
    None: ``<store>.parquet`` beside a SQLite store, ``./recrawl.parquet``
    for PostgreSQL."""
    crawl: CrawlSettings = CrawlSettings()
    alerts: AlertSettings = AlertSettings()
    health: dict[str, float] = {}
    """Knobs of the health scorer (``[health]``): any field of
    :class:`~recrawl.health.score.HealthConfig` by name, e.g. ``healthy_min =
    85``; the others keep their defaults (:meth:`health_config`)."""

    @field_validator("health")
    @classmethod
    def _health(cls, value: dict[str, float]) -> dict[str, float]:
        cls._health_config(value)
        return value

    @staticmethod
    def _health_config(knobs: Mapping[str, float]) -> HealthConfig:
        """The :class:`~recrawl.health.score.HealthConfig` of ``knobs``; a
        ValueError names an unknown knob or a value it cannot take."""
        import dataclasses
        import math

        from recrawl.health.score import HealthConfig

        default = HealthConfig()
        known = {f.name for f in dataclasses.fields(HealthConfig)}
        given: dict[str, Any] = {}
        for name, v in knobs.items():
            if name not in known:
                raise ValueError(
                    f"{name!r} is not a health knob; they are {', '.join(sorted(known))}"
                )
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a number ≥ 0, got {v}")
            if isinstance(getattr(default, name), int):
                if v != int(v):
                    raise ValueError(f"{name} must be a whole number, got {v}")
                given[name] = int(v)
            else:
                given[name] = float(v)
        cfg = HealthConfig(**given)
        if not (0 < cfg.critical_below <= cfg.healthy_min <= 100):
            raise ValueError(
                "the bands need 0 < critical_below ≤ healthy_min ≤ 100, got "
                f"critical_below = {cfg.critical_below:g}, healthy_min = {cfg.healthy_min:g}"
            )
        if cfg.current_min_s > cfg.current_max_s:
            raise ValueError("current_min_s must be at most current_max_s")
        return cfg

    def health_config(self) -> HealthConfig:
        """The health scorer's :class:`~recrawl.health.score.HealthConfig`:
        the defaults with the ``[health]`` knobs set."""
        return self._health_config(self.health)

    @field_validator("page_types", mode="before")
    @classmethod
    def _rules(cls, value: Any) -> Any:
        # a plain FieldRule (the rule before json_url) is taken as it is
        if isinstance(value, Mapping):
            return {
                k: v.model_dump() if isinstance(v, FieldRule) and not isinstance(v, PageTypeRule)
                else v
                for k, v in value.items()
            }  # fmt: skip
        return value

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
    "RECRAWL_REPLICAS": "replicas",
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
