"""A page's state: as one object (:class:`PageState`) and as columns (:class:`PageArrays`).

The row layout (:data:`ROW_FIELDS`) is the store's ``pages`` table after ``id``.
Data only: :func:`recrawl.estimate.pagestate.apply_observation` and
:func:`recrawl.estimate.fold.fold_batch` update these; the store keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from recrawl.observe.observation import Observation
from recrawl.records.buckets import OUTCOMES
from recrawl.records.evidence import (
    BIN_COLUMNS,
    EVIDENCE_COLUMNS,
    NO_BINS,
    bins_from_blobs,
    bins_to_blobs,
    blob_from_totals,
)

__all__ = [
    "CODE",
    "CONTENT_OUTCOMES",
    "MUTABLE_FIELDS",
    "NUTCH_DEFAULT_S",
    "ROW_FIELDS",
    "Classifier",
    "PageArrays",
    "PageState",
    "evidence_blob",
    "new_page_row",
    "object_array",
    "page_from_row",
    "page_row",
]

FloatArray = NDArray[np.float64]

CODE: Final = {o: i for i, o in enumerate(OUTCOMES)}
"""Outcome name → its integer code (the index in :data:`~recrawl.records.buckets.OUTCOMES`)."""

CONTENT_OUTCOMES: Final = frozenset({"new", "changed", "unchanged", "not_modified"})
"""Outcomes that tell whether the page changed (the fetch reached the content)."""

NUTCH_DEFAULT_S: Final = 30 * 86400.0
NUTCH_MIN_S: Final = 60.0
NUTCH_MAX_S: Final = 90 * 86400.0


@dataclass(slots=True)
class PageState:
    """The current state of one page (times in unix seconds, sizes in bytes)."""

    url: str
    site: str
    page_type: str
    value: float = 1.0
    first_seen: float = 0.0
    last_fetch: float | None = None
    last_ok: float | None = None
    last_change: float | None = None
    fingerprint: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    fetches: int = 0
    changes: int = 0
    bytes_total: int = 0
    credits_total: float = 0.0
    avg_bytes: float = 0.0
    ev_nc: float = 0.0
    ev_tc: float = 0.0
    ev_nu: float = 0.0
    ev_tu: float = 0.0
    ev_bins: bytes = NO_BINS
    """The changed intervals by length bin and the change-point test
    (:mod:`recrawl.records.evidence`): 22 float32 numbers as 88 little-endian bytes."""
    nutch_interval: float = NUTCH_DEFAULT_S
    fails: int = 0
    """Consecutive failed fetches (any outcome that did not reach the content)
    since the last success; while ``gone``, consecutive fetches since it went gone."""
    gone: bool = False
    extra: dict[str, object] = field(default_factory=dict)

    def reset_history(self) -> None:
        """Forget everything learned from fetches (kept: identity, value, first_seen)."""
        self.last_fetch = self.last_ok = self.last_change = None
        self.fingerprint = self.etag = self.last_modified = None
        self.fetches = self.changes = self.bytes_total = 0
        self.credits_total = self.avg_bytes = 0.0
        self.ev_nc = self.ev_tc = self.ev_nu = self.ev_tu = 0.0
        self.ev_bins = NO_BINS
        self.nutch_interval = NUTCH_DEFAULT_S
        self.fails = 0
        self.gone = False


Classifier = Callable[[Observation, PageState | None], str | None]
"""Content-based detection seam: returns ``challenge``/``soft_block``/... or None."""


@dataclass
class PageArrays:
    """The mutable state of ``n`` pages as columns (times in unix seconds, NaN for never)."""

    url: NDArray[Any]  # object: str
    site: NDArray[Any]
    page_type: NDArray[Any]
    value: FloatArray
    first_seen: FloatArray
    last_fetch: FloatArray
    last_ok: FloatArray
    last_change: FloatArray
    fingerprint: NDArray[Any]  # object: str or None
    etag: NDArray[Any]
    last_modified: NDArray[Any]
    fetches: NDArray[np.int64]
    changes: NDArray[np.int64]
    bytes_total: NDArray[np.int64]
    credits_total: FloatArray
    avg_bytes: FloatArray
    ev_nc: FloatArray
    ev_tc: FloatArray
    ev_nu: FloatArray
    ev_tu: FloatArray
    ev_bins: NDArray[np.float32]  # (n, EVIDENCE_COLUMNS): bins, then the change-point test
    nutch_interval: FloatArray
    fails: NDArray[np.int64]
    gone: NDArray[np.bool_]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Any]]) -> PageArrays:
        """Columns from rows in the order of :data:`ROW_FIELDS` (None: never / unknown)."""
        cols: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * len(ROW_FIELDS)
        out: dict[str, Any] = {}
        for name, col in zip(ROW_FIELDS, cols, strict=True):
            if name in _OBJECT_FIELDS:
                out[name] = object_array(list(col))
            elif name == "ev_bins":  # after ev_nc, ev_tc: a missing blob comes from them
                out[name] = bins_from_blobs(list(col), out["ev_nc"], out["ev_tc"])
            else:  # None becomes NaN in the float columns
                out[name] = np.array(col, dtype=_DTYPES.get(name, np.float64))
        return cls(**out)

    def rows(
        self, index: Sequence[int] | NDArray[np.intp], *, then: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Pages ``index`` as rows in the order of :data:`ROW_FIELDS` (NaN times as None).

        With ``then``, rows are what a fetch changes (:data:`MUTABLE_FIELDS`)
        followed by ``then[k]`` (the page's id, for an UPDATE).
        """
        ix = np.asarray(index, dtype=np.intp)

        def column(name: str) -> list[Any]:
            if name == "ev_bins":
                return list(bins_to_blobs(self.ev_bins[ix]))
            values: list[Any] = getattr(self, name)[ix].tolist()
            if name in _OPTIONAL_TIMES:
                return [None if v != v else v for v in values]
            if name == "gone":
                return [int(v) for v in values]
            return values

        if then is not None:
            return list(zip(*map(column, MUTABLE_FIELDS), then, strict=True))
        return list(zip(*map(column, ROW_FIELDS), strict=True))

    def __len__(self) -> int:
        return len(self.value)

    def take(self, index: NDArray[np.intp]) -> PageArrays:
        """A copy of the pages ``index``."""
        return PageArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def concat(a: PageArrays, b: PageArrays) -> PageArrays:
        """The pages of ``a`` then those of ``b``."""
        return PageArrays(
            **{f.name: np.concatenate([getattr(a, f.name), getattr(b, f.name)]) for f in fields(a)}
        )

    def put(self, index: NDArray[np.intp], other: PageArrays) -> None:
        """Overwrite the pages ``index`` with the rows of ``other``, in place."""
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(other, f.name)

    def grown(self, n: int) -> PageArrays:
        """A copy with room for ``n`` pages (new rows: pages never fetched, no url)."""
        k = min(n, len(self))
        cols: dict[str, Any] = {}
        for name, blank in zip(ROW_FIELDS, new_page_row("", "", "", np.nan), strict=True):
            have = getattr(self, name)
            col = np.empty((n, *have.shape[1:]), dtype=have.dtype)
            if name == "ev_bins":
                col[k:] = 0.0
            else:
                col[k:] = np.nan if blank is None and have.dtype != object else blank
            col[:k] = have[:k]
            cols[name] = col
        return PageArrays(**cols)

    def states(self, index: NDArray[np.intp]) -> list[PageState]:
        """Pages ``index`` as :class:`~recrawl.pagestate.PageState` objects (one pass per column)."""
        return [page_from_row(r) for r in self.rows(index)]


ROW_FIELDS: Final = tuple(f.name for f in fields(PageArrays))
"""Field order of a page row (the store's ``pages`` columns after ``id``, and
:class:`~recrawl.pagestate.PageState`'s own order)."""
MUTABLE_FIELDS: Final = ROW_FIELDS[4:]
"""What a fetch changes in a page (identity and value stay)."""
_OBJECT_FIELDS: Final = frozenset(
    {"url", "site", "page_type", "fingerprint", "etag", "last_modified"}
)
_DTYPES: Final[dict[str, Any]] = {
    "fetches": np.int64, "changes": np.int64, "bytes_total": np.int64, "fails": np.int64,
    "gone": bool,
}  # fmt: skip
_OPTIONAL_TIMES: Final = frozenset({"last_fetch", "last_ok", "last_change"})


def page_from_row(row: Sequence[Any]) -> PageState:
    """A :class:`~recrawl.pagestate.PageState` from a row (:data:`ROW_FIELDS`)."""
    page = PageState(*row[:-1])
    page.gone = bool(row[-1])
    page.ev_bins = evidence_blob(page.ev_bins, page.ev_nc, page.ev_tc)
    return page


def evidence_blob(blob: Any, nc: float, tc: float) -> bytes:
    """A page's evidence blob as bytes of :data:`~recrawl.records.evidence.EVIDENCE_COLUMNS`
    float32 (a store without bins gives None: its four numbers' bins)."""
    if blob is None:
        return blob_from_totals(nc, tc)
    if len(blob) == 4 * EVIDENCE_COLUMNS:
        return bytes(blob)
    if len(blob) == 4 * BIN_COLUMNS:  # the bins alone: the change-point test at rest
        return bytes(blob) + bytes(4 * (EVIDENCE_COLUMNS - BIN_COLUMNS))
    return blob_from_totals(nc, tc)


def page_row(p: PageState) -> tuple[Any, ...]:
    """The row (:data:`ROW_FIELDS`) of a :class:`~recrawl.pagestate.PageState`."""
    return (*(getattr(p, name) for name in ROW_FIELDS[:-1]), int(p.gone))


def object_array(values: list[Any]) -> NDArray[Any]:
    """``values`` as a 1-d numpy array of Python objects (strings, None)."""
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def new_page_row(url: str, site: str, page_type: str, first_seen: float) -> tuple[Any, ...]:
    """The row (:data:`ROW_FIELDS`) of a page never fetched."""
    return (
        url, site, page_type, 1.0, first_seen, None, None, None, None, None, None,
        0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, NO_BINS, NUTCH_DEFAULT_S, 0, 0,
    )  # fmt: skip
