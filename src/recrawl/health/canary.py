"""Canaries: stable pages whose right answer is known.

A canary is fetched on a fixed schedule through the same path as production
traffic. One that parses but carries the wrong value is the hardest failure to
see and the only one that proves it: :func:`canary_mismatches` names the fields
whose value differs from the expectation.

>>> canary_mismatches({"price": 19.99, "title": "Kettle"}, {"price": "19.99"})
[]
>>> canary_mismatches({"price": 24.5}, {"price": "19.99", "stock.count": "3"})
['price', 'stock.count']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["canary_mismatches", "parse_expectations"]

_MISSING = object()


def _get(record: Mapping[str, Any], path: str) -> Any:
    cur: Any = record
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _same(actual: Any, expected: str) -> bool:
    if actual is _MISSING:
        return False
    if isinstance(actual, bool):
        return str(actual).lower() == expected.strip().lower()
    if isinstance(actual, int | float):
        try:
            return float(expected) == float(actual)
        except ValueError:
            return False
    return str(actual).strip() == expected.strip()


def canary_mismatches(record: Mapping[str, Any], expect: Mapping[str, str]) -> list[str]:
    """Fields (dotted paths) of ``expect`` whose value in ``record`` is wrong or missing.

    Numbers compare numerically (``"19.99"`` matches ``19.99``), other values as
    trimmed strings.
    """
    return [k for k, v in expect.items() if not _same(_get(record, k), v)]


def parse_expectations(items: list[str]) -> dict[str, str]:
    """``["price=19.99", "title=Kettle"]`` → ``{"price": "19.99", "title": "Kettle"}``.

    Raises ValueError naming the item without ``=``.
    """
    out: dict[str, str] = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise ValueError(f"expectation {item!r} is not FIELD=VALUE")
        out[field.strip()] = value
    return out
