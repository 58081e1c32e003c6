"""A synthetic fetch log for target health: sites with their own normals, and incidents.

:func:`default_scenario` builds twelve sites over three weeks, each with a
different normal (one challenges 4 % of requests every day, one is slow, one
has a little 429 noise, one gets one-minute 429 blips, one has little traffic)
and labels the incidents it injects: an early and a late challenge wave, a
hard-block wave with slow responses, a dead proxy pool, latency drift, a parser
break, unlabelled soft blocks (200s with tiny bodies and empty records, no
``outcome``) and canaries carrying the wrong value.

:func:`moderate_scenario` holds the moderate, sustained incidents of issue 29
(a 20–30 % challenge or soft-block rate, a 2× latency drift, 10 % 429s with
Retry-After) beside noisy but normal sites that must never alarm.

:meth:`HealthScenario.observations` yields SPEC §5 observation dicts in time
order (``url``, ``fetched_at`` in unix seconds, ``site``, ``page_type``,
``status`` or ``error``, ``bytes_sent``, ``bytes_received``, ``latency_ms``,
``route``, ``record``, ``id``, and where the reporter sends them ``outcome``,
``title``, ``body_excerpt``, ``credits``, ``canary``, ``retry_after``). Everything is drawn from
one seeded generator, so a scenario is reproducible.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from recrawl.health.score import Incident

__all__ = ["Effect", "HealthScenario", "SiteProfile", "default_scenario", "moderate_scenario"]

HOUR: Final = 3600
DAY: Final = 86_400
DEFAULT_START: Final = 1_767_225_600
"""2026-01-01 00:00 UTC, unix seconds."""

_CHALLENGE_PAGES: Final = (
    (403, "Just a moment...", '<script src="/cdn-cgi/challenge-platform/h/b/orchestrate/'),
    (403, "shop", '<iframe src="https://geo.captcha-delivery.com/captcha/?initialCid='),
    (200, "Pardon Our Interruption", "As you were browsing something about your browser"),
    (200, "Verify", '<div class="g-recaptcha" data-sitekey="6Lc"></div>'),
)


@dataclass(frozen=True)
class SiteProfile:
    """One site's normal behaviour.

    Attributes
    ----------
    site
        Site label (also the URL host).
    rate_per_hour
        Mean requests per hour; traffic follows a daily cycle around it.
    page_types
        ``name → (share of requests, normal body bytes, required fields)``.
    routes
        Route labels, used uniformly (``pool/country``).
    latency_ms
        Median response time, milliseconds (log-normal).
    latency_sigma
        Log-normal shape of response times.
    challenge_rate, hard_rate, soft_rate, extract_rate
        Normal fractions of requests that are challenges, hard blocks (429),
        soft blocks and extraction failures.
    blips_per_day
        One-minute bursts in which every request gets a 429.
    burst_per_day
        Two-minute bursts in which half the requests get a 429.
    reports_outcome
        Whether the reporter sends its own ``outcome`` for blocks.
    canaries
        Canary pages fetched every 15 minutes.
    credits
        Credit-billed (one credit per successful fetch).
    """

    site: str
    rate_per_hour: float
    page_types: Mapping[str, tuple[float, int, tuple[str, ...]]]
    routes: tuple[str, ...] = ("pool-a/us", "pool-a/de", "pool-b/us", "pool-b/de")
    latency_ms: float = 450.0
    latency_sigma: float = 0.45
    challenge_rate: float = 0.002
    hard_rate: float = 0.002
    soft_rate: float = 0.001
    extract_rate: float = 0.002
    blips_per_day: float = 0.0
    burst_per_day: float = 0.0
    reports_outcome: bool = False
    canaries: bool = False
    credits: bool = False


@dataclass(frozen=True)
class Effect:
    """What an incident does to a site between ``start`` and ``end`` (unix seconds).

    Rates are added to the site's normal (fractions of requests); the latency
    multiplier ramps linearly from 1 to ``latency_factor`` over ``ramp_s``
    seconds; rates ramp the same way.

    Attributes
    ----------
    throttle
        Fraction of requests answered 429 with ``Retry-After: 60`` (the
        observation's ``retry_after``, seconds).
    dead_route
        Route prefix whose every request fails (resets and timeouts).
    extract_page_type
        Page type whose records lose their first required field.
    canary_mismatch
        Canaries parse but carry the wrong value.
    """

    site: str
    start: float
    end: float
    challenge: float = 0.0
    hard: float = 0.0
    soft: float = 0.0
    latency_factor: float = 1.0
    ramp_s: float = 0.0
    throttle: float = 0.0
    dead_route: str | None = None
    extract_page_type: str | None = None
    canary_mismatch: bool = False

    def weight(self, t: np.ndarray) -> np.ndarray:
        """Strength 0–1 of the effect at times ``t`` (unix seconds)."""
        inside = (t >= self.start) & (t < self.end)
        if self.ramp_s > 0:
            ramp = np.clip((t - self.start) / self.ramp_s, 0.0, 1.0)
        else:
            ramp = np.ones_like(t)
        return np.where(inside, ramp, 0.0)


@dataclass
class HealthScenario:
    """Sites, injected effects and their labels over ``[start, start + days)``."""

    sites: list[SiteProfile]
    effects: list[Effect]
    incidents: list[Incident]
    start: int = DEFAULT_START
    days: int = 21
    seed: int = 0
    pages_per_type: int = 400
    _ids: int = field(default=0, repr=False)

    @property
    def end(self) -> int:
        """End of the log, unix seconds."""
        return self.start + self.days * DAY

    def observations(self) -> Iterator[dict[str, Any]]:
        """Yield every observation in time order (hour by hour, all sites)."""
        rng = np.random.default_rng(self.seed)
        blips = {p.site: self._bursts(rng, p.blips_per_day, 60) for p in self.sites}
        bursts = {p.site: self._bursts(rng, p.burst_per_day, 120) for p in self.sites}
        versions = {
            p.site: np.zeros((len(p.page_types), self.pages_per_type), int) for p in self.sites
        }
        n = 0
        for h in range(self.days * 24):
            t0 = self.start + h * HOUR
            hour: list[dict[str, Any]] = []
            for p in self.sites:
                hour.extend(
                    self._site_hour(rng, p, t0, blips[p.site], bursts[p.site], versions[p.site])
                )
            hour.sort(key=lambda o: o["fetched_at"])
            for obs in hour:
                obs["id"] = f"o{n}"
                n += 1
                yield obs

    def _bursts(self, rng: np.random.Generator, per_day: float, length: float) -> np.ndarray:
        k = rng.poisson(per_day * self.days)
        s = np.sort(rng.uniform(self.start, self.end, k))
        return np.stack([s, s + length], axis=1) if k else np.zeros((0, 2))

    def _site_hour(
        self,
        rng: np.random.Generator,
        p: SiteProfile,
        t0: int,
        blips: np.ndarray,
        bursts: np.ndarray,
        versions: np.ndarray,
    ) -> list[dict[str, Any]]:
        hour_of_day = ((t0 - self.start) % DAY) / HOUR
        cycle = 1.0 + 0.5 * np.sin(2 * np.pi * (hour_of_day - 9) / 24)
        k = int(rng.poisson(p.rate_per_hour * cycle))
        t = np.sort(rng.uniform(t0, t0 + HOUR, k))
        names = list(p.page_types)
        shares = np.array([p.page_types[x][0] for x in names])
        pt = rng.choice(len(names), size=k, p=shares / shares.sum())
        route = rng.integers(0, len(p.routes), k)
        page = rng.integers(0, self.pages_per_type, k)
        canary = np.zeros(k, bool)
        if p.canaries:
            ct = t0 + np.arange(0, HOUR, 900) + 30.0
            t = np.concatenate([t, ct, ct + 1])
            pt = np.concatenate([pt, np.zeros(2 * len(ct), int)])
            route = np.concatenate([route, rng.integers(0, len(p.routes), 2 * len(ct))])
            page = np.concatenate([page, np.tile([0, 1], len(ct))])
            canary = np.concatenate([canary, np.ones(2 * len(ct), bool)])
            order = np.argsort(t, kind="stable")
            t, pt, route, page, canary = (
                t[order],
                pt[order],
                route[order],
                page[order],
                canary[order],
            )
            k = len(t)
        chal = np.full(k, p.challenge_rate)
        hard = np.full(k, p.hard_rate)
        soft = np.full(k, p.soft_rate)
        thr = np.zeros(k)
        lat_f = np.ones(k)
        dead = np.zeros(k, bool)
        broken = np.zeros(k, bool)
        mismatch = np.zeros(k, bool)
        for e in self.effects:
            if e.site != p.site or e.end <= t0 or e.start >= t0 + HOUR:
                continue
            w = e.weight(t)
            chal += e.challenge * w
            hard += e.hard * w
            soft += e.soft * w
            thr += e.throttle * w
            lat_f *= 1.0 + (e.latency_factor - 1.0) * w
            on = w > 0
            if e.dead_route is not None:
                prefix = np.array([r.startswith(e.dead_route) for r in p.routes])
                dead |= on & prefix[route]
            if e.extract_page_type is not None:
                broken |= on & (np.array(names)[pt] == e.extract_page_type)
            if e.canary_mismatch:
                mismatch |= on & canary
        for lo, hi in blips:
            hard[(t >= lo) & (t < hi)] = 1.0
        for lo, hi in bursts:
            hard[(t >= lo) & (t < hi)] = np.maximum(hard[(t >= lo) & (t < hi)], 0.5)
        u = rng.random(k)
        c1 = hard
        c2 = c1 + chal
        c3 = c2 + soft
        c4 = c3 + thr
        kind = np.where(u < c1, 1, np.where(u < c2, 2, np.where(u < c3, 3, np.where(u < c4, 4, 0))))
        kind[canary & (kind != 0)] = 0
        latency = p.latency_ms * np.exp(p.latency_sigma * rng.standard_normal(k)) * lat_f
        size_noise = rng.normal(1.0, 0.08, k)
        extract = rng.random(k) < p.extract_rate
        changed = rng.random(k) < 0.08
        which = rng.integers(0, len(_CHALLENGE_PAGES), k)
        hard_kind = rng.random(k)
        dead_kind = rng.random(k)
        out: list[dict[str, Any]] = []
        for i in range(k):
            name = names[int(pt[i])]
            _, normal_bytes, fields = p.page_types[name]
            pg = int(page[i])
            obs: dict[str, Any] = {
                "url": f"https://{p.site}/{name}/{'canary-' if canary[i] else ''}{pg}",
                "fetched_at": round(float(t[i]), 3),
                "site": p.site,
                "page_type": name,
                "route": p.routes[int(route[i])],
                "bytes_sent": 620,
                "latency_ms": round(float(latency[i]), 1),
            }
            ok = False
            if dead[i]:
                obs["error"] = "connection_reset" if dead_kind[i] < 0.6 else "timeout"
                obs["bytes_received"] = 0
                obs["latency_ms"] = round(float(latency[i] * (1 if dead_kind[i] < 0.6 else 20)), 1)
            elif kind[i] == 1:
                if hard_kind[i] < 0.15:
                    obs["error"] = "connection_reset"
                    obs["bytes_received"] = 0
                else:
                    obs["status"] = 429 if hard_kind[i] < 0.6 else 403
                    obs["bytes_received"] = 1_200
                if p.reports_outcome:
                    obs["outcome"] = "hard_block"
            elif kind[i] == 2:
                status, title, body = _CHALLENGE_PAGES[int(which[i])]
                obs["status"] = status
                obs["bytes_received"] = 9_000
                obs["title"] = title
                obs["body_excerpt"] = body
                if p.reports_outcome:
                    obs["outcome"] = "challenge"
            elif kind[i] == 4:
                obs["status"] = 429
                obs["bytes_received"] = 1_200
                obs["retry_after"] = 60
                if p.reports_outcome:
                    obs["outcome"] = "hard_block"
            elif kind[i] == 3:
                obs["status"] = 200
                obs["bytes_received"] = int(2_400 * size_noise[i])
                obs["title"] = p.site
                obs["record"] = {}
                if p.reports_outcome:
                    obs["outcome"] = "soft_block"
            else:
                ok = True
                obs["status"] = 200
                obs["bytes_received"] = int(normal_bytes * size_noise[i])
                obs["title"] = f"{name} {pg} | {p.site}"
                if changed[i] and not canary[i]:
                    versions[int(pt[i]), pg] += 1
                v = int(versions[int(pt[i]), pg])
                record: dict[str, Any] = {f: f"{f}-{pg}-{v}" for f in fields}
                if canary[i]:
                    record = {f: f"{f}-canary-{pg}" for f in fields}
                    obs["canary"] = "mismatch" if mismatch[i] else "ok"
                    if mismatch[i]:
                        record[fields[0]] = f"{fields[0]}-canary-{pg}-wrong"
                elif broken[i] or extract[i]:
                    record.pop(fields[-1], None)
                    if p.reports_outcome:
                        obs["outcome"] = "extract_failed"
                obs["record"] = record
            if p.credits:
                obs["credits"] = 1.0 if ok else 0.0
            out.append(obs)
        return out


def default_scenario(
    seed: int = 0,
    *,
    start: int = DEFAULT_START,
    days: int = 21,
    sites: Collection[str] | None = None,
) -> HealthScenario:
    """Twelve sites over ``days`` days (at least 21) with labelled incidents.

    Incident times are fixed relative to ``start`` (unix seconds, midnight UTC).
    ``sites`` keeps only those sites with their incidents (a quicker log; the
    random draws differ from the full scenario's for the same seed).
    """
    if days < 21:
        raise ValueError("the default scenario needs at least 21 days")
    item = {"item": (0.7, 80_000, ("title", "price")), "list": (0.3, 140_000, ("title", "count"))}
    article = {"article": (1.0, 60_000, ("headline", "body"))}
    job = {"job": (0.8, 45_000, ("title", "company", "salary")), "search": (0.2, 90_000, ("n",))}
    profiles = [
        SiteProfile("shop-a.example", 140, item),
        SiteProfile("shop-b.example", 160, item),
        SiteProfile("captcha-c.example", 150, item, challenge_rate=0.04),
        SiteProfile("slow-d.example", 120, article, latency_ms=2_600, latency_sigma=0.55),
        SiteProfile("noisy-e.example", 180, item, hard_rate=0.02, burst_per_day=4.0),
        SiteProfile(
            "news-f.example",
            180,
            article,
            routes=("pool-a/us", "pool-a/de", "pool-b/us", "pool-b/de", "pool-c/us", "pool-c/de"),
        ),
        SiteProfile("api-g.example", 130, {"api": (1.0, 12_000, ("id", "price"))}, credits=True),
        SiteProfile("jobs-h.example", 130, job, reports_outcome=True),
        SiteProfile("market-i.example", 150, item),
        SiteProfile("travel-j.example", 110, item, canaries=True, reports_outcome=True),
        SiteProfile("blog-k.example", 130, article, blips_per_day=3.0),
        SiteProfile("forum-l.example", 45, article),
    ]
    s = start
    d, h = DAY, HOUR
    effects = [
        Effect(
            "shop-b.example", s + 6 * d + 13 * h, s + 6 * d + 17 * h, challenge=0.35, ramp_s=600
        ),
        Effect(
            "shop-b.example", s + 17 * d + 14 * h, s + 17 * d + 20 * h, challenge=0.35, ramp_s=600
        ),
        Effect(
            "noisy-e.example",
            s + 18 * d + 2 * h,
            s + 18 * d + 7 * h,
            hard=0.45,
            challenge=0.15,
            latency_factor=3.5,
            ramp_s=900,
        ),
        Effect("news-f.example", s + 16 * d + 9 * h, s + 16 * d + 19 * h, dead_route="pool-c"),
        Effect(
            "api-g.example",
            s + 19 * d + 6 * h,
            s + 19 * d + 18 * h,
            latency_factor=3.0,
            ramp_s=2 * h,
        ),
        Effect("jobs-h.example", s + 15 * d + 11 * h, s + 16 * d + 11 * h, extract_page_type="job"),
        Effect("market-i.example", s + 20 * d + 9 * h, s + 20 * d + 15 * h, soft=0.40, ramp_s=1800),
        Effect("travel-j.example", s + 14 * d + 10 * h, s + 14 * d + 14 * h, canary_mismatch=True),
    ]
    labels = {
        "shop-b.example": ("challenge", "degrading", None),
        "noisy-e.example": ("hard_block", "critical", None),
        "news-f.example": ("route", "healthy", "pool-c"),
        "api-g.example": ("latency", "healthy", None),
        "jobs-h.example": ("extract_failed", "critical", None),
        "market-i.example": ("soft_block", "degrading", None),
        "travel-j.example": ("canary_mismatch", "degrading", None),
    }
    incidents = [
        Incident(
            e.site,
            e.start,
            e.end,
            cause=labels[e.site][0],
            band=labels[e.site][1],
            route=labels[e.site][2],
        )
        for e in effects
    ]
    if sites is not None:
        keep = set(sites)
        unknown = keep - {p.site for p in profiles}
        if unknown:
            raise ValueError(f"no such site in the default scenario: {sorted(unknown)}")
        profiles = [p for p in profiles if p.site in keep]
        effects = [e for e in effects if e.site in keep]
        incidents = [i for i in incidents if i.site in keep]
    return HealthScenario(profiles, effects, incidents, start=start, days=days, seed=seed)


def moderate_scenario(
    seed: int = 0,
    *,
    start: int = DEFAULT_START,
    days: int = 18,
    sites: Collection[str] | None = None,
) -> HealthScenario:
    """Moderate, sustained incidents beside noisy but normal sites (issue 29).

    Five sites never have an incident and must never alarm: a plain shop, one
    that challenges 4 % of requests every day, a slow one, one with 2 % 429s
    and four 2-minute bursts of 50 % 429s a day, one with three one-minute
    blips of 429s a day. Eight sites each get one incident on day 16
    (0-based), ramping up over 10 minutes (the latency drift over an hour)
    and lasting five to eight hours:

    * 25 % challenges from 10:00, and again on another site from 01:00 (low
      traffic): degrading, ``challenge``;
    * 20 % challenges from 14:00: degrading, ``challenge``;
    * a site that challenges 4 % every day going to 29 % from 11:00:
      degrading, ``challenge`` (at 24 %, exactly the seed's full penalty,
      the score sits on the 79/80 edge whenever the draws run low);
    * 25 % unlabelled soft blocks (200 with a tiny body and an empty record)
      from 11:00, and 30 % reported soft blocks from 15:00: degrading,
      ``soft_block``;
    * a 2× latency drift from 09:00: healthy (the seed's 15 points at 3×
      leave 7.5 at 2×), ``latency``;
    * 10 % 429s with Retry-After from 12:00: the seed's arithmetic gives
      82.5, on the healthy side of 80, so the label accepts any band but
      the site must be asked to slow down (its :class:`~recrawl.health.score.Throttle`).

    ``sites`` keeps only those sites, as in :func:`default_scenario`.
    """
    if days < 18:
        raise ValueError("the moderate scenario needs at least 18 days")
    item = {"item": (0.7, 80_000, ("title", "price")), "list": (0.3, 140_000, ("title", "count"))}
    article = {"article": (1.0, 60_000, ("headline", "body"))}
    profiles = [
        SiteProfile("steady-a.example", 140, item),
        SiteProfile("captcha-c.example", 150, item, challenge_rate=0.04),
        SiteProfile("slow-d.example", 120, article, latency_ms=2_600, latency_sigma=0.55),
        SiteProfile("noisy-e.example", 180, item, hard_rate=0.02, burst_per_day=4.0),
        SiteProfile("blog-k.example", 130, article, blips_per_day=3.0),
        SiteProfile("wave-m.example", 140, item),
        SiteProfile("night-n.example", 140, item),
        SiteProfile("wave-o.example", 150, item),
        SiteProfile("captcha-p.example", 150, item, challenge_rate=0.04),
        SiteProfile("soft-q.example", 140, item),
        SiteProfile("soft-r.example", 140, article, reports_outcome=True),
        SiteProfile("drift-s.example", 130, article),
        SiteProfile("limit-t.example", 160, item),
    ]
    d0 = start + 16 * DAY
    h = HOUR
    ramp = 600.0
    plan: list[tuple[Effect, str, str | None]] = [
        (Effect("wave-m.example", d0 + 10 * h, d0 + 16 * h, challenge=0.25, ramp_s=ramp),
         "challenge", "degrading"),
        (Effect("night-n.example", d0 + 1 * h, d0 + 7 * h, challenge=0.25, ramp_s=ramp),
         "challenge", "degrading"),
        (Effect("wave-o.example", d0 + 14 * h, d0 + 19 * h, challenge=0.20, ramp_s=ramp),
         "challenge", "degrading"),
        (Effect("captcha-p.example", d0 + 11 * h, d0 + 17 * h, challenge=0.25, ramp_s=ramp),
         "challenge", "degrading"),
        (Effect("soft-q.example", d0 + 11 * h, d0 + 16 * h, soft=0.25, ramp_s=ramp),
         "soft_block", "degrading"),
        (Effect("soft-r.example", d0 + 15 * h, d0 + 20 * h, soft=0.30, ramp_s=ramp),
         "soft_block", "degrading"),
        (Effect("drift-s.example", d0 + 9 * h, d0 + 17 * h, latency_factor=2.0, ramp_s=h),
         "latency", "healthy"),
        (Effect("limit-t.example", d0 + 12 * h, d0 + 18 * h, throttle=0.10, ramp_s=ramp),
         "hard_block", None),
    ]  # fmt: skip
    if sites is not None:
        keep = set(sites)
        unknown = keep - {p.site for p in profiles}
        if unknown:
            raise ValueError(f"no such site in the moderate scenario: {sorted(unknown)}")
        profiles = [p for p in profiles if p.site in keep]
        plan = [x for x in plan if x[0].site in keep]
    effects = [e for e, _, _ in plan]
    incidents = [Incident(e.site, e.start, e.end, cause=c, band=b) for e, c, b in plan]
    return HealthScenario(profiles, effects, incidents, start=start, days=days, seed=seed)
