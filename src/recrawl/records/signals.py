"""What each cheap signal cost and found, per site: rows and the cost per change.

A signal (a hint source: ``sitemap``, ``feed``, ``listing``, or one given by
hand) costs its own reads (a sitemap or feed fetch, a listing page) and the
fetches it caused (the plan fetched a page because the signal proved it
changed); it finds the changes those fetches found. Every other fetch is the
schedule's (:data:`SCHEDULE`). The store keeps running totals per (site,
signal) as :data:`SPEND_COLUMNS` rows, in wire bytes, credits and counts, so
that the cost reads in any billing unit (:func:`signal_costs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from recrawl.observe.observation import Observation

__all__ = [
    "SCHEDULE",
    "SPEND_COLUMNS",
    "SignalCost",
    "SpendRow",
    "signal_costs",
    "spend_rows",
]

SCHEDULE: Final = "schedule"
"""The signal of a fetch no signal caused: the plan's schedule (score,
discovery, re-estimation, verification)."""

SPEND_COLUMNS: Final = (
    "site", "signal", "reads", "read_bytes", "read_credits",
    "fetches", "fetch_bytes", "fetch_credits", "changes",
)  # fmt: skip
"""A ``signal_spend`` row: site, signal; its own reads (count, wire bytes,
credits); the fetches it caused (count, wire bytes, credits); the changes
those fetches found."""

SpendRow = tuple[str, str, int, float, float, int, float, float, int]
"""One row of :data:`SPEND_COLUMNS`."""


def spend_rows(observations: Sequence[Observation], outcomes: Sequence[str]) -> list[SpendRow]:
    """The per-(site, signal) totals of stored ``observations`` whose outcomes
    are ``outcomes`` (one each): a ``signal_read`` observation is a read of its
    ``signal``; another is a fetch of its ``signal`` (:data:`SCHEDULE` when it
    has none), a change found when its outcome is ``changed``. Canaries are
    left out (outside the budget).

    >>> from recrawl.observe.observation import parse_observation
    >>> obs = [parse_observation({"url": "http://a.example/p", "fetched_at": 0,
    ...     "status": 200, "bytes_received": 900, "signal": "listing"})]
    >>> spend_rows(obs, ["changed"])
    [('a.example', 'listing', 0, 0.0, 0.0, 1, 900.0, 1.0, 1)]
    """
    acc: dict[tuple[str, str], list[float]] = {}
    for o, outcome in zip(observations, outcomes, strict=True):
        if o.canary is not None or o.page_type == "canary":
            continue
        g = acc.setdefault((o.site, o.signal or SCHEDULE), [0.0] * 7)
        base = 0 if o.signal_read and o.signal else 3
        g[base] += 1
        g[base + 1] += o.bytes_sent + o.bytes_received
        g[base + 2] += o.billed_credits()
        if base == 3 and outcome == "changed":
            g[6] += 1
    return [
        (site, sig, int(g[0]), g[1], g[2], int(g[3]), g[4], g[5], int(g[6]))
        for (site, sig), g in acc.items()
    ]


@dataclass(frozen=True)
class SignalCost:
    """One signal on one site: what it cost, in the billing unit ``unit``, and
    what it found. ``cost`` is ``read_cost + fetch_cost``; ``per_change`` is
    ``cost / changes`` (None before a change)."""

    site: str
    signal: str
    unit: str
    reads: int
    read_cost: float
    fetches: int
    fetch_cost: float
    changes: int
    cost: float
    per_change: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cost(unit: str, n: float, wire: float, credits: float) -> float:
    if unit == "bytes":
        return wire
    if unit == "credits":
        return credits
    return n


def signal_costs(rows: Iterable[Sequence[Any]], unit: str) -> list[SignalCost]:
    """Each :data:`SPEND_COLUMNS` row as a :class:`SignalCost` in ``unit``
    (``fetches``, ``bytes`` or ``credits``), by site then cost per change
    (cheapest first, those without a change last).

    >>> [c.per_change for c in signal_costs(
    ...     [("s", "listing", 10, 0, 0, 5, 0, 0, 5), ("s", "schedule", 0, 0, 0, 30, 0, 0, 6)],
    ...     "fetches")]
    [3.0, 5.0]
    """
    out = []
    for site, sig, reads, rb, rc, fetches, fb, fc, changes in rows:
        read_cost = _cost(unit, reads, rb, rc)
        fetch_cost = _cost(unit, fetches, fb, fc)
        cost = read_cost + fetch_cost
        out.append(
            SignalCost(
                site=str(site), signal=str(sig), unit=unit, reads=int(reads),
                read_cost=float(read_cost), fetches=int(fetches), fetch_cost=float(fetch_cost),
                changes=int(changes), cost=float(cost),
                per_change=float(cost) / changes if changes else None,
            )
        )  # fmt: skip
    out.sort(key=lambda c: (c.site, c.per_change is None, c.per_change or 0.0, c.signal))
    return out
