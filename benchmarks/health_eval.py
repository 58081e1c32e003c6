"""Target health on a generated fetch log: production scorer against the seed's reference.

Generates :func:`recrawl.healthsim.default_scenario` (twelve sites, three weeks,
labelled incidents), aggregates it into 15-minute buckets in memory with
:func:`recrawl.health.aggregate_buckets`, then evaluates every 15 minutes from
the start of day 3 (the first time the seed's baseline holds a full day) with
both scorers:

* production: :func:`recrawl.health.evaluate_sites` (daily-median baselines,
  adaptive window, rates read at the lower end of their confidence interval,
  route diagnosis, smoothing, hysteresis, canaries, parser);
* reference: :func:`recrawl.health.evaluate_reference` (the seed's code on the
  last hour against the pooled 14-day baseline; no smoothing, no route split).

Both are reviewed with :func:`recrawl.health.review` against the labels and the
result printed as JSON: per incident the delay until the band moved, until the
expected band came with the right top reason, the worst band, the top reason;
and every false alarm (a band worse than the labels allow). It also times one
evaluation of 1,000 sites × 15 days of buckets.

Run: ``.venv/bin/python benchmarks/health_eval.py [--seed N | --seeds N ...] [--out FILE]``.
With ``--seeds`` the JSON is ``{"seeds": [report, ...], "summary": [...]}``, the
summary giving per seed the false alarms outside incidents and, per incident,
the production delay until the expected band with the right top reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from recrawl.health.buckets import BUCKET_SECONDS, LATENCY_BINS, OUTCOMES
from recrawl.health.score import (
    BucketArrays,
    HealthState,
    ParserHealth,
    SiteHealth,
    action_for,
    aggregate_buckets,
    band_for,
    compute_baselines,
    evaluate_reference,
    evaluate_sites,
    review,
)
from recrawl.sim.health import DAY, default_scenario

ONSET_TARGET_S = 5400.0


def _reference_health(site: str, at: float, score: int | None, reasons: list[str]) -> SiteHealth:
    band = band_for(score)
    return SiteHealth(
        site=site,
        at=at,
        score=score,
        raw_score=score,
        band=band,
        reasons=reasons,
        diagnosis="site" if band in ("degrading", "critical") else "none",
        failing_routes=[],
        parser=ParserHealth(None, None, "unknown", []),
        action=action_for(band),
    )


def run_scenario(seed: int, buckets: BucketArrays | None = None) -> dict[str, Any]:
    """Generate, aggregate, evaluate and review; returns the JSON report.

    Evaluation starts at the end of day 2, the first time the seed's baseline
    (14 whole days ending a day before) holds a day of data.
    """
    sc = default_scenario(seed)
    t0 = time.perf_counter()
    if buckets is None:
        buckets = aggregate_buckets(sc.observations())
    t_agg = time.perf_counter() - t0
    state = HealthState()
    prod: list[SiteHealth] = []
    ref: list[SiteHealth] = []
    baselines = None
    t_prod = t_ref = 0.0
    steps = 0
    for at in range(sc.start + 2 * DAY, sc.end + 1, BUCKET_SECONDS):
        if baselines is None or baselines.valid_from != at // DAY * DAY:
            baselines = compute_baselines(buckets, at)
        t1 = time.perf_counter()
        prod.extend(evaluate_sites(buckets, at, state, baselines=baselines))
        t2 = time.perf_counter()
        ref.extend(
            _reference_health(s, at, sc_, r)
            for s, sc_, r in evaluate_reference(buckets, at, baselines=baselines)
        )
        t3 = time.perf_counter()
        t_prod += t2 - t1
        t_ref += t3 - t2
        steps += 1
    rp = review(prod, sc.incidents)
    rr = review(ref, sc.incidents)
    incidents = []
    for a, b in zip(rp.incidents, rr.incidents, strict=True):
        pa, pb = a.to_dict(), b.to_dict()
        row = {k: pa[k] for k in ("site", "cause", "expected_band")}
        row["onset_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(a.incident.start))
        row["duration_h"] = (a.incident.end - a.incident.start) / 3600
        for name, r in (("production", pa), ("reference", pb)):
            row[name] = {
                k: r[k]
                for k in (
                    "moved_after_s",
                    "detected_after_s",
                    "band_reached",
                    "top_reason",
                    "cause_named",
                )
            }
            d = r["detected_after_s"]
            row[name]["met_1_5h"] = d is not None and d <= ONSET_TARGET_S
        incidents.append(row)

    def alarms(rep: Any) -> dict[str, Any]:
        inside, outside = [], []
        for fa in rep.false_alarms:
            fa = dict(fa)
            fa["start_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(fa["start"]))
            fa["duration_s"] = fa["end"] - fa["start"] + BUCKET_SECONDS
            labelled = any(
                i.site == fa["site"] and i.start <= fa["start"] <= i.end + 7200
                for i in sc.incidents
            )
            (inside if labelled else outside).append(fa)
        return {
            "outside_incidents": len(outside),
            "wrong_band_inside_incidents": len(inside),
            "seconds": rep.false_alarm_seconds,
            "episodes": outside + inside,
        }

    unknown = sum(1 for h in prod if h.score is None)
    return {
        "seed": seed,
        "sites": len(sc.sites),
        "days": sc.days,
        "observations": int(buckets.n.sum()),
        "bucket_rows": len(buckets),
        "evaluation_steps": steps,
        "seconds": {
            "aggregate": round(t_agg, 2),
            "production_per_step": round(t_prod / steps, 5),
            "reference_per_step": round(t_ref / steps, 5),
        },
        "production_unscored_site_steps": unknown,
        "incidents": incidents,
        "false_alarms": {"production": alarms(rp), "reference": alarms(rr)},
    }


def time_large(n_sites: int = 1000, days: int = 15, seed: int = 1) -> dict[str, Any]:
    """Seconds for one :func:`evaluate_sites` call over ``n_sites`` × ``days`` of buckets."""
    rng = np.random.default_rng(seed)
    per_site = days * DAY // BUCKET_SECONDS
    at = 1_767_225_600 + days * DAY
    starts = np.tile(at - BUCKET_SECONDS * np.arange(per_site, 0, -1), n_sites)
    rows = n_sites * per_site
    n = rng.poisson(40, rows)
    outcomes = np.zeros((rows, len(OUTCOMES)), np.int64)
    outcomes[:, 1] = n
    latency = np.zeros((rows, LATENCY_BINS), np.int64)
    latency[:, 12] = n
    b = BucketArrays(
        sites=tuple(f"s{i}" for i in range(n_sites)),
        page_types=("page",),
        routes=("",),
        site=np.repeat(np.arange(n_sites), per_site),
        page_type=np.zeros(rows, np.int64),
        route=np.zeros(rows, np.int64),
        bucket_start=starts,
        n=n,
        outcomes=outcomes,
        bytes_sent=n * 600.0,
        bytes_received=n * 50_000.0,
        credits=np.zeros(rows),
        rendered=np.zeros(rows, np.int64),
        canary_ok=np.zeros(rows, np.int64),
        canary_mismatch=np.zeros(rows, np.int64),
        latency=latency,
    )
    t0 = time.perf_counter()
    out = evaluate_sites(b, at, HealthState())
    t1 = time.perf_counter()
    return {"sites": len(out), "bucket_rows": rows, "seconds": round(t1 - t0, 3)}


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    """One seed's production result in a line: false alarms and delays (seconds)."""
    fa = report["false_alarms"]["production"]
    return {
        "seed": report["seed"],
        "false_alarms": [
            [e["site"], e["start_utc"], e["duration_s"], e["band"], e["top_reason"]]
            for e in fa["episodes"]
        ],
        "detected_after_s": [
            [i["site"], i["cause"], i["onset_utc"], i["production"]["detected_after_s"]]
            for i in report["incidents"]
        ],
        "all_met_1_5h": all(i["production"]["met_1_5h"] for i in report["incidents"]),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", help="several seeds, with a summary")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--skip-large", action="store_true", help="skip the 1,000-site timing")
    args = ap.parse_args(argv)
    report: dict[str, Any]
    if args.seeds:
        reports = [run_scenario(s) for s in args.seeds]
        report = {"seeds": reports, "summary": [_summary(r) for r in reports]}
    else:
        report = run_scenario(args.seed)
    if not args.skip_large:
        report["large"] = time_large()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
