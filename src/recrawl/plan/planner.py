"""The planner: which pages to fetch this cycle, within the cycle's budget.

Pure functions over numpy arrays: no I/O and no clock, ``now`` is always an
argument (unix seconds). Budgets and costs are in the user's billing unit
(bytes, credits, or plain fetches), rates in changes per day.

A cycle's budget is split into reserves and the score pool:

1. **discovery** (``PlannerConfig.discovery_share``): pages never fetched,
   oldest ``first_seen`` first;
2. **verify** (``verify_share``): a uniform random sample of fetchable pages,
   labelled so the model's calibration can be checked;
3. **reestimate** (``reestimate_share``): pages not fetched for
   ``reestimate_after_days`` or more, longest-unvisited first, so a page
   believed static still gets visited;
4. **score**: the rest, including whatever the reserves did not use, goes to
   the policy (what the policy cannot use goes to more new pages):

   ``recrawl`` (default)
       the optimal allocation of :func:`recrawl.freshness.optimal_allocation`
       on the estimated rates, turned into a per-cycle selection: pages are
       taken by how far they are into their optimal interval
       (``days since fetch × optimal visits per day``), most overdue first,
       until the budget is spent. Pages joining a running crawl are visited
       at least ``learning_boost`` × as often as the average page until they
       have ``learning_revisits`` revisits of evidence; and, for their first
       ``probe_window_days``, revisited ``probe_days`` after a fetch while
       every revisit has found a change (at most ``probe_revisits`` times),
       where the allocation would leave them much longer (see
       :class:`PlannerConfig`).
   ``greedy``
       the seed's ``value × freshness_gain ÷ cost``, best first.
   ``uniform``
       longest-unvisited first: every page at the same interval.
   ``proportional``
       visits proportional to the estimated rate, most overdue first.
   ``nutch``
       Apache Nutch's AdaptiveFetchSchedule: a page is due when its interval
       has passed; the interval grows ×1.4 after a fetch without change and
       shrinks ×0.8 after a change, within 60 s … 90 days, starting at 30
       days (see :func:`nutch_next_interval`). Due pages, most overdue first.
   ``harmonic``
       Kolobov et al.'s allocation for harmonic staleness (NeurIPS 2019,
       :func:`harmonic_allocation`) on the estimated rates, most overdue first.

Each policy is one row of :data:`POLICY_RULES` (a :class:`PolicyRule`): whether
it needs estimated rates, how it allocates visits (an :class:`Allocator`),
whether the learning floors and the reserves serve it, and how it ranks a
cycle's pages (a :class:`Ranking`). A new policy is a new row.

The greedy and recrawl priorities are computed in cache-sized chunks on every
core (numpy releases the GIL), so a cycle over ten million pages takes a
fraction of a second once :func:`reallocate` has produced a :class:`Model`.

Reserves ``verify`` and ``reestimate`` serve the model-driven policies
(``recrawl``, ``greedy``) only; baselines spend their whole budget by their own
rule (``discovery`` applies to all: a page without a first fetch has no state).
A reserve too small to pay for one fetch pays for it with the matching
probability (drawn from ``rng``), so small cycles still honour the shares on
average.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from recrawl._exceptions import ConfigError
from recrawl.estimate.rates import (
    DEFAULT_CHANGE_HAZARD_PER_DAY,
    DEFAULT_HALF_LIFE_DAYS,
    GroupPriors,
    estimate_rates,
    fit_group_priors,
    raw_rates,
)
from recrawl.plan.freshness import Objective, freshness_gain, optimal_allocation
from recrawl.plan.notified import notified_allocation
from recrawl.records.evidence import BIN_COLUMNS

__all__ = [
    "NUTCH_DEC_FACTOR",
    "NUTCH_INC_FACTOR",
    "NUTCH_INITIAL_INTERVAL_S",
    "NUTCH_MAX_INTERVAL_S",
    "NUTCH_MIN_INTERVAL_S",
    "POLICIES",
    "POLICY_RULES",
    "PROBE_GAP",
    "REASONS",
    "Allocator",
    "Greedy",
    "Model",
    "NutchDue",
    "Overdue",
    "Plan",
    "PlanPages",
    "PlannerConfig",
    "Policy",
    "PolicyRule",
    "Ranking",
    "group_priors",
    "harmonic_allocation",
    "nutch_next_interval",
    "plan_cycle",
    "policy_rule",
    "reallocate",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

Policy = Literal["recrawl", "greedy", "uniform", "proportional", "nutch", "harmonic"]
REASONS: tuple[str, ...] = ("score", "discovery", "reestimate", "verify")
"""Reason labels, indexed by :attr:`Plan.reason` codes."""
SCORE, DISCOVERY, REESTIMATE, VERIFY = 0, 1, 2, 3

DAY_S = 86_400.0
PROBE_GAP = 4.0
"""A close revisit (``PlannerConfig.probe_days``) is made only where the
allocation's interval is at least this many times longer."""
NUTCH_INITIAL_INTERVAL_S = 30 * DAY_S
"""Nutch ``db.fetch.interval.default``: 30 days, seconds."""
NUTCH_MIN_INTERVAL_S = 60.0
"""Nutch ``db.fetch.schedule.adaptive.min_interval``: 60 s."""
NUTCH_MAX_INTERVAL_S = 90 * DAY_S
"""Upper bound of the adaptive interval used here: 90 days, seconds."""
NUTCH_INC_FACTOR = 1.4
"""Interval multiplier after a fetch without change (Nutch ``inc_rate`` 0.4)."""
NUTCH_DEC_FACTOR = 0.8
"""Interval multiplier after a fetch with a change (Nutch ``dec_rate`` 0.2)."""


_ALL_ACTIVE: BoolArray = np.ones(0, dtype=bool)
"""Marks an omitted ``PlanPages.active`` (every page active)."""


def nutch_next_interval(interval_s: NDArray[Any] | float, changed: NDArray[Any] | bool) -> Any:
    """Next interval of Nutch's AdaptiveFetchSchedule, seconds.

    ``interval × 1.4`` after a fetch that found no change, ``× 0.8`` after a
    change, clipped to ``[60 s, 90 days]``.

    >>> nutch_next_interval(30 * 86400.0, False) / 86400
    42.0
    >>> nutch_next_interval(100.0, True)
    80.0
    """
    out = np.clip(
        np.asarray(interval_s, dtype=np.float64)
        * np.where(np.asarray(changed), NUTCH_DEC_FACTOR, NUTCH_INC_FACTOR),
        NUTCH_MIN_INTERVAL_S,
        NUTCH_MAX_INTERVAL_S,
    )
    return float(out) if out.ndim == 0 else out


@dataclass
class PlanPages:
    """State of every page, one entry per page (index = page number).

    Attributes
    ----------
    value : ndarray of float
        Value weight (business tier, e.g. 1, 2, 4, 8); 0 never scores.
    cost : ndarray of float
        Cost of one fetch of this page, billing units (> 0).
    site : ndarray of int
        Site code, an index into ``site_cost_multiplier`` and ``site_paused``.
    host : ndarray of int
        Host code, for the per-host cap of each cycle (politeness).
    group : ndarray of int
        Group code (site × page type), for the empirical-Bayes prior.
    last_fetch : ndarray of float
        Unix seconds of the last fetch (ignored where ``never_fetched``).
    first_seen : ndarray of float
        Unix seconds at which the URL was discovered.
    never_fetched : ndarray of bool
        The page has no fetch yet (a discovery candidate).
    ev_nc, ev_tc, ev_nu, ev_tu : ndarray of float
        Revisit evidence, see :mod:`recrawl.estimate` (``ev_tc``, ``ev_tu`` in
        days).
    ev_bins : ndarray of float16 or float32, optional
        ``(n, 12)`` the changed intervals' decayed counts and length sums by
        length bin (:mod:`recrawl.records.evidence`, kept by the fold and the
        store). When given, rates come from the binned censored likelihood,
        which is not biased low when a page's revisit intervals vary; without
        it, every changed interval is read at the mean ``ev_tc / ev_nc``. A
        planner that only reads them may hold them as float16 (24 bytes a
        page instead of 48; a relative error of 5e-4 on each number, far
        inside any rate's uncertainty); a fold into them needs float32.
    nutch_interval : ndarray of float
        Current Nutch adaptive interval, seconds.
    site_cost_multiplier : ndarray of float
        Per-site factor on every fetch cost (1 = normal; health raises it),
        indexed by site code.
    site_paused : ndarray of bool
        Per-site pause flag (health band "pushing back"), indexed by site code.
    active : ndarray of bool
        The page may be fetched at all (not gone, not outside its lifetime);
        every page if omitted.
    checked_at : ndarray of float, optional
        Unix seconds until which a trusted cheap signal (a sitemap's or
        feed's ``lastmod``, see :mod:`recrawl.hints`) shows the page unchanged
        since its last fetch; NaN (or not after ``last_fetch``) where there is
        none. The page's chance of being stale counts from the later of the
        two, so a page a signal vouches for waits.
    known_stale : ndarray of bool, optional
        A trusted cheap signal shows a change since the last fetch: the page
        is stale for certain. The ``recrawl`` policy fetches it before every
        page merely due, if its allocation gives it visits at all (a page
        changing too fast to be worth following stays unfetched); ``greedy``
        scores it with P(stale) = 1; the baselines take it as due.
    notified : ndarray of bool, optional
        A source trusted both to vouch and to prove lists the page: it is under
        complete observation (:mod:`recrawl.plan.notified`). The ``recrawl``
        policy gives it no visits of its own, only the fetches of its
        announced changes worth following, chosen with the rest of the
        allocation; it becomes due again only if the source falls silent for
        as long as the page takes to change once on average.

    Every per-page array must have shape ``(n,)``, ``n`` the length of
    ``value``; one of another shape raises ValueError.
    """

    value: FloatArray
    cost: FloatArray
    site: IntArray
    host: IntArray
    group: IntArray
    last_fetch: FloatArray
    first_seen: FloatArray
    never_fetched: BoolArray
    ev_nc: FloatArray
    ev_tc: FloatArray
    ev_nu: FloatArray
    ev_tu: FloatArray
    nutch_interval: FloatArray
    site_cost_multiplier: FloatArray
    site_paused: BoolArray
    active: BoolArray = field(default_factory=lambda: _ALL_ACTIVE)
    checked_at: FloatArray | None = None
    known_stale: BoolArray | None = None
    ev_bins: NDArray[np.floating[Any]] | None = None
    notified: BoolArray | None = None

    def __post_init__(self) -> None:
        if self.value.ndim != 1:
            raise ValueError(f"PlanPages.value must be one-dimensional, got {self.value.shape}")
        n = self.value.shape[0]
        if self.active is _ALL_ACTIVE:  # omitted: every page
            self.active = np.ones(n, dtype=bool)
        for name in (
            "cost",
            "site",
            "host",
            "group",
            "last_fetch",
            "first_seen",
            "never_fetched",
            "ev_nc",
            "ev_tc",
            "ev_nu",
            "ev_tu",
            "nutch_interval",
            "active",
        ):
            shape = getattr(self, name).shape
            if shape != (n,):
                raise ValueError(f"PlanPages.{name} must have shape ({n},), got {shape}")
        for name in ("checked_at", "known_stale", "notified"):
            a = getattr(self, name)
            if a is not None and a.shape != (n,):
                raise ValueError(f"PlanPages.{name} must have shape ({n},), got {a.shape}")
        if self.ev_bins is not None and self.ev_bins.shape != (n, BIN_COLUMNS):
            raise ValueError(
                f"PlanPages.ev_bins must have shape ({n}, {BIN_COLUMNS}), got {self.ev_bins.shape}"
            )
        if self.site_cost_multiplier.shape != self.site_paused.shape:
            raise ValueError("site_cost_multiplier and site_paused must have one entry per site")

    def __len__(self) -> int:
        return int(self.value.shape[0])

    @classmethod
    def new(
        cls,
        n: int,
        *,
        now: float = 0.0,
        value: Any = 1.0,
        cost: Any = 1.0,
        site: Any = 0,
        host: Any = None,
        group: Any = None,
        n_sites: int | None = None,
    ) -> PlanPages:
        """State for ``n`` newly discovered pages (never fetched, no evidence).

        >>> s = PlanPages.new(3, now=1.7e9)
        >>> len(s), bool(s.never_fetched.all())
        (3, True)
        """
        site_a = np.broadcast_to(np.asarray(site, dtype=np.int64), (n,)).copy()
        ns = int(n_sites if n_sites is not None else (int(site_a.max(initial=-1)) + 1))
        ns = max(ns, 1)
        return cls(
            value=np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy(),
            cost=np.broadcast_to(np.asarray(cost, dtype=np.float64), (n,)).copy(),
            site=site_a,
            host=site_a.copy() if host is None else np.asarray(host, dtype=np.int64),
            group=site_a.copy() if group is None else np.asarray(group, dtype=np.int64),
            last_fetch=np.full(n, float(now)),
            first_seen=np.full(n, float(now)),
            never_fetched=np.ones(n, dtype=bool),
            ev_nc=np.zeros(n),
            ev_tc=np.zeros(n),
            ev_nu=np.zeros(n),
            ev_tu=np.zeros(n),
            nutch_interval=np.full(n, NUTCH_INITIAL_INTERVAL_S),
            site_cost_multiplier=np.ones(ns),
            site_paused=np.zeros(ns, dtype=bool),
            active=np.ones(n, dtype=bool),
        )


@dataclass(frozen=True)
class PlannerConfig:
    """Settings of the planner.

    Attributes
    ----------
    cycle_hours : float
        Length of a cycle, hours; the daily budget is the cycle's budget ×
        ``24 / cycle_hours``.
    discovery_share, reestimate_share, verify_share : float
        Fractions of each cycle's budget reserved for new URLs, for pages not
        fetched for ``reestimate_after_days``, and for a uniform random sample.
        What a reserve does not use goes to the score pool.
    discover_first : bool
        Never-fetched pages may take the whole budget but the verify and
        reestimate reserves, before any revisit (``discovery_share`` is then
        only the floor): a page never fetched is stale for certain and its
        first fetch gains more than a revisit of a page already held. Without
        it, a cold start of 350 pages at 1.7 fetches per page per day had
        fetched 89 of them after two days while revisiting some 27 times.
        False keeps discovery to its share (what the score pool leaves over
        goes to more new pages).
    reestimate_after_days : float
        A page becomes a re-estimation candidate after this many days without
        a fetch.
    max_per_host : int or None
        At most this many fetches per host per cycle (None: no cap).
    half_life_days : float
        Evidence half-life for the estimator, days.
    change_hazard_per_day : float
        Chance per page-day that a page's change rate jumps (a change
        point), ≥ 0; default one jump per page every two years. At each
        re-allocation a page's evidence is weighed by ``e^(−h t)`` beside the
        half-life's decay, ``t`` days after its last fetch
        (:func:`recrawl.estimate.rates.evidence_weight`): the chance its rate
        is still the one its evidence describes. A page whose evidence says
        "too fast to keep fresh" (few or no visits) thus drifts back toward
        its group's rate and gets visits again, which re-learn it if its rate
        fell; one still fast is confirmed by the visit and left again. 0
        turns it off.
    change_points : bool
        Where this config folds revisits itself (the replay): keep each page's
        change-point test (:func:`recrawl.estimate.rates.change_point_step`)
        and re-learn a page from a jump of its rate on. The store's fold
        always keeps it.
    greedy_interval_days : float or None
        The ``interval_days`` of the seed's priority for ``greedy``; None uses
        the mean revisit interval the budget affords.
    learning_revisits, learning_boost : float
        ``recrawl`` only. A page that joins a running crawl is visited at
        least ``learning_boost`` times as often as the average page until its
        evidence amounts to ``learning_revisits`` revisits (``ev_nc + ev_nu``)
        or its first fetch was as long ago as that takes at that rate (a URL
        that waited in the discovery queue joins at its first fetch). Its rate
        is mostly its group's guess until then, and a page joining a running
        crawl often differs from its group (the guess can even say "too fast
        to keep fresh": no revisit at all). This applies only while such
        pages are a minority of the live pages. ``learning_boost = 0`` turns
        it off.
    probe_days, probe_window_days : float
    probe_revisits : int
        ``recrawl`` only. A page that joins a running crawl (first seen less
        than ``probe_window_days`` ago) and whose every revisit so far found
        a change, with fewer than ``probe_revisits`` of them (a page fetched
        once has none), is revisited ``probe_days`` after its last fetch,
        where the allocation (after the learning floor) would leave it at
        least :data:`PROBE_GAP` times longer; a close revisit that finds no change, or ``probe_revisits``
        that find one, end it. A new document is often edited soon after it
        appears and then left alone: a revisit weeks later that finds a
        change cannot tell that from a page that changes every hour, and
        leaves the edit unseen for weeks; one a few days later can, for one
        or two fetches. As with the learning floor, this applies only while
        such pages are a minority of the live pages. The counts are of
        remembered evidence: with a ``half_life_days`` of a few weeks or
        less, a page can be probed more often within its window.
        ``probe_days = 0`` or ``probe_revisits = 0`` turns it off.
    """

    cycle_hours: float = 1.0
    discovery_share: float = 0.05
    discover_first: bool = True
    reestimate_share: float = 0.02
    verify_share: float = 0.01
    reestimate_after_days: float = 180.0
    max_per_host: int | None = None
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    change_hazard_per_day: float = DEFAULT_CHANGE_HAZARD_PER_DAY
    change_points: bool = True
    greedy_interval_days: float | None = None
    learning_revisits: float = 3.0
    learning_boost: float = 2.0
    probe_days: float = 5.0
    probe_revisits: int = 2
    probe_window_days: float = 30.0

    def __post_init__(self) -> None:
        # ``not (x >= 0)`` rather than ``x < 0``: NaN fails every comparison
        shares = (self.discovery_share, self.reestimate_share, self.verify_share)
        if not all(0 <= s <= 1 for s in shares) or not sum(shares) <= 1:
            raise ValueError(
                f"reserve shares must be numbers ≥ 0 that sum to at most 1, got {shares}"
            )
        if not (0 < self.cycle_hours < math.inf):
            raise ValueError(f"cycle_hours must be positive and finite, got {self.cycle_hours}")
        if not self.reestimate_after_days >= 0:
            raise ValueError(
                f"reestimate_after_days must be ≥ 0 (inf: never), got {self.reestimate_after_days}"
            )
        cap = self.max_per_host
        if cap is not None and (
            isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1
        ):
            raise ValueError(f"max_per_host must be None or a whole number ≥ 1, got {cap!r}")
        if not self.half_life_days > 0:
            raise ValueError(
                f"half_life_days must be positive (inf: no decay), got {self.half_life_days}"
            )
        if not (0 <= self.change_hazard_per_day < math.inf):
            raise ValueError(
                f"change_hazard_per_day must be finite and ≥ 0, got {self.change_hazard_per_day}"
            )
        gi = self.greedy_interval_days
        if gi is not None and not (0 < gi < math.inf):
            raise ValueError(f"greedy_interval_days must be None or positive and finite, got {gi}")
        if not (0 <= self.learning_revisits < math.inf and 0 <= self.learning_boost < math.inf):
            raise ValueError("learning_revisits and learning_boost must be finite and ≥ 0")
        if not (0 <= self.probe_days < math.inf and self.probe_window_days >= 0):
            raise ValueError("probe_days must be finite and ≥ 0, probe_window_days ≥ 0")
        if not (0 <= self.probe_revisits < math.inf) or self.probe_revisits != int(
            self.probe_revisits
        ):
            raise ValueError("probe_revisits must be a whole number ≥ 0")

    def score_pool_share(self, policy: str = "recrawl") -> float:
        """The share of a budget the score pool gets under ``policy``, what
        :func:`reallocate` allocates: for the model-driven policies (``recrawl``,
        ``greedy``) what the verify and re-estimate reserves leave, for the
        baselines the whole budget. Discovery is not subtracted: it spends only
        while pages wait for a first fetch, and gives back what it leaves."""
        if policy_rule(policy).reserves:
            return 1.0 - (self.verify_share + self.reestimate_share)
        return 1.0


@dataclass(frozen=True)
class Model:
    """Estimated rates and the allocation they imply (see :func:`reallocate`).

    Attributes
    ----------
    rate_per_day : ndarray
        Estimated change rate of each page, changes per day.
    rate_sd_per_day : ndarray
        Its uncertainty (posterior standard deviation), changes per day.
    visits_per_day : ndarray
        Target visit frequency of each page, visits per day (0: none).
    budget_per_day : float
        The daily budget the allocation spends, billing units.
    objective : str
        ``"freshness"`` or ``"events"``.
    policy : str
        The policy whose targets ``visits_per_day`` holds.
    notified : ndarray of bool, optional
        The pages allocated as under complete observation
        (:attr:`PlanPages.notified`): their ``visits_per_day`` is the fetches
        their announced changes cost, ``p λ``; None when there are none.
    follow_probability : ndarray, optional
        For those pages, the probability ``p`` an announced change is fetched.
    """

    rate_per_day: FloatArray
    rate_sd_per_day: FloatArray
    visits_per_day: FloatArray
    budget_per_day: float
    objective: str
    policy: str
    notified: BoolArray | None = None
    follow_probability: FloatArray | None = None
    # greedy: per-page factor of the last (interval, value, cost) asked, float32
    _greedy: list[Any] = field(default_factory=list, compare=False, repr=False)

    @cached_property
    def neg_rate32(self) -> NDArray[np.float32]:
        """``−rate_per_day`` per second, as float32 (computed once)."""
        return (self.rate_per_day * (-1.0 / DAY_S)).astype(np.float32)

    def greedy_factor(
        self, interval_days: float, value: FloatArray, cost: FloatArray, objective: str
    ) -> NDArray[np.float32]:
        """``value × (1 − e^(−λ·I))/λ ÷ cost`` per page (``value ÷ cost`` for events).

        The part of the seed's score that does not change from cycle to cycle:
        computed once per model, interval and cost array (kept while the same
        arrays are passed: do not modify them in place).
        """
        c = self._greedy
        if c and c[0] == (interval_days, objective) and c[1] is value and c[2] is cost:
            got: NDArray[np.float32] = c[3]
            return got
        if objective == "freshness":
            # float64 and expm1: in float32, 1 − e^(−λI) rounds to 0 for a slow
            # page (λI below about 3e-8) and the page would never be chosen
            lam = self.rate_per_day
            after = lam * -interval_days
            np.expm1(after, out=after)
            np.negative(after, out=after)
            with np.errstate(divide="ignore", invalid="ignore"):
                after /= lam  # fresh days after the visit
            after[lam == 0] = interval_days  # λ → 0: the whole interval
            after *= value
            after /= cost
            f = after.astype(np.float32)
        else:
            f = (value / cost).astype(np.float32)
        c[:] = [(interval_days, objective), value, cost, f]
        return f


@dataclass(frozen=True)
class Plan:
    """One cycle's fetch tasks, as parallel arrays.

    Attributes
    ----------
    index : ndarray of int
        Page numbers to fetch, in priority order within each reason.
    reason : ndarray of int8
        Why each page was chosen: an index into :data:`REASONS`.
    expected_gain : ndarray of float
        Expected fresh days bought (``freshness``) or probability of finding
        a change (``events``), times the page's value.
    cost : ndarray of float
        Effective cost of each fetch (cost × site multiplier), billing units.
    priority : ndarray of float
        The policy's score of each page (larger first; reserve picks keep
        their policy score too).
    """

    index: IntArray
    reason: NDArray[np.int8]
    expected_gain: FloatArray
    cost: FloatArray
    priority: FloatArray

    def __len__(self) -> int:
        return int(self.index.shape[0])

    @property
    def spent(self) -> float:
        """Total cost of the plan, billing units."""
        return float(self.cost.sum())

    def to_tasks(self, page_ids: Any = None) -> list[dict[str, Any]]:
        """The plan as a list of task dicts.

        Each has ``page`` (``page_ids[i]`` if given, else the page number),
        ``reason``, ``expected_gain``, ``cost`` and ``priority``.
        """
        ids = self.index.tolist() if page_ids is None else [page_ids[i] for i in self.index]
        return [
            {
                "page": pid,
                "reason": REASONS[r],
                "expected_gain": g,
                "cost": c,
                "priority": p,
            }
            for pid, r, g, c, p in zip(
                ids,
                self.reason.tolist(),
                self.expected_gain.tolist(),
                self.cost.tolist(),
                self.priority.tolist(),
                strict=True,
            )
        ]


# -- the policies: a table of rules ------------------------------------------------------


class Allocator(Protocol):
    """How a policy turns rates into target visits: the live pages' rates
    (changes per day), values and effective costs in, visits per day out, the
    ``budget_per_day`` spent (``Σ cost × visits``) where the rule can."""

    def __call__(
        self,
        rate: FloatArray,
        value: FloatArray,
        cost: FloatArray,
        budget_per_day: float,
        objective: Objective,
    ) -> FloatArray: ...


def _optimal(
    rate: FloatArray,
    value: FloatArray,
    cost: FloatArray,
    budget_per_day: float,
    objective: Objective,
) -> FloatArray:
    """The optimal allocation (:func:`~recrawl.plan.freshness.optimal_allocation`)."""
    alloc = optimal_allocation(rate, budget_per_day, weight=value, cost=cost, objective=objective)
    return alloc.visits_per_day


def _proportional(
    rate: FloatArray,
    value: FloatArray,
    cost: FloatArray,
    budget_per_day: float,
    objective: Objective,
) -> FloatArray:
    """Visits proportional to the rate (pages without a value: none)."""
    share = rate * (value > 0)
    total = float(np.dot(share, cost))
    if total <= 0:
        return np.zeros(rate.shape[0])
    return share * (budget_per_day / total)


def harmonic_allocation(
    rate: FloatArray,
    value: FloatArray,
    cost: FloatArray,
    budget_per_day: float,
    objective: Objective,
) -> FloatArray:
    """Kolobov et al.'s allocation for harmonic staleness (NeurIPS 2019, LambdaCrawl).

    Page *i* with change rate μ, value w and cost c is visited at
    ρ = (−μ + √(μ² + 4wμ/(λc)))/2 per day, with the multiplier λ chosen so that
    ``Σ c ρ`` spends the budget. The rule never starves a page (ρ > 0 whenever
    μ, w > 0) and caps a fast page near ``w/(λc)``, so an over-estimated or
    bursty rate costs little. ``objective`` is ignored: the rule has its own.

    >>> v = harmonic_allocation(np.array([0.1, 1.0, 10.0]), np.ones(3), np.ones(3), 3.0, "freshness")
    >>> bool(abs(v.sum() - 3.0) < 1e-9), bool(v[0] < v[1] < v[2])
    (True, True)
    """
    n = rate.shape[0]
    wm = np.where((rate > 0) & (value > 0) & (cost > 0), value * rate, 0.0)
    if not wm.any() or budget_per_day <= 0:
        return np.zeros(n)
    c = np.where(cost > 0, cost, 1.0)

    def visits(log_lam: float) -> FloatArray:
        k = 4.0 * wm / (math.exp(log_lam) * c)
        # 2k/(μ + √(μ² + k)) / 2: the root without cancellation for fast pages
        return k / (2.0 * (rate + np.sqrt(rate * rate + k)))

    def spend(log_lam: float) -> float:
        return float(np.dot(c, visits(log_lam)))

    # spend falls as λ grows; bracket the root in log λ, then bisect
    lo = hi = math.log(float(wm.sum()) / budget_per_day)
    while spend(lo) < budget_per_day:
        lo -= 4.0
    while spend(hi) > budget_per_day:
        hi += 4.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if spend(mid) > budget_per_day:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    got = visits(hi)  # the side that does not overspend
    return got * min(1.0, budget_per_day / max(float(np.dot(c, got)), 1e-300))


class Ranking:
    """How a policy ranks the pages in a cycle, chunk by chunk, in place.

    ``score(q, sl, now, last)`` writes the priority of pages ``sl`` into ``q``
    (positive: a candidate, larger first) from ``last``, when each was last
    known unchanged; ``stale(q, sl, st)`` lifts the pages ``st`` of the chunk
    known to be stale. The base class ranks longest-unvisited first.
    """

    dtype: type[np.floating[Any]] = np.float64

    def __init__(
        self,
        pages: PlanPages,
        model: Model | None,
        interval_days: float,
        cost: FloatArray,
        objective: str,
    ) -> None:
        self.pages = pages
        self.model = model

    def score(self, q: NDArray[Any], sl: slice, now: float, last: FloatArray) -> None:
        np.subtract(now, last, out=q)
        q *= 1.0 / DAY_S
        np.maximum(q, 0.0, out=q)  # days since the page was last known unchanged
        q += 1e-9  # a page fetched this very instant is still a candidate

    def stale(self, q: NDArray[Any], sl: slice, st: BoolArray) -> None:
        q[st] += STALE_FIRST


class Overdue(Ranking):
    """Most overdue first against the allocation: ``days since × visits per day``;
    a page known stale goes ahead of every page merely due, if the allocation
    follows it at all."""

    def __init__(
        self,
        pages: PlanPages,
        model: Model | None,
        interval_days: float,
        cost: FloatArray,
        objective: str,
    ) -> None:
        if model is None:
            raise ValueError("this policy ranks by an allocation: pass a model")
        super().__init__(pages, model, interval_days, cost, objective)
        self.visits = model.visits_per_day
        self.notified = model.notified

    def score(self, q: NDArray[Any], sl: slice, now: float, last: FloatArray) -> None:
        np.subtract(now, last, out=q)
        q *= 1.0 / DAY_S
        np.maximum(q, 0.0, out=q)
        q *= self.visits[sl]
        if self.notified is not None and (nt := self.notified[sl]).any():
            # announced when it changes: no visit of its own until its source
            # has been silent for one mean change interval (q = days × p λ)
            q[nt & (q < 1.0)] = 0.0

    def stale(self, q: NDArray[Any], sl: slice, st: BoolArray) -> None:
        v = self.visits[sl]
        q[st & (v > 0)] += STALE_FIRST
        if self.notified is not None and (idle := st & self.notified[sl] & (v == 0)).any():
            # announced, but its following not paid for: fetched only with
            # budget no other page takes (a cycle's budget is not carried over)
            q[idle] = LAST_RESORT


class Greedy(Ranking):
    """The seed's ``value × P(stale) × fresh days after the visit ÷ cost``, in float32
    (the ranking needs no more than a relative precision of 1e-6)."""

    dtype = np.float32

    def __init__(
        self,
        pages: PlanPages,
        model: Model | None,
        interval_days: float,
        cost: FloatArray,
        objective: str,
    ) -> None:
        if model is None:
            raise ValueError("the greedy policy ranks by estimated rates: pass a model")
        super().__init__(pages, model, interval_days, cost, objective)
        self.factor = model.greedy_factor(interval_days, pages.value, cost, objective)
        self.lam_neg = model.neg_rate32

    def score(self, q: NDArray[Any], sl: slice, now: float, last: FloatArray) -> None:
        # the subtraction is done in float64 and rounded on the way out
        np.subtract(now, last, out=q, casting="same_kind")
        q *= self.lam_neg[sl]  # −λ × seconds since the last fetch
        # a fetch "after" now counts as now; below −20, 1 − e^q rounds to 1
        # in float32 anyway, and expm1 is faster away from its underflow range
        np.clip(q, np.float32(-20.0), np.float32(0.0), out=q)
        # expm1, not 1 − exp: exact for a slow page (1 − e^q rounds to 0
        # below |q| ≈ 3e-8 in float32), and no slower
        np.expm1(q, out=q)
        np.negative(q, out=q)  # P(stale)
        q *= self.factor[sl]  # value × fresh days after the visit ÷ cost

    def stale(self, q: NDArray[Any], sl: slice, st: BoolArray) -> None:
        q[st] = self.factor[sl][st]  # P(stale) = 1


class NutchDue(Ranking):
    """Due pages only (their Nutch interval has passed), most overdue first."""

    def score(self, q: NDArray[Any], sl: slice, now: float, last: FloatArray) -> None:
        np.subtract(now, last, out=q)
        q *= 1.0 / DAY_S
        np.maximum(q, 0.0, out=q)
        q *= DAY_S
        q /= self.pages.nutch_interval[sl]
        q[q < 1.0] = 0.0


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One row of :data:`POLICY_RULES`: what a policy does at each step of a cycle.

    Attributes
    ----------
    name : str
    summary : str
        One line, for help texts.
    estimates : bool
        The policy needs :func:`reallocate`'s estimated rates (a :class:`Model`).
    allocate : Allocator or None
        How it turns rates into target visits per day (None: no allocation).
    learns : bool
        The learning floor and close revisits raise the allocation for new pages.
    reserves : bool
        The verify and re-estimate reserves serve it (its score pool gets what
        they leave, :meth:`PlannerConfig.score_pool_share`).
    ranking : type[Ranking]
        How the score pool's pages are ranked in a cycle.
    notified : bool
        The allocation takes the pages under complete observation
        (:attr:`PlanPages.notified`) jointly with the rest
        (:func:`~recrawl.plan.notified.notified_allocation`).
    """

    name: str
    summary: str
    estimates: bool = False
    allocate: Allocator | None = None
    learns: bool = False
    reserves: bool = False
    ranking: type[Ranking] = Ranking
    notified: bool = False


POLICY_RULES: dict[str, PolicyRule] = {
    r.name: r
    for r in (
        PolicyRule(
            "recrawl", "the optimal allocation on estimated rates, most overdue first",
            estimates=True, allocate=_optimal, learns=True, reserves=True, ranking=Overdue,
            notified=True,
        ),
        PolicyRule(
            "greedy", "the seed's value × freshness gain ÷ cost, best first",
            estimates=True, reserves=True, ranking=Greedy,
        ),
        PolicyRule("uniform", "longest-unvisited first: every page at the same interval"),
        PolicyRule(
            "proportional", "visits proportional to the estimated rate, most overdue first",
            estimates=True, allocate=_proportional, ranking=Overdue,
        ),
        PolicyRule("nutch", "Apache Nutch's AdaptiveFetchSchedule", ranking=NutchDue),
        PolicyRule(
            "harmonic", "Kolobov et al.'s allocation for harmonic staleness, most overdue first",
            estimates=True, allocate=harmonic_allocation, reserves=True, ranking=Overdue,
        ),
    )
}  # fmt: skip
"""Every policy the planner knows, by name: one :class:`PolicyRule` each."""

POLICIES: tuple[str, ...] = tuple(POLICY_RULES)
"""The policies' names."""


def policy_rule(policy: str) -> PolicyRule:
    """The rule of ``policy``; a :class:`~recrawl.ConfigError` naming the choices if unknown."""
    try:
        return POLICY_RULES[policy]
    except KeyError:
        raise ConfigError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}") from None


def reallocate(
    pages: PlanPages,
    budget_per_day: float,
    now: float,
    *,
    policy: str = "recrawl",
    objective: Objective = "freshness",
    config: PlannerConfig | None = None,
    priors: GroupPriors | None = None,
    rates: ArrayLike | None = None,
) -> Model:
    """Re-estimate every page's rate and re-solve the allocation.

    Parameters
    ----------
    pages : PlanPages
        Page state.
    budget_per_day : float
        Billing units per day available to the score pool.
    now : float
        Unix seconds.
    policy : str
        ``recrawl`` solves the optimal allocation; ``proportional`` sets visits
        proportional to the rate; other policies only need the rates.
    objective : {"freshness", "events"}
        What the allocation maximises.
    config : PlannerConfig, optional
    priors : GroupPriors, optional
        Group priors; fitted on the fetched pages' evidence if omitted.
    rates : array_like, optional
        Every page's change rate, changes per day (positive, finite), taken as known instead of
        estimated from the evidence (their uncertainty is then 0, and there
        is no learning floor or close revisit, which serve the estimates):
        rates known from elsewhere, or hindsight rates in a replay, to tell
        what the estimates cost from what the allocation does.

    Returns
    -------
    Model
    """
    rule = policy_rule(policy)
    cfg = config or PlannerConfig()
    fetched = ~pages.never_fetched
    if rates is not None:
        rate = np.array(rates, dtype=np.float64)
        if rate.shape != (len(pages),) or not np.all((rate > 0) & (rate < np.inf)):
            raise ValueError("rates must hold one positive rate per page")
        sd = np.zeros(len(pages))
    else:
        rate, sd = _estimate(pages, now, cfg, fetched, priors)
    if np.all(pages.site_cost_multiplier == 1.0):
        eff_cost = pages.cost
    else:
        eff_cost = pages.cost * pages.site_cost_multiplier[pages.site]
    live = pages.active & fetched
    if np.any(pages.site_paused):
        live &= ~pages.site_paused[pages.site]
    visits = np.zeros(len(pages))
    notified: BoolArray | None = None
    follow: FloatArray | None = None
    if rule.allocate is not None and np.any(live) and budget_per_day > 0:
        every = bool(live.all())
        idx: slice | IntArray = slice(None) if every else np.flatnonzero(live)
        nt = pages.notified
        if rule.notified and nt is not None and np.any(nt[idx]):
            got, p = notified_allocation(
                rate[idx], pages.value[idx], eff_cost[idx], budget_per_day, objective, nt[idx]
            )
            notified, follow = nt & live, np.zeros(len(pages))
            follow[idx] = p
        else:
            got = rule.allocate(
                rate[idx], pages.value[idx], eff_cost[idx], budget_per_day, objective
            )
        if every:
            visits = got
        else:
            visits[idx] = got
        learning = rates is None  # known rates: no floor or close revisit to learn them
        if rule.learns and learning and cfg.learning_boost > 0 and cfg.learning_revisits > 0:
            _learning_floor(pages, live, eff_cost, visits, budget_per_day, now, cfg)
        if rule.learns and learning and cfg.probe_days > 0 and cfg.probe_revisits > 0:
            _probe_floor(pages, live, visits, now, cfg)
    return Model(rate, sd, visits, float(budget_per_day), objective, policy, notified, follow)


def _estimate(
    pages: PlanPages,
    now: float,
    cfg: PlannerConfig,
    fetched: BoolArray,
    priors: GroupPriors | None,
) -> tuple[FloatArray, FloatArray]:
    """Every page's estimated rate and its uncertainty, from evidence decayed
    and aged by the change-point hazard since each page's last fetch."""
    elapsed = np.subtract(now, pages.last_fetch, dtype=np.float64)
    elapsed *= 1.0 / DAY_S
    elapsed[~fetched] = 0.0
    if priors is None:
        priors = group_priors(pages, fetched)
    return estimate_rates(
        pages.ev_nc,
        pages.ev_tc,
        pages.ev_nu,
        pages.ev_tu,
        pages.group,
        priors=priors,
        elapsed_days=elapsed,
        half_life_days=cfg.half_life_days,
        bins=pages.ev_bins,
        hazard_per_day=cfg.change_hazard_per_day,
    )


def group_priors(pages: PlanPages, fetched: BoolArray | None = None) -> GroupPriors:
    """The rate priors the planner fits: per group, on the evidence of the
    pages fetched so far (``fetched``, default ``~pages.never_fetched``)."""
    return fit_group_priors(
        pages.ev_nc,
        pages.ev_tc,
        pages.ev_nu,
        pages.ev_tu,
        pages.group,
        mask=~pages.never_fetched if fetched is None else fetched,
        n_groups=int(pages.group.max(initial=-1)) + 1,
        bins=pages.ev_bins,
    )


def _learning_floor(
    pages: PlanPages,
    live: BoolArray,
    eff_cost: FloatArray,
    visits: FloatArray,
    budget_per_day: float,
    now: float,
    cfg: PlannerConfig,
) -> None:
    """Raise the visits of pages still being learned to the learning floor, in place.

    The floor is ``learning_boost`` × the average page's visits per day
    (budget ÷ the live pages' total cost). A page is still being learned when
    it is live, has a value, has less than ``learning_revisits`` revisits of
    evidence (``ev_nc + ev_nu``) and was first fetched less than
    ``learning_revisits`` floor intervals ago (long enough to reach that
    evidence at the floor), as far as its evidence tells (:func:`_new_pages`):
    a URL that waited weeks in the discovery queue joins the crawl at its
    first fetch, not at its registration. The floor applies only while such
    pages are a minority of the live pages.
    """
    total_cost = float(np.sum(eff_cost, where=live))
    if total_cost <= 0:
        return
    floor = cfg.learning_boost * budget_per_day / total_cost
    since = now - cfg.learning_revisits / floor * DAY_S

    def weak(sl: slice, out: BoolArray) -> None:
        np.less(pages.ev_nc[sl] + pages.ev_nu[sl], cfg.learning_revisits, out=out)
        out &= joined_at(pages, sl, cfg.half_life_days) > since  # counted from the first fetch

    learning = _new_pages(pages, live, weak)
    if learning is not None:
        np.maximum(visits, floor, out=visits, where=learning)


def _probe_floor(
    pages: PlanPages, live: BoolArray, visits: FloatArray, now: float, cfg: PlannerConfig
) -> None:
    """Raise the visits of pages due a close revisit to ``1 / probe_days``, in place.

    Such a page is new to a running crawl (:func:`_new_pages`, first seen
    less than ``probe_window_days`` ago), has no remembered revisit without
    a change (``ev_nu < ½``), fewer than ``probe_revisits`` changed ones, and
    an interval (after the learning floor) at least :data:`PROBE_GAP` ×
    ``probe_days``.
    """
    floor = 1.0 / cfg.probe_days
    since = now - cfg.probe_window_days * DAY_S

    def changed_so_far(sl: slice, out: BoolArray) -> None:
        np.less(pages.ev_nu[sl], 0.5, out=out)
        out &= pages.ev_nc[sl] < cfg.probe_revisits - 0.5
        out &= pages.first_seen[sl] > since

    probe = _new_pages(pages, live, changed_so_far)
    if probe is not None:
        probe &= visits < floor / PROBE_GAP
        np.maximum(visits, floor, out=visits, where=probe)


def _new_pages(
    pages: PlanPages, live: BoolArray, test: Callable[[slice, BoolArray], None]
) -> BoolArray | None:
    """Mask of the live pages with a value for which ``test(slice, out)`` (which
    says whether each page is new enough) sets ``out`` True; None when they are
    not a minority of the live pages (a crawl that has just started: every page
    is new, and the allocation's own guesses stand). Built in chunks, so ten
    million pages need no full-size float temporary.
    """
    mask = np.empty(len(pages), dtype=bool)

    def work(start: int) -> None:
        sl = slice(start, start + _PRIORITY_CHUNK)
        out = mask[sl]
        test(sl, out)
        out &= live[sl]
        out &= pages.value[sl] > 0

    _run_chunks(work, len(pages))
    if 2 * np.count_nonzero(mask) > np.count_nonzero(live):
        return None
    return mask


def joined_at(pages: PlanPages, sl: slice, half_life_days: float) -> FloatArray:
    """When pages ``sl`` joined the crawl, unix seconds: the later of ``first_seen``
    and the first fetch as the evidence tells it, never later than that fetch.

    The evidence spans ``T`` days before the last fetch, and holds the decayed
    sum ``S = ev_tc + ev_tu`` of those days. Each day there weighs at least
    ``2^(−age/H)``, so ``S ≥ (H/ln 2)(1 − 2^(−T/H))`` and the ``T`` solving the
    equality is at least the true span: a page never looks newer than it is.
    A sum beyond the decay's memory (``S ≥ H/ln 2``) is taken as long ago.
    """
    span = pages.ev_tc[sl] + pages.ev_tu[sl]
    if math.isfinite(half_life_days):
        with np.errstate(divide="ignore", invalid="ignore"):
            left = 1.0 - span * (math.log(2.0) / half_life_days)
            span = np.where(left > 0, -half_life_days * np.log2(left), np.inf)
    joined: FloatArray = np.maximum(pages.first_seen[sl], pages.last_fetch[sl] - span * DAY_S)
    return joined


def _rank_within(keys: IntArray) -> IntArray:
    """Rank of each element among the earlier elements with the same key."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    counts = np.diff(np.r_[start, sk.shape[0]])
    first = np.repeat(start, counts)
    rank = np.empty_like(order)
    rank[order] = np.arange(sk.shape[0]) - first
    return rank


class _Selector:
    """Spends budget over ordered candidates, honouring the per-host cap."""

    def __init__(
        self,
        pages: PlanPages,
        eff_cost: FloatArray,
        cap: int | None,
        rng: np.random.Generator,
        limit: float = math.inf,
    ) -> None:
        self.pages = pages
        self.eff_cost = eff_cost
        self.cap = cap
        self.rng = rng
        self.limit = limit  # the cycle's whole budget: a round-up never passes it
        self.used = 0.0
        self.taken = np.zeros(len(pages), dtype=bool)
        self.host_used: dict[int, int] = {}

    def take(
        self, ordered: IntArray, budget: float, *, round_up: bool = False
    ) -> tuple[float, IntArray]:
        """Take candidates in order while they fit; return the budget used and them."""
        none = np.zeros(0, dtype=np.int64)
        if budget <= 0 or ordered.size == 0:
            return 0.0, none
        ordered = ordered[~self.taken[ordered]]
        if self.cap is not None and ordered.size:
            hosts = self.pages.host[ordered]
            rank = _rank_within(hosts)
            if self.host_used:
                rank = rank + np.array([self.host_used.get(int(h), 0) for h in hosts])
            ordered = ordered[rank < self.cap]
        if ordered.size == 0:
            return 0.0, none
        cum = np.cumsum(self.eff_cost[ordered])
        k = int(np.searchsorted(cum, budget * (1 + 1e-9) + 1e-12, side="right"))
        used = float(cum[k - 1]) if k else 0.0
        if round_up and k < ordered.size:
            # a reserve too small for the next fetch pays for it with that probability
            nxt = float(self.eff_cost[ordered[k]])
            fits = self.used + used + nxt <= self.limit * (1 + 1e-9) + 1e-12
            if fits and self.rng.random() < (budget - used) / nxt:
                k += 1
                used += nxt
        chosen = ordered[:k].astype(np.int64)
        self.taken[chosen] = True
        self.used += used
        if self.cap is not None and chosen.size:
            hs, cnt = np.unique(self.pages.host[chosen], return_counts=True)
            for h, c in zip(hs.tolist(), cnt.tolist(), strict=True):
                self.host_used[h] = self.host_used.get(h, 0) + c
        return used, chosen


_PRIORITY_CHUNK = 1 << 16

STALE_FIRST = 1e9
"""Added to the priority of a page known to be stale (:attr:`PlanPages.known_stale`)."""

LAST_RESORT = 1e-12
"""The priority of a notified page known stale whose following the allocation
does not pay for (:mod:`recrawl.plan.notified`): behind every other candidate."""


def _best_first(priority: NDArray[np.floating[Any]], idx: IntArray) -> IntArray:
    """``idx`` (ascending) ordered by decreasing priority, ties kept in order.

    For float32 priorities (all > 0) one sort of 64-bit keys replaces a stable
    argsort, several times faster: the bits of a positive float32 order like
    the float, so ``(~bits << 32) | index`` sorts into the same order.
    """
    if priority.dtype == np.float32 and priority.shape[0] < (1 << 32):
        key = priority[idx].view(np.uint32).astype(np.uint64)
        np.subtract(np.uint64(0xFFFFFFFF), key, out=key)
        key <<= np.uint64(32)
        key |= idx.astype(np.uint64)
        key.sort()
        key &= np.uint64(0xFFFFFFFF)
        return key.astype(np.int64)
    return idx[np.argsort(-priority[idx], kind="stable")]


def top_pages(priority: NDArray[np.floating[Any]], k: int, n_pos: int | None = None) -> IntArray:
    """Pages of positive priority, best first: at least the top ``k`` of them.

    ``n_pos`` is the number of positive priorities, if known. On large arrays
    a threshold read off a regular sample of the priorities replaces a full
    partition; the result can then hold a few more than ``k``.
    """
    n = priority.shape[0]
    if n > 1_000_000:
        if n_pos is None:
            n_pos = int(np.count_nonzero(priority > 0))
        if 4 * k < n_pos:
            sample = priority[:: max(1, n // 200_000)]
            sample = sample[sample > 0]
            # the sample's quantile at the top k's share p, moved down by four
            # standard errors (√(p(1−p)/m)): at least k pages above it but for
            # a chance of about 3e-5 (then the exact path below)
            m = max(sample.size, 1)
            p = min(1.0, k / n_pos)
            q = 1.0 - min(1.0, p + 4.0 * (p * (1.0 - p) / m) ** 0.5 + 2.0 / m)
            thr = float(np.quantile(sample, q)) if sample.size else 0.0
            sel = np.flatnonzero(priority >= max(thr, np.finfo(float).tiny))
            if sel.size >= k:
                return _best_first(priority, sel)
    cand = np.flatnonzero(priority > 0)
    if cand.size > k:
        cand = cand[np.argpartition(-priority[cand], k - 1)[:k]]
        return cand[np.argsort(-priority[cand], kind="stable")]
    return _best_first(priority, cand)


def _run_chunks(work: Any, n: int) -> None:
    """``work(start)`` for every chunk start of ``range(n)``, on every core.

    numpy releases the GIL inside ufuncs, so chunks run in parallel.
    """
    starts = range(0, n, _PRIORITY_CHUNK)
    if n >= 4 * _PRIORITY_CHUNK and (os.cpu_count() or 1) > 1:
        with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
            list(pool.map(work, starts))
    else:
        for start in starts:
            work(start)


@dataclass
class _Scan:
    """Which pages a cycle may fetch, and the sums it needs, from one pass.

    Fetchable: active, positive cost, site not paused; ``known``: fetchable
    and fetched before; ``new_idx``: fetchable and never fetched.
    """

    known: BoolArray
    new_idx: IntArray
    n_known: int
    min_cost: float
    fetchable_cost: float


def _scan(pages: PlanPages, eff_cost: FloatArray) -> _Scan:
    """:class:`_Scan` of the pages, in cache-sized chunks on every core."""
    n = len(pages)
    known = np.empty(n, dtype=bool)
    paused = pages.site_paused if np.any(pages.site_paused) else None
    parts: dict[int, tuple[IntArray, int, float, float]] = {}

    def work(start: int) -> None:
        sl = slice(start, min(n, start + _PRIORITY_CHUNK))
        c = eff_cost[sl]
        lo = float(c.min(initial=np.inf))
        f = pages.active[sl]
        if not lo > 0.0 or paused is not None:  # (``not >``: NaN costs too)
            f = f & (c > 0.0)
            if paused is not None:
                f &= ~paused[pages.site[sl]]
        kn = np.greater(f, pages.never_fetched[sl], out=known[sl])  # f & ~never
        n_f, n_kn = int(np.count_nonzero(f)), int(np.count_nonzero(kn))
        if n_kn < n_f:
            new = np.flatnonzero(f ^ kn)  # f & never
            new += start
        else:
            new = np.zeros(0, dtype=np.int64)
        total = float(c.sum()) if n_f == c.shape[0] else float(np.sum(c, where=f))
        parts[start] = (new, n_kn, lo, total)

    _run_chunks(work, n)
    got = [parts[s] for s in sorted(parts)]
    new_idx = np.concatenate([g[0] for g in got]) if got else np.zeros(0, dtype=np.int64)
    return _Scan(
        known,
        new_idx.astype(np.int64, copy=False),
        sum(g[1] for g in got),
        min((g[2] for g in got), default=float("inf")),
        sum(g[3] for g in got),
    )


def _priorities(
    pages: PlanPages,
    model: Model | None,
    now: float,
    policy: str,
    objective: str,
    interval: float,
    eff_cost: FloatArray,
    known: BoolArray,
) -> tuple[NDArray[np.floating[Any]], int]:
    """Each page's policy priority (≤ 0: not a candidate), in cache-sized chunks,
    by the policy's :class:`Ranking`. Also returns how many priorities are positive."""
    n = len(pages)
    rank = policy_rule(policy).ranking(pages, model, interval, eff_cost, objective)
    out: NDArray[np.floating[Any]] = np.empty(n, dtype=rank.dtype)
    positive: dict[int, int] = {}
    checked, stale = pages.checked_at, pages.known_stale

    def work(start: int) -> None:
        sl = slice(start, min(n, start + _PRIORITY_CHUNK))
        q = out[sl]  # computed in place, no temporaries
        # the page was last known unchanged at its last fetch, or later when a
        # trusted signal vouches for it (fmax: NaN is no signal)
        last = (
            pages.last_fetch[sl] if checked is None else np.fmax(pages.last_fetch[sl], checked[sl])
        )
        rank.score(q, sl, now, last)
        if stale is not None and (st := stale[sl]).any():
            rank.stale(q, sl, st)
        kn = known[sl]
        if not kn.all():
            q[~kn] = 0.0
        positive[start] = int(np.count_nonzero(q > 0))

    _run_chunks(work, n)
    return out, sum(positive.values())


_NO_PAGES: Final[IntArray] = np.zeros(0, dtype=np.int64)


def _take(a: FloatArray, index: IntArray) -> FloatArray:
    """``a[index]``; a read-only view of one number when ``a`` is one (every
    page's cost the same: no array a task)."""
    if a.ndim == 1 and a.strides == (0,) and len(a):
        out: FloatArray = np.broadcast_to(a[:1].copy()[0], index.shape)
        return out
    return a[index]


def plan_cycle(
    pages: PlanPages,
    budget: float,
    now: float,
    *,
    policy: str = "recrawl",
    objective: Objective = "freshness",
    config: PlannerConfig | None = None,
    rng: np.random.Generator | None = None,
    model: Model | None = None,
) -> Plan:
    """Choose this cycle's fetches.

    Parameters
    ----------
    pages : PlanPages
        State of every page.
    budget : float
        The cycle's budget, billing units.
    now : float
        Unix seconds.
    policy : {"recrawl", "greedy", "uniform", "proportional", "nutch"}
        How the score pool is spent (see module docstring).
    objective : {"freshness", "events"}
        What a visit is worth.
    config : PlannerConfig, optional
        Reserve shares, host cap, cycle length.
    rng : numpy.random.Generator, optional
        Source of the verification sample and of reserve rounding.
    model : Model, optional
        Rates and targets from :func:`reallocate`; computed here when omitted
        (pass one to re-use it across cycles: selection alone is much faster),
        from the daily budget × :meth:`PlannerConfig.score_pool_share`: pass one
        solved for that budget too, or the allocation does not match the plan.

    Returns
    -------
    Plan

    Examples
    --------
    >>> s = PlanPages.new(4, now=0.0)
    >>> plan = plan_cycle(s, budget=2.0, now=3600.0)
    >>> [t["reason"] for t in plan.to_tasks()]
    ['discovery', 'discovery']
    """
    rule = policy_rule(policy)
    cfg = config or PlannerConfig()
    gen = rng if rng is not None else np.random.default_rng()
    n = len(pages)
    if np.all(pages.site_cost_multiplier == 1.0):
        eff_cost = pages.cost
    else:
        eff_cost = pages.cost * pages.site_cost_multiplier[pages.site]
    scan = _scan(pages, eff_cost)
    known, n_known = scan.known, scan.n_known
    sel = _Selector(pages, eff_cost, cfg.max_per_host, gen, limit=budget)
    model_driven = rule.reserves
    cycles_per_day = 24.0 / cfg.cycle_hours
    min_cost = max(scan.min_cost, 1e-300)

    # 1. discovery: never-fetched pages, oldest first
    new_idx, fetchable_cost = scan.new_idx, scan.fetchable_cost
    del scan  # (its copy of new_idx goes once sorted: 8 bytes a new page)
    disc_used = 0.0
    disc_chosen = np.zeros(0, dtype=np.int64)
    if new_idx.size:
        new_idx = new_idx[np.argsort(pages.first_seen[new_idx], kind="stable")]
        share = cfg.discovery_share
        if cfg.discover_first:
            kept = (cfg.verify_share + cfg.reestimate_share) if model_driven and n_known else 0.0
            share = max(share, 1.0 - kept)
        disc_used, disc_chosen = sel.take(new_idx, budget * share, round_up=True)

    if model is None and rule.estimates:
        model = reallocate(
            pages,
            budget * cycles_per_day * cfg.score_pool_share(policy),
            now,
            policy=policy,
            objective=objective,
            config=cfg,
        )
    interval = cfg.greedy_interval_days
    if interval is None:
        daily = budget * cycles_per_day
        total = fetchable_cost
        interval = total / daily if daily > 0 else 1.0
    priority, n_cand = _priorities(pages, model, now, policy, objective, interval, eff_cost, known)
    parts: list[tuple[IntArray, int]] = [(disc_chosen, DISCOVERY)]
    used = disc_used

    if model_driven and n_known:
        # 2. verification: a uniform random sample of the known pages
        vb = budget * cfg.verify_share
        if vb > 0:
            k = int(min(n_known, vb / min_cost + 1))
            if k < n_known // 4:
                draw = gen.integers(0, n, size=8 * k + 16)
                draw = draw[known[draw]]
                _, first = np.unique(draw, return_index=True)
                sample = draw[np.sort(first)][:k]
            else:
                sample = gen.permutation(np.flatnonzero(known))[:k]
            got, chosen = sel.take(sample.astype(np.int64), vb, round_up=True)
            used += got
            parts.append((chosen, VERIFY))
        # 3. re-estimation: pages unvisited for a long time, oldest first
        rb = budget * cfg.reestimate_share
        if rb > 0:
            cutoff = now - cfg.reestimate_after_days * DAY_S
            stale = np.flatnonzero(known & (pages.last_fetch <= cutoff))
            if stale.size:
                stale = stale[np.argsort(pages.last_fetch[stale], kind="stable")]
                got, chosen = sel.take(stale, rb, round_up=True)
                used += got
                parts.append((chosen, REESTIMATE))

    # 4. the score pool: everything left, best priority first (the reserves'
    # picks may be among the best: as many more candidates as they took)
    left = budget - used
    if left > 0:
        k = int(min(n, left / min_cost + 1 + sum(p.size for p, _ in parts)))
        while True:
            kk = k if cfg.max_per_host is None else min(n_cand, 4 * k)
            ordered = top_pages(priority, kk, n_cand)
            got, chosen = sel.take(ordered, left)
            done = ordered.size < kk or kk >= n_cand
            if done or got >= left - min_cost or cfg.max_per_host is None:
                break
            # the host cap filtered too many: undo and retry with more candidates
            sel.taken[chosen] = False
            sel.used -= got
            for h, c in zip(*np.unique(pages.host[chosen], return_counts=True), strict=True):
                sel.host_used[int(h)] -= int(c)
            k = 4 * kk
        parts.append((chosen, SCORE))

    # 5. whatever the score pool could not use goes to more new pages
    left = budget - used - sum(float(eff_cost[p].sum()) for p, r in parts if r == SCORE)
    if new_idx.size and left > 0:
        parts.append((sel.take(new_idx, left)[1], DISCOVERY))

    index = np.concatenate([p for p, _ in parts]).astype(np.int64, copy=False)
    reason = np.concatenate([np.full(p.size, r, dtype=np.int8) for p, r in parts])
    chosen_priority = priority[index].astype(np.float64, copy=False)
    # what the gains are not computed from goes before them (a plan's peak is
    # here): the priorities, the candidates and the picks, 8 bytes a page each
    parts.clear()
    del priority, sel, known, new_idx
    disc_chosen = chosen = ordered = _NO_PAGES
    gain = _expected_gain(pages, index, now, model, objective, rule.allocate is not None, interval)
    return Plan(
        index=index,
        reason=reason,
        expected_gain=gain,
        cost=_take(eff_cost, index),
        priority=chosen_priority,
    )


_GAIN_CHUNK: Final = 65_536
"""Visits :func:`_expected_gain` computes at once: its dozen temporaries, about
100 bytes a visit, then take a few MB however large the plan."""


def _expected_gain(
    pages: PlanPages,
    index: IntArray,
    now: float,
    model: Model | None,
    objective: Objective,
    allocated: bool,
    interval: float,
) -> FloatArray:
    """Expected gain of each chosen visit (pages ``index``), times the page's
    value; ``allocated``: the policy's model sets each page's visits a day
    (the horizon of its freshness gain), else one ``interval`` (days) for all."""
    out = np.empty(index.size)
    for a in range(0, index.size, _GAIN_CHUNK):
        ix = index[a : a + _GAIN_CHUNK]
        # a fetch reported after ``now`` (a clock ahead, a past ``--at``) is as recent as can be
        last = pages.last_fetch[ix]
        if pages.checked_at is not None:
            last = np.fmax(last, pages.checked_at[ix])
        since = np.maximum(now - last, 0.0) / DAY_S
        unknown = pages.never_fetched[ix]
        if pages.known_stale is not None:
            unknown = unknown | pages.known_stale[ix]  # stale for certain: P(stale) = 1
        ds = np.where(unknown, np.inf, since)
        if model is not None:
            lam = model.rate_per_day[ix]
        else:
            # baselines keep no model: report the gain at each page's raw censored estimate
            lam = raw_rates(pages.ev_nc[ix], pages.ev_tc[ix], pages.ev_nu[ix], pages.ev_tu[ix])
        if objective == "freshness":
            if model is not None and allocated:
                f = model.visits_per_day[ix]
                horizon = np.where(f > 0, 1.0 / np.where(f > 0, f, 1.0), 1.0)
            else:
                horizon = np.full(ix.size, interval)
            gain = freshness_gain(lam, ds, horizon)
        else:
            # a never-fetched page has ds = inf; with a baseline's raw rate 0 the
            # product is NaN (0 × inf), reported as no gain below
            with np.errstate(invalid="ignore"):
                gain = -np.expm1(-lam * ds)
        out[a : a + ix.size] = np.nan_to_num(np.asarray(gain) * pages.value[ix])
    return out
