"""An in-memory store: the :class:`~recrawl.store.EngineStore` protocol in plain Python.

:class:`MemoryStore` keeps pages, the observation log, checkpoints, hints,
canaries, leases, site controls, health history and buckets in dictionaries,
with no SQL. It exists to test against (a store that starts empty in
microseconds and that a test can read directly) and to prove the protocol is
the whole contract: the ingest pipeline (:func:`recrawl.engine.pipeline.store_batch`),
the prune and an :class:`~recrawl.engine.Engine` run on it unchanged, and
``tests/store/test_store_contract.py`` runs the same cases on it, SQLite and
PostgreSQL. A write transaction works on the live state after a copy of each
table, put back if the block raises. Not for production: nothing is
persisted, and every transaction copies every table (not their rows).

>>> from recrawl import Engine
>>> from recrawl.testing.memory import MemoryStore
>>> engine = Engine(MemoryStore())
>>> engine.ingest_lines(['{"url": "https://a.example/", "fetched_at": 1767225600, "status": 200}']).stored
1
"""

from __future__ import annotations

import copy
import json
import math
import secrets
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

import numpy as np
import orjson
from numpy.typing import NDArray

from recrawl.observe.batch import CANARY_CODES, LOG_FIELDS, ObservationColumns
from recrawl.observe.observation import Observation, host_of
from recrawl.observe.sitemaps import Hint
from recrawl.records.buckets import (
    BUCKET_SECONDS,
    LATENCY_BINS,
    LATENCY_EDGES_MS,
    OUTCOMES,
    BucketArrays,
)
from recrawl.records.evidence import bins_from_blobs
from recrawl.records.evidence import planner_bins as planner_bins_of
from recrawl.records.pages import (
    MUTABLE_FIELDS,
    PageArrays,
    PageState,
    new_page_row,
    page_from_row,
    page_row,
)
from recrawl.records.signals import SpendRow
from recrawl.store import ContentHistory, GroupTotals, HintResult, HintRows
from recrawl.store.hintfold import fold_hints

__all__ = ["MemoryStore"]

_DAY: Final = 86_400
_K: Final = len(OUTCOMES)
# one bucket: n, outcomes, bytes sent, received, credits, rendered, canary ok,
# canary mismatch, latency histogram, fetches failed before their page's first success
_N, _O, _BS, _BR, _CR, _RE, _COK, _CMM = 0, 1, 1 + _K, 2 + _K, 3 + _K, 4 + _K, 5 + _K, 6 + _K
_H: Final = 7 + _K
_FF: Final = _H + LATENCY_BINS
_WIDTH: Final = _FF + 1
_CONTENT: Final = {"changed": 1, "new": 2, "not_modified": 3, "unchanged": 0}
_CONDITIONAL_AT: Final = LOG_FIELDS.index("conditional")

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
    # url -> (lease id, worker, site, reason, leased at, expires at)
    leases: dict[str, tuple[str, str, str, str, float, float]] = field(default_factory=dict)
    # (page, source) -> [lastmod, first_seen, last_seen, lastmod_seen]
    hints: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    # (page, source, lastmod) -> first seen
    hint_log: dict[tuple[int, str, float], float] = field(default_factory=dict)
    # url -> {"site", "expect", "every_s", "added_at"}
    canaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    site_events: list[tuple[str, float, str, str | None]] = field(default_factory=list)
    health_history: dict[tuple[str, float], str] = field(default_factory=dict)
    health_state: dict[str, tuple[float, str]] = field(default_factory=dict)
    validators_off: set[str] = field(default_factory=set)
    buckets: dict[BucketKey, NDArray[np.float64]] = field(default_factory=dict)
    daily: dict[BucketKey, NDArray[np.float64]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # (site, signal) -> [reads, read_bytes, read_credits, fetches, fetch_bytes, fetch_credits, changes]
    signal_spend: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # url -> (site, at)
    listing_left: dict[str, tuple[str, float]] = field(default_factory=dict)


def _count(st: _State, key: str) -> None:
    st.meta[key] = st.meta.get(key, 0) + 1


def _hint_rows(rows: list[tuple[Any, ...]], width: int) -> HintRows:
    code: dict[str, int] = {}
    n = len(rows)
    nan = np.full(n, np.nan)

    def col(j: int) -> NDArray[np.float64]:
        return np.array([r[j] for r in rows], dtype=np.float64) if j < width else nan.copy()

    return HintRows(
        page=np.array([r[0] for r in rows], dtype=np.int64),
        source=np.array([code.setdefault(r[1], len(code)) for r in rows], dtype=np.int64),
        sources=list(code),
        lastmod=col(2),
        first_seen=col(3),
        last_seen=col(4),
        lastmod_seen=col(5),
    )


class MemoryStore:
    """The :class:`~recrawl.store.EngineStore` protocol in memory (see the module)."""

    path = ":memory:"

    def __init__(self, *, half_life_days: float | None = None) -> None:
        self.half_life_days = half_life_days
        self._st = _State()
        self._lock = threading.RLock()

    # -- writing -----------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[MemoryWrite]:
        """One transaction: the state is put back as it was if the block raises.

        Writes replace what they change (a page, a log row, a bucket) rather
        than change it in place, so a copy of each table (not of its rows)
        is the snapshot."""
        with self._lock:
            st = self._st
            saved = _State(**{f.name: copy.copy(getattr(st, f.name)) for f in fields(_State)})
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
                    st.pages[pid] = replace(page, gone=False, fails=0)
                    st.moved_to.pop(pid, None)
            for u, site, ptype, value in new.values():
                st.top_id += 1
                st.ids[u] = st.top_id
                st.pages[st.top_id] = PageState(u, site, ptype, value=value, first_seen=now)
            _count(st, "urls_version")
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
                if first:
                    _count(st, "urls_version")
            # each (page, source): [lastmod, first_seen, last_seen, 0 as read | 1 changed | 2 new, lastmod_seen]
            state: dict[tuple[int, str], list[float]] = {
                k: [v[0], v[1], v[2], 0, v[3]] for k, v in st.hints.items()
            }
            log, moved = fold_hints(batch, st.ids.get, state, res)
            for (p, src, lm), fs in st.hint_log.items():
                s = state[(p, src)] if (p, src) in moved else None
                if s is not None and s[0] == lm and fs < s[4]:
                    s[4] = fs
            for k, s in state.items():
                if s[3]:
                    st.hints[k] = [s[0], s[1], s[2], s[4]]
            if any(s[3] for s in state.values()):
                _count(st, "hints_version")
            for lk, t in log.items():
                st.hint_log[lk] = min(t, st.hint_log.get(lk, t))
        if on_batch is not None:
            on_batch(res)
        return res

    def add_canary(
        self, url: str, site: str, expect: dict[str, str], every_s: float, now: float
    ) -> None:
        """Declare (or replace) a canary: ``url`` must carry ``expect``."""
        with self.writing():
            st = self._st
            st.canaries[url] = {
                "site": site, "expect": dict(expect), "every_s": every_s, "added_at": now
            }  # fmt: skip
            if url not in st.ids:
                st.top_id += 1
                st.ids[url] = st.top_id
                st.pages[st.top_id] = PageState(url, site, "canary", first_seen=now)

    def remove_canary(self, url: str) -> bool:
        """Withdraw the canary declared on ``url``; its page stays."""
        with self.writing():
            return self._st.canaries.pop(url, None) is not None

    def set_values(self, rows: Iterable[tuple[str, float]]) -> int:
        changed = 0
        with self.writing():
            st = self._st
            for url, value in dict(rows).items():
                pid = st.ids.get(url)
                if pid is not None and st.pages[pid].value != value:
                    st.pages[pid] = replace(st.pages[pid], value=value)
                    changed += 1
            if changed:
                _count(st, "urls_version")
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
            st.leases = {u: v for u, v in st.leases.items() if u in st.ids}
            st.hints = {k: v for k, v in st.hints.items() if k[0] not in gone}
            st.hint_log = {k: v for k, v in st.hint_log.items() if k[0] not in gone}
            if gone:
                for key in ("hints_version", "urls_version"):
                    _count(st, key)
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

    # -- what the engine reads and writes besides ------------------------------------------

    def set_durability(self, durability: Any) -> None:
        """Nothing is durable here."""

    def version(self) -> int:
        return self._st.seq * 1_000_003 + int(self._st.meta.get("urls_version", 0))

    def page_count(self) -> int:
        return len(self._st.pages)

    def page_columns(
        self, columns: Collection[str] | None = None, *, planner_bins: bool = False
    ) -> dict[str, Any]:
        cols = self._page_columns()
        if planner_bins:
            cols["ev_bins"] = planner_bins_of(cols["ev_bins"])
        return cols if columns is None else {k: v for k, v in cols.items() if k in columns}

    def _page_columns(self) -> dict[str, Any]:
        st = self._st
        rows = sorted(st.pages.items(), key=lambda kv: kv[1].url)
        nan = math.nan

        def f(v: float | None) -> float:
            return nan if v is None else float(v)

        cols: dict[str, Any] = {
            "id": np.array([pid for pid, _ in rows], dtype=np.int64),
            "url": [p.url for _, p in rows],
            "site": [p.site for _, p in rows],
            "page_type": [p.page_type for _, p in rows],
        }
        for name in ("value", "first_seen", "last_ok", "last_fetch", "ev_nc", "ev_tc", "ev_nu",
                     "ev_tu", "nutch_interval", "avg_bytes"):  # fmt: skip
            cols[name] = np.array([f(getattr(p, name)) for _, p in rows], dtype=np.float64)
        cols["gone"] = np.array([bool(p.gone) for _, p in rows], dtype=bool)
        cols["fails"] = np.array([p.fails for _, p in rows], dtype=np.int64)
        cols["moved"] = np.array([pid in st.moved_to for pid, _ in rows], dtype=bool)
        cols["ev_bins"] = bins_from_blobs(
            [p.ev_bins for _, p in rows], cols["ev_nc"], cols["ev_tc"]
        )
        cols["fetches"] = np.array([p.fetches for _, p in rows], dtype=np.int64)
        cols["bytes_total"] = np.array([float(p.bytes_total) for _, p in rows], dtype=np.float64)
        cols["credits_total"] = np.array([p.credits_total for _, p in rows], dtype=np.float64)
        return cols

    def sites(self) -> list[str]:
        return sorted({p.site for p in self._st.pages.values()})

    def content_history(self, since: float, until: float = math.inf) -> ContentHistory:
        st = self._st
        content = [(q, r) for q, r in st.log.items() if r[3] in _CONTENT and r[2] < until]
        recent = {r[1] for _, r in content if r[2] >= since}
        rows = sorted((r[1], r[2], q, r) for q, r in content if r[1] in recent)
        code = np.array([_CONTENT[r[3]] for *_, r in rows], dtype=np.int64)
        checkpoints: dict[int, tuple[float, ...]] = {}
        at = 2 + MUTABLE_FIELDS.index("last_ok")
        ev = [2 + MUTABLE_FIELDS.index(n) for n in ("ev_nc", "ev_tc", "ev_nu", "ev_tu")]
        blob_at = 2 + MUTABLE_FIELDS.index("ev_bins")
        blobs: dict[int, bytes | None] = {}
        for pid in recent:
            cp = st.checkpoints.get(pid)
            if cp is not None:
                lo = math.nan if cp[at] is None else float(cp[at])
                checkpoints[pid] = (lo, *(float(cp[i]) for i in ev))
                blobs[pid] = cp[blob_at]
        return ContentHistory(
            page=np.array([p for p, *_ in rows], dtype=np.int64),
            fetched_at=np.array([t for _, t, *_ in rows], dtype=np.float64),
            kind=np.where(code == 3, 0, code),
            not_modified=code == 3,
            conditional=np.array(
                [t >= since and orjson.loads(r[5])[_CONDITIONAL_AT] is True for _, t, _, r in rows],
                dtype=bool,
            ),
            urls={pid: st.pages[pid].url for pid in recent if pid in st.pages},
            checkpoints=checkpoints,
            checkpoint_evidence=blobs,
        )

    def outcomes_many(self, urls: Sequence[str]) -> dict[str, list[tuple[float, str]]]:
        return {u: self.outcomes(u) for u in urls}

    def pruned_last_success(self, urls: Sequence[str]) -> dict[str, float]:
        st = self._st
        at = 2 + MUTABLE_FIELDS.index("last_ok")
        out = {}
        for u in urls:
            cp = st.checkpoints.get(st.ids.get(u, -1))
            if cp is not None and cp[at] is not None:
                out[u] = float(cp[at])
        return out

    def observation_mark(self) -> int:
        return max(self._st.log, default=0)

    def reported_since(self, mark: int) -> tuple[int, set[str]]:
        st = self._st
        new = [(q, r[1]) for q, r in st.log.items() if q > mark]
        return max((q for q, _ in new), default=mark), {
            st.pages[p].url for _, p in new if p in st.pages
        }

    def outside_writes(self) -> int | None:
        return None

    def claim(
        self,
        candidates: Sequence[tuple[str, str, str]],
        *,
        worker: str,
        limit: int,
        now: float,
        ttl_s: float,
        site_caps: dict[str, int] | None = None,
        reported_since: int | None = None,
    ) -> list[dict[str, Any]]:
        caps = site_caps or {}
        out: list[dict[str, Any]] = []
        with self.writing():
            st = self._st
            st.leases = {u: v for u, v in st.leases.items() if v[5] > now}
            held = set(st.leases)
            if reported_since is not None:
                held |= self.reported_since(reported_since)[1]
            per_site: dict[str, int] = {}
            for v in st.leases.values():
                per_site[v[2]] = per_site.get(v[2], 0) + 1
            for url, site, reason in candidates:
                if len(out) >= limit:
                    break
                if url in held:
                    continue
                cap = caps.get(site)
                if cap is not None and per_site.get(site, 0) >= cap:
                    continue
                lease_id = secrets.token_urlsafe(12)
                held.add(url)
                per_site[site] = per_site.get(site, 0) + 1
                st.leases[url] = (lease_id, worker, site, reason, now, now + ttl_s)
                out.append(
                    {"lease_id": lease_id, "url": url, "site": site, "reason": reason,
                     "expires_at": now + ttl_s}
                )  # fmt: skip
        return out

    def outstanding_leases(self, now: float) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self._st.leases.values():
            if v[5] > now:
                out[v[2]] = out.get(v[2], 0) + 1
        return out

    def leased_urls(self, now: float) -> set[str]:
        return {u for u, v in self._st.leases.items() if v[5] > now}

    def site_controls(self) -> dict[str, dict[str, Any]]:
        off = self._st.validators_off
        return {s: dict(c) | {"validators": s not in off} for s, c in self._st.sites.items()}

    def _site(self, site: str) -> dict[str, Any]:
        return self._st.sites.setdefault(
            site, {"paused": False, "cost_multiplier": 1.0, "concurrency_cap": None,
                   "band": "unknown"}
        )  # fmt: skip

    def set_site_controls(
        self,
        site: str,
        *,
        now: float,
        paused: bool | None = None,
        cost_multiplier: float | None = None,
        concurrency_cap: int | None = None,
        band: str | None = None,
        event: str | None = None,
        detail: str | None = None,
    ) -> None:
        with self.writing():
            c = dict(self._site(site))
            self._st.sites[site] = c
            if paused is not None:
                c["paused"] = bool(paused)
            if cost_multiplier is not None:
                c["cost_multiplier"] = cost_multiplier
            c["concurrency_cap"] = concurrency_cap
            if band is not None:
                c["band"] = band
            if event is not None:
                self._st.site_events.append((site, now, event, detail))

    def site_events(self, site: str | None = None) -> list[dict[str, Any]]:
        rows = [
            (a, i, s, k, d)
            for i, (s, a, k, d) in enumerate(self._st.site_events)
            if site is None or s == site
        ]
        return [{"site": s, "at": a, "kind": k, "detail": d} for a, _, s, k, d in sorted(rows)]

    def record_health(
        self, at: float, reports: Sequence[dict[str, Any]], states: dict[str, Any]
    ) -> None:
        with self.writing():
            st = self._st
            for r in reports:
                st.health_history[(r["site"], at)] = json.dumps(r)
            for site, state in states.items():
                st.health_state[site] = (at, json.dumps(state))

    def health_states(self) -> dict[str, tuple[float, Any]]:
        return {s: (a, json.loads(v)) for s, (a, v) in self._st.health_state.items()}

    def health_history(
        self, site: str | None = None, since: float = 0.0, until: float = float("inf")
    ) -> list[tuple[float, dict[str, Any]]]:
        rows = sorted(
            (a, s, r)
            for (s, a), r in self._st.health_history.items()
            if since <= a <= until and (site is None or s == site)
        )
        return [(a, json.loads(r)) for a, _, r in rows]

    def canaries(self) -> list[dict[str, Any]]:
        st = self._st
        out = []
        for url, c in sorted(st.canaries.items(), key=lambda kv: (kv[1]["site"], kv[0])):
            pid = st.ids.get(url)
            out.append(
                {"url": url, "site": c["site"], "expect": dict(c["expect"]),
                 "every_s": c["every_s"], "added_at": c["added_at"],
                 "last_fetch": None if pid is None else st.pages[pid].last_fetch}
            )  # fmt: skip
        return out

    def validators(self, urls: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        st = self._st
        out: dict[str, tuple[str | None, str | None]] = {}
        for u in urls:
            pid = st.ids.get(u)
            if pid is not None:
                p = st.pages[pid]
                out[u] = (None, None) if p.site in st.validators_off else (p.etag, p.last_modified)
        return out

    def sites_without_validators(self) -> set[str]:
        return set(self._st.validators_off)

    def set_validators(self, site: str, on: bool, *, now: float, detail: str) -> bool:
        st = self._st
        if (site not in st.validators_off) == on:
            return False
        with self.writing():
            self._site(site)
            if on:
                st.validators_off.discard(site)
            else:
                st.validators_off.add(site)
            st.site_events.append((site, now, "validators_on" if on else "validators_off", detail))
        return True

    def hints_version(self) -> int:
        return int(self._st.meta.get("hints_version", 0))

    def hint_state(self) -> HintRows:
        rows = sorted((p, src, *v) for (p, src), v in self._st.hints.items())
        return _hint_rows(rows, 6)

    def hint_log(
        self, lastmod_after: float = -math.inf, *, first_seen_after: float = -math.inf
    ) -> HintRows:
        rows = sorted(
            (p, src, lm, fs)
            for (p, src, lm), fs in self._st.hint_log.items()
            if lm > lastmod_after and fs > first_seen_after
        )
        return _hint_rows(rows, 4)

    def hint_sources(self) -> list[dict[str, Any]]:
        per: dict[str, list[float]] = {}
        for (_, src), v in self._st.hints.items():
            g = per.setdefault(src, [0, math.inf, -math.inf])
            g[0] += 1
            g[1] = min(g[1], v[1])
            g[2] = max(g[2], v[2])
        logged: dict[str, int] = {}
        for _, src, _ in self._st.hint_log:
            logged[src] = logged.get(src, 0) + 1
        return [
            {"source": src, "pages": int(g[0]), "lastmods": logged.get(src, 0),
             "first_seen": float(g[1]), "last_seen": float(g[2])}
            for src, g in sorted(per.items())
        ]  # fmt: skip

    def hint_verdict(self) -> str | None:
        verdict: str | None = self._st.meta.get("hint_verdict")
        return verdict

    def set_hint_verdict(self, value: str) -> None:
        """Keep a planner's judgement of the hint sources (JSON)."""
        with self._lock:
            self._st.meta["hint_verdict"] = value

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        with self.writing() as tx:
            tx.add_signal_spend(rows)

    def signal_spend(self) -> list[SpendRow]:
        return [
            (site, sig, int(g[0]), g[1], g[2], int(g[3]), g[4], g[5], int(g[6]))
            for (site, sig), g in sorted(self._st.signal_spend.items())
        ]

    def set_listing_left(self, rows: Sequence[tuple[str, str, float | None]]) -> None:
        with self._lock:
            left = dict(self._st.listing_left)
            for url, site, at in rows:
                if at is None:
                    left.pop(url, None)
                else:
                    left[url] = (site, at)
            self._st.listing_left = left

    def listing_left(self) -> dict[str, tuple[str, float]]:
        return dict(self._st.listing_left)

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
        mine = copy.copy(self._st.pages[page_id])
        for name in MUTABLE_FIELDS:
            setattr(mine, name, getattr(page, name))
        mine.gone = bool(page.gone)
        self._st.pages[page_id] = mine

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
            redirect = status is not None and 300 <= status < 400
            st.pages[pid] = replace(page, url=target, fails=0 if redirect else page.fails)
            st.ids[target] = self.new_ids[target] = pid

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
        ended = set(lease_ids)
        st = self._st
        st.leases = {u: v for u, v in st.leases.items() if v[0] not in ended}

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        spend = dict(self._st.signal_spend)
        for site, sig, *figures in rows:
            old = spend.get((site, sig), [0.0] * 7)
            spend[(site, sig)] = [a + float(b) for a, b in zip(old, figures, strict=True)]
        self._st.signal_spend = spend

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
        log = self._st.log
        for outcome, q in fixes:
            row = log[q]
            log[q] = [*row[:3], outcome, *row[4:]]

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
        return {u: c["expect"] for u, c in self._st.canaries.items()}

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
