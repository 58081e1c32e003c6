"""Replay change traces against the planner's policies (SPEC §5 semantics).

Every page is fetched once at its ``start`` (not counted, not charged). Time
advances in cycles (default one hour) from the earliest start; each cycle
earns ``budget × live pages × cycle length`` cost units (``budget`` is per live
page per day; unspent budget carries over up to the cost of one fetch). A
fetch at time ``t`` reveals only whether any change happened since that
page's previous fetch: the policies learn from that and from nothing else.

**Freshness** is the mean over pages, weighted by value, of the fraction of
``[start, end]`` during which the local copy equalled the live page (a copy
fetched at ``t`` stays fresh until the first change after ``t``).

``oracle`` is the hindsight optimum: the Cho & Garcia-Molina allocation solved
with each page's true average rate (changes ÷ watched days, at least 0.5
changes), visited at fixed intervals with a random phase, each visit rounded up
to the next cycle. It is the benchmark's yardstick, not a policy one could run.

``oracle_rates`` (on request, not run by default) is the same allocation with
the same hindsight rates, but blind to how long each page will be watched:
every page-day counts the same, as it does for the policies, which cannot know
when a page will leave the trace. It differs from ``oracle`` only when pages
join or leave mid-trace: the per-page mean weighs a day of a page watched for
20 days as much as 50 days of one watched for 1,000, and ``oracle`` allocates
accordingly. With the events objective the two coincide.

``recrawl_known_rates`` (on request) is ``recrawl`` told each page's hindsight
rate (the oracle's) instead of estimating it from what its fetches reveal:
its reserves, cycles and selection are recrawl's own. What separates it from
``recrawl`` is the cost of estimating the rates; what separates it from
``oracle_rates``, the cost of recrawl's reserves and of turning the
allocation into hourly fetches. It never learns, so ``on_state`` does not
see it.

With ``sitemap_hours``, a simulated sitemap is read that often, free, and
lists each live page with a ``lastmod`` made from the trace's change times up
to the read (``honest``, ``silent``, ``stamped``, ``noisy`` or ``lazy``, see
:data:`SITEMAP_KINDS` and :func:`replay`). Every policy but the oracles judges
it per site from its own revisits with :mod:`recrawl.hints`, as a crawl
would, and hands the planner what the sites that trust it say
(:attr:`~recrawl.planner.PlanPages.checked_at`,
:attr:`~recrawl.planner.PlanPages.known_stale`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from recrawl._exceptions import InvalidTrace
from recrawl.estimate.hints import (
    HINT_LAG_DEFAULT_S,
    SourceTrust,
    quiet_until,
    ranges,
    reporting_lag,
    revisit_moves,
    signal_state,
    source_trust,
)
from recrawl.estimate.rates import fold_revisits
from recrawl.observe.observation import MAX_TIMESTAMP, TOO_LATE
from recrawl.observe.traces import Trace, load_traces
from recrawl.plan.freshness import Objective, optimal_allocation
from recrawl.plan.planner import (
    NUTCH_INITIAL_INTERVAL_S,
    POLICIES,
    Model,
    PlannerConfig,
    PlanPages,
    nutch_next_interval,
    plan_cycle,
    policy_rule,
    reallocate,
)
from recrawl.records.evidence import BIN_COLUMNS, EVIDENCE_COLUMNS

__all__ = [
    "ALL_POLICIES",
    "EXTRA_POLICIES",
    "GENERATED_KINDS",
    "MAX_GENERATED_CHANGES",
    "MAX_GENERATED_PAGES",
    "SITEMAP_KINDS",
    "ProgressHook",
    "StateHook",
    "TracePages",
    "generate_traces",
    "hindsight_rates",
    "load_traces",
    "max_budget",
    "oracle_schedule",
    "replay",
    "run_schedule",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

DAY_S = 86_400.0
ALL_POLICIES: tuple[str, ...] = ("oracle", *(p for p in POLICIES if p != "harmonic"))
"""Policies :func:`replay` runs by default."""

EXTRA_POLICIES: tuple[str, ...] = ("oracle_rates", "recrawl_known_rates", "harmonic")
"""Yardsticks :func:`replay` runs only when asked by name."""

MAX_GENERATED_CHANGES = 20_000_000
"""Most changes :func:`generate_traces` may expect to draw (about 160 MB)."""

MAX_GENERATED_PAGES = 10_000_000
"""Most pages :func:`generate_traces` makes."""

ProgressHook = Callable[[str, int, int], None]
"""``progress(policy, cycles_done, cycles_total)``, called as a replay advances."""

StateHook = Callable[[str, PlanPages], None]
"""``on_state(policy, pages)``, called with the page state a policy ended with."""


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _positive(name: str, x: object) -> float:
    """``x`` as a float, if it is a finite number > 0; else ValueError."""
    if not (_is_real(x) and math.isfinite(float(x)) and float(x) > 0):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a positive number, got {x!r}")
    return float(x)  # type: ignore[arg-type]


def _check_trace(t: Trace) -> None:
    """Refuse a :class:`Trace` built directly that :func:`parse_trace` would refuse."""
    if not isinstance(t, Trace):
        raise TypeError(f"expected Trace objects, got {type(t).__name__}")
    where = f"trace {t.page!r}"
    if not (math.isfinite(t.start) and math.isfinite(t.end)):
        raise InvalidTrace(f"{where}: start and end must be finite, got {t.start} and {t.end}")
    if not t.end > t.start:
        raise InvalidTrace(f"{where}: end ({t.end}) must be after start ({t.start})")
    if t.end > MAX_TIMESTAMP:  # changes lie before the end
        raise InvalidTrace(f"{where}: end {t.end:.0f} {TOO_LATE}")
    c = t.changes
    if c.ndim != 1:
        raise InvalidTrace(f"{where}: changes must be a flat array of unix seconds")
    if c.size and not (np.all(np.diff(c) >= 0) and bool(c[0] > t.start) and bool(c[-1] <= t.end)):
        raise InvalidTrace(f"{where}: changes must be sorted and inside (start, end]")
    if not (math.isfinite(t.value) and t.value >= 0):
        raise InvalidTrace(f"{where}: value must be a finite number ≥ 0, got {t.value}")
    if not (math.isfinite(t.cost) and t.cost > 0):
        raise InvalidTrace(f"{where}: cost must be a finite number > 0, got {t.cost}")


class TracePages:
    """A set of traces as flat arrays, with vectorised change queries."""

    def __init__(self, traces: Sequence[Trace]) -> None:
        if not traces:
            raise ValueError("no traces to replay")
        self.n = len(traces)
        self.start = np.array([t.start for t in traces], dtype=np.float64)
        self.end = np.array([t.end for t in traces], dtype=np.float64)
        self.value = np.array([t.value for t in traces], dtype=np.float64)
        self.cost = np.array([t.cost for t in traces], dtype=np.float64)
        self.n_changes = np.array([t.changes.size for t in traces], dtype=np.int64)
        self.t0 = float(self.start.min())
        self.t1 = float(self.end.max())
        self.span = self.t1 - self.t0 + 2.0
        self.offsets = np.concatenate([[0], np.cumsum(self.n_changes)]).astype(np.int64)
        flat = [t.changes - self.t0 + i * self.span for i, t in enumerate(traces)]
        self.keys = np.concatenate(flat) if self.offsets[-1] else np.zeros(0)
        self.changes = (
            np.concatenate([t.changes for t in traces]).astype(np.float64)
            if self.offsets[-1]
            else np.zeros(0)
        )
        sites: dict[str, int] = {}
        groups: dict[tuple[str, str], int] = {}
        self.site = np.array([sites.setdefault(t.site, len(sites)) for t in traces])
        self.group = np.array(
            [groups.setdefault((t.site, t.page_type), len(groups)) for t in traces]
        )
        self.n_sites = len(sites)
        self.site_names = list(sites)

    def hindsight_rates(self) -> FloatArray:
        """Each page's changes ÷ watched days (at least 0.5 changes), per day."""
        return _hindsight(self.n_changes, self.start, self.end)

    def _pos(self, idx: IntArray, t: FloatArray) -> IntArray:
        q = idx * self.span + (t - self.t0)
        return np.searchsorted(self.keys, q, side="right").astype(np.int64)

    def count_upto(self, idx: IntArray, t: FloatArray) -> IntArray:
        """Number of changes of pages ``idx`` at or before ``t``."""
        return self._pos(idx, t) - self.offsets[idx]

    def next_after(self, idx: IntArray, t: FloatArray) -> FloatArray:
        """Time of the first change of pages ``idx`` after ``t`` (inf if none)."""
        j = self._pos(idx, t)
        ok = j < self.offsets[idx + 1]
        jj = np.minimum(j, max(self.keys.size - 1, 0))
        when = self.keys[jj] - idx * self.span + self.t0 if self.keys.size else np.zeros(idx.size)
        return np.where(ok, when, np.inf)


@dataclass
class _Tally:
    fetches: int = 0
    changes_detected: int = 0
    cost: float = 0.0

    def result(self, freshness: float) -> dict[str, Any]:
        return {
            "freshness": freshness,
            "fetches": self.fetches,
            "changes_detected": self.changes_detected,
            "fetches_without_change": self.fetches - self.changes_detected,
            "cost": self.cost,
            "cost_per_change": (
                self.cost / self.changes_detected if self.changes_detected else None
            ),
        }


SITEMAP_KINDS: tuple[str, ...] = ("honest", "silent", "stamped", "noisy", "lazy")
"""Kinds of simulated sitemap :func:`replay` can read (see its docstring)."""

_SITEMAP_STREAM = 7_919
"""Random stream of a ``noisy`` sitemap's extra moves and a ``lazy`` one's misses,
apart from the policies' streams (``[seed, policy number]``)."""


class _Sitemap:
    """What a sitemap read every ``every_s`` seconds shows of each page: the web's side,
    the same for every policy of a replay.

    Reads are at ``t0 + j × every_s`` (``j ≥ 0``) up to the last end; read ``j``
    lists the pages live then (``first_read[i] ≤ j ≤ last_read[i]``), each with
    a ``lastmod`` that depends on the trace up to the read only. For every kind
    but ``stamped`` it is the page's last *move* at or before the read (its
    start if none): the distinct lastmods a page ever shows, each with the read
    that first shows it, are laid out here (``e_page``, ``e_value``,
    ``e_read``, by page then time; page ``i``'s are ``off[i]:off[i + 1]``);
    :class:`_SitemapView` reveals them read by read. A ``stamped`` sitemap
    gives every page the read's time, so its entries are the reads themselves.
    """

    def __init__(self, p: TracePages, every_s: float, kind: str, rng: np.random.Generator) -> None:
        self.kind = kind
        n_reads = int((p.t1 - p.t0) // every_s) + 1
        self.reads: FloatArray = p.t0 + every_s * np.arange(n_reads, dtype=np.float64)
        self.first_read = np.searchsorted(self.reads, p.start, side="left").astype(np.int64)
        self.last_read = (np.searchsorted(self.reads, p.end, side="right") - 1).astype(np.int64)
        n = p.n
        page = np.repeat(np.arange(n, dtype=np.int64), p.n_changes)
        moves = p.changes
        if kind in ("silent", "stamped"):
            page, moves = page[:0], moves[:0]
        elif kind == "lazy":  # a third of the changes never move it
            kept = rng.random(moves.size) >= 1.0 / 3.0
            page, moves = page[kept], moves[kept]
        elif kind == "noisy":  # two extra moves per change, uniform in (start, end]
            extra = np.repeat(np.arange(n, dtype=np.int64), 2 * p.n_changes)
            when = p.end[extra] - rng.random(extra.size) * (p.end - p.start)[extra]
            page, moves = np.concatenate([page, extra]), np.concatenate([moves, when])
            order = np.lexsort((moves, page))
            page, moves = page[order], moves[order]
        # a move is shown by the first read at or after it, unless the page
        # moves again before that read or has left the sitemap by then
        j = np.searchsorted(self.reads, moves, side="left").astype(np.int64)
        nxt = np.full(moves.size, np.inf)  # the page's next move
        same = page[1:] == page[:-1]
        nxt[:-1][same] = moves[1:][same]
        shown = (j <= self.last_read[page]) & (nxt > self.reads[np.minimum(j, n_reads - 1)])
        # the page's start, at its first listing, unless it moved before that read
        head = np.searchsorted(page, np.arange(n), side="left")
        first_move = np.full(n, np.inf)
        has = head < page.size
        has[has] = page[head[has]] == np.flatnonzero(has)
        first_move[has] = moves[head[has]]
        listed = self.first_read <= self.last_read
        r0 = self.reads[np.minimum(self.first_read, n_reads - 1)]
        init = np.flatnonzero(listed & (first_move > r0) & (kind != "stamped"))
        e_page = np.concatenate([init, page[shown]])
        e_value = np.concatenate([p.start[init], moves[shown]])
        e_read = np.concatenate([self.first_read[init], j[shown]])
        order = np.lexsort((e_value, e_page))
        self.e_page: IntArray = e_page[order]
        self.e_value: FloatArray = e_value[order]
        e_read = e_read[order]
        self.e_read: IntArray = e_read
        # a page's first listing is no move: it does not count towards the lag
        self.e_move: BoolArray = np.r_[
            np.zeros(init.size, dtype=bool), np.ones(int(shown.sum()), dtype=bool)
        ][order]
        self.off = np.searchsorted(self.e_page, np.arange(n + 1), side="left").astype(np.int64)
        self.by_read = np.argsort(e_read, kind="stable").astype(np.int64)
        self.read_off = np.searchsorted(
            e_read[self.by_read], np.arange(n_reads + 1), side="left"
        ).astype(np.int64)


class _SitemapView:
    """What one policy has seen of a :class:`_Sitemap`, and what it makes of it.

    Per page: the distinct lastmods its reads showed so far (a prefix of the
    sitemap's entries, ``count``), the latest (``lastmod``), and when the
    sitemap first and last listed it (NaN: not yet). Once a day,
    :meth:`judge` takes the revisits whose verdict is settled and judges them
    with :func:`recrawl.hints.revisit_moves`, then redoes each site's verdict
    with :func:`recrawl.hints.source_trust` over every revisit judged so far.

    A revisit ``(prev, at]`` is settled once a read at or after ``at`` is
    done: before, the sitemap has not covered it (``last_seen < at``); after,
    no read can add a lastmod inside it (every read's new lastmod lies after
    the previous read). Judging each revisit once, when settled, so gives the
    verdicts a crawl re-judging every revisit so far each day would reach, at
    a fraction of the cost.
    """

    def __init__(self, sm: _Sitemap, p: TracePages) -> None:
        n = p.n
        self.sm = sm
        self.site = p.site
        self.site_names = p.site_names
        self.n_sites = p.n_sites
        self.reads_done = 0
        self.count = np.zeros(n, dtype=np.int64)
        self.lastmod = np.full(n, np.nan)
        self.first_listed = np.full(n, np.nan)
        self.last_listed = np.full(n, np.nan)
        self.pending: list[tuple[IntArray, FloatArray, FloatArray, BoolArray, FloatArray]] = []
        self.site_code = {name: i for i, name in enumerate(p.site_names)}
        # per site code: (moved, changed, predicted) of every covered revisit judged so far
        self.judged: dict[int, tuple[BoolArray, BoolArray, FloatArray]] = {}
        self.verdicts: dict[int, SourceTrust] = {}
        self.site_quiet = np.zeros(p.n_sites, dtype=bool)
        self.site_changes = np.zeros(p.n_sites, dtype=bool)
        self.quiet: BoolArray | None = None  # per page: its site's silence vouches
        self.changes: BoolArray | None = None  # per page: its site's moves prove changes
        self.fetches_known_stale = 0
        self.fetches_vouched = 0
        self.lastmod_seen = np.full(n, np.nan)  # when the latest lastmod was first shown
        self.site_lag = np.full(p.n_sites, HINT_LAG_DEFAULT_S)  # per site, seconds

    def read_until(self, t: float) -> None:
        """Do every read at or before ``t`` not done yet."""
        sm = self.sm
        while self.reads_done < sm.reads.size and sm.reads[self.reads_done] <= t:
            j = self.reads_done
            r = sm.reads[j]
            live = (sm.first_read <= j) & (sm.last_read >= j)
            self.first_listed[live & np.isnan(self.first_listed)] = r
            self.last_listed[live] = r
            if sm.kind == "stamped":
                self.lastmod[live] = r
                self.lastmod_seen[live] = r
            else:
                e = sm.by_read[sm.read_off[j] : sm.read_off[j + 1]]
                shown = sm.e_page[e]
                self.count[shown] += 1
                self.lastmod[shown] = sm.e_value[e]
                self.lastmod_seen[shown] = r
            self.reads_done += 1

    def revisited(
        self,
        idx: IntArray,
        prev: FloatArray,
        at: float,
        changed: BoolArray,
        predicted: FloatArray | None = None,
    ) -> None:
        """Note this cycle's fetches: revisits ``(prev, at]`` of pages ``idx``, with
        the change model's probability of a change in each (None: no model)."""
        pred = np.zeros(idx.size) if predicted is None else np.nan_to_num(predicted)
        self.pending.append((idx, prev, np.full(idx.size, at), changed, pred))

    def _log(self, pages: IntArray) -> tuple[IntArray, FloatArray, FloatArray, BoolArray]:
        """Every distinct lastmod seen so far of ``pages``, as ``(page, lastmod,
        first_seen, move)`` (``move``: not the page's first listing)."""
        sm = self.sm
        if sm.kind == "stamped":
            hi = np.minimum(sm.last_read[pages], self.reads_done - 1)
            lens = np.maximum(hi - sm.first_read[pages] + 1, 0)
            at = ranges(sm.first_read[pages], lens)
            values = sm.reads[at]
            move = np.ones(at.size, dtype=bool)
            move[np.cumsum(lens)[lens > 0] - lens[lens > 0]] = False
            return np.repeat(pages, lens), values, values, move
        lens = self.count[pages]
        at = ranges(sm.off[pages], lens)
        return np.repeat(pages, lens), sm.e_value[at], sm.reads[sm.e_read[at]], sm.e_move[at]

    def judge(self) -> None:
        """Judge the settled revisits, and each site's trust if any was covered."""
        if not self.pending or self.reads_done == 0:
            return
        page, prev, at, changed, pred = (np.concatenate(x) for x in zip(*self.pending, strict=True))
        settled = at <= self.sm.reads[self.reads_done - 1]
        if not settled.any():
            self.pending = [(page, prev, at, changed, pred)]
            return
        wait = ~settled
        self.pending = (
            [(page[wait], prev[wait], at[wait], changed[wait], pred[wait])] if wait.any() else []
        )
        page, prev, at, changed, pred = (
            page[settled], prev[settled], at[settled], changed[settled], pred[settled]
        )  # fmt: skip
        log_page, log_lastmod, _, _ = self._log(np.unique(page))
        covered, moved = revisit_moves(
            page, prev, at, log_page, log_lastmod, self.first_listed, self.last_listed
        )
        if not covered.any():
            return
        # only the sites with a newly covered revisit can change their verdict:
        # judge those again, over every revisit of theirs so far
        site = self.site[page[covered]]
        order = np.argsort(site, kind="stable")
        site, moved = site[order], moved[covered][order]
        changed, pred = changed[covered][order], pred[covered][order]
        sites, first = np.unique(site, return_index=True)
        for s, mv, ch, pr in zip(
            sites.tolist(),
            np.split(moved, first[1:]),
            np.split(changed, first[1:]),
            np.split(pred, first[1:]),
            strict=True,
        ):
            old = self.judged.get(s)
            self.judged[s] = (
                (mv, ch, pr)
                if old is None
                else (np.append(old[0], mv), np.append(old[1], ch), np.append(old[2], pr))
            )
        sizes = [self.judged[s][0].size for s in sites.tolist()]
        codes = np.repeat(sites, sizes)
        for v in source_trust(
            codes,
            np.zeros_like(codes),
            np.ones(codes.size, dtype=bool),
            np.concatenate([self.judged[s][0] for s in sites.tolist()]),
            np.concatenate([self.judged[s][1] for s in sites.tolist()]),
            self.site_names,
            ["sitemap"],
            # a move must tell more than the model knew, as the engine's judgement
            predicted=np.concatenate([self.judged[s][2] for s in sites.tolist()]),
        ):
            s = self.site_code[v.site]
            self.verdicts[s] = v
            self.site_quiet[s], self.site_changes[s] = v.quiet, v.changes
        trusted = bool(self.site_quiet.any() or self.site_changes.any())
        self.quiet = self.site_quiet[self.site] if trusted else None
        self.changes = self.site_changes[self.site] if trusted else None
        if trusted:
            self._judge_lags()

    def _judge_lags(self) -> None:
        """Each trusted site's reporting lag, as :meth:`recrawl.engine.Engine.hint_lags`:
        the percentile of (first seen − lastmod) over the moves shown so far."""
        sites = np.flatnonzero(self.site_quiet | self.site_changes)
        pages = np.flatnonzero(np.isin(self.site, sites))
        page, lastmod, seen, move = self._log(pages)
        site = self.site[page[move]]
        for s in sites.tolist():
            mine = site == s
            self.site_lag[s] = reporting_lag(seen[move][mine], lastmod[move][mine])

    @property
    def trust(self) -> list[SourceTrust]:
        """Each judged site's latest verdict, by site."""
        return [self.verdicts[s] for s in sorted(self.verdicts)]

    def signal(self, last_fetch: FloatArray, now: float) -> tuple[FloatArray, BoolArray] | None:
        """Each page's ``(checked_at, known_stale)``; None while no site trusts the sitemap."""
        if self.quiet is None or self.changes is None:
            return None
        return signal_state(
            last_fetch, self.lastmod, self.last_listed, self.quiet, self.changes,
            lastmod_seen=self.lastmod_seen, now=now, lag=self.site_lag[self.site],
        )  # fmt: skip

    def notified(self) -> BoolArray | None:
        """The pages the sitemap lists on sites that trust it both ways (under
        complete observation, :attr:`~recrawl.planner.PlanPages.notified`);
        None while no site trusts it."""
        if self.quiet is None or self.changes is None:
            return None
        both: BoolArray = self.quiet & self.changes & ~np.isnan(self.last_listed)
        return both

    def quiet_until(self, idx: IntArray, prev: FloatArray, at: FloatArray) -> FloatArray | None:
        """:func:`recrawl.hints.quiet_until` for revisits of pages ``idx``, from what
        the sitemap showed so far on sites that trust it both ways (as the store's fold)."""
        if self.quiet is None or self.changes is None:
            return None
        both = self.quiet[idx] & self.changes[idx]
        if not both.any():
            return None
        page, lastmod, seen, _ = self._log(np.unique(idx[both]))
        return quiet_until(
            idx, prev, at, page, lastmod, seen, self.site_lag[self.site[page]],
            self.first_listed[page],
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The final verdicts: pooled over sites, and per site when there are ten or fewer."""
        tr = self.trust
        changed = sum(v.changed for v in tr)
        moved = sum(v.moved for v in tr)
        both = sum(v.both for v in tr)
        n = self.site.size
        out: dict[str, Any] = {
            "sites": self.n_sites,
            "sites_judged": len(tr),
            "revisits": sum(v.revisits for v in tr),
            "changed": changed,
            "moved": moved,
            "both": both,
            "recall": round(both / changed, 4) if changed else None,
            "precision": round(both / moved, 4) if moved else None,
            "quiet_sites": sum(v.quiet for v in tr),
            "changes_sites": sum(v.changes for v in tr),
            "quiet_page_share": (
                round(float(self.quiet.sum()) / n, 4) if self.quiet is not None else 0.0
            ),
            "changes_page_share": (
                round(float(self.changes.sum()) / n, 4) if self.changes is not None else 0.0
            ),
            "fetches_known_stale": self.fetches_known_stale,
            "fetches_vouched": self.fetches_vouched,
        }
        if self.n_sites <= 10:
            out["per_site"] = [v.to_dict() for v in tr]
        return out


def hindsight_rates(traces: Sequence[Trace]) -> FloatArray:
    """Each trace's average change rate, as ``oracle`` sees it, changes per day.

    Changes ÷ watched days, counting at least half a change so a page that
    never changed in the trace still gets a rate: the rates the hindsight
    optimum is solved with, e.g. for
    :func:`recrawl.freshness.budget_for_freshness`.

    >>> t = load_traces(['{"page": "a", "start": 0, "end": 864000, "changes": [86400]}'])
    >>> hindsight_rates(t).tolist()
    [0.1]
    """
    return _hindsight(
        np.array([t.changes.size for t in traces], dtype=np.float64),
        np.array([t.start for t in traces], dtype=np.float64),
        np.array([t.end for t in traces], dtype=np.float64),
    )


def _hindsight(n_changes: NDArray[Any], start: FloatArray, end: FloatArray) -> FloatArray:
    rates: FloatArray = np.maximum(n_changes, 0.5) / ((end - start) / DAY_S)
    return rates


def _final_freshness(p: TracePages, last: FloatArray, fresh: FloatArray) -> float:
    idx = np.arange(p.n, dtype=np.int64)
    fresh = fresh + np.minimum(p.next_after(idx, last), p.end) - last
    frac = fresh / (p.end - p.start)
    return float(np.dot(p.value, frac) / p.value.sum()) if p.value.sum() > 0 else 0.0


def oracle_schedule(
    p: TracePages,
    budget: float,
    cycle_s: float,
    objective: Objective,
    rng: np.random.Generator,
    *,
    lifetimes: bool = True,
) -> list[FloatArray]:
    """Each page's fetch times (unix seconds, sorted, in ``(start, end]``) under
    the optimal allocation on hindsight rates: every ``1 / f`` days from a
    random phase, each put off to the end of its cycle. ``budget``: billing
    units per page per day; ``cycle_s``: cycle length, seconds. The oracle of
    :func:`replay`, public for the benchmarks that re-time it
    (``benchmarks/timing_bound.py``); :func:`run_schedule` replays it."""
    days = (p.end - p.start) / DAY_S
    lam = p.hindsight_rates()
    mean_days = float(days.mean())
    # Σ c f D = budget Σ D  ⇔  Σ (c D / D̄) f = budget · n
    if objective == "events":
        weight = p.value * days
    elif lifetimes:
        weight = p.value  # each page's mean freshness counts once, however long it is watched
    else:
        weight = p.value * days / mean_days  # every page-day counts the same
    alloc = optimal_allocation(
        lam, budget * p.n, weight=weight, cost=p.cost * days / mean_days, objective=objective
    )
    out = []
    for i in range(p.n):
        f = alloc.visits_per_day[i]
        if f <= 0:
            out.append(np.zeros(0))
            continue
        step = DAY_S / f
        due = (
            p.start[i]
            + rng.uniform(0.0, step)
            + step * np.arange(int((p.end[i] - p.start[i]) / step) + 2)
        )
        when = p.t0 + np.ceil((due - p.t0) / cycle_s) * cycle_s
        out.append(np.unique(when[(when <= p.end[i]) & (when > p.start[i])]))
    return out


def run_schedule(p: TracePages, schedule: list[FloatArray]) -> dict[str, Any]:
    """Replay result of fetching each page at fixed times (``schedule[i]``,
    sorted, in ``(start, end]``), whatever the fetches find."""
    tally = _Tally()
    fresh = np.zeros(p.n)
    last = p.start.copy()
    for i, when in enumerate(schedule):
        if when.size == 0:
            continue
        prev = np.concatenate([[p.start[i]], when[:-1]])
        ii = np.full(when.size, i, dtype=np.int64)
        changed = p.count_upto(ii, when) > p.count_upto(ii, prev)
        fresh[i] = float(np.sum(np.minimum(p.next_after(ii, prev), when) - prev))
        last[i] = when[-1]
        tally.fetches += int(when.size)
        tally.changes_detected += int(changed.sum())
        tally.cost += float(p.cost[i] * when.size)
    return tally.result(_final_freshness(p, last, fresh))


def _run_policy(
    p: TracePages,
    policy: str,
    budget: float,
    cycle_s: float,
    objective: Objective,
    rng: np.random.Generator,
    config: PlannerConfig,
    reallocate_s: float,
    progress: ProgressHook | None,
    on_state: StateHook | None = None,
    sitemap: _Sitemap | None = None,
) -> dict[str, Any]:
    n = p.n
    # each page's length bins and change-point test, folded with its evidence
    width = EVIDENCE_COLUMNS if config.change_points else BIN_COLUMNS
    evidence = np.zeros((n, width), dtype=np.float32)
    state = PlanPages(
        value=p.value.copy(),
        cost=p.cost.copy(),
        site=p.site.copy(),
        host=p.site.copy(),
        group=p.group.copy(),
        last_fetch=p.start.copy(),
        first_seen=p.start.copy(),
        never_fetched=np.zeros(n, dtype=bool),
        ev_nc=np.zeros(n),
        ev_tc=np.zeros(n),
        ev_nu=np.zeros(n),
        ev_tu=np.zeros(n),
        nutch_interval=np.full(n, NUTCH_INITIAL_INTERVAL_S),
        site_cost_multiplier=np.ones(p.n_sites),
        site_paused=np.zeros(p.n_sites, dtype=bool),
        active=np.zeros(n, dtype=bool),
        ev_bins=evidence[:, :BIN_COLUMNS],  # a view: the fold below updates it
    )
    fresh = np.zeros(n)
    tally = _Tally()
    n_cycles = math.ceil((p.t1 - p.t0) / cycle_s)
    by_start = np.argsort(p.start, kind="stable")
    by_end = np.argsort(p.end, kind="stable")
    started = ended = 0
    bank = 0.0
    model: Model | None = None
    model_t = -math.inf
    name = policy
    known_rates = p.hindsight_rates() if policy == "recrawl_known_rates" else None
    if known_rates is not None:
        policy = "recrawl"  # the planner's policy; ``name`` is the one reported
    needs_model = policy_rule(policy).estimates
    pool_share = config.score_pool_share(policy)
    every = max(1, n_cycles // 200)
    n_live = 0
    view = _SitemapView(sitemap, p) if sitemap is not None else None
    next_judge = p.t0 + DAY_S
    for k in range(1, n_cycles + 1):
        t = p.t0 + k * cycle_s
        changed_set = False
        while started < n and p.start[by_start[started]] <= t:
            state.active[by_start[started]] = True
            started += 1
            n_live += 1
            changed_set = True
        while ended < n and p.end[by_end[ended]] < t:
            state.active[by_end[ended]] = False
            ended += 1
            n_live -= 1
            changed_set = True
        if view is not None:
            view.read_until(t)
            if t >= next_judge:
                view.judge()
                state.notified = view.notified()
                next_judge += DAY_S * math.floor((t - next_judge) / DAY_S + 1.0)
        if progress is not None and (k % every == 0 or k == n_cycles):
            progress(name, k, n_cycles)
        if n_live == 0:
            continue
        live_cost = state.cost[state.active]
        bank = min(bank, float(live_cost.max())) + budget * n_live * cycle_s / DAY_S
        if bank * (1 + 1e-9) + 1e-12 < float(live_cost.min()):
            continue
        if needs_model and (model is None or changed_set or t - model_t >= reallocate_s):
            model = reallocate(
                state,
                budget * n_live * pool_share,
                t,
                policy=policy,
                objective=objective,
                config=config,
                rates=known_rates,
            )
            model_t = t
        if view is not None:
            signal = view.signal(state.last_fetch, t)
            state.checked_at, state.known_stale = signal if signal is not None else (None, None)
        plan = plan_cycle(
            state, bank, t, policy=policy, objective=objective, config=config, rng=rng, model=model
        )
        if len(plan) == 0:
            continue
        bank -= plan.spent
        idx = plan.index
        prev = state.last_fetch[idx]
        now = np.full(idx.size, t)
        changed = p.count_upto(idx, now) > p.count_upto(idx, prev)
        fresh[idx] += np.minimum(p.next_after(idx, prev), now) - prev
        if view is not None:
            pred = None
            if model is not None:  # what the model the plan used expected of each revisit
                pred = -np.expm1(-model.rate_per_day[idx] * (now - prev) / DAY_S)
            view.revisited(idx, prev, t, changed, pred)
            if state.known_stale is not None and state.checked_at is not None:
                view.fetches_known_stale += int(state.known_stale[idx].sum())
                view.fetches_vouched += int(np.count_nonzero(state.checked_at[idx] > prev))
        fold_revisits(
            state.ev_nc, state.ev_tc, state.ev_nu, state.ev_tu, idx, prev, now, changed,
            quiet_until=view.quiet_until(idx, prev, now) if view is not None else None,
            half_life_days=config.half_life_days, bins=evidence,
        )  # fmt: skip
        state.nutch_interval[idx] = nutch_next_interval(state.nutch_interval[idx], changed)
        state.last_fetch[idx] = t
        tally.fetches += int(idx.size)
        tally.changes_detected += int(changed.sum())
        tally.cost += plan.spent
    if on_state is not None and known_rates is None:
        on_state(policy, state)
    res = tally.result(_final_freshness(p, state.last_fetch, fresh))
    if view is not None:
        res["sitemap_trust"] = view.summary()
    return res


def max_budget(traces: Sequence[Trace], cycle_hours: float = 1.0) -> float:
    """The largest useful replay budget, per page per day: one fetch of every
    page each cycle at the dearest page's cost (more buys nothing)."""
    return 24.0 / cycle_hours * max(t.cost for t in traces)


def replay(
    traces: Sequence[Trace] | str | Iterable[str],
    budget: float,
    *,
    policies: Sequence[str] | None = None,
    cycle_hours: float = 1.0,
    objective: Objective = "freshness",
    seed: int = 0,
    progress: ProgressHook | None = None,
    config: PlannerConfig | None = None,
    reallocate_hours: float = 24.0,
    on_state: StateHook | None = None,
    sitemap_hours: float | None = None,
    sitemap_kind: str | None = None,
) -> dict[str, Any]:
    """Replay change traces under each policy and measure what they achieve.

    Parameters
    ----------
    traces : sequence of Trace, path, or lines of JSON
        The pages' change histories (see :mod:`recrawl.traces`).
    budget : float
        Cost units per live page per day (with unit costs: fetches per page
        per day).
    policies : sequence of str, optional
        Any of ``oracle``, ``recrawl``, ``greedy``, ``uniform``,
        ``proportional``, ``nutch`` (all by default), and ``oracle_rates``
        and ``recrawl_known_rates`` (see the module's docstring).
    cycle_hours : float
        Length of a planning cycle, hours.
    objective : {"freshness", "events"}
        What the policies maximise (freshness is measured either way).
    seed : int
        Seed of the verification sample and the oracle's phases (≥ 0). Every
        policy draws from the same stream, so its result does not depend on
        which other policies are replayed with it.
    progress : callable, optional
        ``progress(policy, cycles_done, cycles_total)``, called about 200 times
        per policy.
    config : PlannerConfig, optional
        Planner settings (reserve shares, half-life); ``cycle_hours`` wins over
        ``config.cycle_hours``.
    reallocate_hours : float
        How often the model-driven policies re-estimate and re-allocate, hours
        (also whenever pages start or end); a finite number > 0.
    on_state : callable, optional
        ``on_state(policy, pages)``, called when each policy but the
        yardsticks ends, with the :class:`~recrawl.planner.PlanPages` it
        ended with (in trace order): what it learned, e.g. for
        :func:`~recrawl.estimate.rate_resolution`.
    sitemap_hours : float, optional
        Read a simulated sitemap every this many hours, from the traces'
        first start (see below); none if omitted.
    sitemap_kind : {"honest", "silent", "stamped", "noisy", "lazy"}, optional
        What the sitemap's ``lastmod`` says (see below); ``honest`` if
        omitted. Only with ``sitemap_hours``.

    Returns
    -------
    dict
        ``{"pages", "days", "budget", "policies": {name: {"freshness",
        "fetches", "changes_detected", "fetches_without_change", "cost",
        "cost_per_change"}}}``; ``cost_per_change`` is None when nothing
        changed. With a sitemap, also ``"sitemap": {"hours", "kind"}`` and,
        per policy but the oracles, ``"sitemap_trust"``: its final verdict
        (covered ``revisits``, ``changed``, ``moved``, ``both``, pooled
        ``recall`` and ``precision``; ``quiet_sites`` and ``changes_sites``
        trusted to vouch and to prove, of ``sites``, and the share of pages
        on them; ``fetches_known_stale`` made on a trusted move and
        ``fetches_vouched`` of pages a trusted silence vouched for; and
        ``per_site``, :meth:`recrawl.hints.SourceTrust.to_dict` of each, for
        ten sites or fewer).

    Raises
    ------
    ValueError
        On an argument out of range, or a trace that breaks the rules of
        :mod:`recrawl.traces` (:class:`recrawl.InvalidTrace`, naming the
        page, or the line when read from JSON).

    Notes
    -----
    Each read of the simulated sitemap lists every live page with a
    ``lastmod`` made from the trace's own change times up to the read, never
    later ones:

    ``honest``
        the page's last change at or before the read (its start if none);
    ``silent``
        the page's start: it never moves;
    ``stamped``
        the read's time, for every page;
    ``noisy``
        moves for every change and also for edits the crawl does not hash:
        twice as many extra moves as the page has changes, at random times
        (seeded by ``seed``);
    ``lazy``
        a third of the changes, drawn at random, never move it.

    Reads are free: they are not fetches, and cost nothing of the budget.
    Every policy but the oracles judges the sitemap from its own revisits as
    a crawl would (:mod:`recrawl.hints`): it keeps, per page, the distinct
    lastmods it has seen and when the page was first and last listed; once a
    simulated day it judges each site's sitemap with
    :func:`~recrawl.hints.revisit_moves` and
    :func:`~recrawl.hints.source_trust` over its revisits so far; each cycle,
    :func:`~recrawl.hints.signal_state` of what the reads so far showed, for
    the sites that trust it, becomes the planner's
    :attr:`~recrawl.planner.PlanPages.checked_at` and
    :attr:`~recrawl.planner.PlanPages.known_stale`. The sitemap starts
    untrusted on every site; until a site trusts it, plans are those without
    one. ``oracle`` and ``oracle_rates`` replay without it, as the same
    yardsticks.

    Examples
    --------
    >>> lines = [
    ...     '{"page": "a", "start": 0, "end": 864000, "changes": [86400, 432000]}',
    ...     '{"page": "b", "start": 0, "end": 864000, "changes": []}',
    ... ]
    >>> r = replay(lines, 0.5, policies=["uniform"])
    >>> r["pages"], r["days"], r["policies"]["uniform"]["fetches"]
    (2, 10.0, 10)
    """
    budget = _positive("budget", budget)
    cycle_hours = _positive("cycle_hours", cycle_hours)
    reallocate_hours = _positive("reallocate_hours", reallocate_hours)
    if objective not in ("freshness", "events"):
        raise ValueError(f"objective must be 'freshness' or 'events', got {objective!r}")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")
    if sitemap_hours is not None:
        sitemap_hours = _positive("sitemap_hours", sitemap_hours)
    elif sitemap_kind is not None:
        raise ValueError("sitemap_kind needs sitemap_hours: how often the sitemap is read")
    if sitemap_kind is None:
        sitemap_kind = "honest"
    elif sitemap_kind not in SITEMAP_KINDS:
        raise ValueError(
            f"unknown sitemap_kind {sitemap_kind!r}; choose from {', '.join(SITEMAP_KINDS)}"
        )
    if isinstance(policies, str):
        raise ValueError(f"policies must be a sequence of names, not the string {policies!r}")
    if config is not None and not isinstance(config, PlannerConfig):
        raise ValueError(f"config must be a PlannerConfig, got {type(config).__name__}")
    for hook_name, hook in (("progress", progress), ("on_state", on_state)):
        if hook is not None and not callable(hook):
            raise ValueError(f"{hook_name} must be callable, got {hook!r}")
    built = (
        isinstance(traces, Sequence)
        and not isinstance(traces, str)
        and len(traces) > 0
        and isinstance(traces[0], Trace)
    )
    # what load_traces returns is checked already; Trace objects built by hand are not
    trace_list: list[Trace] = list(traces) if built else load_traces(traces)  # type: ignore[arg-type]
    if not trace_list:
        raise ValueError("no traces to replay")
    if built:
        for t in trace_list:
            _check_trace(t)
    ceiling = max_budget(trace_list, cycle_hours)
    if budget > ceiling:
        raise ValueError(
            f"budget {budget:g} is more than fetching every page every cycle costs "
            f"({ceiling:g} per page per day)"
        )
    names = list(ALL_POLICIES if policies is None else policies)
    known = (*ALL_POLICIES, *EXTRA_POLICIES)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")
    cfg = config or PlannerConfig()
    if cfg.cycle_hours != cycle_hours:
        cfg = dataclasses.replace(cfg, cycle_hours=cycle_hours)
    p = TracePages(trace_list)
    cycle_s = cycle_hours * 3600.0
    out: dict[str, Any] = {
        "pages": p.n,
        "days": (p.t1 - p.t0) / DAY_S,
        "budget": budget,
        "policies": {},
    }
    sitemap = None
    if sitemap_hours is not None:
        out["sitemap"] = {"hours": sitemap_hours, "kind": sitemap_kind}
        sitemap_rng = np.random.default_rng([seed, _SITEMAP_STREAM])
        sitemap = _Sitemap(p, sitemap_hours * 3600.0, sitemap_kind, sitemap_rng)
    for name in names:
        # every policy draws from the same stream, whatever is replayed beside it: a
        # policy's figure does not depend on the others listed, and the policies are
        # compared on common random numbers
        rng = np.random.default_rng([seed, 0])
        if name in ("oracle", "oracle_rates"):
            schedule = oracle_schedule(
                p, budget, cycle_s, objective, rng, lifetimes=name == "oracle"
            )
            res = run_schedule(p, schedule)
            if progress is not None:
                progress(name, 1, 1)
        else:
            res = _run_policy(
                p,
                name,
                budget,
                cycle_s,
                objective,
                rng,
                cfg,
                reallocate_hours * 3600.0,
                progress,
                on_state,
                sitemap,
            )
        out["policies"][name] = res
    return out


GENERATED_KINDS: tuple[str, ...] = ("poisson", "bursts", "business_hours", "rate_jump")


def generate_traces(
    kind: str = "poisson",
    *,
    pages: int = 300,
    days: float = 365.0,
    seed: int = 0,
    min_rate: float = 1 / 365,
    max_rate: float = 1.0,
    start: float = 1_700_000_000.0,
    sites: int = 10,
    rates: ArrayLike | None = None,
) -> list[Trace]:
    """Synthetic change traces with known rates, Poisson or not.

    Average rates are log-uniform in ``[min_rate, max_rate]`` changes per day,
    or drawn (with replacement) from ``rates``.

    ``poisson``
        changes at that rate.
    ``bursts``
        bursts arrive as a Poisson process at ``rate / 4``; a burst holds a
        geometric number of changes (mean 4), spaced about an hour apart.
    ``business_hours``
        changes only Monday to Friday, 09:00 to 17:00 UTC, at the rate that
        gives the stated daily average.
    ``rate_jump``
        the rate jumps ten-fold at mid-trace, up for half the pages and down
        for the other half (the stated rate is the average over the trace).

    Parameters
    ----------
    kind : str
        One of :data:`GENERATED_KINDS`.
    pages : int
        Number of pages (≥ 1, at most :data:`MAX_GENERATED_PAGES`).
    days : float
        Length of every trace, days (> 0; the traces must end by the year
        2200).
    seed : int
        Random seed.
    min_rate, max_rate : float
        Range of average rates, changes per day (``0 < min_rate <= max_rate``).
    start : float
        Start of every trace, unix seconds.
    sites : int
        Number of sites, ≥ 1 (pages are spread evenly; two page types per site).
    rates : array_like, optional
        Rates to draw each page's average rate from, changes per day (for
        instance :func:`hindsight_rates` of real traces); replaces
        ``min_rate`` and ``max_rate``.

    Returns
    -------
    list of Trace

    Raises
    ------
    ValueError
        On an argument out of range, or when the traces would hold more than
        :data:`MAX_GENERATED_CHANGES` changes on average.
    """
    if kind not in GENERATED_KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(GENERATED_KINDS)}")
    if not (_is_int(pages) and 1 <= pages <= MAX_GENERATED_PAGES):
        raise ValueError(
            f"pages must be an integer from 1 to {MAX_GENERATED_PAGES:,}, got {pages!r}"
        )
    if not (_is_int(sites) and sites >= 1):
        raise ValueError(f"sites must be an integer ≥ 1, got {sites!r}")
    days = _positive("days", days)
    if not (_is_real(start) and math.isfinite(start)):
        raise ValueError(f"start must be a finite number of unix seconds, got {start!r}")
    end = start + days * DAY_S
    if not (end <= MAX_TIMESTAMP and days <= MAX_TIMESTAMP / DAY_S):
        raise ValueError(
            f"the traces would end at unix {end:.0f}, after the year 2200: "
            "give fewer days or an earlier start"
        )
    if rates is None:
        min_rate = _positive("min_rate", min_rate)
        max_rate = _positive("max_rate", max_rate)
        if min_rate > max_rate:
            raise ValueError(f"min_rate ({min_rate:g}) must be at most max_rate ({max_rate:g})")
        ratio = math.log(max_rate / min_rate)
        mean_rate = (max_rate - min_rate) / ratio if ratio > 0 else min_rate  # log-uniform
    else:
        pool = np.asarray(rates, dtype=np.float64).ravel()
        if pool.size == 0 or not np.all(np.isfinite(pool) & (pool >= 0)):
            raise ValueError("rates must be a non-empty array of finite rates ≥ 0")
        mean_rate = float(pool.mean())
    expected = mean_rate * days * pages
    if not expected <= MAX_GENERATED_CHANGES:
        raise ValueError(
            f"{pages:,} pages over {days:g} days at {mean_rate:.3g} changes per day on average "
            f"would make about {expected:,.0f} changes, more than {MAX_GENERATED_CHANGES:,}: "
            "ask for fewer pages, fewer days or lower rates"
        )
    rng = np.random.default_rng(seed)
    if rates is None:
        lams = np.exp(rng.uniform(math.log(min_rate), math.log(max_rate), pages))
    else:
        lams = rng.choice(pool, pages)
    out: list[Trace] = []
    for i, lam in enumerate(lams):
        if kind == "poisson":
            ch = _poisson(rng, lam, days) * DAY_S + start
        elif kind == "bursts":
            heads = _poisson(rng, lam / 4.0, days) * DAY_S + start
            parts = []
            for h in heads:
                k = int(rng.geometric(0.25))
                parts.append(h + np.cumsum(np.r_[0.0, rng.exponential(3600.0, k - 1)]))
            ch = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
        elif kind == "business_hours":
            # 40 business hours a week; generate on business time, map to wall clock
            bh_per_day = 40.0 / 7.0
            bt = _poisson(rng, lam * 24.0 / bh_per_day, days * bh_per_day / 24.0) * 24.0
            ch = _business_to_wall(bt, start)
        else:
            up = i % 2 == 0
            lo_rate, hi_rate = lam * 2.0 / 11.0, lam * 20.0 / 11.0
            first, second = (lo_rate, hi_rate) if up else (hi_rate, lo_rate)
            half = days / 2.0
            a = _poisson(rng, first, half)
            b = _poisson(rng, second, half) + half
            ch = np.concatenate([a, b]) * DAY_S + start
        ch = ch[(ch > start) & (ch <= end)]
        site = i % sites
        out.append(
            Trace(
                page=f"gen-{kind}/{i}",
                site=f"site{site}",
                page_type=f"type{(i // sites) % 2}",
                start=start,
                end=end,
                changes=np.sort(ch),
            )
        )
    return out


def _poisson(rng: np.random.Generator, rate: float, days: float) -> FloatArray:
    """Sorted event times (days) of a Poisson process on ``[0, days)``."""
    k = int(rng.poisson(rate * days))
    return np.sort(rng.uniform(0.0, days, k))


def _business_to_wall(bt_hours: FloatArray, start: float) -> FloatArray:
    """Map business hours elapsed since ``start`` to unix seconds (Mon–Fri 09–17 UTC)."""
    if bt_hours.size == 0:
        return bt_hours
    base = math.floor(start / 3600.0) * 3600.0
    n_hours = int(bt_hours.max() / 40.0 * 168.0) + 24 * 8
    wall = base + 3600.0 * np.arange(n_hours)
    dt = wall.astype("datetime64[s]")
    hour = (dt.astype("datetime64[h]") - dt.astype("datetime64[D]")).astype(int)
    weekday = (dt.astype("datetime64[D]").astype(int) + 3) % 7  # 0 = Monday
    open_hours = np.flatnonzero((weekday < 5) & (hour >= 9) & (hour < 17))
    whole = np.floor(bt_hours).astype(np.int64)
    return base + (open_hours[whole] + (bt_hours - whole)) * 3600.0
