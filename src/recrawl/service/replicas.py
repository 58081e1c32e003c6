"""A plan as the planning replica publishes it in the store, and back.

Several services on one store (``Settings.replicas``) plan once: the replica
holding the store's planner lock computes each plan and publishes it
(:meth:`~recrawl.store.SharedPlanning.publish_plan`); the others lease from
it. The published body is the :class:`~recrawl.engine.engine.PlanResult` as
zlib-compressed JSON: tasks repeat their keys and sites, so it shrinks about
tenfold (a plan of 100,000 tasks is a few MB before, a few hundred kB after).
"""

from __future__ import annotations

import base64
import math
import zlib
from typing import Any

import numpy as np
import orjson

from recrawl.engine.engine import PlanResult
from recrawl.engine.tasks import TaskRates, TaskTable
from recrawl.estimate.rates import RateResolution
from recrawl.records.strings import StringColumn

__all__ = ["decode_plan", "encode_plan"]

_FORMAT = 1
_CHUNK = 10_000
"""Tasks whose URLs :func:`encode_plan` writes at once."""
_COLUMNS = ("reason", "gain", "cost", "priority", "rate", "sd")
"""The task table's arrays, published as their bytes (base64): exact, and
infinite or NaN figures survive (JSON has neither)."""


def _finite(v: Any) -> Any:
    """A head task's value as JSON keeps it: a non-finite float as ``["float", repr]``."""
    return ["float", repr(v)] if isinstance(v, float) and not math.isfinite(v) else v


def _unfinite(v: Any) -> Any:
    if isinstance(v, list) and len(v) == 2 and v[0] == "float":
        return float(v[1])
    return v


def encode_plan(plan: PlanResult) -> bytes:
    """``plan`` as the bytes the planning replica publishes: its task table's
    columns (the URLs, sites and page types of its planned pages only).

    The JSON document is written and compressed a part at a time (the URLs
    :data:`_CHUNK` at a time): no list of every task's URL, nor the whole
    document uncompressed, is held at once."""
    tasks = plan.tasks
    table = tasks if isinstance(tasks, TaskTable) else TaskTable.of(list(tasks))
    head = [table[i] for i in range(table.head)]
    res = plan.resolution
    before: dict[str, Any] = {
        "format": _FORMAT,
        "at": plan.at,
        "budget": plan.budget,
        "spent": plan.spent,
        "unit": plan.unit,
        "head": [{k: _finite(v) for k, v in t.items()} for t in head],
    }
    after: dict[str, Any] = {
        "columns": {k: base64.b64encode(getattr(table, k).tobytes()).decode() for k in _COLUMNS},
        "resolution": None
        if res is None
        else [
            res.revisited,
            res.changed_every_revisit,
            None if math.isnan(res.median_interval_days) else res.median_interval_days,
        ],
        "signals": dict(plan.signals),
    }
    z = zlib.compressobj(1)
    out = [z.compress(orjson.dumps(before)[:-1])]  # (the object left open)
    n = len(table) - table.head
    for name in ("url", "site", "page_type"):
        out.append(z.compress(b',"' + name.encode() + b'":['))
        for i in range(0, n, _CHUNK):
            part = orjson.dumps(table.body(name, i, i + _CHUNK))[1:-1]
            out.append(z.compress((b"," if i else b"") + part))
        out.append(z.compress(b"]"))
    out.append(z.compress(b"," + orjson.dumps(after)[1:]))
    out.append(z.flush())
    return b"".join(out)


def decode_plan(body: bytes) -> PlanResult:
    """The :class:`PlanResult` :func:`encode_plan` published, its tasks a
    :class:`~recrawl.engine.tasks.TaskTable` again.

    Raises ValueError for bytes of another format (a replica of a newer or
    older recrawl published them)."""
    doc = orjson.loads(zlib.decompress(body))
    if doc.get("format") != _FORMAT:
        raise ValueError(f"published plan of format {doc.get('format')!r}, expected {_FORMAT}")
    c = {k: base64.b64decode(v) for k, v in doc["columns"].items()}
    urls = StringColumn()
    for i in range(0, len(doc["url"]), 10_000):  # packed as read: no list of them kept
        urls.extend(doc["url"][i : i + 10_000])
    n = len(urls)
    sites: dict[str, str] = {}
    table = TaskTable(
        [{k: _unfinite(v) for k, v in t.items()} for t in doc["head"]],
        urls,
        [sites.setdefault(x, x) for x in doc["site"]],
        [sites.setdefault(x, x) for x in doc["page_type"]],
        np.arange(n, dtype=np.int64),
        np.frombuffer(c["reason"], dtype=np.int8).copy(),
        *(np.frombuffer(c[k], dtype=np.float64).copy() for k in _COLUMNS[1:]),
    )
    res = doc["resolution"]
    return PlanResult(
        at=float(doc["at"]),
        budget=float(doc["budget"]),
        spent=float(doc["spent"]),
        tasks=table,
        rates=TaskRates(table),
        resolution=None
        if res is None
        else RateResolution(int(res[0]), int(res[1]), math.nan if res[2] is None else res[2]),
        unit=str(doc["unit"]),
        signals={str(u): str(v) for u, v in (doc.get("signals") or {}).items()},
    )
