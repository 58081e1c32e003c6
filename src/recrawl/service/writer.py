"""The service's single writer: group commit of observation batches, leases first.

Observation requests and lease requests are jobs for one thread, the only one
that writes to the store on behalf of the HTTP edge:

* observation batches waiting together are coalesced into one
  ``store.ingest`` call (one transaction), whole requests only; each
  request's future resolves only after the transaction holding its
  observations has committed, so an acknowledged observation survives a
  crash of the process;
* priority jobs (lease claims) run before the next group, so a lease waits
  for at most the one transaction in progress, never for the queue of
  batches behind it;
* a group holds about as many observations as the store commits in
  ``group_s`` seconds (measured as it goes, at most ``group_max``): that
  bounds a lease's wait, and groups grow by themselves as the store gets
  faster.

One thread also spares the store's lock and the interpreter lock the convoy
of many request threads taking turns at them.

The store answers for the whole group (``stored``, ``duplicates``);
:func:`split_result` shares that out per request, exactly unless some
observations of several requests of the group were already in the store
(a retried batch next to a new one): see its docstring.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from recrawl.observe.observation import Observation
from recrawl.store import BatchResult

__all__ = ["Committed", "Writer", "split_result"]

T = TypeVar("T")
_log = logging.getLogger("recrawl.service")


@dataclass(frozen=True, slots=True)
class Committed:
    """What the store did with one request's observations: ``stored`` new ones,
    ``duplicates`` skipped (already stored, or repeated in the group), and
    ``refused`` ``(index in the request's observations, why)``: older than
    their page's pruned log."""

    stored: int
    duplicates: int
    refused: tuple[tuple[int, str], ...] = ()


@dataclass(slots=True)
class _Batch:
    observations: Sequence[Observation]
    future: Future[Committed]


@dataclass(slots=True)
class _Job:
    fn: Callable[[], Any]
    future: Future[Any]


def split_result(batches: Sequence[Sequence[Observation]], result: BatchResult) -> list[Committed]:
    """Share one group's :class:`~recrawl.store.BatchResult` out per batch.

    An observation whose key appeared earlier in the group (in the same batch
    or an earlier one) is a duplicate of that batch, as the store would have
    answered had the batches come one by one; so is one whose key the store
    already held (``result.known``).
    """
    if len(batches) == 1 and not result.refused:
        return [Committed(result.stored, result.duplicates)]
    # a refused report's key was given back: every copy of it is refused too
    flat = [o for batch in batches for o in batch]
    refused_keys = {flat[i].key[:8]: why for i, why in result.refused}
    seen: set[bytes] = set()
    known = result.known
    out = []
    for batch in batches:
        stored = 0
        refused = []
        for j, o in enumerate(batch):
            k = o.key[:8]
            if k in refused_keys:
                refused.append((j, refused_keys[k]))
            elif k not in seen:
                seen.add(k)
                stored += k not in known
        out.append(Committed(stored, len(batch) - stored - len(refused), tuple(refused)))
    return out


class Writer:
    """One thread that commits observation batches in groups and runs priority jobs.

    Parameters
    ----------
    ingest
        Stores observations in one transaction, durable when it returns
        (``store.ingest`` with the service's classifier).
    group_s
        Target duration of one group transaction, seconds: a group takes the
        observations the store committed in that time of late (at least one
        request).
    group_max
        Most observations in one group transaction; a larger single request
        is still one transaction of its own.
    on_commit
        Called in the writer thread for each batch after its transaction
        committed and before its future resolves (the service's counters).
    idle_exit_s
        The thread exits after this many idle seconds and starts again with
        the next job, so a stopped server leaves no thread behind.
    """

    def __init__(
        self,
        ingest: Callable[[Sequence[Observation]], BatchResult],
        *,
        group_s: float = 0.05,
        group_max: int = 50_000,
        on_commit: Callable[[Sequence[Observation], Committed], None] | None = None,
        idle_exit_s: float = 5.0,
    ) -> None:
        if group_max < 1:
            raise ValueError("group_max must be at least 1")
        self._ingest = ingest
        self.group_s = group_s
        self.group_max = group_max
        self._s_per_obs: float | None = None  # seconds per observation committed, smoothed
        self._on_commit = on_commit
        self.idle_exit_s = idle_exit_s
        self._cv = threading.Condition(threading.Lock())
        self._batches: deque[_Batch] = deque()
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Transactions committed and the observations they held (for tuning).
        self.groups = 0
        self.grouped_observations = 0

    @property
    def running(self) -> bool:
        """The writer thread is alive (it leaves after ``idle_exit_s`` idle seconds)."""
        with self._cv:
            return self._thread is not None

    def submit_batch(self, observations: Sequence[Observation]) -> Future[Committed]:
        """Queue ``observations`` for the next group; the future resolves once they
        are committed (or raises what the store raised)."""
        fut: Future[Committed] = Future()
        self._put(lambda: self._batches.append(_Batch(observations, fut)))
        return fut

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` in the writer thread before the next group; its result or
        exception resolves the future."""
        fut: Future[T] = Future()
        self._put(lambda: self._jobs.append(_Job(fn, fut)))
        return fut

    def close(self) -> None:
        """Finish what is queued, then stop the thread (new jobs are refused)."""
        with self._cv:
            self._closed = True
            thread = self._thread
            self._cv.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def group_size(self) -> int:
        """Observations the next group may hold: what the store committed in
        ``group_s`` seconds of late, at most ``group_max``."""
        if self._s_per_obs is None:
            return 1  # one request, to measure
        return max(1, min(self.group_max, int(self.group_s / self._s_per_obs)))

    def _timed_ingest(self, observations: Sequence[Observation]) -> BatchResult:
        t = time.perf_counter()
        result = self._ingest(observations)
        if observations:
            per = (time.perf_counter() - t) / len(observations)
            prev = self._s_per_obs
            self._s_per_obs = per if prev is None else 0.7 * prev + 0.3 * per
        return result

    def _put(self, enqueue: Callable[[], None]) -> None:
        with self._cv:
            if self._closed:
                raise RuntimeError("the writer is closed")
            enqueue()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="recrawl-writer", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        try:
            while self._step():
                pass
        finally:
            with self._cv:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _step(self) -> bool:
        """Run the waiting jobs, then commit one group; False when idle long enough."""
        with self._cv:
            if not self._jobs and not self._batches:
                if not self._closed:
                    self._cv.wait(self.idle_exit_s)
                if not self._jobs and not self._batches:
                    return False
            jobs = list(self._jobs)
            self._jobs.clear()
            group: list[_Batch] = []
            n = 0
            cap = self.group_size()
            while self._batches and (not group or n + len(self._batches[0].observations) <= cap):
                b = self._batches.popleft()
                group.append(b)
                n += len(b.observations)
        # Jobs first; then the group, even when more jobs came meanwhile, so that a
        # stream of leases cannot starve the reports.
        for job in jobs:
            if job.future.set_running_or_notify_cancel():
                try:
                    job.future.set_result(job.fn())
                except BaseException as exc:
                    job.future.set_exception(exc)
        live = [b for b in group if b.future.set_running_or_notify_cancel()]
        try:
            self._commit(live)
        except BaseException as exc:  # a bug here must not leave requests waiting forever
            for b in live:
                if not b.future.done():
                    b.future.set_exception(exc)
            raise
        return True

    def _commit(self, group: list[_Batch]) -> None:
        if not group:
            return
        batches = [b.observations for b in group]
        try:
            result = self._timed_ingest([o for obs in batches for o in obs])
        except BaseException as exc:
            if len(group) == 1:
                group[0].future.set_exception(exc)
                return
            # The transaction rolled back: commit each request alone, so one bad
            # request fails alone.
            _log.warning("a group commit failed (%s); committing its requests one by one", exc)
            for b in group:
                self._commit_one(b)
            return
        self.groups += 1
        self.grouped_observations += sum(len(obs) for obs in batches)
        for b, share in zip(group, split_result(batches, result), strict=True):
            self._resolve(b, share)

    def _commit_one(self, b: _Batch) -> None:
        try:
            result = self._timed_ingest(b.observations)
        except BaseException as exc:
            b.future.set_exception(exc)
            return
        self.groups += 1
        self.grouped_observations += len(b.observations)
        self._resolve(b, Committed(result.stored, result.duplicates))

    def _resolve(self, b: _Batch, share: Committed) -> None:
        if self._on_commit is not None:
            try:
                self._on_commit(b.observations, share)
            except Exception:  # counters only: the observations are committed
                _log.exception("counting a committed batch failed")
        b.future.set_result(share)
