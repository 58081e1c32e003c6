"""Cheap signals: what a sitemap, a feed or a listing page says of a page's last change.

A sitemap or feed read costs one fetch for thousands of pages and gives each
a ``lastmod``: the time its site says the page last changed. Where those
dates prove reliable they replace blind revisits (SPEC §2, "cheap signals
before expensive fetches"):

- a ``lastmod`` after the page's last fetch says the page is stale for certain:
  fetch it first (:attr:`recrawl.plan.planner.PlanPages.known_stale`);
- a ``lastmod`` not after it, read at ``seen_at``, says the page was unchanged
  until ``seen_at``: its chance of being stale counts from there
  (:attr:`recrawl.plan.planner.PlanPages.checked_at`), and its revisit waits.

Reliability is judged per site and source against what the crawl's own
revisits found (:func:`source_trust`): a source whose ``lastmod`` moved in
(nearly) every revisit interval that found a change may vouch for pages
(``quiet``); one whose moves were (nearly) all real changes may prove them
(``changes``). A source starts untrusted: its hints are kept and judged,
never acted on, until the revisits show it right. Many sitemaps stamp every
URL with the time the file was generated, or move ``lastmod`` for edits to
parts of the page the crawl does not hash: those fail ``changes`` (and,
with every ``lastmod`` after the last fetch, never vouch for a page).

A listing page (a category or search page that shows a summary of many
items) is a source too: report, for each item, the first time you saw its
current summary as ``lastmod``.

The documents themselves are read in :mod:`recrawl.observe.sitemaps`
(sitemaps and sitemap indexes, gzipped or not) and :mod:`recrawl.observe.feeds`
(RSS and Atom); :class:`Hint`, :func:`parse_lastmod` and :func:`read_sitemap`
are imported here from there. ``recrawl crawl`` fetches them itself
(:mod:`recrawl.crawl.signals`).

Everything here is pure: no I/O, no clock.

>>> h = parse_hint({"url": "https://shop.example/p/1", "seen_at": 1.7e9,
...                 "source": "sitemap", "lastmod": "2023-11-14"})
>>> h.lastmod == parse_lastmod("2023-11-14T23:59:59Z")  # a date: its last second
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from recrawl._exceptions import InvalidHint
from recrawl.observe.observation import normalize_url
from recrawl.observe.sitemaps import Hint, parse_lastmod, read_sitemap

__all__ = [
    "HINT_LAG_DEFAULT_S",
    "HINT_LAG_MIN_ROWS",
    "HINT_LAG_QUANTILE",
    "MIN_CHANGES",
    "MIN_LIFT",
    "MIN_MOVES",
    "PRECISION_TO_TRUST",
    "RECALL_TO_TRUST",
    "TRUSTED_MEANS",
    "Hint",
    "HintVerdict",
    "InvalidHint",
    "SourceTrust",
    "parse_hint",
    "parse_lastmod",
    "quiet_until",
    "ranges",
    "read_hint_document",
    "read_hints",
    "read_sitemap",
    "reporting_lag",
    "revisit_moves",
    "signal_state",
    "source_trust",
    "trusted_lags",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

RECALL_TO_TRUST = 0.9
"""Share of the revisits that found a change in which ``lastmod`` moved, for a
source's silence to vouch for its pages."""
PRECISION_TO_TRUST = 0.8
"""Share of ``lastmod`` moves that the next revisit found to be a change, for a
move to prove one."""
MIN_CHANGES = 10
"""Revisits that found a change, at least, before a source may vouch."""
MIN_MOVES = 10
"""Revisits across a ``lastmod`` move, at least, before a move may prove a change."""
MIN_LIFT = 0.2
"""How much likelier than the change model predicted a change must be after a
move, for a move to prove one: on a site whose pages change between almost
every two revisits, a sitemap stamping every URL with its read time looks
precise, and tells nothing the model does not know."""

TRUSTED_MEANS = (
    f"A source is trusted on a site when its lastmod moved in at least {RECALL_TO_TRUST:.0%} "
    f"of the revisits that found a change (over {MIN_CHANGES}+ changes: its silence then "
    "vouches for a page, whose revisit waits) and at least "
    f"{PRECISION_TO_TRUST:.0%} of its moves were changes (over {MIN_MOVES}+ moves: a move "
    "then sends the page to the front of the plan); until then its hints are kept and "
    "judged, never acted on."
)
"""What trusted means, in a sentence for people (the CLI's report and the service's)."""
HINT_LAG_MIN_ROWS = 10
"""Moves of a source's ``lastmod`` in the window, at least, to measure its
reporting lag (:meth:`recrawl.engine.Engine.hint_lags`); with fewer it is taken as
:data:`HINT_LAG_DEFAULT_S`."""
HINT_LAG_DEFAULT_S = 86_400.0
"""The reporting lag of a source with too few moves to measure it: one day, the
period of most generated sitemaps. Erring long only shortens what the source
vouches for (the page is revisited a little sooner); erring short would let a
change the source has not reported yet pass for none."""
HINT_LAG_QUANTILE = 90.0
"""Percentile of (first seen − ``lastmod``) taken as a source's reporting lag."""


def parse_hint(
    raw: Mapping[str, Any],
    *,
    source: str | None = None,
    seen_at: float | None = None,
    line: int | None = None,
) -> Hint:
    """A :class:`Hint` from one JSON object: ``url``, ``lastmod`` and, unless
    given here as defaults, ``source`` and ``seen_at``.

    Raises :class:`InvalidHint` naming the field.
    """

    def bad(why: str, name: str | None) -> InvalidHint:
        return InvalidHint(why, field=name, line=line)

    if not isinstance(raw, Mapping):
        raise bad("is not a JSON object", None)
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise bad("is missing or not a string", "url")
    try:
        url = normalize_url(url)
    except ValueError as exc:
        raise bad(str(exc), "url") from None
    src = raw.get("source", source)
    if not isinstance(src, str) or not src.strip():
        raise bad("is missing (a name such as sitemap, feed or listing)", "source")
    if len(src) > 100 or "\x00" in src:
        raise bad("is longer than 100 characters or holds NUL", "source")
    times: dict[str, float] = {}
    for name, default in (("seen_at", seen_at), ("lastmod", None)):
        value = raw.get(name, default)
        if value is None:
            raise bad("is missing", name)
        try:
            times[name] = parse_lastmod(value)
        except ValueError as exc:
            raise bad(str(exc), name) from None
    return Hint(url=url, seen_at=times["seen_at"], source=src.strip(), lastmod=times["lastmod"])


def read_hints(
    lines: Iterable[str], *, source: str | None = None, seen_at: float | None = None
) -> Iterator[tuple[int, Hint | InvalidHint]]:
    """Yield ``(line number, Hint or InvalidHint)`` for each non-blank JSONL line."""
    import orjson

    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            yield n, InvalidHint(f"not JSON ({exc})", line=n)
            continue
        try:
            yield n, parse_hint(raw, source=source, seen_at=seen_at, line=n)
        except InvalidHint as exc:
            yield n, exc


def _text_lines(data: Iterable[bytes]) -> Iterator[str]:
    """Lines as text: a byte that is not UTF-8 reaches the parser as a lone
    surrogate, which rejects that line alone; a byte-order mark is dropped."""
    for i, line in enumerate(data):
        text = line.decode("utf-8", "surrogateescape")
        yield text.removeprefix("\ufeff") if i == 0 else text


def read_hint_document(
    data: Any, *, source: str | None, seen_at: float | None, read_at: float
) -> tuple[str, Iterator[Hint | InvalidHint]]:
    """``(format, entries)`` of one input, told apart by its content: a sitemap
    (``"sitemap"``: XML, read by :func:`read_sitemap` as seen at ``seen_at``,
    else ``read_at``; ``source`` defaults to ``sitemap``) or hint lines
    (``"jsonl"``: :func:`read_hints`, ``source`` and ``seen_at`` their
    defaults). ``data`` must be able to ``peek`` (``io.BufferedReader``). A
    document that is not a sitemap, or not well-formed, raises ValueError or
    ``xml.etree.ElementTree.ParseError`` while the entries are read."""
    head = bytes(data.peek(4096)[:4096])
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"<"):
        when = read_at if seen_at is None else seen_at
        return "sitemap", read_sitemap(data, seen_at=when, source=source or "sitemap")
    lines = read_hints(_text_lines(data), source=source, seen_at=seen_at)
    return "jsonl", (h for _, h in lines)


# -- judging a source against the crawl's revisits ---------------------------------------------


def revisit_moves(
    rev_page: IntArray,
    rev_prev: FloatArray,
    rev_at: FloatArray,
    log_page: IntArray,
    log_lastmod: FloatArray,
    first_seen: FloatArray,
    last_seen: FloatArray,
) -> tuple[BoolArray, BoolArray]:
    """For each revisit ``(rev_prev, rev_at]`` of page ``rev_page``, whether one
    source covered it and whether its ``lastmod`` moved inside it.

    ``log_page``, ``log_lastmod``: every distinct ``lastmod`` the source gave
    each page (any order). ``first_seen``, ``last_seen``: per page index, when
    the source first and last listed the page (NaN: never). A revisit is
    covered when the source listed the page at its previous fetch already
    and was read again after it; the move is a ``lastmod`` in the interval.
    Times are unix seconds. Returns ``(covered, moved)``.
    """
    rev_page = np.asarray(rev_page, dtype=np.int64)
    prev = np.asarray(rev_prev, dtype=np.float64)
    at = np.asarray(rev_at, dtype=np.float64)
    first = np.asarray(first_seen, dtype=np.float64)[rev_page]
    last = np.asarray(last_seen, dtype=np.float64)[rev_page]
    with np.errstate(invalid="ignore"):
        covered = (first <= prev) & (last >= at)
    lp = np.asarray(log_page, dtype=np.int64)
    lm = np.asarray(log_lastmod, dtype=np.float64)
    order = np.lexsort((lm, lp))
    lp, lm = lp[order], lm[order]
    # count the page's lastmods in (prev, at]: search (page, time) pairs in the sorted log
    lo = _search(lp, lm, rev_page, prev)
    hi = _search(lp, lm, rev_page, at)
    return covered, covered & (hi > lo)


def _search(lp: IntArray, lm: FloatArray, page: IntArray, t: FloatArray) -> IntArray:
    """Index after the last log entry ``(p, m) <= (page, t)`` of a log sorted by
    ``(p, m)``: a binary search within each page's slice, all queries at once."""
    lo = np.searchsorted(lp, page, side="left")
    hi = np.searchsorted(lp, page, side="right")
    while np.any(go := lo < hi):
        mid = (lo + hi) // 2
        right = go & (lm[np.where(go, mid, 0)] <= t)
        lo = np.where(right, mid + 1, lo)
        hi = np.where(go & ~right, mid, hi)
    return lo


@dataclass(frozen=True)
class SourceTrust:
    """How far one source's ``lastmod`` agreed with a site's revisits.

    ``revisits``: revisits the source covered; ``changed``: of those, found a
    change; ``moved``: ``lastmod`` moved inside; ``both``: found a change and
    ``lastmod`` moved. ``quiet``: its silence may vouch for a page (recall
    ``both / changed`` ≥ :data:`RECALL_TO_TRUST` over ≥ :data:`MIN_CHANGES`
    changes); ``changes``: a move may prove a change (precision
    ``both / moved`` ≥ :data:`PRECISION_TO_TRUST` over ≥ :data:`MIN_MOVES`).
    """

    site: str
    source: str
    revisits: int
    changed: int
    moved: int
    both: int
    quiet: bool
    changes: bool

    @property
    def recall(self) -> float:
        return self.both / self.changed if self.changed else math.nan

    @property
    def precision(self) -> float:
        return self.both / self.moved if self.moved else math.nan

    @property
    def verdict(self) -> str:
        if self.quiet and self.changes:
            return "trusted"
        if self.quiet:
            return "vouches for pages (its moves are not all changes)"
        if self.changes:
            return "proves changes (misses some)"
        if self.changed < MIN_CHANGES and self.moved < MIN_MOVES:
            return "too few revisits to judge"
        return "not trusted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "source": self.source,
            "revisits": self.revisits,
            "changed": self.changed,
            "moved": self.moved,
            "both": self.both,
            "recall": None if math.isnan(self.recall) else round(self.recall, 4),
            "precision": None if math.isnan(self.precision) else round(self.precision, 4),
            "quiet": self.quiet,
            "changes": self.changes,
            "verdict": self.verdict,
        }


def source_trust(
    site: IntArray,
    source: IntArray,
    covered: BoolArray,
    moved: BoolArray,
    changed: BoolArray,
    site_names: list[str],
    source_names: list[str],
    *,
    predicted: FloatArray | None = None,
) -> list[SourceTrust]:
    """Judge each (site, source) pair from its covered revisits.

    One entry per revisit and source: the revisit's ``site`` and ``source``
    codes (indexes into the names), whether the source ``covered`` it, whether
    its ``lastmod`` ``moved`` inside, and whether the fetch found the page
    ``changed``. Pairs without a covered revisit are left out; the result is
    sorted by site and source.

    ``predicted``: the change model's probability of a change for each
    revisit; with it, a move proves a change only if the revisits across a
    move found one at least :data:`MIN_LIFT` more often than predicted for them
    (``lift``), so a source is not trusted for what the model knew anyway.
    """
    c = np.asarray(covered, dtype=bool)
    s = np.asarray(site, dtype=np.int64)[c]
    r = np.asarray(source, dtype=np.int64)[c]
    mv = np.asarray(moved, dtype=bool)[c]
    ch = np.asarray(changed, dtype=bool)[c]
    n_src = max(len(source_names), 1)
    key = s * n_src + r
    keys, inv = np.unique(key, return_inverse=True)
    m = keys.size
    total = np.bincount(inv, minlength=m)
    n_changed = np.bincount(inv, weights=ch, minlength=m).astype(np.int64)
    n_moved = np.bincount(inv, weights=mv, minlength=m).astype(np.int64)
    n_both = np.bincount(inv, weights=ch & mv, minlength=m).astype(np.int64)
    expect_moved: NDArray[np.float64] = np.zeros(m)
    if predicted is not None:
        pr = np.asarray(predicted, dtype=np.float64)[c]
        expect_moved = np.bincount(inv, weights=np.where(mv, pr, 0.0), minlength=m).astype(
            np.float64
        )
    out = []
    for i, k in enumerate(keys.tolist()):
        nc, nm, nb = int(n_changed[i]), int(n_moved[i]), int(n_both[i])
        lift = (nb - float(expect_moved[i])) / nm if nm else 0.0
        out.append(
            SourceTrust(
                site=site_names[k // n_src],
                source=source_names[k % n_src],
                revisits=int(total[i]),
                changed=nc,
                moved=nm,
                both=nb,
                quiet=nc >= MIN_CHANGES and nb >= RECALL_TO_TRUST * nc,
                changes=nm >= MIN_MOVES
                and nb >= PRECISION_TO_TRUST * nm
                and (predicted is None or lift >= MIN_LIFT),
            )
        )
    return out


def signal_state(
    last_fetch: FloatArray,
    lastmod: FloatArray,
    seen_at: FloatArray,
    quiet: BoolArray,
    changes: BoolArray,
    *,
    lastmod_seen: FloatArray | None = None,
    now: float = math.inf,
    lag: FloatArray | float = 0.0,
) -> tuple[FloatArray, BoolArray]:
    """Each page's ``(checked_at, known_stale)`` for the planner from one source.

    Per page: its last successful fetch, the source's latest ``lastmod``, when
    the source was last read (NaN: it does not list the page) and when it
    first gave that ``lastmod`` (``lastmod_seen``; default ``seen_at``), and
    whether the source is trusted to vouch (``quiet``) and to prove
    (``changes``) on the page's site. Combine several sources with ``np.fmax``
    and ``|``.

    - Known stale: a ``lastmod`` after the last fetch, first given after it
      too. A ``lastmod`` the source gave before the fetch is one the fetch got
      (a date alone reads as its last second, a site's clock may run ahead):
      it neither proves a change nor, since it is later than the fetch,
      vouches for the page.
    - Vouched for: a ``lastmod`` not after the last fetch, read at least
      ``lag`` seconds (the source's reporting delay) after it; until
      ``seen_at − lag``, never later than ``now``.

    >>> signal_state(np.array([100.0, 100.0]), np.array([50.0, 150.0]),
    ...              np.array([200.0, 200.0]), np.array([True, True]), np.array([True, True]))
    (array([200.,  nan]), array([False,  True]))
    """
    last = np.asarray(last_fetch, dtype=np.float64)
    lm = np.asarray(lastmod, dtype=np.float64)
    seen = np.asarray(seen_at, dtype=np.float64)
    given = seen if lastmod_seen is None else np.asarray(lastmod_seen, dtype=np.float64)
    until = np.minimum(seen - np.asarray(lag, dtype=np.float64), now)
    with np.errstate(invalid="ignore"):
        after = lm > last
        stale = after & (given > last) & np.asarray(changes, dtype=bool)
        vouch = np.asarray(quiet, dtype=bool) & (lm <= last) & (until > last)
    checked = np.where(vouch, until, np.nan)
    return checked, stale


def ranges(base: IntArray, lens: IntArray) -> IntArray:
    """``concatenate([arange(b, b + n) for b, n in zip(base, lens)])``, vectorised.

    >>> ranges(np.array([5, 0]), np.array([2, 3]))
    array([5, 6, 0, 1, 2])
    """
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(lens) - lens
    out: IntArray = np.repeat(base - before, lens) + np.arange(total, dtype=np.int64)
    return out


def quiet_until(
    rev_page: IntArray,
    rev_prev: FloatArray,
    rev_at: FloatArray,
    log_page: IntArray,
    log_lastmod: FloatArray,
    log_first_seen: FloatArray,
    log_lag: FloatArray,
    log_listed: FloatArray,
) -> FloatArray:
    """Until when sources trusted to vouch say each revisited page was unchanged.

    A fetch made because a trusted source's ``lastmod`` moved always finds a
    change: taken as an ordinary revisit ``(prev, at]`` that found one, it
    makes the page look faster than it is (a revisit chosen by its outcome).
    What the crawl knows is finer: a source that listed the page at ``prev``
    already first gave a ``lastmod`` after ``prev`` at ``S``; before, it
    showed none, so the page was unchanged until ``S`` less the source's
    reporting ``lag``, and, by the source's own word, until that ``lastmod``
    (which also bounds the stretch when the source went unread for a while).
    The fold (:func:`recrawl.fold.fold_batch`) records such a revisit as
    unchanged until that time and changed after it.

    The log rows, of any sources: each distinct ``lastmod`` a source gave a
    page, with when it was first seen, that source's lag (seconds) and when
    it first listed the page (``log_listed``, the same on all the pair's rows). Only sources
    trusted both to vouch and to prove on the page's site belong here: a
    source trusted only to vouch may move at every read, as one stamping
    each ``lastmod`` with the read's time, and its first move after a fetch
    then says nothing of when the page changed.

    Per revisit ``(rev_prev, rev_at]`` of page ``rev_page``, per source that
    listed the page by ``rev_prev`` and gave a ``lastmod`` after it first
    seen in ``(rev_prev, rev_at]``: the earlier of (the first such sighting
    less the lag) and the earliest such ``lastmod``. Of several sources, the
    earliest (any of them bounds the change). Returned where it lies inside
    the revisit, NaN elsewhere (no such source, or the point reaches back
    past the previous fetch). A source that has not moved by the fetch tells
    nothing here: it may have missed the change.

    >>> quiet_until(np.array([0, 0]), np.array([0.0, 76.0]), np.array([100.0, 100.0]),
    ...             np.array([0]), np.array([78.0]), np.array([80.0]), np.array([5.0]),
    ...             np.array([-1.0]))
    array([75., nan])
    """
    page = np.asarray(rev_page, dtype=np.int64)
    prev = np.asarray(rev_prev, dtype=np.float64)
    at = np.asarray(rev_at, dtype=np.float64)
    out = np.full(page.shape, np.nan)
    lp = np.asarray(log_page, dtype=np.int64)
    if not page.size or not lp.size:
        return out
    lm = np.asarray(log_lastmod, dtype=np.float64)
    fs = np.asarray(log_first_seen, dtype=np.float64)
    lag = np.asarray(log_lag, dtype=np.float64)
    listed = np.asarray(log_listed, dtype=np.float64)
    # every (revisit, row of its page) pair
    order = np.argsort(lp, kind="stable")
    lo = np.searchsorted(lp[order], page, side="left")
    count = np.searchsorted(lp[order], page, side="right") - lo
    rev = np.repeat(np.arange(page.size), count)
    row = order[ranges(lo, count)]
    p, a = prev[rev], at[rev]
    with np.errstate(invalid="ignore"):
        ok = (fs[row] > p) & (fs[row] <= a) & (lm[row] > p) & (listed[row] <= p)
    rev, row = rev[ok], row[ok]
    if not rev.size:
        return out
    # per revisit, over its sources' rows: the first sighting less the source's
    # lag, or the earliest lastmod, whichever comes first
    best = np.full(page.size, np.inf)
    np.minimum.at(best, rev, np.minimum(fs[row] - lag[row], lm[row]))
    with np.errstate(invalid="ignore"):
        return np.where((best > prev) & (best < at), best, np.nan)


def reporting_lag(first_seen: FloatArray, lastmod: FloatArray) -> float:
    """A source's reporting lag on a site, seconds, from its ``lastmod`` moves
    there (each move's ``lastmod`` and when the source first gave it): the
    :data:`HINT_LAG_QUANTILE` percentile of (first seen − ``lastmod``), clipped
    at 0; :data:`HINT_LAG_DEFAULT_S` with fewer than :data:`HINT_LAG_MIN_ROWS` moves.

    >>> reporting_lag(np.arange(10.0) + 5.0, np.arange(10.0)), reporting_lag(np.ones(3), np.zeros(3))
    (5.0, 86400.0)
    """
    delay = np.maximum(np.asarray(first_seen, dtype=np.float64) - lastmod, 0.0)
    if delay.size < HINT_LAG_MIN_ROWS:
        return HINT_LAG_DEFAULT_S
    return float(np.percentile(delay, HINT_LAG_QUANTILE))


_COUNTS = ("revisits", "changed", "moved", "both")


@dataclass(frozen=True)
class HintVerdict:
    """The plan's judgement of the hint sources, kept between processes.

    :class:`recrawl.engine.Engine` judges the sources at most once an hour
    (:meth:`~recrawl.engine.Engine.hint_trust` and its ``hint_lags``) and keeps
    the result in the store's ``meta`` table, key ``hint_verdict``, as
    :meth:`to_json`. The next process planning in the same hour reuses it
    instead of replaying the fetch log, and every ingest reads it back
    (:func:`trusted_lags`) to fold a trusted source's silence as evidence
    that a page did not change (:func:`quiet_until`). The stored document::

        {"hour": 491000,        # unix hours (now // 3600) it was judged in
         "hints_version": 7,    # the store's hints_version at the time
         "days": 90.0,          # days of revisits judged
         "trust": [{"site", "source", "revisits", "changed", "moved", "both",
                    "quiet", "changes"}, ...],       # one SourceTrust each
         "lags": [[site, source, seconds], ...]}    # reporting lag per pair

    A document written by hand may leave out ``hour``, ``hints_version``,
    ``days`` and a source's four counts (None, 0, None and 0).
    """

    trust: tuple[SourceTrust, ...]
    lags: Mapping[tuple[str, str], float]
    """Reporting lag of each ``(site, source)`` pair, seconds."""
    hour: int | None = None
    """Unix hours (``now // 3600``) it was judged in."""
    hints_version: int = 0
    """The store's ``hints_version`` when it was judged."""
    days: float | None = None
    """Days of revisits the sources were judged on."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "hour": self.hour,
            "hints_version": self.hints_version,
            "days": self.days,
            "trust": [
                {"site": t.site, "source": t.source, **{c: getattr(t, c) for c in _COUNTS},
                 "quiet": t.quiet, "changes": t.changes}
                for t in self.trust
            ],
            "lags": [[site, src, lag] for (site, src), lag in self.lags.items()],
        }  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HintVerdict:
        """The verdict :meth:`to_dict` gave; :class:`ValueError` (or
        :class:`KeyError`, :class:`TypeError`) when ``d`` is not one."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a hint verdict is a JSON object, not {type(d).__name__}")
        trust = tuple(
            SourceTrust(
                site=str(t["site"]),
                source=str(t["source"]),
                **{c: int(t.get(c, 0)) for c in _COUNTS},
                quiet=bool(t["quiet"]),
                changes=bool(t["changes"]),
            )
            for t in d.get("trust", ())
        )
        lags = {(str(a), str(b)): float(c) for a, b, c in d.get("lags", ())}
        hour = d.get("hour")
        days = d.get("days")
        return cls(
            trust=trust,
            lags=lags,
            hour=None if hour is None else int(hour),
            hints_version=int(d.get("hints_version", 0)),
            days=None if days is None else float(days),
        )

    @classmethod
    def from_json(cls, raw: str) -> HintVerdict:
        """:meth:`from_dict` of a JSON document; :class:`ValueError` when unreadable."""
        return cls.from_dict(json.loads(raw))

    def trusted_lags(self) -> dict[tuple[str, str], float]:
        """The pairs trusted both to vouch and to prove changes, with their lags
        (seconds; :data:`HINT_LAG_DEFAULT_S` for a pair without one)."""
        return {
            (t.site, t.source): self.lags.get((t.site, t.source), HINT_LAG_DEFAULT_S)
            for t in self.trust
            if t.quiet and t.changes
        }


def trusted_lags(
    verdict: HintVerdict | str | Mapping[str, Any] | None,
) -> dict[tuple[str, str], float]:
    """The ``(site, source)`` pairs a kept verdict trusts both to vouch and to prove
    changes, with their reporting lags: those :func:`quiet_until` reads.

    ``verdict``: a :class:`HintVerdict`, its JSON as the store's meta keeps
    it, or that JSON parsed. A pair without a lag gets
    :data:`HINT_LAG_DEFAULT_S`. Anything unreadable is no verdict: ``{}``.

    >>> trusted_lags('{"trust": [{"site": "a", "source": "sitemap", "quiet": true,'
    ...              ' "changes": true}], "lags": [["a", "sitemap", 3600]]}')
    {('a', 'sitemap'): 3600.0}
    """
    if verdict is None:
        return {}
    if isinstance(verdict, HintVerdict):
        return verdict.trusted_lags()
    try:
        v = (
            HintVerdict.from_json(verdict)
            if isinstance(verdict, str)
            else HintVerdict.from_dict(verdict)
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    return v.trusted_lags()
    try:
        v = json.loads(verdict) if isinstance(verdict, str) else verdict
        lags = {(str(a), str(b)): float(c) for a, b, c in v.get("lags", ())}
        return {
            (str(t["site"]), str(t["source"])): lags.get(
                (str(t["site"]), str(t["source"])), HINT_LAG_DEFAULT_S
            )
            for t in v.get("trust", ())
            if t.get("quiet") and t.get("changes")
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
