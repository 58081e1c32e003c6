"""Per-site time buckets: the aggregate that health scoring and dashboards read.

Every stored observation adds to one bucket keyed by
``(site, page_type, route, bucket_start)`` where ``bucket_start`` is the
observation's unix time floored to :data:`BUCKET_SECONDS`. A bucket holds counts
per outcome, wire bytes, credits, a latency histogram and the count of fetches
that failed before their page's first success (a 404 on a URL never reached is
a first fetch, not a revisit), so a site's window of any length is a sum of
buckets and never a scan of the raw log.

Latency is kept as a histogram over :data:`LATENCY_EDGES_MS` (half-octave bins
from 10 ms to about 116 s, plus an overflow bin), from which percentiles are
read by linear interpolation inside the bin.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "BUCKET_SECONDS",
    "LATENCY_BINS",
    "LATENCY_EDGES_MS",
    "OUTCOMES",
    "bucket_start",
    "latency_bin",
    "percentile_from_histogram",
]

from recrawl.records.buckets import BUCKET_SECONDS, LATENCY_BINS, LATENCY_EDGES_MS, OUTCOMES


def bucket_start(unix_seconds: float) -> int:
    """Start of the bucket holding ``unix_seconds`` (unix seconds)."""
    return int(unix_seconds // BUCKET_SECONDS) * BUCKET_SECONDS


def latency_bin(latency_ms: float) -> int:
    """Index of the histogram bin for a latency in milliseconds."""
    return int(np.searchsorted(LATENCY_EDGES_MS, latency_ms, side="left"))


def percentile_from_histogram(counts: npt.ArrayLike, q: float = 0.95) -> float | None:
    """The ``q`` quantile (0–1) of a latency histogram, in milliseconds.

    Interpolates linearly inside the bin the quantile falls in; the first bin
    starts at 0 ms and the overflow bin is read as its lower edge. Returns None
    for an empty histogram.
    """
    c = np.asarray(counts, dtype=np.float64)
    total = float(c.sum())
    if total <= 0:
        return None
    cum = np.cumsum(c)
    target = q * total
    i = int(np.searchsorted(cum, target, side="left"))
    if i >= len(LATENCY_EDGES_MS):
        return float(LATENCY_EDGES_MS[-1])
    lo = 0.0 if i == 0 else float(LATENCY_EDGES_MS[i - 1])
    hi = float(LATENCY_EDGES_MS[i])
    before = 0.0 if i == 0 else float(cum[i - 1])
    inside = float(c[i])
    frac = (target - before) / inside if inside > 0 else 1.0
    return lo + frac * (hi - lo)
