"""A failed fetch is a visit: when a page that failed, or went gone, is due again.

A page whose last fetch failed (an error, a block, a challenge, a timeout, a
redirect that led nowhere: any outcome that did not reach the content) waits
before the plan offers it again, longer after each consecutive failure:

* at least one cycle, then doubling (1, 2, 4 … cycles), at most
  :data:`SLOW_LANE_S` (a day): the slow re-check lane;
* once its failures span about :data:`LONG_FAILING_S` (a week), every
  :data:`LONG_FAILING_WAIT_S` (a week).

A gone page (404, 410, a soft 404) is re-checked rarely, by its consecutive
fetches since it went gone: :data:`GONE_WAITS_S` (after 1, 7, then every 30
days). A success resets both (the count is the page state's ``fails``).

Everything here is pure and vectorised: times in unix seconds, waits in
seconds, ``fails`` whole numbers.

>>> import numpy as np
>>> retry_wait_s(np.array([0, 1, 2, 3, 30]), np.zeros(5, bool), cycle_s=3600.0) / 3600
array([  0.,   1.,   2.,   4., 168.])
>>> retry_wait_s(np.array([1, 2, 3]), np.ones(3, bool), cycle_s=3600.0) / 86400
array([ 1.,  7., 30.])
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "GONE_WAITS_S",
    "LONG_FAILING_S",
    "LONG_FAILING_WAIT_S",
    "SLOW_LANE_S",
    "due",
    "retry_wait_s",
]

DAY_S: Final = 86400.0
SLOW_LANE_S: Final = DAY_S
"""Longest wait between two fetches of a failing page (seconds), until it has
failed for about :data:`LONG_FAILING_S`."""
LONG_FAILING_S: Final = 7 * DAY_S
"""Failing for about this long (the sum of its waits, seconds), a page is
fetched every :data:`LONG_FAILING_WAIT_S` only."""
LONG_FAILING_WAIT_S: Final = 7 * DAY_S
GONE_WAITS_S: Final = (DAY_S, 7 * DAY_S, 30 * DAY_S)
"""Wait after the 1st, 2nd and 3rd (and every later) consecutive gone answer, seconds.
A gone page with no count (gone before the count was kept, schema 5) waits the last."""
_TABLE_LEN: Final = 64


@lru_cache(maxsize=16)
def _failure_waits(cycle_s: float) -> NDArray[np.float64]:
    """Wait after ``k`` consecutive failures, for ``k`` in ``0 … 63`` (seconds)."""
    k = np.arange(_TABLE_LEN, dtype=np.float64)
    wait = np.minimum(cycle_s * 2.0 ** np.maximum(k - 1, 0), SLOW_LANE_S)
    wait = np.maximum(wait, cycle_s)
    # how long the page had failed when its k-th failure came: the waits before it
    failing_for = np.concatenate([[0.0, 0.0], np.cumsum(wait[1:-1])])
    wait = np.where(failing_for >= LONG_FAILING_S, np.maximum(LONG_FAILING_WAIT_S, cycle_s), wait)
    wait[0] = 0.0
    wait.setflags(write=False)
    return wait


def retry_wait_s(
    fails: NDArray[np.integer], gone: NDArray[np.bool_], *, cycle_s: float
) -> NDArray[np.float64]:
    """How long after its last fetch each page waits (seconds): 0 for a page
    whose last fetch succeeded (``fails == 0`` and not gone); see the module
    docstring for the rest. ``cycle_s`` is the planning cycle, seconds."""
    f = np.asarray(fails, dtype=np.int64)
    waits = _failure_waits(float(cycle_s))
    out = waits[np.clip(f, 0, _TABLE_LEN - 1)]
    g = np.asarray(gone, dtype=bool)
    if g.any():
        gone_waits = np.array((GONE_WAITS_S[-1], *GONE_WAITS_S))  # index 0: no count kept
        out = np.where(g, gone_waits[np.clip(f, 0, len(GONE_WAITS_S))], out)
    return out


def due(
    last_fetch: NDArray[np.float64],
    fails: NDArray[np.integer],
    gone: NDArray[np.bool_],
    now: float,
    *,
    cycle_s: float,
) -> NDArray[np.bool_]:
    """Which pages the plan may offer at ``now`` (unix seconds): those never
    fetched (``last_fetch`` NaN), whose last fetch succeeded, or whose wait
    (:func:`retry_wait_s`) since their last fetch, of any outcome, is over."""
    last = np.asarray(last_fetch, dtype=np.float64)
    fails, gone = np.asarray(fails), np.asarray(gone)
    out: NDArray[np.bool_] = np.empty(last.shape, dtype=bool)
    for a in range(0, len(last), _DUE_CHUNK):  # (its temporaries: 30 bytes a page at once)
        sl = slice(a, a + _DUE_CHUNK)
        wait = retry_wait_s(fails[sl], gone[sl], cycle_s=cycle_s)
        with np.errstate(invalid="ignore"):
            over = now - last[sl] >= wait
        out[sl] = over | np.isnan(last[sl]) | (wait <= 0)
    return out


_DUE_CHUNK: Final = 65_536
"""Pages :func:`due` judges at once."""
