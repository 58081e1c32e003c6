"""What one fetch means for one page: outcome inference and the page-state fold.

:func:`apply_observation` is the single place where an observation updates a
page: it infers the outcome when the reporter gave none (SPEC §5), updates the
page's current state (last fetch, last success, last change, validators,
fingerprint, running cost, change-rate evidence, Nutch interval) and returns
the outcome. It is pure: the store calls it in time order per page, and calls
it again over a page's whole log when an observation arrives out of order, so
the page ends up as if every observation had been applied in time order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from recrawl.estimate.rates import DEFAULT_HALF_LIFE_DAYS, update_evidence_arrays
from recrawl.observe.observation import Observation
from recrawl.records.evidence import EVIDENCE_COLUMNS
from recrawl.records.pages import (
    CONTENT_OUTCOMES,
    NUTCH_DEFAULT_S,
    NUTCH_MAX_S,
    NUTCH_MIN_S,
    Classifier,
    PageState,
)

__all__ = [
    "CONTENT_OUTCOMES",
    "NUTCH_DEFAULT_S",
    "Classifier",
    "PageState",
    "apply_observation",
    "fixed_outcome",
    "status_outcome",
]

_DAY: Final = 86400.0


def status_outcome(status: int) -> str | None:
    """The outcome a status code alone decides (None for 2xx: content decides).

    >>> [status_outcome(s) for s in (200, 304, 429, 410, 503)]
    [None, 'not_modified', 'hard_block', 'gone', 'error']
    """
    if status == 304:
        return "not_modified"
    if status in (403, 429):
        return "hard_block"
    if status in (404, 410):
        return "gone"
    if 200 <= status < 300:
        return None
    return "error"


def fixed_outcome(
    obs: Observation, page: PageState | None, classifier: Classifier | None
) -> str | None:
    """The outcome that does not depend on the page's history, or None.

    The reporter's own outcome is trusted; then status and error rules; then
    the content classifier for 2xx responses. None means "2xx with content":
    ``new``, ``changed`` or ``unchanged`` depends on the previous fetch.
    """
    if obs.outcome is not None:
        return obs.outcome
    if obs.error is not None and obs.status is None:
        return "hard_block" if obs.error == "connection_reset" else "error"
    s = obs.status
    if s is None:
        return "error"
    if classifier is not None and (obs.title or obs.body_excerpt):
        found = classifier(obs, page)  # block-page markers win over the status code
        if found is not None or 200 <= s < 300:
            return found
    if 200 <= s < 300:
        return classifier(obs, page) if classifier is not None else None
    return status_outcome(s)


def _content_outcome(obs: Observation, page: PageState) -> str:
    if page.last_ok is None:
        return "new"
    if obs.record_hash is not None and page.fingerprint is not None:
        return "unchanged" if obs.record_hash == page.fingerprint else "changed"
    if obs.etag is not None and page.etag is not None:
        return "unchanged" if obs.etag == page.etag else "changed"
    if obs.last_modified is not None and page.last_modified is not None:
        return "unchanged" if obs.last_modified == page.last_modified else "changed"
    return "unchanged"


def apply_observation(
    page: PageState,
    obs: Observation,
    fixed: str | None,
    *,
    half_life_days: float | None = None,
    quiet_until: float | Callable[[float, float], float] | None = None,
) -> str:
    """Apply one observation to ``page`` in place and return its outcome.

    ``fixed`` is :func:`fixed_outcome` for this observation (computed once at
    ingest and stored, so a rebuild never re-runs the classifier). Without a
    fingerprint or validators to compare, a 2xx revisit counts as unchanged:
    report ``record`` or ``record_hash`` (or validators) to detect changes.
    ``quiet_until`` (unix seconds, or a function of the page's last
    successful fetch and this one's times, asked only when this one found a
    change), when it lies between the two, is until when a trusted source
    vouches the page was unchanged: a change found then counts as unchanged
    until that time and changed after it (:func:`recrawl.hints.quiet_until`).
    """
    outcome = fixed if fixed is not None else _content_outcome(obs, page)
    t = obs.fetched_at
    page.fetches += 1
    page.bytes_total += obs.bytes_sent + obs.bytes_received
    page.credits_total += obs.billed_credits()
    if page.last_fetch is None or t > page.last_fetch:
        page.last_fetch = t
    if outcome not in CONTENT_OUTCOMES:
        # a failed fetch is a visit: the plan waits a back-off that grows with
        # ``fails`` (recrawl.plan.backoff); a page going gone counts from 1
        page.fails = page.fails + 1 if outcome != "gone" or page.gone else 1
        if outcome == "gone":
            page.gone = True
        elif outcome == "soft_block" and obs.bytes_received and page.avg_bytes:
            # Drift slowly towards what the site now sends, so that a page that
            # really shrank is not taken for a soft block forever.
            page.avg_bytes = 0.98 * page.avg_bytes + 0.02 * obs.bytes_received
        return outcome
    page.gone = False
    page.fails = 0
    if obs.status is not None and 200 <= obs.status < 300 and obs.bytes_received:
        b = float(obs.bytes_received)
        page.avg_bytes = b if page.avg_bytes == 0 else 0.9 * page.avg_bytes + 0.1 * b
    if outcome == "new":
        page.last_change = t
    elif page.last_ok is not None:
        changed = outcome == "changed"
        start = page.last_ok
        hl = DEFAULT_HALF_LIFE_DAYS if half_life_days is None else half_life_days
        # one page through the batch fold's own function: the same numbers, bins
        # and change-point test as fold_batch gives
        ev = [np.array([page.ev_nc]), np.array([page.ev_tc]), np.array([page.ev_nu]),
              np.array([page.ev_tu])]  # fmt: skip
        raw = np.frombuffer(page.ev_bins, dtype="<f4")
        bins = raw.astype(np.float32).reshape(1, EVIDENCE_COLUMNS)
        one = np.zeros(1, dtype=np.intp)
        q: float | None = None
        if changed and quiet_until is not None:
            q = quiet_until(start, t) if callable(quiet_until) else quiet_until
        if q is not None and start < q < t:
            update_evidence_arrays(
                ev[0], ev[1], ev[2], ev[3], one, (q - start) / _DAY, False,
                half_life_days=hl, bins=bins,
            )  # fmt: skip
            start = q
        interval_days = max(t - start, 0.0) / _DAY
        if interval_days > 0:  # two fetches at the same instant carry no rate evidence
            update_evidence_arrays(
                ev[0], ev[1], ev[2], ev[3], one, interval_days, changed,
                half_life_days=hl, bins=bins,
            )  # fmt: skip
        page.ev_nc, page.ev_tc, page.ev_nu, page.ev_tu = (float(a[0]) for a in ev)
        page.ev_bins = bins.astype("<f4").tobytes()
        factor = 0.8 if changed else 1.4
        page.nutch_interval = min(max(page.nutch_interval * factor, NUTCH_MIN_S), NUTCH_MAX_S)
        if changed:
            page.changes += 1
            page.last_change = t
    page.last_ok = t
    if obs.record_hash is not None:
        page.fingerprint = obs.record_hash
    if obs.etag is not None:
        page.etag = obs.etag
    if obs.last_modified is not None:
        page.last_modified = obs.last_modified
    return outcome
