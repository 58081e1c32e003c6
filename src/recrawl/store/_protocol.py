"""The store protocol: the only interface the rest of recrawl sees."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from recrawl.estimate.hints import Hint
from recrawl.estimate.pagestate import Classifier
from recrawl.health.score import BucketArrays
from recrawl.observe.batch import ObservationColumns
from recrawl.observe.observation import Observation

__all__ = ["BatchResult", "GroupTotals", "HintResult", "PruneReport", "Store"]


@dataclass(slots=True)
class BatchResult:
    """What one stored batch did: new observations stored, duplicates skipped."""

    stored: int = 0
    duplicates: int = 0
    reordered_pages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Keys (first 8 bytes of ``Observation.key``) that were already stored before this batch.
    known: set[bytes] = field(default_factory=set)
    #: Observations not stored because they are older than the pruned part of
    #: their page's log (see :meth:`Store.prune`): ``(index in the batch, reason)``.
    #: They are neither stored nor duplicates, and their keys stay unclaimed.
    refused: list[tuple[int, str]] = field(default_factory=list)


@dataclass(slots=True)
class HintResult:
    """What :meth:`Store.ingest_hints` did with the hints it was given.

    ``stored``: hints that told something new of their page and source (a
    first hint, or a ``lastmod`` other than the latest one: a row of the hint
    log); ``unchanged``: hints repeating the latest ``lastmod`` (only when the
    source last listed the page moves on); ``unknown``: hints for a URL the
    store does not know, skipped; ``added_urls``: of the hints' URLs, those
    registered as new pages (``add_urls``), whose hints count as stored;
    ``future``: hints read (``seen_at``) well after the engine's clock, refused
    and not stored (:meth:`recrawl.engine.Engine.ingest_hints`).
    """

    stored: int = 0
    unchanged: int = 0
    unknown: int = 0
    added_urls: int = 0
    future: int = 0

    def add(self, other: HintResult) -> None:
        """Add ``other``'s counts to these."""
        self.stored += other.stored
        self.unchanged += other.unchanged
        self.unknown += other.unknown
        self.added_urls += other.added_urls
        self.future += other.future


@dataclass(slots=True)
class PruneReport:
    """What :meth:`Store.prune` did (so far, when passed to its progress callback).

    ``to_remove`` is what the log held before ``before`` (unix seconds) when
    the prune started; ``observations_removed`` the rows deleted;
    ``pages_checkpointed`` the pages whose checkpoint was written or moved on;
    ``pages_to_checkpoint`` the pages that held such observations at the start.
    """

    before: float
    to_remove: int = 0
    pages_to_checkpoint: int = 0
    observations_removed: int = 0
    pages_checkpointed: int = 0
    hint_log_removed: int = 0
    """Rows of the hint log deleted: ``lastmod`` values no revisit after the
    prune can fall on (see :meth:`Store.prune`)."""


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
        """Register ``(url, site, page_type, value)`` for discovery; returns how many were new.

        A known URL that is gone or retired (moved) is revived: planned again,
        its failure count cleared, its history kept."""
        ...

    def ingest_hints(self, hints: Iterable[Hint], *, add_urls: bool = False) -> HintResult:
        """Keep what sitemaps, feeds and listings say of pages' last changes
        (:mod:`recrawl.hints`): the latest hint per page and source, and each
        distinct ``lastmod`` with when it was first seen. A hint for a URL the
        store does not know is counted and skipped, unless ``add_urls``
        registers it as a new page (site: its host)."""
        ...

    def set_values(self, rows: Iterable[tuple[str, float]]) -> int:
        """Set the value of known pages ``(url, value)``; returns how many changed."""
        ...

    def remove_urls(self, urls: Sequence[str]) -> int:
        """Delete pages with their logs, leases and canaries; returns how many were pages."""
        ...

    def prune(
        self,
        before: float,
        *,
        on_progress: Callable[[PruneReport], None] | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Delete the log's observations fetched before ``before`` (unix seconds),
        keeping each page's state after them as a checkpoint that re-folds start
        from; a report older than its page's checkpoint is then refused. The
        hint log of those pages loses the ``lastmod`` values no later revisit
        can fall on (the latest per page and source stays). With ``dry_run``,
        only count the observations."""
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
