"""Record fingerprints: what "changed" means.

A page changed when the fields the user cares about changed, never when its raw
HTML did: timestamps, ad slots and session tokens differ on every load and mean
nothing. The fingerprint is a hash of the canonical JSON of the extracted
record, after applying the page type's :class:`FieldRule` (an include list, or
an ignore list; dotted paths reach into nested objects).

>>> rule = FieldRule(ignore=["fetched", "ad.slot"])
>>> a = fingerprint({"price": 10, "fetched": "09:00", "ad": {"slot": 1, "brand": "x"}}, rule)
>>> b = fingerprint({"ad": {"brand": "x", "slot": 7}, "fetched": "10:00", "price": 10}, rule)
>>> a == b
True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

__all__ = ["FieldRule", "canonical_json", "fingerprint"]


class FieldRule(BaseModel):
    """Which fields of a record count towards its fingerprint.

    ``include`` keeps only the listed fields; ``ignore`` drops the listed
    fields. Give one or neither; a dotted name (``"offer.price"``) reaches into
    nested objects.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    include: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    """The record the crawl extracts from a page of this type: field name →
    selector (CSS with ``::text`` / ``::attr(name)``, ``xpath:…``, or
    ``jmespath:…`` for JSON; ``name[]`` collects every match), see
    :class:`recrawl.observe.extract.Extractor`. Empty: the crawl hashes the body.
    Written as a TOML table; kept as (name, selector) pairs so a rule stays hashable."""

    @field_validator("fields", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        return tuple(value.items()) if isinstance(value, Mapping) else value

    @model_validator(mode="after")
    def _one_of(self) -> FieldRule:
        if self.include and self.ignore:
            raise ValueError("give either 'include' or 'ignore' fields, not both")
        return self


_ALL = FieldRule()


def _pick(record: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        head, _, rest = path.partition(".")
        if head not in record:
            continue
        value = record[head]
        if rest:
            if isinstance(value, Mapping):
                sub = _pick(value, (rest,))
                if sub:
                    merged = out.get(head, {})
                    merged.update(sub)
                    out[head] = merged
        else:
            out[head] = value
    return out


def _drop(record: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    out = dict(record)
    nested: dict[str, list[str]] = {}
    for path in paths:
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, []).append(rest)
        else:
            out.pop(head, None)
    for head, rests in nested.items():
        value = out.get(head)
        if isinstance(value, Mapping):
            out[head] = _drop(value, tuple(rests))
    return out


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no insignificant whitespace (stable across loads)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits, non-string keys
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(record: Mapping[str, Any], rule: FieldRule | None = None) -> str:
    """Hex fingerprint (32 characters) of ``record`` under ``rule``."""
    rule = rule or _ALL
    if rule.include:
        kept: Mapping[str, Any] = _pick(record, rule.include)
    elif rule.ignore:
        kept = _drop(record, rule.ignore)
    else:
        kept = record
    return hashlib.blake2b(canonical_json(kept), digest_size=16).hexdigest()
