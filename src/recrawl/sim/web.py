"""A synthetic web on loopback: sites whose pages change at known times.

:class:`SimWeb` serves each :class:`SiteSpec` from its own
:class:`http.server.ThreadingHTTPServer` on ``127.0.0.1`` (a port the OS picks),
so a crawler under test makes real HTTP requests. Without routes a site is
named by its ``host:port`` (``"127.0.0.1:41234"``) once started; its pages are
``http://127.0.0.1:41234/p/<i>`` for ``i`` in ``range(n_pages)``.

**The proxy front door.** Given :class:`RouteSpec` routes, the web also listens
on one proxy port per route (``http://127.0.0.1:P1`` is route ``pool-a/us``,
``P2`` is ``pool-b/de`` ...). A proxy port takes absolute-form HTTP requests
(``GET http://shop.example/p/42 HTTP/1.1``, what an HTTP client sends to a
plain-http proxy; ``CONNECT`` is refused) for the web's sites, and sites are
then named by their host name (:attr:`SiteSpec.hostname`, by default
``<name>.example``): the crawler requests ordinary URLs through its routes and
needs no DNS. A route can be scheduled dead (``"reset"``: the connection is
reset without an answer; ``"502"``: the proxy answers 502 Bad Gateway) or
``"slow"``, and a hostile window of a site can hold on one route only. The
request log records the route of every request (``""``: direct).

Time is an injected :data:`~recrawl.clock.Clock`. Every decision the server
makes (which version a page is at, whether a hostile window is open, the
``Last-Modified`` and ``Date`` headers) uses that clock's **virtual** unix
seconds, so with a :class:`~recrawl.clock.ScaledClock` a month of changes runs
in minutes. All times in this module are virtual unix seconds unless named
``real``; rates are **changes per day**; sizes are **bytes**.

Everything random about a site except the volatile parts of a page (an ad slot
and a session token, new on every load, as they are) is drawn from
``numpy.random.default_rng([seed, site_index])`` when the :class:`SimWeb` is
built: per-page change rates (lognormal around each :class:`PageGroup`'s
``rate_per_day``), Poisson change times over ``[origin, origin + horizon_s]``,
prices and padding; the change times of the other processes (bursts, business
hours, a rate jump) and pages that appear later come from generators of their
own, so adding them leaves those draws as they were. Two webs with the same specs, seed and origin have the same
change times. After the horizon pages stop changing. A change is a change of
the record (a page's price and stock); the ad slot, the served-at time and the
session token change on every load and are not changes.

What a site answers, in the order it checks:

* ``/robots.txt``: ``SiteSpec.robots`` as ``text/plain`` (404 when None), with
  a ``Sitemap:`` line appended when the site has a sitemap. Never blocked by a
  hostile window, so robots handling can be tested on its own.
* inside a hostile window ``(start, end, kind[, route])``: ``"429"`` → 429 with
  ``Retry-After: <retry_after_s>``; ``"403"`` → 403; ``"challenge"`` → 200 with
  a captcha page titled *Are you a robot?*; ``"soft_block"`` → 200 with an
  empty result page (*No results*, no price, no stock); ``"slow"`` → the normal
  answer after ``slow_s`` virtual seconds.
* ``always_500`` → 500, ``gone`` → 404, ``moved`` → 301 to the new path (a normal
  page), ``redirected`` → 302 to a normal page (temporary), ``soft_404`` → 200
  with a *Page not found* page.
* the cheap signals, where the spec has them: ``/sitemap.xml`` (a sitemap, or
  a sitemap index over ``/sitemap-<k>.xml`` or ``.xml.gz`` parts), ``/feed.xml``
  (RSS 2.0) or ``/feed.atom`` (Atom) of the latest changes, listing pages
  ``/list/<k>`` (see :class:`SiteSpec` for the formats).
* ``/p/<i>``: the page at its current version, with ``ETag: "<i>-<version>"``
  and ``Last-Modified`` of its last change, validators as ``SiteSpec.validators``
  says (honoured: ``If-None-Match``, or without it ``If-Modified-Since``, that
  still matches gets 304; ignored: always 200; lying: 304 to any validator of
  the page, even after it changed; none: no validators sent).
* ``/p/<i>.json``, when ``SiteSpec.json_twin``: the page's JSON twin, its
  record only (``{"id", "name", "price", "stock", "served_at"}``, about 100
  bytes against the page's thousands), with the page's validators (the same
  ``ETag``, honoured the same way); 404 when the page is not a normal page
  (a fault path, not appeared yet). Without ``json_twin``: 404.
* ``/private/<anything>``: 200, a page that never changes (robots.txt usually
  disallows it, so a crawler that ignores robots.txt is visible in the log).
* anything else: 404.

Billing, as the two models of the seed: every :class:`RequestRecord` carries
the wire bytes of the request as received (``bytes_in``: request line and
headers) and of the answer as sent (``bytes_out``: status line, headers and
body), and ``credits``: the route's ``credits_per_success`` for an answer
with a status below 400 from the site, 0 otherwise (a proxy's 502 or reset
costs no credit but its bytes). :meth:`SimWeb.billing` sums them by route and
site.

Ground truth for tests and benchmarks: :attr:`SimWeb.request_log` (every
request as a :class:`RequestRecord`), :meth:`SimWeb.change_times`,
:meth:`SimWeb.all_change_times`, :meth:`SimWeb.freshness_from_log` and
:meth:`SimWeb.billing`; :func:`write_ground_truth` writes them to files and
the admin port (:attr:`SimWeb.admin_url`) serves the same files live.

>>> from recrawl.clock import ManualClock
>>> import urllib.request
>>> clock = ManualClock(1_700_000_000.0)
>>> with SimWeb([SiteSpec("shop", n_pages=3)], clock=clock, seed=1) as web:
...     url = web.urls()[0]
...     with urllib.request.urlopen(url) as resp:
...         status, etag = resp.status, resp.headers["ETag"]
>>> status, etag
(200, '"0-0"')
>>> [(r.path, r.status, r.version) for r in web.request_log]
[('/p/0', 200, 0)]
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import json
import math
import random
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, get_args
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

import numpy as np

from recrawl._exceptions import ConfigError, NotFound
from recrawl.clock import Clock, system_clock

__all__ = [
    "DEFAULT_ROBOTS",
    "LISTING_PAGE_ITEMS",
    "ChangeProcess",
    "FeedKind",
    "HostileKind",
    "ListingMode",
    "PageGroup",
    "RequestLog",
    "RequestRecord",
    "RouteFault",
    "RouteSpec",
    "Scenario",
    "SimWeb",
    "SiteSpec",
    "SitemapMode",
    "ValidatorMode",
    "load_scenario",
    "read_scenario",
    "write_ground_truth",
]

HostileKind = Literal["challenge", "429", "403", "soft_block", "slow"]
"""How a site pushes back inside a hostile window."""

RouteFault = Literal["reset", "502", "slow"]
"""How a route fails inside one of its fault windows."""

ValidatorMode = Literal["honoured", "ignored", "lying", "none"]
"""What a site does with conditional requests (see :class:`SiteSpec`)."""

SitemapMode = Literal["honest", "read_time", "lazy", "absent"]
"""What a site's sitemap says of its pages' ``lastmod`` (see :class:`SiteSpec`)."""

FeedKind = Literal["rss", "atom", "none"]
"""A site's feed of recent changes."""

ListingMode = Literal["fresh", "stale", "none"]
"""Whether a site's listing pages show each item's summary now or late."""

ChangeProcess = Literal["poisson", "bursts", "business_hours", "rate_jump"]
"""How a page's record changes over time (see :class:`PageGroup`)."""

Served = Literal[
    "page",
    "robots",
    "private",
    "error_500",
    "gone",
    "moved",
    "redirected",
    "soft_404",
    "challenge",
    "soft_block",
    "429",
    "403",
    "not_found",
    "sitemap",
    "sitemap_index",
    "feed",
    "listing",
    "json",
    "bad_gateway",
    "route_reset",
    "bad_request",
]
"""What a request was answered with (:attr:`RequestRecord.served`)."""

DEFAULT_ROBOTS: Final = "User-agent: *\nDisallow: /private/\n"
"""The robots.txt a site serves unless its spec says otherwise."""

LISTING_PAGE_ITEMS: Final = 40
"""Items per listing page ``/list/<k>``."""

_DAY_S: Final = 86400.0
_MAX_SLOW_REAL_S: Final = 10.0
_HOSTILE_KINDS: Final = frozenset(get_args(HostileKind))
_ROUTE_FAULTS: Final = frozenset(get_args(RouteFault))
_VALIDATORS: Final = frozenset(get_args(ValidatorMode))
_SITEMAPS: Final = frozenset(get_args(SitemapMode))
_FEEDS: Final = frozenset(get_args(FeedKind))
_LISTINGS: Final = frozenset(get_args(ListingMode))
_PROCESSES: Final = frozenset(get_args(ChangeProcess))
# Extra entropy words for the generators of the change processes and of late
# pages: separate streams, so the draws of ``default_rng([seed, site])`` (the
# Poisson change times, prices ...) are the same with or without them.
_PROCESS_STREAM: Final = 0x5EED_0001
_LATE_STREAM: Final = 0x5EED_0002
_LOREM: Final = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud "
    "exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure "
    "in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint "
    "occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est"
)
_WORDS: Final = _LOREM.split()
_CORPUS_CHARS: Final = 24_000
_STOCK: Final = ("in stock", "low stock", "out of stock")
_HOSTNAME: Final = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")


@dataclass(frozen=True)
class PageGroup:
    """Pages of one type on a site, changing alike.

    ``n_pages`` pages whose change rates (changes per day) are drawn from a
    lognormal with mean ``rate_per_day`` and log-sd ``rate_sigma`` (0: every
    page at exactly ``rate_per_day``). A site's groups take consecutive page
    numbers ``/p/<i>`` in the order listed.

    ``process`` (:data:`ChangeProcess`) is how each page's record changes at
    its drawn rate ``r`` (changes per day):

    * ``poisson``: a Poisson process at ``r``.
    * ``bursts``: bursts start as a Poisson process at ``r / burst_size``;
      a burst holds a geometric number of changes of mean ``burst_size``
      (at least 1), the first at the burst's start and the next ones at
      exponential gaps of mean ``burst_gap_s`` seconds; the long-run rate is
      ``r``.
    * ``business_hours``: changes only from ``business_hours[0]`` to
      ``business_hours[1]`` o'clock local time (half-open) on Monday to
      Friday, local time being UTC plus ``utc_offset_h`` hours; a Poisson
      process inside at ``r × 7 × 24 / (5 × hours a day)``, so the average
      over a week is ``r`` a day.
    * ``rate_jump``: a Poisson process at ``r`` until ``jump_at_days`` days
      after the web's origin, at ``r × jump_factor`` after (``r`` is the rate
      :meth:`SimWeb.rates` reports).

    Pages that appear later (discovery): ``late_share`` of the group's pages
    (rounded), or ``late_pages`` of them, chosen at random, do not exist (404,
    in no sitemap, feed or listing, not in :meth:`SimWeb.urls`) until a time
    drawn per page uniformly in ``appear_days`` (days after the origin; equal
    ends: that very time; None: over the web's horizon); their record changes
    only after it (version 0 from the appearance).

    Every field from ``process`` on may be left None: the site's value
    (:class:`SiteSpec` has the same fields); ``late_share`` / ``late_pages``
    set on a group apply to that group only.
    """

    page_type: str
    n_pages: int
    rate_per_day: float
    rate_sigma: float = 0.5
    process: ChangeProcess | None = None
    burst_size: float | None = None
    burst_gap_s: float | None = None
    business_hours: tuple[float, float] | None = None
    utc_offset_h: float | None = None
    jump_at_days: float | None = None
    jump_factor: float | None = None
    late_share: float | None = None
    late_pages: int | None = None
    appear_days: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for name in ("business_hours", "appear_days"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _pair(value, f"page group {self.page_type!r}", name))
        _check_process(f"page group {self.page_type!r}", self)
        if not self.page_type:
            raise ConfigError("a page group needs a page_type")
        if self.n_pages < 0:
            raise ConfigError(f"page group {self.page_type!r}: n_pages must be >= 0")
        if not (self.rate_per_day >= 0 and self.rate_sigma >= 0):
            raise ConfigError(
                f"page group {self.page_type!r}: rate_per_day and rate_sigma must be >= 0"
            )


_PROCESS_FIELDS: Final = (
    "process",
    "burst_size",
    "burst_gap_s",
    "business_hours",
    "utc_offset_h",
    "jump_at_days",
    "jump_factor",
    "appear_days",
)
"""The change-process fields a page group takes from its site when left None."""


def _pair(value: Any, what: str, name: str) -> tuple[float, float]:
    """``[a, b]`` as a tuple of two floats, or a :class:`ConfigError` naming ``name``."""
    try:
        a, b = value
        return float(a), float(b)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {name} must be two numbers [a, b], got {value!r}") from None


def _check_process(what: str, obj: Any) -> None:
    """Check the change-process and late-page fields of a site or a group (None: not set)."""

    def bad(name: str, rule: str) -> ConfigError:
        return ConfigError(f"{what}: {name} {rule}, got {getattr(obj, name)!r}")

    process = obj.process
    if process is not None and process not in _PROCESSES:
        raise bad("process", f"must be one of {sorted(_PROCESSES)}")
    for name, low, high, rule in (
        ("burst_size", 1.0, math.inf, "must be >= 1"),
        ("burst_gap_s", 0.0, math.inf, "must be > 0"),
        ("utc_offset_h", -14.0, 14.0, "must be in [-14, 14]"),
        ("jump_at_days", 0.0, math.inf, "must be >= 0"),
        ("jump_factor", 0.0, math.inf, "must be >= 0"),
        ("late_share", 0.0, 1.0, "must be in [0, 1]"),
    ):
        value = getattr(obj, name)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
            or (name == "burst_gap_s" and value == 0)
        ):
            raise bad(name, rule)
    late_pages = obj.late_pages
    if late_pages is not None and (
        isinstance(late_pages, bool) or not isinstance(late_pages, int) or late_pages < 0
    ):
        raise bad("late_pages", "must be a whole number >= 0")
    if late_pages and obj.late_share:
        raise ConfigError(f"{what}: give late_share or late_pages, not both")
    if late_pages is not None and late_pages > obj.n_pages:
        raise bad("late_pages", f"must be at most n_pages ({obj.n_pages})")
    hours = obj.business_hours
    if hours is not None and not 0 <= hours[0] < hours[1] <= 24:
        raise bad("business_hours", "must be [start, end] hours with 0 <= start < end <= 24")
    appear = obj.appear_days
    if appear is not None and not 0 <= appear[0] <= appear[1]:
        raise bad("appear_days", "must be [first, last] days with 0 <= first <= last")


def _window(
    w: Sequence[Any], what: str, kinds: frozenset[str]
) -> tuple[float, float, str, str | None]:
    """``(start, end, kind[, route])`` checked and normalised."""
    if len(w) not in (3, 4):
        raise ConfigError(f"{what}: a window is (start, end, kind[, route]), got {list(w)}")
    start, end, kind = float(w[0]), float(w[1]), str(w[2])
    route = str(w[3]) if len(w) == 4 and w[3] is not None else None
    if kind not in kinds:
        raise ConfigError(f"{what}: kind {kind!r} not in {sorted(kinds)}")
    if not start < end:
        raise ConfigError(f"{what}: window ({start}, {end}) is empty")
    return start, end, kind, route


@dataclass
class SiteSpec:
    """One simulated site.

    ``name`` is a label (unique within a :class:`SimWeb`); the site's address is
    given when the web starts: ``127.0.0.1:<port>`` without routes, else
    ``hostname`` (default ``<name>.example``, lower case) reached through the
    proxies. Its pages ``/p/0`` … are the ``groups`` in order (default one
    group ``product`` of ``n_pages`` pages at ``rate_per_day`` with log-sd
    ``rate_sigma``; with groups, ``n_pages`` becomes their total), each
    changing at its own rate under ``process`` (default ``poisson``; see
    :class:`PageGroup` for ``bursts``, ``business_hours``, ``rate_jump`` and
    their fields, which a group takes from its site unless it sets its own).
    ``late_share`` (rounded) or ``late_pages`` of the site's pages, chosen at
    random, appear later, each at a time drawn uniformly in ``appear_days``
    (days after the origin; None: over the horizon); groups may instead set
    their own (not both).

    Faults, by path (a path may be a ``/p/<i>`` page, which then stops being a
    normal page, or any other path): ``always_500`` answer 500, ``gone`` 404,
    ``soft_404`` 200 with a not-found page, ``moved`` maps an old path to the
    ``/p/<i>`` page it answers 301 for (a permanent move), ``redirected`` one
    it answers 302 for (a temporary redirect: the page stays at its URL). ``hostile`` lists windows
    ``(start_s, end_s, kind)`` or ``(start_s, end_s, kind, route)`` in **seconds
    after the web's origin** (virtual time), half-open, during which every
    request except ``/robots.txt`` (only those through ``route``, when given)
    gets ``kind`` (:data:`HostileKind`); a 429 carries ``Retry-After:
    retry_after_s`` (virtual seconds), a ``slow`` answer waits ``slow_s``
    virtual seconds. ``robots`` is the robots.txt body (None: 404).
    ``n_private`` pages ``/private/<j>`` are listed by
    ``SimWeb.urls(private=True)``; any path under ``/private/`` answers 200.
    Page bodies are ``page_bytes`` long (a range, drawn per page), volatile
    parts included.

    ``validators`` (:data:`ValidatorMode`): ``honoured`` (304 while the page is
    unchanged), ``ignored`` (validators sent, conditional requests answered
    200), ``lying`` (304 to any ``If-None-Match`` naming the page or any
    ``If-Modified-Since``, even after the record changed), ``none`` (no
    ``ETag`` nor ``Last-Modified``).

    Cheap signals, each off unless asked for:

    * ``sitemap`` (:data:`SitemapMode`) at ``/sitemap.xml``, listed in
      robots.txt as ``Sitemap: http://<host>/sitemap.xml``: every normal page's
      ``<loc>`` and ``<lastmod>`` (W3C datetime, UTC), which is the page's
      last change (``honest``), the time the sitemap was read (``read_time``:
      every URL stamped now), or its last change as of the latest
      regeneration, every ``sitemap_lag_s`` seconds from the origin (``lazy``:
      a change shows up late); ``absent``: 404. With ``sitemap_chunk`` > 0 and
      more pages than that, ``/sitemap.xml`` is a sitemap index over parts
      ``/sitemap-<k>.xml`` of ``sitemap_chunk`` URLs each (``.xml.gz``, gzipped
      files, when ``sitemap_gzip``), each part's ``<lastmod>`` its newest.
    * ``feed`` (:data:`FeedKind`): ``/feed.xml`` (RSS 2.0) or ``/feed.atom``
      (Atom), the latest ``feed_items`` changes, newest first: each item's
      link is the page's URL, its ``guid`` / ``id`` ``<url>#<version>``, its
      date (``pubDate`` RFC 822, ``updated`` RFC 3339) the change time.
    * ``listing`` (:data:`ListingMode`): pages ``/list/0`` … of
      :data:`LISTING_PAGE_ITEMS` normal pages each, in page order, each item
      ``<li class="item"><a class="link" href="<url>">Item i</a><span
      class="price">…</span><span class="stock">…</span></li>`` as the item
      page shows them, and ``<a class="next" rel="next" href="…">`` to the
      next listing page; ``fresh`` shows the summaries now, ``stale`` as they
      were ``listing_lag_s`` seconds ago. Listing pages carry no validators.
    * ``json_twin``: each page ``/p/<i>`` also answers at ``/p/<i>.json`` with
      its record as JSON (``id``, ``name``, ``price``, ``stock`` as the page
      shows them, and ``served_at``), the page's validators included: a
      structured endpoint, a small fraction of the page's bytes. Off: 404.
    """

    name: str
    n_pages: int = 100
    rate_per_day: float = 1.0
    rate_sigma: float = 1.0
    robots: str | None = DEFAULT_ROBOTS
    always_500: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)
    redirected: dict[str, str] = field(default_factory=dict)
    soft_404: list[str] = field(default_factory=list)
    hostile: list[tuple[Any, ...]] = field(default_factory=list)
    retry_after_s: int = 60
    n_private: int = 3
    page_bytes: tuple[int, int] = (5000, 9000)
    hostname: str = ""
    groups: list[PageGroup] = field(default_factory=list)
    validators: ValidatorMode = "honoured"
    sitemap: SitemapMode = "absent"
    sitemap_lag_s: float = _DAY_S
    sitemap_chunk: int = 0
    sitemap_gzip: bool = False
    feed: FeedKind = "none"
    feed_items: int = 20
    listing: ListingMode = "none"
    listing_lag_s: float = _DAY_S
    json_twin: bool = False
    slow_s: float = 30.0
    process: ChangeProcess = "poisson"
    burst_size: float = 5.0
    burst_gap_s: float = 600.0
    business_hours: tuple[float, float] = (9.0, 18.0)
    utc_offset_h: float = 0.0
    jump_at_days: float = 15.0
    jump_factor: float = 2.0
    late_share: float = 0.0
    late_pages: int = 0
    appear_days: tuple[float, float] | None = None
    delisted: dict[str, float] = field(default_factory=dict)
    """Normal pages (``/p/<i>``) that leave every listing page this many days
    after the web's origin (the page itself stays, and goes on changing)."""

    def __post_init__(self) -> None:
        what = f"site {self.name!r}"
        if self.groups:
            self.groups = [g if isinstance(g, PageGroup) else PageGroup(**g) for g in self.groups]
            self.n_pages = sum(g.n_pages for g in self.groups)
        self.business_hours = _pair(self.business_hours, what, "business_hours")
        if self.appear_days is not None:
            self.appear_days = _pair(self.appear_days, what, "appear_days")
        _check_process(what, self)
        if (self.late_share or self.late_pages) and any(
            g.late_share is not None or g.late_pages is not None for g in self.groups
        ):
            raise ConfigError(
                f"{what}: give late_share / late_pages on the site or on its groups, not both"
            )
        if self.n_pages < 0 or self.n_private < 0:
            raise ConfigError(f"{what}: page counts must be non-negative")
        if not (self.rate_per_day >= 0 and self.rate_sigma >= 0):
            raise ConfigError(f"{what}: rate_per_day and rate_sigma must be >= 0")
        if self.retry_after_s < 0:
            raise ConfigError(f"{what}: retry_after_s must be >= 0")
        low, high = self.page_bytes
        if not 1000 <= low <= high:
            raise ConfigError(f"{what}: page_bytes must be (low, high), 1000 <= low <= high")
        self.hostname = (self.hostname or f"{self.name}.example").lower()
        if not _HOSTNAME.match(self.hostname):
            raise ConfigError(f"{what}: {self.hostname!r} is not a host name (name.tld)")
        for label, value, allowed in (
            ("validators", self.validators, _VALIDATORS),
            ("sitemap", self.sitemap, _SITEMAPS),
            ("feed", self.feed, _FEEDS),
            ("listing", self.listing, _LISTINGS),
        ):
            if value not in allowed:
                raise ConfigError(f"{what}: {label} {value!r} not in {sorted(allowed)}")
        if not (
            self.sitemap_lag_s > 0
            and self.listing_lag_s >= 0
            and self.slow_s >= 0
            and self.sitemap_chunk >= 0
            and self.feed_items >= 1
        ):
            raise ConfigError(
                f"{what}: sitemap_lag_s must be > 0, listing_lag_s, slow_s and sitemap_chunk "
                ">= 0, feed_items >= 1"
            )
        seen: set[str] = set()
        for path in [
            *self.always_500, *self.gone, *self.soft_404, *self.moved, *self.redirected
        ]:  # fmt: skip
            if not path.startswith("/") or path == "/robots.txt":
                raise ConfigError(f"{what}: bad fault path {path!r}")
            if path in seen:
                raise ConfigError(f"{what}: {path!r} is listed under two faults")
            seen.add(path)
        for old, new in [*self.moved.items(), *self.redirected.items()]:
            i = _page_index(new)
            if i is None or i >= self.n_pages or new in seen:
                raise ConfigError(f"{what}: {old!r} moves to {new!r}, which is not a normal page")
        for w in self.hostile:
            _window(w, f"{what}: hostile", _HOSTILE_KINDS)
        for path, day in self.delisted.items():
            i = _page_index(path)
            if i is None or i >= self.n_pages or not day >= 0:
                raise ConfigError(f"{what}: delisted {path!r} is not a normal page, or {day!r} < 0")

    @property
    def fault_paths(self) -> set[str]:
        """Every path listed under a fault."""
        return {*self.always_500, *self.gone, *self.soft_404, *self.moved, *self.redirected}

    def page_groups(self) -> list[PageGroup]:
        """The site's page groups (the one default group when none was given),
        change-process fields left None filled in from the site's."""
        site = {name: getattr(self, name) for name in _PROCESS_FIELDS}
        if not self.groups:
            return [PageGroup("product", self.n_pages, self.rate_per_day, self.rate_sigma, **site)]
        return [
            replace(g, **{k: v for k, v in site.items() if getattr(g, k) is None})
            for g in self.groups
        ]


@dataclass
class RouteSpec:
    """One route of the proxy front door: a proxy port of the web.

    ``name`` is the route label the crawler uses (``"pool-a/us"``).
    ``faults`` lists windows ``(start_s, end_s, kind)`` in seconds after the
    web's origin (virtual time), half-open, during which the route fails
    (:data:`RouteFault`): ``"reset"`` resets the connection without an answer,
    ``"502"`` answers 502 Bad Gateway without asking the site, ``"slow"`` adds
    ``slow_s`` virtual seconds before the answer. ``credits_per_success`` is
    what a successful answer (status below 400) through this route costs in
    credits.
    """

    name: str
    faults: list[tuple[Any, ...]] = field(default_factory=list)
    slow_s: float = 30.0
    credits_per_success: float = 1.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a route needs a name")
        if self.slow_s < 0 or self.credits_per_success < 0:
            raise ConfigError(f"route {self.name!r}: slow_s and credits must be >= 0")
        for w in self.faults:
            if len(w) != 3:
                raise ConfigError(f"route {self.name!r}: a fault is (start, end, kind)")
            _window(w, f"route {self.name!r}: fault", _ROUTE_FAULTS)


@dataclass(frozen=True)
class Scenario:
    """What a scenario file holds: the sites and the routes (maybe none)."""

    sites: list[SiteSpec]
    routes: list[RouteSpec] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request a :class:`SimWeb` answered.

    ``t`` is the virtual time it arrived (unix seconds on the web's clock),
    ``real`` the real unix time. ``site`` is the site's address (``"127.0.0.1:PORT"``,
    or its host name when the web has routes; ``""`` when a proxy could not
    tell the site), ``path`` the path without the query. ``status`` is what
    was sent (0: the route reset the connection); ``served`` says what
    (``"page"``, ``"robots"``, ``"private"``, ``"error_500"``, ``"gone"``,
    ``"moved"``, ``"redirected"``, ``"soft_404"``, ``"challenge"``, ``"soft_block"``, ``"429"``,
    ``"403"``, ``"not_found"``, ``"sitemap"``, ``"sitemap_index"``, ``"feed"``,
    ``"listing"``, ``"json"`` (a page's JSON twin), and from a proxy
    ``"bad_gateway"``, ``"route_reset"``, ``"bad_request"``). ``version`` is
    the page version the answer stands for (200 of a ``/p/<i>`` page or its
    JSON twin: the version sent; 304: the version the client
    keeps, which a lying site lets fall behind ``current_version``; 0 for
    private pages; else None). ``if_none_match`` and ``user_agent`` are the
    request headers (None when absent). ``retry_after_until`` is
    ``t + Retry-After`` on a 429, else None. ``route`` is the route's name
    (``""``: direct). ``bytes_in`` / ``bytes_out`` are the request's and the
    answer's wire bytes, headers included; ``credits`` what the answer costs
    in credits. ``current_version`` is the page's true version at ``t`` (for
    ``/p/<i>`` pages), ``page_type`` its group's type.
    """

    t: float
    real: float
    site: str
    path: str
    status: int
    served: Served
    version: int | None = None
    if_none_match: str | None = None
    user_agent: str | None = None
    retry_after_until: float | None = None
    method: str = "GET"
    route: str = ""
    bytes_in: int = 0
    bytes_out: int = 0
    credits: float = 0.0
    current_version: int | None = None
    page_type: str | None = None
    if_modified_since: str | None = None

    @property
    def url(self) -> str:
        """``http://<site><path>``."""
        return f"http://{self.site}{self.path}"


class RequestLog:
    """A thread-safe, append-only list of :class:`RequestRecord`.

    Iterating, indexing and ``len`` read a snapshot; the server appends a
    request's record before it sends the response, so a client that has its
    answer finds the record already here.
    """

    def __init__(self, records: Iterable[RequestRecord] = ()) -> None:
        self._lock = threading.Lock()
        self._records = list(records)

    def append(self, record: RequestRecord) -> None:
        """Add one record."""
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        """A copy of the records so far, in arrival order."""
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __getitem__(self, index: int) -> RequestRecord:
        with self._lock:
            return self._records[index]


def _page_index(path: str) -> int | None:
    """``i`` for ``/p/<i>`` (canonical decimal), else None."""
    return _index_after(path, "/p/")


def _index_after(path: str, prefix: str) -> int | None:
    if not path.startswith(prefix):
        return None
    tail = path[len(prefix) :]
    if not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return None
    return int(tail)


def _http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def _w3c(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _etag_matches(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


def _etag_version(header: str, i: int) -> int | None:
    """The version an ``If-None-Match`` names for page ``i`` (the first that does)."""
    prefix = f'"{i}-'
    for tag in header.split(","):
        tag = tag.strip().removeprefix("W/")
        if tag.startswith(prefix) and tag.endswith('"') and tag[len(prefix) : -1].isdigit():
            return int(tag[len(prefix) : -1])
    return None


def _parse_http_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


@dataclass
class _Answer:
    status: int
    served: Served
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    version: int | None = None
    retry_after_until: float | None = None
    delay_s: float = 0.0
    current_version: int | None = None
    page_type: str | None = None


_HTML: Final = ("Content-Type", "text/html; charset=utf-8")
_XML: Final = ("Content-Type", "application/xml; charset=utf-8")
_JSON: Final = ("Content-Type", "application/json")


def _by_page(page: np.ndarray, t: np.ndarray, n: int) -> list[np.ndarray]:
    """Times ``t`` of pages ``page`` (0 … n-1) as one sorted array per page."""
    order = np.lexsort((t, page))
    counts = np.bincount(page, minlength=n)
    return np.split(t[order], np.cumsum(counts)[:-1])


def _draw_changes(
    g: PageGroup, rates: np.ndarray, rng: np.random.Generator, origin: float, horizon_s: float
) -> list[np.ndarray]:
    """Change times (seconds after the origin, in ``[0, horizon_s]``) of a group's
    pages at per-page ``rates`` (changes per day) under ``g.process``."""
    n = rates.size
    span_d = horizon_s / _DAY_S
    idx = np.arange(n)
    if g.process == "bursts":
        size_mean = float(g.burst_size or 1.0)
        gap_s = float(g.burst_gap_s or 1.0)
        n_bursts = rng.poisson(rates / size_mean * span_d)
        page = np.repeat(idx, n_bursts)
        begin = rng.uniform(0.0, horizon_s, page.size)
        size = rng.geometric(1.0 / size_mean, page.size)
        gaps = rng.exponential(gap_s, int(size.sum()))
        head = np.cumsum(size) - size  # each burst's first change
        gaps[head] = 0.0
        run = np.cumsum(gaps)
        t = np.repeat(begin, size) + run - np.repeat(run[head], size)
        page = np.repeat(page, size)
        keep = t <= horizon_s
        return _by_page(page[keep], t[keep], n)
    if g.process == "business_hours":
        assert g.business_hours is not None
        h0, h1 = g.business_hours
        off = float(g.utc_offset_h or 0.0) * 3600.0
        # The open hours: local days (unix days of local time) covering the
        # horizon, Monday to Friday (day 0, 1970-01-01, was a Thursday).
        day = np.arange(
            math.floor((origin + off) / _DAY_S), math.floor((origin + horizon_s + off) / _DAY_S) + 1
        )
        day = day[(day + 3) % 7 < 5]
        lo = np.clip(day * _DAY_S + h0 * 3600.0 - off - origin, 0.0, horizon_s)
        hi = np.clip(day * _DAY_S + h1 * 3600.0 - off - origin, 0.0, horizon_s)
        lo, hi = lo[hi > lo], hi[hi > lo]
        until = np.concatenate([[0.0], np.cumsum(hi - lo)])
        inside = rates * 7 * 24 / (5 * (h1 - h0))
        count = rng.poisson(inside * until[-1] / _DAY_S)
        page = np.repeat(idx, count)
        u = rng.uniform(0.0, until[-1], page.size)
        k = np.clip(np.searchsorted(until, u, side="right") - 1, 0, max(lo.size - 1, 0))
        t = lo[k] + (u - until[k]) if lo.size else u
        return _by_page(page, np.minimum(t, hi[k]) if lo.size else t, n)
    if g.process == "rate_jump":
        jump = min(max(float(g.jump_at_days or 0.0) * _DAY_S, 0.0), horizon_s)
        factor = float(g.jump_factor if g.jump_factor is not None else 1.0)
        before = rng.poisson(rates * jump / _DAY_S)
        after = rng.poisson(rates * factor * (horizon_s - jump) / _DAY_S)
        page = np.concatenate([np.repeat(idx, before), np.repeat(idx, after)])
        t = np.concatenate(
            [
                rng.uniform(0.0, jump, int(before.sum())),
                rng.uniform(jump, horizon_s, int(after.sum())),
            ]
        )
        return _by_page(page, t, n)
    raise AssertionError(f"no sampler for process {g.process!r}")


def _draw_appearances(
    spec: SiteSpec, groups: Sequence[PageGroup], seed: int, index: int, horizon_s: float
) -> np.ndarray:
    """Per page, when it appears (seconds after the origin; -inf: there from the
    start), from the site's or its groups' ``late_share`` / ``late_pages``."""
    n = spec.n_pages
    out = np.full(n, -np.inf)
    if not (spec.late_share or spec.late_pages) and not any(
        g.late_share or g.late_pages for g in groups
    ):
        return out
    rng = np.random.default_rng([seed, index, _LATE_STREAM])

    def pick(first: int, size: int, share: float, count: int, days: Any) -> None:
        k = count if count else round(share * size)
        if k == 0:
            return
        lo_d, hi_d = days if days is not None else (0.0, horizon_s / _DAY_S)
        chosen = first + rng.choice(size, k, replace=False)
        out[chosen] = rng.uniform(lo_d * _DAY_S, hi_d * _DAY_S, k)

    if spec.late_share or spec.late_pages:
        pick(0, n, spec.late_share, spec.late_pages, spec.appear_days)
    else:
        first = 0
        for g in groups:
            pick(first, g.n_pages, g.late_share or 0.0, g.late_pages or 0, g.appear_days)
            first += g.n_pages
    return out


class _Site:
    """One site's precomputed state; :meth:`answer` decides every response."""

    def __init__(self, spec: SiteSpec, index: int, seed: int, origin: float, horizon_s: float):
        self.spec = spec
        self.origin = origin
        self.host = ""
        self.direct = ""
        rng = np.random.default_rng([seed, index])
        n = spec.n_pages
        rates: list[np.ndarray] = []
        self.page_types: list[str] = []
        groups = spec.page_groups()
        for g in groups:
            sigma = g.rate_sigma
            rates.append(
                g.rate_per_day * rng.lognormal(-(sigma**2) / 2, sigma, g.n_pages)
                if sigma > 0
                else np.full(g.n_pages, g.rate_per_day)
            )
            self.page_types += [g.page_type] * g.n_pages
        self.rates = np.concatenate(rates) if rates else np.empty(0)
        counts = rng.poisson(self.rates * horizon_s / _DAY_S)
        offsets = rng.uniform(0.0, horizon_s, int(counts.sum()))
        self.changes: list[np.ndarray] = []
        start = 0
        for k in counts.tolist():
            times = np.sort(offsets[start : start + k]) + origin
            times.setflags(write=False)
            self.changes.append(times)
            start += k
        # Other processes replace their pages' Poisson times, from their own
        # generator (the draws above stay as they were).
        prng = np.random.default_rng([seed, index, _PROCESS_STREAM])
        first = 0
        for g in groups:
            if g.process != "poisson" and g.n_pages:
                drawn = _draw_changes(
                    g, self.rates[first : first + g.n_pages], prng, origin, horizon_s
                )
                for i, times in enumerate(drawn, start=first):
                    times = times + origin
                    times.setflags(write=False)
                    self.changes[i] = times
            first += g.n_pages
        # Pages that appear later: no changes before they exist.
        self.appear = _draw_appearances(spec, groups, seed, index, horizon_s) + origin
        self.late = [i for i in range(n) if self.appear[i] > -np.inf]
        for i in self.late:
            times = self.changes[i][self.changes[i] > self.appear[i]]
            times.setflags(write=False)
            self.changes[i] = times
        self._appear: list[float] = self.appear.tolist()
        self._change_lists = [c.tolist() for c in self.changes]
        self._base_cents = rng.integers(500, 50_000, n).tolist()
        self._stock0 = rng.integers(0, len(_STOCK), n).tolist()
        self._corpus = " ".join(rng.choice(np.array(_WORDS), _CORPUS_CHARS // 4).tolist())[
            :_CORPUS_CHARS
        ]
        low, high = spec.page_bytes
        self._lengths = rng.integers(low, high + 1, n).tolist()
        self._pad_at = rng.integers(0, max(1, len(self._corpus) - high), n).tolist()
        self._volatile = random.Random(int(rng.integers(0, 2**63)))
        self._volatile_lock = threading.Lock()
        self._delisted = {
            int(_page_index(p) or 0): origin + d * _DAY_S for p, d in spec.delisted.items()
        }
        self._faults: dict[str, Served] = {}
        for path in spec.always_500:
            self._faults[path] = "error_500"
        for path in spec.gone:
            self._faults[path] = "gone"
        for path in spec.soft_404:
            self._faults[path] = "soft_404"
        for path in spec.moved:
            self._faults[path] = "moved"
        for path in spec.redirected:
            self._faults[path] = "redirected"
        self._hostile = []
        for w in spec.hostile:
            s, e, kind, route = _window(w, spec.name, _HOSTILE_KINDS)
            self._hostile.append((origin + s, origin + e, kind, route))
        bad = spec.fault_paths
        self.normal = [i for i in range(n) if f"/p/{i}" not in bad]
        # Every change of a normal page, in time order, for the feed (and the
        # appearance of a late page, as its version 0).
        ev_t = [t for i in self.normal for t in self._change_lists[i]]
        ev_p = [i for i in self.normal for _ in self._change_lists[i]]
        late_normal = [i for i in self.late if i in set(self.normal)]
        ev_t += [self._appear[i] for i in late_normal]
        ev_p += late_normal
        order = np.argsort(np.asarray(ev_t, dtype=np.float64), kind="stable")
        self._events_t = np.asarray(ev_t, dtype=np.float64)[order].tolist()
        self._events_p = np.asarray(ev_p, dtype=np.int64)[order].tolist()

    def bind(self, host: str, direct: str) -> None:
        self.host, self.direct = host, direct

    @property
    def root(self) -> str:
        return f"http://{self.host}"

    def version_at(self, i: int, t: float) -> int:
        """Changes of page ``i`` at or before ``t``."""
        return bisect.bisect_right(self._change_lists[i], t)

    def last_change(self, i: int, t: float) -> float:
        """Time of page ``i``'s last change at or before ``t`` (if none, the
        origin, or the page's appearance if it came later)."""
        v = self.version_at(i, t)
        return self._change_lists[i][v - 1] if v else self.born(i)

    def born(self, i: int) -> float:
        """When page ``i``'s version 0 dates from: the origin, or its appearance."""
        return max(self.origin, self._appear[i])

    def present(self, t: float) -> list[int]:
        """The normal pages that exist at ``t``."""
        if not self.late:
            return self.normal
        return [i for i in self.normal if self._appear[i] <= t]

    def robots_body(self) -> bytes | None:
        if self.spec.robots is None:
            return None
        text = self.spec.robots
        if self.spec.sitemap != "absent":
            text = text.rstrip("\n") + f"\nSitemap: {self.root}/sitemap.xml\n"
        return text.encode()

    def answer(
        self, path: str, t: float, inm: str | None, ims: str | None, route: str = ""
    ) -> _Answer:
        if path == "/robots.txt":
            body = self.robots_body()
            if body is None:
                return _Answer(
                    404, "not_found", b"no robots.txt\n", [("Content-Type", "text/plain")]
                )
            return _Answer(200, "robots", body, [("Content-Type", "text/plain; charset=utf-8")])
        delay = 0.0
        for start, end, kind, only in self._hostile:
            if start <= t < end and (only is None or only == route):
                if kind == "slow":
                    delay = max(delay, self.spec.slow_s)
                    continue
                return self._hostile_answer(kind, t)
        out = self._answer(path, t, inm, ims)
        out.delay_s = delay
        return out

    def _answer(self, path: str, t: float, inm: str | None, ims: str | None) -> _Answer:
        fault = self._faults.get(path)
        if fault is not None:
            return self._fault_answer(fault, path)
        if self.spec.json_twin and path.endswith(".json"):
            i = _page_index(path[:-5])
            if (
                i is not None
                and i < self.spec.n_pages
                and path[:-5] not in self._faults
                and t >= self._appear[i]
            ):
                return self._page(i, t, inm, ims, twin=True)
            return _Answer(404, "not_found", b'{"error": "not found"}', [_JSON])
        i = _page_index(path)
        if i is not None and i < self.spec.n_pages:
            if t < self._appear[i]:
                return _Answer(
                    404, "not_found", _html("Not Found", "<p>No such page.</p>"), [_HTML]
                )
            return self._page(i, t, inm, ims)
        if path.startswith("/private/"):
            body = _html(f"Private {path[9:]}", "<p>Members only.</p>")
            return _Answer(200, "private", body, [_HTML], version=0)
        signal = self._signal(path, t)
        if signal is not None:
            return signal
        return _Answer(404, "not_found", _html("Not Found", "<p>No such page.</p>"), [_HTML])

    # -- cheap signals ---------------------------------------------------

    def _signal(self, path: str, t: float) -> _Answer | None:
        spec = self.spec
        if spec.sitemap != "absent" and path.startswith("/sitemap"):
            return self._sitemap(path, t)
        if spec.feed == "rss" and path == "/feed.xml":
            return self._feed_rss(t)
        if spec.feed == "atom" and path == "/feed.atom":
            return self._feed_atom(t)
        k = _index_after(path, "/list/")
        if spec.listing != "none" and k is not None:
            return self._listing(k, t)
        return None

    def _lastmod(self, i: int, t: float) -> float:
        mode = self.spec.sitemap
        if mode == "read_time":
            return t
        if mode == "lazy":
            return self.last_change(i, self._regen(t))
        return self.last_change(i, t)

    def _regen(self, t: float) -> float:
        """When a lazy sitemap read at ``t`` was last regenerated."""
        lag = self.spec.sitemap_lag_s
        return self.origin + math.floor(max(t - self.origin, 0.0) / lag) * lag

    def _sitemap(self, path: str, t: float) -> _Answer | None:
        chunk = self.spec.sitemap_chunk
        pages = self.present(self._regen(t) if self.spec.sitemap == "lazy" else t)
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        head = '<?xml version="1.0" encoding="UTF-8"?>\n'
        if chunk == 0 or len(pages) <= chunk:
            if path != "/sitemap.xml":
                return None
            return _Answer(200, "sitemap", self._urlset(pages, t), [_XML])
        parts = [pages[k : k + chunk] for k in range(0, len(pages), chunk)]
        ext = ".xml.gz" if self.spec.sitemap_gzip else ".xml"
        if path == "/sitemap.xml":
            rows = "".join(
                f"<sitemap><loc>{self.root}/sitemap-{k}{ext}</loc>"
                f"<lastmod>{_w3c(max(self._lastmod(i, t) for i in part))}</lastmod></sitemap>\n"
                for k, part in enumerate(parts)
            )
            body = f"{head}<sitemapindex {ns}>\n{rows}</sitemapindex>\n".encode()
            return _Answer(200, "sitemap_index", body, [_XML])
        if not (path.startswith("/sitemap-") and path.endswith(ext)):
            return None
        k = _index_after(path[: -len(ext)], "/sitemap-")
        if k is None or k >= len(parts):
            return None
        body = self._urlset(parts[k], t)
        if self.spec.sitemap_gzip:
            return _Answer(
                200, "sitemap", gzip.compress(body, mtime=0), [("Content-Type", "application/gzip")]
            )
        return _Answer(200, "sitemap", body, [_XML])

    def _urlset(self, pages: Sequence[int], t: float) -> bytes:
        rows = "".join(
            f"<url><loc>{self.root}/p/{i}</loc><lastmod>{_w3c(self._lastmod(i, t))}</lastmod></url>\n"
            for i in pages
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{rows}</urlset>\n'
        ).encode()

    def _recent(self, t: float) -> list[tuple[float, int, int]]:
        """The latest ``feed_items`` changes at or before ``t``: (time, page, version), newest first."""
        k = bisect.bisect_right(self._events_t, t)
        lo = max(0, k - self.spec.feed_items)
        out = []
        for j in range(k - 1, lo - 1, -1):
            when, i = self._events_t[j], self._events_p[j]
            out.append((when, i, self.version_at(i, when)))
        return out

    def _feed_rss(self, t: float) -> _Answer:
        items = "".join(
            f"<item><title>Item {i} updated</title><link>{self.root}/p/{i}</link>"
            f'<guid isPermaLink="false">{self.root}/p/{i}#{v}</guid>'
            f"<pubDate>{_http_date(when)}</pubDate></item>\n"
            for when, i, v in self._recent(t)
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>'
            f"<title>{escape(self.spec.name)}: recent changes</title><link>{self.root}/</link>"
            f"<description>Pages changed lately</description>"
            f"<lastBuildDate>{_http_date(t)}</lastBuildDate>\n{items}</channel></rss>\n"
        ).encode()
        return _Answer(200, "feed", body, [("Content-Type", "application/rss+xml; charset=utf-8")])

    def _feed_atom(self, t: float) -> _Answer:
        entries = "".join(
            f'<entry><title>Item {i} updated</title><link href="{self.root}/p/{i}"/>'
            f"<id>{self.root}/p/{i}#{v}</id><updated>{_w3c(when)}</updated></entry>\n"
            for when, i, v in self._recent(t)
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
            f"<title>{escape(self.spec.name)}: recent changes</title><id>{self.root}/</id>"
            f"<updated>{_w3c(t)}</updated>\n{entries}</feed>\n"
        ).encode()
        return _Answer(200, "feed", body, [("Content-Type", "application/atom+xml; charset=utf-8")])

    def _listing(self, k: int, t: float) -> _Answer | None:
        per = LISTING_PAGE_ITEMS
        seen = t - self.spec.listing_lag_s if self.spec.listing == "stale" else t
        listed = self.present(seen)
        if self._delisted:
            listed = [i for i in listed if self._delisted.get(i, math.inf) > seen]
        items = listed[k * per : (k + 1) * per]
        if not items:
            return None
        rows = "".join(
            f'<li class="item"><a class="link" href="{self.root}/p/{i}">Item {i}</a>'
            f'<span class="price">{self._price(i, v)}</span>'
            f'<span class="stock">{self._stock(i, v)}</span></li>'
            for i in items
            for v in (self.version_at(i, seen),)
        )
        more = (k + 1) * per < len(listed)
        nxt = f'<a class="next" rel="next" href="{self.root}/list/{k + 1}">next</a>' if more else ""
        body = _html(f"Listing {k}", f'<ul class="items">{rows}</ul>{nxt}')
        return _Answer(200, "listing", body, [_HTML])

    # -- pages -------------------------------------------------------------

    def _hostile_answer(self, kind: str, t: float) -> _Answer:
        if kind == "429":
            wait = self.spec.retry_after_s
            return _Answer(
                429,
                "429",
                _html("Too Many Requests", "<p>Slow down.</p>"),
                [_HTML, ("Retry-After", str(wait))],
                retry_after_until=t + wait,
            )
        if kind == "403":
            return _Answer(403, "403", _html("Access denied", "<p>Forbidden.</p>"), [_HTML])
        if kind == "soft_block":
            body = _html("Search", '<div class="results"><p>No results.</p></div>')
            return _Answer(200, "soft_block", body, [_HTML])
        captcha = (
            '<form class="captcha"><p>Please confirm you are human.</p><input name="c"></form>'
        )
        return _Answer(200, "challenge", _html("Are you a robot?", captcha), [_HTML])

    def _fault_answer(self, fault: Served, path: str) -> _Answer:
        if fault == "error_500":
            return _Answer(500, fault, _html("Internal Server Error", "<p>Oops.</p>"), [_HTML])
        if fault == "gone":
            return _Answer(404, fault, _html("Not Found", "<p>No such page.</p>"), [_HTML])
        if fault in ("moved", "redirected"):
            target = self.spec.moved.get(path) or self.spec.redirected[path]
            location = f"{self.root}{target}"
            return _Answer(
                301 if fault == "moved" else 302,
                fault,
                _html("Moved", f'<a href="{location}">here</a>'),
                [_HTML, ("Location", location)],
            )
        body = _html(
            "Page not found",
            "<h1>Sorry, we couldn't find that item.</h1><p>It may have been removed.</p>",
        )
        return _Answer(200, "soft_404", body, [_HTML])

    def _price(self, i: int, v: int) -> str:
        cents = self._base_cents[i] + (i * 7919 + v * 104_729) % 9973 - 4986
        return f"{max(cents, 99) / 100:.2f}"

    def _stock(self, i: int, v: int) -> str:
        return _STOCK[(self._stock0[i] + v) % len(_STOCK)]

    def _page(
        self, i: int, t: float, inm: str | None, ims: str | None, *, twin: bool = False
    ) -> _Answer:
        v = self.version_at(i, t)
        served: Served = "json" if twin else "page"
        last = self._change_lists[i][v - 1] if v else self.born(i)
        etag = f'"{i}-{v}"'
        mode = self.spec.validators
        kind = self.page_types[i]
        headers = [] if mode == "none" else [("ETag", etag), ("Last-Modified", _http_date(last))]

        def not_modified(kept: int) -> _Answer:
            # A 304 names the copy the client keeps (a lying site's stays behind).
            at = self._change_lists[i][kept - 1] if kept else self.born(i)
            same = [("ETag", f'"{i}-{kept}"'), ("Last-Modified", _http_date(at))]
            return _Answer(
                304, served, headers=same, version=kept, current_version=v, page_type=kind
            )

        if mode == "honoured":
            if inm is not None:
                if _etag_matches(inm, etag):
                    return not_modified(v)
            elif ims is not None and _not_modified_since(ims, last):
                return not_modified(v)
        elif mode == "lying":
            held = _etag_version(inm, i) if inm is not None else None
            if held is not None and held <= v:
                return not_modified(held)
            since = _parse_http_date(ims) if inm is None and ims is not None else None
            if since is not None:
                return not_modified(self.version_at(i, since))
        if twin:  # the record alone: no ad, no session, no padding
            record = {
                "id": i,
                "name": f"Item {i}",
                "price": self._price(i, v),
                "stock": self._stock(i, v),
                "served_at": _w3c(t),
            }
            return _Answer(
                200, "json", json.dumps(record).encode(), [_JSON, *headers],
                version=v, current_version=v, page_type=kind,
            )  # fmt: skip
        with self._volatile_lock:
            ad = self._volatile.getrandbits(48)
            token = self._volatile.getrandbits(64)
        title = f"Item {i}" if kind == "product" else f"{kind.capitalize()} {i}"
        head = (
            f"<!doctype html><html><head><title>{title}</title></head><body>"
            f'<h1 class="name">Item {i}</h1><span class="price">{self._price(i, v)}</span>'
            f'<span class="stock">{self._stock(i, v)}</span>'
            f'<div class="ad">Sponsored offer #{ad:012x}</div>'
            f'<p class="served">Served at <time>{_w3c(t)}</time></p>'
            f'<form class="session"><input type="hidden" name="session" value="{token:016x}">'
            "</form>"
            '<div class="description"><p>'
        )
        tail = "</p></div></body></html>"
        fill = max(0, self._lengths[i] - len(head) - len(tail))
        at = self._pad_at[i]
        body = (head + self._corpus[at : at + fill] + tail).encode()
        return _Answer(
            200, "page", body, [_HTML, *headers], version=v, current_version=v, page_type=kind
        )


def _not_modified_since(ims: str, last: float) -> bool:
    since = _parse_http_date(ims)
    return since is not None and int(last) <= since


def _html(title: str, inner: str) -> bytes:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{inner}</body></html>".encode()


class _Route:
    """A route's fault windows on the web's virtual clock."""

    def __init__(self, spec: RouteSpec, origin: float) -> None:
        self.spec = spec
        self.name = spec.name
        self.windows = []
        for w in spec.faults:
            s, e, kind, _ = _window(w, f"route {spec.name!r}", _ROUTE_FAULTS)
            self.windows.append((origin + s, origin + e, kind))

    def faults_at(self, t: float) -> set[str]:
        return {kind for start, end, kind in self.windows if start <= t < end}


class _Server(ThreadingHTTPServer):
    """A site's port (``site``), a route's proxy port (``route``) or the admin port (neither)."""

    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a crawl stopped, a timeout) is not an error of
        the web's: only anything else is printed, as the standard server does."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError):
            super().handle_error(request, client_address)

    def __init__(
        self,
        address: tuple[str, int],
        web: SimWeb,
        site: _Site | None = None,
        route: _Route | None = None,
        handler: type[BaseHTTPRequestHandler] | None = None,
    ) -> None:
        self.web = web
        self.site = site
        self.route = route
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler or _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the host's FQDN, which can stall on DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open keep-alive connection (so a stopped web answers nothing)."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _host_key(netloc: str) -> str:
    """A request's ``host[:port]`` as the web's lookup key (``:80`` dropped)."""
    netloc = netloc.lower().rsplit("@", 1)[-1]
    return netloc.removesuffix(":80")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    # Head and body go out in one write; with Nagle on, a keep-alive response
    # could still wait ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        self._respond(head_only=False)

    def do_HEAD(self) -> None:
        self._respond(head_only=True)

    def do_CONNECT(self) -> None:
        self._respond(head_only=False)

    def _request_bytes(self) -> int:
        """The request's wire size as received: request line, headers, blank line."""
        size = len(getattr(self, "raw_requestline", b"")) + 2
        for name, value in self.headers.items():
            size += len(name) + len(value) + 4
        return size

    def _respond(self, *, head_only: bool) -> None:
        web, route = self.server.web, self.server.route
        t = web.clock()
        real = time.time()
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        site: _Site | None = self.server.site
        delay = 0.0
        credit = 1.0
        if route is None:
            assert site is not None
            path = urlsplit(self.path).path or "/"
            answer = site.answer(path, t, inm, ims) if self.command != "CONNECT" else None
        else:
            credit = route.spec.credits_per_success
            parts = urlsplit(self.path)
            path = parts.path or "/"
            absolute = self.command != "CONNECT" and parts.scheme == "http"
            site = web._by_key.get(_host_key(parts.netloc)) if absolute else None
            faults = route.faults_at(t)
            if "reset" in faults:
                self._log(t, real, site, path, _Answer(0, "route_reset"), route.name, 0, 0.0)
                self._reset()
                return
            if "slow" in faults:
                delay += route.spec.slow_s
            if not absolute:
                answer = None
            elif site is None or "502" in faults:
                body = _html("Bad Gateway", "<p>The proxy could not reach the site.</p>")
                answer = _Answer(502, "bad_gateway", body, [_HTML])
            else:
                answer = site.answer(path, t, inm, ims, route.name)
        if answer is None:
            body = _html("Bad Request", "<p>Only absolute http:// URLs are forwarded.</p>")
            answer = _Answer(400, "bad_request", body, [_HTML])
            self.close_connection = True
        delay += answer.delay_s
        from_site = answer.served not in ("bad_gateway", "bad_request")
        body = b"" if head_only or answer.status == 304 else answer.body
        head = self._head(answer, t)
        credits = credit if from_site and answer.status < 400 else 0.0
        self._log(
            t, real, site, path, answer, route.name if route else "", len(head) + len(body), credits
        )
        if delay > 0:
            scale = getattr(web.clock, "scale", None)
            if isinstance(scale, float | int) and scale > 0:
                time.sleep(min(delay / scale, _MAX_SLOW_REAL_S))
        self.wfile.write(head + body)

    def _log(
        self,
        t: float,
        real: float,
        site: _Site | None,
        path: str,
        answer: _Answer,
        route: str,
        bytes_out: int,
        credits: float,
    ) -> None:
        self.server.web.request_log.append(
            RequestRecord(
                t=t,
                real=real,
                site=site.host if site is not None else "",
                path=path,
                status=answer.status,
                served=answer.served,
                version=answer.version if answer.status in (200, 304) else None,
                if_none_match=self.headers.get("If-None-Match"),
                user_agent=self.headers.get("User-Agent"),
                retry_after_until=answer.retry_after_until,
                method=self.command,
                route=route,
                bytes_in=self._request_bytes(),
                bytes_out=bytes_out,
                credits=credits,
                current_version=answer.current_version,
                page_type=answer.page_type,
                if_modified_since=self.headers.get("If-Modified-Since"),
            )
        )

    def _head(self, answer: _Answer, t: float) -> bytes:
        phrase = self.responses.get(answer.status, ("",))[0]
        lines = [
            f"HTTP/1.1 {answer.status} {phrase}",
            "Server: recrawl-simweb",
            f"Date: {_http_date(t)}",
            *(f"{name}: {value}" for name, value in answer.headers),
        ]
        if answer.status != 304:
            lines.append(f"Content-Length: {len(answer.body)}")
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _reset(self) -> None:
        """Reset the connection (RST, no answer), as a dead proxy does."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _AdminHandler(BaseHTTPRequestHandler):
    """The admin port: the ground truth as it stands, never in the request log."""

    protocol_version = "HTTP/1.1"
    timeout = 60
    server: _Server

    def do_GET(self) -> None:
        web = self.server.web
        path = urlsplit(self.path).path
        files = {
            "/changes.jsonl": ("application/x-ndjson", _changes_jsonl),
            "/requests.jsonl": ("application/x-ndjson", _requests_jsonl),
            "/sites.json": ("application/json", _sites_json),
            "/billing.json": ("application/json", _billing_json),
        }
        if path in ("/", "/index.json"):
            kind, body = "application/json", json.dumps(sorted(files)) + "\n"
        elif path in files:
            kind, make = files[path]
            body = make(web)
        else:
            kind, body = "text/plain", "not found\n"
        data = body.encode()
        self.send_response(200 if path in files or path in ("/", "/index.json") else 404)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SimWeb:
    """Several simulated sites, each on its own loopback port, on one virtual clock.

    ``clock`` gives virtual unix seconds (a :class:`~recrawl.clock.ScaledClock`
    to run days in seconds, a :class:`~recrawl.clock.ManualClock` to step;
    slow answers wait only on a clock with a ``scale``). ``origin`` is the
    virtual time change schedules and hostile windows count from (default:
    ``clock()`` when the web is built); pages change over
    ``[origin, origin + horizon_s]`` and not after. ``seed`` fixes everything
    but the volatile parts of pages.

    ``routes`` (:class:`RouteSpec`, or a bare route name) open the proxy front
    door: one proxy port per route (:attr:`proxies`), and sites addressed by
    host name (:attr:`SiteSpec.hostname`) through them. Each site keeps its
    direct port (:meth:`direct_url`) either way, and the admin port
    (:attr:`admin_url`) serves the ground truth.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Addresses
    exist only once started; a stopped web is not restarted.
    """

    def __init__(
        self,
        sites: Sequence[SiteSpec],
        *,
        clock: Clock = system_clock,
        seed: int = 0,
        horizon_s: float = 30 * _DAY_S,
        origin: float | None = None,
        host: str = "127.0.0.1",
        routes: Sequence[RouteSpec | str] = (),
    ) -> None:
        names = [s.name for s in sites]
        if len(set(names)) != len(names):
            raise ConfigError(f"site names must be unique, got {names}")
        hostnames = [s.hostname for s in sites]
        if len(set(hostnames)) != len(hostnames):
            raise ConfigError(f"site host names must be unique, got {hostnames}")
        if not horizon_s >= 0:
            raise ConfigError(f"horizon_s must be >= 0, got {horizon_s}")
        specs = [RouteSpec(r) if isinstance(r, str) else r for r in routes]
        route_names = [r.name for r in specs]
        if len(set(route_names)) != len(route_names):
            raise ConfigError(f"route names must be unique, got {route_names}")
        self.clock = clock
        self.seed = seed
        self.horizon_s = float(horizon_s)
        self.origin = float(clock() if origin is None else origin)
        self.host = host
        self.request_log = RequestLog()
        self._sites = [
            _Site(spec, k, seed, self.origin, self.horizon_s) for k, spec in enumerate(sites)
        ]
        self._routes = [_Route(r, self.origin) for r in specs]
        self._by_key: dict[str, _Site] = {s.spec.name: s for s in self._sites}
        self._servers: list[_Server] = []
        self._proxies: dict[str, str] = {}
        self._admin = ""
        self._threads: list[threading.Thread] = []
        self._state: Literal["new", "running", "stopped"] = "new"

    def start(self) -> Self:
        """Bind every site, route and the admin to a free port on ``host`` and
        serve each from a daemon thread."""
        if self._state != "new":
            raise RuntimeError(f"SimWeb is {self._state}; build a new one")
        try:
            for site in self._sites:
                server = _Server((self.host, 0), self, site=site)
                direct = f"{self.host}:{server.server_port}"
                site.bind(site.spec.hostname if self._routes else direct, direct)
                self._by_key[site.host] = site
                self._by_key[direct] = site
                self._servers.append(server)
            for route in self._routes:
                server = _Server((self.host, 0), self, route=route)
                self._proxies[route.name] = f"http://{self.host}:{server.server_port}"
                self._servers.append(server)
            admin = _Server((self.host, 0), self, handler=_AdminHandler)
            self._admin = f"http://{self.host}:{admin.server_port}"
            self._servers.append(admin)
        except BaseException:
            for server in self._servers:
                server.server_close()
            raise
        for server in self._servers:
            label = (
                server.site.spec.name
                if server.site
                else server.route.name
                if server.route
                else "admin"
            )
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"simweb-{label}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        self._state = "running"
        return self

    def stop(self) -> None:
        """Stop serving and close every socket (idempotent)."""
        if self._state != "running":
            self._state = "stopped"
            return
        for server in self._servers:
            server.shutdown()
            server.close_connections()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._state = "stopped"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def sites(self) -> list[str]:
        """Every site's address (``host:port``, or its host name with routes), in spec order."""
        self._require_started()
        return [s.host for s in self._sites]

    @property
    def proxies(self) -> dict[str, str]:
        """Route name → proxy URL (``http://127.0.0.1:P``): a crawl's ``routes`` setting."""
        self._require_started()
        return dict(self._proxies)

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:P`` of the admin port: ``/changes.jsonl``,
        ``/requests.jsonl``, ``/sites.json``, ``/billing.json`` as
        :func:`write_ground_truth` writes them, as they stand."""
        self._require_started()
        return self._admin

    def site(self, name: str) -> str:
        """The address of the site named ``name`` (a spec name, or already an address)."""
        self._require_started()
        return self._site(name).host

    def base_url(self, site: str) -> str:
        """``http://<address>`` of ``site`` (a spec name or address)."""
        return f"http://{self.site(site)}"

    def direct_url(self, site: str) -> str:
        """``http://127.0.0.1:<port>`` of ``site``'s own port (no proxy)."""
        self._require_started()
        return f"http://{self._site(site).direct}"

    def spec(self, site: str) -> SiteSpec:
        """The :class:`SiteSpec` of ``site`` (a spec name or address)."""
        return self._site(site).spec

    def rates(self, site: str) -> np.ndarray:
        """Per-page change rates of ``site`` (changes per day), indexed by page number."""
        return self._site(site).rates.copy()

    def page_type(self, url: str) -> str:
        """The page type of a ``/p/<i>`` URL (its :class:`PageGroup`'s)."""
        parts = urlsplit(url)
        s = self._site(parts.netloc)
        i = _page_index(parts.path)
        if i is None or i >= s.spec.n_pages:
            raise NotFound(f"{url!r} is not a page")
        return s.page_types[i]

    def change_times(self, site: str, path: str) -> np.ndarray:
        """The virtual times (unix seconds, sorted, read-only) at which ``path`` on ``site`` changed.

        Version ``v`` of a page is current from its ``v``-th change (version 0
        from the start of time) until the next. Private pages never change (an
        empty array). Raises :class:`~recrawl.NotFound` for any other path.
        """
        s = self._site(site)
        i = _page_index(path)
        if i is not None and i < s.spec.n_pages:
            return s.changes[i]
        if path.startswith("/private/"):
            return np.empty(0)
        raise NotFound(f"{path!r} is not a page of site {site!r}")

    def all_change_times(self) -> dict[str, np.ndarray]:
        """:meth:`change_times` of every URL :meth:`urls` lists, by URL."""
        out: dict[str, np.ndarray] = {}
        for url in self.urls():
            parts = urlsplit(url)
            out[url] = self.change_times(parts.netloc, parts.path)
        return out

    def urls(
        self,
        site: str | None = None,
        *,
        private: bool = False,
        faults: bool = False,
        late: bool = False,
    ) -> list[str]:
        """The URLs of the normal pages (``/p/<i>`` not listed under a fault)
        that exist now (on the web's clock), site by site.

        ``private=True`` adds the ``/private/<j>`` pages, ``faults=True`` every
        fault path (500, gone, moved, soft 404), ``late=True`` the pages that
        have not appeared yet (see :meth:`appears_at`).
        """
        self._require_started()
        chosen = self._sites if site is None else [self._site(site)]
        now = self.clock()
        out: list[str] = []
        for s in chosen:
            root = s.root
            out.extend(f"{root}/p/{i}" for i in (s.normal if late else s.present(now)))
            if private:
                out.extend(f"{root}/private/{j}" for j in range(s.spec.n_private))
            if faults:
                out.extend(root + p for p in sorted(s.spec.fault_paths))
        return out

    def signal_urls(self, site: str | None = None) -> list[str]:
        """The cheap-signal URLs the sites serve: sitemap (or sitemap index),
        feed, first listing page."""
        self._require_started()
        chosen = self._sites if site is None else [self._site(site)]
        out: list[str] = []
        for s in chosen:
            if s.spec.sitemap != "absent":
                out.append(f"{s.root}/sitemap.xml")
            if s.spec.feed != "none":
                out.append(f"{s.root}/feed.{'xml' if s.spec.feed == 'rss' else 'atom'}")
            if s.spec.listing != "none" and s.normal:
                out.append(f"{s.root}/list/0")
        return out

    def appears_at(self, url: str) -> float | None:
        """When the ``/p/<i>`` page at ``url`` appears (virtual unix seconds;
        it answers 404 before), or None for a page there from the start."""
        parts = urlsplit(url)
        s = self._site(parts.netloc)
        i = _page_index(parts.path)
        if i is None or i >= s.spec.n_pages:
            raise NotFound(f"{url!r} is not a page")
        return s._appear[i] if s._appear[i] > -math.inf else None

    def version_at(self, url: str, t: float) -> int:
        """The version of the page at ``url`` at virtual time ``t``."""
        parts = urlsplit(url)
        return int(np.searchsorted(self.change_times(parts.netloc, parts.path), t, side="right"))

    def freshness_from_log(
        self,
        urls: Sequence[str],
        start: float,
        end: float,
        log: Iterable[RequestRecord] | None = None,
    ) -> float:
        """Time-averaged share of ``urls`` whose last fetched copy is current, over ``[start, end]``.

        A fetch is a GET record with status 200 or 304 and a version (from
        ``log``, by default :attr:`request_log`); a fetch of a page's JSON twin
        (``/p/<i>.json``) is a fetch of the page. After a fetch of version ``v``
        at ``t_f`` and until the page's next fetch, the page counts as fresh
        while the page's true version is ``v``: from ``t_f`` to its next change
        (a lying 304 records the version the client kept, so it buys nothing).
        Pages not yet fetched count as stale. A page that appears later
        (:meth:`appears_at`) counts only from its appearance: the average is
        over the time each page exists inside ``[start, end]``. Exact, from the
        change times; the result is in ``[0, 1]``.
        """
        if not end > start:
            raise ValueError(f"need end > start, got [{start}, {end}]")
        if not urls:
            raise ValueError("no urls")
        keys: dict[tuple[str, str], np.ndarray] = {}
        born: dict[tuple[str, str], float] = {}
        for url in urls:
            parts = urlsplit(url)
            key = (parts.netloc, parts.path)
            keys[key] = self.change_times(parts.netloc, parts.path)
            i = _page_index(parts.path)
            appear = self._site(parts.netloc)._appear[i] if i is not None else -math.inf
            if appear > start:
                born[key] = appear
        fetches: dict[tuple[str, str], list[tuple[float, int]]] = {k: [] for k in keys}
        for r in self.request_log if log is None else log:
            path = r.path[:-5] if r.served == "json" else r.path
            got = fetches.get((r.site, path))
            if (
                got is not None
                and r.status in (200, 304)
                and r.version is not None
                and r.method != "HEAD"
            ):
                got.append((r.t, r.version))
        total = 0.0
        for key, changes in keys.items():
            seen = sorted(fetches[key], key=lambda f: f[0])
            for k, (t_f, v) in enumerate(seen):
                if v > len(changes):
                    continue
                held_until = seen[k + 1][0] if k + 1 < len(seen) else np.inf
                current_from = float(changes[v - 1]) if v > 0 else -np.inf
                current_until = float(changes[v]) if v < len(changes) else np.inf
                lo = max(t_f, current_from, start, born.get(key, start))
                hi = min(held_until, current_until, end)
                if hi > lo:
                    total += hi - lo
        if not born:
            return total / (len(keys) * (end - start))
        exposure = sum(max(0.0, end - born.get(key, start)) for key in keys)
        if not exposure > 0:
            raise ValueError(f"none of the urls exists in [{start}, {end}]")
        return total / exposure

    def billing(self, log: Iterable[RequestRecord] | None = None) -> dict[str, Any]:
        """What the requests cost under the seed's two billing models, from
        ``log`` (default :attr:`request_log`): ``total``, ``by_route`` (``""``:
        direct) and ``by_site``, each with ``requests``, ``bytes_in``,
        ``bytes_out``, ``bytes`` (both ways, headers included: what a
        bandwidth-billed proxy charges) and ``credits`` (what a credit-billed
        API charges: successful answers only)."""

        def empty() -> dict[str, float]:
            return {"requests": 0, "bytes_in": 0, "bytes_out": 0, "bytes": 0, "credits": 0.0}

        total = empty()
        by_route: dict[str, dict[str, float]] = {}
        by_site: dict[str, dict[str, float]] = {}
        for r in self.request_log if log is None else log:
            for acc in (
                total,
                by_route.setdefault(r.route, empty()),
                by_site.setdefault(r.site, empty()),
            ):
                acc["requests"] += 1
                acc["bytes_in"] += r.bytes_in
                acc["bytes_out"] += r.bytes_out
                acc["bytes"] += r.bytes_in + r.bytes_out
                acc["credits"] += r.credits
        return {"total": total, "by_route": by_route, "by_site": by_site}

    def _site(self, key: str) -> _Site:
        site = self._by_key.get(key.removeprefix("http://").rstrip("/"))
        if site is None:
            raise NotFound(f"no site {key!r}")
        return site

    def _require_started(self) -> None:
        if self._state == "new":
            raise RuntimeError("SimWeb not started: sites get their addresses in start()")


def _days_windows(rows: Any, what: str) -> list[tuple[Any, ...]]:
    if not isinstance(rows, list):
        raise ConfigError(f"{what}: windows must be a list of [start_days, end_days, kind]")
    out: list[tuple[Any, ...]] = []
    for w in rows:
        if not isinstance(w, list | tuple) or len(w) not in (3, 4):
            raise ConfigError(f"{what}: a window is [start_days, end_days, kind(, route)]")
        out.append((float(w[0]) * _DAY_S, float(w[1]) * _DAY_S, *w[2:]))
    return out


def read_scenario(path: str | Path) -> Scenario:
    """Sites and routes from a TOML or JSON scenario file: a list ``sites`` of
    tables with :class:`SiteSpec`'s fields (``groups`` as a list of
    :class:`PageGroup` tables), and an optional list ``routes`` of tables with
    :class:`RouteSpec`'s fields. Windows (a site's ``hostile``, a route's
    ``faults``) are in **days** after the web's origin, as ``[start_days,
    end_days, kind]`` (a hostile window may name a route as a fourth item);
    fields ending in ``_s`` are seconds.

    Example (TOML)::

        [[routes]]
        name = "pool-a/us"

        [[routes]]
        name = "pool-b/de"
        faults = [[3, 4, "reset"]]

        [[sites]]
        name = "shop"
        robots = "User-agent: *\\nDisallow: /private/\\nCrawl-delay: 10\\n"
        always_500 = ["/p/0"]
        moved = { "/old/1" = "/p/1" }
        sitemap = "lazy"
        listing = "fresh"
        groups = [
            { page_type = "product", n_pages = 160, rate_per_day = 1.0 },
            { page_type = "policy", n_pages = 40, rate_per_day = 0.02 },
        ]

        [[sites]]
        name = "hostile"
        validators = "lying"
        hostile = [[10, 11, "429"], [12, 30, "403"], [5, 6, "challenge", "pool-b/de"]]

    Raises :class:`~recrawl.ConfigError` naming the file and the site or route.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"scenario file {p} does not exist") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{p} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    rows = data.get("sites") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{p}: needs a non-empty list 'sites'")
    known = {f.name for f in fields(SiteSpec)}
    specs = []
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ConfigError(f"{p}: sites[{k}] must be a table")
        what = f"{p}: site {row.get('name', k)!r}"
        extra = set(row) - known
        if extra:
            raise ConfigError(f"{what}: unknown field(s) {sorted(extra)}")
        kw = dict(row)
        try:
            if "hostile" in kw:
                kw["hostile"] = _days_windows(kw["hostile"], what)
            if "page_bytes" in kw:
                kw["page_bytes"] = tuple(kw["page_bytes"])
            if "groups" in kw:
                kw["groups"] = [PageGroup(**g) for g in kw["groups"]]
            specs.append(SiteSpec(**kw))
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{what}: {exc}") from None
    routes = []
    route_rows = data.get("routes", [])
    if not isinstance(route_rows, list):
        raise ConfigError(f"{p}: 'routes' must be a list of tables")
    route_known = {f.name for f in fields(RouteSpec)}
    for k, row in enumerate(route_rows):
        if not isinstance(row, dict):
            raise ConfigError(f"{p}: routes[{k}] must be a table")
        what = f"{p}: route {row.get('name', k)!r}"
        extra = set(row) - route_known
        if extra:
            raise ConfigError(f"{what}: unknown field(s) {sorted(extra)}")
        kw = dict(row)
        try:
            if "faults" in kw:
                kw["faults"] = _days_windows(kw["faults"], what)
            routes.append(RouteSpec(**kw))
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"{what}: {exc}") from None
    return Scenario(specs, routes)


def load_scenario(path: str | Path) -> list[SiteSpec]:
    """The sites of a scenario file (:func:`read_scenario`, without its routes)."""
    return read_scenario(path).sites


def _truth_end(web: SimWeb) -> float:
    return min(web.clock(), web.origin + web.horizon_s)


def _changes_jsonl(web: SimWeb) -> str:
    from recrawl.observe.traces import Trace, dump_trace

    now = _truth_end(web)
    lines = []
    for site in web.sites:
        for url in web.urls(site, late=True):
            path = "/" + url.split("/", 3)[3]
            appear = web.appears_at(url)
            begin = web.origin if appear is None else max(web.origin, appear)
            if appear is not None and appear >= now:
                continue  # not there yet
            ch = web.change_times(site, path)
            ch = ch[(ch > begin) & (ch <= now)]
            kind = web.page_type(url)
            trace = Trace(url, site, kind, begin, max(now, begin + 1.0), ch)
            lines.append(dump_trace(trace) + "\n")
    return "".join(lines)


def _requests_jsonl(web: SimWeb) -> str:
    return "".join(
        json.dumps({**asdict(r), "url": r.url}) + "\n" for r in web.request_log.snapshot()
    )


def _sites_json(web: SimWeb) -> str:
    sites = {web.spec(s).name: web.base_url(s) for s in web.sites}
    return json.dumps(sites, indent=2) + "\n"


def _billing_json(web: SimWeb) -> str:
    return json.dumps(web.billing(), indent=2) + "\n"


def write_ground_truth(web: SimWeb, directory: str | Path) -> dict[str, str]:
    """Write what really happened: ``changes.jsonl`` (every normal page's change
    times as :mod:`recrawl.observe.traces` traces from the origin to now, with
    its page type, so ``recrawl simulate`` can replay them), ``requests.jsonl``
    (the request log, billing fields included), ``sites.json`` (name → base
    URL) and ``billing.json`` (:meth:`SimWeb.billing`). Returns the paths
    written. The admin port serves the same files live."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    makers = {
        "changes.jsonl": _changes_jsonl,
        "requests.jsonl": _requests_jsonl,
        "sites.json": _sites_json,
        "billing.json": _billing_json,
    }
    for name, make in makers.items():
        (out / name).write_text(make(web), encoding="utf-8")
    return {name: str(out / name) for name in makers}
