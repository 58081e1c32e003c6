"""The bucket layout: outcomes, bucket width, latency bins, and the bucket columns.

Every stored observation adds to one bucket keyed by ``(site, page_type,
route, bucket_start)`` (see :mod:`recrawl.health.buckets` for what is read off
them). Data only: the store fills :class:`BucketArrays`, health scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from recrawl.observe.observation import OUTCOMES  # the columns' order of outcomes

__all__ = ["BUCKET_SECONDS", "LATENCY_BINS", "LATENCY_EDGES_MS", "OUTCOMES", "BucketArrays"]

BUCKET_SECONDS: Final = 900
"""Width of one bucket, seconds (15 minutes)."""

LATENCY_EDGES_MS: Final = np.array([10.0 * 2.0 ** (k / 2.0) for k in range(28)])
"""Upper edges of the latency bins, milliseconds; one more bin holds the overflow."""

LATENCY_BINS: Final = len(LATENCY_EDGES_MS) + 1


_O: Final = {name: i for i, name in enumerate(OUTCOMES)}
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_ROW_FIELDS: Final = (
    "site",
    "page_type",
    "route",
    "bucket_start",
    "n",
    "outcomes",
    "bytes_sent",
    "bytes_received",
    "credits",
    "rendered",
    "canary_ok",
    "canary_mismatch",
    "latency",
)


@dataclass(frozen=True)
class BucketArrays:
    """Buckets keyed ``(site, page_type, route, bucket_start)`` as column arrays.

    Labels are stored once (``sites``, ``page_types``, ``routes``) and rows
    carry integer codes into them; an unknown route is the label ``""``.
    Every count column has one entry per row (``N`` rows).

    Attributes
    ----------
    sites, page_types, routes
        Label tables.
    site, page_type, route
        ``(N,)`` codes into the label tables.
    bucket_start
        ``(N,)`` unix seconds, multiples of :data:`~recrawl.buckets.BUCKET_SECONDS`.
    n
        ``(N,)`` requests.
    outcomes
        ``(N, len(OUTCOMES))`` requests per outcome, in ``OUTCOMES`` order.
    bytes_sent, bytes_received
        ``(N,)`` wire bytes, headers included.
    credits
        ``(N,)`` API credits charged.
    rendered, canary_ok, canary_mismatch
        ``(N,)`` counts of rendered fetches and canary results.
    latency
        ``(N, LATENCY_BINS)`` latency histogram counts.
    throttled
        ``(N,)`` answers asking to slow down (429 or 503, or any answer
        carrying a ``retry_after``), or None when the source does not count
        them (read as zeros, see :meth:`throttled_counts`).
    """

    sites: tuple[str, ...]
    page_types: tuple[str, ...]
    routes: tuple[str, ...]
    site: IntArray
    page_type: IntArray
    route: IntArray
    bucket_start: IntArray
    n: IntArray
    outcomes: IntArray
    bytes_sent: FloatArray
    bytes_received: FloatArray
    credits: FloatArray
    rendered: IntArray
    canary_ok: IntArray
    canary_mismatch: IntArray
    latency: IntArray
    throttled: IntArray | None = None

    def __len__(self) -> int:
        return int(self.n.shape[0])

    def outcome(self, name: str) -> IntArray:
        """The ``(N,)`` count column of one outcome."""
        return self.outcomes[:, _O[name]]

    def throttled_counts(self) -> IntArray:
        """The ``(N,)`` slow-down answers; zeros when the source does not count them."""
        if self.throttled is None:
            return np.zeros(len(self), np.int64)
        return self.throttled

    @classmethod
    def from_labels(
        cls,
        *,
        site: Sequence[str],
        page_type: Sequence[str],
        route: Sequence[str],
        bucket_start: npt.ArrayLike,
        n: npt.ArrayLike,
        outcomes: npt.ArrayLike,
        latency: npt.ArrayLike,
        bytes_sent: npt.ArrayLike | None = None,
        bytes_received: npt.ArrayLike | None = None,
        credits: npt.ArrayLike | None = None,
        rendered: npt.ArrayLike | None = None,
        canary_ok: npt.ArrayLike | None = None,
        canary_mismatch: npt.ArrayLike | None = None,
        throttled: npt.ArrayLike | None = None,
    ) -> BucketArrays:
        """Build from per-row string labels (as a store query returns them).

        Missing money and canary columns are zeros; a missing ``throttled``
        column stays None (not counted).
        """
        sites, site_codes = np.unique(np.asarray(site, dtype=str), return_inverse=True)
        pts, pt_codes = np.unique(np.asarray(page_type, dtype=str), return_inverse=True)
        routes, route_codes = np.unique(np.asarray(route, dtype=str), return_inverse=True)
        rows = len(site_codes)

        def ints(x: npt.ArrayLike | None) -> IntArray:
            return np.zeros(rows, np.int64) if x is None else np.asarray(x, dtype=np.int64)

        def floats(x: npt.ArrayLike | None) -> FloatArray:
            return np.zeros(rows, np.float64) if x is None else np.asarray(x, dtype=np.float64)

        return cls(
            sites=tuple(str(s) for s in sites),
            page_types=tuple(str(s) for s in pts),
            routes=tuple(str(s) for s in routes),
            site=site_codes.astype(np.int64),
            page_type=pt_codes.astype(np.int64),
            route=route_codes.astype(np.int64),
            bucket_start=ints(bucket_start),
            n=ints(n),
            outcomes=np.asarray(outcomes, dtype=np.int64).reshape(rows, len(OUTCOMES)),
            bytes_sent=floats(bytes_sent),
            bytes_received=floats(bytes_received),
            credits=floats(credits),
            rendered=ints(rendered),
            canary_ok=ints(canary_ok),
            canary_mismatch=ints(canary_mismatch),
            latency=np.asarray(latency, dtype=np.int64).reshape(rows, LATENCY_BINS),
            throttled=None if throttled is None else ints(throttled),
        )

    def select(self, mask: npt.NDArray[np.bool_]) -> BucketArrays:
        """The rows where ``mask`` is true (label tables unchanged)."""
        cols = {name: getattr(self, name)[mask] for name in _ROW_FIELDS}
        if self.throttled is not None:
            cols["throttled"] = self.throttled[mask]
        return replace(self, **cols)
