"""The crawl loop: execute the plan, cycle after cycle, politely.

Each cycle (``cycle_hours`` of the crawl's clock):

1. the source gives the sites' health bands (embedded: :meth:`Engine.health`
   is evaluated and its actions applied; a paused site only runs canaries);
2. the source gives the cycle's tasks (embedded: :meth:`Engine.plan`; with
   ``--service``: leases from a running ``recrawl serve``);
3. every site (an origin, ``scheme://host:port``) runs its tasks through its
   :class:`~recrawl.crawl.politeness.SiteGate` (slots, least delay, robots.txt
   Crawl-delay, Retry-After holds, back-off, latency throttle, band), after its
   robots.txt allowed the URL;
4. each response becomes an observation (the record extracted per page type,
   its title and a body excerpt for the content classifier) reported back in
   batches (a page type with a ``json_url`` fetches each page's JSON instead,
   under the same robots.txt, gate and conditional headers, and reports it as
   the page's); the cycle's spend (fetches, bytes on the wire or credits)
   never goes over its budget: no fetch starts once the next would pass it.

Alongside the tasks, the sitemaps and feeds that are due are read
(:mod:`recrawl.crawl.signals`: robots.txt's ``Sitemap:`` lines and the
configured ones, through the same gates, in the same budget, the plan asked for
that much less); what they say reaches the store as hints for the next cycle's
plan. Listing pages (``[crawl] listings``) are tasks of the plan like any page;
each one read gives hints for its items, and before each cycle the crawl gives
it the value of what it reveals (:meth:`SignalReader.listing_worth`, through a
source that can set values: the embedded one).

Time is whatever clock is given: a :class:`~recrawl.clock.ScaledClock` makes
days run in minutes (a simulation feature), and every wait is turned back into
real seconds with its ``scale``. Stopping (``stop`` set, Ctrl-C in the CLI)
starts no new fetch; those in flight finish and are reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import quote, urlsplit

from recrawl._exceptions import InvalidObservation
from recrawl.clock import Clock, system_clock
from recrawl.config import Settings
from recrawl.crawl.fetch import Fetcher, FetchRequest, FetchResult
from recrawl.crawl.politeness import SiteGate
from recrawl.crawl.robots import RobotsCache
from recrawl.crawl.signals import SignalReader
from recrawl.crawl.twins import JsonTwins
from recrawl.observe.classify import find_marker
from recrawl.observe.extract import Extractor, summarize
from recrawl.observe.observation import Observation, parse_observation
from recrawl.observe.sitemaps import Hint

if TYPE_CHECKING:
    from recrawl.engine.engine import Engine

__all__ = [
    "CrawlStats",
    "CrawlTask",
    "Crawler",
    "EmbeddedSource",
    "ServiceSource",
    "TaskSource",
    "origin_of",
]

log = logging.getLogger("recrawl.crawl")

REPORT_BATCH = 200
"""Observations reported at once (and at the end of every cycle)."""

TOP_UPS = 3
"""Times a cycle asks the plan again for the budget constrained or paused sites cannot use."""

REFILLS = 12
"""Times a cycle leases again from a source that caps the leases a site may
have out (:attr:`ServiceSource.leases`): what was fetched is reported first,
so the site's leases come back for its next tasks."""

PAUSE_AFTER = 8
"""Hostile answers in a row (403, 429, challenge pages, resets) after which the
crawl pauses a site itself: too few requests reach a small site for its health
score to judge it (it needs ``MIN_REQUESTS`` an hour), and this many refusals
with no success between them is the site saying no. A human resumes it."""

LISTING_TRUST_CYCLES = 6
"""Cycles between two looks at the store for the listings' items' values and
at the hint trust for the listings (:meth:`Crawler._listing_worth`)."""

JSON_MISSING = "json_missing"
"""The error reported for a page whose JSON twin answered 404 or 410 when its
page type has no ``html_fields`` to read the page with instead."""

_HOSTILE_STATUSES: frozenset[int] = frozenset({401, 403, 429})

_BANDS: frozenset[str] = frozenset({"healthy", "degrading", "critical", "unknown"})


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: the unit of politeness and of robots.txt.

    >>> origin_of("http://Shop.example:8080/p/1?x=2")
    'http://shop.example:8080'
    """
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc.lower()}"


@dataclass(frozen=True)
class CrawlTask:
    """One fetch the plan asked for."""

    url: str
    site: str
    page_type: str
    reason: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    cost: float = 0.0
    """The plan's estimated cost, in the billing unit."""
    lease_id: str | None = None
    rate_per_day: float | None = None
    """The plan's estimate of the page's change rate (embedded source only)."""
    signal: str | None = None
    """The hint source that proved the page changed, when a signal caused the
    fetch (reported as the observation's ``signal``)."""

    @property
    def canary(self) -> bool:
        return self.reason == "canary"


@dataclass
class SiteStats:
    """One origin's figures in the crawl (``band`` and ``state`` as last seen)."""

    requests: int = 0
    ok: int = 0
    not_modified: int = 0
    failed: int = 0
    disallowed: int = 0
    band: str = "unknown"
    state: str = "idle"
    """``fetching``, ``waiting`` (delay, hold or back-off), ``paused``, ``idle``."""
    delay_s: float = 0.0
    crawl_delay_s: float | None = None
    hostile_streak: int = 0
    """Hostile answers (403, 429, challenges, resets) in a row."""


SPEND_CHECK_CYCLES: Final = 240
"""Cycles whose spend check a crawl keeps (ten days of hourly cycles)."""
SPEND_CHECK_MIN_FETCHES: Final = 20
"""Fetches a cycle needs before its cost estimates are said to be off."""


@dataclass
class SpendCheck:
    """One cycle's spend beside its plan, in the billing unit.

    ``expected`` is what the plan's estimates said the cycle's ``fetches``
    page fetches would cost, ``reported`` what they cost (wire bytes or
    credits as reported; 304s and failures at their own cost); ``signals``
    what sitemap, feed and listing reads cost besides; ``spent`` the whole.
    """

    start: float
    budget: float
    spent: float
    signals: float
    fetches: int
    expected: float
    reported: float

    @property
    def ratio(self) -> float | None:
        """Reported over expected cost of the cycle's fetches (None before any)."""
        return self.reported / self.expected if self.expected > 0 else None


@dataclass
class CrawlStats:
    """What a crawl did. Money in the billing unit; times in the crawl clock's seconds."""

    unit: str = "fetches"
    started_at: float = 0.0
    now: float = 0.0
    cycles: int = 0
    requests: int = 0
    """Page requests sent (robots.txt requests apart)."""
    ok: int = 0
    not_modified: int = 0
    failed: int = 0
    disallowed: int = 0
    """Planned URLs robots.txt disallowed: never fetched."""
    robots_requests: int = 0
    json_requests: int = 0
    """Requests for a page's JSON twin (page types with ``json_url``), part of ``requests``."""
    json_refused: int = 0
    """Tasks not fetched: their JSON twin refused (another origin, robots.txt,
    a failing function) and no ``html_fields`` to read the page with."""
    json_fallbacks: int = 0
    """JSON twins that answered 404 or 410, after which the page itself was
    fetched (both requests are in ``requests``, their bytes in the page's observation)."""
    signal_requests: int = 0
    """Sitemap and feed requests sent (:mod:`recrawl.crawl.signals`), in the budget."""
    signal_spent: float = 0.0
    """What they cost, in the billing unit (part of ``spent``)."""
    signals: list[dict[str, Any]] = field(default_factory=list)
    """Each sitemap and feed read: reads, changes, 304s, hints, pages discovered."""
    delisted: int = 0
    """Items that left every listing of their site (noted in the store: ``recrawl pages``)."""
    listings: list[dict[str, Any]] = field(default_factory=list)
    """Each listing page read: items, reads, read interval, the plan's rate
    for it and the value its items' worth gave it
    (:class:`~recrawl.crawl.signals.ListingPage`)."""
    bytes_sent: int = 0
    bytes_received: int = 0
    spent: float = 0.0
    budget: float = 0.0
    """Sum of the cycles' budgets so far."""
    over_budget_cycles: int = 0
    cycle_spend: list[SpendCheck] = field(default_factory=list)
    """The last :data:`SPEND_CHECK_CYCLES` cycles' spend checks, oldest first."""
    stored: int = 0
    rejected: int = 0
    spooled: int = 0
    """Observations the source would not take, kept in the spool file."""
    statuses: Counter[str] = field(default_factory=Counter)
    sites: dict[str, SiteStats] = field(default_factory=dict)
    paused: list[dict[str, Any]] = field(default_factory=list)
    """Sites this crawl paused itself: ``site``, ``at``, ``reason``."""
    real_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (``recrawl crawl --json``)."""
        d = asdict(self)
        d["statuses"] = dict(self.statuses)
        for row, c in zip(d["cycle_spend"], self.cycle_spend, strict=True):
            row["ratio"] = c.ratio
        d["requests_per_real_second"] = (
            self.requests / self.real_seconds if self.real_seconds > 0 else None
        )
        return d


class TaskSource(Protocol):
    """Where a crawl gets its tasks and reports what it found."""

    unit: str

    async def bands(self, now: float) -> dict[str, str]:
        """Each site's health band now (``critical`` for a paused site)."""
        ...

    async def tasks(
        self, now: float, budget: float, exclude: set[str], sites: AbstractSet[str] = frozenset()
    ) -> list[CrawlTask]:
        """The cycle's tasks under ``budget`` (billing unit): no URL of ``exclude``,
        no page of ``sites``."""
        ...

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        """Store raw observations; returns (stored, rejected)."""
        ...

    async def pause(self, site: str, reason: str, now: float) -> None:
        """Pause ``site`` (only canaries run until a human resumes it)."""
        ...

    async def hints(self, hints: Sequence[Hint], urls: Sequence[Mapping[str, Any]]) -> None:
        """Store what a sitemap or feed said; register ``urls`` (``url``, and
        ``site``, ``page_type`` when known) that are new, for discovery."""
        ...

    async def signal_news(
        self, reads: Sequence[Mapping[str, Any]], left: Sequence[tuple[str, str, float | None]]
    ) -> None:
        """Count sitemap and feed ``reads`` (``site``, ``signal``, ``bytes``,
        ``credits``) in their signal's cost; note items that ``left`` every
        listing (``(url, site, at)``, ``at`` None: listed again)."""
        ...

    async def close(self) -> None: ...


class EmbeddedSource:
    """The store and the planner in this process (one worker thread talks to
    the store, so fetches go on while a batch is written)."""

    def __init__(self, engine: Engine, *, policy: str = "recrawl") -> None:
        from recrawl.engine.ingest import ContentClassifier

        self.engine = engine
        self.policy = policy
        self.unit: str = engine.settings.billing_unit
        self._classifier = ContentClassifier(engine.settings.block_markers)
        self._rules = engine.settings.page_types
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recrawl-store")
        self._known: set[str] | None = None  # URLs in the store, for the signals' discovery

    async def _run(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def bands(self, now: float) -> dict[str, str]:
        def work() -> dict[str, str]:
            out = {r["site"]: str(r["band"]) for r in self.engine.health(at=now)}
            for site, c in self.engine.store.site_controls().items():
                if c.get("paused"):
                    out[site] = "critical"
            return out

        result: dict[str, str] = await self._run(work)
        return result

    async def tasks(
        self, now: float, budget: float, exclude: set[str], sites: AbstractSet[str] = frozenset()
    ) -> list[CrawlTask]:
        def work() -> list[CrawlTask]:
            plan = self.engine.plan(
                budget=budget,
                now=now,
                exclude=set(exclude) or None,
                policy=self.policy,
                exclude_sites=sites,
            )
            headers = self.engine.headers_for_tasks(plan.tasks)
            return [
                CrawlTask(
                    url=t["url"],
                    site=t["site"],
                    page_type=t["page_type"],
                    reason=str(t.get("reason", "")),
                    headers=headers.get(t["url"], {}),
                    cost=float(t.get("cost") or 0.0),
                    rate_per_day=plan.rates.get(t["url"], (None, None))[0],
                    signal=plan.signals.get(t["url"]),
                )
                for t in plan.tasks
            ]

        result: list[CrawlTask] = await self._run(work)
        return result

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        from recrawl.engine.ingest import ingest_observations

        def work() -> tuple[int, int]:
            good: list[Observation] = []
            rejected = 0
            for raw in observations:
                try:
                    good.append(parse_observation(raw, rules=self._rules))
                except InvalidObservation as exc:
                    rejected += 1
                    log.warning("observation rejected: %s", exc)
            rep = ingest_observations(self.engine.store, good, classifier=self._classifier)
            return rep.stored, rejected

        result: tuple[int, int] = await self._run(work)
        return result

    async def pause(self, site: str, reason: str, now: float) -> None:
        await self._run(lambda: self.engine.pause(site, by="crawl", reason=reason, now=now))

    async def hints(self, hints: Sequence[Hint], urls: Sequence[Mapping[str, Any]]) -> None:
        def work() -> None:
            if urls:
                if self._known is None:
                    self._known = set(self.engine.store.page_columns()["url"])
                new = [dict(r) for r in urls if r["url"] not in self._known]
                if new:
                    self.engine.add_urls(new)
                    self._known.update(r["url"] for r in new)
            if hints:
                self.engine.ingest_hints(hints)

        await self._run(work)

    async def signal_news(
        self, reads: Sequence[Mapping[str, Any]], left: Sequence[tuple[str, str, float | None]]
    ) -> None:
        def work() -> None:
            if reads:
                self.engine.add_signal_reads(reads)
            if left:
                self.engine.note_listing_left(left)

        await self._run(work)

    # what listing pages are worth (recrawl.crawl.signals.SignalReader.listing_worth)

    async def page_values(self, urls: Sequence[str]) -> dict[str, float]:
        """The values of the known ``urls``."""

        def work() -> dict[str, float]:
            cols = self.engine.store.page_columns()
            want = set(urls)
            return {
                u: float(v)
                for u, v in zip(cols["url"], cols["value"].tolist(), strict=True)
                if u in want
            }

        result: dict[str, float] = await self._run(work)
        return result

    async def set_values(self, rows: Sequence[tuple[str, float]]) -> None:
        """Give pages new values (:meth:`Engine.update_values`)."""
        await self._run(lambda: self.engine.update_values({"url": u, "value": v} for u, v in rows))

    async def listing_trust(self, now: float) -> tuple[set[str], set[str]]:
        """Sites whose ``listing`` hints the revisits trusted (to vouch or to
        prove), and those they refused: judged on at least
        :data:`~recrawl.estimate.hints.MIN_MOVES` moves, trusted neither to
        vouch nor to prove (:meth:`Engine.hint_trust`)."""
        from recrawl.estimate.hints import MIN_MOVES

        def work() -> tuple[set[str], set[str]]:
            trusted: set[str] = set()
            refused: set[str] = set()
            for t in self.engine.hint_trust(until=now):
                if t.source != "listing":
                    continue
                if t.quiet or t.changes:
                    trusted.add(t.site)
                elif t.moved >= MIN_MOVES:
                    refused.add(t.site)
            return trusted, refused

        result: tuple[set[str], set[str]] = await self._run(work)
        return result

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


class ServiceSource:
    """Lease tasks from a running ``recrawl serve`` and report to it, so several
    crawl processes (on several machines) share one plan.

    The service holds each site to ``site_concurrency`` leases out at once
    (fewer while degrading), so the crawl leases as it goes: at the start of a
    cycle and again :data:`REFILLS` times in it, after reporting what it
    fetched meanwhile."""

    leases: bool = True
    """The source caps each site's leases out: the crawl refills during a cycle."""

    def __init__(self, url: str, token: str | None, *, worker: str, unit: str = "fetches") -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=60.0)
        self.worker = worker
        self.unit = unit

    async def bands(self, now: float) -> dict[str, str]:
        r = await self._client.get("/v1/sites")
        r.raise_for_status()
        body = r.json()
        rows = body.get("sites", body) if isinstance(body, dict) else body
        out: dict[str, str] = {}
        for s in rows:
            band = str(s.get("band") or "unknown")
            out[str(s["site"])] = "critical" if s.get("paused") else band
        return out

    async def tasks(
        self, now: float, budget: float, exclude: set[str], sites: AbstractSet[str] = frozenset()
    ) -> list[CrawlTask]:
        # The service plans under its own budget; leases are taken until it has none.
        out: list[CrawlTask] = []
        for _ in range(1000):  # bounded: at most 500k tasks a cycle
            r = await self._client.post("/v1/leases", json={"worker": self.worker, "max": 500})
            r.raise_for_status()
            got = r.json()["tasks"]
            out.extend(
                CrawlTask(
                    url=t["url"],
                    site=t["site"],
                    page_type=t["page_type"],
                    reason=t.get("reason", ""),
                    headers=t.get("headers") or {},
                    lease_id=t["lease_id"],
                    signal=t.get("signal"),
                )
                for t in got
                if t["url"] not in exclude and t["site"] not in sites
            )
            if len(got) < 500:
                break
        return out

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        import orjson

        body = b"\n".join(orjson.dumps(o) for o in observations)
        r = await self._client.post(
            "/v1/observations", content=body, headers={"Content-Type": "application/x-ndjson"}
        )
        r.raise_for_status()
        a = r.json()
        return int(a.get("stored", 0)), int(a.get("rejected", 0) or 0)

    async def pause(self, site: str, reason: str, now: float) -> None:
        r = await self._client.post(
            f"/v1/sites/{quote(site, safe='')}/pause", json={"by": "crawl", "reason": reason}
        )
        r.raise_for_status()

    async def hints(self, hints: Sequence[Hint], urls: Sequence[Mapping[str, Any]]) -> None:
        """``POST /v1/hints?add_urls=true``: the service registers the hinted
        pages it lacks under their host's site, page type ``page``; a page
        listed without a date is not registered this way."""
        import orjson

        if not hints:
            return
        lines = [
            {"url": h.url, "lastmod": h.lastmod, "seen_at": h.seen_at, "source": h.source}
            for h in hints
        ]
        body = b"\n".join(orjson.dumps(line) for line in lines)
        r = await self._client.post(
            "/v1/hints",
            params={"add_urls": "true" if urls else "false"},
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        r.raise_for_status()

    async def signal_news(
        self, reads: Sequence[Mapping[str, Any]], left: Sequence[tuple[str, str, float | None]]
    ) -> None:
        """``POST /v1/signals``."""
        if not reads and not left:
            return
        r = await self._client.post(
            "/v1/signals",
            json={
                "reads": [dict(x) for x in reads],
                "delisted": [{"url": u, "site": s, "at": at} for u, s, at in left],
            },
        )
        r.raise_for_status()

    async def close(self) -> None:
        await self._client.aclose()


class Crawler:
    """Run the plan against the web until a time or a stop.

    Parameters
    ----------
    source
        :class:`EmbeddedSource` or :class:`ServiceSource`.
    settings
        ``[crawl]`` (user agent, concurrency, delays, routes), ``page_types``
        (what to extract), the budget and the cycle length.
    clock
        The crawl's time (unix seconds); a :class:`~recrawl.clock.ScaledClock`
        for simulations. Its ``scale`` (1 when absent) turns waits into real seconds.
    fetcher
        Default: one built from ``settings.crawl`` on the same clock.
    spool
        Where observations go that the store or service would not take after
        five tries (JSON lines, for ``recrawl ingest``): nothing fetched is lost.
    on_progress
        Called with the stats after every cycle and about every real second
        while a cycle runs (the CLI's live view).
    """

    def __init__(
        self,
        source: TaskSource,
        settings: Settings,
        *,
        clock: Clock = system_clock,
        fetcher: Fetcher | None = None,
        on_progress: Callable[[CrawlStats], None] | None = None,
        spool: str = "recrawl-unreported.jsonl",
    ) -> None:
        c = settings.crawl
        self.source = source
        self.settings = settings
        self.clock = clock
        self.scale = float(getattr(clock, "scale", 1.0))
        self.agent = c.agent()
        self.fetcher = fetcher or Fetcher(
            user_agent=self.agent,
            timeout_s=c.timeout_s,
            max_body_bytes=settings.max_body_bytes,
            routes=c.routes,
            allow_private_networks=c.allow_private_networks,
            max_redirects=c.max_redirects,
            max_connections=max(c.concurrency, 10),
            clock=clock,
        )
        self.robots = RobotsCache(self.agent, ttl_s=c.robots_ttl_s, fetch=self._fetch_robots)
        self.on_progress = on_progress
        self.stats = CrawlStats(unit=source.unit)
        self.stop = asyncio.Event()
        self.spool = spool
        self.report_retry_s = 0.5
        """First wait before a failed report is tried again (doubling, five tries)."""
        self._gates: dict[str, SiteGate] = {}
        self._slots = asyncio.Semaphore(c.concurrency)
        self._routes = list(c.routes) or [""]
        self._route_turn: Counter[str] = Counter()
        self._markers = list(settings.block_markers)
        self._extractors = {
            name: Extractor(dict(rule.fields))
            for name, rule in settings.page_types.items()
            if rule.fields
        }
        self._twins = JsonTwins(settings.page_types, log)
        self._pending: list[dict[str, Any]] = []
        self._reporting: set[asyncio.Task[None]] = set()
        self._queues: dict[str, deque[CrawlTask]] = {}
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._disallowed: set[str] = set()
        self._bands: dict[str, str] = {}
        self._cycle_spent = 0.0
        self._cycle_committed = 0.0
        self._check = [0, 0.0, 0.0]  # this cycle's fetches, their estimates, their costs
        self._spent_total = 0.0
        self._cycle_budget = math.inf
        self._last_progress = 0.0
        self._item_values: dict[str, float] = {}
        self._trusted: set[str] = set()
        self._refused: set[str] = set()
        self.signals = SignalReader(
            settings,
            fetch=self._fetch_signal,
            sink=source.hints,
            clock=clock,
            cost=lambda res: self._cost(res, {}),
            commit=self._commit,
            room=lambda: self._cycle_budget - self._cycle_committed,
            mean_cost=self._mean_cost,
        )

    # -- time --------------------------------------------------------------

    async def _sleep_until(self, t: float) -> bool:
        """Wait until crawl time ``t``; False when stopped first."""
        wait = (t - self.clock()) / self.scale
        if wait <= 0:
            return not self.stop.is_set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=wait)
        return not self.stop.is_set()

    # -- the loop ----------------------------------------------------------

    def cycle_budget(self) -> float:
        """One cycle's budget in the billing unit (``budget_per_day`` × cycle)."""
        s = self.settings
        if s.budget_per_day is None:
            raise ValueError("no budget: set budget_per_day in recrawl.toml")
        return s.budget_per_day * s.cycle_hours / 24.0

    async def run(self, until: float) -> CrawlStats:
        """Crawl cycle after cycle until crawl time ``until`` or :attr:`stop`."""
        real0 = time.monotonic()
        cycle_s = self.settings.cycle_hours * 3600.0
        budget = self.cycle_budget()
        self.stats.started_at = self.clock()
        try:
            while not self.stop.is_set():
                start = self.clock()
                if start >= until:
                    break
                end = min(start + cycle_s, until)
                # a last, shorter cycle gets its share of the budget (a cycle
                # cut short by microseconds keeps the whole of it)
                share = 1.0 if end - start >= 0.999 * cycle_s else (end - start) / cycle_s
                await self._cycle(start, end, budget * share)
                self.stats.real_seconds = time.monotonic() - real0
                self._progress(force=True)
                if not await self._sleep_until(end):
                    break
        finally:
            await self._flush(wait=True)
            self.stats.now = self.clock()
            self.stats.real_seconds = time.monotonic() - real0
            await self.fetcher.aclose()
            await self.source.close()
        return self.stats

    async def _cycle(self, start: float, end: float, budget: float) -> None:
        self.stats.cycles += 1
        self.stats.budget += budget
        self._cycle_spent, self._cycle_committed, self._cycle_budget = 0.0, 0.0, budget
        self._check = [0, 0.0, 0.0]
        try:
            self._bands = await self.source.bands(start)
        except Exception as exc:  # keep crawling on the bands last known
            log.warning("health bands unavailable: %s", exc)
        self.signals.discover(self.robots.sitemaps())
        await self._listing_worth(start)
        reads = self.signals.planned_origins(start)
        reserve = min(len(reads) * self._mean_cost(), budget * self.settings.crawl.signal_share)
        chosen: list[CrawlTask] = []
        planned: set[str] = set()
        full: set[str] = set()  # sites that cannot take more this cycle
        left = budget - reserve
        for _ in range(TOP_UPS + 1):
            try:
                got = await self.source.tasks(start, left, self._disallowed | planned, full)
            except Exception as exc:  # the plan is unavailable: this cycle fetches what it has
                log.error("no tasks this cycle: %s", exc)
                break
            if not got:
                break
            planned.update(t.url for t in got)
            kept, dropped = self._fit(got, chosen, start, end, reads)
            chosen.extend(kept)
            full.update(t.site for t in dropped)
            left = budget - reserve - sum(self._expected_cost(t) for t in chosen)
            if not dropped or left < 0.02 * budget:
                break
        for t in chosen:
            if not t.canary:
                self.signals.learn(origin_of(t.url), t.site, t.page_type)
        jobs = [self._run_tasks(chosen, end), self.signals.run(start, end)]
        if getattr(self.source, "leases", False):
            jobs.append(self._refill(start, end, planned))
        await asyncio.gather(*jobs)
        await self._drain()
        await self._signal_news()
        self.stats.signal_spent = self.signals.spent
        self.stats.signals = self.signals.figures()
        self.stats.listings = self.signals.listing_figures()
        self.stats.delisted = self.signals.delisted
        if self._cycle_spent > budget * 1.0000001:
            self.stats.over_budget_cycles += 1
        self.stats.spent += self._cycle_spent
        self._spend_check(start, budget)
        await self._flush(wait=True)

    async def _signal_news(self) -> None:
        """Send the signals' reads and delisting notes to the source (kept for
        the next cycle when it fails)."""
        news = getattr(self.source, "signal_news", None)  # (a source of the protocol's before)
        reads, left = self.signals.take()
        if news is None or (not reads and not left):
            return
        try:
            await news(reads, left)
        except Exception as exc:
            log.warning("signal reads not counted yet: %s", exc)
            self.signals.reads[:0], self.signals.left[:0] = reads, left

    def _spend_check(self, start: float, budget: float) -> None:
        """Set the cycle's spend beside its plan in the billing unit
        (:attr:`CrawlStats.cycle_spend`), and say so when the fetches cost more
        than a quarter over or under what the plan expected of them."""
        n, expected, cost = self._check
        row = SpendCheck(
            start=start,
            budget=budget,
            spent=self._cycle_spent,
            signals=self._cycle_spent - cost,
            fetches=int(n),
            expected=expected,
            reported=cost,
        )
        checks = self.stats.cycle_spend
        checks.append(row)
        del checks[: max(0, len(checks) - SPEND_CHECK_CYCLES)]
        ratio = row.ratio
        if ratio is not None and n >= SPEND_CHECK_MIN_FETCHES and abs(ratio - 1.0) > 0.25:
            log.warning(
                "cycle from %s: its %d fetches cost %.4g %s against %.4g planned (%+.0f %%): "
                "the plan's cost estimates are off",
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(start)),
                n, cost, self.source.unit, expected, 100.0 * (ratio - 1.0),
            )  # fmt: skip

    async def _listing_worth(self, now: float) -> None:
        """Give each listing page read so far the value what it reveals is
        worth (:meth:`SignalReader.listing_worth`), through a source that can
        set values (the embedded one); the sites whose listings the revisits
        trusted or refused are judged again every :data:`LISTING_TRUST_CYCLES`
        cycles, those the crawl's fetches found late
        (:meth:`SignalReader.late_sites`) at every cycle."""
        pages = self.signals.listing_pages
        set_values = getattr(self.source, "set_values", None)
        if not pages or set_values is None:
            return
        try:
            new = [u for p in pages.values() if p.base is None for u in (p.url, *p.items)]
            if new or self.stats.cycles % LISTING_TRUST_CYCLES == 0:
                self._item_values.update(await self.source.page_values(  # type: ignore[attr-defined]
                    [u for p in pages.values() for u in (p.url, *p.items)]
                ))  # fmt: skip
                self._trusted, self._refused = await self.source.listing_trust(now)  # type: ignore[attr-defined]
            refused = self._refused | self.signals.late_sites()
            rows = self.signals.listing_worth(
                now, self._item_values, refused, trusted=self._trusted,
                cycle_s=self.settings.cycle_hours * 3600.0,
            )  # fmt: skip
            if rows:
                await set_values(rows)
        except Exception as exc:  # the listings keep the values they have
            log.warning("listing values not set: %s", exc)

    def _fit(
        self,
        tasks: Sequence[CrawlTask],
        chosen: Sequence[CrawlTask],
        start: float,
        end: float,
        reads: Sequence[str] = (),
    ) -> tuple[list[CrawlTask], list[CrawlTask]]:
        """Split ``tasks`` into what each origin can take before ``end`` (by its
        slots, delay, holds, back-off and band, counting ``chosen`` and the
        origins of the sitemap and feed ``reads``) and the rest, whose budget
        goes back to the plan for other sites."""
        load = Counter(origin_of(t.url) for t in chosen)
        load.update(reads)
        caps: dict[str, float] = {}
        kept: list[CrawlTask] = []
        dropped: list[CrawlTask] = []
        for t in tasks:
            origin = origin_of(t.url)
            cap = caps.get(origin)
            if cap is None:
                cap = caps[origin] = self._capacity(origin, t.site, start, end)
            if t.canary or load[origin] < cap:
                load[origin] += 1
                kept.append(t)
            else:
                dropped.append(t)
        return kept, dropped

    def _capacity(self, origin: str, site: str, start: float, end: float) -> float:
        """Fetches an origin can start in ``[start, end)`` (a little under, to be
        safe): after its holds, at the pace its delay (robots.txt Crawl-delay
        included) and its slots over its usual latency allow; 0 when paused."""
        gate = self._gate(origin)
        band = self._bands.get(site, gate.band)
        if band == "critical":
            return 0.0
        if band in _BANDS:
            gate.set_band(band)  # type: ignore[arg-type]
        rules = self.robots.cached(origin)
        if rules is not None:
            gate.set_crawl_delay(rules.crawl_delay_s)
        first = max(start, gate.hold_until, gate.backoff_until)
        if first >= end:
            return 0.0
        per_s = math.inf
        if gate.effective_delay_s > 0:
            per_s = 1.0 / gate.effective_delay_s
        latency = gate.median_latency_ms
        if latency is not None and latency > 0:  # real ms, in the crawl clock's seconds
            busy_s = latency / 1000.0 * self.scale
            per_s = min(per_s, max(gate.effective_concurrency, 1) / busy_s)
        if math.isinf(per_s):
            return math.inf
        return math.floor(0.9 * (end - first) * per_s) + 1

    async def _before_hop(self, url: str) -> None:
        """Hold a redirect hop to its site's spacing (Crawl-delay, Retry-After
        and back-off included), then count it as a start there. A paused site
        is not waited for: the hop goes, and its answer is the fetch's."""
        gate = self._gate(origin_of(url))
        at = gate.next_allowed(self.clock())
        if math.isfinite(at) and at > self.clock():
            await self._sleep_until(at)
        gate.hop(self.clock())

    async def _run_tasks(self, tasks: Sequence[CrawlTask], end: float) -> None:
        self._enqueue(tasks, end)
        await self._drain()

    def _enqueue(self, tasks: Sequence[CrawlTask], end: float) -> None:
        """Queue ``tasks`` behind their origins' runners, starting a runner for
        an origin that has none (or whose runner has ended)."""
        for t in tasks:
            origin = origin_of(t.url)
            runner = self._runners.get(origin)
            if runner is None or runner.done():
                queue = self._queues[origin] = deque([t])
                job = asyncio.create_task(self._run_origin(origin, queue, end))
                self._runners[origin] = job
                job.add_done_callback(functools.partial(self._runner_done, origin))
            else:
                self._queues[origin].append(t)

    def _runner_done(self, origin: str, job: asyncio.Task[None]) -> None:
        if self._runners.get(origin) is job:
            del self._runners[origin]
            del self._queues[origin]

    async def _drain(self) -> None:
        """Wait for every origin's runner, those started meanwhile included."""
        while self._runners:
            await asyncio.gather(*list(self._runners.values()))

    async def _refill(self, start: float, end: float, planned: set[str]) -> None:
        """Lease again :data:`REFILLS` times in the cycle, after reporting what
        was fetched (a capped site gets its leases back only then), and queue
        what each origin can still take before ``end``."""
        step = (end - start) / (REFILLS + 1)
        for k in range(1, REFILLS + 1):
            if not await self._sleep_until(start + k * step):
                return
            await self._flush(wait=True)
            now = self.clock()
            left = self._cycle_budget - self._cycle_committed
            if left <= 0:
                return
            try:
                got = await self.source.tasks(now, left, self._disallowed | planned)
            except Exception as exc:  # the next refill tries again
                log.warning("leasing more tasks failed: %s", exc)
                continue
            if not got:
                continue
            planned.update(t.url for t in got)
            queued = [t for q in self._queues.values() for t in q]
            kept, _ = self._fit(got, queued, now, end)
            self._enqueue(kept, end)

    def _gate(self, origin: str) -> SiteGate:
        gate = self._gates.get(origin)
        if gate is None:
            c = self.settings.crawl
            gate = self._gates[origin] = SiteGate(self.settings.site_concurrency, c.min_delay_s)
            self.stats.sites.setdefault(origin, SiteStats())
        return gate

    async def _run_origin(self, origin: str, queue: deque[CrawlTask], end: float) -> None:
        gate = self._gate(origin)
        st = self.stats.sites[origin]
        band = self._bands.get(queue[0].site, "unknown")
        gate.set_band(band if band in _BANDS else "unknown")  # type: ignore[arg-type]
        st.band = gate.band
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while queue and not self.stop.is_set():
                task = queue[0]
                if gate.band == "critical" and not task.canary:
                    queue.popleft()  # paused: only canaries run
                    st.state = "paused"
                    continue
                rules = await self.robots.rules(origin, self.clock())
                gate.set_crawl_delay(rules.crawl_delay_s)
                st.crawl_delay_s = rules.crawl_delay_s
                target = self._target(task, rules.allowed)
                if target is None:  # its JSON refused, and no html_fields to read the page
                    queue.popleft()
                    self._disallowed.add(task.url)
                    self.stats.json_refused += 1
                    continue
                if not rules.allowed(target):
                    queue.popleft()
                    self._disallowed.add(task.url)
                    self.stats.disallowed += 1
                    st.disallowed += 1
                    continue
                if in_flight and len(in_flight) >= max(
                    gate.effective_concurrency, 1 if task.canary else 0
                ):
                    st.state = "fetching"
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    continue
                at = self._next_start(gate, task, self.clock())
                if at >= end:
                    break  # the site cannot take more this cycle
                if at > self.clock():
                    st.state = "waiting"
                    if not await self._sleep_until(at):
                        break
                    continue  # look again: a hold may have come meanwhile
                expected = self._expected_cost(task)
                if self._cycle_committed + expected > self._cycle_budget:
                    break  # the next fetch would pass the cycle's budget
                queue.popleft()
                self._cycle_committed += expected
                now = self.clock()
                gate.started(now)
                st.state = "fetching"
                st.delay_s = gate.effective_delay_s
                job = asyncio.create_task(self._fetch(gate, st, task, expected, target))
                in_flight.add(job)
                job.add_done_callback(in_flight.discard)
                self._progress()
        finally:
            if in_flight:
                await asyncio.gather(*in_flight)
            st.state = "paused" if gate.band == "critical" else "idle"

    @staticmethod
    def _next_start(gate: SiteGate, task: CrawlTask, now: float) -> float:
        if task.canary and gate.band == "critical":
            spaced = -math.inf if gate.last_start is None else gate.last_start + gate.base_delay_s
            return max(now, spaced, gate.hold_until)
        return gate.next_allowed(now)

    def _expected_cost(self, task: CrawlTask) -> float:
        """What the fetch is held to cost until it is done (canaries are outside
        the budget): the plan's estimate, else the mean cost so far (one unit
        before any)."""
        if task.canary:
            return 0.0
        if task.cost > 0:
            return task.cost
        return self._mean_cost()

    def _mean_cost(self) -> float:
        """What a fetch costs on average so far (one unit before any, or when billing fetches)."""
        if self.source.unit == "fetches":
            return 1.0
        n = self.stats.requests + self.stats.signal_requests
        return self._spent_total / n if n and self._spent_total > 0 else 1.0

    def _commit(self, delta: float) -> None:
        self._cycle_committed += delta

    def _settled(self, expected: float, cost: float) -> None:
        """Count a planned fetch's estimate and what it was reported to cost (the spend check)."""
        self._check[0] += 1
        self._check[1] += expected
        self._check[2] += cost

    def _route(self, origin: str) -> str:
        turn = self._route_turn[origin]
        self._route_turn[origin] += 1
        return self._routes[turn % len(self._routes)]

    def _target(self, task: CrawlTask, allowed: Callable[[str], bool]) -> str | None:
        """The URL a task fetches: its page type's JSON twin of the page
        (``json_url``) when it has one on the page's own origin that
        robots.txt allows, else the page. A twin on another origin (a
        function's result: a template is checked at load), one robots.txt
        disallows and a function that fails are logged once per page type
        and site; then the page is fetched when the page type has
        ``html_fields`` to read it with, else nothing (None: the task is
        refused, and not planned again in this crawl). A page whose twin
        answered 404 or 410 earlier in this crawl is fetched as a page."""
        return self._twins.target(task.url, task.page_type, task.site, allowed)

    async def _fetch_target(
        self, task: CrawlTask, target: str, expected: float
    ) -> FetchResult | None:
        """Fetch ``target`` (the page or its JSON twin). A twin that answers
        404 or 410 does not stand for the page (logged once per site). With
        ``html_fields``, the page is fetched at once, held to the site's
        spacing as a redirect hop is, and directly for the rest of the crawl;
        the result carries both requests' bytes (None when robots.txt
        disallows the page: the twin's request is counted here, at
        ``expected`` committed). Without, the result is the error
        ``json_missing`` (no status: neither gone nor changed), and the twin
        is asked again at the page's next visit."""
        req = FetchRequest(
            url=target,
            headers=dict(task.headers),
            route=self._route(origin_of(task.url)),
            site=task.site,
            page_type=task.page_type,
            before_hop=self._before_hop,
        )
        async with self._slots:
            res = await self.fetcher.fetch(req)
        if target == task.url:
            return res
        self.stats.json_requests += 1
        if res.error is not None or res.status not in (404, 410):
            return res
        rule = self._twins.rules[task.page_type]
        self._twins.say_once(
            "missing", task.site,
            "%s answered %s for the JSON of %s: %s",
            target, res.status, task.url,
            "fetching the page instead (and each page of the site whose JSON is missing)"
            if rule.html_fields
            else "reported as the error json_missing (no html_fields to read the page with)",
        )  # fmt: skip
        if not rule.html_fields:
            return replace(res, status=None, error=JSON_MISSING, headers={}, body=b"")
        self._twins.missing.add(task.url)
        self.stats.json_fallbacks += 1
        origin = origin_of(task.url)
        rules = await self.robots.rules(origin, self.clock())
        self.stats.requests += 1  # the twin's request; the page's is counted with the result
        self.stats.sites[origin].requests += 1
        self.stats.statuses[str(res.status)] += 1
        if not rules.allowed(task.url):
            self._disallowed.add(task.url)
            self.stats.disallowed += 1
            self.stats.sites[origin].disallowed += 1
            self.stats.bytes_sent += res.bytes_sent
            self.stats.bytes_received += res.bytes_received
            if not task.canary:
                cost = self._cost(res, {})
                self._cycle_spent += cost
                self._spent_total += cost
                self._cycle_committed += cost - expected
                self._settled(expected, cost)
            return None
        await self._before_hop(task.url)
        async with self._slots:
            page = await self.fetcher.fetch(replace(req, url=task.url))
        return replace(
            page,
            bytes_sent=page.bytes_sent + res.bytes_sent,
            bytes_received=page.bytes_received + res.bytes_received,
            latency_ms=page.latency_ms + res.latency_ms,
        )

    async def _fetch(
        self, gate: SiteGate, st: SiteStats, task: CrawlTask, expected: float, target: str
    ) -> None:
        got = await self._fetch_target(task, target, expected)
        if got is None:
            gate.finished(self.clock(), 404, None, None, {})
            return
        res = got
        raw = self._observation(task, res)
        record = raw.get("record")
        challenged = (
            res.status is not None
            and 200 <= res.status < 300
            and (
                find_marker(raw.get("title"), raw.get("body_excerpt"), self._markers) is not None
                or (
                    isinstance(record, dict)
                    and bool(record)
                    and all(v is None for v in record.values())
                )
            )
        )
        # a challenge page, or a page with none of its fields, paces the site as
        # a refusal would
        status = 403 if challenged else res.status
        await self._signals_of(task, res, challenged, raw)
        if res.error == JSON_MISSING:  # the site answered 404: no trouble to pace
            gate.finished(self.clock(), 404, None, res.latency_ms, res.headers)
        else:
            gate.finished(self.clock(), status, res.error, res.latency_ms, res.headers)
        self._count(st, res, raw, task, expected)
        await self._watch(
            task.site, st, status, res.error, "challenge page" if challenged else None
        )
        self._pending.append(raw)
        if len(self._pending) >= REPORT_BATCH:
            await self._flush(wait=False)

    async def _signals_of(
        self, task: CrawlTask, res: FetchResult, challenged: bool, raw: Mapping[str, Any]
    ) -> None:
        """What a fetch tells the signal reader: an item fetched (at its start,
        the time the store keeps, with its record and a digest of it, or of the
        body without one: what the store compares), a listing read."""
        ok = res.status is not None and 200 <= res.status < 300 and res.error is None
        if res.status == 304:
            self.signals.fetched(task.url, res.started_at)  # as last fetched
        elif ok and not challenged:
            record = raw.get("record")
            if isinstance(record, dict):
                digest = json.dumps(record, sort_keys=True, default=str)
                self.signals.fetched(task.url, res.started_at, record, digest=digest)
            else:
                self.signals.fetched(task.url, res.started_at, {}, digest=raw.get("record_hash"))
        if ok and not challenged and task.page_type in self.signals.listing_rules:
            try:
                await self.signals.listing(
                    task.url, task.site, task.page_type, res.body, res.started_at,
                    rate_per_day=task.rate_per_day,
                )  # fmt: skip
            except Exception as exc:  # a listing's hints are a bonus: the fetch stands
                log.warning("listing %s not read: %s", task.url, exc)

    async def _watch(
        self,
        site: str,
        st: SiteStats,
        status: int | None,
        error: str | None,
        what: str | None = None,
    ) -> None:
        """Pause a site after :data:`PAUSE_AFTER` hostile answers in a row."""
        hostile = status in _HOSTILE_STATUSES or error == "connection_reset"
        if not hostile:
            if status is not None and error is None:
                st.hostile_streak = 0
            return
        st.hostile_streak += 1
        if st.hostile_streak == PAUSE_AFTER and self._bands.get(site) != "critical":
            reason = f"{PAUSE_AFTER} refusals in a row (last: {what or status or error})"
            log.warning("pausing %s: %s", site, reason)
            self._bands[site] = "critical"
            for origin, s in self.stats.sites.items():
                if s is st:
                    self._gate(origin).set_band("critical")
            try:
                await self.source.pause(site, reason, self.clock())
                self.stats.paused.append({"site": site, "at": self.clock(), "reason": reason})
            except Exception as exc:  # the pause stays local to this crawl
                log.warning("could not record the pause of %s: %s", site, exc)

    def _observation(self, task: CrawlTask, res: FetchResult) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        ok = res.status is not None and 200 <= res.status < 300 and res.error is None
        if ok and res.body:
            ex = self._extractors.get(task.page_type)
            if task.page_type in self._twins.rules and res.request.url == task.url:
                ex = self._twins.html_extractors.get(task.page_type)  # the page, not its JSON
            title, excerpt, record = summarize(res.body, res.content_type, ex)
            kw["title"], kw["body_excerpt"] = title, excerpt
            if record is not None:
                kw["record"] = record
            else:  # no fields configured: the body itself is the record
                kw["record_hash"] = hashlib.blake2b(res.body, digest_size=16).hexdigest()
        raw = res.observation(**kw)
        if res.request.url != task.url:  # a JSON twin: the observation is the page's
            raw["url"] = task.url
            raw.pop("moved_to", None)
        if task.canary:
            raw["canary"] = task.url
        elif task.page_type in self.signals.listing_rules:
            raw["signal"], raw["signal_read"] = "listing", True
        elif task.signal:
            raw["signal"] = task.signal
        if task.lease_id:
            raw["lease_id"] = task.lease_id
        return raw

    def _cost(self, res: FetchResult, raw: Mapping[str, Any]) -> float:
        unit = self.source.unit
        if unit == "bytes":
            return float(res.bytes_sent + res.bytes_received)
        if unit == "credits":
            c = raw.get("credits")
            if c is not None:
                return float(c)
            return 1.0 if res.status is not None and 200 <= res.status < 400 else 0.0
        return 1.0

    def _count(
        self,
        st: SiteStats,
        res: FetchResult,
        raw: Mapping[str, Any],
        task: CrawlTask,
        expected: float,
    ) -> None:
        s = self.stats
        s.requests += 1
        st.requests += 1
        s.bytes_sent += res.bytes_sent
        s.bytes_received += res.bytes_received
        if not task.canary:
            cost = self._cost(res, raw)
            self._cycle_spent += cost
            self._spent_total += cost
            # the fetch now counts at what it cost, not at what it was expected to
            self._cycle_committed += cost - expected
            self._settled(expected, cost)
        key = str(res.status) if res.status is not None else (res.error or "error")
        s.statuses[key] += 1
        if res.status == 304:
            s.not_modified += 1
            st.not_modified += 1
        elif res.error is None and res.status is not None and 200 <= res.status < 300:
            s.ok += 1
            st.ok += 1
        else:
            s.failed += 1
            st.failed += 1

    async def _flush(self, *, wait: bool) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            job = asyncio.create_task(self._report(batch))
            self._reporting.add(job)
            job.add_done_callback(self._reporting.discard)
        if wait and self._reporting:
            await asyncio.gather(*list(self._reporting))

    async def _report(self, batch: list[dict[str, Any]]) -> None:
        for attempt in range(5):  # bounded: then the batch goes to the spool file
            try:
                stored, rejected = await self.source.report(batch)
                self.stats.stored += stored
                self.stats.rejected += rejected
                return
            except Exception as exc:
                if attempt == 4:
                    self._spool(batch, exc)
                    return
                log.warning("report failed (%s); retrying", exc)
                await asyncio.sleep(self.report_retry_s * 2**attempt)

    def _spool(self, batch: list[dict[str, Any]], exc: BaseException) -> None:
        """Keep observations the store or service would not take: appended to
        :attr:`spool` as JSON lines, for ``recrawl ingest`` once it is back."""
        import orjson

        with open(self.spool, "ab") as f:
            for raw in batch:
                f.write(orjson.dumps(raw) + b"\n")
        self.stats.spooled += len(batch)
        log.error(
            "could not report %d observations (%s): kept in %s; `recrawl ingest %s` stores them",
            len(batch), exc, self.spool, self.spool,
        )  # fmt: skip

    async def _fetch_signal(
        self, url: str, headers: Mapping[str, str], end: float
    ) -> FetchResult | None:
        """Fetch a sitemap or feed as politely as a page (robots.txt, the site's
        gate and band), counted in the cycle's spend; None when the site cannot
        take it before ``end``."""
        origin = origin_of(url)
        gate = self._gate(origin)
        rules = await self.robots.rules(origin, self.clock())
        gate.set_crawl_delay(rules.crawl_delay_s)
        if not rules.allowed(url):
            return None
        poll = 0.01 * self.scale  # ten real milliseconds, while a slot is busy
        for _ in range(100_000):  # bounded: until the site takes it or the cycle ends
            now = self.clock()
            at = gate.next_allowed(now)
            if self.stop.is_set() or gate.band == "critical" or at >= end:
                return None
            if at <= now and gate.in_flight < max(gate.effective_concurrency, 1):
                break
            if not await self._sleep_until(min(max(at, now + poll), end)):
                return None
        else:
            return None
        gate.started(self.clock())
        async with self._slots:
            res = await self.fetcher.fetch(
                FetchRequest(url=url, headers=dict(headers), route=self._route(origin))
            )
        gate.finished(self.clock(), res.status, res.error, res.latency_ms, res.headers)
        s = self.stats
        s.signal_requests += 1
        s.bytes_sent += res.bytes_sent
        s.bytes_received += res.bytes_received
        cost = self._cost(res, {})
        self._cycle_spent += cost
        self._spent_total += cost
        return res

    async def _fetch_robots(self, url: str) -> tuple[int | None, str]:
        res = await self.fetcher.fetch(FetchRequest(url=url, route=self._route(origin_of(url))))
        self.stats.robots_requests += 1
        self.stats.bytes_sent += res.bytes_sent
        self.stats.bytes_received += res.bytes_received
        if res.error is not None:
            return None, ""
        return res.status, res.body.decode("utf-8", "replace")

    def _progress(self, *, force: bool = False) -> None:
        if self.on_progress is None:
            return
        t = time.monotonic()
        if force or t - self._last_progress >= 1.0:
            self._last_progress = t
            self.stats.now = self.clock()
            self.on_progress(self.stats)
