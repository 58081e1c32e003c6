"""The planner over partitions on a Dask LocalCluster, against the one-machine planner.

Usage::

    python benchmarks/plan_cluster.py [--pages N] [--big-pages M] [--partitions P]
                                      [--workers W] [--project-pages B]
                                      [--project-machines K [K ...]] [--project-cores C]
                                      [--project-machine-gb G] [--project-partitions Q]

1. ``N`` pages (default 10,000,000) as in ``benchmarks/plan_speed.py``: the
   one-machine planner (``reallocate_s``, ``cycle_s`` best of three), then the
   same pages written as ``P`` Parquet partitions and planned on a
   ``LocalCluster`` of ``W`` worker processes (one thread each):
   ``fit_priors_s`` (priors from a sample gathered from the partitions),
   ``reallocate_s`` (estimates, multiplier, corrections, floors; priors
   included), ``cycle_s`` (best of three), the CPU seconds the partitions'
   steps took (``*_cpu_s``, summed over partitions: what a loaded machine
   does not inflate, unlike wall time), each worker's resident memory, and
   how far the two planners' answers are apart.
2. ``M`` pages (default 50,000,000; 0 skips), built on the workers
   themselves (the driver never holds them; no Parquet), planned the same way.
3. The cost of one round (a no-op step on every partition) against the
   number of partitions (16, 64 and 256 one-page partitions): a fixed part
   and a part per partition, fitted, for its wall time and for the CPU the
   driver's process spent on it.
4. A projection for ``B`` pages (default 10⁹) on ``K`` machines (default 4,
   and 32) of ``C`` cores (default 16) and ``G`` GB (default 128), run as
   ``K × C`` single-thread worker processes (Dask runs an actor's calls on
   one thread per worker process, so one process of ``C`` threads would
   take its partitions' steps one at a time) holding ``Q``
   partitions (default ``K × C``): each step's time is the partitions' CPU
   per page measured at the larger size, times ``B / (K × C)``, plus its
   rounds at the fitted cost of a round over ``Q`` partitions (``*_s``: the
   wall time measured here, which counts the workers' part of each call
   too, done by two processes here and spread over all of them on a
   cluster; ``*_low_s``: the driver's CPU alone, a lower bound); memory per
   machine from the measured bytes per page a worker held, plus ``C`` times
   a worker process's resident memory before it held any page.
   *Measured*: everything outside ``projection``; *projected*: everything
   under it, which assumes the per-page work spreads evenly over the
   processes (partitions are independent and of about equal size) and a
   round costs what it cost here (a real network adds latency per round).

The load average of the machine (shared) is reported at the start and the
end. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from plan_speed import NOW, build_pages

from recrawl.plan.cluster import (
    Partition,
    PartitionRunner,
    cluster_plan_cycle,
    cluster_reallocate,
    fit_priors,
    partition_of_sites,
)
from recrawl.plan.planner import PlannerConfig, PlanPages, plan_cycle, reallocate

DAY = 86_400.0


class TimedRunner:
    """A runner that counts its rounds and times them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rounds = 0
        self.seconds = 0.0

    def run(self, step: Callable[[Partition, Any], tuple[Partition, Any]], arg: Any) -> list[Any]:
        t = time.perf_counter()
        out: list[Any] = self.inner.run(step, arg)
        self.seconds += time.perf_counter() - t
        self.rounds += 1
        return out


def partition_pages(p: int, n_partitions: int, per_part: int, n_sites: int, seed: int) -> Partition:
    """Partition ``p`` of a crawl like ``plan_speed.build_pages``, built where it runs."""
    rng = np.random.default_rng([seed, p])
    sites = np.flatnonzero(partition_of_sites(np.arange(n_sites), n_partitions) == p)
    n = per_part
    site = rng.choice(sites, n) if sites.size else np.zeros(n, dtype=np.int64)
    rate = np.exp(rng.uniform(math.log(1 / 365), math.log(3.0), n))
    visits = rng.integers(1, 40, n)
    interval = 365.0 / visits
    changes = rng.binomial(visits, -np.expm1(-rate * interval)).astype(np.float64)
    pages = PlanPages(
        value=rng.choice(np.array([1.0, 2.0, 4.0, 8.0]), n),
        cost=rng.uniform(0.5, 2.0, n),
        site=site,
        host=site,
        group=site * 2 + rng.integers(0, 2, n),
        last_fetch=NOW - rng.uniform(0.0, 60.0, n) * DAY,
        first_seen=np.full(n, NOW - 400 * DAY),
        never_fetched=rng.random(n) < 0.001,
        ev_nc=changes,
        ev_tc=changes * interval,
        ev_nu=visits - changes,
        ev_tu=(visits - changes) * interval,
        nutch_interval=np.full(n, 30 * DAY),
        site_cost_multiplier=np.ones(n_sites),
        site_paused=np.zeros(n_sites, dtype=bool),
    )
    return Partition(pages, np.arange(p * per_part, (p + 1) * per_part, dtype=np.int64))


def worker_memory(client: Any) -> dict[str, Any]:
    def mem() -> tuple[int, int]:
        import psutil

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return int(psutil.Process().memory_info().rss), int(peak)

    got = client.run(mem)
    return {
        "rss_bytes": sorted(v[0] for v in got.values()),
        "peak_rss_bytes": sorted(v[1] for v in got.values()),
    }


def on_cluster(runner: Any, n: int, cfg: PlannerConfig, client: Any) -> dict[str, Any]:
    timed = TimedRunner(runner)
    cpu0 = sum(runner.cpu_seconds())
    per_day = 0.1 * n
    per_cycle = per_day * cfg.cycle_hours / 24.0
    t = time.perf_counter()
    priors = fit_priors(timed)
    fit_s = time.perf_counter() - t
    prior_rounds = timed.rounds
    model = cluster_reallocate(
        timed, per_day * cfg.score_pool_share(), NOW, config=cfg, priors=priors
    )
    realloc_s = time.perf_counter() - t
    realloc_rounds = timed.rounds
    cpu1 = sum(runner.cpu_seconds())
    mem_after_realloc = worker_memory(client)
    times, plan = [], None
    for i in range(3):
        t = time.perf_counter()
        plan = cluster_plan_cycle(
            timed, per_cycle, NOW, model=model, config=cfg, rng=np.random.default_rng(i)
        )
        times.append(time.perf_counter() - t)
    assert plan is not None
    cpu2 = sum(runner.cpu_seconds())
    return {
        "reallocate_cpu_s": round(cpu1 - cpu0, 3),
        "cycle_cpu_s": round((cpu2 - cpu1) / 3, 3),
        "pages": n,
        "fit_priors_s": round(fit_s, 3),
        "reallocate_s": round(realloc_s, 3),
        "reallocate_rounds": realloc_rounds,
        "prior_rounds": prior_rounds,
        "cycle_s": round(min(times), 3),
        "cycle_rounds": (timed.rounds - realloc_rounds) // 3,
        "cycle_fetches": len(plan),
        "cycle_spent": round(plan.spent, 1),
        "memory_after_reallocate": mem_after_realloc,
        "memory_after_cycles": worker_memory(client),
        "_plan": plan,
        "_model": model,
    }


def noop(part: Partition, _: Any) -> tuple[Partition, None]:
    return part, None


def round_trip_s(runner: PartitionRunner) -> float:
    times = []
    for _ in range(5):
        t = time.perf_counter()
        runner.run(noop, None)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def rounds_by_partitions(client: Any, counts: tuple[int, ...]) -> dict[str, dict[str, float]]:
    """Median seconds of a no-op round over ``n`` one-page partitions, for each
    ``n``: its wall time (``wall``), and the CPU the driver's process spent on
    it (``driver_cpu``: the part of a round no number of workers shortens)."""
    from recrawl.plan.dask import DaskRunner

    got: dict[str, dict[str, float]] = {"wall": {}, "driver_cpu": {}}
    for n in counts:
        runner = DaskRunner.load(client, [(partition_pages, p, n, 1, 64, 1) for p in range(n)])
        runner.run(noop, None)  # (a first call opens the connections)
        wall, cpu = [], []
        for _ in range(5):
            t, c = time.perf_counter(), time.process_time()
            runner.run(noop, None)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        got["wall"][str(n)] = round(float(np.median(wall)), 4)
        got["driver_cpu"][str(n)] = round(float(np.median(cpu)), 4)
        del runner
    return got


def _fit(by_n: dict[str, float]) -> tuple[float, float]:
    """A fixed part and a part per partition, seconds, fitted on ``{n: seconds}``."""
    ns = np.array([float(k) for k in by_n])
    per, fixed = np.polyfit(ns, np.array(list(by_n.values())), 1)
    return max(float(fixed), 0.0), max(float(per), 0.0)


def project(
    last: dict[str, Any], rounds_n: dict[str, dict[str, float]], args: Any, machines: int
) -> dict[str, Any]:
    """The projection to ``args.project_pages`` pages on ``machines`` machines."""
    procs = machines * args.project_cores
    q = args.project_partitions or procs
    # a round over q partitions: as measured here (the workers' per-call work
    # included, which two workers do 128 calls each of at 256 partitions, a
    # real cluster one per process), and the driver's CPU alone (a lower bound)
    fixed, per_partition = _fit(rounds_n["wall"])
    cpu_fixed, cpu_per_partition = _fit(rounds_n["driver_cpu"])
    round_s = fixed + per_partition * q
    round_low_s = cpu_fixed + cpu_per_partition * q
    proj: dict[str, Any] = {
        "pages": args.project_pages,
        "machines": machines,
        "cores_per_machine": args.project_cores,
        "worker_processes": procs,
        "partitions": q,
        "machine_memory_gb": args.project_machine_gb,
        "from": f"{last['pages']} pages measured",
        "round_fixed_s": round(fixed, 5),
        "round_per_partition_s": round(per_partition, 6),
        "round_s": round(round_s, 4),
        "round_driver_cpu_per_partition_s": round(cpu_per_partition, 6),
        "round_low_s": round(round_low_s, 4),
    }
    for key, rounds in (("reallocate", "reallocate_rounds"), ("cycle", "cycle_rounds")):
        per_page = last[f"{key}_cpu_s"] / last["pages"]
        compute = per_page * args.project_pages / procs
        proj[f"{key}_cpu_ns_per_page"] = round(per_page * 1e9, 1)
        proj[f"{key}_compute_s"] = round(compute, 2)
        proj[f"{key}_rounds_s"] = round(last[rounds] * round_s, 2)
        proj[f"{key}_s"] = round(compute + last[rounds] * round_s, 2)
        proj[f"{key}_low_s"] = round(compute + last[rounds] * round_low_s, 2)
    # a worker's peak counts only once it passes the peak it started with (a
    # spawned process can report its parent's); else its resident memory
    before = last["memory_before_load"]
    after = [last["memory_after_reallocate"], last["memory_after_cycles"]]
    held = 0.0
    for w in range(len(before["rss_bytes"])):
        peak = max(m["peak_rss_bytes"][w] for m in after)
        rss = max(m["rss_bytes"][w] for m in after)
        top = peak if peak > before["peak_rss_bytes"][w] else rss
        held += top - before["rss_bytes"][w]
    bpp = held / last["pages"]
    base = float(np.mean(before["rss_bytes"]))
    per_machine = bpp * args.project_pages / machines + args.project_cores * base
    proj["measured_worker_bytes_per_page"] = round(bpp, 1)
    proj["measured_worker_process_base_bytes"] = round(base)
    proj["memory_per_machine_gb"] = round(per_machine / 1e9, 1)
    proj["fits_in_machine_memory"] = per_machine / 1e9 < args.project_machine_gb
    proj["rounds_per_reallocation"] = last["reallocate_rounds"]
    proj["rounds_per_cycle"] = last["cycle_rounds"]
    proj["tasks_per_cycle"] = round(last["cycle_fetches"] * args.project_pages / last["pages"])
    return proj


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000_000)
    ap.add_argument("--big-pages", type=int, default=50_000_000)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--project-pages", type=float, default=1e9)
    ap.add_argument("--project-machines", type=int, nargs="+", default=[4, 32])
    ap.add_argument("--project-cores", type=int, default=16)
    ap.add_argument("--project-machine-gb", type=float, default=128.0)
    ap.add_argument("--project-partitions", type=int, default=0, help="default: machines × cores")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    from recrawl.plan.dask import DaskRunner, open_partitions, write_partitions

    n, cfg = args.pages, PlannerConfig()
    out: dict[str, Any] = {
        "partitions": args.partitions,
        "workers": args.workers,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }

    # 1. one machine
    pages = build_pages(n, np.random.default_rng(0))
    per_day = 0.1 * n
    t = time.perf_counter()
    one = reallocate(pages, per_day * cfg.score_pool_share(), NOW, config=cfg)
    one_realloc = time.perf_counter() - t
    times = []
    for i in range(3):
        t = time.perf_counter()
        plan1 = plan_cycle(
            pages, per_day / 24, NOW, config=cfg, rng=np.random.default_rng(i), model=one
        )
        times.append(time.perf_counter() - t)
    out["one_machine"] = {
        "pages": n,
        "reallocate_s": round(one_realloc, 3),
        "cycle_s": round(min(times), 3),
        "cycle_fetches": len(plan1),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    root = tempfile.mkdtemp(prefix="recrawl-plan-cluster-")
    try:
        t = time.perf_counter()
        write_partitions(pages, f"{root}/pages", args.partitions)
        out["write_parquet_s"] = round(time.perf_counter() - t, 2)
        visits1 = one.visits_per_day
        del pages, one
        with (
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                memory_limit=0,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(args.workers)
            base = worker_memory(client)
            t = time.perf_counter()
            runner = open_partitions(client, f"{root}/pages")
            read_s = time.perf_counter() - t
            res = on_cluster(runner, n, cfg, client)
            res["read_parquet_s"] = round(read_s, 2)
            res["memory_before_load"] = base
            res["round_trip_s"] = round(round_trip_s(runner), 4)
            plan2 = res.pop("_plan")
            res.pop("_model")

            def visits_of(part: Partition, _: Any) -> tuple[Partition, Any]:
                return part, (part.page_id, part.visits_per_day)

            got = runner.run(visits_of, None)
            visits2 = np.zeros(n)
            for ids, v in got:
                visits2[ids] = v
            rel = np.abs(visits2 - visits1) / np.maximum(visits1, 1e-12)
            on = visits1 > 1e-3
            res["vs_one_machine"] = {
                "visits_median_rel_diff": float(np.median(rel[on])),
                "visits_p99_rel_diff": float(np.quantile(rel[on], 0.99)),
                "budget_rel_diff": float(abs(visits2.sum() / visits1.sum() - 1)),
                "tasks_in_both": int(np.intersect1d(plan1.index, plan2.index).size),
                "tasks_one_machine": len(plan1),
                "tasks_cluster": len(plan2),
                "note": "the cluster fits its priors on a sample gathered from the "
                "partitions: rates differ slightly from the one-machine fit",
            }
            del visits1, visits2, got
            out["cluster"] = res
            out["round_s_by_partitions"] = rounds_by_partitions(client, (16, 64, 256))
            res_big = None
            if args.big_pages:
                del runner
                client.restart()
                per_part = args.big_pages // args.partitions
                n_sites = max(1, args.big_pages // 2000)
                t = time.perf_counter()
                base = worker_memory(client)
                big = DaskRunner.load(
                    client,
                    [
                        (partition_pages, p, args.partitions, per_part, n_sites, 0)
                        for p in range(args.partitions)
                    ],
                )
                build_s = time.perf_counter() - t
                res_big = on_cluster(big, per_part * args.partitions, cfg, client)
                res_big.pop("_plan")
                res_big.pop("_model")
                res_big["build_on_workers_s"] = round(build_s, 2)
                res_big["memory_before_load"] = base
                out["cluster_big"] = res_big
    finally:
        shutil.rmtree(root, ignore_errors=True)

    # 4. projection: the partitions' CPU per page spread over K × C processes,
    # plus each step's rounds at the cost of a round over Q partitions
    last = out.get("cluster_big", out["cluster"])
    out["projection"] = [
        project(last, out["round_s_by_partitions"], args, k) for k in args.project_machines
    ]
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
