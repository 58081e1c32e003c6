"""Helpers for tests and benchmarks: generated fetch logs with known change rates.

Public so that users can test their own integrations against the same data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["generate_fetch_log", "write_fetch_log"]

_SITES = ("shop.example", "news.example", "jobs.example", "docs.example")
_TYPES = {
    "shop.example": ("product", "category"),
    "news.example": ("article",),
    "jobs.example": ("listing",),
    "docs.example": ("page",),
}


def generate_fetch_log(
    n_observations: int,
    *,
    n_pages: int = 1000,
    start: float = 1_767_225_600.0,
    days: float = 30.0,
    seed: int = 0,
    with_ids: bool = True,
) -> Iterator[dict[str, Any]]:
    """Yield ``n_observations`` fetch observations (SPEC §5 dicts) in time order.

    Pages change as Poisson processes with log-uniform rates between one change
    a year and four a day; each page is revisited at a fixed interval so the
    whole log spans ``days`` days from ``start`` (unix seconds). A few percent
    of fetches are blocks, timeouts or 304s; records carry a volatile
    ``fetched`` field that must not count as a change.
    """
    rng = np.random.default_rng(seed)
    rates = np.exp(rng.uniform(np.log(1 / 365), np.log(4.0), n_pages))
    per_page = max(1, n_observations // n_pages)
    interval = days * 86400.0 / per_page
    phase = rng.uniform(0, interval, n_pages)
    versions = np.zeros(n_pages, dtype=np.int64)
    last_t = np.full(n_pages, np.nan)
    sites = [_SITES[i % len(_SITES)] for i in range(n_pages)]
    emitted = 0
    k = 0
    while emitted < n_observations:
        order = np.argsort(phase)
        for i in order.tolist():
            if emitted >= n_observations:
                break
            t = start + phase[i] + k * interval
            if not np.isnan(last_t[i]):
                versions[i] += rng.poisson(rates[i] * (t - last_t[i]) / 86400.0)
            last_t[i] = t
            site = sites[i]
            types = _TYPES[site]
            obs: dict[str, Any] = {
                "url": f"https://{site}/item/{i}",
                "fetched_at": round(float(t), 3),
                "site": site,
                "page_type": types[i % len(types)],
                "route": f"pool-{'ab'[i % 2]}/de",
                "bytes_sent": 700,
                "latency_ms": round(float(rng.lognormal(5.3, 0.4)), 1),
            }
            u = rng.random()
            if u < 0.02:
                obs["status"] = 429
                obs["bytes_received"] = 900
            elif u < 0.03:
                obs["error"] = "timeout"
                obs["bytes_received"] = 0
            else:
                obs["status"] = 200
                obs["bytes_received"] = 40_000 + (i % 7) * 1000
                obs["record"] = {
                    "v": int(versions[i]),
                    "price": 10 + int(versions[i]) % 9,
                    "fetched": round(float(t)),
                }
            if with_ids:
                obs["id"] = f"obs-{emitted}"
            emitted += 1
            yield obs
        k += 1


def write_fetch_log(path: str, n_observations: int, **kwargs: Any) -> None:
    """Write :func:`generate_fetch_log` to ``path`` as JSONL."""
    with open(path, "w", encoding="utf-8") as f:
        for obs in generate_fetch_log(n_observations, **kwargs):
            f.write(json.dumps(obs, separators=(",", ":")))
            f.write("\n")
