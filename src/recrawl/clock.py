"""Clocks: callables returning unix seconds, injected at the edges.

The math never reads a clock; the engine, the crawl loop and the service take
one of these, so a test can stop time and a simulation can run days in minutes.

>>> clock = ManualClock(1_700_000_000.0)
>>> clock.advance(60)
>>> clock()
1700000060.0
>>> sim = ScaledClock(scale=1440.0, real_origin=100.0, virtual_origin=1_700_000_000.0)
>>> sim.at(101.0)  # one real second is one simulated day at 1440x
1700001440.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Clock", "ManualClock", "ScaledClock", "system_clock"]

Clock = Callable[[], float]
"""Anything called with no argument that returns unix seconds."""


def system_clock() -> float:
    """The wall clock, in unix seconds."""
    return time.time()


class ManualClock:
    """A clock (unix seconds) that moves only when told: ``clock.advance(seconds)``."""

    def __init__(self, start: float | None = None) -> None:
        self.t = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self.t += seconds


class ScaledClock:
    """Simulated time: ``virtual_origin + (now − real_origin) × scale`` (unix seconds).

    A simulation feature: with ``scale = 1440`` a real minute is a simulated
    day. Every timestamp recrawl stores, every cycle, delay, Crawl-delay and
    Retry-After it keeps is on this clock; :meth:`real_seconds` turns a
    simulated wait back into the real seconds to sleep.
    """

    def __init__(
        self,
        scale: float = 1.0,
        real_origin: float | None = None,
        virtual_origin: float | None = None,
    ) -> None:
        if not scale > 0:
            raise ValueError(f"time scale must be positive, got {scale}")
        now = time.time()
        self.scale = float(scale)
        self.real_origin = now if real_origin is None else float(real_origin)
        self.virtual_origin = self.real_origin if virtual_origin is None else float(virtual_origin)

    def at(self, real: float) -> float:
        """The simulated time at real unix time ``real``."""
        return self.virtual_origin + (real - self.real_origin) * self.scale

    def __call__(self) -> float:
        return self.at(time.time())

    def real_seconds(self, virtual_seconds: float) -> float:
        """How many real seconds ``virtual_seconds`` of simulated time last."""
        return virtual_seconds / self.scale
