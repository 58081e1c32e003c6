"""A plan as the planning replica publishes it in the store, and back.

Several services on one store (``Settings.replicas``) plan once: the replica
holding the store's planner lock computes each plan and publishes it
(:meth:`~recrawl.store.SharedPlanning.publish_plan`); the others lease from
it. The published body is the :class:`~recrawl.engine.engine.PlanResult` as
zlib-compressed JSON: tasks repeat their keys and sites, so it shrinks about
tenfold (a plan of 100,000 tasks is a few MB before, a few hundred kB after).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import orjson

from recrawl.engine.engine import PlanResult
from recrawl.estimate.rates import RateResolution

__all__ = ["decode_plan", "encode_plan"]

_FORMAT = 1


def encode_plan(plan: PlanResult) -> bytes:
    """``plan`` as the bytes the planning replica publishes."""
    res = plan.resolution
    doc: dict[str, Any] = {
        "format": _FORMAT,
        "at": plan.at,
        "budget": plan.budget,
        "spent": plan.spent,
        "unit": plan.unit,
        "tasks": plan.tasks,
        "rates": {u: list(r) for u, r in plan.rates.items()},
        "resolution": None
        if res is None
        else [
            res.revisited,
            res.changed_every_revisit,
            None if math.isnan(res.median_interval_days) else res.median_interval_days,
        ],
    }
    return zlib.compress(orjson.dumps(doc), 1)


def decode_plan(body: bytes) -> PlanResult:
    """The :class:`PlanResult` :func:`encode_plan` published.

    Raises ValueError for bytes of another format (a replica of a newer or
    older recrawl published them)."""
    doc = orjson.loads(zlib.decompress(body))
    if doc.get("format") != _FORMAT:
        raise ValueError(f"published plan of format {doc.get('format')!r}, expected {_FORMAT}")
    res = doc["resolution"]
    return PlanResult(
        at=float(doc["at"]),
        budget=float(doc["budget"]),
        spent=float(doc["spent"]),
        tasks=doc["tasks"],
        rates={u: (float(r[0]), float(r[1])) for u, r in doc["rates"].items()},
        resolution=None
        if res is None
        else RateResolution(int(res[0]), int(res[1]), math.nan if res[2] is None else res[2]),
        unit=str(doc["unit"]),
    )
