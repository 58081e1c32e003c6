"""One plan's tasks as columns: :class:`TaskTable`.

A plan holds about one task a page when fetches are frequent (24 a page a
day, hourly cycles), and the service keeps its plan for a whole cycle. As a
list of dicts a task cost about 430 bytes (a seven-key dict and three float
objects) and its rate entry 150 more; as columns it costs about 60: the
page's number into the plan's URL, site and page-type lists (shared with the
page columns the plan was made from, not copied), the reason as a small
integer, and the figures as float arrays. A task is made a dict only when it
is read, with the same keys and values the list held.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from recrawl.plan.planner import REASONS
from recrawl.records.strings import CodeColumn, string_hashes

__all__ = ["TaskRates", "TaskTable"]

_ITER_CHUNK = 4096
"""Rows :meth:`TaskTable.__iter__` reads out of the columns at once."""


class TaskTable(Sequence[dict[str, Any]]):
    """A plan's tasks, best first: ``head`` (given as dicts: the canaries),
    then one row per planned page.

    Each row reads as ``{"url", "site", "page_type", "reason",
    "expected_gain", "cost", "priority"}``, the page's strings taken from
    ``urls``, ``sites`` and ``types`` at ``page``, the reason from
    :data:`~recrawl.plan.planner.REASONS` at ``reason``. ``rate`` and ``sd``
    are each row's change-rate estimate and its standard deviation, per day
    (:meth:`rate_of`). Compares equal to the list of the same dicts.
    """

    __slots__ = ("_head", "_sites", "_types", "_urls", "cost", "gain", "page", "priority", "rate",
                 "reason", "sd")  # fmt: skip

    def __init__(
        self,
        head: list[dict[str, Any]],
        urls: Sequence[str],
        sites: Sequence[str],
        types: Sequence[str],
        page: NDArray[np.int64],
        reason: NDArray[np.int8],
        gain: NDArray[np.float64],
        cost: NDArray[np.float64],
        priority: NDArray[np.float64],
        rate: NDArray[np.float64],
        sd: NDArray[np.float64],
    ) -> None:
        self._head = head
        self._urls, self._sites, self._types = urls, sites, types
        self.page, self.reason = page, reason
        self.gain, self.cost, self.priority = gain, cost, priority
        self.rate, self.sd = rate, sd

    @classmethod
    def of(cls, tasks: list[dict[str, Any]]) -> TaskTable:
        """A table of task dicts as they are (all of them the head)."""
        empty = np.zeros(0)
        return cls(tasks, [], [], [], np.zeros(0, np.int64), np.zeros(0, np.int8),
                   empty, empty, empty, empty, empty)  # fmt: skip

    def __len__(self) -> int:
        return len(self._head) + len(self.page)

    def _row(self, i: int) -> dict[str, Any]:
        h = len(self._head)
        if i < h:
            return self._head[i]
        j = i - h
        p = int(self.page[j])
        return {
            "url": self._urls[p],
            "site": self._sites[p],
            "page_type": self._types[p],
            "reason": REASONS[int(self.reason[j])],
            "expected_gain": float(self.gain[j]),
            "cost": float(self.cost[j]),
            "priority": float(self.priority[j]),
        }

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        n = len(self)
        if isinstance(i, slice):
            return [self._row(k) for k in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("task index out of range")
        return self._row(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._head
        urls, sites, types = self._urls, self._sites, self._types
        for a in range(0, len(self.page), _ITER_CHUNK):  # (a list of each column's: 170 B a row)
            rows = slice(a, a + _ITER_CHUNK)
            for p, r, g, c, q in zip(
                self.page[rows].tolist(), self.reason[rows].tolist(), self.gain[rows].tolist(),
                self.cost[rows].tolist(), self.priority[rows].tolist(), strict=True,
            ):  # fmt: skip
                yield {"url": urls[p], "site": sites[p], "page_type": types[p],
                       "reason": REASONS[r], "expected_gain": g, "cost": c,
                       "priority": q}  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (TaskTable, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TaskTable({len(self)} tasks)"

    @property
    def head(self) -> int:
        """How many leading tasks were given as dicts (the canaries)."""
        return len(self._head)

    def url(self, i: int) -> str:
        """Task ``i``'s URL, without making its dict."""
        h = len(self._head)
        return str(self._head[i]["url"]) if i < h else self._urls[int(self.page[i - h])]

    def site(self, i: int) -> str:
        """Task ``i``'s site, without making its dict."""
        h = len(self._head)
        return str(self._head[i]["site"]) if i < h else self._sites[int(self.page[i - h])]

    def reason_of(self, i: int) -> str:
        """Task ``i``'s reason, without making its dict."""
        h = len(self._head)
        return str(self._head[i]["reason"]) if i < h else REASONS[int(self.reason[i - h])]

    def body(self, name: str, start: int = 0, stop: int | None = None) -> list[str]:
        """The rows' (not the head's) ``url``, ``site``, ``page_type`` or
        ``reason``, in order (rows ``start`` to ``stop`` only, when given):
        one list, without making a dict per row."""
        rows = slice(start, stop)
        if name == "reason":
            return [REASONS[r] for r in self.reason[rows].tolist()]
        col = {"url": self._urls, "site": self._sites, "page_type": self._types}[name]
        pages = self.page[rows]
        if isinstance(col, CodeColumn):
            names = col.names
            return [names[c] for c in col.codes[pages].tolist()]
        return [col[p] for p in pages.tolist()]

    def distinct(self, name: str, rows: NDArray[np.intp]) -> set[str]:
        """The distinct ``site`` or ``page_type`` of the rows (not the head's)
        at positions ``rows``."""
        col = {"site": self._sites, "page_type": self._types}[name]
        pages = self.page[rows]
        if isinstance(col, CodeColumn):
            names = col.names
            seen = np.bincount(col.codes[pages], minlength=len(names))
            return {names[c] for c in np.flatnonzero(seen).tolist()}
        return {col[p] for p in pages.tolist()}

    def url_hashes(self) -> NDArray[np.int64]:
        """The :func:`hash` of each row's (not the head's) URL, in order:
        taken from the page columns' when they are a
        :class:`~recrawl.records.strings.StringColumn`, no URL made."""
        return string_hashes(self._urls, self.page)

    def rate_of(self, i: int) -> tuple[float, float] | None:
        """Task ``i``'s rate estimate and its standard deviation, per day (None
        for a head task: a canary has none)."""
        h = len(self._head)
        if i < h:
            return None
        return float(self.rate[i - h]), float(self.sd[i - h])


class TaskRates(Mapping[str, tuple[float, float]]):
    """URL → ``(rate, sd)`` per day of a :class:`TaskTable`'s planned pages,
    indexed at the first lookup (the plan's document reads the table's rows
    directly instead)."""

    def __init__(self, table: TaskTable) -> None:
        self._table = table
        self._index: dict[str, int] | None = None

    def _by_url(self) -> dict[str, int]:
        if self._index is None:
            t = self._table
            self._index = {t.url(i): i for i in range(t.head, len(t))}
        return self._index

    def __getitem__(self, url: str) -> tuple[float, float]:
        got = self._table.rate_of(self._by_url()[url])
        assert got is not None
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_url())

    def __len__(self) -> int:
        return len(self._table) - self._table.head
