"""The dashboard's time range: which stretch of the log its figures show.

A range is chosen by days back from its end (``?days=7``, ``recrawl report
--days 7``) or by its ends (``?from=…&to=…``, ``--since``), each an RFC 3339
time, a date (``2026-02-01``, midnight UTC; as ``to``, that day included) or
unix seconds; an end after *now* is *now*. Without an end it
ends *now*, unless the log is stale: when the newest fetch is older than
:data:`STALE_AFTER_S`, it ends at the data's end, so an old store is shown as
it was, never as if all its pages had since gone stale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from recrawl.observe.observation import parse_timestamp

__all__ = ["DEFAULT_DAYS", "MAX_DAYS", "STALE_AFTER_S", "TimeWindow", "parse_time"]

DAY_S = 86_400.0
DEFAULT_DAYS = 7.0
"""Days shown when no range is chosen."""
MAX_DAYS = 3660.0
"""The longest range accepted, days (ten years)."""
STALE_AFTER_S = DAY_S
"""A log whose newest fetch is older than this (seconds) is stale."""


def parse_time(value: str) -> float:
    """Unix seconds from an RFC 3339 time, a date (midnight UTC) or unix seconds.

    >>> parse_time("2026-02-01")
    1769904000.0

    Raises ValueError for anything else.
    """
    s = value.strip()
    if _is_date(s):
        try:
            return datetime.strptime(s, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None
    try:
        return parse_timestamp(s)
    except ValueError as exc:
        raise ValueError(f"{value!r} {exc}") from None


def _is_date(value: str) -> bool:
    s = value.strip()
    return len(s) == 10 and s[4] == "-" and s[7] == "-"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _age(seconds: float) -> str:
    if seconds >= 2 * DAY_S:
        return f"{seconds / DAY_S:,.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{max(seconds, 0) / 60:.0f} minutes"


@dataclass(frozen=True)
class TimeWindow:
    """``[start, end]`` in unix seconds, shown by the dashboard.

    ``now`` is the time the page is rendered at and ``data_end`` the newest
    fetch in the log (None: no fetch yet); ``stale`` says the log stopped more
    than :data:`STALE_AFTER_S` before ``now``; ``note`` says why a requested
    range was not taken as asked (empty when it was).
    """

    start: float
    end: float
    now: float
    data_end: float | None = None
    note: str = ""

    @property
    def days(self) -> float:
        """The range's length, days."""
        return (self.end - self.start) / DAY_S

    @property
    def stale(self) -> bool:
        return self.data_end is not None and self.now - self.data_end > STALE_AFTER_S

    @property
    def step_s(self) -> float:
        """The figures' time step, seconds: an hour up to three days, else a day."""
        return 3600.0 if self.days <= 3.0 else DAY_S

    def stale_message(self) -> str:
        """One sentence on how old the data is (empty when it is not stale)."""
        if not self.stale or self.data_end is None:
            return ""
        return (
            f"The data is stale: the newest fetch is from {_iso(self.data_end)}, "
            f"{_age(self.now - self.data_end)} before now; figures are shown as of then."
        )

    def label(self) -> str:
        """The range in words, for the page's header."""
        return f"{_iso(self.start)} to {_iso(self.end)} ({self.days:,.3g} days)"

    @classmethod
    def choose(
        cls,
        now: float,
        data_end: float | None,
        *,
        days: float | None = None,
        since: float | None = None,
        until: float | None = None,
        note: str = "",
    ) -> TimeWindow:
        """The range ending at ``until`` (default: ``now``, or the data's end
        when the log is stale), from ``since`` or ``days`` before the end
        (default :data:`DEFAULT_DAYS`). Raises ValueError for a range that
        ends before it starts, a ``days`` that is not positive or longer than
        :data:`MAX_DAYS`, or both ``days`` and ``since``."""
        if days is not None and since is not None:
            raise ValueError("choose days or a start (from, --since), not both")
        if days is not None and not (0 < days <= MAX_DAYS):
            raise ValueError(f"days must be more than 0 and at most {MAX_DAYS:g}")
        end = until
        if end is None:
            stale = data_end is not None and now - data_end > STALE_AFTER_S
            end = data_end if stale and data_end is not None else now
        start = since if since is not None else end - (days or DEFAULT_DAYS) * DAY_S
        if not start < end:
            raise ValueError("the range must start before it ends")
        if (end - start) / DAY_S > MAX_DAYS:
            raise ValueError(f"the range is longer than {MAX_DAYS:g} days")
        return cls(start=start, end=end, now=now, data_end=data_end, note=note)

    @classmethod
    def from_query(cls, query: Mapping[str, str], now: float, data_end: float | None) -> TimeWindow:
        """The range a page's query asks for (``days``, ``from``, ``to``); a
        query that cannot be read gives the default range with a ``note``
        saying what was wrong, so the page still answers."""
        try:
            raw_days = query.get("days") or None
            days = float(raw_days) if raw_days is not None else None
            if days is not None and not math.isfinite(days):
                raise ValueError("days must be a number")
            since = parse_time(query["from"]) if query.get("from") else None
            until = parse_time(query["to"]) if query.get("to") else None
            if until is not None and _is_date(query["to"]):
                until += DAY_S  # a day given as the end is shown whole
            if until is not None:
                until = min(until, now)  # not into the future
            return cls.choose(now, data_end, days=days, since=since, until=until)
        except ValueError as exc:
            text = str(exc)
            if text.startswith("could not convert"):
                text = "days must be a number"
            return cls.choose(now, data_end, note=f"The time range asked for was not used: {text}.")
