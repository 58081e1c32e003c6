"""The columns of a batch of observations that depend on each observation alone.

Storing a batch needs some figures of every observation as arrays (its time,
status, sizes, billed credits, latency, idempotency key) and the JSON of the
fields only the log keeps. None of them depends on the page or on other
observations, so a large ingest computes them in the processes that parse
(:func:`observation_columns` on each parsed chunk) and the storing process
only gathers them. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from hashlib import blake2b
from operator import attrgetter
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from orjson import dumps

from recrawl.observe.observation import Observation

__all__ = ["CANARY_CODES", "LOG_FIELDS", "ObservationColumns", "observation_columns"]

LOG_FIELDS: Final = (
    "status", "error", "record_hash", "record_empty", "etag", "last_modified",
    "bytes_sent", "bytes_received", "credits", "rendered", "latency_ms", "route",
    "conditional", "lease_id", "id",
)  # fmt: skip
"""The fields of an observation the log keeps as one JSON array (besides its
page, time and outcomes, which are columns of their own)."""

_log_fields = attrgetter(*LOG_FIELDS)
CANARY_CODES: Final = {None: 0, "ok": 1, "mismatch": 2}
"""Codes of :attr:`ObservationColumns.canary`."""


@dataclass(frozen=True, slots=True)
class ObservationColumns:
    """Per-observation columns, in the order of the observations they came from.

    ``key`` is the first 8 bytes of the idempotency key as a signed big-endian
    integer; ``status`` is 0 when there was none; ``credits`` and
    ``latency_ms`` are NaN when not reported; ``billed`` is
    :meth:`~recrawl.observation.Observation.billed_credits`; ``canary`` is the
    reporter's canary check (0 none, 1 ``ok``, 2 ``mismatch``); ``route_hash``
    is a 64-bit hash of the route (equal routes, equal hashes, in any process);
    ``log`` is the
    JSON array of :data:`LOG_FIELDS`.
    """

    key: NDArray[np.int64]
    fetched_at: NDArray[np.float64]
    status: NDArray[np.int64]
    bytes_sent: NDArray[np.int64]
    bytes_received: NDArray[np.int64]
    credits: NDArray[np.float64]
    billed: NDArray[np.float64]
    latency_ms: NDArray[np.float64]
    rendered: NDArray[np.bool_]
    conditional: NDArray[np.bool_]
    canary: NDArray[np.int8]
    route_hash: NDArray[np.int64]
    log: list[str]

    def __len__(self) -> int:
        return len(self.key)

    def take(self, index: NDArray[np.intp]) -> ObservationColumns:
        """The columns of the observations ``index``, in that order."""
        arrays = {f.name: getattr(self, f.name)[index] for f in _ARRAYS}
        log = self.log
        return ObservationColumns(**arrays, log=[log[i] for i in index.tolist()])

    @staticmethod
    def concat(parts: Sequence[ObservationColumns]) -> ObservationColumns:
        """The columns of ``parts`` one after the other."""
        if len(parts) == 1:
            return parts[0]
        arrays = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in _ARRAYS}
        return ObservationColumns(**arrays, log=[s for p in parts for s in p.log])


_canary = attrgetter("canary")
_route = attrgetter("route")


class _Hashes(dict[str, int]):
    """Route → 64-bit hash (BLAKE2b of its UTF-8), computed once per distinct route."""

    def __missing__(self, route: str) -> int:
        if len(self) >= 100_000:  # a log with that many routes: do not grow without end
            self.clear()
        digest = blake2b(route.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        h = self[route] = int.from_bytes(digest, "big", signed=True)
        return h


_ROUTE_HASHES: Final = _Hashes()
_ARRAYS: Final = tuple(f for f in fields(ObservationColumns) if f.name != "log")


def observation_columns(obs: Sequence[Observation]) -> ObservationColumns:
    """The columns of ``obs`` (one pass per column: faster than building tuples)."""
    n = len(obs)
    keys = b"".join([o.key[:8] for o in obs])
    if len(keys) == 8 * n:  # every key has 8 bytes or more (parsed keys have 16)
        key = np.frombuffer(keys, dtype=">i8").astype(np.int64)
    else:  # a key shorter than 8 bytes: the same integer int.from_bytes gives
        key = np.fromiter((int.from_bytes(o.key[:8], "big", signed=True) for o in obs), np.int64, n)

    def col(values: Any, dtype: Any) -> Any:
        return np.fromiter(values, dtype, n)

    status = col((0 if o.status is None else o.status for o in obs), np.int64)
    credits = col((np.nan if o.credits is None else o.credits for o in obs), np.float64)
    ok = ((status >= 200) & (status < 300)) | (status == 304)
    return ObservationColumns(
        key=key,
        fetched_at=col((o.fetched_at for o in obs), np.float64),
        status=status,
        bytes_sent=col((o.bytes_sent for o in obs), np.int64),
        bytes_received=col((o.bytes_received for o in obs), np.int64),
        credits=credits,
        billed=np.where(np.isnan(credits), ok, credits),
        latency_ms=col((np.nan if o.latency_ms is None else o.latency_ms for o in obs), np.float64),
        rendered=col((o.rendered for o in obs), np.bool_),
        conditional=col((o.conditional for o in obs), np.bool_),
        canary=col(map(CANARY_CODES.__getitem__, map(_canary, obs)), np.int8),
        route_hash=col(map(_ROUTE_HASHES.__getitem__, map(_route, obs)), np.int64),
        log=[dumps(_log_fields(o)).decode() for o in obs],
    )
