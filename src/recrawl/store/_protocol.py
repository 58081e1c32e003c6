"""The store protocol: the only interface the rest of recrawl sees."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from recrawl.observe.batch import ObservationColumns
from recrawl.observe.observation import Observation
from recrawl.observe.sitemaps import Hint
from recrawl.records.buckets import BucketArrays
from recrawl.records.pages import PageArrays, PageState
from recrawl.records.signals import SpendRow

__all__ = [
    "BatchResult",
    "ContentHistory",
    "EngineStore",
    "GroupTotals",
    "HintResult",
    "HintRows",
    "PruneReport",
    "SharedPlanning",
    "Store",
    "WriteTx",
]


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


@dataclass(frozen=True, slots=True)
class ContentHistory:
    """What :meth:`SQLStore.content_history` reads: one entry per content
    fetch (``page`` ids, unix seconds, what it found, whether it was answered
    304 and whether a fetch in the window carried validators), the URL of
    every page id listed, and the checkpoint state ``(last_ok, ev_nc, ev_tc,
    ev_nu, ev_tu)`` of those pruned, with its evidence blob (length bins and
    change-point test, :mod:`recrawl.records.evidence`; None from a store
    before the bins)."""

    page: NDArray[np.int64]
    fetched_at: NDArray[np.float64]
    kind: NDArray[np.int64]
    """0: found no change (``unchanged``, ``not_modified``), 1: ``changed``, 2: ``new``."""
    not_modified: NDArray[np.bool_]
    conditional: NDArray[np.bool_]
    urls: dict[int, str]
    checkpoints: dict[int, tuple[float, ...]]
    checkpoint_evidence: dict[int, bytes | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HintRows:
    """Hints as columns, one entry per row, in page, source (and ``lastmod``) order.

    ``page``: page ids (as :meth:`SQLStore.page_columns` gives them in ``id``);
    ``source``: indexes into ``sources``; ``lastmod``, ``first_seen``,
    ``last_seen``, ``lastmod_seen``: unix seconds. From
    :meth:`SQLStore.hint_state`, one row per page and source: the latest
    ``lastmod``, when the source first and last listed the page, and when it
    first gave the page that ``lastmod`` (its ``first_seen`` in the log). From
    :meth:`SQLStore.hint_log`, one row per distinct ``lastmod`` with when it
    was first seen (``last_seen`` and ``lastmod_seen`` are NaN: not kept per
    ``lastmod``).
    """

    page: NDArray[np.int64]
    source: NDArray[np.int64]
    sources: list[str]
    lastmod: NDArray[np.float64]
    first_seen: NDArray[np.float64]
    last_seen: NDArray[np.float64]
    lastmod_seen: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.page)


class Store(Protocol):
    """Pages, the observation log and per-site buckets, behind one small interface."""

    def writing(self) -> AbstractContextManager[WriteTx]:
        """One write transaction with its data operations (:class:`WriteTx`),
        committed (durable) when the block ends, rolled back if it raises.
        The ingest pipeline (:func:`recrawl.engine.pipeline.store_batch`) and
        the prune (:func:`recrawl.engine.pipeline.prune_log`) run in these."""
        ...

    def log_counts_before(self, before: float) -> list[tuple[int, int]]:
        """``(page id, rows)`` of the pages with log rows fetched before ``before``."""
        ...

    def add_urls(self, rows: Iterable[tuple[str, str, str, float]], now: float) -> int:
        """Register ``(url, site, page_type, value)`` for discovery; returns how many were new.

        A known URL that is gone or retired (moved) is revived: planned again,
        its failure count cleared, its history kept."""
        ...

    def ingest_hints(
        self,
        hints: Iterable[Hint],
        *,
        add_urls: bool = False,
        batch_size: int = ...,
        on_batch: Callable[[HintResult], None] | None = None,
    ) -> HintResult:
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


class WriteTx(Protocol):
    """The data operations of one write transaction (:meth:`Store.writing`).

    Rows in, rows out: what they mean is decided by
    :mod:`recrawl.engine.pipeline`. Page ids are ``int``; times unix seconds.
    """

    new_ids: dict[str, int]

    @property
    def half_life_days(self) -> float | None:
        """The evidence half-life the store was opened with (None: the default)."""
        ...

    @property
    def maintain_buckets(self) -> bool:
        """Whether the store keeps the buckets."""
        ...

    def claim_keys(self, keys: list[int]) -> Collection[int]:
        """Record observation ``keys`` (distinct) as stored; returns those not already."""
        ...

    def forget_keys(self, keys: list[int]) -> None:
        """Take back keys claimed in this transaction."""
        ...

    def known_ids(self, urls: Sequence[str]) -> list[int | None]:
        """The id of each of ``urls`` (None: not a page yet)."""
        ...

    def new_page_ids(self, urls: Sequence[str]) -> list[int]:
        """Ids for new pages ``urls`` (never reused)."""
        ...

    def load_pages(
        self,
        urls: list[str],
        page_id: NDArray[np.int64],
        created: list[int],
        earliest: list[Observation],
    ) -> PageArrays:
        """The state of pages ``urls`` (``created``: new in this transaction)."""
        ...

    def write_pages(
        self,
        page_id: NDArray[np.int64],
        pages: PageArrays,
        created: list[int],
        written: list[int],
    ) -> None:
        """Insert the ``created`` pages, update the others but ``written``."""
        ...

    def update_page(self, page_id: int, page: PageState) -> None:
        """Write one page's state."""
        ...

    def move_pages(self, moves: dict[int, tuple[str, int | None]]) -> None:
        """Permanent redirects: page id → (target URL, status of the report)."""
        ...

    def pruned_until(self) -> float | None:
        """The latest checkpoint of any page (None: never pruned)."""
        ...

    def checkpoint_until(self, page_ids: Sequence[int]) -> dict[int, float]:
        """Each checkpointed page's last pruned fetch."""
        ...

    def append_observations(
        self, rows: Sequence[tuple[int, int, float, str, str | None, str]]
    ) -> None:
        """Log rows ``(key, page, fetched_at, outcome, fixed, rest)``."""
        ...

    def release_leases(self, lease_ids: Sequence[str]) -> None:
        """End the leases ``lease_ids``."""
        ...

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        """Add to the per-(site, signal) totals (:data:`~recrawl.records.signals.SPEND_COLUMNS`)."""
        ...

    def page_checkpoint(self, page_id: int) -> tuple[Any, ...] | None:
        """The page's checkpoint from ``reached`` on (None: never pruned)."""
        ...

    def page_log(self, page_id: int) -> list[tuple[int, int, float, str | None, str, str]]:
        """The page's log rows ``(key, seq, fetched_at, fixed, outcome, rest)`` in time order."""
        ...

    def set_outcomes(self, fixes: Sequence[tuple[str, int]]) -> None:
        """Correct logged outcomes: ``(outcome, seq)`` pairs."""
        ...

    def hint_verdict(self) -> str | None:
        """The kept hint-trust verdict (JSON), None when there is none."""
        ...

    def vouch_rows(
        self, page_ids: NDArray[np.int64], since: NDArray[np.float64] | None
    ) -> list[tuple[int, str, float, float, float]]:
        """Hint-log rows ``(page, source, lastmod, first_seen, listed)`` of ``page_ids``."""
        ...

    def canaries(self) -> dict[str, dict[str, str]]:
        """Declared canaries: url → expected fields."""
        ...

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
        """Add a batch and corrections of earlier rows to the buckets."""
        ...

    def log_before(
        self, pages: list[int], before: float
    ) -> tuple[
        dict[int, tuple[Any, ...]],
        dict[int, PageState],
        list[tuple[int, float, str | None, str, str]],
    ]:
        """Checkpoints, states and log rows before ``before`` of ``pages``."""
        ...

    def write_checkpoints(
        self, checkpoints: Sequence[tuple[int, float, bool, PageState]], before: float
    ) -> int:
        """Write checkpoints and delete the pages' rows before ``before``."""
        ...

    def prune_hint_log(self, pages: list[int]) -> int:
        """Delete hint-log rows no revisit left in the log can fall on."""
        ...

    def pruned(self, until: float) -> None:
        """Raise the refusal horizon of late reports to ``until``."""
        ...


class EngineStore(Store, Protocol):
    """Everything :class:`recrawl.engine.Engine` and the edges read and write
    besides the core :class:`Store`: page columns for the planner, leases,
    site controls and events, health history, hints and the kept verdict,
    validators, canaries, and change counters. :class:`~recrawl.store.SQLiteStore`
    and :class:`~recrawl.store.PostgresStore` implement it; a store that does
    can back an engine, the service and the crawl loop."""

    half_life_days: float | None

    def set_durability(self, durability: Literal["full", "normal"]) -> None:
        """Make the writes from now on fsynced at commit (``"full"``) or not."""
        ...

    # -- pages and the log

    def version(self) -> int:
        """A number that grows whenever observations or pages are added."""
        ...

    def page(self, url: str) -> PageState | None:
        """The current state of one page, or None."""
        ...

    def page_columns(
        self, columns: Collection[str] | None = None, *, planner_bins: bool = False
    ) -> dict[str, Any]:
        """Every page as columns, for the planner (``id``, ``url``, ``site`` ...;
        only ``columns`` when given; ``ev_bins`` as the planner reads them
        with ``planner_bins``: see :meth:`SQLStore.page_columns`)."""
        ...

    def page_count(self) -> int:
        """How many pages the store holds (every row of :meth:`page_columns`)."""
        ...

    def sites(self) -> list[str]:
        """Every site with a page, sorted."""
        ...

    def content_history(self, since: float, until: float = math.inf) -> ContentHistory:
        """The content fetches of ``since <= fetched_at < until``, for calibration and trust."""
        ...

    def outcomes_many(self, urls: Sequence[str]) -> dict[str, list[tuple[float, str]]]:
        """``(fetched_at, outcome)`` of every logged fetch of each of ``urls``."""
        ...

    def pruned_last_success(self, urls: Sequence[str]) -> dict[str, float]:
        """The last success kept in each pruned page's checkpoint."""
        ...

    def observation_mark(self) -> int:
        """A mark of the log's end, for :meth:`reported_since`."""
        ...

    def reported_since(self, mark: int) -> tuple[int, set[str]]:
        """A new mark and the URLs reported since ``mark``."""
        ...

    def outside_writes(self) -> int | None:
        """A counter of writes by other connections (None: not tracked)."""
        ...

    # -- leases

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
        """Lease up to ``limit`` of ``(url, site, reason)`` candidates not leased already."""
        ...

    def outstanding_leases(self, now: float) -> dict[str, int]:
        """Live leases per site."""
        ...

    def leased_urls(self, now: float) -> set[str]:
        """URLs under a live lease."""
        ...

    # -- sites, health, canaries

    def site_controls(self) -> dict[str, dict[str, Any]]:
        """Per site: paused, cost multiplier, concurrency cap, band."""
        ...

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
        """Change a site's controls (None: unchanged), with an event."""
        ...

    def site_events(self, site: str | None = None) -> list[dict[str, Any]]:
        """Pauses, resumes and band changes, oldest first."""
        ...

    def record_health(
        self, at: float, reports: Sequence[dict[str, Any]], states: dict[str, Any]
    ) -> None:
        """Keep one health evaluation (reports per site) and the scorer's states."""
        ...

    def health_states(self) -> dict[str, tuple[float, Any]]:
        """The scorer's latest state per site."""
        ...

    def health_history(
        self, site: str | None = None, since: float = 0.0, until: float = float("inf")
    ) -> list[tuple[float, dict[str, Any]]]:
        """Kept health reports, oldest first."""
        ...

    def canaries(self) -> list[dict[str, Any]]:
        """Declared canaries."""
        ...

    def add_canary(
        self, url: str, site: str, expect: dict[str, str], every_s: float, now: float
    ) -> None:
        """Declare (or replace) a canary."""
        ...

    def remove_canary(self, url: str) -> bool:
        """Withdraw a canary's declaration (its page stays); whether there was one."""
        ...

    # -- validators and hints

    def validators(self, urls: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """The ETag and Last-Modified to send with each of ``urls``."""
        ...

    def sites_without_validators(self) -> set[str]:
        """Sites whose validators were turned off."""
        ...

    def set_validators(self, site: str, on: bool, *, now: float, detail: str) -> bool:
        """Turn a site's conditional requests on or off; returns whether it changed."""
        ...

    def hints_version(self) -> int:
        """A number that grows whenever hints are stored."""
        ...

    def hint_state(self) -> HintRows:
        """The latest hint per page and source."""
        ...

    def hint_log(
        self, lastmod_after: float = -math.inf, *, first_seen_after: float = -math.inf
    ) -> HintRows:
        """Every distinct ``lastmod`` per page and source, with when it was first seen."""
        ...

    def hint_sources(self) -> list[dict[str, Any]]:
        """Per site and source: pages listed, when last read."""
        ...

    def hint_verdict(self) -> str | None:
        """The kept hint-trust verdict (JSON), None when there is none."""
        ...

    def set_hint_verdict(self, value: str) -> None:
        """Keep a planner's judgement of the hint sources (JSON)."""
        ...

    def add_signal_spend(self, rows: Sequence[SpendRow]) -> None:
        """Add reads of signals that are no observation (sitemaps, feeds) to
        the per-(site, signal) totals (:data:`~recrawl.records.signals.SPEND_COLUMNS`)."""
        ...

    def signal_spend(self) -> list[SpendRow]:
        """Every (site, signal)'s totals, by site and signal."""
        ...

    def set_listing_left(self, rows: Sequence[tuple[str, str, float | None]]) -> None:
        """Note item pages that left every listing (``(url, site, at)``; ``at``
        None: it came back, the note is removed)."""
        ...

    def listing_left(self) -> dict[str, tuple[str, float]]:
        """Item pages that left every listing: URL → (site, when noticed)."""
        ...


@runtime_checkable
class SharedPlanning(Protocol):
    """What several services on one store (``Settings.replicas``) share through
    it: the planning role (one replica plans at a time; its death hands the
    role on), the plan it published, and each plan cycle's spend.
    :class:`~recrawl.store.SQLiteStore` and :class:`~recrawl.store.PostgresStore`
    implement it."""

    def hold_planner(self) -> bool:
        """Take or keep the planning role: True while this store object holds it."""
        ...

    def release_planner(self) -> None:
        """Give the planning role up."""
        ...

    def publish_plan(self, cycle: int, mark: int, body: bytes) -> int:
        """Publish a plan (opaque ``body``) for ``cycle``; returns its generation."""
        ...

    def published_plan(self, after: int = 0) -> tuple[int, int, int, bytes] | None:
        """``(generation, cycle, mark, body)`` of the last plan published after ``after``."""
        ...

    def add_cycle_spend(self, cycle: int, delta: float) -> float:
        """Add to a plan cycle's spend (never below 0); returns the new total."""
        ...

    def cycle_spend(self, cycle: int) -> tuple[float, int]:
        """A plan cycle's spend so far, and how many refunds it had."""
        ...
