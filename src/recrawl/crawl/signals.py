"""Cheap signals the crawl reads itself: sitemaps (indexes, gzipped) and feeds.

A sitemap or feed read costs one fetch and says, for many pages at once, when
each last changed. :class:`SignalReader` keeps the sources a crawl reads:

- the ``Sitemap:`` lines of every crawled site's robots.txt
  (``[crawl] robots_sitemaps``), the ``[crawl] sitemaps`` and ``[crawl] feeds``
  URLs, and the sitemaps an index names (at most
  :data:`~recrawl.observe.sitemaps.MAX_INDEX_DEPTH` levels below it and
  :data:`~recrawl.observe.sitemaps.MAX_SITEMAPS` sitemaps per index tree);
- each is fetched like a page: after its site's robots.txt allowed it, through
  the site's :class:`~recrawl.crawl.politeness.SiteGate` (its delay, slots,
  holds and band), conditionally (``If-None-Match`` / ``If-Modified-Since``
  from the last answer), and counted in the cycle's budget at what it really
  cost in the billing unit;
- each is re-read on a schedule of its own: every
  ``1 / (its change rate)``, the rate estimated from its own reads as a page's
  is from its revisits (:func:`recrawl.estimate.rates.raw_rates`: a read that
  found an entry new or moved is a change), doubled after each read while it
  has never changed, between ``signal_min_interval_s`` and
  ``signal_max_interval_s``, and never so often that every source read at that
  pace would take more than ``signal_share`` of the day's budget (reads past
  that share in any 24 hours wait);
- what a read says goes to the store as :class:`~recrawl.observe.sitemaps.Hint`
  rows (trust per site and source judged by the engine, as for hints given by
  hand), with the listed pages the store lacks registered for discovery. A
  304, or an index whose ``lastmod`` for a sitemap did not move, re-announces
  that sitemap's last hints as seen now: the source still says the same, which
  is what lets a trusted source vouch for a page.

Listing pages (``[crawl] listings``) are pages of the plan, fetched as any
page; each fetch is read here (:meth:`SignalReader.listing`): per item a hint
(source ``listing``). What a listing is worth to the plan is what it reveals:
:meth:`SignalReader.listing_worth` gives each listing page the value weight
:func:`recrawl.plan.freshness.reveal_weight` finds for its items (their
values, their change rates as its reads saw them, the time since its last
read and the plan's estimate of its own rate), which the crawl sets on the page
(:meth:`recrawl.engine.Engine.update_values`) so that the allocation reads it
as often as the freshness it buys its items is worth (until the revisits
have judged its site's listings, over the items fetched since its last read
only: what it shows buys nothing yet, and a read brings evidence on those
alone); a listing whose moves
the crawl's revisits refused (mostly not changes: a stale listing) falls back
to its own value, times the share of its reads that changed which items it
shows (its first read counted as one): all it still tells is which items are
listed (new ones, delisted ones), and a listing whose items never come or go
is read ever more rarely, down to :data:`REFUSED_FLOOR`.

A listing that shows its items late is told by the crawl's own fetches
(:data:`LATE_AFTER_S`): read an hour or more after a fetch of an item
replaced its summary (the fetch's record differed from the one before), it
still showed, as at its read before, the very summary that fetch replaced
(the fields of the record before, equal: a price written ``1.00`` on the
listing and ``1`` on the page never counts, nor does a page that lags its
listing, whose fetches did not show the listing's summary); or, having shown
another since the fetch, it moved to the fetched one (a move between
summaries of the same fields). Both need the item's summary to have gone
back (A, B, A) within one read interval for a listing that is not late: the
share :data:`LATE_SHARE` is the guard against that. The crawl keeps the last
fetch of the pages of a site whose listings it reads before a listing shows
them (at most :data:`UNLISTED_MAX`), so what a listing first shows is
compared too. Once a site's listings were caught so :data:`LATE_MIN` times,
and in at least :data:`LATE_SHARE` of the moves its fetches could date (the
others showed a change the crawl had not fetched), they are judged late
(:meth:`SignalReader.late_sites`): they give no more hints, and fall back to
their own value as refused ones do. The revisits cannot always tell:
where an item changes between most two revisits, a listing a day behind moves
in nearly every revisit interval that found a change (an older change of the
item surfacing), and its silence would vouch for items changed in the day it
does not show.

Each read's cost goes to its signal (:meth:`SignalReader.take`: the crawl
counts sitemap and feed reads in the store, a listing page's fetch is reported
as the listing's read), so that each signal's cost per change found can be
told (:meth:`recrawl.engine.Engine.signal_costs`). An item that no listing
page of its site shows any more, once every page of the chain was read since
it was last seen, is noted as having left the listings (an item listed again
loses the note).

Only URLs on the source's own origin are taken (sitemaps.org's rule): a site
cannot plant pages of another. State lives in memory for the crawl process.
Times are unix seconds of the crawl's clock, which is given.
"""

from __future__ import annotations

import asyncio
import json
import math
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from recrawl.config import Settings
from recrawl.crawl.fetch import FetchResult
from recrawl.crawl.robots import site_root
from recrawl.estimate.rates import raw_rates, update_evidence
from recrawl.observe.extract import ListingExtractor
from recrawl.observe.feeds import read_feed
from recrawl.observe.observation import host_of, normalize_url
from recrawl.observe.sitemaps import (
    MAX_INDEX_DEPTH,
    MAX_SITEMAPS,
    Hint,
    read_sitemap_document,
)
from recrawl.plan.freshness import reveal_read_rate, reveal_weight

__all__ = [
    "ListingPage",
    "SignalFetch",
    "SignalReader",
    "SignalSink",
    "SignalSource",
    "item_rates",
    "read_interval",
]

DAY = 86400.0

PRIOR_DAYS = 1.0
"""Days at the pooled rate of a listing's items that each item's own rate
estimate starts from (:func:`item_rates`)."""

READ_SMOOTHING = 0.3
"""Weight of the latest interval in a listing's smoothed read interval."""

LATE_AFTER_S = 3600.0
"""Seconds after the crawl fetched an item with a new summary that a listing
still showing the former one (or moving to the fetched one after showing
another) shows the item late (a cache of a few minutes is not late)."""

LATE_MIN = 3
"""Late sightings (:data:`LATE_AFTER_S`) of a site's listings, at least, for
them to be judged late (:meth:`SignalReader.late_sites`)."""

UNLISTED_MAX = 50_000
"""Pages of listing sites that no listing showed yet whose last fetch the
crawl keeps (the least recently fetched are let go first)."""

REFUSED_FLOOR = 0.1
"""A refused or late listing's value falls with the share of its reads that
changed which items it shows, to this share of its most valuable item's at
the least (or its own value, if lower): it is still read now and then for
the items it lists, across restarts of the crawl too (each starts from the
value the last one wrote)."""

LATE_SHARE = 0.05
"""Share of a site's summary moves dated against the crawl's own fetches that
were late, at least, for its listings to be judged late; the other dated moves
showed a change the crawl had not fetched yet."""

SignalFetch = Callable[[str, Mapping[str, str], float], Awaitable[FetchResult | None]]
"""``fetch(url, headers, end)``: the response, or None when the site could not
take the request before crawl time ``end`` (robots.txt, its gate, its band)."""
SignalSink = Callable[[Sequence[Hint], Sequence[Mapping[str, Any]]], Awaitable[None]]
"""``sink(hints, new_urls)``: store hints, and register ``new_urls`` (dicts with
``url``, ``site`` and ``page_type``) for discovery."""
Kind = Literal["sitemap", "feed"]


def read_interval(
    nc: float,
    tc: float,
    nu: float,
    tu: float,
    last_interval_s: float,
    *,
    min_s: float,
    max_s: float,
    cost_floor_s: float = 0.0,
) -> float:
    """Seconds until a source's next read, from its reads' evidence (``nc``
    reads that found a change over ``tc`` days of intervals, ``nu`` that did
    not over ``tu``): one over its change rate, or, while it never changed,
    twice the last interval; clipped to ``[min_s, max_s]`` and at least
    ``cost_floor_s`` (what the budget share allows). Read hourly, five of
    five reads changed; three unchanged over half a day; half of eight 6-hour
    reads changed:

    >>> read_interval(5.0, 5.0 / 24, 0.0, 0.0, 3600.0, min_s=3600.0, max_s=86400.0)
    3600.0
    >>> read_interval(0.0, 0.0, 3.0, 0.5, 7200.0, min_s=3600.0, max_s=86400.0)
    14400.0
    >>> round(read_interval(4.0, 1.0, 4.0, 1.0, 3600.0, min_s=3600.0, max_s=86400.0))
    33963
    """
    rate = float(raw_rates(nc, tc, nu, tu)) / DAY  # changes per second
    wait = 1.0 / rate if rate > 0 else 2.0 * last_interval_s
    return max(min(max(wait, min_s), max_s), cost_floor_s)


@dataclass
class SignalSource:
    """One sitemap or feed the crawl reads, and what its reads found.

    Times are unix seconds of the crawl's clock; ``cost`` is the last read's,
    in the billing unit. ``parent``: the index that named it (None for a
    root); ``announced``: the ``lastmod`` that index gave it at its last read
    (``read_as``: the one it had when itself last read).
    """

    url: str
    kind: Kind
    origin: str
    depth: int = 0
    parent: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    next_read: float = -math.inf
    last_read: float | None = None
    interval_s: float = 0.0
    announced: float | None = None
    read_as: float | None = None
    evidence: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    lastmods: dict[str, float] = field(default_factory=dict)
    """The last read's hints: URL → ``lastmod``."""
    children: list[str] = field(default_factory=list)
    cost: float | None = None
    reads: int = 0
    changed: int = 0
    not_modified: int = 0
    failed: int = 0
    hints: int = 0
    """Hints stored from it, re-announcements included."""
    discovered: int = 0
    """Pages it listed that the crawl registered."""

    def figures(self) -> dict[str, Any]:
        """What :attr:`~recrawl.crawl.loop.CrawlStats.signals` shows of it
        (``next_read`` None: due at once), JSON-ready."""
        return {
            "url": self.url,
            "kind": self.kind,
            "reads": self.reads,
            "changed": self.changed,
            "not_modified": self.not_modified,
            "failed": self.failed,
            "hints": self.hints,
            "discovered": self.discovered,
            "interval_s": self.interval_s,
            "next_read": self.next_read if math.isfinite(self.next_read) else None,
        }


def item_rates(moves: Any, watched_days: Any, prior_days: float = PRIOR_DAYS) -> Any:
    """Each item's change rate, per day, as a listing's reads saw it: its
    summary ``moves`` over the days it was ``watched`` (first to last
    sighting), starting from ``prior_days`` days at the items' pooled rate (1
    a day before any was watched).

    >>> item_rates(np.array([0.0, 4.0]), np.array([2.0, 2.0])).round(3)
    array([0.333, 1.667])
    """
    m = np.asarray(moves, dtype=np.float64)
    t = np.maximum(np.asarray(watched_days, dtype=np.float64), 0.0)
    total = float(t.sum())
    pooled = float(m.sum()) / total if total > 0 else 1.0
    return (m + pooled * prior_days) / (t + prior_days)


@dataclass
class _Item:
    """What the listings last showed of one item: its summary (as JSON), since
    when (``since``: the change's time as far as the crawl can tell), whether
    a hint may say so (``changed``: it changed under the crawl's eyes), when a
    listing first and last (``seen``) showed it, its summary moves, and when
    this crawl last fetched the item itself (``fetched``, the fetch's start)
    with what the fetch's record showed of the summary's fields and a digest
    of its content; ``unsure``: a move the last fetch could not date (the
    read's time, the fetch's, its digest), dated by the next fetch."""

    summary: str
    since: float
    first: float
    seen: float
    changed: bool = False
    fetched: float | None = None
    record: dict[str, str] | None = None
    moves: int = 0
    digest: str | None = None
    unsure: tuple[float, float, str | None] | None = None
    shown: float = -math.inf
    """The read that first showed the current summary."""
    caught: float | None = None
    """The fetch (its start) a late sighting of the item was counted against."""
    prev: dict[str, str] | None = None
    """The record the fetch at ``replaced`` replaced (what the item showed
    before its last change the crawl fetched)."""
    replaced: float | None = None
    """The last fetch (its start) whose record differed from the one before."""
    left: bool = False
    """It left every listing page of its site (:meth:`SignalReader.listing`)."""


@dataclass
class ListingPage:
    """One listing page the crawl read: its items at the last read, its read
    rate, the plan's estimate of its own change rate and the values the crawl
    gave it (``base``: its own, see :meth:`SignalReader.listing_worth`)."""

    url: str
    site: str = ""
    items: list[str] = field(default_factory=list)
    reads: int = 0
    last_read: float | None = None
    interval_s: float | None = None
    """Smoothed interval between reads (:data:`READ_SMOOTHING`), a figure: its
    value counts from ``last_read`` (:meth:`SignalReader.listing_worth`)."""
    rate_per_day: float | None = None
    base: float | None = None
    value: float | None = None
    late_reads: int | None = None
    """Its reads by the first after its site's listings were judged late
    (:meth:`SignalReader.late_sites`), that one included."""
    arrivals: int = 0
    """Its reads after the first that changed which items it shows (an item
    came, or left it)."""

    def figures(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "site": self.site,
            "kind": "listing",
            "items": len(self.items),
            "reads": self.reads,
            "interval_s": self.interval_s,
            "rate_per_day": self.rate_per_day,
            "value": self.value,
            "late_reads": self.late_reads,
        }


def _record(record: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A fetch's record as kept: its fields' values as text, empty ones left out."""
    if record is None:
        return None
    return {k: str(v) for k, v in record.items() if v is not None and v != []}


def _same(summary: Mapping[str, Any], record: Mapping[str, str] | None) -> bool | None:
    """Whether a fetched item's ``record`` shows ``summary``: None when they
    share no field (or no record)."""
    if not record:
        return None
    shared = [k for k in summary if k in record and summary[k] is not None]
    if not shared:
        return None
    return all(str(summary[k]) == record[k] for k in shared)


@dataclass
class _Spend:
    at: float
    cost: float


class SignalReader:
    """The sitemaps and feeds one crawl reads, when, and what they said.

    ``fetch`` and ``sink`` are the crawl's (:data:`SignalFetch`,
    :data:`SignalSink`); ``clock`` its time (unix seconds); ``cost(result)``
    what an answer cost in the billing unit, ``commit(delta)`` adds to the
    cycle's committed spend and ``room()`` tells what is left of the cycle's
    budget; ``mean_cost()`` what a fetch is expected to cost before a source
    has been read once.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        fetch: SignalFetch,
        sink: SignalSink,
        clock: Callable[[], float],
        cost: Callable[[FetchResult], float],
        commit: Callable[[float], None],
        room: Callable[[], float],
        mean_cost: Callable[[], float],
    ) -> None:
        c = settings.crawl
        self.min_s = c.signal_min_interval_s
        self.max_s = c.signal_max_interval_s
        self.share = c.signal_share
        self.daily = settings.budget_per_day or math.inf
        self.robots_sitemaps = c.robots_sitemaps
        self._fetch = fetch
        self._sink = sink
        self._clock = clock
        self._cost = cost
        self._commit = commit
        self._room = room
        self._mean_cost = mean_cost
        self.sources: dict[str, SignalSource] = {}
        self.spent = 0.0
        """What the reads cost, over the crawl, in the billing unit."""
        self.requests = 0
        self._spend: deque[_Spend] = deque()
        self._sites: dict[str, tuple[str, str]] = {}
        self._site_of: dict[str, str] = {}  # origin -> site name, from any page crawled there
        for url in c.sitemaps:
            self.add(url, "sitemap")
        for url in c.feeds:
            self.add(url, "feed")
        self.listing_rules = dict(c.listings)
        self._listings = {
            t: ListingExtractor(r.items, r.url, r.summary, next=r.next)
            for t, r in c.listings.items()
        }
        self._items: dict[str, _Item] = {}
        self._next_pages: dict[str, set[str]] = {}
        self.listing_pages: dict[str, ListingPage] = {}
        self.listing_reads = 0
        self.listing_hints = 0
        self.delisted = 0
        """Items that left every listing of their site (noted, not come back)."""
        self._dated: dict[str, list[int]] = {}
        """Per site: summary moves seen late and before the crawl's fetch
        (:meth:`late_sites`)."""
        self._unlisted: dict[str, tuple[float, dict[str, str] | None, str | None]] = {}
        """Pages of sites whose listings were read, fetched but not listed yet:
        the last fetch's time, record and digest (:meth:`fetched`)."""
        self._late_at: dict[str, float] = {}
        """Per site: the read at which its listings were judged late."""
        self._by_origin: dict[str, set[str]] = {}
        self.reads: list[dict[str, Any]] = []
        """Sitemap and feed reads not yet taken (:meth:`take`): ``site``,
        ``signal`` (the kind), wire ``bytes``, ``credits``."""
        self.left: list[tuple[str, str, float | None]] = []
        """Items that left every listing, or came back (``at`` None), not yet
        taken (:meth:`take`): ``(url, site, at)``."""

    # -- sources -----------------------------------------------------------

    def add(
        self, url: str, kind: Kind, *, parent: SignalSource | None = None
    ) -> SignalSource | None:
        """Read ``url`` from now on (no-op if it already is); None when an index
        tree is past its bounds."""
        src = self.sources.get(url)
        if src is not None:
            return src
        depth = 0 if parent is None else parent.depth + 1
        if parent is not None:
            root = self._root(parent)
            if depth > MAX_INDEX_DEPTH + 1 or self._tree_size(root) >= MAX_SITEMAPS:
                return None
        src = SignalSource(url, kind, site_root(url), depth, None if parent is None else parent.url)
        self.sources[url] = src
        return src

    def _root(self, src: SignalSource) -> SignalSource:
        for _ in range(MAX_INDEX_DEPTH + 2):
            if src.parent is None or src.parent not in self.sources:
                break
            src = self.sources[src.parent]
        return src

    def _tree_size(self, root: SignalSource) -> int:
        return sum(1 for s in self.sources.values() if s.parent and self._root(s) is root)

    def learn(self, origin: str, site: str, page_type: str) -> None:
        """The site name and page type new pages of ``origin`` are registered with
        (the first crawled page's)."""
        self._site_of.setdefault(origin, site)
        if page_type not in self._listings:
            self._sites.setdefault(origin, (site, page_type))

    # -- listing pages -----------------------------------------------------

    def fetched(
        self,
        url: str,
        now: float,
        record: Mapping[str, Any] | None = None,
        *,
        digest: str | None = None,
    ) -> None:
        """This crawl fetched ``url`` at ``now`` (its start: the time the store
        keeps), its ``record`` the fields extracted and ``digest`` its content's
        (both None: as at the last fetch, a 304); kept for items a listing
        shows, and for the other pages of a site whose listings were read
        (until a listing shows them: what a listing first shows of an item
        is then compared with its last fetch too). A summary move the last
        fetch could not date is dated now: the content changed since that
        fetch, after it; the same, before it."""
        item = self._items.get(url)
        if item is None:
            if site_root(url) in self._by_origin and url not in self.listing_pages:
                was = self._unlisted.pop(url, None)
                if record is None and digest is None and was is not None:
                    record, digest = was[1], was[2]
                self._unlisted[url] = (now, _record(record), digest)
                if len(self._unlisted) > UNLISTED_MAX:  # the least recently fetched goes
                    del self._unlisted[next(iter(self._unlisted))]
            return
        item.fetched = now
        if record is not None:
            rec = _record(record)
            if item.record is not None and rec != item.record:
                item.prev, item.replaced = item.record, now
            item.record = rec
        new = item.digest if record is None and digest is None else digest
        if item.unsure is not None:
            read, before, old = item.unsure
            if new is not None and old is not None and now >= read:
                item.since, item.changed = (read if new != old else before), True
            item.unsure = None
        item.digest = new

    async def listing(
        self,
        url: str,
        site: str,
        page_type: str,
        body: bytes,
        now: float,
        *,
        rate_per_day: float | None = None,
    ) -> None:
        """Read a fetched listing page of ``page_type`` (one of ``[crawl]
        listings``), fetched at ``now`` (its start), whose change rate the plan
        estimates at ``rate_per_day``: per item on the page's own origin, a
        hint (source ``listing``, ``lastmod`` the first time the crawl saw its
        current summary) once the listing can say something: its summary
        changed while the crawl watched, or the crawl fetched the item since
        the summary was first seen (an unchanged summary then vouches for it).

        A summary that moved since the last read, of an item the crawl fetched
        in between, changed before or after that fetch: the fetch's record
        tells which where it has the summary's fields (the same values: before,
        the hint's ``lastmod`` is the fetch; other values: after); without, the
        item gets no hint until it is fetched again (either ``lastmod`` would
        be a guess, and a wrong one a false vouch or a wasted fetch), when the
        next fetch's content, against that fetch's, tells (:meth:`fetched`).
        Items new to the crawl and the next page are registered.

        A read at least :data:`LATE_AFTER_S` after a fetch replaced the
        item's record, still showing (as at this page's read before) the
        summary of the record that fetch replaced, is the listing showing the
        item late, as is a move to the summary the last fetch showed after a
        read that long after it showed another (of the same fields); a move
        to a summary the last fetch did not show, the listing showing a
        change first. Each fetch counts once. A site whose listings are judged late from those
        (:meth:`late_sites`) gets no more hints: its items are still
        registered."""
        rule = self.listing_rules[page_type]
        items, nxt = self._listings[page_type].read(body, url)
        origin = site_root(url)
        hints: list[Hint] = []
        rows: list[dict[str, Any]] = []
        _, seen_type = self._sites.get(origin, ("", "page"))
        item_type = rule.item_type or seen_type
        page = self.listing_pages.setdefault(url, ListingPage(url))
        dated = self._dated.setdefault(site, [0, 0])
        shown: list[str] = []
        listed_before = set(page.items)  # what this page showed at its last read
        for it in items:
            try:
                u = normalize_url(it.url)
            except ValueError:
                continue
            if site_root(u) != origin:
                continue
            shown.append(u)
            key = json.dumps(it.summary, sort_keys=True)
            mem = self._items.get(u)
            if mem is None:
                mem = self._items[u] = _Item(key, now, now, now, shown=now)
                was = self._unlisted.pop(u, None)
                if was is not None:  # fetched before a listing showed it
                    mem.fetched, mem.record, mem.digest = was
                self._by_origin.setdefault(origin, set()).add(u)
                rows.append({"url": u, "site": site, "page_type": item_type})
                continue
            if mem.left:  # listed again
                mem.left = False
                self.delisted -= 1
                self.left.append((u, site, None))
            f, r = mem.fetched, mem.replaced
            if mem.summary == key:
                if (
                    r is not None
                    and mem.caught != r
                    and mem.shown < r
                    and now - r >= LATE_AFTER_S
                    and u in listed_before
                    and _same(it.summary, mem.prev) is True
                    and _same(it.summary, mem.record) is False
                ):  # well after a fetch replaced it, still the summary that fetch replaced
                    dated[0] += 1
                    mem.caught = r
            else:
                former = json.loads(mem.summary)
                mem.summary, mem.moves, mem.shown = key, mem.moves + 1, now
                if f is not None and f <= now and former.keys() == it.summary.keys():
                    fetched_new = _same(it.summary, mem.record)
                    if fetched_new is False:
                        dated[1] += 1  # shown before the crawl fetched it
                    elif fetched_new and mem.caught != f and mem.seen - f >= LATE_AFTER_S:
                        dated[0] += 1  # still the former summary well after the fetch
                        mem.caught = f
                if f is not None and mem.seen < f <= now:  # fetched since the last sighting
                    before = _same(it.summary, mem.record)
                    if before is None:  # cannot tell: silent until the next fetch
                        mem.since, mem.changed, mem.unsure = now, False, (now, f, mem.digest)
                    else:
                        mem.since, mem.changed, mem.unsure = (f if before else now), True, None
                else:
                    mem.since, mem.changed, mem.unsure = now, True, None
            mem.seen = max(mem.seen, now)
            if mem.changed or (mem.fetched is not None and mem.fetched >= mem.since):
                hints.append(Hint(u, now, "listing", mem.since))
        if site in self.late_sites():
            hints = []
            self._late_at.setdefault(site, now)
            if page.late_reads is None:
                page.late_reads = page.reads + 1
        if page.last_read is not None and now > page.last_read:
            gap = now - page.last_read
            prev = page.interval_s
            page.interval_s = gap if prev is None else prev + READ_SMOOTHING * (gap - prev)
        if page.reads and set(shown) != set(page.items):
            page.arrivals += 1
        page.site, page.items, page.reads, page.last_read = site, shown, page.reads + 1, now
        if rate_per_day is not None and rate_per_day > 0:
            page.rate_per_day = rate_per_day
        pages = self._next_pages.setdefault(origin, set())
        if nxt is not None and site_root(nxt) == origin and len(pages) < rule.max_pages:
            try:
                nxt = normalize_url(nxt)
            except ValueError:
                nxt = None
            if nxt is not None and nxt not in pages:
                pages.add(nxt)
                rows.append({"url": nxt, "site": site, "page_type": page_type})
        self._note_left(origin, site, now)
        self.listing_reads += 1
        self.listing_hints += len(hints)
        if hints or rows:
            await self._sink(hints, rows)

    def _note_left(self, origin: str, site: str, now: float) -> None:
        """Note the items of ``origin`` that left every listing: once every
        listing page of its chain (those read, and the next pages found but
        not read yet) was read after an item's last sighting, no page shows
        it. A chain page that is no longer read (it failed, or the chain got
        shorter) holds its items as listed."""
        chain = [p for p in self.listing_pages.values() if site_root(p.url) == origin]
        unread = self._next_pages.get(origin, set()) - {p.url for p in chain}
        if unread or not chain:
            return
        since = min(p.last_read or -math.inf for p in chain)
        for u in self._by_origin.get(origin, ()):
            mem = self._items[u]
            if not mem.left and mem.seen < since:
                mem.left = True
                self.delisted += 1
                self.left.append((u, site, now))

    def late_sites(self) -> set[str]:
        """The sites whose listings show their items late: caught so
        (:data:`LATE_AFTER_S`) at least :data:`LATE_MIN` times, in at least
        :data:`LATE_SHARE` of the summary moves this crawl's fetches dated."""
        return {
            site
            for site, (late, first) in self._dated.items()
            if late >= LATE_MIN and late >= LATE_SHARE * (late + first)
        }

    def take(self) -> tuple[list[dict[str, Any]], list[tuple[str, str, float | None]]]:
        """The sitemap and feed reads and the delisting notes since the last take."""
        reads, left = self.reads, self.left
        self.reads, self.left = [], []
        return reads, left

    def listing_worth(
        self,
        now: float,
        values: Mapping[str, float],
        refused: AbstractSet[str] = frozenset(),
        *,
        trusted: AbstractSet[str] | None = None,
        cycle_s: float = 3600.0,
    ) -> list[tuple[str, float]]:
        """The value each listing page should have now, where it moved (by more
        than a tenth): :func:`~recrawl.plan.freshness.reveal_weight` of its
        items (``values``: the store's, by URL, 1 for an item it lacks; their
        rates by :func:`item_rates`) at the read rate
        :func:`~recrawl.plan.freshness.reveal_read_rate` gives for the time
        since its last read (at least a cycle, ``cycle_s``; at most one mean
        change interval of its items) and the plan's estimate of its rate (the
        sum of its items' before the plan gave one), never below its own
        value. Not at its read rate as last measured: that one moves only
        with reads, and a value too low to get the listing read would stay
        so. A listing of a site in ``refused`` (site names: its listings'
        moves mostly found no change, or they are late) goes back to its own
        value, ``values`` of the listing at the first call, capped at its most
        valuable item's (a crawl that starts again finds the value the last
        one gave it), times the share of its reads that changed which items
        it shows, its first read counted as one: what is left of its worth is
        which items are listed. Never under :data:`REFUSED_FLOOR` of its most
        valuable item's (or its own value, if lower): a crawl that starts
        again takes the value the last one wrote as its own.

        With ``trusted`` (the sites whose listings the revisits trusted to
        vouch or to prove), a listing of a site in neither set is not judged
        yet: what it shows buys its items nothing until it is, and all a read
        brings is evidence on the items the crawl fetched since the listing's
        last read (a read tells whether it showed their change, or still the
        summary they had, and only a read after a revisit can tell a late
        listing). Its reveal counts those items only: read about once its
        items have been fetched again, not as often as a trusted listing
        would be; at its own value while none was. None: every listing not
        refused is valued as if trusted."""
        out: list[tuple[str, float]] = []
        for page in self.listing_pages.values():
            mem = [self._items[u] for u in page.items if u in self._items]
            if not mem:
                continue
            vals = np.array([values.get(u, 1.0) for u in page.items if u in self._items])
            if page.base is None:
                page.base = min(float(values.get(page.url, 1.0)), float(vals.max()))
            base = page.base
            if page.site in refused:  # it tells which items are listed, no more
                share = min((page.arrivals + 1) / max(page.reads, 1), 1.0)
                want = max(base * share, min(base, REFUSED_FLOOR * float(vals.max())))
            else:
                rates = item_rates(
                    np.array([m.moves for m in mem], dtype=np.float64),
                    np.array([(m.seen - m.first) / DAY for m in mem]),
                )
                since = max(now - page.last_read, 0.0) if page.last_read is not None else 0.0
                visits = reveal_read_rate(rates, vals, since / DAY, max(cycle_s, 1.0) / DAY)
                own = page.rate_per_day or float(rates.sum())
                if trusted is not None and page.site not in trusted:  # not judged yet
                    read = page.last_read if page.last_read is not None else -math.inf
                    checked = np.array([m.fetched is not None and m.fetched > read for m in mem])
                    rates, vals = rates[checked], vals[checked]
                want = max(base, reveal_weight(rates, vals, own, visits))
            last = page.value if page.value is not None else base
            if abs(want - last) > 0.1 * max(last, 1e-9):
                page.value = want
                out.append((page.url, want))
        return out

    def discover(self, robots_sitemaps: Mapping[str, Sequence[str]]) -> None:
        """Read the sitemaps robots.txt names (by site root), when configured to."""
        if not self.robots_sitemaps:
            return
        for urls in robots_sitemaps.values():
            for url in urls:
                if url.startswith(("http://", "https://")):
                    self.add(url, "sitemap")

    # -- the budget --------------------------------------------------------

    def _expected(self, src: SignalSource) -> float:
        return src.cost if src.cost is not None and src.cost > 0 else self._mean_cost()

    def _window(self, now: float) -> float:
        while self._spend and self._spend[0].at <= now - DAY:
            self._spend.popleft()
        return sum(s.cost for s in self._spend)

    def _affordable(self, cost: float, now: float) -> bool:
        """Within the day's share (one read a day at least) and the cycle's room."""
        if cost > self._room():
            return False
        spent = self._window(now)
        return spent + cost <= self.share * self.daily or not self._spend

    def due(self, now: float) -> list[SignalSource]:
        """The sources due at ``now``, most overdue first."""
        return sorted(
            (s for s in self.sources.values() if s.next_read <= now),
            key=lambda s: (s.next_read, s.depth, s.url),
        )

    def planned_origins(self, now: float) -> list[str]:
        """The origin of each source due at ``now`` (one entry per read)."""
        return [s.origin for s in self.due(now)]

    # -- reading -----------------------------------------------------------

    async def run(self, now: float, end: float) -> None:
        """Read what is due at ``now`` before crawl time ``end``: the sources of
        one origin one after the other (their site's gate spaces them), origins
        side by side; sitemaps an index names that are new or moved are read in
        the same run when the budget allows."""
        by_origin: dict[str, deque[SignalSource]] = {}
        for src in self.due(now):
            by_origin.setdefault(src.origin, deque()).append(src)
        if by_origin:
            await asyncio.gather(*(self._run_origin(q, end) for q in by_origin.values()))

    async def _run_origin(self, queue: deque[SignalSource], end: float) -> None:
        """One origin's reads, in turn."""
        for _ in range(MAX_SITEMAPS + 1):  # bounded: an index tree is at most this many
            if not queue:
                return
            src = queue.popleft()
            expected = self._expected(src)
            if not self._affordable(expected, self._clock()):
                continue  # stays due: read when the budget allows
            self._commit(expected)
            headers = {}
            if src.etag:
                headers["If-None-Match"] = src.etag
            if src.last_modified:
                headers["If-Modified-Since"] = src.last_modified
            res = await self._fetch(src.url, headers, end)
            if res is None:
                self._commit(-expected)
                continue
            cost = self._cost(res)
            self._commit(cost - expected)
            ok = res.status is not None and 200 <= res.status < 400 and res.error is None
            self.reads.append(
                {
                    "site": self._site_of.get(src.origin) or host_of(src.url),
                    "signal": src.kind,
                    "bytes": res.bytes_sent + res.bytes_received,
                    "credits": 1.0 if ok else 0.0,
                }
            )
            self._spend.append(_Spend(self._clock(), cost))
            self.spent += cost
            self.requests += 1
            src.cost = cost if res.status != 304 else src.cost or cost
            for child in await self._took(src, res):
                if child.origin == src.origin:
                    queue.append(child)

    async def _took(self, src: SignalSource, res: FetchResult) -> list[SignalSource]:
        """Fold one answer into ``src``; the index children now due."""
        now = self._clock()
        if res.status == 304:
            src.not_modified += 1
            await self._announce(src, now)
            self._schedule(src, now, changed=False)
            return []
        ok = res.status is not None and 200 <= res.status < 300 and res.error is None
        if not ok:
            return self._failed(src, now)
        try:
            hints, urls, refs = self._parse(src, res.body, now)
        except (ValueError, ET.ParseError):
            return self._failed(src, now)
        src.etag = res.headers.get("etag")
        src.last_modified = res.headers.get("last-modified")
        src.read_as = src.announced
        lastmods = {h.url: h.lastmod for h in hints}
        # a change: an entry new or moved; in an index, a sitemap new or re-dated
        dated = {u: self.sources[u].announced for u in src.children if u in self.sources}
        changed = src.last_read is not None and (
            lastmods != src.lastmods
            or {c.url: c.lastmod for c in refs if c.url in dated or c.url not in src.children}
            != dated
        )
        src.lastmods = lastmods
        due: list[SignalSource] = []
        if refs:
            src.children = [c.url for c in refs]
            for ref in refs:
                child = self.add(ref.url, "sitemap", parent=src)
                if child is None:
                    continue
                moved = ref.lastmod != child.read_as or ref.lastmod is None
                child.announced = ref.lastmod
                if child.last_read is None or moved:
                    if ref.lastmod is not None or child.next_read <= now:
                        child.next_read = min(child.next_read, now)
                        due.append(child)
                else:  # the index vouches: the sitemap is as last read
                    await self._announce(child, now)
        await self._deliver(src, hints, urls)
        self._schedule(src, now, changed=changed)
        return due

    def _parse(
        self, src: SignalSource, body: bytes, now: float
    ) -> tuple[list[Hint], list[str], list[Any]]:
        if src.kind == "feed":
            fd = read_feed(body, seen_at=now, source="feed", base_url=src.url)
            hints, urls, refs = fd.hints, fd.urls, []
        else:
            doc = read_sitemap_document(body, seen_at=now, source="sitemap")
            hints, urls = doc.hints, doc.urls
            refs = [r for r in doc.sitemaps if site_root(r.url) == src.origin]
        mine = [u for u in urls if site_root(u) == src.origin]
        return [h for h in hints if site_root(h.url) == src.origin], mine, refs

    async def _deliver(self, src: SignalSource, hints: Sequence[Hint], urls: Iterable[str]) -> None:
        site, page_type = self._sites.get(src.origin, ("", "page"))
        rows = [
            {"url": u, "page_type": page_type, **({"site": site} if site else {})} for u in urls
        ]
        src.hints += len(hints)
        if hints or rows:
            await self._sink(hints, rows)

    async def _announce(self, src: SignalSource, now: float) -> None:
        """The source says what it said at its last read, as seen at ``now``."""
        if src.kind == "sitemap" and src.children:  # an index: its sitemaps are vouched for too
            for url in src.children:
                child = self.sources.get(url)
                if child is not None and child.last_read is not None and child.announced:
                    await self._announce(child, now)
        if src.lastmods:
            hints = [Hint(u, now, src.kind, lm) for u, lm in src.lastmods.items()]
            src.hints += len(hints)
            await self._sink(hints, ())

    def _failed(self, src: SignalSource, now: float) -> list[SignalSource]:
        src.failed += 1
        wait = self.min_s * 2.0 ** min(src.failed, 10)
        src.next_read = now + min(wait, self.max_s)
        return []

    def _schedule(self, src: SignalSource, now: float, *, changed: bool) -> None:
        if src.last_read is not None and now > src.last_read:
            nc, tc, nu, tu = src.evidence
            src.evidence = update_evidence(
                nc, tc, nu, tu, (now - src.last_read) / DAY, changed, half_life_days=np.inf
            )
        src.reads += 1
        src.changed += changed
        src.failed = 0
        src.last_read = now
        # read at this pace, every source together would take the day's share
        cost = sum(self._expected(s) for s in self.sources.values())
        floor = DAY * cost / (self.share * self.daily) if math.isfinite(self.daily) else 0.0
        src.interval_s = read_interval(
            *src.evidence,
            src.interval_s or self.min_s / 2.0,
            min_s=self.min_s,
            max_s=self.max_s,
            cost_floor_s=floor,
        )
        src.next_read = now + src.interval_s
        if src.parent is not None and src.announced is not None:
            # its index tells when it moves; read it unasked only as often as the longest interval
            src.next_read = now + max(src.interval_s, self.max_s)

    def figures(self) -> list[dict[str, Any]]:
        """Each source's :meth:`SignalSource.figures`, by URL."""
        return [self.sources[u].figures() for u in sorted(self.sources)]

    def listing_figures(self) -> list[dict[str, Any]]:
        """Each listing page's :meth:`ListingPage.figures`, with whether its
        site's listings are judged late (``late``, :meth:`late_sites`) and
        the read at which they were (``late_at``)."""
        late = self.late_sites()
        return [
            {**p.figures(), "late": p.site in late, "late_at": self._late_at.get(p.site)}
            for p in self.listing_pages.values()
        ]
