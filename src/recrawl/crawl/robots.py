"""robots.txt: one cached, parsed copy per site, fetched through an injected callable.

No network and no clock of its own: :class:`RobotsCache` calls the ``fetch``
coroutine it was given (``fetch(robots_url) -> (status or None, text)``) and
every call takes ``now``, unix seconds on whatever clock the caller runs (a
:class:`~recrawl.clock.ScaledClock` in a simulation). Times and delays are in
**seconds**.

What an answer means (RFC 9309, read as Google and Scrapy read it):

* **2xx**: the text is parsed with Protego for the user agent's product token
  (the user agent up to its first ``/``: ``"recrawl/0.1 (+https://…)"`` →
  ``"recrawl"``). Kept for ``ttl_s``.
* **3xx, 4xx** except 429 (404, 403, 410, …): no usable robots.txt, everything is
  allowed. Kept for ``ttl_s``. A 3xx means ``fetch`` did not follow the redirect;
  it is treated as Google treats a redirect chain it gives up on, like a 404.
* **5xx, 429, or a network error** (status None): the site's robots.txt is
  unreachable. The last good rules (from an earlier 2xx or 4xx) stay in force if
  there are any; otherwise everything is disallowed. Either way the cache asks
  again after ``min(ttl_s, 600)`` seconds (:data:`ERROR_RETRY_S`), so a site
  recovers within ten minutes of its robots.txt coming back.

``/robots.txt`` itself is always allowed.

>>> import asyncio
>>> async def fetch(url: str) -> tuple[int | None, str]:
...     return 200, "User-agent: recrawl\\nDisallow: /private/\\nCrawl-delay: 2\\n"
>>> cache = RobotsCache("recrawl/0.1", fetch=fetch)
>>> rules = asyncio.run(cache.rules("http://127.0.0.1:8000", now=0.0))
>>> rules.allowed("http://127.0.0.1:8000/private/1"), rules.allowed("http://127.0.0.1:8000/p/1")
(False, True)
>>> rules.crawl_delay_s
2.0
>>> cache.disallowed_count("http://127.0.0.1:8000")
1
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlsplit

from protego import Protego

__all__ = [
    "ERROR_RETRY_S",
    "RobotsCache",
    "RobotsFetch",
    "RobotsRules",
    "product_token",
    "site_root",
]

RobotsFetch = Callable[[str], Awaitable[tuple[int | None, str]]]
"""``fetch(robots_url) -> (HTTP status, or None on a network error; body text)``."""

ERROR_RETRY_S: Final = 600.0
"""Seconds before asking again after a 5xx, a 429 or a network error (capped at ``ttl_s``)."""

_MAX_BYTES: Final = 500 * 1024
"""RFC 9309 asks parsers to read at least 500 KiB; the rest is ignored."""

Kind = Literal["parsed", "allow_all", "disallow_all"]


def product_token(user_agent: str) -> str:
    """The product token robots.txt groups are matched against: the user agent up to its first ``/``.

    >>> product_token("recrawl/0.1 (+https://example.org/bot)")
    'recrawl'
    >>> product_token("recrawl")
    'recrawl'
    """
    return user_agent.split("/", 1)[0].strip()


def site_root(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: the key :class:`RobotsCache` caches under.

    >>> site_root("http://127.0.0.1:8000/p/17?x=1")
    'http://127.0.0.1:8000'
    """
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class _Counter:
    """A per-site count shared by every :class:`RobotsRules` built for that site."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


@dataclass(eq=False)
class RobotsRules:
    """One site's robots.txt as it applies to one user agent.

    ``status`` is the HTTP status of the fetch these rules came from (None: a
    network error); ``kind`` says how it was read: ``"parsed"`` (a 2xx body),
    ``"allow_all"`` (a 3xx/4xx) or ``"disallow_all"`` (unreachable, no earlier
    copy). ``crawl_delay_s`` is the seconds to leave between two requests
    (robots ``Crawl-delay``, or ``Request-rate`` n/s turned into s/n seconds,
    the larger of the two when both are set; None when neither is).
    ``sitemaps`` lists the ``Sitemap:`` URLs. ``fetched_at`` is the ``now`` (unix
    seconds) of the fetch that produced them.
    """

    status: int | None
    kind: Kind
    fetched_at: float
    crawl_delay_s: float | None = None
    sitemaps: list[str] = field(default_factory=list)
    token: str = "*"
    _parser: Protego | None = field(default=None, repr=False)
    _counter: _Counter = field(default_factory=_Counter, repr=False)

    def allowed(self, url: str) -> bool:
        """Whether the user agent may fetch ``url`` (a False also counts toward the site's stats)."""
        if self.kind == "allow_all" or urlsplit(url).path == "/robots.txt":
            return True
        ok = False if self._parser is None else bool(self._parser.can_fetch(url, self.token))
        if not ok:
            self._counter.n += 1
        return ok


@dataclass
class _Entry:
    rules: RobotsRules
    expires_at: float
    last_good: RobotsRules | None


def _parse(text: str, status: int, token: str, now: float, counter: _Counter) -> RobotsRules:
    parser = Protego.parse(text[:_MAX_BYTES])
    delays: list[float] = []
    delay = parser.crawl_delay(token)
    if delay is not None:
        delays.append(float(delay))
    rate = parser.request_rate(token)
    if rate is not None and rate.requests > 0:
        delays.append(float(rate.seconds) / float(rate.requests))
    return RobotsRules(
        status=status,
        kind="parsed",
        fetched_at=now,
        crawl_delay_s=max(delays) if delays else None,
        sitemaps=list(parser.sitemaps),
        token=token,
        _parser=parser,
        _counter=counter,
    )


class RobotsCache:
    """robots.txt rules per site, cached for ``ttl_s`` seconds of the caller's clock.

    ``user_agent`` is the full User-Agent string; groups are matched on its
    :func:`product_token`. ``fetch`` is awaited with ``site_root + "/robots.txt"``
    and returns ``(status or None on a network error, text)``; it should follow
    redirects itself. An exception raised by ``fetch`` reaches every caller
    waiting on that fetch and nothing is cached, so the next call tries again.

    However many tasks ask for one site at once, one fetch is in flight for it.
    """

    def __init__(
        self,
        user_agent: str,
        *,
        ttl_s: float = 86400.0,
        fetch: RobotsFetch,
    ) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.user_agent = user_agent
        self.token = product_token(user_agent) or "*"
        self.ttl_s = float(ttl_s)
        self._fetch = fetch
        self._entries: dict[str, _Entry] = {}
        self._pending: dict[str, asyncio.Task[RobotsRules]] = {}
        self._counters: dict[str, _Counter] = {}
        self.fetches = 0
        """How many times ``fetch`` was called, over all sites."""

    async def rules(self, site_root: str, now: float) -> RobotsRules:
        """The rules for ``site_root`` (``"http://host:port"``) at ``now`` (unix seconds).

        Fetches robots.txt when there is no copy or the copy expired; callers
        arriving while that fetch runs wait for it instead of starting another.
        """
        site = site_root.rstrip("/")
        entry = self._entries.get(site)
        if entry is not None and now < entry.expires_at:
            return entry.rules
        task = self._pending.get(site)
        if task is None:
            task = asyncio.ensure_future(self._refresh(site, now))
            self._pending[site] = task
            task.add_done_callback(functools.partial(self._done, site))
        # Shielded: one caller giving up must not cancel the fetch the others wait on.
        return await asyncio.shield(task)

    def cached(self, site_root: str) -> RobotsRules | None:
        """The rules held for ``site_root`` now, expired or not (None before the first fetch)."""
        entry = self._entries.get(site_root.rstrip("/"))
        return None if entry is None else entry.rules

    def sitemaps(self) -> dict[str, list[str]]:
        """The ``Sitemap:`` URLs of every site whose robots.txt is held, by site
        root (sites without any left out)."""
        return {
            site: list(e.rules.sitemaps) for site, e in self._entries.items() if e.rules.sitemaps
        }

    def disallowed_count(self, site_root: str) -> int:
        """How many times ``allowed()`` said no for ``site_root``, over every copy of its rules."""
        counter = self._counters.get(site_root.rstrip("/"))
        return 0 if counter is None else counter.n

    def disallowed_counts(self) -> dict[str, int]:
        """:meth:`disallowed_count` for every site seen so far."""
        return {site: c.n for site, c in self._counters.items()}

    def _done(self, site: str, task: asyncio.Task[RobotsRules]) -> None:
        if self._pending.get(site) is task:
            del self._pending[site]
        if not task.cancelled():
            task.exception()  # retrieved here so an unawaited failure is not logged twice

    async def _refresh(self, site: str, now: float) -> RobotsRules:
        counter = self._counters.setdefault(site, _Counter())
        self.fetches += 1
        status, text = await self._fetch(site + "/robots.txt")
        previous = self._entries.get(site)
        last_good = None if previous is None else previous.last_good
        if status is not None and 200 <= status < 300:
            rules = _parse(text, status, self.token, now, counter)
        elif status is not None and 300 <= status < 500 and status != 429:
            rules = RobotsRules(
                status=status, kind="allow_all", fetched_at=now, token=self.token, _counter=counter
            )
        else:
            retry = min(self.ttl_s, ERROR_RETRY_S)
            if last_good is not None:
                rules = last_good
            else:
                rules = RobotsRules(
                    status=status,
                    kind="disallow_all",
                    fetched_at=now,
                    token=self.token,
                    _counter=counter,
                )
            self._entries[site] = _Entry(rules, now + retry, last_good)
            return rules
        self._entries[site] = _Entry(rules, now + self.ttl_s, rules)
        return rules
