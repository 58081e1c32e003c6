"""The crawl's time as its edges spell it: durations (``20d``) and the simulation
clock (``--time-scale K --clock-origin REAL=VIRTUAL``), shared by ``recrawl
crawl``, ``recrawl simweb`` and the Scrapy add-on."""

from __future__ import annotations

import re
import time

from recrawl.clock import Clock, ScaledClock, system_clock
from recrawl.observe.observation import parse_timestamp

__all__ = ["parse_clock_origin", "parse_duration", "simulation_clock"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``20d``, ``6h``, ``90m``, ``45s``, ``2w`` or a plain number of seconds.

    >>> parse_duration("20d"), parse_duration("1.5h"), parse_duration("90")
    (1728000.0, 5400.0, 90.0)
    """
    m = _DURATION.match(text)
    if m is None:
        raise ValueError("is not a duration like 20d, 6h, 90m or 45s")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_clock_origin(text: str) -> tuple[float, float]:
    """``REAL=VIRTUAL`` (each unix seconds or RFC 3339) as two unix seconds."""
    real, sep, virtual = text.partition("=")
    if not sep:
        raise ValueError("must be REAL=VIRTUAL (unix seconds or RFC 3339 each)")
    return parse_timestamp(real.strip()), parse_timestamp(virtual.strip())


def simulation_clock(scale: float, origin: str | None) -> Clock:
    """The wall clock when ``scale`` is 1 and no ``origin`` is given, else a
    :class:`~recrawl.clock.ScaledClock` (``origin`` ``REAL=VIRTUAL``, default
    now=now). Raises ValueError for a scale that is not a positive number or a
    bad origin (the message says which)."""
    if not scale > 0 or scale == float("inf"):
        raise ValueError(f"the time scale must be a positive number, got {scale}")
    if origin is None and scale == 1.0:
        return system_clock
    now = time.time()
    real, virtual = parse_clock_origin(origin) if origin else (now, now)
    return ScaledClock(scale, real_origin=real, virtual_origin=virtual)
