"""What the HTTP edge keeps between requests: :class:`Service`.

The cached plan of the current cycle, the last health evaluation, the lease
pool and ingest counters, over one :class:`~recrawl.engine.Engine`; see
:mod:`recrawl.service.app` for when the plan and health are recomputed.
"""

from __future__ import annotations

import heapq
import io
import logging
import math
import threading
import time
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from recrawl._exceptions import ConfigError, InvalidDocument, InvalidObservation
from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.pipeline import store_batch
from recrawl.engine.results import HealthOverview, SiteDetail, health_overview, site_detail
from recrawl.estimate.calibration import Calibration
from recrawl.estimate.hints import Hint, InvalidHint, read_hint_document
from recrawl.observe.observation import Observation, line_key, parse_observation
from recrawl.service.leases import LeasePool, pick_candidates
from recrawl.service.memory import release_free_memory
from recrawl.service.replicas import decode_plan, encode_plan
from recrawl.service.writer import Committed, Writer
from recrawl.store import BatchResult, EngineStore, SharedPlanning, SQLStore, open_store

__all__ = ["MAX_REJECTED", "Service", "open_engine", "validate_settings"]

_log = logging.getLogger("recrawl.service")
_INGEST_RATE_WINDOW_S = 60.0
MAX_REJECTED = 100
"""Rejected hints described in an answer (all are counted)."""


@dataclass(slots=True)
class _Charge:
    """What one lease charged its plan cycle until its report comes back."""

    cycle: int
    cost: float
    expires_at: float
    url: str
    mark: int
    """The store's observation mark when the lease was taken: a report of
    its URL after it, to this process or another, means it was fetched."""
    refunded: bool = False
    """The lease expired unreported: its cost went back to the cycle."""


def open_engine(engine_or_db: Engine | SQLStore | str | Path, settings: Settings) -> Engine:
    if isinstance(engine_or_db, Engine):
        return engine_or_db
    if isinstance(engine_or_db, SQLStore):
        return Engine(engine_or_db, settings)
    return Engine(open_store(str(engine_or_db), half_life_days=settings.half_life_days), settings)


def validate_settings(settings: Settings) -> None:
    """Start-up checks the service needs beyond :class:`~recrawl.config.Settings`.

    Raises :class:`~recrawl.ConfigError` with one clear sentence.
    """
    if not settings.token:
        raise ConfigError(
            "no write token: run `recrawl init` to create one in recrawl.toml, or set RECRAWL_TOKEN"
        )
    if settings.read_token is not None and settings.read_token == "":
        raise ConfigError("read_token is empty; remove it or give a value")
    if settings.budget_per_day is None and settings.billing_unit != "fetches":
        raise ConfigError(
            f"budget_per_day is required when billing_unit is {settings.billing_unit!r}"
        )


class Service:
    """What the HTTP edge keeps between requests, over one :class:`Engine`.

    Parameters
    ----------
    engine
        The engine (its ``clock`` is the service's clock, unix seconds).
    replan_after
        New observations after which the plan is recomputed.
    replan_min_s
        Shortest time between two recomputations triggered by observations, seconds.
    health_every_s
        Shortest time between two health evaluations, seconds.
    group_s
        Target duration, seconds, of one transaction in which the writer
        coalesces concurrent observation requests (:mod:`recrawl.service.writer`);
        a lease waits for at most one such transaction.

    With ``settings.replicas``, several services share the store: the one
    holding the store's planner lock plans and publishes each plan there; the
    others lease from the last published plan (checked at most every
    ``replan_min_s``), each cycle's spend is counted in the store, and a
    replica that finds the lock free (its holder died) plans from then on.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        replan_after: int = 1000,
        replan_min_s: float = 5.0,
        health_every_s: float = 60.0,
        group_s: float = 0.05,
    ) -> None:
        self.engine = engine
        self.store: EngineStore = engine.store
        self.settings = engine.settings
        # the engine's content checks, as `recrawl ingest` and Engine.ingest run them
        self.classifier = engine.classifier
        self.replan_after = replan_after
        self.replan_min_s = replan_min_s
        self.health_every_s = health_every_s
        self.started_at = time.time()
        self._lock = threading.RLock()
        self._plan: PlanResult | None = None
        self._plan_cycle = -1
        self._lease_pool: LeasePool | None = None
        self._plan_at = -math.inf
        self._dirty = True
        self._outside: int | None = None
        self._outside_changed = False
        self._obs_since_plan = 0
        # URLs reported since the plan's mark, for its lease pool to drop once
        # built; then only its canaries' (the pool drops the others itself)
        self._done: set[str] = set()
        self._replanning = False
        self._trim_due = False  # a plan was replaced: give its memory back (out of the lock)
        self._generation = 0
        self._spent = 0.0
        # lease id → what it charged its plan cycle at lease time, until its
        # report comes back and the cycle is charged what the fetch really cost;
        # an expired lease is refunded first (see _refund_expired)
        self._charged: dict[str, _Charge] = {}
        self._spend_check = [0, 0.0, 0.0]  # this cycle's reported leases, expected, reported
        self._expiries: list[tuple[float, str]] = []  # heap of (expires_at, lease id)
        # a refunded lease whose URL the current plan does not hold (a re-plan
        # while it was out spent without it): a re-plan brings it back
        self._stranded = False
        # the store's observation mark up to which reports are in _done and
        # out of the lease pool (reports to other processes included)
        self._seen_seq = 0
        self._health: list[dict[str, Any]] = []
        self._health_at = -math.inf
        self._obs_since_health = 1  # evaluate at the first chance
        self.accepted_total = 0
        self.stored_total = 0
        self.rejected_total = 0
        self.ingest_requests = 0
        self.leased_total = 0
        self._ingest_log: deque[tuple[float, int]] = deque()
        self._calibrations: dict[tuple[float, str, int], Calibration] = {}
        self._calibration_lock = threading.Lock()
        self._hint_reports: dict[tuple[float, int, int], dict[str, Any]] = {}
        # replicas on one store (settings.replicas): the planning role, the
        # generation of the last plan published or installed, and when the
        # store was last asked for them
        self._shared: SharedPlanning | None = None
        if self.settings.replicas:
            if not isinstance(self.store, SharedPlanning):
                raise ConfigError(
                    "replicas = true needs a store the replicas share (SQLite or PostgreSQL)"
                )
            self._shared = self.store
        self._leader = False
        self._published = 0
        self._refunds_seen = 0  # the cycle's refunds when this replica last planned
        self._shared_at = -math.inf
        self.writer = Writer(self._store_observations, group_s=group_s, on_commit=self._committed)

    # -- the model's calibration -----------------------------------------------------------

    def calibration(self, days: float, by: Literal["site", "group"]) -> Calibration:
        """:meth:`Engine.calibration`, computed at most once an hour for each
        ``days`` and ``by`` and a validators change: it reads and replays a
        whole window of the log (seconds on a large store; on the store's
        separate read connection, so leases and reports go on meanwhile)."""
        key = (days, by, int(self.now() // 3600))
        with self._calibration_lock:  # one computation at a time; the others wait for it
            cal = self._calibrations.get(key)
            off = sorted(self.store.sites_without_validators())
            if cal is None or cal.validators_off != off:
                cal = self.engine.calibration(days=days, by=by)
                self._calibrations = {
                    k: v for k, v in self._calibrations.items() if k[2] == key[2]
                } | {key: cal}
            return cal

    # -- clock and budget ------------------------------------------------------------------

    def now(self) -> float:
        """Unix seconds from the engine's clock."""
        return float(self.engine.clock())

    @property
    def cycle_s(self) -> float:
        """Length of one planning cycle, seconds."""
        return self.settings.cycle_hours * 3600.0

    def cycle_budget(self) -> float:
        """One cycle's budget in the billing unit: :meth:`Settings.daily_budget
        <recrawl.config.Settings.daily_budget>` × cycle length."""
        s = self.settings
        pages = 0 if s.budget_per_day is not None else self.store.page_count()
        return s.daily_budget(pages) * s.cycle_hours / 24.0

    def cycle_spent(self, now: float | None = None) -> float:
        """What the current cycle has spent so far, in the billing unit: each
        lease charges its task's planned cost when handed out, then what the
        fetch really cost once its report arrives (wire bytes or credits); a
        lease that expired unreported is refunded (here too, as :meth:`plan`
        does). 0 until the cycle's first plan. The ``/metrics`` figure against
        :meth:`cycle_budget`."""
        t = self.now() if now is None else now
        with self._lock:
            if int(t // self.cycle_s) != self._plan_cycle:
                return 0.0
            self._refund_expired(t)
            if self._shared is not None:
                return self._shared.cycle_spend(self._plan_cycle)[0]
            return self._spent

    def spend_check(self, now: float | None = None) -> tuple[int, float, float]:
        """The current cycle's reported fetches leased here: how many, what the
        plan expected them to cost and what they reported costing, in the
        billing unit (``/metrics``: a cost model that is off shows as the two
        drifting apart)."""
        t = self.now() if now is None else now
        with self._lock:
            if int(t // self.cycle_s) != self._plan_cycle:
                return 0, 0.0, 0.0
            n, expected, reported = self._spend_check
            return int(n), expected, reported

    # -- health ----------------------------------------------------------------------------

    def refresh_health(self, now: float, *, force: bool = False) -> list[dict[str, Any]]:
        """Evaluate every site's health when due and apply the band actions.

        Due when ``health_every_s`` has passed since the last evaluation and new
        observations arrived since. A change of any site's controls invalidates
        the plan. Returns the last evaluation (``recrawl health --json`` shape).
        """
        with self._lock:
            due = force or (
                now - self._health_at >= self.health_every_s and self._obs_since_health > 0
            )
            if not due:
                return self._health
            health = getattr(self.engine, "health", None)
            if health is None:  # the engine predates health evaluation
                self._health = self._health_from_history()
            else:
                before = self.store.site_controls()
                self._health = list(health(at=now, record=True))
                if self.store.site_controls() != before:
                    self._dirty = True
            self._health_at = now
            self._obs_since_health = 0
            return self._health

    def _health_from_history(self) -> list[dict[str, Any]]:
        last: dict[str, dict[str, Any]] = {}
        for _, report in self.store.health_history():
            last[report["site"]] = report
        return [last[s] for s in sorted(last)]

    def health(self) -> list[dict[str, Any]]:
        """The last health evaluation, refreshed first when due."""
        return self.refresh_health(self.now())

    def site_caps(self) -> dict[str, int]:
        """Outstanding leases allowed per site (0 when paused); absent means no cap."""
        caps = getattr(self.engine, "site_caps", None)
        if caps is not None:
            return dict(caps())
        out: dict[str, int] = {}
        for site, c in self.store.site_controls().items():
            if c["paused"]:
                out[site] = 0
            elif c["concurrency_cap"] is not None:
                out[site] = int(c["concurrency_cap"])
        return out

    # -- plan ------------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Recompute the plan at the next request (site controls or URLs changed)."""
        with self._lock:
            self._dirty = True

    def plan(self, now: float | None = None) -> PlanResult:
        """The current cycle's plan, recomputed when stale (see the module docstring).

        With no plan yet, or when site controls or URLs changed, the plan is
        recomputed before answering. When a new cycle begins or enough
        observations arrived, it is recomputed in a background thread and the
        previous plan keeps serving meanwhile (site caps and pauses are still
        enforced at lease time), so leases never wait for the planner.
        """
        t = self.now() if now is None else now
        # another process's writes matter only once a replan may start: poll then
        may_replan = t - self._plan_at >= self.replan_min_s
        outside = self.engine.store.outside_writes() if may_replan else self._outside
        with self._lock:
            if outside != self._outside:
                # another process wrote to the store (recrawl ingest, urls add, site
                # resume): its observations, URLs and controls count like ours
                self._outside_changed = self._outside is not None
                self._outside = outside
            cycle = int(t // self.cycle_s)
            self._refund_expired(t)
            if self._shared is not None and not self._plans_here(t, cycle):
                assert self._plan is not None
                plan = self._plan
                self._release_replaced()
                return plan
            if self._plan is None or self._dirty:
                self._stranded = False
                plan, mark = self._compute(t, cycle)
                self._install(plan, t, cycle, set(), mark)
            elif not self._replanning and (
                cycle != self._plan_cycle
                or (
                    (
                        self._obs_since_plan >= self.replan_after
                        or self._outside_changed
                        or self._stranded
                    )
                    and t - self._plan_at >= self.replan_min_s
                )
            ):
                self._outside_changed = False
                self._stranded = False
                self._replanning = True
                self._generation += 1
                threading.Thread(
                    target=self._replan_in_background,
                    args=(t, cycle, self._generation, self._obs_since_plan),
                    name="recrawl-replan",
                    daemon=True,
                ).start()
            assert self._plan is not None
            plan = self._plan
        self._release_replaced()
        return plan

    def _release_replaced(self) -> None:
        """Give the system back what the plan just replaced held (its arrays
        and lease pool are freed at :meth:`_install`): a few milliseconds
        (:func:`~recrawl.service.memory.release_free_memory`), out of the
        service lock for a plan made in the background; a plan made in a
        request (the first, or after controls or URLs changed, which that
        request waited for) gives it back before the request answers."""
        if self._trim_due:
            self._trim_due = False
            release_free_memory()

    def _plans_here(self, t: float, cycle: int) -> bool:
        """With replicas: whether this replica plans (it holds the store's
        planner lock, or just took it because its holder died), else install
        the plan the planner published last when it is newer than ours (the
        service lock held). A replica that has no plan for ``cycle`` and finds
        none published plans one of its own, unpublished, until the planner's
        comes."""
        shared = self._shared
        assert shared is not None
        stale = self._plan is None or self._dirty or cycle != self._plan_cycle
        if not stale and t - self._shared_at < self.replan_min_s:
            return self._leader
        self._shared_at = t
        was = self._leader
        self._leader = shared.hold_planner()
        if self._leader:
            if not was and self._plan is not None:
                _log.info("this replica plans from now on (the store's planner lock was free)")
                self._outside_changed = True  # plan again now: the last planner may be gone
            elif (
                self._plan is not None
                and cycle == self._plan_cycle
                and shared.cycle_spend(cycle)[1] > self._refunds_seen
            ):
                # another replica's leases expired unreported: their URLs and
                # budget are back, which a re-plan hands out again
                self._stranded = True
            return True
        got = shared.published_plan(self._published)
        if got is not None:
            generation, published_cycle, mark, body = got
            self._published = generation
            if published_cycle == cycle:
                self._install(decode_plan(body), t, cycle, set(), mark)
        if self._plan is None or cycle != self._plan_cycle:
            plan, mark = self._compute(t, cycle)
            self._install(plan, t, cycle, set(), mark)
        self._dirty = False
        return False

    def _charge(self, delta: float) -> None:
        """Add ``delta`` to what the current cycle spent (the service lock
        held): here, and in the store when replicas share it."""
        if delta == 0.0:
            return
        self._spent = max(self._spent + delta, 0.0)
        if self._shared is not None:
            self._shared.add_cycle_spend(self._plan_cycle, delta)

    def _compute(self, t: float, cycle: int) -> tuple[PlanResult, int]:
        """Plan what the cycle has left to spend (the whole budget in a new
        cycle; leases that expired unreported spent nothing; with replicas,
        what every replica's leases spent, from the store), with the store's
        observation mark read before the plan read the store: a URL reported
        after it is not leased from this plan."""
        if self._shared is not None:
            spent, self._refunds_seen = self._shared.cycle_spend(cycle)
        else:
            spent = 0.0 if cycle != self._plan_cycle else self._spent
        mark = self.store.observation_mark()
        return self.engine.plan(budget=max(self.cycle_budget() - spent, 0.0), now=t), mark

    def _refund_expired(self, now: float) -> None:
        """Give the cycle back what its leases that expired unreported were
        charged (the service lock held): a lease of the current cycle at or
        past its expiry, whose URL no process on the store reported since the
        lease (a replica's lessee may report to another replica). A report
        that comes later charges the cycle what the fetch cost
        (:meth:`_reconcile`)."""
        heap = self._expiries
        expired: list[tuple[str, _Charge]] = []
        while heap and heap[0][0] <= now:
            _, lease_id = heapq.heappop(heap)
            c = self._charged.get(lease_id)
            if c is None or c.refunded or c.cycle != self._plan_cycle:
                continue
            expired.append((lease_id, c))
        if not expired:
            return
        _, reported = self.store.reported_since(min(c.mark for _, c in expired))
        pool: LeasePool | None = None
        refund = 0.0
        for lease_id, c in expired:
            if c.url in reported:  # fetched: reported to another process
                del self._charged[lease_id]
                continue
            c.refunded = True
            refund += c.cost
            if pool is None and self._plan is not None:
                pool = self._pool(self._plan)
            if pool is None or not pool.holds(c.url):
                self._stranded = True
        self._charge(-refund)

    def _install(self, plan: PlanResult, t: float, cycle: int, done: set[str], mark: int) -> None:
        if cycle != self._plan_cycle:
            self._spent = 0.0
            self._spend_check = [0, 0.0, 0.0]
            self._charged = {k: v for k, v in self._charged.items() if v.cycle == cycle}
            self._expiries = [(c.expires_at, k) for k, c in self._charged.items()]
            heapq.heapify(self._expiries)
        if self._plan is not None:
            self._trim_due = True
        # the lease pool of the plan before goes now, not at the next lease:
        # two plans are not held for longer than the swap
        self._lease_pool = None
        self._plan = plan
        self._plan_cycle = cycle
        self._plan_at = t
        self._dirty = False
        self._outside_changed = False
        self._obs_since_plan = 0
        self._done = done
        self._seen_seq = mark
        self._generation += 1
        if self._shared is not None and self._leader:
            self._published = self._shared.publish_plan(cycle, mark, encode_plan(plan))

    def _replan_in_background(self, t: float, cycle: int, generation: int, seen: int) -> None:
        self._replan_once(t, cycle, generation, seen)
        self._release_replaced()  # (the plan computed is installed or freed by now)

    def _replan_once(self, t: float, cycle: int, generation: int, seen: int) -> None:
        try:
            plan, mark = self._compute(t, cycle)
            with self._lock:
                if self._generation == generation:  # no recomputation overtook this one
                    left = self._obs_since_plan - seen
                    # a write by another process noticed while ``plan`` was computed
                    # may be missing from it: it still asks for a recomputation
                    outside_changed = self._outside_changed
                    # the reports since ``mark`` (this process's and others') are
                    # taken out of its pool from the store's log at the next lease
                    self._install(plan, t, cycle, set(), mark)
                    self._obs_since_plan = max(left, 0)
                    self._outside_changed = outside_changed
        except Exception:  # the previous plan keeps serving; the next trigger retries
            _log.exception("recomputing the plan failed")
        finally:
            with self._lock:
                self._replanning = False

    def _sync_reports(self, pool: LeasePool) -> None:
        """Take out of ``pool`` the URLs reported since the plan's mark to any
        process on the store (the service lock held): the store's log, read
        from the last mark seen, is the one record of what was reported."""
        mark, urls = self.store.reported_since(self._seen_seq)
        if urls:
            # (a plan being computed meanwhile read its own mark first: the
            # reports after it are synced from there once it is installed)
            self._note_done(urls)
            for url in urls:
                pool.drop(url)
        self._seen_seq = mark

    def _note_done(self, urls: Iterable[str]) -> None:
        """Remember reported URLs for the plan's pool (the service lock held):
        all of them until the pool is built (it drops them then), only its
        canaries after (it dropped the others as they came): a URL a report
        until the next plan held 120 bytes a page reported."""
        pool = self._lease_pool
        if pool is None or pool.plan is not self._plan:
            self._done.update(urls)
        else:
            canaries = pool.canary_urls
            if canaries:
                self._done.update(u for u in urls if u in canaries)

    def _pool(self, plan: PlanResult) -> LeasePool:
        """The lease candidates of ``plan`` (the service lock held): built once per
        plan, then kept free of reported URLs by :meth:`_committed`."""
        pool = self._lease_pool
        if pool is not None and pool.plan is plan:
            return pool
        pool = LeasePool(plan, self._done)
        self._lease_pool = pool
        if plan is self._plan:
            self._done = {u for u in self._done if u in pool.canary_urls}
        return pool

    def lease(self, worker: str, limit: int) -> list[dict[str, Any]]:
        """Lease up to ``limit`` tasks of the current plan to ``worker``.

        Canaries first and outside the site caps (a paused site keeps only its
        canaries); then the plan's tasks best first, each site held to its cap.
        URLs reported since the plan was computed, to this process or another
        on the same store, are not handed out again (the store checks when it
        claims them). A site without a cap of its own gets ``site_concurrency``.
        """
        now = self.now()
        self.refresh_health(now)
        ttl = self.settings.lease_seconds
        with self._lock:
            pool = self._pool(self.plan(now))
            self._sync_reports(pool)
            since = self._seen_seq
            done = self._done
            canaries = [c for c in pool.canaries if c[0] not in done]
            got = (
                self.store.claim(
                    canaries,
                    worker=worker,
                    limit=limit,
                    now=now,
                    ttl_s=ttl,
                    reported_since=since,
                )
                if canaries
                else []
            )
            caps: dict[str, int] = {}
            if len(got) < limit and pool:
                default = self.settings.site_concurrency
                caps = {site: default for site in pool.sites} | self.site_caps()
            for _ in range(3):  # again only when another process claimed some meanwhile
                want = limit - len(got)
                if want <= 0 or not pool:
                    break
                per_site = self.store.outstanding_leases(now)
                rest, whole = pick_candidates(pool.candidates(), pool.sites, per_site, caps, want)
                if rest:
                    got += self.store.claim(
                        rest,
                        worker=worker,
                        limit=want,
                        now=now,
                        ttl_s=ttl,
                        site_caps=caps,
                        reported_since=since,
                    )
                if whole:
                    break
            info = {g["url"]: pool.task(g["url"]) for g in got}
            charged = 0.0
            for g in got:
                cost = float(info[g["url"]].get("cost") or 0.0)
                charged += cost
                lease_id = g["lease_id"]
                expires = float(g["expires_at"])
                self._charged[lease_id] = _Charge(self._plan_cycle, cost, expires, g["url"], since)
                heapq.heappush(self._expiries, (expires, lease_id))
            self._charge(charged)
            self.leased_total += len(got)
        headers = self.engine.headers_for_tasks(got)
        signals = pool.plan.signals
        return [
            {
                "lease_id": g["lease_id"],
                "url": g["url"],
                "site": g["site"],
                "page_type": info[g["url"]]["page_type"],
                "reason": g["reason"],
                "signal": signals.get(g["url"]),
                "headers": headers.get(g["url"], {}),
                "expires_at": g["expires_at"],
            }
            for g in got
        ]

    # -- observations ----------------------------------------------------------------------

    def _store_observations(self, observations: Sequence[Observation]) -> BatchResult:
        return store_batch(self.store, observations, classifier=self.classifier, now=self.now())

    def parse_body(self, body: bytes) -> tuple[list[Observation], list[int], list[dict[str, Any]]]:
        """Parse NDJSON or a JSON array of observations: ``(good, where, rejected)``,
        ``where`` the index of each good one.

        A rejection (``{"index", "field", "error"}``) counts ``index`` from 0:
        the line of an NDJSON body (blank lines count), or the position in a
        JSON array.

        An observation without ``id`` is keyed by its NDJSON line as ``recrawl
        ingest`` keys the same line (a log both posted and ingested from a file
        is stored once); an array item by its compact JSON.

        Raises :class:`~recrawl.InvalidDocument` when a JSON array body is not JSON at all.
        """
        rules = self.settings.page_types
        loads = orjson.loads
        good: list[Observation] = []
        where: list[int] = []
        rejected: list[dict[str, Any]] = []
        stripped = body.lstrip()
        if stripped[:1] == b"[":
            try:
                items = loads(body)
            except orjson.JSONDecodeError as exc:
                raise InvalidDocument(f"body is not a JSON array ({exc.msg})") from None
            for i, raw in enumerate(items):
                key = line_key(orjson.dumps(raw)) if isinstance(raw, dict) else None
                try:
                    good.append(parse_observation(raw, rules=rules, key=key))
                    where.append(i)
                except InvalidObservation as exc:
                    rejected.append({"index": i, "field": exc.field, "error": exc.reason})
        else:
            for i, line in enumerate(body.split(b"\n")):
                if not line.strip():
                    continue
                try:
                    raw = loads(line)
                except orjson.JSONDecodeError as exc:
                    rejected.append({"index": i, "field": None, "error": f"not JSON ({exc.msg})"})
                    continue
                try:
                    good.append(parse_observation(raw, rules=rules, key=line_key(line)))
                    where.append(i)
                except InvalidObservation as exc:
                    rejected.append({"index": i, "field": exc.field, "error": exc.reason})
        return good, where, rejected

    def submit_observations(self, good: list[Observation]) -> Future[Committed]:
        """Queue parsed observations for the writer's next group commit; the future
        resolves once they are on disk (see :mod:`recrawl.service.writer`)."""
        if not good:
            done: Future[Committed] = Future()
            done.set_result(Committed(0, 0))
            return done
        return self.writer.submit_batch(good)

    def count_rejected(self, good: list[Observation], rejected: list[dict[str, Any]]) -> None:
        """Count a request's rejected items, and the request when none was good
        (the writer counts the others once committed)."""
        with self._lock:
            self.rejected_total += len(rejected)
            if not good:
                self.ingest_requests += 1

    def _reconcile(self, good: Sequence[Observation]) -> None:
        """Charge the cycle what the leased fetches reported cost (wire bytes,
        or credits) instead of the plan's estimate (the service lock held). A
        lease of an earlier cycle charged that cycle: nothing to correct now."""
        charged = self._charged
        if not charged:
            return
        unit = self.settings.billing_unit
        delta = 0.0
        for o in good:
            if o.lease_id is None:
                continue
            entry = charged.pop(o.lease_id, None)
            if entry is None or entry.cycle != self._plan_cycle:
                continue
            if unit == "fetches":
                real = entry.cost
            elif unit == "bytes":
                real = o.bytes_sent + o.bytes_received
            else:
                real = o.billed_credits()
            # a lease refunded at its expiry charges the whole fetch again
            refunded = entry.cost if not entry.refunded else 0.0
            delta += real - refunded
            check = self._spend_check
            check[0], check[1], check[2] = check[0] + 1, check[1] + entry.cost, check[2] + real
        self._charge(delta)

    def _committed(self, good: Sequence[Observation], share: Committed) -> None:
        """After a request's observations committed (in the writer thread)."""
        now = time.time()
        with self._lock:
            self.ingest_requests += 1
            self.accepted_total += len(good)
            self.stored_total += share.stored
            self._obs_since_plan += share.stored
            self._obs_since_health += share.stored
            self._note_done(o.url for o in good)
            self._reconcile(good)
            pool = self._lease_pool
            if pool is not None:
                for o in good:
                    pool.drop(o.url)
            log = self._ingest_log
            log.append((now, len(good)))
            while log and log[0][0] < now - _INGEST_RATE_WINDOW_S:
                log.popleft()

    @staticmethod
    def answer(
        good: list[Observation],
        where: list[int],
        rejected: list[dict[str, Any]],
        share: Committed,
    ) -> dict[str, Any]:
        """The answer to one observations request (``where``: each good
        observation's index in the body). A report the store refused (older
        than its page's pruned log) is a rejection of field ``fetched_at``."""
        if share.refused:
            rejected = sorted(
                rejected
                + [
                    {"index": where[i], "field": "fetched_at", "error": why}
                    for i, why in share.refused
                ],
                key=lambda r: int(r["index"]),
            )
        return {
            "accepted": len(good) - len(share.refused),
            "stored": share.stored,
            "duplicates": share.duplicates,
            "rejected": rejected,
        }

    def parse_and_count(
        self, body: bytes
    ) -> tuple[list[Observation], list[int], list[dict[str, Any]]]:
        """:meth:`parse_body`, then :meth:`count_rejected` (off the event loop: the
        service lock may be held by a lease)."""
        good, where, rejected = self.parse_body(body)
        self.count_rejected(good, rejected)
        return good, where, rejected

    def ingest_body(self, body: bytes) -> dict[str, Any]:
        """Parse NDJSON or a JSON array of observations, store the good ones and
        answer ``{"accepted", "stored", "duplicates", "rejected"}`` once they are
        on disk (blocking; the HTTP route does the same without blocking).

        Raises :class:`~recrawl.InvalidDocument` when a JSON array body is not JSON at all.
        """
        good, where, rejected = self.parse_and_count(body)
        return self.answer(good, where, rejected, self.submit_observations(good).result())

    def ingest_rate(self) -> float:
        """Observations accepted per second over the last minute."""
        now = time.time()
        with self._lock:
            n = sum(k for t, k in self._ingest_log if t >= now - _INGEST_RATE_WINDOW_S)
        span = min(_INGEST_RATE_WINDOW_S, max(now - self.started_at, 1.0))
        return n / span

    # -- cheap signals (recrawl.hints) -----------------------------------------------------

    def parse_hints(
        self, body: bytes, *, source: str | None, seen_at: float | None
    ) -> tuple[list[Hint], list[dict[str, Any]], int]:
        """A sitemap (``<urlset>``, found by its content) or hint lines: the good
        hints, the first :data:`MAX_REJECTED` rejections and how many there were.
        A sitemap without ``seen_at`` was read now. Raises :class:`~recrawl.InvalidDocument` for
        a document that is not a sitemap or not well-formed XML."""
        good: list[Hint] = []
        bad: list[dict[str, Any]] = []
        count = 0

        def reject(e: InvalidHint) -> None:
            nonlocal count
            count += 1
            if len(bad) < MAX_REJECTED:
                bad.append({"line": e.line, "field": e.field, "error": str(e)})

        _, entries = read_hint_document(
            io.BufferedReader(io.BytesIO(body)), source=source, seen_at=seen_at, read_at=self.now()
        )
        try:
            for h in entries:
                if isinstance(h, InvalidHint):
                    reject(h)
                else:
                    good.append(h)
        except ET.ParseError as exc:
            raise InvalidDocument(f"not well-formed XML ({exc})") from None
        except ValueError as exc:  # a sitemap index, or another document
            raise InvalidDocument(str(exc)) from None
        return good, bad, count

    def ingest_hints(self, hints: list[Hint], *, add_urls: bool) -> Future[Any]:
        """Store hints through the writer; a stored hint or a registered URL asks
        for a new plan in the background (as another process's writes do: a
        replan may judge the sources again, seconds the leases must not wait)."""

        def work() -> Any:
            result = self.engine.ingest_hints(hints, add_urls=add_urls)
            if result.stored or result.added_urls:
                with self._lock:
                    self._outside_changed = True
            return result

        return self.writer.submit(work)

    def hint_report(self, days: float) -> dict[str, Any]:
        """As ``recrawl hints --json``, judged again at most once an hour for each
        ``days`` or when hints were written (it replays the fetch log)."""
        key = (days, int(self.now() // 3600), self.store.hints_version())
        with self._calibration_lock:
            got = self._hint_reports.get(key)
            if got is None:
                got = self.engine.hint_report(days=days).as_dict()
                self._hint_reports = {
                    k: v for k, v in self._hint_reports.items() if k[1:] == key[1:]
                } | {key: got}
            return got

    # -- sites -----------------------------------------------------------------------------

    def overview(self) -> HealthOverview:
        """Every known site: its last health evaluation (refreshed first when
        due), controls and outstanding leases, worst first (as ``recrawl health
        --json``); ``at`` is when it was evaluated."""
        now = self.now()
        reports = self.refresh_health(now)
        at = self._health_at if math.isfinite(self._health_at) else now
        return health_overview(self.store, reports, at=at, now=now)

    def site(self, site: str, since: float = 0.0) -> SiteDetail | None:
        """One site: its row of :meth:`overview`, history (``since`` unix seconds)
        and events; None for a site the store does not know."""
        return site_detail(self.store, self.overview(), site, since=since)

    def pause(self, site: str, by: str, reason: str) -> dict[str, Any]:
        """Pause a site by hand (a human decision) and recompute the plan."""
        done = self.engine.pause(site, by=by, reason=reason, now=self.now())
        if done:
            self.invalidate()
        return {
            "site": site,
            "paused": True,
            "recorded": done,
            "controls": self.store.site_controls().get(site),
        }

    def resume(self, site: str, by: str) -> dict[str, Any]:
        """Lift a site's pause (a human decision) and recompute the plan."""
        self.engine.resume(site, by=by, now=self.now())
        self.invalidate()
        return {"site": site, "resumed": True, "controls": self.store.site_controls().get(site)}
