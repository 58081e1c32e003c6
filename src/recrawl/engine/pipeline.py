"""The ingest pipeline: a batch of observations folded into pages, the log and the buckets.

This is where the store and the math meet. The store offers data operations
inside one write transaction (:meth:`recrawl.store.SQLStore.writing`, a
:class:`~recrawl.store.WriteTx`); this module decides what to do with them:
which reports are new, the pages' state after the batch
(:func:`~recrawl.estimate.fold.fold_batch`), the outcomes that depended on a
report arriving late (a page re-folded from its log with
:func:`~recrawl.estimate.pagestate.apply_observation`), the quiet stretches a
trusted hint source vouches for (:func:`~recrawl.estimate.hints.quiet_until`),
and the canary checks a reporter left undone. :func:`store_batch` is the one
way a batch is stored (the library, the CLI and the service all go through
it); :func:`prune_log` folds old log rows into checkpoints and deletes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from itertools import groupby
from operator import itemgetter
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from recrawl.estimate.fold import QuietUntil, fold_batch
from recrawl.estimate.hints import quiet_until, trusted_lags
from recrawl.estimate.pagestate import apply_observation, fixed_outcome
from recrawl.health.canary import canary_mismatches
from recrawl.observe.batch import CANARY_CODES, ObservationColumns, observation_columns
from recrawl.observe.observation import Observation, with_keys
from recrawl.records.buckets import BUCKET_SECONDS, OUTCOMES
from recrawl.records.pages import CODE, CONTENT_OUTCOMES, Classifier, PageState
from recrawl.records.signals import spend_rows
from recrawl.store import BatchResult, PruneReport, Store, WriteTx
from recrawl.store.logrows import PRUNE_CHUNK_ROWS, from_checkpoint, logged_observation

__all__ = ["prune_log", "store_batch"]

_REACHED: Final = np.array([o in CONTENT_OUTCOMES for o in OUTCOMES])  # by outcome code
_NEW: Final = CODE["new"]

VouchLog = tuple[
    NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
    NDArray[np.float64],
]  # fmt: skip
"""Hint-log rows for :func:`~recrawl.estimate.hints.quiet_until`: page, lastmod, first seen, lag, listed."""
_NO_VOUCHES: Final[VouchLog] = (
    np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
)  # fmt: skip

_TrustedPages = tuple[
    NDArray[np.int64], NDArray[np.bool_], dict[int, str], dict[tuple[str, str], float]
]
"""Pages' ids, which are on a trusted site, their sites by id, the trusted pairs' lags."""


_trusted_lags: Final = lru_cache(maxsize=8)(trusted_lags)
"""The kept verdict's trusted ``(site, source)`` pairs and lags, by its JSON (read once)."""


def _bkey(key: int) -> bytes:
    """An observation's key as the store keeps it (the first 8 bytes of its idempotency key)."""
    return key.to_bytes(8, "big", signed=True)


def _iso(t: float) -> str:
    """Unix seconds as an ISO-8601 UTC time (to the second), for messages."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _log_rows(log: VouchLog, at: NDArray[np.intp] | slice) -> VouchLog:
    """The rows ``at`` of ``log``."""
    return (log[0][at], log[1][at], log[2][at], log[3][at], log[4][at])


def failed_first(
    codes: NDArray[np.int64],
    pidx: NDArray[np.intp],
    first: NDArray[np.intp],
    unreached: NDArray[np.bool_],
) -> NDArray[np.bool_]:
    """Which fetches of a batch are first fetches other than ``new``: those that
    failed before their page's first success, and that success itself when a
    reporter's outcome (a 304, ``unchanged``) stands for ``new``.

    ``codes`` are the outcome codes of a batch sorted by page (``pidx``, each
    page's rows starting at ``first[page]``) then time; ``unreached[page]``:
    the page had no successful fetch before the batch. A success is a content
    outcome (the fetch reached the page).
    """
    reached = _REACHED[codes]
    before = np.cumsum(reached) - reached  # successes earlier in the batch
    before -= before[first][pidx]  # ... earlier in the same page
    out: NDArray[np.bool_] = (codes != _NEW) & unreached[pidx] & (before == 0)
    return out


# -- storing a batch -----------------------------------------------------------------------


def store_batch(
    store: Store,
    observations: Sequence[Observation],
    *,
    classifier: Classifier | None = None,
    columns: ObservationColumns | None = None,
    now: float | None = None,
) -> BatchResult:
    """Store ``observations`` in one transaction of ``store``: each new report
    goes to the log, its page's state and its bucket; a report already stored
    (same idempotency key) is counted as a duplicate; one older than its page's
    pruned log is refused (:attr:`~recrawl.store.BatchResult.refused`), and so,
    given ``now`` (unix seconds), is one fetched more than
    :data:`FUTURE_TOLERANCE_S` after it (a wrong clock or date: it would stand
    as its page's latest fetch until then).
    ``classifier`` tells block pages and soft blocks from content; ``columns``,
    when given, are the observations' columns as the parser computed them."""
    result = BatchResult()
    if not observations:
        return result
    if columns is None:  # given columns come from parsed, keyed observations
        with_keys(observations)
    with store.writing() as tx:
        _store(tx, observations, columns, classifier, result, now)
    return result


FUTURE_TOLERANCE_S = 3600.0
"""How far after the ingesting clock's now (seconds) a report may be dated:
clock skew between fetchers and the store. Later, it is refused."""


def _refuse_future(
    tx: WriteTx,
    columns: ObservationColumns,
    sel: NDArray[np.intp],
    now: float,
    result: BatchResult,
) -> NDArray[np.intp]:
    """``sel`` (indexes of new reports) without those fetched more than
    :data:`FUTURE_TOLERANCE_S` after ``now``: they go to ``result.refused``,
    their keys given back (sent again later, one is judged again)."""
    t = columns.fetched_at
    late = sel[t[sel] > now + FUTURE_TOLERANCE_S]
    for i in late.tolist():
        result.refused.append(
            (
                i,
                f"fetched at {_iso(float(t[i]))}, more than {FUTURE_TOLERANCE_S / 3600:g} h "
                f"after now ({_iso(now)}): a fetcher's clock or the date is wrong",
            )
        )
    tx.forget_keys(columns.key[late].tolist())
    return sel[~np.isin(sel, late)]


def _refuse_pruned(
    tx: WriteTx,
    observations: Sequence[Observation],
    columns: ObservationColumns,
    sel: NDArray[np.intp],
    horizon: float,
    result: BatchResult,
) -> NDArray[np.intp]:
    """``sel`` (indexes of new reports) without those fetched before the last
    pruned fetch of their page: putting one in time order would need the
    deleted rows. They go to ``result.refused`` and their keys are given
    back, so that the same report is refused again rather than taken for a
    duplicate. Only reports older than the store's ``pruned_until`` (the latest
    checkpoint of any page) are looked at."""
    t = columns.fetched_at
    old = sel[t[sel] < horizon].tolist()
    urls = list(dict.fromkeys(observations[i].url for i in old))
    ids = dict(zip(urls, tx.known_ids(urls), strict=True))
    until = tx.checkpoint_until([i for i in ids.values() if i is not None])
    refused: list[int] = []
    for i in old:
        pid = ids[observations[i].url]
        limit = None if pid is None else until.get(pid)
        if limit is not None and t[i] < limit:
            refused.append(i)
            result.refused.append(
                (
                    i,
                    f"fetched at {_iso(float(t[i]))}, before {_iso(limit)}, the last of "
                    "its page's fetches whose log was pruned (recrawl prune): it can no "
                    "longer be put in time order",
                )
            )
    if not refused:
        return sel
    tx.forget_keys(columns.key[refused].tolist())
    return sel[~np.isin(sel, refused)]


def _store(
    tx: WriteTx,
    observations: Sequence[Observation],
    columns: ObservationColumns | None,
    classifier: Classifier | None,
    result: BatchResult,
    now: float | None = None,
) -> None:
    if columns is None:
        columns = observation_columns(observations)
    elif len(columns) != len(observations):
        raise ValueError("columns must hold one row per observation")
    # each key's first report, in key order (B-tree friendly)
    ukeys, first_at = np.unique(columns.key, return_index=True)
    result.duplicates += len(observations) - len(ukeys)
    fresh = tx.claim_keys(ukeys.tolist())
    result.duplicates += len(ukeys) - len(fresh)
    if not fresh:
        result.known.update(_bkey(k) for k in ukeys.tolist())
        return
    if len(fresh) < len(ukeys):
        is_fresh = np.isin(ukeys, np.fromiter(fresh, np.int64, len(fresh)))
        result.known.update(_bkey(k) for k in ukeys[~is_fresh].tolist())
        first_at = first_at[is_fresh]
    sel = np.sort(first_at)  # the new reports, in arrival order
    if now is not None and float(columns.fetched_at[sel].max()) > now + FUTURE_TOLERANCE_S:
        sel = _refuse_future(tx, columns, sel, now, result)
        if not len(sel):
            return
    horizon = tx.pruned_until()
    if horizon is not None and float(columns.fetched_at[sel].min()) < horizon:
        sel = _refuse_pruned(tx, observations, columns, sel, horizon, result)
        if not len(sel):
            return
    n = len(sel)
    result.stored = n
    hl = tx.half_life_days

    # each page's slot: the order of its first report; then sort by page and
    # time (ties keep their arrival order)
    if n == len(observations):  # (then sel is every index, in order)
        url_of = [o.url for o in observations]
    else:
        url_of = [observations[i].url for i in sel.tolist()]
    slot = dict(zip(dict.fromkeys(url_of), range(n), strict=False))  # (fewer pages than n)
    pidx = np.fromiter(map(slot.__getitem__, url_of), dtype=np.intp, count=n)
    order = np.lexsort((columns.fetched_at[sel], pidx))
    at = sel[order]
    todo = [observations[i] for i in at.tolist()]
    cols = columns.take(at)
    pidx = pidx[order]
    t = cols.fetched_at
    urls = list(slot)
    first = np.flatnonzero(np.r_[True, pidx[1:] != pidx[:-1]])  # each page's earliest

    known = tx.known_ids(urls)
    created = [j for j, i in enumerate(known) if i is None]  # slot j starts at first[j]
    if created:
        for j, pid in zip(created, tx.new_page_ids([urls[j] for j in created]), strict=True):
            known[j] = pid
    page_id = np.array(known, dtype=np.int64)
    pages = tx.load_pages(urls, page_id, created, [todo[i] for i in first.tolist()])
    unreached = np.isnan(pages.last_ok)  # never fetched successfully before this batch
    vouch = _quiet_until(tx, page_id, pages.site.tolist())

    # A report older than its page's last fetch: the page is re-folded from its log.
    late = ~np.isnan(pages.last_fetch) & (t[first] < pages.last_fetch)
    rebuild = np.flatnonzero(late)
    states: dict[int, PageState] = {}
    if len(rebuild):
        in_order = ~late[pidx]
        keep = np.flatnonzero(in_order)
        codes = np.empty(n, dtype=np.int64)
        fixed: list[str | None] = [None] * n
        c_in, f_in = fold_batch(
            pages, pidx[keep], [todo[i] for i in keep.tolist()],
            classifier=classifier, half_life_days=hl,
            columns=cols.take(keep), quiet_until=vouch,
        )  # fmt: skip
        codes[keep] = c_in
        for i, f in zip(keep.tolist(), f_in, strict=True):
            fixed[i] = f
        states = dict(zip(rebuild.tolist(), pages.states(rebuild), strict=True))
        for i in np.flatnonzero(~in_order).tolist():
            fx = fixed_outcome(todo[i], states[int(pidx[i])], classifier)
            fixed[i] = fx
            codes[i] = CODE[fx or "unchanged"]
    else:
        codes, fixed = fold_batch(
            pages, pidx, todo, classifier=classifier, half_life_days=hl,
            columns=cols, quiet_until=vouch,
        )  # fmt: skip
    first_failed = failed_first(codes, pidx, first, unreached)
    if len(rebuild):  # a re-folded page's are counted by _rebuild_page
        first_failed[late[pidx]] = False
    names = list(map(OUTCOMES.__getitem__, codes.tolist()))
    counts = result.outcomes
    for c, k in zip(*np.unique(codes, return_counts=True), strict=True):
        counts[OUTCOMES[int(c)]] = counts.get(OUTCOMES[int(c)], 0) + int(k)

    pid = page_id[pidx].tolist()
    tx.append_observations(
        list(zip(cols.key.tolist(), pid, t.tolist(), names, fixed, cols.log, strict=True))
    )
    leases = [o.lease_id for o in todo if o.lease_id is not None]
    if leases:
        tx.release_leases(leases)
    tx.add_signal_spend(spend_rows(todo, names))

    adjust: dict[tuple[str, str, str, int], list[float]] = {}
    ends = np.r_[first[1:], n]  # rows are sorted by page: page j's are first[j]:ends[j]
    quiet = (
        _page_quiet(tx, page_id[rebuild], pages.site[rebuild].tolist()) if len(rebuild) else None
    )
    for pos, j in enumerate(rebuild.tolist()):
        state = states[j]
        batch_keys = set(cols.key[first[j] : ends[j]].tolist())
        _rebuild_page(
            tx, state, int(page_id[j]), batch_keys, adjust, counts,
            None if quiet is None else quiet(pos),
        )  # fmt: skip
        tx.update_page(int(page_id[j]), state)
    result.reordered_pages = len(rebuild)
    tx.write_pages(page_id, pages, created, rebuild.tolist())
    moves = {
        int(page_id[pidx[i]]): (o.moved_to, o.status)
        for i, o in enumerate(todo)  # (each page's latest last)
        if o.moved_to is not None and o.moved_to != o.url
    }
    if moves:
        tx.move_pages(moves)
    if tx.maintain_buckets:
        canary = _canary_results(tx, todo, cols.canary, names)
        tx.add_to_buckets(todo, cols, pidx, codes, page_id, pages, canary, first_failed, adjust)


def _canary_results(
    tx: WriteTx, todo: Sequence[Observation], reported: NDArray[Any], names: Sequence[str]
) -> NDArray[Any]:
    """Each fetch's canary result as :data:`~recrawl.observe.batch.CANARY_CODES`:
    the reporter's own check when it sent one, else the check of a declared
    canary on a fetch that reached the content, else none."""
    canaries = tx.canaries()
    if not canaries:
        return reported
    out = np.array(reported, copy=True)
    ok, mismatch = CANARY_CODES["ok"], CANARY_CODES["mismatch"]
    for i in np.flatnonzero(reported == 0).tolist():
        o = todo[i]
        if o.record is not None and o.url in canaries and names[i] in CONTENT_OUTCOMES:
            out[i] = mismatch if canary_mismatches(o.record, canaries[o.url]) else ok
    return out


# -- quiet stretches vouched for by trusted hint sources -----------------------------------


def _trusted_pages(
    tx: WriteTx, page_id: NDArray[np.int64] | list[int], site: list[str]
) -> _TrustedPages | None:
    """For the pages ``page_id`` (on sites ``site``): their ids, which are on a
    site where the kept verdict trusts a hint source both ways, the site of
    each of those (by id), and the trusted ``(site, source)`` pairs with their
    lags (:func:`~recrawl.estimate.hints.trusted_lags`); None when no page is."""
    raw = tx.hint_verdict()
    if raw is None:
        return None
    pairs = _trusted_lags(raw)
    sites = {s for s, _ in pairs}
    on = np.fromiter((s in sites for s in site), dtype=bool, count=len(site))
    if not on.any():
        return None
    ids = np.asarray(page_id, dtype=np.int64)
    return ids, on, {int(ids[j]): site[j] for j in np.flatnonzero(on).tolist()}, pairs


def _vouch_log(
    tx: WriteTx,
    pids: NDArray[np.int64],
    since: NDArray[np.float64] | None,
    site_of: dict[int, str],
    pairs: dict[tuple[str, str], float],
) -> VouchLog:
    """The trusted sources' hint-log rows of the pages ``pids`` (see
    :meth:`~recrawl.store.WriteTx.vouch_rows`) with each row's lag, those of
    untrusted pairs left out."""
    got: list[tuple[int, float, float, float, float]] = []
    for p, src, lm, fs, listed in tx.vouch_rows(pids, since):
        lag = pairs.get((site_of[p], src))
        if lag is not None:
            got.append((p, lm, fs, lag, listed))
    if not got:
        return _NO_VOUCHES
    p_, lm_, fs_, lag_, listed_ = zip(*got, strict=True)
    return (
        np.array(p_, dtype=np.int64), np.array(lm_, dtype=np.float64),
        np.array(fs_, dtype=np.float64), np.array(lag_, dtype=np.float64),
        np.array(listed_, dtype=np.float64),
    )  # fmt: skip


def _quiet_until(tx: WriteTx, page_id: NDArray[np.int64], site: list[str]) -> QuietUntil | None:
    """The fold's ``quiet_until`` for the pages ``page_id`` (on sites ``site``;
    rows: their positions), from the log of the hint sources the kept
    verdict trusts both ways on each page's site
    (:func:`~recrawl.estimate.hints.quiet_until`); None when none is. It reads the log
    when called, for the revisits asked about (the fold asks only of those
    that found a change), and only the rows after each one's previous fetch."""
    trusted = _trusted_pages(tx, page_id, site)
    if trusted is None:
        return None
    ids, on, site_of, pairs = trusted

    def lazy(
        rows: NDArray[np.intp], prev: NDArray[np.float64], at: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        out = np.full(len(rows), np.nan)
        sel = np.flatnonzero(on[rows])
        if len(sel):
            pids = ids[rows[sel]]
            log = _vouch_log(tx, pids, np.stack([prev[sel], at[sel]]), site_of, pairs)
            out[sel] = quiet_until(pids, prev[sel], at[sel], *log)
        return out

    return lazy


def _page_quiet(
    tx: WriteTx, page_id: NDArray[np.int64] | list[int], site: list[str]
) -> Callable[[int], Callable[[float, float], float]] | None:
    """For a fold that takes one revisit at a time (a re-fold, a checkpoint):
    per page (its position in ``page_id``), the ``quiet_until(prev, at)`` of
    :func:`~recrawl.estimate.pagestate.apply_observation`, from all the page's rows of
    the trusted sources' log, read for every page at once. None when no
    source is trusted on the pages' sites."""
    trusted = _trusted_pages(tx, page_id, site)
    if trusted is None:
        return None
    ids, on, site_of, pairs = trusted
    got = _vouch_log(tx, ids[on], None, site_of, pairs)
    log = _log_rows(got, np.argsort(got[0], kind="stable"))

    def of_page(row: int) -> Callable[[float, float], float]:
        pid = ids[row : row + 1]
        a, b = np.searchsorted(log[0], [pid[0], pid[0] + 1])
        mine = _log_rows(log, slice(int(a), int(b)))
        return lambda prev, at: float(quiet_until(pid, np.array([prev]), np.array([at]), *mine)[0])

    return of_page


# -- re-folding a page from its log -------------------------------------------------------


def _rebuild_page(
    tx: WriteTx,
    page: PageState,
    page_id: int,
    batch_keys: set[int],
    adjust: dict[tuple[str, str, str, int], list[float]],
    counts: dict[str, int],
    vouch: Callable[[float, float], float] | None = None,
) -> None:
    """Re-fold a page's whole log in time order, fixing outcomes that depended on order.

    The fold starts from the page's checkpoint when its log was pruned (the
    state the deleted rows left), else from a reset page. The bucket
    corrections go to ``adjust``, keyed by (site, page_type, route, start), as
    ``(outcome deltas by name, failed-first delta)`` folded into one vector by
    the store (:meth:`~recrawl.store.WriteTx.add_to_buckets`): the log's
    earlier rows were counted by the order of their stored outcomes, this
    batch's rows (``batch_keys``) not yet.
    """
    cp = tx.page_checkpoint(page_id)
    # by the stored outcomes of the earlier rows (those pruned included)
    reached_before = from_checkpoint(page, cp)
    rows = tx.page_log(page_id)
    fixes: list[tuple[str, int]] = []
    if rows:  # first_seen becomes the earliest fetch if that is earlier
        page.first_seen = min(page.first_seen, rows[0][2])
    hl = tx.half_life_days
    n_out = len(OUTCOMES)
    for key, seq, t, fixed, old, rest in rows:
        o = logged_observation(page, t, rest)
        unreached = page.last_ok is None
        new = apply_observation(page, o, fixed, half_life_days=hl, quiet_until=vouch)
        was_failed_first = False
        if key not in batch_keys:
            was_failed_first = not reached_before and old != "new"
            reached_before = reached_before or old in CONTENT_OUTCOMES
        first_failed = unreached and new != "new"
        if new == old and first_failed == was_failed_first:
            continue
        bk = (page.site, page.page_type, o.route, int(t // BUCKET_SECONDS) * BUCKET_SECONDS)
        d = adjust.get(bk)
        if d is None:
            d = adjust[bk] = [0.0] * (n_out + 1)  # outcome deltas, then failed-first
        d[n_out] += int(first_failed) - int(was_failed_first)
        if new != old:
            fixes.append((new, seq))
            d[CODE[old]] -= 1
            d[CODE[new]] += 1
            counts[old] = counts.get(old, 0) - 1
            counts[new] = counts.get(new, 0) + 1
    tx.set_outcomes(fixes)


# -- pruning the log ---------------------------------------------------------------------


def prune_log(
    store: Store,
    before: float,
    *,
    on_progress: Callable[[PruneReport], None] | None = None,
    chunk_rows: int = PRUNE_CHUNK_ROWS,
    dry_run: bool = False,
) -> PruneReport:
    """Delete the log's observations fetched before ``before`` (unix seconds).

    Each page that had some gets a checkpoint: its state after them,
    folded in the log's order from its previous checkpoint (else from a
    reset page), which later re-folds start from, so a late report leaves
    the page as the whole log would have. The pages, the buckets (stats,
    health) and the observations' keys (deduplication) stay; a report
    fetched before its page's last pruned fetch is refused at ingest
    (:attr:`~recrawl.store.BatchResult.refused`). The hint log of those pages loses the
    ``lastmod`` values no revisit left in the log can fall on
    (:attr:`~recrawl.store.PruneReport.hint_log_removed`); the latest hint of each page
    and source stays. One transaction per about ``chunk_rows``
    observations (whole pages): a crash leaves every page either pruned or
    untouched, and running it again finishes the work. ``on_progress`` is
    called after each transaction. With ``dry_run``, only counts what
    would go (``to_remove``, ``pages_to_checkpoint``) and changes nothing.
    """
    report = PruneReport(before=before)
    counts = store.log_counts_before(before)
    report.to_remove = sum(c for _, c in counts)
    report.pages_to_checkpoint = len(counts)
    if dry_run:
        return report
    chunk: list[int] = []
    rows = 0
    for i, (page, c) in enumerate(counts):
        chunk.append(page)
        rows += c
        if rows >= chunk_rows or i == len(counts) - 1:
            with store.writing() as tx:
                done, removed, until = _checkpoint_pages(tx, chunk, before)
                hints_removed = tx.prune_hint_log(chunk)
                if done:
                    tx.pruned(until)
            report.pages_checkpointed += done
            report.observations_removed += removed
            report.hint_log_removed += hints_removed
            chunk, rows = [], 0
            if on_progress is not None:
                on_progress(report)
    return report


def _checkpoint_pages(tx: WriteTx, pages: list[int], before: float) -> tuple[int, int, float]:
    """Fold the log rows of ``pages`` fetched before ``before`` onto their
    checkpoints, write those and delete the rows (in ``tx``). Returns the pages
    checkpointed, the rows deleted and the latest ``until`` written."""
    cps, state, rows = tx.log_before(pages, before)
    out: list[tuple[int, float, bool, PageState]] = []
    latest = -math.inf
    hl = tx.half_life_days
    # the revisits' quiet stretches, as the ingest's fold took them
    ids = list(state)
    row_of = {pid: j for j, pid in enumerate(ids)}
    quiet = _page_quiet(tx, ids, [state[p].site for p in ids])
    for pid, group in groupby(rows, key=itemgetter(0)):
        page = state.get(pid)
        if page is None:  # a row of no page (never written by recrawl): left alone
            continue
        cp = cps.get(pid)
        reached = from_checkpoint(page, None if cp is None else cp[1:])
        t = -math.inf
        page_quiet = None if quiet is None else quiet(row_of[pid])
        for _, t, fixed, old, rest in group:
            if t < page.first_seen:
                page.first_seen = t
            apply_observation(
                page,
                logged_observation(page, t, rest),
                fixed,
                half_life_days=hl,
                quiet_until=page_quiet,
            )
            reached = reached or old in CONTENT_OUTCOMES
        until = max(t, -math.inf if cp is None else cp[0])
        out.append((pid, until, reached, page))
        latest = max(latest, until)
    removed = tx.write_checkpoints(out, before)
    return len(out), removed, latest
