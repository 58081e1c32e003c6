"""The layout of a page's binned revisit evidence (data only, no estimation).

Besides the four decayed numbers ``ev_nc, ev_tc, ev_nu, ev_tu`` (see
:mod:`recrawl.estimate.rates`), a page keeps its changed intervals' decayed
count and length sum in :data:`BINS` log-spaced length bins, so that the
censored likelihood can read each changed interval near its own length
instead of at the mean of all of them (:mod:`recrawl.estimate.censored`).

The bins of one page are :data:`BIN_COLUMNS` float32 numbers: the counts of
bins 0 … 5, then the length sums (days) of bins 0 … 5. As columns they are an
``(n, 12)`` float32 array; in the store, one 48-byte little-endian blob a page.
A page whose blob is missing (a store written before the bins existed) reads
as all its changed intervals in the bin of their mean length
(:func:`bins_from_totals`), which gives exactly the estimate the four numbers
gave.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "BINS",
    "BIN_COLUMNS",
    "BIN_EDGES_DAYS",
    "NO_BINS",
    "bins_from_blobs",
    "bins_from_totals",
    "bins_to_blobs",
    "length_bin",
]

BIN_EDGES_DAYS: Final = (1 / 12, 1 / 3, 4 / 3, 16 / 3, 64 / 3)
"""Upper edges of the changed-interval length bins, days (2 h, 8 h, 32 h, 5.3 d,
21.3 d; a sixth bin holds the longer ones)."""

BINS: Final = len(BIN_EDGES_DAYS) + 1
BIN_COLUMNS: Final = 2 * BINS
"""float32 numbers of one page's bins: ``BINS`` counts, then ``BINS`` length sums (days)."""

NO_BINS: Final = bytes(4 * BIN_COLUMNS)
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
    """``(n, 12)`` bins from the store's blobs (bytes, or None where a page
    has none yet: then :func:`bins_from_totals` of its ``nc``, ``tc``)."""
    n = len(blobs)
    missing = [i for i, b in enumerate(blobs) if b is None or len(b) != 4 * BIN_COLUMNS]
    if not missing:
        raw = b"".join(bytes(b) for b in blobs)
        return np.frombuffer(raw, dtype=_DT).astype(np.float32).reshape(n, BIN_COLUMNS)
    out = np.zeros((n, BIN_COLUMNS), dtype=np.float32)
    have = np.ones(n, dtype=bool)
    have[missing] = False
    idx = np.flatnonzero(have)
    if idx.size:
        raw = b"".join(bytes(blobs[i]) for i in idx.tolist())
        out[idx] = np.frombuffer(raw, dtype=_DT).reshape(idx.size, BIN_COLUMNS)
    m = np.asarray(missing, dtype=np.intp)
    out[m] = bins_from_totals(np.asarray(nc, np.float64)[m], np.asarray(tc, np.float64)[m])
    return out


def bins_to_blobs(bins: NDArray[np.float32]) -> list[bytes]:
    """One 48-byte little-endian blob per row of ``bins``."""
    raw = np.ascontiguousarray(bins, dtype=_DT).tobytes()
    w = 4 * BIN_COLUMNS
    return [raw[i : i + w] for i in range(0, len(raw), w)]
