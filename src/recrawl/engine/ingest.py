"""Ingest fetch logs: stream, validate, and store observations in batches.

Each batch is one transaction, so what :func:`ingest_lines` has reported as
stored is on disk; a crash loses at most the batch in flight, and ingesting the
same input again stores every observation exactly once (idempotency keys).
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from itertools import chain, islice, starmap
from operator import attrgetter
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np
from numpy.typing import NDArray

from recrawl._exceptions import InvalidObservation
from recrawl.engine.pipeline import store_batch
from recrawl.estimate.pagestate import Classifier, PageState
from recrawl.observe.batch import ObservationColumns, observation_columns
from recrawl.observe.classify import ExtraMarker, ResponseNormals, classify_response
from recrawl.observe.fingerprint import FieldRule
from recrawl.observe.observation import Observation, read_observations
from recrawl.store import Store

__all__ = [
    "ContentClassifier",
    "IngestReport",
    "fewer_collections",
    "ingest_lines",
    "ingest_observations",
]

DEFAULT_BATCH = 20_000
MAX_KEPT_ERRORS = 1000
PARSE_CHUNK = 5000
"""Lines per chunk handed to a parsing process."""

GC_GEN0 = 50_000
"""Allocations between young garbage collections while ingesting (Python's default: 700)."""

GC_GEN0_BULK = 1_000_000
"""The same while :func:`ingest_lines` reads a whole input: a batch of 20,000
observations holds several hundred thousand objects at once, so at
:data:`GC_GEN0` the collector still walked them about nine times per batch
(measured: 5 to 8 % of the storing process's time)."""

_FIELDS = tuple(f.name for f in fields(Observation))
_as_tuple = attrgetter(*_FIELDS)


LineNumbers = NDArray[np.int64]
"""The input line number (from 1) of each observation of a list."""


@dataclass
class IngestReport:
    """What an ingest did. ``errors`` keeps the first :data:`MAX_KEPT_ERRORS` rejections."""

    read: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reordered_pages: int = 0
    errors: list[InvalidObservation] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)

    def _add(
        self, stored: int, duplicates: int, reordered: int, outcomes: Mapping[str, int]
    ) -> None:
        self.stored += stored
        self.duplicates += duplicates
        self.reordered_pages += reordered
        for k, v in outcomes.items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v


class ContentClassifier:
    """The content checks of ingest: block-page markers, bodies far smaller than
    normal, empty records and records missing fields they always had.

    The normal body size is the page's own running average once it has two
    good fetches, else the median of its site and page type seen by this
    process; required fields come from the site and page type (see
    :class:`~recrawl.classify.ResponseNormals`).
    """

    def __init__(
        self,
        extra_markers: Iterable[ExtraMarker] = (),
        normals: ResponseNormals | None = None,
        *,
        warmup: int = 200,
        sample_every: int = 4,
    ) -> None:
        self.extra_markers = tuple(extra_markers)
        self.normals = normals or ResponseNormals()
        self.warmup = warmup
        self.sample_every = sample_every
        self._seen: dict[tuple[str, str], int] = {}

    def __call__(self, obs: Observation, page: PageState | None) -> str | None:
        if page is None:
            return self.classify_fields(obs, obs.site, obs.page_type, 0.0, False)
        return self.classify_fields(
            obs, page.site, page.page_type, page.avg_bytes, page.last_ok is not None
        )

    def classify_fields(
        self, obs: Observation, site: str, ptype: str, avg_bytes: float, fetched_ok: bool
    ) -> str | None:
        """:meth:`__call__` given the page's site, page type, running average body
        size and whether it has had a good fetch (what ingest has in its arrays)."""
        normal = self.normals.body_bytes(site, ptype)
        if avg_bytes > 0 and fetched_ok:
            normal = avg_bytes
        body = obs.bytes_received or None
        found = classify_response(
            status=obs.status,
            error=obs.error,
            body_bytes=body,
            title=obs.title,
            body_excerpt=obs.body_excerpt,
            record=obs.record,
            normal_body_bytes=normal,
            required_fields=self.normals.required_fields(site, ptype),
            extra_markers=self.extra_markers,
        )
        if found is None and obs.status is not None and 200 <= obs.status < 300:
            # Once a site and page type has a normal, one good response in
            # ``sample_every`` is enough to keep it current (and cheap).
            key = (site, ptype)
            seen = self._seen.get(key, 0) + 1
            self._seen[key] = seen
            if seen <= self.warmup or seen % self.sample_every == 0:
                self.normals.update(site, ptype, body, obs.record)
        return found


@contextmanager
def fewer_collections(gen0: int = GC_GEN0) -> Iterator[None]:
    """Young cyclic-GC collections at most every ``gen0`` allocations, within the block.

    A batch allocates hundreds of thousands of tuples, floats and strings (no
    reference cycles) and every young collection walked them: measured about
    a fifth of ingest's CPU time at Python's default threshold of 700. The
    previous thresholds come back on exit; processes forked inside inherit it.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], gen0), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)


@fewer_collections()
def ingest_observations(
    store: Store,
    observations: Iterable[Observation],
    *,
    batch_size: int = DEFAULT_BATCH,
    classifier: Classifier | None = None,
    report: IngestReport | None = None,
    on_batch: Callable[[IngestReport], None] | None = None,
    now: float | None = None,
) -> IngestReport:
    """Store already-parsed observations in batches of ``batch_size``; given
    ``now``, one dated well after it is rejected (:func:`~recrawl.engine.pipeline.store_batch`)."""
    it = iter(observations)
    return _store_lists(
        store,
        ((items, None, None) for items in iter(lambda: list(islice(it, batch_size)), [])),
        batch_size=batch_size,
        classifier=classifier,
        report=report,
        on_batch=on_batch,
        now=now,
    )


def _store_lists(
    store: Store,
    lists: Iterable[tuple[list[Observation], ObservationColumns | None, LineNumbers | None]],
    *,
    batch_size: int,
    classifier: Classifier | None,
    report: IngestReport | None,
    on_batch: Callable[[IngestReport], None] | None,
    on_error: Callable[[InvalidObservation], None] | None = None,
    now: float | None = None,
) -> IngestReport:
    """Store observations that arrive in lists (with their columns, when the
    parser computed them, and their input line numbers, when they come from
    lines), in batches of about ``batch_size`` (whole lists: a batch ends with
    the list that fills it). An observation the store refuses (older than its
    page's pruned log) is a rejection, like a bad line, and names its line."""
    rep = report or IngestReport()
    batch: list[Observation] = []
    parts: list[ObservationColumns | None] = []
    numbers: list[tuple[int, LineNumbers | None]] = []  # each list's size and line numbers

    def line_of(i: int) -> int | None:
        for size, nums in numbers:
            if i < size:
                return None if nums is None else int(nums[i])
            i -= size
        return None

    def flush() -> None:
        given = [p for p in parts if p is not None]
        cols = ObservationColumns.concat(given) if len(given) == len(parts) else None
        res = store_batch(store, batch, classifier=classifier, columns=cols, now=now)
        rep._add(res.stored, res.duplicates, res.reordered_pages, res.outcomes)
        for i, why in res.refused:
            bad = InvalidObservation(f"{why} ({batch[i].url})", field="fetched_at", line=line_of(i))
            rep.rejected += 1
            if len(rep.errors) < MAX_KEPT_ERRORS:
                rep.errors.append(bad)
            if on_error is not None:
                on_error(bad)
        batch.clear()
        parts.clear()
        numbers.clear()
        if on_batch is not None:
            on_batch(rep)

    for items, cols, nums in lists:
        if not items:
            continue
        rep.read += len(items)
        batch += items
        parts.append(cols)
        numbers.append((len(items), nums))
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return rep


_Parsed = tuple[
    list[tuple[Any, ...]], list[tuple[int, str | None, str]], ObservationColumns, LineNumbers
]
_Chunk = tuple[list[Observation], list[InvalidObservation], ObservationColumns | None, LineNumbers]


def _parse_chunk(start: int, lines: list[str], rules: Mapping[str, FieldRule] | None) -> _Parsed:
    """Parse lines ``start + 1 ...`` in a worker process: observations as
    tuples, errors, the observations' columns for the store and their line numbers."""
    ok: list[Observation] = []
    at: list[int] = []
    bad: list[tuple[int, str | None, str]] = []
    for n, item in read_observations(lines, rules=rules):
        if isinstance(item, InvalidObservation):
            bad.append((start + n, item.field, item.reason))
        else:
            ok.append(item)
            at.append(start + n)
    nums = np.array(at, dtype=np.int64)
    return list(map(_as_tuple, ok)), bad, observation_columns(ok), nums


def _parse_workers() -> int:
    """Processes that parse while this one stores: the other cores, at most 3."""
    return max(1, min(3, (os.cpu_count() or 2) - 1))


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: leave when the process that started us is gone.

    A pool's workers wait on its queue forever; if the ingesting process is
    killed (``kill -9``, OOM killer) nobody tells them, so each checks once a
    second whether it has been re-parented and exits if so.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="recrawl-parent-watch", daemon=True).start()


def _parallel_parse(
    lines: Iterator[str], rules: Mapping[str, FieldRule] | None, workers: int, ahead: int
) -> Iterator[_Chunk]:
    """Parse JSONL in ``workers`` processes, chunk by chunk, yielding each chunk's
    observations, errors, columns and line numbers, in input order.

    At most ``ahead`` chunks are in flight (enough for the workers to parse
    the next batch while this process stores one), so memory does not grow
    with the input.
    """
    # fork: the workers start at once with recrawl already imported, and the
    # caller's script needs no ``if __name__ == "__main__"`` guard. They only
    # parse (no locks, no I/O), which is what makes forking a threaded process safe.
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        window: deque[Future[_Parsed]] = deque()
        start = 0
        while True:
            while len(window) < ahead:
                chunk = list(islice(lines, PARSE_CHUNK))
                if not chunk:
                    break
                window.append(pool.submit(_parse_chunk, start, chunk, rules))
                start += len(chunk)
            if not window:
                return
            ok, bad, cols, nums = window.popleft().result()
            yield (
                list(starmap(Observation, ok)),
                [InvalidObservation(reason, field=fld, line=n) for n, fld, reason in bad],
                cols,
                nums,
            )


def _serial_parse(
    lines: Iterable[str], fmt: Literal["jsonl", "csv"], rules: Mapping[str, FieldRule] | None
) -> Iterator[_Chunk]:
    """:func:`_parallel_parse`'s chunks, parsed in this process (the store computes the columns)."""
    items = read_observations(lines, fmt=fmt, rules=rules)
    while chunk := list(islice(items, PARSE_CHUNK)):
        ok = [x for _, x in chunk if not isinstance(x, InvalidObservation)]
        bad = [x for _, x in chunk if isinstance(x, InvalidObservation)]
        nums = [n for n, x in chunk if not isinstance(x, InvalidObservation)]
        yield ok, bad, None, np.array(nums, dtype=np.int64)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _collections_for_bulk(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """:func:`fewer_collections` at :data:`GC_GEN0_BULK` while ``fn`` runs (the
    parsing processes, forked inside, inherit it), unless a classifier of the
    caller's own is given: it may leave reference cycles (a parsed HTML tree
    with parent links), which must be collected as often as usual."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        c = kwargs.get("classifier")
        bulk = c is None or isinstance(c, ContentClassifier)
        with fewer_collections(GC_GEN0_BULK if bulk else GC_GEN0):
            return fn(*args, **kwargs)

    return run


@_collections_for_bulk
def ingest_lines(
    store: Store,
    lines: Iterable[str],
    *,
    fmt: Literal["jsonl", "csv"] = "jsonl",
    rules: Mapping[str, FieldRule] | None = None,
    batch_size: int = DEFAULT_BATCH,
    classifier: Classifier | None = None,
    on_batch: Callable[[IngestReport], None] | None = None,
    on_error: Callable[[InvalidObservation], None] | None = None,
    parallel: bool | None = None,
    now: float | None = None,
) -> IngestReport:
    """Parse and store JSONL (or CSV) lines; bad lines are reported, good ones stored.

    A large JSONL input (more than ``2 * PARSE_CHUNK`` lines) is parsed in
    other processes while this one stores (``parallel=False`` to never do so).

    ``on_batch`` is called after each stored batch (for progress); ``on_error``
    for each rejected line, with the error naming its line and field. Given
    ``now``, a line dated well after it is rejected
    (:func:`~recrawl.engine.pipeline.store_batch`).
    """
    rep = IngestReport()
    chunks: Iterable[_Chunk]
    it = iter(lines)
    head = list(islice(it, 2 * PARSE_CHUNK))
    if (
        fmt == "jsonl"
        and parallel is not False
        and len(head) == 2 * PARSE_CHUNK
        and "fork" in multiprocessing.get_all_start_methods()
    ):
        # a large input: parse in other processes while this one stores
        workers = _parse_workers()
        ahead = 2 * workers + -(-batch_size // PARSE_CHUNK)
        chunks = _parallel_parse(chain(head, it), rules, workers, ahead)
    else:
        chunks = _serial_parse(chain(head, it), fmt, rules)

    def good() -> Iterator[tuple[list[Observation], ObservationColumns | None, LineNumbers]]:
        for ok, bad, cols, nums in chunks:
            for item in bad:
                rep.rejected += 1
                if len(rep.errors) < MAX_KEPT_ERRORS:
                    rep.errors.append(item)
                if on_error is not None:
                    on_error(item)
            yield ok, cols, nums

    return _store_lists(
        store, good(), batch_size=batch_size, classifier=classifier, report=rep,
        on_batch=on_batch, on_error=on_error, now=now,
    )  # fmt: skip
