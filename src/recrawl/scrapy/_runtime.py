"""One crawl's recrawl side: the task source, the clock, the cycle budget, the
observations waiting to be reported and the Scrapy stats.

There is one :class:`Recrawl` per Scrapy crawler (:meth:`Recrawl.of`), shared
by the downloader middleware (which captures observations) and
:class:`~recrawl.scrapy.RecrawlSpider` (which asks it for each cycle's tasks).
Everything async runs on the asyncio loop of Scrapy's asyncio reactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import socket
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final
from urllib.parse import urlsplit

from recrawl._exceptions import ConfigError, InvalidObservation
from recrawl.clock import Clock
from recrawl.config import Settings, load_settings
from recrawl.crawl.loop import (
    JSON_MISSING,
    PAUSE_AFTER,
    REFILLS,
    TOP_UPS,
    CrawlTask,
    EmbeddedSource,
    ServiceSource,
    TaskSource,
)
from recrawl.crawl.politeness import SiteGate
from recrawl.crawl.simclock import simulation_clock
from recrawl.crawl.twins import JsonTwins
from recrawl.observe.classify import find_marker
from recrawl.observe.extract import Extractor, summarize
from recrawl.observe.fingerprint import fingerprint
from recrawl.observe.observation import Observation, parse_observation
from recrawl.scrapy._observation import record_of
from recrawl.scrapy._records import Kept, RecordMemory

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawl.engine.engine import Engine

__all__ = ["JSON_KEY", "META_KEY", "Recrawl", "site_capacity"]

log = logging.getLogger("recrawl.scrapy")

META_KEY: Final = "recrawl"
"""The request meta key holding the task: ``url``, ``site``, ``page_type``,
``reason``, ``lease_id``, ``cost`` (the plan's estimate, billing unit) and
``signal`` (the hint source that proved the page changed, if one did)."""

JSON_KEY: Final = "recrawl_json"
"""Request meta key: the request is for the task's JSON twin (its page type's
``json_url``), not the page."""

REPORT_BATCH: Final = 200
"""Observations reported at once (and at every cycle's start and at close)."""

_OUTCOME_STATS: Final = ("new", "changed", "unchanged", "gone", "error")
_BLOCKED: Final = ("hard_block", "soft_block", "challenge")
_HOSTILE_STATUSES: Final = frozenset({401, 403, 429})
_GATE_BANDS: Final = frozenset({"healthy", "degrading", "critical", "unknown"})


class _Embedded(EmbeddedSource):
    """:class:`EmbeddedSource` that also keeps the store's outcome counts
    (``changed``, ``unchanged`` ...) of what it stored, for Scrapy's stats."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.outcomes: Counter[str] = Counter()

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        rules = self.engine.settings.page_types

        def work() -> tuple[int, int]:
            good: list[Observation] = []
            rejected = 0
            for raw in observations:
                try:
                    good.append(parse_observation(raw, rules=rules))
                except InvalidObservation as exc:
                    rejected += 1
                    log.warning("observation rejected: %s", exc)
            rep = self.engine.ingest(good)
            self.outcomes.update(rep.outcomes)
            return rep.stored, rejected + rep.rejected

        result: tuple[int, int] = await self._run(work)
        return result


class _Service(ServiceSource):
    """:class:`ServiceSource` that also registers URLs (``POST /v1/urls``)."""

    async def add_urls(self, rows: Sequence[Mapping[str, Any]]) -> int:
        r = await self._client.post("/v1/urls", json={"urls": list(rows)})
        r.raise_for_status()
        return int(r.json().get("added", 0))


def _clock(scale: float, origin: str | None) -> Clock:
    try:
        return simulation_clock(scale, origin)
    except ValueError as exc:
        raise ConfigError(f"RECRAWL_TIME_SCALE / RECRAWL_CLOCK_ORIGIN: {exc}") from None


def site_capacity(gate: SiteGate, start: float, end: float, scale: float = 1.0) -> float:
    """Requests a site can start in ``[start, end)`` (crawl seconds), a little
    under to be safe: after its Retry-After hold and back-off, at the pace its
    delay (robots.txt Crawl-delay and band included) and its slots over its
    median latency (real milliseconds, times the clock's ``scale``) allow;
    0 when paused, infinity when nothing limits it. ``recrawl crawl``'s rule.

    >>> gate = SiteGate(concurrency=1, min_delay_s=60.0)
    >>> gate.set_crawl_delay(600.0)
    >>> site_capacity(gate, 0.0, 3600.0)
    6
    """
    if gate.band == "critical":
        return 0.0
    first = max(start, gate.hold_until, gate.backoff_until)
    if first >= end:
        return 0.0
    per_s = math.inf
    if gate.effective_delay_s > 0:
        per_s = 1.0 / gate.effective_delay_s
    latency = gate.median_latency_ms
    if latency is not None and latency > 0:
        busy_s = latency / 1000.0 * scale
        per_s = min(per_s, max(gate.effective_concurrency, 1) / busy_s)
    if math.isinf(per_s):
        return math.inf
    return math.floor(0.9 * (end - first) * per_s) + 1


class Recrawl:
    """recrawl's state in one Scrapy crawl (built from the crawler's settings)."""

    _instances: ClassVar[weakref.WeakKeyDictionary[Crawler, Recrawl]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, crawler: Crawler) -> Recrawl:
        """The crawler's :class:`Recrawl`, built on first use."""
        found = cls._instances.get(crawler)
        if found is None:
            found = cls._instances[crawler] = cls(crawler)
        return found

    def __init__(self, crawler: Crawler) -> None:
        from recrawl.crawl.simclock import parse_duration

        s = crawler.settings
        self.crawler = crawler
        self.settings: Settings = load_settings(s.get("RECRAWL_CONFIG"))
        self.clock = _clock(s.getfloat("RECRAWL_TIME_SCALE", 1.0), s.get("RECRAWL_CLOCK_ORIGIN"))
        self.scale = float(getattr(self.clock, "scale", 1.0))
        run_for = s.get("RECRAWL_RUN_FOR")
        try:
            self.run_for_s = parse_duration(str(run_for)) if run_for else math.inf
        except ValueError as exc:
            raise ConfigError(f"RECRAWL_RUN_FOR {exc}") from None
        self.engine: Engine | None = None
        self.source: TaskSource
        service = s.get("RECRAWL_SERVICE_URL")
        if service:
            token = s.get("RECRAWL_TOKEN") or os.environ.get("RECRAWL_TOKEN")
            worker = f"scrapy-{socket.gethostname()}-{os.getpid()}"
            self.source = _Service(service, token, worker=worker, unit=self.settings.billing_unit)
        else:
            from recrawl.engine.engine import Engine
            from recrawl.store import open_store

            db = s.get("RECRAWL_DB")
            if not db:
                raise ConfigError("set RECRAWL_DB (a store) or RECRAWL_SERVICE_URL (a service)")
            store = open_store(str(db), half_life_days=self.settings.half_life_days)
            self.engine = Engine(store, self.settings, clock=self.clock)
            self.source = _Embedded(self.engine)
        if self.settings.budget_per_day is None and not service:
            raise ConfigError("no budget: set budget_per_day in the RECRAWL_CONFIG file")
        self.unit = self.source.unit
        records = s.get("RECRAWL_RECORDS")
        if records is None and not service and "://" not in str(s.get("RECRAWL_DB")):
            records = f"{s.get('RECRAWL_DB')}.records.jsonl"
        self.records = RecordMemory(records or None)
        """Each page's last record, handed to the callback of a 304 that confirms it."""
        self._judged: Counter[str] | None = None if self.engine is not None else Counter()
        self._classifier = None
        if self._judged is not None:
            from recrawl.engine.ingest import ContentClassifier

            self._classifier = ContentClassifier(self.settings.block_markers)
        self._extractors = {
            name: Extractor(dict(rule.fields))
            for name, rule in self.settings.page_types.items()
            if rule.fields
        }
        self._twins = JsonTwins(self.settings.page_types, log)
        self._pending: list[dict[str, Any]] = []
        self._reporting: set[asyncio.Task[None]] = set()
        self._held: dict[int, dict[str, Any]] = {}
        self._next_id = 0
        self._in_flight: dict[str, tuple[float, str, str]] = {}  # URL -> (cost held, site, reason)
        self._disallowed: set[str] = set()
        self._streak: Counter[str] = Counter()  # hostile answers in a row, per site
        self._paused: set[str] = set()  # sites this crawl paused
        self._pausing: set[asyncio.Task[None]] = set()
        self._gates: dict[str, tuple[SiteGate, asyncio.Condition]] = {}
        self._crawl_delays: dict[str, float | None] = {}  # netloc -> robots.txt delay (s)
        self._bands: dict[str, str] = {}
        self._waking: set[asyncio.Future[None]] = set()
        self._until = math.inf  # crawl time the run ends (RECRAWL_RUN_FOR)
        self._budget = 0.0
        self._cycle_budget = 0.0
        self._spent = 0.0
        self._requests = 0
        self._closing = asyncio.Event()
        self._closed = False
        from scrapy import signals

        crawler.signals.connect(self._on_closed, signal=signals.spider_closed)
        crawler.signals.connect(self._robots_parsed, signal=signals.robots_parsed)
        self._robots: dict[str, Any] = {}  # netloc -> Scrapy's robots.txt parser

    # -- the stats -----------------------------------------------------------

    def _inc(self, key: str, n: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"recrawl/{key}", n)

    def _set(self, key: str, value: Any) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(f"recrawl/{key}", value)

    # -- planning --------------------------------------------------------------

    async def sleep_until(self, t: float) -> bool:
        """Wait until crawl time ``t`` (real seconds: its distance ÷ the clock's
        scale); False when the spider closes first."""
        stop = self._closing
        wait = (t - self.clock()) / self.scale
        if wait > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
        return not stop.is_set()

    async def cycles(self) -> AsyncIterator[CrawlTask]:
        """Every cycle's tasks, cycle after cycle, until ``RECRAWL_RUN_FOR`` of
        crawl time has passed (forever without it) or the spider closes.

        A cycle (``cycle_hours`` of crawl time) reports what is pending, asks
        the source for the tasks of what is left of the budget so far
        (``budget_per_day`` × cycles, less what was spent and what is in
        flight: retries and late fetches come out of the next cycle), then
        sleeps until the next cycle. From a service, which holds each site to
        its cap of leases out, it also leases again
        :data:`~recrawl.crawl.loop.REFILLS` times in the cycle, after reporting
        what was fetched meanwhile.
        """
        cycle_s = self.settings.cycle_hours * 3600.0
        per_cycle = (self.settings.budget_per_day or 0.0) * self.settings.cycle_hours / 24.0
        until = self._until = self.clock() + self.run_for_s
        while not self._closing.is_set():
            start = self.clock()
            if start >= until:
                break
            end = min(start + cycle_s, until)
            share = 1.0 if end - start >= 0.999 * cycle_s else (end - start) / cycle_s
            self._cycle_budget = per_cycle * share
            self._budget += self._cycle_budget
            self._inc("cycles")
            self._set("budget", self._budget)
            await self.flush(wait=True)
            for task in await self._tasks(start, end):
                yield task
            if getattr(self.source, "leases", False):
                # a service caps each site's leases out: lease again as they come back
                step = (end - start) / (REFILLS + 1)
                for k in range(1, REFILLS + 1):
                    if not await self.sleep_until(start + k * step):
                        break
                    await self.flush(wait=True)
                    for task in await self._tasks(self.clock(), end):
                        yield task
            if not await self.sleep_until(end):
                break

    async def _tasks(self, now: float, end: float) -> list[CrawlTask]:
        """The cycle's tasks (``now`` to ``end``, crawl time), fitted to the
        sites: a site gets no more than its politeness lets it start before
        ``end`` (:func:`site_capacity`, counting its tasks still queued from
        earlier cycles); the budget of the rest goes back to the plan, asked
        again up to :data:`~recrawl.crawl.loop.TOP_UPS` times without the
        sites that are full, as ``recrawl crawl`` does. What a full site
        could not take waits for a later cycle."""
        critical: set[str] = set(self._paused)
        try:
            bands = await self.source.bands(now)
            self._bands = bands
            critical |= {site for site, band in bands.items() if band == "critical"}
        except Exception as exc:  # plan on without the bands
            log.warning("health bands unavailable: %s", exc)
        left = self._budget - self._spent - sum(v[0] for v in self._in_flight.values())
        if left <= 0 and self.engine is not None:
            return []
        floor = 0.02 * self._cycle_budget
        chosen: list[CrawlTask] = []
        planned: set[str] = set()
        full: set[str] = set()
        for _ in range(TOP_UPS + 1):
            got = await self.source.tasks(
                now, max(left, 0.0), self._disallowed | set(self._in_flight) | planned,
                critical | full,
            )  # fmt: skip
            got = [t for t in got if t.canary or t.site not in critical]
            if not got:
                break
            planned.update(t.url for t in got)
            kept, dropped = self._fit(got, chosen, now, end)
            chosen.extend(kept)
            full.update(t.site for t in dropped)
            left -= sum(self._expected_cost(t) for t in kept)
            if dropped:
                self._inc("fitted_out", len(dropped))
            if not dropped or left < floor:
                break
        for t in chosen:
            self._in_flight[t.url] = (self._expected_cost(t), t.site, t.reason)
        self._inc("tasks", len(chosen))
        return chosen

    def _fit(
        self, tasks: Sequence[CrawlTask], chosen: Sequence[CrawlTask], start: float, end: float
    ) -> tuple[list[CrawlTask], list[CrawlTask]]:
        """Split ``tasks`` into what each site can start before ``end`` (counting
        ``chosen`` and its tasks still queued) and the rest; canaries always go."""
        load = Counter(v[1] for v in self._in_flight.values())
        load.update(t.site for t in chosen)
        caps: dict[str, float] = {}
        kept: list[CrawlTask] = []
        dropped: list[CrawlTask] = []
        for t in tasks:
            cap = caps.get(t.site)
            if cap is None:
                gate, _ = self._gate(t.site, urlsplit(t.url).netloc.lower())
                band = self._bands.get(t.site, "unknown")
                gate.set_band(band if band in _GATE_BANDS else "unknown")  # type: ignore[arg-type]
                cap = caps[t.site] = site_capacity(gate, start, end, self.scale)
            if t.canary or load[t.site] < cap:
                load[t.site] += 1
                kept.append(t)
            else:
                dropped.append(t)
        return kept, dropped

    def _expected_cost(self, task: CrawlTask) -> float:
        if task.canary:
            return 0.0
        if task.cost > 0:
            return task.cost
        if self.unit == "fetches" or not self._requests or self._spent <= 0:
            return 1.0
        return self._spent / self._requests

    async def register(self, urls: Iterable[str], page_type: str) -> int:
        """Register ``urls`` for discovery, in the store or through the service
        (``POST /v1/urls``); returns how many were new."""
        rows = [{"url": u, "page_type": page_type} for u in urls]
        if not rows:
            return 0
        if self.engine is None:
            assert isinstance(self.source, _Service)
            added = await self.source.add_urls(rows)
        else:
            engine = self.engine
            added = await asyncio.get_running_loop().run_in_executor(
                None, lambda: engine.add_urls(rows, now=self.clock())
            )
        self._inc("registered", added)
        return added

    def confirmed_record(self, url: str, headers: Mapping[bytes, Any]) -> dict[str, Any] | None:
        """The record a 304 to a request for ``url`` (with these request
        headers) confirms: the one kept from the response whose validators the
        request carried; None when this add-on never kept it."""

        def one(name: bytes) -> str | None:
            v = headers.get(name)
            return None if not v else bytes(v).decode("latin-1")

        return self.records.confirmed(
            url, if_none_match=one(b"If-None-Match"), if_modified_since=one(b"If-Modified-Since")
        )

    @staticmethod
    def meta_for(task: CrawlTask) -> dict[str, Any]:
        """A request's meta for ``task``: the task under :data:`META_KEY`, its
        origin as the download slot (Scrapy's per-slot delay and concurrency
        then apply per origin, ports apart, as in ``recrawl crawl``), and 304
        let through to the callback."""
        from recrawl.crawl.loop import origin_of

        return {
            META_KEY: {
                "url": task.url,
                "site": task.site,
                "page_type": task.page_type,
                "reason": task.reason,
                "lease_id": task.lease_id,
                "cost": task.cost,
                "signal": task.signal,
            },
            "download_slot": origin_of(task.url).split("://", 1)[1],
            "handle_httpstatus_list": [304],
        }

    # -- JSON twins (json_url) -------------------------------------------------------

    def target_for(self, task: CrawlTask) -> str | None:
        """The URL a task fetches, ``recrawl crawl``'s rule: its page type's
        JSON twin (``json_url``) when it has one on the page's own origin, else
        the page. A twin on another origin or a ``json_url`` function that
        fails is logged once per page type and site; then the page is fetched
        when the page type has ``html_fields`` to read it with, else nothing
        (None). A page whose twin answered 404 or 410, or robots.txt
        disallowed, earlier in this crawl is fetched as a page."""
        return self._twins.target(task.url, task.page_type, task.site)

    def json_request(self) -> None:
        """Count a request for a JSON twin (``recrawl/json_requests``)."""
        self._inc("json_requests")

    def json_missing(self, task: Mapping[str, Any], why: str) -> bool:
        """The JSON twin of ``task`` (its meta) answered 404 or 410, or
        robots.txt disallows it (``why``): whether the page is fetched instead
        (its page type has ``html_fields``; then it is, for the rest of the
        crawl). Logged once per site."""
        rule = self._twins.rules.get(str(task["page_type"]))
        fallback = rule is not None and bool(rule.html_fields)
        self._twins.say_once(
            "missing", str(task["site"]),
            "%s for the JSON of %s: %s", why, task["url"],
            "fetching the page instead (and each page of the site whose JSON is missing)"
            if fallback
            else "reported as the error json_missing (no html_fields to read the page with)",
        )  # fmt: skip
        if fallback:
            self._twins.missing.add(str(task["url"]))
            self._inc("json_fallbacks")
        return fallback

    @staticmethod
    def json_missing_observation(raw: dict[str, Any]) -> dict[str, Any]:
        """A twin's 404 or 410 as the page's observation when there is no page
        to read instead: the error ``json_missing``, no status (neither gone
        nor changed), as ``recrawl crawl`` reports it."""
        out = dict(raw)
        out["status"], out["error"] = None, JSON_MISSING
        return out

    # -- observations ------------------------------------------------------------

    def observed(self, raw: dict[str, Any], *, hold: bool = False) -> int | None:
        """Count one download (``raw`` from the middleware) and report it; with
        ``hold`` (a 2xx on its way to the callback) it waits for its record
        (:meth:`complete`) and the id to complete it with is returned."""
        self._requests += 1
        self._inc("observations")
        status, error = raw.get("status"), raw.get("error")
        if status == 304:
            self._inc("not_modified")
        elif error is not None or status is None or status >= 400:
            self._inc("failed")
            if error is not None:
                self._inc(f"failed/{error}")
        if raw.get("retry"):
            self._inc("retries")
        if not raw.get("canary"):
            cost = self._cost(raw)
            self._spent += cost
            self._set("spent", self._spent)
        raw.pop("retry", None)
        if not hold:
            self._watch(str(raw.get("site", "")), status, error)
        if hold:
            self._next_id += 1
            self._held[self._next_id] = raw
            return self._next_id
        self._judge(raw, None)
        self._queue(raw)
        return None

    def _judge(self, raw: Mapping[str, Any], record_hash: str | None) -> None:
        """Through a service (whose answer carries no outcomes), the outcome of
        one observation as the store's rules give it: the content classifier
        (blocks, challenges, gone, errors), then for a good page its record's
        fingerprint against the last one this add-on kept for the URL
        (``new`` when the plan sent it for discovery and none is kept; a page
        whose last record this add-on never saw is counted in neither)."""
        if self._judged is None or self._classifier is None:
            return
        try:
            obs = parse_observation(raw, rules=self.settings.page_types)
        except InvalidObservation:
            return
        found = self._classifier(obs, None)
        status = raw.get("status")
        if found is None and status is not None and 200 <= status < 300:
            url = str(raw["url"])
            kept = self.records.get(url)
            if kept is None:
                reason = self._in_flight.get(url, (0.0, "", ""))[2]
                found = "new" if reason == "discovery" else None
            else:
                found = "unchanged" if kept.record_hash == record_hash else "changed"
        if found is not None:
            self._judged[found] += 1

    def complete(
        self, held: int, response: Response | None, items: list[Mapping[str, Any]]
    ) -> None:
        """Give a held 2xx observation its record (the rule in :mod:`recrawl.scrapy`)
        and its title and excerpt (for the content checks), and report it."""
        raw = self._held.pop(held, None)
        if raw is None:
            return
        if response is None:  # never reached the callback: no record to tell a change by
            self._queue(raw)
            return
        body = response.body
        ct = response.headers.get(b"Content-Type")
        content_type = ct.decode("latin-1") if ct else None
        page_type = str(raw.get("page_type", ""))
        extractor = self._extractors.get(page_type)
        if page_type in self._twins.rules and not response.meta.get(JSON_KEY):
            extractor = self._twins.html_extractors.get(page_type)  # the page, not its JSON
        title, excerpt, extracted = summarize(body, content_type, extractor)
        raw["title"], raw["body_excerpt"] = title, excerpt
        challenged = find_marker(title, excerpt, self.settings.block_markers) is not None
        self._watch(str(raw.get("site", "")), 403 if challenged else raw.get("status"), None)
        rule = self.settings.page_types.get(str(raw.get("page_type", "")))
        record = record_of(items, [name for name, _ in rule.fields] if rule else [])
        if record is None:
            record = extracted
        if record is not None:
            raw["record"] = record
            record_hash = fingerprint(record, rule)
        else:  # no item, no fields configured: the body itself is the record
            raw["record_hash"] = record_hash = hashlib.blake2b(body, digest_size=16).hexdigest()
        if items:
            self._inc("items", len(items))
        self._judge(raw, record_hash)
        self.records.remember(
            str(raw["url"]),
            Kept(record, record_hash, raw.get("etag"), raw.get("last_modified")),
        )
        self._queue(raw)

    def _gate(self, site: str, netloc: str | None = None) -> tuple[SiteGate, asyncio.Condition]:
        found = self._gates.get(site)
        if found is None:
            gate = SiteGate(self.settings.site_concurrency, self.settings.crawl.min_delay_s)
            found = self._gates[site] = (gate, asyncio.Condition())
        if netloc is not None and netloc in self._crawl_delays:
            found[0].set_crawl_delay(self._crawl_delays[netloc])
        return found

    def _robots_parsed(self, robotparser: Any, request: Any) -> None:
        from scrapy.utils.httpobj import urlparse_cached

        self._robots[urlparse_cached(request).netloc.lower()] = robotparser

    def robots_allows(self, request: Any) -> bool:
        """Whether the robots.txt Scrapy parsed for the request's site lets it
        through (True before one is parsed, or with ``ROBOTSTXT_OBEY`` off;
        a refusal counts in ``robotstxt/forbidden``).
        The add-on's middleware asks again after Scrapy's: in Scrapy 2.19 the
        requests that waited for a site's robots.txt beyond the first two were
        let through unchecked (each waiter's future took the parser from the
        shared Deferred, and the next ones got None)."""
        settings = self.crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY") or request.meta.get("dont_obey_robotstxt"):
            return True
        from scrapy.utils.httpobj import urlparse_cached

        rp = self._robots.get(urlparse_cached(request).netloc.lower())
        if rp is None:
            return True
        agent = settings.get("ROBOTSTXT_USER_AGENT") or request.headers.get(
            b"User-Agent", settings.get("USER_AGENT")
        )
        if rp.allowed(request.url, agent):
            return True
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("robotstxt/forbidden")
        return False

    def crawl_delay(self, netloc: str, seconds: float | None) -> None:
        """The robots.txt ``Crawl-delay`` of ``netloc`` (``host:port``), in the
        crawl clock's seconds (None: none set), read by
        :class:`~recrawl.scrapy.RecrawlRobotParser`: the site's gate spaces its
        requests at least that far apart, from the end of one to the start of
        the next, and the cycle plans no more than that pace allows."""
        self._crawl_delays[netloc.lower()] = seconds

    async def enter(self, site: str, *, netloc: str | None = None, canary: bool = False) -> bool:
        """Wait until ``site``'s :class:`~recrawl.crawl.politeness.SiteGate`
        lets one more request start (slots, spacing, Retry-After hold,
        back-off, latency throttle and health band: ``recrawl crawl``'s rules)
        and take its place; False when the site is paused (only a canary still
        goes), held past the end of the run, or the spider closes. At most ``site_concurrency`` requests of a
        site are past the middleware at once, so the next one waits for an
        answer and sees the hold or back-off that answer set. ``netloc``
        (the request's ``host:port``) brings in its robots.txt Crawl-delay."""
        gate, changed = self._gate(site, netloc)
        while not self._closing.is_set():
            band = "critical" if site in self._paused else self._bands.get(site, "unknown")
            gate.set_band(band if band in _GATE_BANDS else "unknown")  # type: ignore[arg-type]
            if band == "critical" and not canary:
                return False
            now = self.clock()
            slots = max(gate.effective_concurrency, 1 if canary else 0)
            at = gate.next_allowed(now) if not canary else max(now, gate.hold_until)
            if gate.in_flight < slots and at <= now:
                gate.started(now)
                return True
            if at >= self._until:
                return False  # held past the run's end: planned again next run
            wait = None if gate.in_flight >= slots else max((at - now) / self.scale, 0.001)
            async with changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=wait)
        return False

    def leave(
        self,
        site: str,
        status: int | None,
        error: str | None,
        latency_ms: float | None,
        headers: Mapping[str, str],
    ) -> None:
        """An answer (or a failure) came back: the gate learns from it (a
        Retry-After hold, a back-off, a latency rise) and frees the place;
        the requests waiting for the site look again."""
        gate, changed = self._gate(site)
        held = gate.hold_until
        gate.finished(self.clock(), status, error, latency_ms, headers)
        if gate.hold_until > held:
            self._inc("held")

        async def wake() -> None:
            async with changed:
                changed.notify_all()

        job = asyncio.ensure_future(wake())
        self._waking.add(job)
        job.add_done_callback(self._waking.discard)

    def paused(self, site: str) -> bool:
        """Whether this crawl paused ``site`` (its queued requests are dropped)."""
        return site in self._paused

    def _watch(self, site: str, status: int | None, error: str | None) -> None:
        """Pause a site after :data:`~recrawl.crawl.loop.PAUSE_AFTER` hostile
        answers in a row (401, 403, 429, a challenge page, a reset), as
        ``recrawl crawl`` does: a small site never gets the requests an hour
        its health score needs to judge it."""
        hostile = status in _HOSTILE_STATUSES or error == "connection_reset"
        if not hostile:
            if status is not None and error is None:
                self._streak[site] = 0
            return
        self._streak[site] += 1
        if self._streak[site] == PAUSE_AFTER and site not in self._paused:
            reason = f"{PAUSE_AFTER} refusals in a row (last: {status or error})"
            log.warning("pausing %s: %s", site, reason)
            self._paused.add(site)
            self._inc("paused_sites")
            job = asyncio.ensure_future(self._pause(site, reason))
            self._pausing.add(job)
            job.add_done_callback(self._pausing.discard)

    async def _pause(self, site: str, reason: str) -> None:
        try:
            await self.source.pause(site, reason, self.clock())
        except Exception as exc:  # the pause stays local to this crawl
            log.warning("could not record the pause of %s: %s", site, exc)

    def done(self, url: str) -> None:
        """The task for ``url`` is finished (callback or errback ran)."""
        self._in_flight.pop(url, None)

    def not_fetched(self, url: str, *, disallowed: bool) -> None:
        """The task for ``url`` never reached the network (robots.txt, a filter)."""
        self.done(url)
        if disallowed:
            self._disallowed.add(url)
            self._inc("disallowed")
        else:
            self._inc("not_fetched")

    def _cost(self, raw: Mapping[str, Any]) -> float:
        if self.unit == "bytes":
            return float(raw.get("bytes_sent", 0) + raw.get("bytes_received", 0))
        if self.unit == "credits":
            status = raw.get("status")
            return 1.0 if status is not None and 200 <= status < 400 else 0.0
        return 1.0

    def _queue(self, raw: dict[str, Any]) -> None:
        self._pending.append(raw)
        if len(self._pending) >= REPORT_BATCH:
            self._spawn_flush()

    def _spawn_flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        job = asyncio.ensure_future(self._report(batch))
        self._reporting.add(job)
        job.add_done_callback(self._reporting.discard)

    async def flush(self, *, wait: bool) -> None:
        """Report what is pending; with ``wait``, until every report is stored."""
        self._spawn_flush()
        if wait and self._reporting:
            await asyncio.gather(*list(self._reporting))

    async def _report(self, batch: list[dict[str, Any]]) -> None:
        for attempt in range(5):  # bounded: a store or service that keeps failing is an error
            try:
                stored, rejected = await self.source.report(batch)
                break
            except Exception as exc:
                if attempt == 4:
                    log.error("could not report %d observations: %s", len(batch), exc)
                    self._inc("lost", len(batch))
                    return
                log.warning("report failed (%s); retrying", exc)
                await asyncio.sleep(0.5 * 2**attempt)
        self._inc("stored", stored)
        self._inc("rejected", rejected)
        outcomes = self.source.outcomes if isinstance(self.source, _Embedded) else self._judged
        if outcomes is not None:
            for name in _OUTCOME_STATS:
                self._set(name, outcomes[name])
            self._set("blocked", sum(outcomes[k] for k in _BLOCKED))

    # -- closing ---------------------------------------------------------------

    async def close(self) -> None:
        """Report everything (held observations without a record of their own), close the source."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        for held in list(self._held):
            self.complete(held, None, [])
        await self.flush(wait=True)
        if self._pausing:
            await asyncio.gather(*list(self._pausing))
        await self.source.close()
        self.records.close()
        if self.engine is not None:
            self.engine.store.close()

    async def _on_closed(self, spider: Any, reason: str) -> None:
        await self.close()
