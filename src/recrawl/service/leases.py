"""Lease candidates: one plan's tasks, and the shortest run of them a claim needs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from recrawl.engine.engine import PlanResult

__all__ = ["MAX_LEASE", "Candidate", "LeasePool", "pick_candidates"]

MAX_LEASE = 1000
"""The most tasks one lease request may ask for."""
Candidate = tuple[str, str, str]
"""A lease candidate: ``(url, site, reason)``."""


@dataclass(slots=True)
class LeasePool:
    """One plan's tasks as lease candidates: canaries apart, the others best first
    by URL without those reported since; each URL's task; the others' sites."""

    plan: PlanResult
    canaries: list[Candidate]
    rest: dict[str, Candidate]
    info: dict[str, dict[str, Any]]
    sites: frozenset[str]


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
