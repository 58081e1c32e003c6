"""Change traces: parsing and validation (format of SPEC §5).

One JSON object per line::

    {"page": "Bluesky/Privacy Policy.md", "site": "Bluesky",
     "page_type": "Privacy Policy", "start": 1690000000, "end": 1787000000,
     "changes": [1691234567, 1702345678], "value": 1, "cost": 1}

``start`` and ``end`` are unix seconds; ``changes`` are sorted unix seconds
strictly after ``start`` and at most ``end``, none after the year 2200 (a
trace in milliseconds is refused rather than simulated for ages); ``value``
(default 1) and ``cost`` (default 1) are optional. Blank lines are skipped, and
so is a UTF-8 byte-order mark at the start of the input. A bad line raises
:class:`recrawl.InvalidTrace` naming the line (counted from 1).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from recrawl._exceptions import InvalidTrace
from recrawl.observe.observation import MAX_TIMESTAMP, TOO_LATE

__all__ = ["Trace", "dump_trace", "load_traces", "parse_trace"]


@dataclass(frozen=True, eq=False)
class Trace:
    """The change history of one page.

    Two traces are equal when every field is, ``changes`` element by element.
    A trace is hashable: its hash leaves out the values of ``changes`` (only
    their number counts), so it stays the same even if that array is edited
    in place.

    >>> a = Trace("a", "s", "t", 0.0, 10.0, np.array([1.0, 2.0]))
    >>> a == Trace("a", "s", "t", 0.0, 10.0, np.array([1.0, 2.0])), len({a, a})
    (True, 1)

    Attributes
    ----------
    page : str
        Page identifier.
    site, page_type : str
        Site and page type (the estimator's group).
    start, end : float
        Watched interval, unix seconds.
    changes : ndarray of float
        Sorted unix seconds of the recorded changes, inside ``(start, end]``.
    value : float
        Value weight (≥ 0).
    cost : float
        Cost of one fetch, billing units (> 0).
    """

    page: str
    site: str
    page_type: str
    start: float
    end: float
    changes: NDArray[np.float64] = field(repr=False)
    value: float = 1.0
    cost: float = 1.0

    def _scalars(self) -> tuple[str, str, str, float, float, float, float]:
        return (
            self.page,
            self.site,
            self.page_type,
            self.start,
            self.end,
            self.value,
            self.cost,
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Trace)
        return self._scalars() == other._scalars() and bool(
            np.array_equal(self.changes, other.changes)
        )

    def __hash__(self) -> int:
        return hash((*self._scalars(), int(np.size(self.changes))))

    @property
    def days(self) -> float:
        """Length of the watched interval, days."""
        return (self.end - self.start) / 86_400.0


def _number(obj: dict[str, Any], key: str, line: int | None, default: float | None) -> float:
    if key not in obj:
        if default is None:
            raise InvalidTrace(f"missing field {key!r}", line=line)
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InvalidTrace(f"field {key!r} must be a finite number, got {v!r}", line=line)
    try:
        f = float(v)
    except OverflowError:  # an integer past the largest float (JSON allows any)
        raise InvalidTrace(
            f"field {key!r} must be a finite number, got an integer too large for a float",
            line=line,
        ) from None
    if not math.isfinite(f):
        raise InvalidTrace(f"field {key!r} must be a finite number, got {v!r}", line=line)
    return f


def _time(obj: dict[str, Any], key: str, line: int | None) -> float:
    t = _number(obj, key, line, None)
    if t > MAX_TIMESTAMP:
        raise InvalidTrace(f"field {key!r}: {obj[key]!r} {TOO_LATE}", line=line)
    return t


def parse_trace(obj: Any, *, line: int | None = None) -> Trace:
    """Validate one decoded trace object and build a :class:`Trace`.

    >>> t = parse_trace({"page": "a", "start": 0, "end": 86400, "changes": [3600]})
    >>> t.site, t.page_type, t.days, t.changes.tolist()
    ('a', 'page', 1.0, [3600.0])
    """
    if not isinstance(obj, dict):
        raise InvalidTrace("expected a JSON object", line=line)
    page = obj.get("page")
    if not isinstance(page, str) or not page:
        raise InvalidTrace("field 'page' must be a non-empty string", line=line)
    start = _time(obj, "start", line)
    end = _time(obj, "end", line)
    if not end > start:
        raise InvalidTrace(f"'end' ({end}) must be after 'start' ({start})", line=line)
    raw = obj.get("changes")
    if not isinstance(raw, list):
        raise InvalidTrace("field 'changes' must be a list of unix seconds", line=line)
    if any(isinstance(c, bool) or not isinstance(c, int | float) for c in raw):
        raise InvalidTrace("field 'changes' must hold only numbers", line=line)
    try:
        changes = np.asarray(raw, dtype=np.float64)
    except OverflowError:  # an integer past the largest float
        raise InvalidTrace(
            "field 'changes' holds an integer too large for a float", line=line
        ) from None
    if changes.size:
        if not np.all(np.isfinite(changes)):
            raise InvalidTrace("field 'changes' must hold finite numbers", line=line)
        late = changes > MAX_TIMESTAMP
        if late.any():
            first = raw[int(np.argmax(late))]
            raise InvalidTrace(f"field 'changes': {first!r} {TOO_LATE}", line=line)
        if np.any(np.diff(changes) < 0):
            raise InvalidTrace("field 'changes' must be sorted", line=line)
        if changes[0] <= start or changes[-1] > end:
            raise InvalidTrace("every change must lie inside (start, end]", line=line)
    value = _number(obj, "value", line, 1.0)
    cost = _number(obj, "cost", line, 1.0)
    if value < 0:
        raise InvalidTrace("field 'value' must be ≥ 0", line=line)
    if cost <= 0:
        raise InvalidTrace("field 'cost' must be > 0", line=line)
    site = obj.get("site", page)
    page_type = obj.get("page_type", "page")
    if not isinstance(site, str) or not isinstance(page_type, str):
        raise InvalidTrace("fields 'site' and 'page_type' must be strings", line=line)
    return Trace(page, site, page_type, start, end, changes, value, cost)


def load_traces(source: str | os.PathLike[str] | Iterable[str]) -> list[Trace]:
    """Read change traces from a path or from an iterable of JSON lines.

    Parameters
    ----------
    source : str, path-like or iterable of str
        A file path (``str`` or ``Path``), or lines of JSON. A UTF-8
        byte-order mark before the first line is skipped.

    Returns
    -------
    list of Trace

    Raises
    ------
    recrawl.InvalidTrace
        On the first malformed line, with its line number.

    Examples
    --------
    >>> ts = load_traces(['{"page": "a", "start": 0, "end": 10, "changes": [5]}', ""])
    >>> len(ts), ts[0].page
    (1, 'a')
    """
    if isinstance(source, str | os.PathLike):
        with Path(source).open(encoding="utf-8") as fh:  # _load_lines drops a byte-order mark
            return _load_lines(fh)
    return _load_lines(source)


def _load_lines(lines: Iterable[str]) -> list[Trace]:
    out: list[Trace] = []
    for n, text in enumerate(lines, start=1):
        if n == 1 and text.startswith("\ufeff"):
            text = text[1:]  # a byte-order mark, as some editors write
        text = text.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidTrace(f"not valid JSON: {exc.msg}", line=n) from None
        except RecursionError:
            raise InvalidTrace("not valid JSON: nested too deeply", line=n) from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise InvalidTrace(f"not valid JSON: {exc}", line=n) from None
        out.append(parse_trace(obj, line=n))
    return out


def dump_trace(trace: Trace) -> str:
    """One trace as a JSON line (integral seconds written as integers)."""

    def num(x: float) -> int | float:
        return int(x) if float(x).is_integer() else float(x)

    obj: dict[str, Any] = {
        "page": trace.page,
        "site": trace.site,
        "page_type": trace.page_type,
        "start": num(trace.start),
        "end": num(trace.end),
        "changes": [num(c) for c in trace.changes.tolist()],
    }
    if trace.value != 1.0:
        obj["value"] = num(trace.value)
    if trace.cost != 1.0:
        obj["cost"] = num(trace.cost)
    return json.dumps(obj, ensure_ascii=False)
