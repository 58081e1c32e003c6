"""Reading the observation log's rows back as observations and page states.

A log row keeps an observation's key, page, time, outcome and the rest of its
fields as a JSON array (:data:`~recrawl.observe.batch.LOG_FIELDS`); a
``page_checkpoints`` row keeps a page's state after its pruned rows. These
decoders are what a re-fold (:mod:`recrawl.engine.pipeline`) needs of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from recrawl.observe.batch import LOG_FIELDS
from recrawl.observe.observation import Observation
from recrawl.records.pages import MUTABLE_FIELDS, PageState, evidence_blob

__all__ = ["PRUNE_CHUNK_ROWS", "from_checkpoint", "logged_observation"]

PRUNE_CHUNK_ROWS: Final = 50_000
"""Observations pruned per transaction (whole pages), about."""


def logged_observation(page: PageState, t: float, rest: str) -> Observation:
    """The observation of ``page`` fetched at ``t`` that a log row stored (its
    other fields, ``rest``, as the JSON array :data:`~recrawl.observe.batch.LOG_FIELDS` orders)."""
    return Observation(
        url=page.url,
        fetched_at=t,
        site=page.site,
        page_type=page.page_type,
        **dict(zip(LOG_FIELDS, orjson.loads(rest), strict=True)),
    )


def from_checkpoint(page: PageState, cp: Sequence[Any] | None) -> bool:
    """Put ``page`` in the state its log's first row must be folded onto: its
    checkpoint ``cp`` (a ``page_checkpoints`` row from ``reached`` on), else a
    reset page; identity, value and the earliest ``first_seen`` are kept.
    Returns whether the page had been reached before its log's first row."""
    if cp is None:
        page.reset_history()
        return False
    first_seen = page.first_seen
    for name, v in zip(MUTABLE_FIELDS, cp[1:], strict=True):
        setattr(page, name, v)
    page.first_seen = min(first_seen, page.first_seen)
    page.gone = bool(page.gone)
    page.ev_bins = evidence_blob(page.ev_bins, page.ev_nc, page.ev_tc)  # (None: before bins)
    return bool(cp[0])
