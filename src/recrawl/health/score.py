"""Target health: is each site still behaving like itself, and what to do if not.

Two scorers read the same 15-minute buckets (:mod:`recrawl.buckets`):

``reference``
    The seed essay's code, reproduced exactly: :class:`Window` and
    :func:`reference_health_score`. :func:`evaluate_reference` feeds it from
    buckets: the last hour against the pooled baseline, no smoothing, no
    route split.

production (:func:`evaluate_sites`)
    The same weights and caps (hard_block 35, challenge 25, soft_block 25,
    latency 15; full penalty at +20 percentage points or 3× the p95), with:

    * **Baselines per signal** (:func:`compute_baselines`): the median of the
      daily values over the 14 whole UTC days that end at the start of
      yesterday (UTC), so the last 24 to 48 hours never count.
      A median of days, not a pooled rate, so one bad day in the window does
      not raise the normal. Days with fewer than ``min_day_requests`` requests
      are skipped; fewer than ``min_baseline_days`` usable days falls back to
      the pooled rate; no baseline at all compares rates against 0 and does
      not score latency.
    * **An adaptive current window**: the last 15 minutes, widened a bucket
      at a time up to one hour until it holds ``min_requests`` requests on
      healthy routes; fewer than that gives no score and the reason
      ``"not enough requests to judge"``.
    * **Route diagnosis**: over the last hour, each route group (the route
      label's ``/``-separated prefix, coarsest level first, so a dead pool is
      named ``pool-c`` rather than as its sessions) is tested against the rest
      of the site with a one-sided two-proportion z-test, Bonferroni-corrected
      over the site's groups (``route_alpha``), plus an effect-size floor
      (``route_min_excess``) so a tiny difference in a large sample names no
      route. Failures here are hard blocks, challenges, soft blocks and errors.
      Failing groups are dropped from the score, unless they carry more than
      ``route_max_failing_share`` of the requests: a site failing on most of
      its routes is the site.
    * **Only the excess the counts support**: each rate (hard blocks,
      challenges, soft blocks, extraction failures) enters the seed's
      arithmetic at the lower end of its one-sided Wilson interval
      (``confidence_z``, 1.645: 95 %) given the window's request count, so
      13 blocks in 64 requests costs what 13 % does, not 20 %, while 13 000
      in 64 000 costs what 20 % does. A short burst in a small window is
      mostly sampling noise and costs little; a real wave is large against
      its interval and costs nearly its full weight. ``raw_score`` is the
      seed's arithmetic on the observed rates, for comparison.
    * **Smoothing**: each signal's penalty is an exponentially weighted moving
      average with half-life ``half_life_s`` (10 minutes) in time, not in
      steps (see ``_alpha``), so the score is the EWMA of the window scores
      and the reasons are the smoothed penalties of at least one point,
      largest first.
    * **Sequential evidence** (:func:`fold_evidence`): each complete bucket
      on healthy routes is folded once into a one-sided CUSUM per rate
      signal, the site's normal against 10 points above it, at most 4 nats a
      bucket (three buckets, 45 minutes, to establish an excess; no burst
      alone), set at 12 and released below 6. While an excess is sustained
      (:attr:`SiteHealth.sustained`) the signal costs the seed's penalty at
      the rate of the stretch since it began (counts halving every 150
      requests), which has many requests and so no small-window discount: a
      site that starts challenging 25 % reads 75 within the hour and stays
      there while it lasts, and recovers about an hour after it ends. The
      signal's penalty is the larger of this and the smoothed one.
    * **Slow-down share** (:class:`Throttle`): 429/503/Retry-After answers,
      or hard blocks above normal, smoothed (fast up, an hour's half-life
      down), turned into a concurrency factor and a cost multiplier that
      apply whatever the band (:func:`throttle_for`).
    * **Hysteresis**: a band gets worse as soon as the smoothed score crosses
      its threshold (80, 50) and better only once the score clears the
      threshold by ``hysteresis_points``.
    * **Canaries**: any ``canary_mismatch`` in the last ``canary_window_s``
      forces at least the degrading band, caps the score at 79 and puts
      ``canary_mismatch`` first among the reasons: a canary that parses and is
      wrong is proof, so it outranks every inferred penalty. The override is
      not fed back into the smoothing state.
    * **Parser health**, separate: the extraction-failure rate among parsed
      responses (valid records plus extraction failures), on every route,
      over its own adaptive window (15 minutes to an hour, ``min_requests``
      parsed responses) against its daily-median baseline; score ``100 − 100 × min(1, excess /
      0.20)`` with the rate read at the lower end of its Wilson interval,
      smoothed and banded the same way. It never enters the target health
      score.

Bands and actions (:func:`action_for`): 80–100 healthy (none), 50–79
degrading (halve concurrency, double the effective cost so revisits stretch),
below 50 critical (pause, canaries only, alert a human). Nothing here ever
escalates to heavier collection methods.

:func:`review` scores a history of evaluations against labelled incidents.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from recrawl._exceptions import InvalidObservation
from recrawl.health.buckets import (
    BUCKET_SECONDS,
    LATENCY_BINS,
    LATENCY_EDGES_MS,
    OUTCOMES,
    bucket_start,
)
from recrawl.observe.classify import ExtraMarker, ResponseNormals, classify_response
from recrawl.records.buckets import BucketArrays

__all__ = [
    "BANDS",
    "MIN_REQUESTS",
    "NOT_ENOUGH",
    "SIGNALS",
    "WEIGHTS",
    "Action",
    "Baselines",
    "BucketArrays",
    "Evidence",
    "HealthConfig",
    "HealthState",
    "Incident",
    "IncidentReview",
    "ParserHealth",
    "RecordedHealth",
    "ReviewReport",
    "SiteHealth",
    "Throttle",
    "Window",
    "action_effects",
    "action_for",
    "aggregate_buckets",
    "band_for",
    "compute_baselines",
    "evaluate_reference",
    "evaluate_sites",
    "fold_evidence",
    "reference_health_score",
    "review",
    "throttle_for",
]

# ---------------------------------------------------------------------------
# The reference scorer: the seed's code, exactly.
# ---------------------------------------------------------------------------


@dataclass
class Window:
    """Counts of one site over one window, as in the seed essay.

    Attributes
    ----------
    requests
        Requests in the window.
    hard_blocks
        403, 429 and connection resets.
    challenges
        CAPTCHA or interstitial pages.
    soft_blocks
        200 OK carrying a block page or an empty result.
    p95_latency_ms
        95th percentile of response time, milliseconds.
    """

    requests: int
    hard_blocks: int
    challenges: int
    soft_blocks: int
    p95_latency_ms: float


MIN_REQUESTS: Final = 50
"""Fewer requests than this in the current window give no score."""

WEIGHTS: Final[dict[str, int]] = {
    "hard_block": 35,
    "challenge": 25,
    "soft_block": 25,
    "latency": 15,
}
"""Points each signal can cost at most (the seed's weights)."""

SIGNALS: Final = ("hard_block", "challenge", "soft_block", "latency")
"""The hostility signals, in the seed's order."""

NOT_ENOUGH: Final = "not enough requests to judge"
"""The reason given instead of a score when a window is too small."""

_W = np.array([WEIGHTS[k] for k in SIGNALS], dtype=np.float64)


def _reference_signals(w: Window) -> dict[str, float]:
    n = max(1, w.requests)
    return {
        "hard_block": w.hard_blocks / n,
        "challenge": w.challenges / n,
        "soft_block": w.soft_blocks / n,
        "latency": w.p95_latency_ms,
    }


def _reference_badness(name: str, now: float, base: float) -> float:
    if name == "latency":
        # Full penalty at three times the site's own normal latency.
        return min(1.0, max(0.0, (now / max(base, 1.0) - 1) / 2))
    # Full penalty at 20 percentage points above the site's own normal rate.
    return min(1.0, max(0.0, (now - base) / 0.20))


def reference_health_score(current: Window, baseline: Window) -> tuple[int | None, list[str]]:
    """The seed's health score of ``current`` against ``baseline`` (0–100).

    Only the excess over the baseline counts; rates reach full penalty at 20
    percentage points above the baseline rate, latency at 3× the baseline p95;
    each signal is capped at its weight.

    Returns
    -------
    tuple of (int or None, list of str)
        The score and the signals that cost at least one point, largest
        penalty first; ``(None, ["not enough requests to judge"])`` below
        :data:`MIN_REQUESTS` requests.

    Examples
    --------
    >>> base = Window(10_000, 0, 300, 0, 800.0)
    >>> reference_health_score(Window(1_000, 0, 30, 0, 800.0), base)
    (100, [])
    >>> reference_health_score(Window(5, 1, 0, 0, 800.0), base)
    (None, ['not enough requests to judge'])
    >>> reference_health_score(Window(100, 20, 0, 0, 800.0), base)
    (65, ['hard_block'])
    """
    if current.requests < MIN_REQUESTS:
        return None, [NOT_ENOUGH]
    now, base = _reference_signals(current), _reference_signals(baseline)
    penalty = {k: w * _reference_badness(k, now[k], base[k]) for k, w in WEIGHTS.items()}
    score = round(100 - sum(penalty.values()))
    reasons = [k for k, p in sorted(penalty.items(), key=lambda kv: -kv[1]) if p >= 1]
    return score, reasons


def penalty_matrix(
    rates: npt.NDArray[np.float64],
    base_rates: npt.NDArray[np.float64],
    p95: npt.NDArray[np.float64],
    base_p95: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Per-signal penalties in points, shape ``(S, 4)``, the seed's arithmetic.

    ``rates`` and ``base_rates`` are ``(S, 3)`` fractions (hard, challenge,
    soft); ``p95`` and ``base_p95`` milliseconds. A NaN latency (no data, or
    no baseline) costs nothing; a NaN base rate counts as 0.
    """
    bad = np.empty((rates.shape[0], 4), dtype=np.float64)
    bad[:, :3] = np.minimum(1.0, np.maximum(0.0, (rates - np.nan_to_num(base_rates)) / 0.20))
    with np.errstate(invalid="ignore"):
        lat = np.minimum(1.0, np.maximum(0.0, (p95 / np.maximum(base_p95, 1.0) - 1) / 2))
    bad[:, 3] = np.nan_to_num(lat, nan=0.0)
    return _W * bad


def score_from_penalties(pen: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``100 − Σ penalties`` summed in the seed's order (for identical rounding)."""
    return 100 - (((pen[:, 0] + pen[:, 1]) + pen[:, 2]) + pen[:, 3])


def _reasons(pen: Sequence[float]) -> list[str]:
    order = sorted(range(len(SIGNALS)), key=lambda i: -pen[i])
    return [SIGNALS[i] for i in order if pen[i] >= 1]


# ---------------------------------------------------------------------------
# Bucket arrays and aggregation.
# ---------------------------------------------------------------------------

_O = {name: i for i, name in enumerate(OUTCOMES)}
_VALID = [_O[k] for k in ("changed", "unchanged", "not_modified", "new")]
_EDGES = [float(x) for x in LATENCY_EDGES_MS]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _unix_seconds(value: object, line: int) -> float:
    if isinstance(value, bool):
        raise InvalidObservation("must be unix seconds or RFC 3339", field="fetched_at", line=line)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    raise InvalidObservation("must be unix seconds or RFC 3339", field="fetched_at", line=line)


def _record_key(obs: Mapping[str, Any]) -> object:
    if obs.get("record_hash") is not None:
        return obs["record_hash"]
    record = obs.get("record")
    if record is None:
        return None
    try:
        return hash(tuple(sorted(record.items())))
    except TypeError:  # nested values
        return json.dumps(record, sort_keys=True, default=str)


def aggregate_buckets(
    observations: Iterable[Mapping[str, Any]],
    *,
    normals: ResponseNormals | None = None,
    extra_markers: Iterable[ExtraMarker] = (),
) -> BucketArrays:
    """Aggregate fetch observations (SPEC §5) into 15-minute buckets.

    Observations should arrive in time order, because an observation without
    an ``outcome`` is classified with :func:`~recrawl.classify.classify_response`
    against the normals (:class:`~recrawl.classify.ResponseNormals`) seen so
    far. A reporter's ``outcome`` is trusted over inference. An ordinary page is
    ``new`` the first time its URL is seen, then ``changed`` or ``unchanged`` by
    its record (or ``record_hash``); without a record it is ``unchanged``.
    A repeated ``id`` is counted once.

    Beyond SPEC §5 this reads ``title`` and ``body_excerpt`` (for block-page
    markers), ``canary`` (``"ok"`` or ``"mismatch"``, set by whatever checks
    a canary's known value) and ``retry_after`` (seconds the answer asked to
    wait; with a 429 or 503 status it counts in ``throttled``).

    Parameters
    ----------
    observations
        Observation mappings.
    normals
        Normals to classify against and update; a fresh one when None.
    extra_markers
        User block-page markers, see :func:`recrawl.classify.find_marker`.

    Returns
    -------
    BucketArrays
        One row per ``(site, page_type, route, bucket_start)`` seen.

    Raises
    ------
    InvalidObservation
        On a missing ``url`` or a bad ``fetched_at`` (naming the 1-based line).
    """
    normals = ResponseNormals() if normals is None else normals
    markers = tuple(extra_markers)
    keys: dict[tuple[str, str, str, int], int] = {}
    row_of: list[int] = []
    outcome_of: list[int] = []
    lat_row: list[int] = []
    lat_bin: list[int] = []
    sent: list[float] = []
    received: list[float] = []
    credit: list[float] = []
    rendered: list[int] = []
    canary: list[int] = []
    throttled: list[int] = []
    seen_ids: set[object] = set()
    last_record: dict[str, object] = {}
    for line, obs in enumerate(observations, start=1):
        oid = obs.get("id")
        if oid is not None:
            if oid in seen_ids:
                continue
            seen_ids.add(oid)
        url = obs.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidObservation("is required", field="url", line=line)
        t = _unix_seconds(obs.get("fetched_at"), line)
        site = obs.get("site") or urlsplit(url).hostname or ""
        page_type = obs.get("page_type") or "page"
        route = obs.get("route") or ""
        outcome = obs.get("outcome")
        if outcome is None:
            outcome = classify_response(
                status=obs.get("status"),
                error=obs.get("error"),
                body_bytes=obs.get("bytes_received"),
                title=obs.get("title"),
                body_excerpt=obs.get("body_excerpt"),
                record=obs.get("record"),
                normal_body_bytes=normals.body_bytes(site, page_type),
                required_fields=normals.required_fields(site, page_type),
                extra_markers=markers,
            )
            if outcome is None:
                rkey = _record_key(obs)
                if url not in last_record:
                    outcome = "new"
                elif rkey is not None and last_record[url] != rkey:
                    outcome = "changed"
                else:
                    outcome = "unchanged"
                last_record[url] = rkey
                status = obs.get("status")
                if status is not None and 200 <= status < 300:
                    normals.update(site, page_type, obs.get("bytes_received"), obs.get("record"))
        if outcome not in _O:
            raise InvalidObservation(f"unknown outcome {outcome!r}", field="outcome", line=line)
        key = (site, page_type, route, bucket_start(t))
        row = keys.get(key)
        if row is None:
            row = keys[key] = len(keys)
        row_of.append(row)
        outcome_of.append(_O[outcome])
        lat = obs.get("latency_ms")
        if lat is not None:
            lat_row.append(row)
            lat_bin.append(bisect.bisect_left(_EDGES, float(lat)))
        sent.append(float(obs.get("bytes_sent") or 0))
        received.append(float(obs.get("bytes_received") or 0))
        credit.append(float(obs.get("credits") or 0))
        rendered.append(1 if obs.get("rendered") else 0)
        status_code = obs.get("status")
        throttled.append(
            1 if status_code in (429, 503) or obs.get("retry_after") is not None else 0
        )
        c = obs.get("canary")
        canary.append(0 if c is None or c is False else (1 if c == "ok" or c is True else 2))
    rows = len(keys)
    r = np.asarray(row_of, dtype=np.int64)
    o = np.asarray(outcome_of, dtype=np.int64)
    cnt = np.bincount(r, minlength=rows).astype(np.int64)
    outcomes = np.bincount(r * len(OUTCOMES) + o, minlength=rows * len(OUTCOMES))
    lr = np.asarray(lat_row, dtype=np.int64)
    lb = np.asarray(lat_bin, dtype=np.int64)
    latency = np.bincount(lr * LATENCY_BINS + lb, minlength=rows * LATENCY_BINS)
    can = np.asarray(canary, dtype=np.int64)
    labels = list(keys)

    def sums(values: Sequence[float]) -> FloatArray:
        return np.bincount(r, weights=np.asarray(values, np.float64), minlength=rows).astype(
            np.float64
        )

    return BucketArrays.from_labels(
        site=[k[0] for k in labels],
        page_type=[k[1] for k in labels],
        route=[k[2] for k in labels],
        bucket_start=[k[3] for k in labels],
        n=cnt,
        outcomes=outcomes.reshape(rows, len(OUTCOMES)),
        latency=latency.reshape(rows, LATENCY_BINS),
        bytes_sent=sums(sent),
        bytes_received=sums(received),
        credits=sums(credit),
        rendered=np.bincount(r, weights=np.asarray(rendered, np.float64), minlength=rows),
        canary_ok=np.bincount(r, weights=(can == 1).astype(np.float64), minlength=rows),
        canary_mismatch=np.bincount(r, weights=(can == 2).astype(np.float64), minlength=rows),
        throttled=np.bincount(r, weights=np.asarray(throttled, np.float64), minlength=rows),
    )


# ---------------------------------------------------------------------------
# Configuration, bands, actions.
# ---------------------------------------------------------------------------

Band = Literal["healthy", "degrading", "critical", "unknown"]
Diagnosis = Literal["none", "site", "route"]
BANDS: Final[tuple[str, ...]] = ("healthy", "degrading", "critical")
"""Known bands from best to worst (``unknown`` is the absence of one)."""
_RANK = {"unknown": -1, "healthy": 0, "degrading": 1, "critical": 2}
DAY: Final = 86_400


@dataclass(frozen=True)
class HealthConfig:
    """Knobs of the production scorer (times in seconds).

    Attributes
    ----------
    min_requests
        Requests a window needs before it is scored.
    current_min_s, current_max_s
        Shortest and longest current window; it widens by one bucket at a time.
    baseline_days
        Whole UTC days in the baseline.
    min_day_requests
        Requests a baseline day needs to count.
    min_baseline_days
        Usable days below which the baseline falls back to the pooled rate.
    half_life_s
        Half-life of the exponentially weighted smoothing.
    stale_after_s
        A smoothing state older than this restarts from the raw score.
    hysteresis_points
        Points above a band's lower threshold needed to move back up to it.
    healthy_min, critical_below
        Band thresholds: ``score >= healthy_min`` healthy, ``< critical_below``
        critical, degrading between.
    confidence_z
        Normal quantile of the one-sided confidence bound at which each
        current rate is read (1.645: the rate is at least this with 95 %
        confidence given the window's counts); 0 reads the observed rates.
    route_alpha
        Family-wise significance of the per-site route test.
    route_min_excess
        Failure-rate excess (fraction) a route group needs over the rest.
    route_max_failing_share
        Largest share of requests failing groups may carry and still be "route".
    route_min_requests
        Requests a route group needs to be tested.
    canary_window_s
        How far back a canary mismatch still forces the degrading band.
    parser_full_penalty
        Extraction-failure excess (fraction) at which the parser score is 0.
    degrading_concurrency, degrading_cost_multiplier
        What the degrading band does to concurrency and effective cost.
    critical_refusal_excess
        Refusal rate (hard blocks + challenges + soft blocks, fraction) above the
        site's normal, over the current window, at which a site already in the
        degrading band is critical; the rate is read at the lower end of its
        95 % Wilson interval, so a small window running high does not qualify. The seed's caps alone never go below 65 on
        refusals (35 points for hard blocks), so a site refusing most requests
        would otherwise only ever be "degrading".
    evidence_shift
        Excess over the site's normal rate (fraction) that the sequential
        test of each rate signal looks for (:func:`fold_evidence`).
    evidence_alarm, evidence_release, evidence_cap
        The test's log-likelihood ratio (nats): at ``evidence_alarm`` the
        excess is established, below ``evidence_release`` it is over; the
        statistic is kept under ``evidence_cap``, so once an incident ends the
        release comes within a bounded number of normal buckets.
    evidence_bucket_cap
        Most evidence one bucket can add (nats): a third of the alarm, so it
        takes three buckets (45 minutes) of evidence to establish an excess,
        never one or two bursts however dense; bursts are not independent
        draws, which is what the ratio assumes.
    evidence_floor
        Smallest normal rate the test assumes (a site that never challenged
        is tested against this, not against 0).
    evidence_memory_requests
        Half-life of the stretch's counts, in requests: the rate of an
        established excess is read over about this many recent requests
        (÷ ln 2), so it follows a level that changes again without
        forgetting faster on a quiet site than its traffic can tell.
    throttle_free_share, throttle_gain, throttle_floor
        The slow-down share (429/503/Retry-After answers, or hard blocks above
        the site's normal) costs nothing up to ``throttle_free_share``; beyond
        it the concurrency factor is ``1 − throttle_gain × (share − free)``,
        never below ``throttle_floor``.
    throttle_recover_half_life_s
        Half-life at which the slow-down share decays once the site stops
        asking (it rises with ``half_life_s``).
    """

    min_requests: int = MIN_REQUESTS
    current_min_s: int = BUCKET_SECONDS
    current_max_s: int = 4 * BUCKET_SECONDS
    baseline_days: int = 14
    min_day_requests: int = 50
    min_baseline_days: int = 3
    half_life_s: float = 600.0
    stale_after_s: float = 6 * 3600.0
    hysteresis_points: float = 5.0
    healthy_min: float = 80.0
    critical_below: float = 50.0
    route_alpha: float = 0.001
    route_min_excess: float = 0.10
    route_max_failing_share: float = 0.5
    route_min_requests: int = 5
    canary_window_s: int = 4 * BUCKET_SECONDS
    parser_full_penalty: float = 0.20
    degrading_concurrency: float = 0.5
    degrading_cost_multiplier: float = 2.0
    critical_refusal_excess: float = 0.5
    confidence_z: float = 1.645
    evidence_shift: float = 0.10
    evidence_alarm: float = 12.0
    evidence_release: float = 6.0
    evidence_cap: float = 18.0
    evidence_bucket_cap: float = 4.0
    evidence_floor: float = 0.001
    evidence_memory_requests: float = 150.0
    throttle_free_share: float = 0.02
    throttle_gain: float = 2.0
    throttle_floor: float = 0.25
    throttle_recover_half_life_s: float = 3600.0


def band_for(score: float | None, config: HealthConfig = HealthConfig()) -> Band:
    """The band of a score (0–100) without hysteresis; ``unknown`` for None.

    Examples
    --------
    >>> band_for(80), band_for(79), band_for(50), band_for(49), band_for(None)
    ('healthy', 'degrading', 'degrading', 'critical', 'unknown')
    """
    if score is None:
        return "unknown"
    if score >= config.healthy_min:
        return "healthy"
    if score >= config.critical_below:
        return "degrading"
    return "critical"


def _hysteresis(prev: str, score: float, config: HealthConfig) -> Band:
    worse = band_for(score, config)
    if prev == "unknown" or _RANK[worse] > _RANK[prev]:
        return worse
    better = band_for(score - config.hysteresis_points, config)
    if _RANK[better] < _RANK[prev]:
        return better
    return prev  # type: ignore[return-value]


@dataclass(frozen=True)
class Action:
    """What the crawler does on its own for a site in a band.

    Attributes
    ----------
    name
        ``none``, ``slow_down`` or ``pause``.
    concurrency_factor
        Multiply the site's concurrency cap by this (0 when paused).
    cost_multiplier
        Multiply the site's effective visit cost by this, so the planner
        stretches revisits; None when paused (the planner skips the site).
    canaries_only
        Only canaries keep running.
    alert
        Tell the site's owner; the decision is theirs (slow down further,
        check the terms, find an official API, or stop).
    avoid_routes
        Route groups diagnosed as failing, for the fetcher to steer around.
    """

    name: Literal["none", "slow_down", "pause"]
    concurrency_factor: float
    cost_multiplier: float | None
    canaries_only: bool
    alert: bool
    avoid_routes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "concurrency_factor": self.concurrency_factor,
            "cost_multiplier": self.cost_multiplier,
            "canaries_only": self.canaries_only,
            "alert": self.alert,
            "avoid_routes": list(self.avoid_routes),
        }


def action_for(
    band: str, failing_routes: Sequence[str] = (), config: HealthConfig = HealthConfig()
) -> Action:
    """The automatic action of a band; never an escalation.

    Examples
    --------
    >>> action_for("degrading").concurrency_factor
    0.5
    >>> action_for("critical").name, action_for("critical").alert
    ('pause', True)
    """
    routes = tuple(failing_routes)
    if band == "critical":
        return Action("pause", 0.0, None, True, True, routes)
    if band == "degrading":
        return Action(
            "slow_down",
            config.degrading_concurrency,
            config.degrading_cost_multiplier,
            False,
            False,
            routes,
        )
    return Action("none", 1.0, 1.0, False, False, routes)


# ---------------------------------------------------------------------------
# Vectorised sums, percentiles and medians.
# ---------------------------------------------------------------------------


def p95_rows(hist: npt.NDArray[np.float64], q: float = 0.95) -> FloatArray:
    """Row-wise :func:`recrawl.buckets.percentile_from_histogram`; NaN when empty."""
    c = np.asarray(hist, dtype=np.float64)
    rows = c.shape[0]
    out = np.full(rows, np.nan)
    total = c.sum(axis=1)
    ok = total > 0
    if not ok.any():
        return out
    c = c[ok]
    cum = np.cumsum(c, axis=1)
    target = q * total[ok]
    i = (cum < target[:, None]).sum(axis=1)
    edges = LATENCY_EDGES_MS
    last = len(edges)
    inner = i < last
    res = np.full(c.shape[0], float(edges[-1]))
    ii = i[inner]
    idx = np.arange(c.shape[0])[inner]
    lo = np.where(ii == 0, 0.0, edges[np.maximum(ii - 1, 0)])
    hi = edges[ii]
    before = np.where(ii == 0, 0.0, cum[idx, np.maximum(ii - 1, 0)])
    inside = c[idx, ii]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(inside > 0, (target[inner] - before) / inside, 1.0)
    res[inner] = lo + frac * (hi - lo)
    out[ok] = res
    return out


def _nanmedian_rows(x: FloatArray) -> tuple[FloatArray, IntArray]:
    """Row-wise median ignoring NaN (NaN for an all-NaN row) and the count used."""
    s = np.sort(x, axis=1)
    k = (~np.isnan(x)).sum(axis=1)
    lo = np.maximum((k - 1) // 2, 0)
    hi = np.maximum(k // 2, 0)
    rows = np.arange(x.shape[0])
    med = (s[rows, lo] + s[rows, hi]) / 2.0
    return np.where(k > 0, med, np.nan), k.astype(np.int64)


def _group_sums(
    keys: IntArray, groups: int, columns: Sequence[npt.ArrayLike]
) -> npt.NDArray[np.float64]:
    """Sum each column by integer key: shape ``(groups, len(columns))``."""
    out = np.empty((groups, len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        out[:, j] = np.bincount(keys, weights=np.asarray(col, np.float64), minlength=groups)
    return out


def _hist_sums(keys: IntArray, groups: int, latency: IntArray) -> npt.NDArray[np.float64]:
    """Sum latency histograms by key: shape ``(groups, LATENCY_BINS)``."""
    out = np.empty((groups, LATENCY_BINS), dtype=np.float64)
    for j in range(LATENCY_BINS):
        out[:, j] = np.bincount(keys, weights=latency[:, j], minlength=groups)
    return out


# Columns read from buckets for every window: name → how to compute from BucketArrays.
_COLS = (
    "n",
    "hard",
    "challenge",
    "soft",
    "extract",
    "valid",
    "error",
    "bytes",
    "credits",
    "throttled",
)


def _columns(b: BucketArrays) -> list[npt.NDArray[Any]]:
    return [
        b.n,
        b.outcome("hard_block"),
        b.outcome("challenge"),
        b.outcome("soft_block"),
        b.outcome("extract_failed"),
        b.outcomes[:, _VALID].sum(axis=1),
        b.outcome("error"),
        b.bytes_sent + b.bytes_received,
        b.credits,
        b.throttled_counts(),
    ]


_C = {name: j for j, name in enumerate(_COLS)}


# ---------------------------------------------------------------------------
# Baselines.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Baselines:
    """Each site's normal, per signal, over the stable window.

    Valid for every ``at`` in ``[valid_from, valid_from + 1 day)``: the
    window is whole UTC days, so one computation serves a day of evaluations.

    Attributes
    ----------
    sites
        Site labels, the row order of every array.
    start, end
        The window, unix seconds (``end`` is the start of the day before ``at``'s).
    valid_from
        Start of the UTC day of ``at`` values this baseline serves.
    rates
        ``(S, 3)`` normal hard-block, challenge and soft-block rates (fractions),
        median of daily rates; NaN with no usable history.
    p95_ms
        ``(S,)`` normal p95 latency, milliseconds (median of daily p95); NaN unknown.
    extract_rate
        ``(S,)`` normal extraction-failure rate among parsed responses.
    days
        ``(S,)`` usable days behind the medians.
    pooled
        ``(S, len(_COLS))`` sums over the whole window (requests, outcomes,
        bytes, credits): the seed's baseline.
    pooled_p95_ms
        ``(S,)`` p95 of the pooled latency histogram, milliseconds; NaN empty.
    """

    sites: tuple[str, ...]
    start: int
    end: int
    valid_from: int
    rates: FloatArray
    p95_ms: FloatArray
    extract_rate: FloatArray
    days: IntArray
    pooled: FloatArray
    pooled_p95_ms: FloatArray

    def index(self, sites: Sequence[str]) -> IntArray:
        """Rows for ``sites`` in this baseline; −1 for a site it does not know."""
        pos = {s: i for i, s in enumerate(self.sites)}
        return np.asarray([pos.get(s, -1) for s in sites], dtype=np.int64)


def _day_floor(t: float) -> int:
    return int(t // DAY) * DAY


def compute_baselines(
    buckets: BucketArrays, at: float, config: HealthConfig = HealthConfig()
) -> Baselines:
    """Baselines for evaluations at ``at`` (unix seconds); see the module docstring."""
    end = _day_floor(at - DAY)
    start = end - config.baseline_days * DAY
    sel = (buckets.bucket_start >= start) & (buckets.bucket_start < end)
    sites = len(buckets.sites)
    days = config.baseline_days
    # Rows outside the window go to one spare group, dropped below (no copy of the buckets).
    spare = sites * days
    key = np.where(sel, buckets.site * days + (buckets.bucket_start - start) // DAY, spare)
    daily = _group_sums(key, spare + 1, _columns(buckets))[:spare]
    daily = daily.reshape(sites, days, len(_COLS))
    dhist = _hist_sums(key, spare + 1, buckets.latency)[:spare]
    n = daily[:, :, _C["n"]]
    usable = n >= config.min_day_requests
    with np.errstate(divide="ignore", invalid="ignore"):
        drates = daily[:, :, [_C["hard"], _C["challenge"], _C["soft"]]] / n[:, :, None]
        parsed = daily[:, :, _C["valid"]] + daily[:, :, _C["extract"]]
        dextract = np.where(
            parsed >= config.min_day_requests, daily[:, :, _C["extract"]] / parsed, np.nan
        )
    drates[~usable] = np.nan
    dp95 = p95_rows(dhist).reshape(sites, days)
    dp95[~usable] = np.nan
    rates = np.empty((sites, 3))
    for j in range(3):
        rates[:, j], k = _nanmedian_rows(drates[:, :, j])
    p95, _ = _nanmedian_rows(dp95)
    extract, k_ex = _nanmedian_rows(dextract)
    pooled = daily.sum(axis=1)
    pooled_hist = dhist.reshape(sites, days, LATENCY_BINS).sum(axis=1)
    pooled_p95 = p95_rows(pooled_hist)
    pn = pooled[:, _C["n"]]
    few = k < config.min_baseline_days
    enough_pooled = few & (pn >= config.min_requests)
    with np.errstate(divide="ignore", invalid="ignore"):
        pr = pooled[:, [_C["hard"], _C["challenge"], _C["soft"]]] / pn[:, None]
        pparsed = pooled[:, _C["valid"]] + pooled[:, _C["extract"]]
        pex = pooled[:, _C["extract"]] / pparsed
    rates[few] = np.nan
    rates[enough_pooled] = pr[enough_pooled]
    p95 = np.where(few, np.where(enough_pooled, pooled_p95, np.nan), p95)
    ex_few = k_ex < config.min_baseline_days
    extract = np.where(ex_few, np.where(pparsed >= config.min_requests, pex, np.nan), extract)
    return Baselines(
        sites=buckets.sites,
        start=start,
        end=end,
        valid_from=_day_floor(at),
        rates=rates,
        p95_ms=p95,
        extract_rate=extract,
        days=k,
        pooled=pooled,
        pooled_p95_ms=pooled_p95,
    )


# ---------------------------------------------------------------------------
# Smoothing state.
# ---------------------------------------------------------------------------


def _three() -> list[float]:
    return [0.0, 0.0, 0.0]


@dataclass
class SiteState:
    """Smoothing memory of one site (times unix seconds, penalties points).

    ``evidence`` to ``alarm`` are the sequential test of the three rate
    signals (hard block, challenge, soft block; see :func:`fold_evidence`),
    ``folded_through`` the start of the last bucket folded into it.
    """

    at: float
    penalties: list[float]
    band: str
    parser_at: float | None = None
    parser_penalty: float = 0.0
    parser_band: str = "unknown"
    evidence: list[float] = field(default_factory=_three)
    run_n: list[float] = field(default_factory=_three)
    run_x: list[float] = field(default_factory=_three)
    run_pos: list[float] = field(default_factory=_three)
    run_start: list[float] = field(default_factory=_three)
    alarm: list[float] = field(default_factory=_three)
    folded_through: float | None = None
    throttle_share: float = 0.0
    throttle_at: float | None = None


@dataclass
class HealthState:
    """Smoothing and hysteresis memory across successive evaluations.

    :func:`evaluate_sites` reads and updates it in place; persist it with
    :meth:`to_dict` / :meth:`from_dict` between runs.
    """

    sites: dict[str, SiteState] = field(default_factory=dict)

    def get(self, site: str) -> SiteState | None:
        """The memory of ``site``, or None before its first scored window."""
        return self.sites.get(site)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {s: vars(st).copy() for s, st in self.sites.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, Any]]) -> HealthState:
        """Inverse of :meth:`to_dict`."""
        return cls({s: SiteState(**dict(v)) for s, v in data.items()})


@dataclass
class Evidence:
    """The sequential test of the rate signals for ``S`` sites, as ``(S, 3)`` arrays.

    Columns are hard block, challenge, soft block. A one-sided CUSUM of the
    Bernoulli log-likelihood ratio, per 15-minute bucket: "the rate is the
    site's normal ``p0``" against "it is ``p0 + evidence_shift``".

    Attributes
    ----------
    stat
        The CUSUM statistic, nats, in ``[0, evidence_cap]``.
    run_n, run_x
        Requests and events since the statistic last left 0 (the stretch the
        test attributes to the shift, from the maximum-likelihood change
        point), older buckets weighted down with a half-life of
        ``evidence_memory_requests`` requests.
    run_pos
        Buckets of that stretch with evidence for the shift (ratio above 0).
    run_start
        Start of that stretch, unix seconds.
    alarm
        1.0 while the shift is established (set at ``evidence_alarm``, cleared
        below ``evidence_release``), else 0.0.
    """

    stat: FloatArray
    run_n: FloatArray
    run_x: FloatArray
    run_pos: FloatArray
    run_start: FloatArray
    alarm: FloatArray

    @classmethod
    def zeros(cls, sites: int) -> Evidence:
        """No evidence for ``sites`` sites."""
        return cls(*(np.zeros((sites, 3)) for _ in range(6)))

    def sustained(self, min_requests: int) -> npt.NDArray[np.bool_]:
        """Where the shift is established over at least two buckets of evidence
        and ``min_requests`` requests: one burst followed by normal buckets is
        not sustained, however large."""
        return (self.alarm > 0) & (self.run_pos >= 2) & (self.run_n >= min_requests)

    def run_rates(self) -> FloatArray:
        """Event rate of each stretch (fraction; NaN where empty)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.run_n > 0, self.run_x / self.run_n, np.nan)


def fold_evidence(
    ev: Evidence,
    n: npt.ArrayLike,
    x: npt.ArrayLike,
    base_rates: npt.ArrayLike,
    bucket_at: npt.ArrayLike,
    fold: npt.ArrayLike,
    config: HealthConfig = HealthConfig(),
) -> Evidence:
    """Fold one bucket per site into the sequential test (pure).

    Parameters
    ----------
    ev
        The test so far.
    n
        ``(S,)`` requests in the bucket.
    x
        ``(S, 3)`` hard blocks, challenges and soft blocks in it.
    base_rates
        ``(S, 3)`` the site's normal rates (fractions); NaN counts as 0. The
        test assumes at least ``evidence_floor``.
    bucket_at
        ``(S,)`` start of the bucket, unix seconds.
    fold
        ``(S,)`` which sites take this bucket (others keep their state).
    config
        ``evidence_shift``, ``evidence_alarm``, ``evidence_release``,
        ``evidence_cap``, ``evidence_bucket_cap``, ``evidence_floor``,
        ``evidence_memory_requests``.

    Returns
    -------
    Evidence
        The updated test.

    Examples
    --------
    A site that never challenged starts challenging a quarter of 40 requests
    a bucket: the shift is established, and sustained, from the third bucket.

    >>> ev = Evidence.zeros(1)
    >>> for k in range(3):
    ...     ev = fold_evidence(ev, [40], [[0, 10, 0]], [[0.0, 0.0, 0.0]], [900 * k], [True])
    >>> bool(ev.alarm[0, 1]), bool(ev.sustained(50)[0, 1]), float(ev.run_rates()[0, 1])
    (True, True, 0.25)
    """
    nn = np.asarray(n, dtype=np.float64)[:, None]
    xx = np.asarray(x, dtype=np.float64)
    p0 = np.clip(
        np.nan_to_num(np.asarray(base_rates, dtype=np.float64)), config.evidence_floor, 0.5
    )
    p1 = p0 + config.evidence_shift
    llr = xx * np.log(p1 / p0) + (nn - xx) * np.log((1.0 - p1) / (1.0 - p0))
    llr = np.minimum(llr, config.evidence_bucket_cap)
    fresh = ev.stat <= 0.0
    stat = np.clip(ev.stat + llr, 0.0, config.evidence_cap)
    start = np.broadcast_to(np.asarray(bucket_at, dtype=np.float64)[:, None], stat.shape)
    keep = 0.5 ** (nn / config.evidence_memory_requests)
    run_n = np.where(fresh, nn, keep * ev.run_n + nn)
    run_x = np.where(fresh, xx, keep * ev.run_x + xx)
    run_pos = np.where(fresh, 0.0, ev.run_pos) + (llr > 0.0)
    run_start = np.where(fresh, start, ev.run_start)
    empty = stat <= 0.0
    run_n, run_x, run_pos = (np.where(empty, 0.0, a) for a in (run_n, run_x, run_pos))
    alarm = np.where(
        stat >= config.evidence_alarm,
        1.0,
        np.where(stat < config.evidence_release, 0.0, ev.alarm),
    )
    take = np.asarray(fold, dtype=bool)[:, None]
    return Evidence(
        *(
            np.where(take, new, old)
            for new, old in (
                (stat, ev.stat),
                (run_n, ev.run_n),
                (run_x, ev.run_x),
                (run_pos, ev.run_pos),
                (run_start, ev.run_start),
                (alarm, ev.alarm),
            )
        )
    )


def _alpha(dt: float, config: HealthConfig) -> float:
    """EWMA weight of a new window ``dt`` seconds after the last one.

    The weight depends on elapsed time only, so the half-life is in seconds
    whatever the evaluation cadence. A widened window is already a moving
    average (its lag, half its width, adds to the EWMA's); slowing the EWMA
    for it as well smoothed low-volume sites twice, and a steady decline on a
    quiet site took over an hour to show. Noise in a small window is handled
    where it arises, by reading each rate at the lower end of its confidence
    interval (:func:`_wilson_lower`).

    Examples
    --------
    >>> round(_alpha(600.0, HealthConfig(half_life_s=600.0)), 3)
    0.5
    """
    return float(1.0 - 0.5 ** (max(dt, 0.0) / config.half_life_s))


# ---------------------------------------------------------------------------
# Results.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ParserHealth:
    """Extraction validity of one site: its own score, band and reasons.

    ``score`` is smoothed (int 0–100, None when fewer than ``min_requests``
    parsed responses), ``raw_score`` the current window's observed rate alone.
    """

    score: int | None
    raw_score: int | None
    band: Band
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``score``, ``band``, ``reasons``)."""
        return {"score": self.score, "band": self.band, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Throttle:
    """How much a site asks to slow down, whatever its band (for the politeness layer).

    Attributes
    ----------
    share
        Fraction of requests asking to slow down: answers 429 or 503 or
        carrying a Retry-After, or hard blocks above the site's normal,
        whichever is larger, over the current window; smoothed, rising with
        ``half_life_s`` and falling with ``throttle_recover_half_life_s``.
    concurrency_factor
        Multiply the site's concurrency by this (1.0: as configured), in
        steps of 0.05, at least ``throttle_floor``. Applies on top of the
        band's :class:`Action`.
    cost_multiplier
        ``1 / concurrency_factor``: what each visit to the site effectively
        costs, so the planner moves budget to sites that still answer.
    """

    share: float = 0.0
    concurrency_factor: float = 1.0
    cost_multiplier: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "share": self.share,
            "concurrency_factor": self.concurrency_factor,
            "cost_multiplier": self.cost_multiplier,
        }


def throttle_for(share: float, config: HealthConfig = HealthConfig()) -> Throttle:
    """The :class:`Throttle` of a slow-down share (fraction of requests).

    Examples
    --------
    >>> throttle_for(0.01).concurrency_factor, throttle_for(0.10).concurrency_factor
    (1.0, 0.85)
    >>> throttle_for(0.9).concurrency_factor, throttle_for(0.9).cost_multiplier
    (0.25, 4.0)
    """
    raw = 1.0 - config.throttle_gain * max(0.0, share - config.throttle_free_share)
    factor = max(config.throttle_floor, min(1.0, round(raw * 20.0) / 20.0))
    return Throttle(round(share, 4), factor, round(1.0 / factor, 4))


@dataclass(frozen=True)
class SiteHealth:
    """The health of one site at one time.

    Attributes
    ----------
    site
        Site label.
    at
        Evaluation time, unix seconds.
    score
        Smoothed target health score (0–100), None when the window is too small.
    raw_score
        The current window alone: the seed's arithmetic on the observed rates,
        unsmoothed and not discounted for the window's size.
    band
        Band after hysteresis and the canary rule; held from the previous
        evaluation when the window is too small, ``unknown`` before any.
    reasons
        Signal names, largest smoothed penalty first (``canary_mismatch``
        first when present), or ``["not enough requests to judge"]``.
    diagnosis
        ``route`` when failures concentrate in some route groups, else ``site``
        when the band is not healthy, else ``none``.
    failing_routes
        Route groups excluded from the score.
    parser
        Parser health, separate.
    action
        The band's automatic action.
    window_s
        Length of the current window, seconds.
    signals
        Current-window values: requests, rates (fractions), ``p95_latency_ms``,
        ``extract_rate``, ``bytes_per_valid`` (bytes), ``credits_per_valid``.
    baseline
        The same names for the site's normal.
    sustained
        Rate signals whose excess over the normal is established by the
        sequential test (:func:`fold_evidence`) and so counted at the rate of
        the whole stretch since it began.
    throttle
        How much the site asks to slow down, read by the politeness layer
        even while the band is healthy.
    """

    site: str
    at: float
    score: int | None
    raw_score: int | None
    band: Band
    reasons: list[str]
    diagnosis: Diagnosis
    failing_routes: list[str]
    parser: ParserHealth
    action: Action
    window_s: int = 0
    signals: dict[str, float | None] = field(default_factory=dict)
    baseline: dict[str, float | None] = field(default_factory=dict)
    sustained: list[str] = field(default_factory=list)
    throttle: Throttle = field(default_factory=Throttle)

    def to_dict(self, *, detail: bool = False) -> dict[str, Any]:
        """The CLI's ``--json`` shape; ``detail`` adds signals and baseline."""
        out: dict[str, Any] = {
            "site": self.site,
            "score": self.score,
            "raw_score": self.raw_score,
            "band": self.band,
            "reasons": list(self.reasons),
            "diagnosis": self.diagnosis,
            "failing_routes": list(self.failing_routes),
            "parser": self.parser.to_dict(),
            "action": self.action.to_dict(),
            "throttle": self.throttle.to_dict(),
            "cost": {
                "bytes_per_record": self.signals.get("bytes_per_valid"),
                "bytes_per_record_normal": self.baseline.get("bytes_per_valid"),
                "credits_per_record": self.signals.get("credits_per_valid"),
                "credits_per_record_normal": self.baseline.get("credits_per_valid"),
            },
        }
        if detail:
            out["sustained"] = list(self.sustained)
            out["at"] = self.at
            out["window_s"] = self.window_s
            out["signals"] = dict(self.signals)
            out["baseline"] = dict(self.baseline)
        return out


# ---------------------------------------------------------------------------
# Route diagnosis.
# ---------------------------------------------------------------------------


def _route_levels(routes: Sequence[str], max_depth: int = 3) -> list[tuple[IntArray, list[str]]]:
    """Per prefix depth: a map route code → group code, and the group labels."""
    parts = [r.split("/") for r in routes]
    depth = min(max_depth, max((len(p) for p in parts), default=1))
    levels: list[tuple[IntArray, list[str]]] = []
    for d in range(1, depth + 1):
        labels: dict[str, int] = {}
        codes = np.asarray(
            [labels.setdefault("/".join(p[:d]), len(labels)) for p in parts], dtype=np.int64
        )
        levels.append((codes, list(labels)))
    return levels


def _norm_sf(z: FloatArray) -> FloatArray:
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return np.asarray(0.5 * erfc(z / math.sqrt(2.0)), dtype=np.float64)


def _diagnose_routes(
    site: IntArray,
    route: IntArray,
    n: FloatArray,
    fail: FloatArray,
    n_sites: int,
    routes: Sequence[str],
    config: HealthConfig,
) -> tuple[npt.NDArray[np.bool_], list[list[str]]]:
    """Which rows belong to failing route groups, and each site's failing groups."""
    row_failing = np.zeros(len(site), dtype=bool)
    named: list[list[str]] = [[] for _ in range(n_sites)]
    if len(site) == 0 or len(routes) == 0:
        return row_failing, named
    decided = np.zeros(n_sites, dtype=bool)
    site_n = np.bincount(site, weights=n, minlength=n_sites)
    site_f = np.bincount(site, weights=fail, minlength=n_sites)
    for codes, labels in _route_levels(routes):
        g = len(labels)
        key = site * g + codes[route]
        uniq, inv = np.unique(key, return_inverse=True)
        gn = np.bincount(inv, weights=n, minlength=len(uniq))
        gf = np.bincount(inv, weights=fail, minlength=len(uniq))
        gs = uniq // g
        groups_per_site = np.bincount(gs, weights=(gn > 0).astype(np.float64), minlength=n_sites)
        rn = site_n[gs] - gn
        rf = site_f[gs] - gf
        with np.errstate(divide="ignore", invalid="ignore"):
            pg = gf / gn
            pr = rf / rn
            pool = site_f[gs] / site_n[gs]
            se = np.sqrt(pool * (1 - pool) * (1 / gn + 1 / rn))
            z = (pg - pr) / se
        testable = (gn >= config.route_min_requests) & (rn > 0) & (se > 0) & ~decided[gs]
        z = np.where(testable, z, -np.inf)
        p = _norm_sf(z)
        k = np.maximum(groups_per_site[gs], 1)
        failing = testable & (p * k < config.route_alpha) & (pg - pr >= config.route_min_excess)
        share = np.bincount(gs, weights=np.where(failing, gn, 0.0), minlength=n_sites)
        with np.errstate(divide="ignore", invalid="ignore"):
            ok_site = (share > 0) & (share / site_n <= config.route_max_failing_share)
        failing &= ok_site[gs]
        if not failing.any():
            continue
        row_failing |= failing[inv]
        for gi in np.nonzero(failing)[0]:
            named[int(gs[gi])].append(labels[int(uniq[gi] % g)])
        decided |= ok_site
    for lst in named:
        lst.sort()
    return row_failing, named


# ---------------------------------------------------------------------------
# The production scorer.
# ---------------------------------------------------------------------------


def _widths(
    site: IntArray,
    slot: IntArray,
    n: npt.ArrayLike,
    n_sites: int,
    slots: int,
    config: HealthConfig,
) -> IntArray:
    """Per site, the fewest recent buckets (from the newest) holding ``min_requests``.

    All ``slots`` when even those fall short.
    """
    per_slot = np.bincount(
        site * slots + slot, weights=np.asarray(n, np.float64), minlength=n_sites * slots
    ).reshape(n_sites, slots)
    cum = np.cumsum(per_slot, axis=1)
    min_slots = max(1, config.current_min_s // BUCKET_SECONDS)
    reach = cum >= config.min_requests
    reach[:, : min_slots - 1] = False
    return np.where(reach.any(axis=1), reach.argmax(axis=1) + 1, slots).astype(np.int64)


def _wilson_lower(p: npt.ArrayLike, n: npt.ArrayLike, z: float) -> FloatArray:
    """Lower end of the Wilson score interval of a rate ``p`` seen over ``n`` trials.

    ``z`` is the normal quantile (1.645: one-sided 95 %); ``z = 0`` gives ``p``
    back. NaN rates stay NaN; ``n`` below 1 counts as 1.

    Examples
    --------
    >>> lo = _wilson_lower([0.2, 0.2, 0.0], [50, 5000, 50], 1.645)
    >>> [round(float(x), 3) for x in lo]
    [0.123, 0.191, 0.0]
    """
    p = np.asarray(p, dtype=np.float64)
    m = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    z2 = z * z
    with np.errstate(invalid="ignore"):
        lo = (p + z2 / (2 * m) - z * np.sqrt(p * (1 - p) / m + z2 / (4 * m * m))) / (1 + z2 / m)
    return np.asarray(np.where(np.isnan(p), np.nan, np.maximum(lo, 0.0)), dtype=np.float64)


def _gather_evidence(
    state: HealthState, sites: Sequence[str], at: float, config: HealthConfig
) -> tuple[Evidence, FloatArray]:
    """The sequential test of each site from its memory, and the last bucket folded.

    A site without memory, or whose memory is older than ``stale_after_s``,
    starts from no evidence (last bucket −inf).
    """
    ev = Evidence.zeros(len(sites))
    through = np.full(len(sites), -np.inf)
    for i, name in enumerate(sites):
        st = state.sites.get(name)
        if st is None or st.folded_through is None or at - st.folded_through > config.stale_after_s:
            continue
        ev.stat[i], ev.run_n[i], ev.run_x[i] = st.evidence, st.run_n, st.run_x
        ev.run_pos[i], ev.run_start[i], ev.alarm[i] = st.run_pos, st.run_start, st.alarm
        through[i] = st.folded_through
    return ev, through


def _keep_evidence(st: SiteState, ev: Evidence, i: int, through: float) -> None:
    st.evidence, st.run_n, st.run_x = (
        ev.stat[i].tolist(),
        ev.run_n[i].tolist(),
        ev.run_x[i].tolist(),
    )
    st.run_pos, st.run_start = ev.run_pos[i].tolist(), ev.run_start[i].tolist()
    st.alarm = ev.alarm[i].tolist()
    st.folded_through = float(through) if math.isfinite(through) else None


def _fmt(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def evaluate_sites(
    buckets: BucketArrays,
    at: float,
    state: HealthState | None = None,
    config: HealthConfig = HealthConfig(),
    *,
    baselines: Baselines | None = None,
) -> list[SiteHealth]:
    """Score every site of ``buckets`` at time ``at`` (production scorer).

    Parameters
    ----------
    buckets
        Buckets covering at least ``[at − 15 days, at)``; rows outside the
        windows used are ignored.
    at
        Evaluation time, unix seconds. Buckets starting at or after it are ignored.
    state
        Smoothing memory from the previous evaluation, updated in place; None
        scores without memory (every site as if seen for the first time).
    config
        Knobs, see :class:`HealthConfig`.
    baselines
        Baselines from :func:`compute_baselines`, reused when still valid for
        ``at`` (same UTC day); computed here otherwise.

    Returns
    -------
    list of SiteHealth
        One per site label of ``buckets``, in label order.
    """
    state = HealthState() if state is None else state
    if baselines is None or baselines.valid_from != _day_floor(at):
        baselines = compute_baselines(buckets, at, config)
    sites = buckets.sites
    n_sites = len(sites)
    bidx = baselines.index(sites)
    known = bidx >= 0
    safe = np.where(known, bidx, 0)
    base_rates = np.where(known[:, None], baselines.rates[safe], np.nan)
    base_p95 = np.where(known, baselines.p95_ms[safe], np.nan)
    base_ex = np.where(known, baselines.extract_rate[safe], np.nan)

    slots = config.current_max_s // BUCKET_SECONDS
    top = bucket_start(at - 1)
    # the bucket holding ``at - 1`` is the newest; one begun in the last second waits
    sel = (buckets.bucket_start <= top) & (buckets.bucket_start > top - slots * BUCKET_SECONDS)
    b = buckets.select(sel)
    slot = (top - b.bucket_start) // BUCKET_SECONDS
    cols = _columns(b)
    fail = (cols[_C["hard"]] + cols[_C["challenge"]] + cols[_C["soft"]] + cols[_C["error"]]).astype(
        np.float64
    )
    row_failing, named = _diagnose_routes(
        b.site, b.route, b.n.astype(np.float64), fail, n_sites, buckets.routes, config
    )
    healthy = ~row_failing
    width = _widths(b.site[healthy], slot[healthy], b.n[healthy], n_sites, slots, config)
    in_win = healthy & (slot < width[b.site])
    cur = _group_sums(b.site[in_win], n_sites, [c[in_win] for c in cols])
    hist = _hist_sums(b.site[in_win], n_sites, b.latency[in_win])
    n_now = cur[:, _C["n"]]
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = cur[:, [_C["hard"], _C["challenge"], _C["soft"]]] / np.maximum(n_now, 1)[:, None]
    p95 = p95_rows(hist)
    raw = score_from_penalties(penalty_matrix(rates, base_rates, p95, base_p95))
    # Only the excess the counts support: each rate at the lower end of its
    # Wilson interval, so a small window that happens to run high costs little.
    rates_lo = _wilson_lower(rates, n_now[:, None], config.confidence_z)
    pen = penalty_matrix(rates_lo, base_rates, p95, base_p95)
    # Refusals beyond normal, read the same way: a small window that happens
    # to run high is not "refusing most requests".
    refused = np.clip(np.nansum(rates, axis=1), 0.0, 1.0)
    lower = _wilson_lower(refused, n_now, 1.96)
    refusal_excess = lower - np.nansum(np.nan_to_num(base_rates), axis=1)
    scored = n_now >= config.min_requests

    # Sequential evidence: every complete bucket on healthy routes, folded
    # once, oldest first. A rate whose excess it establishes counts at the
    # rate of the whole stretch since the excess began (many requests, so
    # no small-window discount), until the evidence is gone.
    per_slot = _group_sums(
        b.site[healthy] * slots + slot[healthy],
        n_sites * slots,
        [cols[_C[k]][healthy] for k in ("n", "hard", "challenge", "soft")],
    ).reshape(n_sites, slots, 4)
    ev, through = _gather_evidence(state, sites, at, config)
    for k in range(slots - 1, -1, -1):
        t_k = float(top - k * BUCKET_SECONDS)
        take = t_k > through
        if t_k + BUCKET_SECONDS > at or not take.any():
            continue  # the newest bucket is folded once it is complete
        ev = fold_evidence(
            ev,
            per_slot[:, k, 0],
            per_slot[:, k, 1:],
            base_rates,
            np.full(n_sites, t_k),
            take,
            config,
        )
        through = np.where(take, t_k, through)
    sustained = ev.sustained(config.min_requests)
    no_lat = np.full(n_sites, np.nan)
    sustained_pen = penalty_matrix(
        np.where(sustained, ev.run_rates(), np.nan_to_num(base_rates)), base_rates, no_lat, no_lat
    )
    # Asking to slow down: 429/503/Retry-After answers, or hard blocks above normal.
    with np.errstate(divide="ignore", invalid="ignore"):
        slow_share = np.clip(
            np.fmax(
                cur[:, _C["throttled"]] / np.maximum(n_now, 1),
                rates[:, 0] - np.nan_to_num(base_rates[:, 0]),
            ),
            0.0,
            1.0,
        )

    # Parser health reads every route, over its own adaptive window of parsed responses.
    parsed_rows = cols[_C["valid"]] + cols[_C["extract"]]
    pwidth = _widths(b.site, slot, parsed_rows, n_sites, slots, config)
    p_in = slot < pwidth[b.site]
    whole = _group_sums(b.site[p_in], n_sites, [c[p_in] for c in cols])
    parsed = whole[:, _C["valid"]] + whole[:, _C["extract"]]
    with np.errstate(divide="ignore", invalid="ignore"):
        ex_rate = whole[:, _C["extract"]] / parsed

    def ex_penalty(rate: FloatArray) -> FloatArray:
        excess = (rate - np.nan_to_num(base_ex)) / config.parser_full_penalty
        return np.asarray(100.0 * np.minimum(1.0, np.maximum(0.0, excess)), dtype=np.float64)

    ex_pen = ex_penalty(_wilson_lower(ex_rate, parsed, config.confidence_z))
    ex_raw = ex_penalty(ex_rate)
    parser_scored = parsed >= config.min_requests
    can_sel = b.bucket_start > top - (config.canary_window_s // BUCKET_SECONDS) * BUCKET_SECONDS
    mismatch = np.bincount(b.site[can_sel], weights=b.canary_mismatch[can_sel], minlength=n_sites)
    with np.errstate(divide="ignore", invalid="ignore"):
        bpv = cur[:, _C["bytes"]] / cur[:, _C["valid"]]
        cpv = cur[:, _C["credits"]] / cur[:, _C["valid"]]
        pooled = baselines.pooled[safe]
        base_bpv = np.where(known, pooled[:, _C["bytes"]] / pooled[:, _C["valid"]], np.nan)
        base_cpv = np.where(known, pooled[:, _C["credits"]] / pooled[:, _C["valid"]], np.nan)

    win_s = at - (top - (width - 1) * BUCKET_SECONDS)
    results: list[SiteHealth] = []
    for i, name in enumerate(sites):
        st = state.sites.get(name)
        # Target health.
        if scored[i]:
            p = pen[i].tolist()
            if st is None or at - st.at > config.stale_after_s:
                sm = p
            else:
                a = _alpha(at - st.at, config)
                sm = [(1 - a) * old + a * new for old, new in zip(st.penalties, p, strict=True)]
            # Fast to fall: a sustained excess counts in full at once; slow to
            # recover: it keeps counting until the test releases it.
            final = [max(a, float(b_)) for a, b_ in zip(sm, sustained_pen[i], strict=True)]
            score_f = 100 - (((final[0] + final[1]) + final[2]) + final[3])
            band: Band = _hysteresis(st.band if st else "unknown", score_f, config)
            score: int | None = round(score_f)
            reasons = _reasons(final)
            if st is None:
                st = state.sites[name] = SiteState(at=at, penalties=sm, band=band)
            else:
                st.at, st.penalties, st.band = at, sm, band
            raw_score: int | None = round(float(raw[i]))
        else:
            band = st.band if st else "unknown"  # type: ignore[assignment]
            score, raw_score, reasons = None, None, [NOT_ENOUGH]
        # Parser health.
        if parser_scored[i]:
            if st is None:
                st = state.sites[name] = SiteState(at=at, penalties=[0.0] * 4, band="unknown")
            if st.parser_at is None or at - st.parser_at > config.stale_after_s:
                psm = float(ex_pen[i])
            else:
                a = _alpha(at - st.parser_at, config)
                psm = (1 - a) * st.parser_penalty + a * float(ex_pen[i])
            pband = _hysteresis(st.parser_band, 100.0 - psm, config)
            st.parser_at, st.parser_penalty, st.parser_band = at, psm, pband
            parser = ParserHealth(
                score=round(100.0 - psm),
                raw_score=round(100.0 - float(ex_raw[i])),
                band=pband,
                reasons=["extract_failed"] if psm >= 1 else [],
            )
        else:
            pb = st.parser_band if st else "unknown"
            parser = ParserHealth(None, None, pb, [NOT_ENOUGH])  # type: ignore[arg-type]
        # Refusing most requests is pushing back, whatever the capped weights sum to.
        if (
            scored[i]
            and band == "degrading"
            and refusal_excess[i] >= config.critical_refusal_excess
        ):
            band = "critical"
            if score is not None:
                score = min(score, math.ceil(config.critical_below) - 1)
            st = state.sites[name]
            st.band = band
        # Canaries override.
        if mismatch[i] > 0:
            if _RANK[band] < _RANK["degrading"]:
                band = "degrading"
            if score is not None:
                score = min(score, math.ceil(config.healthy_min) - 1)
            reasons = ["canary_mismatch", *(r for r in reasons if r != NOT_ENOUGH)]
        # Sequential evidence and the slow-down share, kept in the site's memory.
        st = state.sites.get(name)
        share = 0.0
        if st is not None:
            _keep_evidence(st, ev, i, float(through[i]))
            if scored[i]:
                new = float(slow_share[i])
                if st.throttle_at is None or at - st.throttle_at > config.stale_after_s:
                    st.throttle_share = new
                else:
                    hl = (
                        config.half_life_s
                        if new > st.throttle_share
                        else config.throttle_recover_half_life_s
                    )
                    a = 1.0 - 0.5 ** (max(at - st.throttle_at, 0.0) / hl)
                    st.throttle_share = (1 - a) * st.throttle_share + a * new
                st.throttle_at = at
            share = st.throttle_share
        failing = named[i]
        diagnosis: Diagnosis = (
            "route" if failing else ("site" if _RANK[band] >= _RANK["degrading"] else "none")
        )
        results.append(
            SiteHealth(
                site=name,
                at=at,
                score=score,
                raw_score=raw_score,
                band=band,
                reasons=reasons,
                diagnosis=diagnosis,
                failing_routes=list(failing),
                parser=parser,
                action=action_for(band, failing, config),
                window_s=int(win_s[i]),
                signals={
                    "requests": float(n_now[i]),
                    "hard_block": _fmt(rates[i, 0]),
                    "challenge": _fmt(rates[i, 1]),
                    "soft_block": _fmt(rates[i, 2]),
                    "p95_latency_ms": _fmt(p95[i]),
                    "extract_rate": _fmt(ex_rate[i]),
                    "bytes_per_valid": _fmt(bpv[i]),
                    "credits_per_valid": _fmt(cpv[i]),
                    "canary_mismatch": float(mismatch[i]),
                },
                baseline={
                    "hard_block": _fmt(base_rates[i, 0]),
                    "challenge": _fmt(base_rates[i, 1]),
                    "soft_block": _fmt(base_rates[i, 2]),
                    "p95_latency_ms": _fmt(base_p95[i]),
                    "extract_rate": _fmt(base_ex[i]),
                    "bytes_per_valid": _fmt(base_bpv[i]),
                    "credits_per_valid": _fmt(base_cpv[i]),
                },
                sustained=[SIGNALS[j] for j in range(3) if sustained[i, j]],
                throttle=throttle_for(share, config),
            )
        )
    return results


def evaluate_reference(
    buckets: BucketArrays,
    at: float,
    *,
    window_s: int = 3600,
    baselines: Baselines | None = None,
    config: HealthConfig = HealthConfig(),
) -> list[tuple[str, int | None, list[str]]]:
    """The seed's scorer over buckets: ``(site, score, reasons)`` per site label.

    The current window is the last ``window_s`` seconds on every route; the
    baseline is the pooled window of :func:`compute_baselines` (14 whole days
    ending a day before ``at``'s day), read as one :class:`Window`. No smoothing,
    no route split, no canaries, no parser health.
    """
    if baselines is None or baselines.valid_from != _day_floor(at):
        baselines = compute_baselines(buckets, at, config)
    top = bucket_start(at - 1)
    slots = max(1, window_s // BUCKET_SECONDS)
    # the bucket holding ``at - 1`` is the newest; one begun in the last second waits
    sel = (buckets.bucket_start <= top) & (buckets.bucket_start > top - slots * BUCKET_SECONDS)
    b = buckets.select(sel)
    n_sites = len(buckets.sites)
    cur = _group_sums(b.site, n_sites, _columns(b))
    p95 = p95_rows(_hist_sums(b.site, n_sites, b.latency))
    bidx = baselines.index(buckets.sites)
    out: list[tuple[str, int | None, list[str]]] = []
    for i, name in enumerate(buckets.sites):
        c = cur[i]
        now = Window(
            int(c[_C["n"]]),
            int(c[_C["hard"]]),
            int(c[_C["challenge"]]),
            int(c[_C["soft"]]),
            0.0 if math.isnan(p95[i]) else float(p95[i]),
        )
        if bidx[i] >= 0:
            pb = baselines.pooled[bidx[i]]
            bp = float(baselines.pooled_p95_ms[bidx[i]])
            base = Window(
                int(pb[_C["n"]]),
                int(pb[_C["hard"]]),
                int(pb[_C["challenge"]]),
                int(pb[_C["soft"]]),
                0.0 if math.isnan(bp) else bp,
            )
        else:
            base = Window(0, 0, 0, 0, 0.0)
        score, reasons = reference_health_score(now, base)
        out.append((name, score, reasons))
    return out


# ---------------------------------------------------------------------------
# Review.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Incident:
    """A labelled incident on one site (times unix seconds).

    Attributes
    ----------
    site, start, end
        Where and when.
    cause
        What an evaluation should name: a signal (``hard_block``, ``challenge``,
        ``soft_block``, ``latency``, ``canary_mismatch``), ``route`` (diagnosis
        route, naming ``route`` if given) or ``extract_failed`` (parser health).
    band
        The band the incident should reach (target band, or parser band for
        ``extract_failed``); None accepts any band worse than healthy.
    route
        The failing route group expected when ``cause`` is ``route``.
    """

    site: str
    start: float
    end: float
    cause: str | None = None
    band: str | None = None
    route: str | None = None


@dataclass(frozen=True)
class IncidentReview:
    """How one incident was seen.

    Attributes
    ----------
    incident
        The incident.
    moved_after_s
        Seconds from onset to the first evaluation in the incident whose band
        (parser band for parser causes) was worse than healthy; None if never.
    detected_after_s
        Seconds from onset to the first evaluation in the expected band (any
        non-healthy band when none is expected) whose top reason named the
        cause; None if never.
    band_reached
        Worst band during the incident.
    top_reason
        Top reason at detection, else at the first move, else the most common
        top reason during the incident (None if there was none).
    cause_named
        Whether the cause was ever named as the top reason during the incident.
    """

    incident: Incident
    moved_after_s: float | None
    detected_after_s: float | None
    band_reached: str
    top_reason: str | None
    cause_named: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "site": self.incident.site,
            "cause": self.incident.cause,
            "expected_band": self.incident.band,
            "start": self.incident.start,
            "end": self.incident.end,
            "moved_after_s": self.moved_after_s,
            "detected_after_s": self.detected_after_s,
            "band_reached": self.band_reached,
            "top_reason": self.top_reason,
            "cause_named": self.cause_named,
        }


@dataclass(frozen=True)
class ReviewReport:
    """Incidents reviewed and false alarms counted.

    ``false_alarms`` lists episodes ``(site, start, end, worst band, top reason)``
    where the band (target or parser) was worse than the labels allow: healthy
    outside incidents and their grace period, the expected band inside them.
    """

    incidents: list[IncidentReview]
    false_alarms: list[dict[str, Any]]
    false_alarm_seconds: float
    site_days: float = 0.0
    """Site-days reviewed: each evaluation counts ``step_s`` of its site's time."""

    @property
    def false_alarms_per_site_day(self) -> float | None:
        """False-alarm episodes (target and parser) per site-day reviewed;
        None when nothing was reviewed."""
        return len(self.false_alarms) / self.site_days if self.site_days > 0 else None

    @property
    def false_alarm_share(self) -> float | None:
        """Share of the reviewed site-time spent in a false alarm, target and
        parser alarms counted apart (0–1 each, so at most 2)."""
        if self.site_days <= 0:
            return None
        return self.false_alarm_seconds / (self.site_days * 86400.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "incidents": [r.to_dict() for r in self.incidents],
            "false_alarms": self.false_alarms,
            "false_alarm_seconds": self.false_alarm_seconds,
            "site_days": self.site_days,
            "false_alarms_per_site_day": self.false_alarms_per_site_day,
            "false_alarm_share": self.false_alarm_share,
        }


@dataclass(frozen=True)
class _RecordedParser:
    band: str
    reasons: list[str]


@dataclass(frozen=True)
class RecordedHealth:
    """One site's health as the store recorded it (a report of
    :meth:`SiteHealth.to_dict`, at ``at``): what :func:`review` reads of a
    :class:`SiteHealth`, without scoring again."""

    site: str
    at: float
    band: str
    reasons: list[str]
    diagnosis: str
    failing_routes: list[str]
    parser: _RecordedParser

    @classmethod
    def of(cls, at: float, report: Mapping[str, Any]) -> RecordedHealth:
        """The recorded ``report`` of one site at ``at`` (unix seconds)."""
        p = report.get("parser") or {}
        return cls(
            site=str(report["site"]), at=float(at), band=str(report.get("band", "unknown")),
            reasons=list(report.get("reasons") or []), diagnosis=str(report.get("diagnosis", "none")),
            failing_routes=list(report.get("failing_routes") or []),
            parser=_RecordedParser(str(p.get("band", "unknown")), list(p.get("reasons") or [])),
        )  # fmt: skip


_PARSER_CAUSES = frozenset({"extract_failed", "parser"})


_REFUSALS: Final = ("hard_block", "challenge", "soft_block")


def action_effects(
    report: ReviewReport,
    buckets: BucketArrays,
    *,
    window_s: float = 3600.0,
) -> list[dict[str, Any]]:
    """Did the band's action help? For each reviewed incident whose band moved
    (the slow-down of ``degrading``, the pause of ``critical`` applies from
    that evaluation on), the site's requests and refusal rate (hard blocks,
    challenges and soft blocks per request) in the ``window_s`` seconds
    before the move and in those after it, read from ``buckets`` (15-minute,
    of that site: a bucket belongs to the side its start falls on). ``helped``: the refusal rate fell (True), did not (False),
    or cannot be told (None: no request on one side, as when a pause stopped
    them all). One dict per incident, in :attr:`ReviewReport.incidents`
    order (``action_at`` None for an incident whose band never moved).
    """
    from recrawl.records.buckets import OUTCOMES

    cols = [OUTCOMES.index(o) for o in _REFUSALS]
    start = np.asarray(buckets.bucket_start, dtype=np.float64)
    n = np.asarray(buckets.n, dtype=np.float64)
    refused = (
        np.asarray(buckets.outcomes, dtype=np.float64).reshape(len(n), -1)[:, cols].sum(axis=1)
    )
    site_of = np.asarray(buckets.site)
    out: list[dict[str, Any]] = []
    for r in report.incidents:
        if r.moved_after_s is None:
            out.append({"site": r.incident.site, "action_at": None, "helped": None})
            continue
        at = r.incident.start + r.moved_after_s
        code = buckets.sites.index(r.incident.site) if r.incident.site in buckets.sites else -1
        mine = site_of == code

        def rate(lo: float, hi: float, mine: Any = mine) -> tuple[int, float | None]:
            sel = mine & (start >= lo) & (start < hi)
            req = float(n[sel].sum())
            return int(req), (float(refused[sel].sum()) / req if req else None)

        n_before, before = rate(at - window_s, at)
        n_after, after = rate(at, at + window_s)
        helped = None if before is None or after is None else after < before
        out.append(
            {"site": r.incident.site, "action_at": at, "requests_before": n_before,
             "refusal_rate_before": before, "requests_after": n_after,
             "refusal_rate_after": after, "helped": helped}
        )  # fmt: skip
    return out


Evaluation = SiteHealth | RecordedHealth
"""What :func:`review` reads: an evaluation made now or one recorded."""


def _view(h: Evaluation, parser: bool) -> tuple[str, str | None]:
    if parser:
        return h.parser.band, (h.parser.reasons[0] if h.parser.reasons else None)
    top = h.reasons[0] if h.reasons and h.reasons[0] != NOT_ENOUGH else None
    return h.band, top


def _names(h: Evaluation, inc: Incident) -> bool:
    if inc.cause == "route":
        return h.diagnosis == "route" and (inc.route is None or inc.route in h.failing_routes)
    _, top = _view(h, inc.cause in _PARSER_CAUSES)
    return inc.cause is None or top == inc.cause


def review(
    evaluations: Iterable[Evaluation],
    incidents: Sequence[Incident],
    *,
    grace_s: float = 2 * 3600.0,
    step_s: float = BUCKET_SECONDS,
) -> ReviewReport:
    """Review a history of evaluations against labelled incidents.

    Parameters
    ----------
    evaluations
        Evaluations of any sites at successive times (``SiteHealth.at``), made
        now or read from the recorded history (:class:`RecordedHealth`).
    incidents
        Labelled incidents.
    grace_s
        Time after an incident's end during which its band is still allowed,
        seconds (the score needs time to recover).
    step_s
        Evaluation period, seconds, used as the length of one false-alarm step.

    Returns
    -------
    ReviewReport
    """
    by_site: dict[str, list[Evaluation]] = {}
    for h in evaluations:
        by_site.setdefault(h.site, []).append(h)
    for hs in by_site.values():
        hs.sort(key=lambda h: h.at)
    reviews: list[IncidentReview] = []
    for inc in incidents:
        parser = inc.cause in _PARSER_CAUSES
        during = [h for h in by_site.get(inc.site, []) if inc.start <= h.at <= inc.end]
        moved = next((h for h in during if _RANK[_view(h, parser)[0]] >= 1), None)

        def hit(h: Evaluation, inc: Incident = inc, parser: bool = parser) -> bool:
            band = _view(h, parser)[0]
            band_ok = band == inc.band if inc.band else _RANK[band] >= 1
            return band_ok and _names(h, inc)

        found = next((h for h in during if hit(h)), None)
        worst = max((_view(h, parser)[0] for h in during), key=_RANK.__getitem__, default="unknown")
        if found is not None:
            top = "route" if inc.cause == "route" else _view(found, parser)[1]
        elif moved is not None:
            top = _view(moved, parser)[1]
        else:
            tops = [t for h in during if (t := _view(h, parser)[1]) is not None]
            # the commonest; a tie goes to the one seen first (not to hash order)
            top = max(dict.fromkeys(tops), key=tops.count) if tops else None
        reviews.append(
            IncidentReview(
                incident=inc,
                moved_after_s=None if moved is None else moved.at - inc.start,
                detected_after_s=None if found is None else found.at - inc.start,
                band_reached=worst,
                top_reason=top,
                cause_named=any(_names(h, inc) for h in during),
            )
        )
    alarms: list[dict[str, Any]] = []
    total = 0.0
    for site, hs in by_site.items():
        mine = [i for i in incidents if i.site == site]
        for parser in (False, True):
            run: list[Evaluation] = []
            closing: list[Evaluation | None] = [*hs, None]  # None closes the last run
            for ev in closing:
                bad = False
                if ev is not None:
                    band = _view(ev, parser)[0]
                    allowed = 0
                    for inc in mine:
                        if (inc.cause in _PARSER_CAUSES) != parser and inc.cause is not None:
                            continue
                        if inc.start <= ev.at <= inc.end + grace_s:
                            allowed = max(allowed, _RANK[inc.band] if inc.band else 2)
                    bad = _RANK[band] > allowed
                if bad and ev is not None:
                    run.append(ev)
                    continue
                if run:
                    worst = max((_view(x, parser)[0] for x in run), key=_RANK.__getitem__)
                    alarms.append(
                        {
                            "site": site,
                            "kind": "parser" if parser else "target",
                            "start": run[0].at,
                            "end": run[-1].at,
                            "band": worst,
                            "top_reason": _view(run[0], parser)[1],
                        }
                    )
                    total += len(run) * step_s
                    run = []
    site_days = sum(len(hs) for hs in by_site.values()) * step_s / 86400.0
    return ReviewReport(reviews, alarms, total, site_days)
