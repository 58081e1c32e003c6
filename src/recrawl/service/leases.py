"""Lease candidates: one plan's tasks, and the shortest run of them a claim needs."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

import numpy as np

from recrawl.engine.engine import PlanResult
from recrawl.engine.tasks import TaskTable

__all__ = ["MAX_LEASE", "Candidate", "LeasePool", "pick_candidates"]

MAX_LEASE = 1000
"""The most tasks one lease request may ask for."""
Candidate = tuple[str, str, str]
"""A lease candidate: ``(url, site, reason)``."""


class LeasePool:
    """One plan's tasks as lease candidates: canaries apart, the others best
    first without those reported since.

    Kept as positions into the plan's :class:`~recrawl.engine.tasks.TaskTable`
    rather than a dict and a tuple per task: the planned pages' URL hashes,
    sorted, with their positions (a URL is found by its hash, then its
    string compared), the head's URLs in a small dict, and whether each task
    is still to lease: about 13 bytes a task (a dict of URLs took 80, a dict
    and a tuple 250).
    """

    __slots__ = (
        "_head",
        "_pos",
        "_sorted",
        "_start",
        "canaries",
        "canary_urls",
        "live",
        "plan",
        "sites",
        "table",
    )  # fmt: skip

    def __init__(self, plan: PlanResult, done: Collection[str] = ()) -> None:
        tasks = plan.tasks
        table = tasks if isinstance(tasks, TaskTable) else TaskTable.of(list(tasks))
        self.plan = plan
        self.table = table
        n, h = len(table), table.head
        hashes = table.url_hashes()
        order = np.argsort(hashes, kind="stable")  # equal hashes: the first task first
        self._sorted = hashes[order]
        self._pos = (order + h).astype(np.int32 if n < 1 << 31 else np.int64)
        live = np.zeros(n, dtype=bool)
        live[h:] = True
        # a URL's first task wins: a second task of one URL (or a hash two URLs
        # share, which its string comparison tells apart) is not leased
        twin = np.flatnonzero(self._sorted[1:] == self._sorted[:-1]) + 1
        for k in twin.tolist():
            if self._find(table.url(int(self._pos[k])), stop=k) is not None:
                live[self._pos[k]] = False
        self._head: dict[str, int] = {}
        self.canaries: list[Candidate] = []
        for i in reversed(range(h)):
            task = table[i]
            if task["reason"] == "canary":
                self.canaries.append((task["url"], task["site"], "canary"))
            else:
                self._head[task["url"]] = i
        self.canaries.reverse()
        self.canary_urls = frozenset(c[0] for c in self.canaries)
        for url, i in self._head.items():
            live[i] = True
            at = self._find(url)
            if at is not None:
                live[at] = False
        self.live = live
        for url in done:
            self.drop(url)
        self._start = 0  # no live position before it
        self.sites = frozenset(
            {table.site(i) for i in np.flatnonzero(live[:h]).tolist()}
            | table.distinct("site", np.flatnonzero(live[h:]))
        )

    def _find(self, url: str, stop: int | None = None) -> int | None:
        """The position of ``url``'s first planned (not head) task, looking
        only at the sorted hashes before ``stop``; None when there is none."""
        key = hash(url)
        at = int(np.searchsorted(self._sorted, key))
        end = len(self._sorted) if stop is None else stop
        while at < end and self._sorted[at] == key:
            pos = int(self._pos[at])
            if self.table.url(pos) == url:
                return pos
            at += 1
        return None

    def _index(self, url: str) -> int | None:
        """The position of ``url``'s first task, canaries apart."""
        at = self._head.get(url)
        return self._find(url) if at is None else at

    def __bool__(self) -> bool:
        """Whether a task (not a canary) is left to lease."""
        return self._first() < len(self.live)

    def _first(self) -> int:
        live, i, n = self.live, self._start, len(self.live)
        while i < n:
            got = np.flatnonzero(live[i : i + 4096])
            if len(got):
                i += int(got[0])
                break
            i += 4096
        self._start = min(i, n)
        return self._start

    def drop(self, url: str) -> None:
        """``url`` was reported: not to be leased from this plan again."""
        i = self._index(url)
        if i is not None:
            self.live[i] = False

    def holds(self, url: str) -> bool:
        """Whether this plan has a task for ``url`` (canaries included)."""
        return self._index(url) is not None or any(c[0] == url for c in self.canaries)

    def task(self, url: str) -> dict[str, Any]:
        """``url``'s task (its first, for a canary its canary task)."""
        i = self._index(url)
        if i is None:
            i = next(k for k in range(len(self.table)) if self.table.url(k) == url)
        return self.table[i]

    def candidates(self) -> Iterator[Candidate]:
        """The tasks still to lease, best first, as ``(url, site, reason)``."""
        live, table = self.live, self.table
        i, n = self._first(), len(live)
        while i < n:
            for k in (np.flatnonzero(live[i : i + 4096]) + i).tolist():
                yield table.url(k), table.site(k), table.reason_of(k)
            i += 4096


def pick_candidates(
    candidates: Iterable[Candidate],
    sites: frozenset[str],
    per_site: dict[str, int],
    caps: dict[str, int],
    limit: int,
) -> tuple[list[Candidate], bool]:
    """The shortest run of ``candidates`` (``(url, site, reason)``, best first) that
    holds every candidate :meth:`~recrawl.store.SQLStore.claim` would take for
    ``limit`` tasks: ``(run, whole)``, ``whole`` when no candidate was left out
    for want of room.

    ``sites`` are the candidates' sites, ``per_site`` the leases out per site
    and ``caps`` the sites' caps. Which URLs are leased is not read: a site
    with ``n`` leases out may have them among its first ``n`` candidates, so
    only its candidates beyond those count as surely free, and a capped site
    needs no more than ``cap`` candidates. Spares ``claim`` the whole plan.
    """
    full = {s for s, cap in caps.items() if per_site.get(s, 0) >= cap}
    if sites <= full:
        return [], True
    out: list[Candidate] = []
    taken: dict[str, int] = {}
    free = 0
    for c in candidates:
        site = c[1]
        if site in full:
            continue
        out.append(c)
        k = taken[site] = taken.get(site, 0) + 1
        if k > per_site.get(site, 0):
            free += 1
            if free >= limit:
                return out, False
        cap = caps.get(site)
        if cap is not None and k >= cap:
            full.add(site)
            if sites <= full:
                break
    return out, True
