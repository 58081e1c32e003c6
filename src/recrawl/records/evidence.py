"""The layout of a page's binned revisit evidence (data only, no estimation).

Besides the four decayed numbers ``ev_nc, ev_tc, ev_nu, ev_tu`` (see
:mod:`recrawl.estimate.rates`), a page keeps its changed intervals' decayed
count and length sum in :data:`BINS` log-spaced length bins, so that the
censored likelihood can read each changed interval near its own length
instead of at the mean of all of them (:mod:`recrawl.estimate.censored`).

The bins of one page are :data:`BIN_COLUMNS` float32 numbers: the counts of
bins 0 … 5, then the length sums (days) of bins 0 … 5. After them come the
:data:`CHANGE_COLUMNS` numbers of the page's change-point test. As columns
they are an ``(n, 22)`` float32 array (:data:`EVIDENCE_COLUMNS`; the planner
reads the first 12); in the store, one 88-byte little-endian blob a page. A
page whose blob is missing (a store written before the bins existed) reads as
all its changed intervals in the bin of their mean length
(:func:`bins_from_totals`), which gives exactly the estimate the four numbers
gave, and a change-point test at rest.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "BINS",
    "BIN_COLUMNS",
    "BIN_EDGES_DAYS",
    "CHANGE_COLUMNS",
    "EVIDENCE_COLUMNS",
    "NO_BINS",
    "PLANNER_HALF_MAX",
    "PlannerBins",
    "bins_from_blobs",
    "bins_from_totals",
    "bins_to_blobs",
    "blob_from_totals",
    "length_bin",
    "planner_bins",
]

BIN_EDGES_DAYS: Final = (1 / 12, 1 / 3, 4 / 3, 16 / 3, 64 / 3)
"""Upper edges of the changed-interval length bins, days (2 h, 8 h, 32 h, 5.3 d,
21.3 d; a sixth bin holds the longer ones)."""

BINS: Final = len(BIN_EDGES_DAYS) + 1
BIN_COLUMNS: Final = 2 * BINS
"""float32 numbers of one page's bins: ``BINS`` counts, then ``BINS`` length sums (days)."""

CHANGE_COLUMNS: Final = 10
"""float32 numbers of one page's change-point test, after its bins
(:func:`recrawl.estimate.rates.change_point_step`): the upward and downward
CUSUM sums, then each one's run evidence ``nc, tc, nu, tu``."""

EVIDENCE_COLUMNS: Final = BIN_COLUMNS + CHANGE_COLUMNS
"""float32 numbers a page keeps beside its four evidence numbers: its bins,
then its change-point test."""

NO_BINS: Final = bytes(4 * EVIDENCE_COLUMNS)
"""The blob of a page without evidence."""

_EDGES: Final = np.asarray(BIN_EDGES_DAYS, dtype=np.float64)
_DT: Final = np.dtype("<f4")


def length_bin(interval_days: ArrayLike) -> NDArray[np.intp]:
    """Bin of each changed interval's length (days), 0 … ``BINS − 1``.

    >>> length_bin([0.01, 0.5, 1.0, 7.0, 30.0]).tolist()
    [0, 2, 2, 4, 5]
    """
    return np.searchsorted(_EDGES, np.asarray(interval_days, dtype=np.float64), side="right")


def bins_from_totals(nc: ArrayLike, tc: ArrayLike) -> NDArray[np.float32]:
    """``(n, 12)`` bins holding each page's ``nc`` changed intervals (``tc`` days
    in all) in the bin of their mean length ``tc / nc``: what the four numbers
    alone say (a page with ``nc = 0`` gets empty bins).

    >>> bins_from_totals([2.0, 0.0], [14.0, 0.0])[0].tolist()
    [0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 14.0, 0.0]
    """
    n = np.atleast_1d(np.asarray(nc, dtype=np.float64))
    t = np.atleast_1d(np.asarray(tc, dtype=np.float64))
    out = np.zeros((n.shape[0], BIN_COLUMNS), dtype=np.float32)
    ok = (n > 0) & np.isfinite(n) & np.isfinite(t) & (t >= 0)
    rows = np.flatnonzero(ok)
    k = length_bin(t[rows] / n[rows])
    out[rows, k] = n[rows]
    out[rows, BINS + k] = t[rows]
    return out


def bins_from_blobs(blobs: list[Any], nc: ArrayLike, tc: ArrayLike) -> NDArray[np.float32]:
    """``(n, 22)`` evidence columns from the store's blobs (bytes, or None where
    a page has none yet: then :func:`bins_from_totals` of its ``nc``, ``tc``,
    and a change-point test at rest)."""
    n = len(blobs)
    width = 4 * EVIDENCE_COLUMNS
    if all(b is not None and len(b) == width for b in blobs):
        raw = b"".join(bytes(b) for b in blobs)
        return np.frombuffer(raw, dtype=_DT).astype(np.float32).reshape(n, EVIDENCE_COLUMNS)
    out = np.zeros((n, EVIDENCE_COLUMNS), dtype=np.float32)
    missing = []
    for i, b in enumerate(blobs):
        if b is not None and len(b) in (width, 4 * BIN_COLUMNS):
            got = np.frombuffer(bytes(b), dtype=_DT)
            out[i, : got.size] = got
        else:
            missing.append(i)
    if missing:
        m = np.asarray(missing, dtype=np.intp)
        nc_m = np.asarray(nc, np.float64)[m]
        out[m, :BIN_COLUMNS] = bins_from_totals(nc_m, np.asarray(tc, np.float64)[m])
    return out


def bins_to_blobs(bins: NDArray[np.floating[Any]]) -> list[bytes]:
    """One little-endian float32 blob per row of ``bins``."""
    raw = np.ascontiguousarray(bins, dtype=_DT).tobytes()
    w = 4 * bins.shape[1]
    return [raw[i : i + w] for i in range(0, len(raw), w)]


def blob_from_totals(nc: float, tc: float) -> bytes:
    """The blob of a page whose only evidence is its four numbers (``nc``
    changed intervals, ``tc`` days in all): :func:`bins_from_totals`, a
    change-point test at rest."""
    out = np.zeros((1, EVIDENCE_COLUMNS), dtype=np.float32)
    out[:, :BIN_COLUMNS] = bins_from_totals(nc, tc)
    return bins_to_blobs(out)[0]


PLANNER_HALF_MAX: Final = 6.0e4
"""The planner reads the bins as float16 (largest 65,504) when every number
is below this; as float32 otherwise."""


def planner_bins(bins: NDArray[np.floating[Any]] | None) -> NDArray[np.floating[Any]] | None:
    """The planner's read-only copy of the length bins (the first
    :data:`BIN_COLUMNS` evidence columns, not the change-point test, which
    only the fold reads): float16 (half the memory; see
    :attr:`~recrawl.plan.planner.PlanPages.ev_bins`) unless a number would
    not fit in it. Bins of :data:`BIN_COLUMNS` columns are taken as the
    planner's already (:class:`PlannerBins` made them)."""
    if bins is None or bins.shape[1] == BIN_COLUMNS:
        return bins
    bins = bins[:, :BIN_COLUMNS]
    if not bins.size or float(bins.max()) >= PLANNER_HALF_MAX:
        return np.ascontiguousarray(bins)
    return bins.astype(np.float16)


class PlannerBins:
    """:func:`planner_bins` of a store's pages, filled a chunk of their
    ``(n, 22)`` float32 evidence columns at a time (:meth:`put`), without
    the whole float32 array: 24 bytes a page as float16 instead of its 88
    and a copy. :meth:`result` is None when a number did not fit float16
    (then the pages are read again with ``half=False``: float32)."""

    __slots__ = ("_nan", "_out", "_top")

    def __init__(self, size: int, *, half: bool = True) -> None:
        self._out = np.empty((size, BIN_COLUMNS), np.float16 if half else np.float32)
        self._top = -math.inf
        self._nan = False

    def resize(self, size: int) -> None:
        self._out = np.resize(self._out, (size, BIN_COLUMNS))

    def put(self, at: int, chunk: NDArray[np.float32]) -> None:
        """Rows ``at`` … of the evidence columns ``chunk``."""
        bins = chunk[:, :BIN_COLUMNS]
        if bins.size:
            top = float(bins.max())
            if math.isnan(top):
                self._nan = True  # (as planner_bins: the max is NaN, float16 it is)
            else:
                self._top = max(self._top, top)
        with np.errstate(over="ignore"):  # (a number too large: result() says so)
            self._out[at : at + len(bins)] = bins

    def result(self, n: int) -> NDArray[np.floating[Any]] | None:
        """The first ``n`` rows; None when float16 did not hold them."""
        out = self._out
        if out.dtype == np.float16 and (not n or (not self._nan and self._top >= PLANNER_HALF_MAX)):
            return None if n else np.zeros((0, BIN_COLUMNS), np.float32)
        return out[:n]
