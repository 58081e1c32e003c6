"""The store protocol: the only interface the rest of recrawl sees."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..batch import ObservationColumns
from ..health import BucketArrays
from ..observation import Observation
from ..pagestate import Classifier

__all__ = ["BatchResult", "GroupTotals", "Store"]


@dataclass(slots=True)
class BatchResult:
    """What one stored batch did: new observations stored, duplicates skipped."""

    stored: int = 0
    duplicates: int = 0
    reordered_pages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Keys (first 8 bytes of ``Observation.key``) that were already stored before this batch.
    known: set[bytes] = field(default_factory=set)


@dataclass(slots=True)
class GroupTotals:
    """Bucket sums for one (site, page_type): counts, bytes, credits."""

    site: str
    page_type: str
    fetches: int
    outcomes: dict[str, int]
    bytes_sent: int
    bytes_received: int
    credits: float


class Store(Protocol):
    """Pages, the observation log and per-site buckets, behind one small interface."""

    def ingest(
        self,
        observations: Sequence[Observation],
        *,
        classifier: Classifier | None = None,
        columns: ObservationColumns | None = None,
    ) -> BatchResult:
        """Store a batch in one transaction: skip known keys, update pages in
        time order (rebuilding a page when a report arrives out of order) and
        add to the buckets. Durable when it returns. ``columns``, when given,
        must be :func:`~recrawl.batch.observation_columns` of ``observations``
        (computed where they were parsed)."""
        ...

    def add_urls(self, rows: Iterable[tuple[str, str, str, float]], now: float) -> int:
        """Register ``(url, site, page_type, value)`` for discovery; returns how many were new."""
        ...

    def set_values(self, rows: Iterable[tuple[str, float]]) -> int:
        """Set the value of known pages ``(url, value)``; returns how many changed."""
        ...

    def remove_urls(self, urls: Sequence[str]) -> int:
        """Delete pages with their logs, leases and canaries; returns how many were pages."""
        ...

    def group_totals(self) -> list[GroupTotals]:
        """Bucket sums per (site, page_type), sorted by site then page type."""
        ...

    def observation_count(self) -> int:
        """Observations stored."""
        ...

    def buckets(
        self, since: float, until: float, sites: Sequence[str] | None = None, *, daily: bool = False
    ) -> BucketArrays:
        """Buckets with ``since <= start < until`` (unix seconds); ``daily`` reads
        whole-UTC-day aggregates (for baselines) instead of 15-minute buckets."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...
