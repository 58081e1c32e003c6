"""Per-site politeness: when the crawl loop may start the next request to a site.

Pure: nothing here reads a clock or sleeps. Every method takes ``now``, a time in
**unix seconds** (float), and every returned time is unix seconds too; delays
and holds are in **seconds**, latencies in **milliseconds**.

A :class:`SiteGate` keeps one site's state and applies these rules:

* **Slots.** At most ``concurrency`` requests in flight.
* **Spacing.** Two request starts are at least the *effective delay* apart: the
  configured ``min_delay_s``, raised to a robots.txt ``Crawl-delay`` when one is
  set, multiplied by the latency throttle and by 2 in the ``degrading`` band.
  Under a Crawl-delay the delay also counts from the end of the previous
  request, so the site sees the gap whenever the request reaches it.
* **Retry-After.** A 429 or 503 carrying ``Retry-After`` closes the whole site
  for at least that long (a later, shorter Retry-After never shortens a hold).
* **Back-off.** Hard failures (429, 403, any 5xx, timeouts, connection resets)
  three in a row start an exponential back-off: the site is closed for
  ``max(2 × min_delay_s, 1 s)`` after the third, the pause doubles with each
  further hard failure, capped at one hour. Any success clears it.
* **Latency throttle** (AutoThrottle-like). A response slower than twice the
  site's running median latency, when the median of the last three is too
  (a rise, not one slow answer: a lone spike from a busy client or a GC pause
  moves nothing) and by at least :data:`THROTTLE_MIN_RISE_MS`, doubles the throttle factor (up to 64×); each response back
  under that bound halves it, down to 1×.
* **Health band.** ``healthy`` and ``unknown`` change nothing; ``degrading``
  halves concurrency (at least 1) and doubles the delay; ``critical`` pauses the
  site (:meth:`SiteGate.can_start` is False, :meth:`SiteGate.next_allowed` is
  infinity) until the band changes.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Final, Literal, get_args

from recrawl._exceptions import ConfigError

__all__ = [
    "BACKOFF_CAP_S",
    "HARD_FAILURE_BURST",
    "THROTTLE_MIN_RISE_MS",
    "Band",
    "SiteGate",
    "is_hard_failure",
    "parse_retry_after",
]

Band = Literal["healthy", "degrading", "critical", "unknown"]
"""The site's health band, as ``recrawl.health`` reports it."""

_BANDS: Final = frozenset(get_args(Band))
HARD_FAILURE_BURST: Final = 3
"""Hard failures in a row that start the back-off."""
BACKOFF_CAP_S: Final = 3600.0
"""The longest back-off pause, in seconds."""
_BACKOFF_FLOOR_S: Final = 1.0
_THROTTLE_CAP: Final = 64.0
THROTTLE_MIN_RISE_MS: Final = 100.0
"""A rise in latency smaller than this (milliseconds) throttles nothing: a site
answering in 3 ms instead of 1 ms is not under load (the client was busy)."""
_LATENCY_WINDOW: Final = 64
_LATENCY_MIN_SAMPLES: Final = 5
_RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
_HARD_STATUSES: Final = frozenset({403, 429})
_HARD_ERROR_WORDS: Final = ("timeout", "timed out", "reset")


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header value.

    Accepts the two forms of RFC 9110: a non-negative integer of seconds, or an
    HTTP date (read against ``now``, unix seconds; a date already past gives
    0.0). A missing, negative or unparseable value gives None.

    >>> parse_retry_after("120", now=0.0)
    120.0
    >>> parse_retry_after("Thu, 01 Jan 1970 00:02:00 GMT", now=60.0)
    60.0
    >>> parse_retry_after("-5", now=0.0) is None, parse_retry_after("soon", now=0.0) is None
    (True, True)
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    if text.lstrip("+-").isdigit():
        return None  # signed: a negative (or malformed) delay
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def is_hard_failure(status: int | None, error: str | None) -> bool:
    """Whether an outcome counts toward the back-off burst.

    Hard: status 429, 403 or any 5xx; an error naming a timeout or a connection
    reset.

    >>> is_hard_failure(503, None), is_hard_failure(None, "read_timeout"), is_hard_failure(404, None)
    (True, True, False)
    """
    if error is not None:
        lowered = error.lower()
        if any(word in lowered for word in _HARD_ERROR_WORDS):
            return True
    return status is not None and (status in _HARD_STATUSES or 500 <= status <= 599)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


class SiteGate:
    """One site's politeness state: slots, spacing, holds, back-off, band.

    Parameters
    ----------
    concurrency
        Requests allowed in flight at once (at least 1).
    min_delay_s
        Least time between two request starts, in seconds (at least 0).

    Examples
    --------
    >>> gate = SiteGate(concurrency=1, min_delay_s=2.0)
    >>> gate.can_start(100.0)
    True
    >>> gate.started(100.0)
    >>> gate.can_start(100.5)  # the one slot is taken
    False
    >>> gate.finished(100.5, status=200, error=None, latency_ms=300.0, headers={})
    >>> gate.next_allowed(100.5), gate.can_start(102.0)
    (102.0, True)
    """

    def __init__(self, concurrency: int, min_delay_s: float) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        if not math.isfinite(min_delay_s) or min_delay_s < 0:
            raise ConfigError(f"min_delay_s must be a finite number >= 0, got {min_delay_s}")
        self.concurrency = concurrency
        self.min_delay_s = float(min_delay_s)
        self.crawl_delay_s = 0.0
        self.band: Band = "unknown"
        self.in_flight = 0
        self.last_start: float | None = None
        self.last_finish: float | None = None
        """When the latest answer came back: a robots.txt Crawl-delay counts from
        it too, so the site sees that gap between two requests whatever the
        network or the client's own stalls do to when a request arrives."""
        self.hold_until = -math.inf
        """Retry-After hold: no start before this time (unix seconds)."""
        self.hard_streak = 0
        self.backoff_s = 0.0
        """The current back-off pause in seconds (0 when not backing off)."""
        self.backoff_until = -math.inf
        self.throttle = 1.0
        """The latency throttle factor on the delay (1 to 64)."""
        self._latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self._recent: deque[float] = deque(maxlen=3)

    # -- configuration ---------------------------------------------------

    def set_crawl_delay(self, seconds: float | None) -> None:
        """Apply a robots.txt ``Crawl-delay`` (seconds): the delay is at least that.

        It never lowers the configured ``min_delay_s``; None or a negative value
        clears a previously set Crawl-delay.
        """
        if seconds is None or not math.isfinite(seconds) or seconds < 0:
            self.crawl_delay_s = 0.0
        else:
            self.crawl_delay_s = float(seconds)

    def set_band(self, band: Band) -> None:
        """Set the site's health band (see the module docstring for its effect)."""
        if band not in _BANDS:
            raise ValueError(f"band must be one of {sorted(_BANDS)}, got {band!r}")
        self.band = band

    # -- derived pacing --------------------------------------------------

    @property
    def base_delay_s(self) -> float:
        """``min_delay_s`` raised to the Crawl-delay, in seconds."""
        return max(self.min_delay_s, self.crawl_delay_s)

    @property
    def effective_delay_s(self) -> float:
        """The spacing now enforced between two starts, in seconds."""
        band_factor = 2.0 if self.band == "degrading" else 1.0
        return self.base_delay_s * self.throttle * band_factor

    @property
    def effective_concurrency(self) -> int:
        """Slots now usable: ``concurrency``, halved (at least 1) when degrading, 0 when critical."""
        if self.band == "critical":
            return 0
        if self.band == "degrading":
            return max(1, self.concurrency // 2)
        return self.concurrency

    @property
    def median_latency_ms(self) -> float | None:
        """The running median of recent response latencies, in ms (None before any)."""
        return statistics.median(self._latencies) if self._latencies else None

    def next_allowed(self, now: float) -> float:
        """The earliest time (unix seconds, never before ``now``) a new request may start.

        Counts spacing since the last start, a Retry-After hold and the back-off
        pause; slots are not counted (see :meth:`can_start`). Infinity while the
        band is ``critical``.
        """
        if self.band == "critical":
            return math.inf
        spaced = -math.inf if self.last_start is None else self.last_start + self.effective_delay_s
        if self.crawl_delay_s > 0 and self.last_finish is not None:
            spaced = max(spaced, self.last_finish + self.effective_delay_s)
        return max(now, spaced, self.hold_until, self.backoff_until)

    def can_start(self, now: float) -> bool:
        """Whether a request may start at ``now``: a slot is free and the time is reached."""
        if self.in_flight >= self.effective_concurrency:
            return False
        return now >= self.next_allowed(now)

    # -- events ----------------------------------------------------------

    def hop(self, now: float) -> None:
        """Record a redirect hop to the site at ``now``: a request for the
        spacing, inside a fetch that already holds its slot (or another site's)."""
        self.last_start = now if self.last_start is None else max(self.last_start, now)

    def started(self, now: float) -> None:
        """Record that a request to the site started at ``now``."""
        self.in_flight += 1
        self.last_start = now if self.last_start is None else max(self.last_start, now)

    def finished(
        self,
        now: float,
        status: int | None,
        error: str | None,
        latency_ms: float | None,
        headers: Mapping[str, str],
    ) -> None:
        """Record a request's outcome at ``now`` and apply its rules.

        Parameters
        ----------
        status
            The HTTP status, None when no response arrived.
        error
            The transport error's name (``"timeout"``, ``"connection_reset"``…), or None.
        latency_ms
            Time to the response, in milliseconds; None when unknown. Only
            responses without an error feed the latency throttle.
        headers
            Response headers (case-insensitive lookup of ``Retry-After``).
        """
        self.in_flight = max(0, self.in_flight - 1)
        self.last_finish = now if self.last_finish is None else max(self.last_finish, now)

        if status in _RETRY_AFTER_STATUSES:
            wait = parse_retry_after(_header(headers, "Retry-After"), now)
            if wait is not None:
                self.hold_until = max(self.hold_until, now + wait)

        if is_hard_failure(status, error):
            self.hard_streak += 1
            if self.hard_streak >= HARD_FAILURE_BURST:
                start = max(2.0 * self.min_delay_s, _BACKOFF_FLOOR_S)
                self.backoff_s = (
                    start if self.backoff_s == 0.0 else min(2.0 * self.backoff_s, BACKOFF_CAP_S)
                )
                self.backoff_until = max(self.backoff_until, now + self.backoff_s)
        elif error is None and status is not None:
            self.hard_streak = 0
            self.backoff_s = 0.0
            self.backoff_until = -math.inf

        if error is None and status is not None and latency_ms is not None and latency_ms >= 0:
            self._observe_latency(float(latency_ms))

    def _observe_latency(self, latency_ms: float) -> None:
        self._recent.append(latency_ms)
        if len(self._latencies) >= _LATENCY_MIN_SAMPLES:
            normal = statistics.median(self._latencies)
            bound = max(2.0 * normal, normal + THROTTLE_MIN_RISE_MS)
            if latency_ms > bound:
                if statistics.median(self._recent) > bound:
                    self.throttle = min(2.0 * self.throttle, _THROTTLE_CAP)
            else:
                self.throttle = max(1.0, self.throttle / 2.0)
        self._latencies.append(latency_ms)
