"""The page-state fold of a whole batch at once: :func:`~recrawl.pagestate.apply_observation`, vectorised.

A batch holds many pages, each with a few observations. Sorted by page and
time, the batch is folded in *rounds*: round ``r`` applies the ``r``-th
observation of every page at once, so each numpy operation touches many pages
and no page twice, and the result is exactly that of applying the
observations one by one in time order (tests check it against
:func:`~recrawl.pagestate.apply_observation`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import Final

import numpy as np
from numpy.typing import NDArray

from recrawl.estimate.pagestate import fixed_outcome, status_outcome
from recrawl.estimate.rates import DEFAULT_HALF_LIFE_DAYS, fold_revisits
from recrawl.observe.batch import ObservationColumns, observation_columns
from recrawl.observe.observation import Observation
from recrawl.records.buckets import OUTCOMES
from recrawl.records.pages import (
    CODE,
    CONTENT_OUTCOMES,
    MUTABLE_FIELDS,
    NUTCH_MAX_S,
    NUTCH_MIN_S,
    ROW_FIELDS,
    Classifier,
    PageArrays,
    new_page_row,
    object_array,
    page_from_row,
    page_row,
)

__all__ = [
    "CODE",
    "MUTABLE_FIELDS",
    "ROW_FIELDS",
    "PageArrays",
    "QuietUntil",
    "fold_batch",
    "new_page_row",
    "page_from_row",
    "page_rounds",
    "page_row",
]

FloatArray = NDArray[np.float64]
QuietUntil = Callable[[NDArray[np.intp], FloatArray, FloatArray], FloatArray]
"""``quiet_until(rows, prev, at)``: see :func:`fold_batch`."""

_CONTENT: Final = np.array([o in CONTENT_OUTCOMES for o in OUTCOMES])
_NEW: Final = CODE["new"]
_CHANGED: Final = CODE["changed"]
_UNCHANGED: Final = CODE["unchanged"]
_GONE: Final = CODE["gone"]
_SOFT: Final = CODE["soft_block"]
_HARD: Final = CODE["hard_block"]
_ERROR: Final = CODE["error"]
_NOT_MODIFIED: Final = CODE["not_modified"]
_DAY: Final = 86400.0
_outcome_of: Final = attrgetter("outcome")
_CONTENT_PENDING: Final = -1  # a 2xx whose outcome depends on the previous fetch
_ASK_CLASSIFIER: Final = -2  # decided by the classifier, in the page's time order


def _static_codes(
    obs: Sequence[Observation], status: NDArray[np.int64], classifier: Classifier | None
) -> NDArray[np.int64]:
    """What :func:`~recrawl.pagestate.fixed_outcome` decides without the page (codes);
    ``status`` is :attr:`~recrawl.batch.ObservationColumns.status` of ``obs``."""
    n = len(obs)
    out = np.full(n, _ERROR, dtype=np.int64)
    out[status == 304] = _NOT_MODIFIED
    out[(status == 403) | (status == 429)] = _HARD
    out[(status == 404) | (status == 410)] = _GONE
    ok = (status >= 200) & (status < 300)
    out[ok] = _CONTENT_PENDING
    if classifier is not None:  # a 2xx, or any response with a title or body to check
        text = np.fromiter((bool(o.title or o.body_excerpt) for o in obs), dtype=bool, count=n)
        out[ok | text] = _ASK_CLASSIFIER
    for i in np.flatnonzero(status == 0).tolist():  # no status (or a caller's 0)
        o = obs[i]
        if o.status is None:
            out[i] = _HARD if o.error == "connection_reset" else _ERROR
    reported = list(map(_outcome_of, obs))
    if reported.count(None) < n:  # the reporter's own outcome wins
        for i, given in enumerate(reported):
            if given is not None:
                out[i] = CODE[given]
    return out


def page_rounds(page_index: NDArray[np.intp]) -> Iterator[NDArray[np.intp]]:
    """The positions of round 0, 1, 2 … of entries sorted by page (``page_index``
    non-decreasing): round ``r`` holds the ``r``-th entry of every page that has
    one, in page order, so a vectorised step touches each page at most once."""
    n = len(page_index)
    starts = np.flatnonzero(np.r_[True, page_index[1:] != page_index[:-1]]) if n else page_index[:0]
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    by_rank = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=-1)) + 2))
    for r in range(len(bounds) - 1):
        yield by_rank[bounds[r] : bounds[r + 1]]


def fold_batch(
    pages: PageArrays,
    page_index: NDArray[np.intp],
    obs: Sequence[Observation],
    *,
    classifier: Classifier | None = None,
    half_life_days: float | None = None,
    columns: ObservationColumns | None = None,
    quiet_until: QuietUntil | None = None,
) -> tuple[NDArray[np.int64], list[str | None]]:
    """Apply ``obs`` to ``pages`` in place, in time order per page.

    ``page_index[i]`` is the row of ``pages`` that ``obs[i]`` belongs to;
    ``obs`` must be sorted by page and then time (ties keep their order);
    ``columns``, when given, are :func:`~recrawl.batch.observation_columns` of ``obs``.
    ``quiet_until(rows, prev, at)``, when given, says until when trusted
    sources vouch that each revisited page (rows of ``pages``) was unchanged
    (:func:`recrawl.hints.quiet_until`; NaN: no word): a revisit that found a
    change then counts as unchanged until that time and changed after it.
    Returns each observation's outcome code and its *fixed* outcome (what
    :func:`~recrawl.pagestate.fixed_outcome` decided, None for a 2xx compared
    with the previous fetch), both in the order of ``obs``.
    """
    n = len(obs)
    hl = DEFAULT_HALF_LIFE_DAYS if half_life_days is None else half_life_days
    outcome = np.empty(n, dtype=np.int64)
    if n == 0:
        return outcome, []
    cols = observation_columns(obs) if columns is None else columns
    fixed = _static_codes(obs, cols.status, classifier)
    t_all = cols.fetched_at
    status = cols.status
    br_all = cols.bytes_received.astype(np.float64)
    bsum = cols.bytes_sent + cols.bytes_received
    billed = cols.billed
    rh_all = object_array([o.record_hash for o in obs])
    etag_all = object_array([o.etag for o in obs])
    lm_all = object_array([o.last_modified for o in obs])

    for idx in page_rounds(page_index):
        p = page_index[idx]
        fx = fixed[idx]
        ask = np.flatnonzero(fx == _ASK_CLASSIFIER)
        if len(ask):
            assert classifier is not None
            by_fields = getattr(classifier, "classify_fields", None)
            if by_fields is None:
                states = pages.states(p[ask])
                for j, state in zip(ask.tolist(), states, strict=True):
                    got = fixed_outcome(obs[int(idx[j])], state, classifier)
                    fx[j] = _CONTENT_PENDING if got is None else CODE[got]
            else:  # the classifier reads a few page fields: no PageState objects
                pa = p[ask]
                for j, site, ptype, avg, seen in zip(
                    ask.tolist(), pages.site[pa].tolist(), pages.page_type[pa].tolist(),
                    pages.avg_bytes[pa].tolist(), (~np.isnan(pages.last_ok[pa])).tolist(),
                    strict=True,
                ):  # fmt: skip
                    o = obs[int(idx[j])]
                    got = by_fields(o, site, ptype, avg, seen)
                    if got is None and o.status is not None and not 200 <= o.status < 300:
                        got = status_outcome(o.status)  # as fixed_outcome falls through
                    fx[j] = _CONTENT_PENDING if got is None else CODE[got]
            fixed[idx] = fx
        oc = fx.copy()
        pend = np.flatnonzero(fx == _CONTENT_PENDING)
        if len(pend):
            pp = p[pend]
            ii = idx[pend]
            lo = pages.last_ok[pp]
            res = np.full(len(pend), _UNCHANGED, dtype=np.int64)
            undecided = np.ones(len(pend), dtype=bool)
            for new_v, old_v in (
                (rh_all[ii], pages.fingerprint[pp]),
                (etag_all[ii], pages.etag[pp]),
                (lm_all[ii], pages.last_modified[pp]),
            ):
                both = undecided & (new_v != None) & (old_v != None)  # noqa: E711
                if both.any():
                    res[both] = np.where(new_v[both] == old_v[both], _UNCHANGED, _CHANGED)
                    undecided &= ~both
            res[np.isnan(lo)] = _NEW
            oc[pend] = res
        outcome[idx] = oc

        t = t_all[idx]
        pages.fetches[p] += 1
        pages.bytes_total[p] += bsum[idx]
        pages.credits_total[p] += billed[idx]
        lf = pages.last_fetch[p]
        pages.last_fetch[p] = np.where(np.isnan(lf) | (t > lf), t, lf)

        content = _CONTENT[oc]
        other = ~content
        if other.any():
            po = p[other]
            oo = oc[other]
            to_gone = oo == _GONE
            # as apply_observation: one more failure; a page going gone counts from 1
            pages.fails[po] = np.where(to_gone & ~pages.gone[po], 1, pages.fails[po] + 1)
            pages.gone[po[to_gone]] = True
            br = br_all[idx][other]
            soft = (oo == _SOFT) & (br > 0) & (pages.avg_bytes[po] > 0)
            if soft.any():
                ps = po[soft]
                pages.avg_bytes[ps] = 0.98 * pages.avg_bytes[ps] + 0.02 * br[soft]
        if not content.any():
            continue
        cidx = idx[content]
        pc = p[content]
        occ = oc[content]
        tcn = t[content]
        pages.gone[pc] = False
        pages.fails[pc] = 0
        st = status[cidx]
        br = br_all[cidx]
        ok2 = (st >= 200) & (st < 300) & (br > 0)
        if ok2.any():
            pb = pc[ok2]
            avg = pages.avg_bytes[pb]
            pages.avg_bytes[pb] = np.where(avg == 0, br[ok2], 0.9 * avg + 0.1 * br[ok2])
        is_new = occ == _NEW
        pages.last_change[pc[is_new]] = tcn[is_new]
        lo = pages.last_ok[pc]
        rev = ~is_new & ~np.isnan(lo)
        if rev.any():
            pr = pc[rev]
            changed = occ[rev] == _CHANGED
            q = None
            if quiet_until is not None and changed.any():
                q = np.full(pr.size, np.nan)
                q[changed] = quiet_until(pr[changed], lo[rev][changed], tcn[rev][changed])
            fold_revisits(
                pages.ev_nc, pages.ev_tc, pages.ev_nu, pages.ev_tu, pr, lo[rev], tcn[rev],
                changed, quiet_until=q, half_life_days=hl, bins=pages.ev_bins,
            )  # fmt: skip
            factor = np.where(changed, 0.8, 1.4)
            pages.nutch_interval[pr] = np.clip(
                pages.nutch_interval[pr] * factor, NUTCH_MIN_S, NUTCH_MAX_S
            )
            pch = pr[changed]
            pages.changes[pch] += 1
            pages.last_change[pch] = tcn[rev][changed]
        pages.last_ok[pc] = tcn
        for new_all, col in (
            (rh_all, pages.fingerprint),
            (etag_all, pages.etag),
            (lm_all, pages.last_modified),
        ):
            v = new_all[cidx]
            given = v != None  # noqa: E711
            if given.any():
                col[pc[given]] = v[given]

    fixed_names: list[str | None] = [
        None if c == _CONTENT_PENDING else OUTCOMES[c] for c in fixed.tolist()
    ]
    return outcome, fixed_names
