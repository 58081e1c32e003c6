"""An in-memory store: the :class:`~recrawl.store.Store` protocol in plain Python.

:class:`MemoryStore` keeps pages, the observation log, checkpoints, hints,
canaries and buckets in dictionaries, with no SQL. It exists to test against
(a store that starts empty in microseconds and that a test can read directly)
and to prove the protocol is the whole contract: the ingest pipeline
(:func:`recrawl.engine.pipeline.store_batch`) and the prune run on it unchanged,
and ``tests/store/test_store_contract.py`` runs the same cases on it, SQLite
and PostgreSQL. A write transaction works on the live state after a copy of
it, put back if the block raises. Not for production: nothing is persisted,
and every transaction copies the whole state.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from recrawl.observe.batch import CANARY_CODES, ObservationColumns
from recrawl.observe.observation import Observation, host_of
from recrawl.observe.sitemaps import Hint
from recrawl.records.buckets import (
    BUCKET_SECONDS,
    LATENCY_BINS,
    LATENCY_EDGES_MS,
    OUTCOMES,
    BucketArrays,
)
from recrawl.records.pages import (
    MUTABLE_FIELDS,
    PageArrays,
    PageState,
    new_page_row,
    page_from_row,
    page_row,
)
from recrawl.store import GroupTotals, HintResult

__all__ = ["MemoryStore"]

_DAY: Final = 86_400
_K: Final = len(OUTCOMES)
# one bucket: n, outcomes, bytes sent, received, credits, rendered, canary ok,
# canary mismatch, latency histogram, fetches failed before their page's first success
_N, _O, _BS, _BR, _CR, _RE, _COK, _CMM = 0, 1, 1 + _K, 2 + _K, 3 + _K, 4 + _K, 5 + _K, 6 + _K
_H: Final = 7 + _K
_FF: Final = _H + LATENCY_BINS
_WIDTH: Final = _FF + 1

BucketKey = tuple[str, str, str, int]  # site, page type, route, start


@dataclass
class _State:
    keys: set[int] = field(default_factory=set)
    pages: dict[int, PageState] = field(default_factory=dict)
    moved_to: dict[int, str] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    top_id: int = 0
    seq: int = 0
    # seq -> [key, page, fetched_at, outcome, fixed, rest]
    log: dict[int, list[Any]] = field(default_factory=dict)
    checkpoints: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    leases: dict[str, str] = field(default_factory=dict)  # lease id -> url
    # (page, source) -> [lastmod, first_seen, last_seen, lastmod_seen]
    hints: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    # (page, source, lastmod) -> first seen
    hint_log: dict[tuple[int, str, float], float] = field(default_factory=dict)
    canaries: dict[str, dict[str, str]] = field(default_factory=dict)
    buckets: dict[BucketKey, NDArray[np.float64]] = field(default_factory=dict)
    daily: dict[BucketKey, NDArray[np.float64]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class MemoryStore:
    """The :class:`~recrawl.store.Store` protocol in memory (see the module)."""

    path = ":memory:"

    def __init__(self, *, half_life_days: float | None = None) -> None:
        self.half_life_days = half_life_days
        self._st = _State()
        self._lock = threading.RLock()

    # -- writing -----------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[MemoryWrite]:
        """One transaction: the state is put back as it was if the block raises."""
        with self._lock:
            saved = copy.deepcopy(self._st)
            try:
                yield MemoryWrite(self, self._st)
            except BaseException:
                self._st = saved
                raise

    def log_counts_before(self, before: float) -> list[tuple[int, int]]:
        counts: dict[int, int] = {}
        for _, page, t, *_ in self._st.log.values():
            if t < before:
                counts[page] = counts.get(page, 0) + 1
        return sorted(counts.items())

    def add_urls(self, rows: Iterable[tuple[str, str, str, float]], now: float) -> int:
        new = {r[0]: r for r in rows}
        with self.writing():
            st = self._st
            for u in [u for u in new if u in st.ids]:
                pid = st.ids[u]
                del new[u]
                page = st.pages[pid]
                if page.gone or pid in st.moved_to:  # wanted again: revived, history kept
                    page.gone = False
                    page.fails = 0
                    st.moved_to.pop(pid, None)
            for u, site, ptype, value in new.values():
                st.top_id += 1
                st.ids[u] = st.top_id
                st.pages[st.top_id] = PageState(u, site, ptype, value=value, first_seen=now)
        return len(new)

    def ingest_hints(
        self,
        hints: Iterable[Hint],
        *,
        add_urls: bool = False,
        batch_size: int = 50_000,
        on_batch: Callable[[HintResult], None] | None = None,
    ) -> HintResult:
        res = HintResult()
        batch = list(hints)
        with self.writing():
            st = self._st
            if add_urls:
                first: dict[str, float] = {}
                for h in batch:
                    if h.url not in st.ids and h.seen_at < first.get(h.url, math.inf):
                        first[h.url] = h.seen_at
                for u, t in first.items():
                    st.top_id += 1
                    st.ids[u] = st.top_id
                    st.pages[st.top_id] = PageState(u, host_of(u), "page", first_seen=t)
                res.added_urls = len(first)
            # each (page, source): [lastmod, first_seen, last_seen, 0 as read | 1 changed | 2 new, lastmod_seen]
            state: dict[tuple[int, str], list[float]] = {
                k: [v[0], v[1], v[2], 0, v[3]] for k, v in st.hints.items()
            }
            log: dict[tuple[int, str, float], float] = {}
            moved: set[tuple[int, str]] = set()
            for h in batch:
                pid = st.ids.get(h.url)
                if pid is None:
                    res.unknown += 1
                    continue
                key = (pid, h.source)
                t, lm = h.seen_at, h.lastmod
                s = state.get(key)
                if s is None:
                    state[key] = [lm, t, t, 2, t]
                elif lm == s[0]:  # what the source said last: when it said so moves
                    res.unchanged += 1
                    if t < s[4]:
                        s[4] = t
                        s[3] = s[3] or 1
                    if t > s[2]:
                        s[2] = t
                        s[3] = s[3] or 1
                    elif t < s[2]:
                        if t < s[1]:
                            s[1] = t
                            s[3] = s[3] or 1
                        lk = (pid, h.source, lm)
                        log[lk] = min(t, log.get(lk, t))
                    continue
                else:
                    if t >= s[2]:  # the latest read: its lastmod is the latest
                        s[0], s[2] = lm, t
                        s[4] = min(t, log.get((pid, h.source, lm), t))
                        if s[3] != 2:
                            moved.add(key)
                    s[1] = min(s[1], t)
                    s[3] = s[3] or 1
                res.stored += 1
                lk = (pid, h.source, lm)
                log[lk] = min(t, log.get(lk, t))
            for (p, src, lm), fs in st.hint_log.items():
                s = state[(p, src)] if (p, src) in moved else None
                if s is not None and s[0] == lm and fs < s[4]:
                    s[4] = fs
            for k, s in state.items():
                if s[3]:
                    st.hints[k] = [s[0], s[1], s[2], s[4]]
            for lk, t in log.items():
                st.hint_log[lk] = min(t, st.hint_log.get(lk, t))
        if on_batch is not None:
            on_batch(res)
        return res

    def set_hint_verdict(self, value: str) -> None:
        """Keep a planner's judgement of the hint sources (JSON)."""
        with self._lock:
            self._st.meta["hint_verdict"] = value

    def add_canary(
        self, url: str, site: str, expect: dict[str, str], every_s: float, now: float
    ) -> None:
        """Declare (or replace) a canary: ``url`` must carry ``expect``."""
        with self.writing():
            st = self._st
            st.canaries[url] = dict(expect)
            if url not in st.ids:
                st.top_id += 1
                st.ids[url] = st.top_id
                st.pages[st.top_id] = PageState(url, site, "canary", first_seen=now)

    def set_values(self, rows: Iterable[tuple[str, float]]) -> int:
        changed = 0
        with self.writing():
            st = self._st
            for url, value in dict(rows).items():
                pid = st.ids.get(url)
                if pid is not None and st.pages[pid].value != value:
                    st.pages[pid].value = value
                    changed += 1
        return changed

    def remove_urls(self, urls: Sequence[str]) -> int:
        with self.writing():
            st = self._st
            gone = {st.ids.pop(u) for u in dict.fromkeys(urls) if u in st.ids}
            for pid in gone:
                url = st.pages.pop(pid).url
                st.moved_to.pop(pid, None)
                st.checkpoints.pop(pid, None)
                st.canaries.pop(url, None)
            st.log = {q: r for q, r in st.log.items() if r[1] not in gone}
            st.leases = {k: u for k, u in st.leases.items() if u in st.ids}
            st.hints = {k: v for k, v in st.hints.items() if k[0] not in gone}
            st.hint_log = {k: v for k, v in st.hint_log.items() if k[0] not in gone}
        return len(gone)

    # -- reading -----------------------------------------------------------------------------

    def page(self, url: str) -> PageState | None:
        """The current state of one page, or None (a copy)."""
        pid = self._st.ids.get(url)
        return None if pid is None else page_from_row(page_row(self._st.pages[pid]))

    def outcomes(self, url: str) -> list[tuple[float, str]]:
        """``(fetched_at, outcome)`` of every fetch of ``url`` in the log, in time order."""
        pid = self._st.ids.get(url)
        rows = sorted((r[2], q, r[3]) for q, r in self._st.log.items() if r[1] == pid)
        return [(t, o) for t, _, o in rows]

    def observation_count(self) -> int:
        return len(self._st.log)

    def group_totals(self) -> list[GroupTotals]:
        sums: dict[tuple[str, str], NDArray[np.float64]] = {}
        for (site, ptype, _, _), v in self._st.daily.items():
            acc = sums.get((site, ptype))
            sums[(site, ptype)] = v.copy() if acc is None else acc + v
        return [
            GroupTotals(
                site=site,
                page_type=ptype,
                fetches=round(row[_N]),
                outcomes={o: round(row[_O + i]) for i, o in enumerate(OUTCOMES)}
                | {"failed_first": round(row[_FF])},
                bytes_sent=round(row[_BS]),
                bytes_received=round(row[_BR]),
                credits=float(row[_CR]),
            )
            for (site, ptype), row in sorted(sums.items())
        ]

    def buckets(
        self, since: float, until: float, sites: Sequence[str] | None = None, *, daily: bool = False
    ) -> BucketArrays:
        lo, hi = (-(-math.ceil(x) // BUCKET_SECONDS) * BUCKET_SECONDS for x in (since, until))
        table = self._st.daily if daily else self._st.buckets
        want = None if not sites else set(sites)
        keys = sorted(k for k in table if lo <= k[3] < hi and (want is None or k[0] in want))
        mat = np.array([table[k] for k in keys]).reshape(len(keys), _WIDTH)
        return BucketArrays.from_labels(
            site=[k[0] for k in keys],
            page_type=[k[1] for k in keys],
            route=[k[2] for k in keys],
            bucket_start=[k[3] for k in keys],
            n=mat[:, _N],
            outcomes=mat[:, _O : _O + _K],
            bytes_sent=mat[:, _BS],
            bytes_received=mat[:, _BR],
            credits=mat[:, _CR],
            rendered=mat[:, _RE],
            canary_ok=mat[:, _COK],
            canary_mismatch=mat[:, _CMM],
            latency=mat[:, _H:_FF],
        )

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryWrite:
    """The data operations of one :meth:`MemoryStore.writing` transaction."""

    def __init__(self, store: MemoryStore, state: _State) -> None:
        self._store = store
        self._st = state
        self.new_ids: dict[str, int] = {}

    @property
    def half_life_days(self) -> float | None:
        return self._store.half_life_days

    @property
    def maintain_buckets(self) -> bool:
        return True

    def claim_keys(self, keys: list[int]) -> Collection[int]:
        have = self._st.keys
        fresh = [k for k in keys if k not in have]
        have.update(fresh)
        return keys if len(fresh) == len(keys) else set(fresh)

    def forget_keys(self, keys: list[int]) -> None:
        self._st.keys.difference_update(keys)

    def known_ids(self, urls: Sequence[str]) -> list[int | None]:
        return [self._st.ids.get(u) for u in urls]

    def new_page_ids(self, urls: Sequence[str]) -> list[int]:
        st = self._st
        ids = list(range(st.top_id + 1, st.top_id + 1 + len(urls)))
        st.top_id += len(urls)
        self.new_ids.update(zip(urls, ids, strict=True))
        return ids

    def load_pages(
        self,
        urls: list[str],
        page_id: NDArray[np.int64],
        created: list[int],
        earliest: list[Observation],
    ) -> PageArrays:
        made = set(created)
        rows = []
        for j, pid in enumerate(page_id.tolist()):
            if j in made:
                o = earliest[j]
                rows.append(new_page_row(urls[j], o.site, o.page_type, o.fetched_at))
            else:
                rows.append(page_row(self._st.pages[pid]))
        return PageArrays.from_rows(rows)

    def write_pages(
        self,
        page_id: NDArray[np.int64],
        pages: PageArrays,
        created: list[int],
        written: list[int],
    ) -> None:
        st = self._st
        skip = set(written)
        rows = pages.rows(np.arange(len(page_id)))
        for j, pid in enumerate(page_id.tolist()):
            if j in skip:
                continue
            state = page_from_row(rows[j])
            if pid in st.pages:
                self.update_page(pid, state)
            else:
                st.pages[pid] = state
                st.ids[state.url] = pid

    def update_page(self, page_id: int, page: PageState) -> None:
        mine = self._st.pages[page_id]
        for name in MUTABLE_FIELDS:
            setattr(mine, name, getattr(page, name))
        mine.gone = bool(page.gone)

    def move_pages(self, moves: dict[int, tuple[str, int | None]]) -> None:
        st = self._st
        for pid, (target, status) in moves.items():
            tid = st.ids.get(target)
            if tid == pid:
                continue
            if tid is not None:  # the target is a page already: this one is retired
                st.moved_to[pid] = target
                continue
            page = st.pages[pid]
            st.ids.pop(page.url, None)
            self.new_ids.pop(page.url, None)
            page.url = target
            st.ids[target] = self.new_ids[target] = pid
            if status is not None and 300 <= status < 400:
                page.fails = 0

    def pruned_until(self) -> float | None:
        until: float | None = self._st.meta.get("pruned_until")
        return until

    def checkpoint_until(self, page_ids: Sequence[int]) -> dict[int, float]:
        cps = self._st.checkpoints
        return {p: float(cps[p][0]) for p in page_ids if p in cps}

    def append_observations(
        self, rows: Sequence[tuple[int, int, float, str, str | None, str]]
    ) -> None:
        st = self._st
        for key, page, t, outcome, fixed, rest in rows:
            st.seq += 1
            st.log[st.seq] = [key, page, t, outcome, fixed, rest]

    def release_leases(self, lease_ids: Sequence[str]) -> None:
        for x in lease_ids:
            self._st.leases.pop(x, None)

    def page_checkpoint(self, page_id: int) -> tuple[Any, ...] | None:
        cp = self._st.checkpoints.get(page_id)
        return None if cp is None else cp[1:]

    def page_log(self, page_id: int) -> list[tuple[int, int, float, str | None, str, str]]:
        rows = [
            (key, q, t, fixed, outcome, rest)
            for q, (key, page, t, outcome, fixed, rest) in self._st.log.items()
            if page == page_id
        ]
        return sorted(rows, key=lambda r: (r[2], r[1]))

    def set_outcomes(self, fixes: Sequence[tuple[str, int]]) -> None:
        for outcome, q in fixes:
            self._st.log[q][3] = outcome

    def hint_verdict(self) -> str | None:
        verdict: str | None = self._st.meta.get("hint_verdict")
        return verdict

    def vouch_rows(
        self, page_ids: NDArray[np.int64], since: NDArray[np.float64] | None
    ) -> list[tuple[int, str, float, float, float]]:
        st = self._st
        by_page: dict[int, list[tuple[str, float, float]]] = {}
        for (p, src, lm), fs in st.hint_log.items():
            by_page.setdefault(p, []).append((src, lm, fs))
        if since is None:
            wanted = set(page_ids.tolist())
            return [
                (p, src, lm, fs, st.hints[(p, src)][1])
                for p in sorted(wanted)
                for src, lm, fs in by_page.get(p, [])
                if (p, src) in st.hints
            ]
        # per (page, source): the earliest lastmod, sighting and listing of the
        # rows each revisit reads
        got: dict[tuple[int, str], list[float]] = {}
        for k, p in enumerate(page_ids.tolist()):
            s0, s1 = float(since[0, k]), float(since[1, k])
            for src, lm, fs in by_page.get(p, []):
                listed = st.hints.get((p, src))
                if listed is None or listed[1] > s0:
                    continue
                if lm > s0 and s0 < fs <= s1:
                    g = got.get((p, src))
                    if g is None:
                        got[(p, src)] = [lm, fs, listed[1]]
                    else:
                        g[0], g[1], g[2] = min(g[0], lm), min(g[1], fs), min(g[2], listed[1])
        return [(p, src, *v) for (p, src), v in got.items()]  # type: ignore[misc]

    def canaries(self) -> dict[str, dict[str, str]]:
        return self._st.canaries

    def add_to_buckets(
        self,
        todo: Sequence[Observation],
        cols: ObservationColumns,
        pidx: NDArray[np.intp],
        codes: NDArray[np.int64],
        page_id: NDArray[np.int64],
        pages: PageArrays,
        canary: NDArray[Any],
        failed_first: NDArray[np.bool_],
        adjust: dict[tuple[str, str, str, int], list[float]],
    ) -> None:
        ok, mismatch = CANARY_CODES["ok"], CANARY_CODES["mismatch"]
        for i, o in enumerate(todo):
            j = int(pidx[i])
            t = float(cols.fetched_at[i])
            d = np.zeros(_WIDTH)
            d[_N] = 1
            d[_O + int(codes[i])] = 1
            d[_BS] = cols.bytes_sent[i]
            d[_BR] = cols.bytes_received[i]
            d[_CR] = cols.billed[i]
            d[_RE] = cols.rendered[i]
            d[_COK] = canary[i] == ok
            d[_CMM] = canary[i] == mismatch
            lat = float(cols.latency_ms[i])
            if not math.isnan(lat):
                d[_H + int(np.searchsorted(LATENCY_EDGES_MS, lat, side="left"))] = 1
            d[_FF] = bool(failed_first[i])
            start = int(t // BUCKET_SECONDS) * BUCKET_SECONDS
            self._add((str(pages.site[j]), str(pages.page_type[j]), o.route, start), d)
        for (site, ptype, route, start), delta in adjust.items():
            d = np.zeros(_WIDTH)
            d[_O : _O + _K] = delta[:_K]
            d[_FF] = delta[_K]
            self._add((site, ptype, route, start), d)

    def _add(self, key: BucketKey, d: NDArray[np.float64]) -> None:
        for table, k in (
            (self._st.buckets, key),
            (self._st.daily, (*key[:3], key[3] - key[3] % _DAY)),
        ):
            have = table.get(k)
            table[k] = d.copy() if have is None else have + d

    def log_before(
        self, pages: list[int], before: float
    ) -> tuple[
        dict[int, tuple[Any, ...]],
        dict[int, PageState],
        list[tuple[int, float, str | None, str, str]],
    ]:
        st = self._st
        want = set(pages)
        cps = {p: st.checkpoints[p] for p in pages if p in st.checkpoints}
        state = {p: page_from_row(page_row(st.pages[p])) for p in pages if p in st.pages}
        rows = sorted(
            (page, t, q, fixed, outcome, rest)
            for q, (_, page, t, outcome, fixed, rest) in st.log.items()
            if page in want and t < before
        )
        return cps, state, [(p, t, fixed, outcome, rest) for p, t, _, fixed, outcome, rest in rows]

    def write_checkpoints(
        self, checkpoints: Sequence[tuple[int, float, bool, PageState]], before: float
    ) -> int:
        st = self._st
        for pid, until, reached, page in checkpoints:
            values = [getattr(page, n) for n in MUTABLE_FIELDS[:-1]]
            st.checkpoints[pid] = (until, int(reached), *values, int(page.gone))
        done = {c[0] for c in checkpoints}
        old = [q for q, r in st.log.items() if r[1] in done and r[2] < before]
        for q in old:
            del st.log[q]
        return len(old)

    def prune_hint_log(self, pages: list[int]) -> int:
        st = self._st
        last_ok = 2 + MUTABLE_FIELDS.index("last_ok")  # (until, reached, *MUTABLE_FIELDS)
        gone = []
        for p, src, lm in st.hint_log:
            cp = st.checkpoints.get(p) if p in pages else None
            latest = st.hints.get((p, src))
            if cp is None or cp[last_ok] is None or latest is None:
                continue
            if lm <= cp[last_ok] and lm != latest[0]:
                gone.append((p, src, lm))
        for k in gone:
            del st.hint_log[k]
        return len(gone)

    def pruned(self, until: float) -> None:
        meta = self._st.meta
        if until > meta.get("pruned_until", -math.inf):
            meta["pruned_until"] = until
