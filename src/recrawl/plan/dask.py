"""The Dask edge of :mod:`recrawl.plan.cluster`: partitions as Parquet files, held on a cluster.

Page state is stored as one Parquet file per partition (``part-00000.parquet``
…, pages of one site hash in each, see
:func:`~recrawl.plan.cluster.partition_of_sites`) and ``sites.parquet`` (every
site's cost multiplier and pause flag), under a directory or any URL
:mod:`pyarrow.fs` opens (``s3://…``, ``gs://…``, ``hdfs://…``). Each Dask
worker reads its own partitions and keeps them in memory between cycles; the
driver sees only the few numbers each step returns, and the cycle's tasks.

Each partition sits in a :class:`PartitionHolder`, a Dask actor, so a step
is one direct call to the worker holding it (a round trip took 4–15 ms on a
two-process LocalCluster, about 0.7 ms more of the driver's CPU per
partition); a re-allocation takes about 15 rounds, a cycle about 15. Dask
runs a worker process's actor calls on one thread: start workers with one
thread each (``dask worker … --nthreads 1``). A worker lost mid-plan loses
its partitions: open them again from the Parquet. What each step computes, and how close its answers are to the
one-machine planner's, is in :mod:`recrawl.plan.cluster`.

Needs the ``cluster`` extra (``pip install 'recrawl[cluster]'``: dask
distributed and pyarrow); ``import recrawl`` does not import either.

Examples
--------
Write the pages once, then plan against a running scheduler (or pass
``pages=`` to write them once the scheduler has answered, what ``recrawl
plan --cluster`` does)::

    from recrawl.plan.dask import plan_on_cluster, write_partitions
    write_partitions(pages, "s3://bucket/recrawl/pages", n_partitions=256)
    plan, model = plan_on_cluster("tcp://scheduler:8786", "s3://bucket/recrawl/pages",
                                  budget=40_000.0, now=time.time())
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, TypeVar

import numpy as np

from recrawl._exceptions import ClusterUnreachable
from recrawl.plan.cluster import (
    ClusterModel,
    ClusterPlan,
    Partition,
    cluster_plan_cycle,
    cluster_reallocate,
    split_pages,
)
from recrawl.plan.freshness import Objective
from recrawl.plan.planner import PlannerConfig, PlanPages
from recrawl.records.evidence import BIN_COLUMNS

__all__ = [
    "DaskRunner",
    "PartitionHolder",
    "open_partitions",
    "plan_on_cluster",
    "read_partition",
    "write_partitions",
]

T = TypeVar("T")

_FLOATS = ("value", "cost", "last_fetch", "first_seen", "ev_nc", "ev_tc", "ev_nu", "ev_tu",
           "nutch_interval")  # fmt: skip
_INTS = ("site", "host", "group")  # and ev_bin_0 … ev_bin_11, the length bins, when kept
_BOOLS = ("never_fetched", "active")


def _fs(root: str) -> tuple[Any, str]:
    from pyarrow import fs  # type: ignore[import-untyped,unused-ignore]

    filesystem, path = (
        fs.FileSystem.from_uri(root) if "://" in root else (fs.LocalFileSystem(), root)
    )
    return filesystem, path.rstrip("/")


def write_partitions(
    pages: PlanPages, root: str, n_partitions: int, page_ids: Any = None
) -> list[str]:
    """Write ``pages`` as partitioned Parquet under ``root``, replacing the
    partitions written there before; the partition paths.

    ``page_ids`` default to the page numbers (what :class:`~recrawl.plan.planner.Plan`
    indices then mean).
    """
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
    from pyarrow import fs  # type: ignore[import-untyped,unused-ignore]

    filesystem, base = _fs(root)
    filesystem.create_dir(base, recursive=True)
    # a previous export's partitions go: the readers take every part-* file
    for info in filesystem.get_file_info(fs.FileSelector(base)):
        if info.base_name.startswith("part-") and info.base_name.endswith(".parquet"):
            filesystem.delete_file(info.path)
    sites = pa.table({"cost_multiplier": pages.site_cost_multiplier, "paused": pages.site_paused})
    pq.write_table(sites, f"{base}/sites.parquet", filesystem=filesystem)
    paths = []
    for i, part in enumerate(split_pages(pages, n_partitions, page_ids)):
        p = part.pages
        cols: dict[str, Any] = {"page_id": part.page_id}
        cols.update({c: getattr(p, c) for c in (*_FLOATS, *_INTS, *_BOOLS)})
        if p.checked_at is not None:
            cols["checked_at"] = p.checked_at
        if p.known_stale is not None:
            cols["known_stale"] = p.known_stale
        if p.notified is not None:
            cols["notified"] = p.notified
        if p.ev_bins is not None:
            cols.update({f"ev_bin_{k}": p.ev_bins[:, k] for k in range(BIN_COLUMNS)})
        path = f"{base}/part-{i:05d}.parquet"
        pq.write_table(pa.table(cols), path, filesystem=filesystem)
        paths.append(path if "://" not in root else f"{root.rstrip('/')}/part-{i:05d}.parquet")
    return paths


def read_partition(path: str, sites_path: str) -> Partition:
    """One partition from its Parquet file and the sites' file."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    filesystem, p = _fs(path)
    t = pq.read_table(p, filesystem=filesystem)
    sfs, sp = _fs(sites_path)
    sites = pq.read_table(sp, filesystem=sfs)

    def col(name: str, dtype: Any) -> Any:
        return np.ascontiguousarray(t.column(name).to_numpy(), dtype=dtype)

    names = set(t.column_names)
    pages = PlanPages(
        **{c: col(c, np.float64) for c in _FLOATS},
        **{c: col(c, np.int64) for c in _INTS},
        **{c: col(c, np.bool_) for c in _BOOLS},
        site_cost_multiplier=np.asarray(sites.column("cost_multiplier").to_numpy(), np.float64),
        site_paused=np.asarray(sites.column("paused").to_numpy(), np.bool_),
        checked_at=col("checked_at", np.float64) if "checked_at" in names else None,
        known_stale=col("known_stale", np.bool_) if "known_stale" in names else None,
        notified=col("notified", np.bool_) if "notified" in names else None,
        ev_bins=np.stack([col(f"ev_bin_{k}", np.float32) for k in range(BIN_COLUMNS)], axis=1)
        if "ev_bin_0" in names
        else None,
    )
    return Partition(pages, col("page_id", np.int64))


class PartitionHolder:
    """One partition in a Dask worker's memory (a Dask actor): a step is one
    direct call to the worker that holds it, and only its result travels."""

    def __init__(self, load: Any, *args: Any) -> None:
        self.partition: Partition = load(*args)
        self.cpu_s = 0.0

    def run(self, step: Any, arg: Any) -> Any:
        t = time.thread_time()
        self.partition, result = step(self.partition, arg)
        self.cpu_s += time.thread_time() - t
        return result

    def cpu_seconds(self) -> float:
        """CPU seconds the steps have taken on this partition so far."""
        return self.cpu_s


class DaskRunner:
    """A :class:`~recrawl.plan.cluster.PartitionRunner` whose partitions live on
    Dask workers, each in a :class:`PartitionHolder` actor: the partitions stay
    where they were loaded, steps run on every partition at once, and the
    driver receives only each step's result. A worker lost mid-plan loses its
    partitions: open them again (they are re-read from Parquet)."""

    def __init__(self, client: Any, holders: list[Any]) -> None:
        self.client = client
        self.holders = holders

    @classmethod
    def load(cls, client: Any, loads: list[tuple[Any, ...]]) -> DaskRunner:
        """Holders built on the workers by ``load(*args)`` for each ``(load, *args)``,
        dealt to the workers in turn (the scheduler alone put 10 of 16 on one
        of two workers, which then did most of every step)."""
        workers = sorted(client.scheduler_info()["workers"])
        futures = [
            client.submit(
                PartitionHolder,
                *la,
                actor=True,
                pure=False,
                workers=[workers[i % len(workers)]] if workers else None,
                allow_other_workers=True,
            )
            for i, la in enumerate(loads)
        ]
        return cls(client, client.gather(futures))

    def run(self, step: Any, arg: Any) -> list[Any]:
        calls = [h.run(step, arg) for h in self.holders]
        return [c.result() for c in calls]

    def cpu_seconds(self) -> list[float]:
        """CPU seconds the steps have taken so far, per partition (what a
        loaded machine does not inflate, unlike wall time)."""
        return [float(c.result()) for c in [h.cpu_seconds() for h in self.holders]]

    def memory_bytes(self) -> dict[str, int]:
        """Resident memory of each worker process, bytes."""

        def rss() -> int:
            import psutil  # type: ignore[import-untyped,unused-ignore]

            return int(psutil.Process().memory_info().rss)

        got: dict[str, int] = self.client.run(rss)
        return got


def open_partitions(client: Any, root: str) -> DaskRunner:
    """The partitions under ``root``, each read by a worker of ``client`` and kept there."""
    from pyarrow import fs  # type: ignore[import-untyped,unused-ignore]

    filesystem, base = _fs(root)
    infos = filesystem.get_file_info(fs.FileSelector(base))
    names = sorted(i.base_name for i in infos if i.base_name.startswith("part-"))
    prefix = root.rstrip("/")
    sites = f"{prefix}/sites.parquet"
    return DaskRunner.load(client, [(read_partition, f"{prefix}/{n}", sites) for n in names])


def plan_on_cluster(
    address: str,
    root: str,
    budget: float,
    now: float,
    *,
    pages: PlanPages | None = None,
    n_partitions: int | None = None,
    objective: Objective = "freshness",
    config: PlannerConfig | None = None,
    rng: np.random.Generator | None = None,
    timeout_s: float | None = None,
) -> tuple[ClusterPlan, ClusterModel]:
    """Re-allocate and plan one cycle of the pages under ``root`` on the Dask
    scheduler at ``address`` (``tcp://host:8786``): what ``recrawl plan
    --cluster`` runs. ``budget`` is the cycle's, billing units; the model
    gets the daily budget's score pool, as :meth:`recrawl.Engine.plan` gives it.

    With ``pages``, they are first written (:func:`write_partitions`, page
    ids their page numbers) in ``n_partitions`` partitions (default: one per
    worker thread, and at least one per 2 M pages), once the scheduler has
    answered, into a directory of this plan's own under ``root``
    (``plan-<pid>-<random>``), removed when the plan is made: planners that
    share ``root`` (service replicas, a ``recrawl plan`` by hand) do not
    read each other's partitions. ``root`` must be readable by every
    worker: a directory they share, or an object-store URL.

    Raises :class:`~recrawl.ClusterUnreachable` when no scheduler answers at
    ``address`` within ``timeout_s`` seconds, or it has no worker by then
    (default: Dask's ``distributed.comm.timeouts.connect``, 30 s unless
    ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT`` says otherwise).
    """
    import dask.config
    from dask.utils import parse_timedelta
    from distributed import Client

    cfg = config or PlannerConfig()
    if timeout_s is None:
        timeout_s = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")))
    try:
        client = Client(address, timeout=timeout_s)  # type: ignore[no-untyped-call]
    except (OSError, ValueError):
        raise ClusterUnreachable(
            f"no Dask scheduler answered at {address} within {timeout_s:g} s: "
            "start one (`dask scheduler`) or check the address"
        ) from None
    with client:
        try:
            client.wait_for_workers(1, timeout=timeout_s)
        except (OSError, TimeoutError):
            raise ClusterUnreachable(
                f"the Dask scheduler at {address} has no worker: start one with "
                f"`dask worker {address}`"
            ) from None
        where = root
        if pages is not None:
            threads = sum(client.nthreads().values())  # type: ignore[no-untyped-call]
            parts = n_partitions or max(threads, 1, -(-len(pages) // 2_000_000))
            where = f"{root.rstrip('/')}/plan-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            write_partitions(pages, where, parts)
        try:
            runner = open_partitions(client, where)
            per_day = budget * 24.0 / cfg.cycle_hours * cfg.score_pool_share()
            model = cluster_reallocate(runner, per_day, now, objective=objective, config=cfg)
            plan = cluster_plan_cycle(runner, budget, now, model=model, config=cfg, rng=rng)
            del runner
        finally:
            if where != root:
                filesystem, path = _fs(where)
                filesystem.delete_dir(path)
    return plan, model
