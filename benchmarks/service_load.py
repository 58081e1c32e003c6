"""Service load: observations per second accepted over HTTP, lease latency, peak memory.

Starts ``recrawl serve`` in a subprocess on 127.0.0.1 (a fresh SQLite store
with ``--pages`` registered URLs), then runs ``--reporters`` concurrent
reporters, each posting NDJSON batches of ``--batch`` observations, while one
worker leases ``--lease-max`` tasks at a time in a loop (back to back, or every
``--lease-interval`` seconds). Prints one JSON object:

* ``observations_per_s``: observations acknowledged (stored on disk) per
  second of wall time, over all reporters;
* ``lease_rtt_ms``: p50, p99 and max of the lease round trip under that load
  (``lease_requests`` of them, ``tasks_leased`` tasks in all: a back-to-back
  leaser asks more often, and costs the server more, when leases are fast);
* ``server_peak_rss_bytes``: the server process's peak resident memory (VmHWM),
  and ``server_bytes_per_page``: that peak less its resident memory once
  started, before any URL, per page (what the pages cost it: plan, lease pool,
  page columns, SQLite's page cache); ``server_bytes_per_page_by_phase``:
  the same peak once the URLs are registered, once the first plan is made
  (the warm-up lease), at the end of the load, and once the plan was made
  again after it (``replan``: computed in the background while the plan
  before serves, as the load's reports ask at the first lease 5 s after the
  plan before began; the server is read once its CPU is idle again; a plan
  the load itself asked for is done by then; ``replan_cpu_s`` is the CPU it
  took, ``replanned`` whether a plan was made after the first);
  ``server_bytes_per_page_after_replan``: the resident memory then (what
  the service holds between plans). With ``--new-urls N``, N pages the
  crawl found (reported, never registered) come before that plan: it is of
  another set of pages and reads its own URLs;
* ``server_cpu_s``: CPU seconds the server used during the load, and
  ``server_cpu_us_per_observation`` (steadier than the rate on a machine
  shared with other work; a plan computed during the load counts in it).

Measured (2026-12-05, 2 cores shared, ``--reporters 2 --batches 5``, the
same hour): 1,000,000 pages 340 bytes a page, 437 MB peak (by phase 68 /
262 / 319 / 340; 169 held after the last plan), 394 with ``--new-urls
1000``; 100,000 pages 904 bytes a page, 187 MB peak (484 / 738 / 738 / 904;
694 held), 1,011 with ``--new-urls 1000``; the 484 once the URLs are
registered are fixed caches (SQLite's 16 MB page cache, the 131,072 URLs of
``normalize_url``'s, the 65,536 of the URL-id cache). The code before: 686
and 1,185-1,191 bytes a page, 783 and 215 MB (1 M: 70 / 393 / 686 / 686,
621 held; 100,000: 1,209 with ``--new-urls 1000``): it kept the plan
before and its lease pool until the next lease, read every page column to
plan, and left freed arrays resident. Until 2026-12-05 the end of the load
was the last read, the second plan not done (1 M) or not begun (100,000):
670 and 851 bytes a page.

Usage: python benchmarks/service_load.py [--reporters 8] [--batch 500] [--batches 25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss(pid: int) -> int:
    """Peak resident set size of ``pid`` in bytes (Linux VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return -1


def _rss(pid: int) -> int:
    """Resident set size of ``pid`` now, bytes (Linux VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return -1


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_idle(pid: int, timeout: float, window: float = 0.5) -> None:
    """Return once ``pid`` used under a tenth of a core for two windows in a row."""
    deadline = time.monotonic() + timeout
    calm, before = 0, _cpu_seconds(pid)
    while calm < 2 and time.monotonic() < deadline:
        time.sleep(window)
        now = _cpu_seconds(pid)
        calm = calm + 1 if now - before < 0.1 * window else 0
        before = now


def _batches(
    reporter: int, reporters: int, n_batches: int, batch: int, pages: int, t0: float
) -> list[bytes]:
    rng = np.random.default_rng(reporter)
    out = []
    for b in range(n_batches):
        lines = []
        for i in range(batch):
            # Each reporter fetches its own share of the pages, in time order, as
            # leased work arrives: no page is reported out of order.
            p = int(rng.integers(pages // reporters)) * reporters + reporter
            site = f"site{p % 20}.example"
            lines.append(
                orjson.dumps(
                    {
                        "id": f"r{reporter}-b{b}-{i}",
                        "url": f"https://{site}/item/{p}",
                        "fetched_at": t0 + (b * batch + i) * 0.1,
                        "status": 200,
                        "page_type": "product",
                        "bytes_received": 20_000,
                        "latency_ms": 150.0,
                        "route": f"pool-{i % 4}",
                        "record_hash": f"h{int(rng.integers(3))}",
                    }
                )
            )
        out.append(b"\n".join(lines))
    return out


def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="recrawl-load-")
    db = os.path.join(work, "load.db")
    cfg = os.path.join(work, "recrawl.toml")
    Path(cfg).write_text(
        f'token = "{TOKEN}"\nbudget_per_day = {args.pages * args.fetches_per_page_day}\n'
        "cycle_hours = 1\n"
        f"max_body_bytes = {64 * 1024 * 1024}\n"
    )
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "recrawl", "serve", "--db", db, "--config", cfg,
         "--port", str(port), "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    try:
        _wait_ready(base, proc)
        idle = _rss(proc.pid)
        with httpx.Client(base_url=base, headers=AUTH, timeout=120) as c:
            urls = [
                {"url": f"https://site{p % 20}.example/item/{p}", "page_type": "product"}
                for p in range(args.pages)
            ]
            for i in range(0, len(urls), 5000):
                c.post("/v1/urls", json=urls[i : i + 5000]).raise_for_status()
            registered = _peak_rss(proc.pid)
            c.post("/v1/leases", json={"worker": "warmup", "max": 1}).raise_for_status()
            planned = _peak_rss(proc.pid)
            first_done = time.time()

        t0 = time.time() - 86400
        payloads = [
            _batches(r, args.reporters, args.batches, args.batch, args.pages, t0)
            for r in range(args.reporters)
        ]
        accepted = [0] * args.reporters
        errors: list[str] = []
        rtts: list[float] = []
        leased = [0]
        stop = threading.Event()
        barrier = threading.Barrier(args.reporters + 1)

        def reporter(r: int) -> None:
            with httpx.Client(base_url=base, headers=AUTH, timeout=120) as c:
                barrier.wait()
                for body in payloads[r]:
                    resp = c.post(
                        "/v1/observations",
                        content=body,
                        headers={"Content-Type": "application/x-ndjson"},
                    )
                    if resp.status_code != 200:
                        errors.append(f"{resp.status_code} {resp.text[:200]}")
                        continue
                    accepted[r] += resp.json()["accepted"]

        def leaser() -> None:
            with httpx.Client(base_url=base, headers=AUTH, timeout=120) as c:
                n = 0
                while not stop.is_set():
                    t = time.perf_counter()
                    resp = c.post("/v1/leases", json={"worker": f"w{n % 4}", "max": args.lease_max})
                    rtts.append(time.perf_counter() - t)
                    if resp.status_code != 200:
                        errors.append(f"lease {resp.status_code}")
                    else:
                        leased[0] += len(resp.json()["tasks"])
                    n += 1
                    if args.lease_interval > 0:
                        stop.wait(args.lease_interval)

        threads = [threading.Thread(target=reporter, args=(r,)) for r in range(args.reporters)]
        for th in threads:
            th.start()
        lease_thread = threading.Thread(target=leaser)
        lease_thread.start()
        barrier.wait()
        start = time.perf_counter()
        cpu0 = _cpu_seconds(proc.pid)
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - start
        cpu = _cpu_seconds(proc.pid) - cpu0
        stop.set()
        lease_thread.join()
        loaded = _peak_rss(proc.pid)
        # the load's reports ask for the plan again, made in the background while
        # the one before serves, at the first lease 5 s (replan_min_s) after it
        # began: once the server is idle (a plan the load asked for is done),
        # ask; wait until it is idle again, then read its memory (before GET
        # /v1/plan tells whether the plan was made again)
        _wait_idle(proc.pid, args.replan_timeout)
        time.sleep(5.5)
        with httpx.Client(base_url=base, headers=AUTH, timeout=120) as c:
            if args.new_urls:  # pages found meanwhile: the plan is of another set
                found = [
                    {"url": f"https://site{p % 20}.example/new/{p}", "fetched_at": time.time() - 60,
                     "status": 200, "page_type": "product"}
                    for p in range(args.new_urls)
                ]  # fmt: skip
                body = b"\n".join(orjson.dumps(o) for o in found)
                c.post(
                    "/v1/observations",
                    content=body,
                    headers={"Content-Type": "application/x-ndjson"},
                ).raise_for_status()
            cpu1 = _cpu_seconds(proc.pid)
            c.post("/v1/leases", json={"worker": "replan", "max": 1}).raise_for_status()
            _wait_idle(proc.pid, args.replan_timeout)
            replan_cpu = _cpu_seconds(proc.pid) - cpu1
            peak = _peak_rss(proc.pid)
            kept = _rss(proc.pid)
            # (asked last: the code before counted a plan's tasks a dict at a time)
            replanned = c.get("/v1/plan", params={"limit": 0}).json()["at"] > first_done
        ms = np.array(rtts) * 1000.0
        total = sum(accepted)
        return {
            "reporters": args.reporters,
            "batch": args.batch,
            "observations_accepted": total,
            "seconds": round(elapsed, 3),
            "observations_per_s": round(total / elapsed, 1),
            "target_observations_per_s": 10_000,
            "lease_requests": int(ms.size),
            "lease_max": args.lease_max,
            "lease_interval_s": args.lease_interval,
            "tasks_leased": leased[0],
            "lease_rtt_ms": {
                "p50": round(float(np.percentile(ms, 50)), 2) if ms.size else None,
                "p99": round(float(np.percentile(ms, 99)), 2) if ms.size else None,
                "max": round(float(ms.max()), 2) if ms.size else None,
            },
            "server_peak_rss_bytes": peak,
            "server_idle_rss_bytes": idle,
            "server_bytes_per_page": round((peak - idle) / max(args.pages, 1), 1),
            "server_bytes_per_page_by_phase": {
                "urls_registered": round((registered - idle) / max(args.pages, 1), 1),
                "first_plan": round((planned - idle) / max(args.pages, 1), 1),
                "load": round((loaded - idle) / max(args.pages, 1), 1),
                "replan": round((peak - idle) / max(args.pages, 1), 1),
            },
            "replanned": replanned,
            "replan_cpu_s": round(replan_cpu, 2),
            "server_bytes_per_page_after_replan": round((kept - idle) / max(args.pages, 1), 1),
            "server_cpu_s": round(cpu, 2),
            "server_cpu_us_per_observation": round(cpu / max(total, 1) * 1e6, 1),
            "pages": args.pages,
            "new_urls": args.new_urls,
            "fetches_per_page_day": args.fetches_per_page_day,
            "errors": errors[:5],
            "cpus": os.cpu_count(),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reporters", type=int, default=8)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--batches", type=int, default=25, help="Batches per reporter.")
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument(
        "--fetches-per-page-day",
        type=float,
        default=24.0,
        help="The budget per page and day (24: every page every hourly cycle, so "
        "each cycle's plan and lease pool hold every page).",
    )
    ap.add_argument("--lease-max", type=int, default=50)
    ap.add_argument(
        "--lease-interval",
        type=float,
        default=0.0,
        help="Seconds the leasing worker waits between leases (0: lease back to back).",
    )
    ap.add_argument(
        "--new-urls",
        type=int,
        default=0,
        help="Pages reported after the load that were not registered (found by the "
        "crawl): the second plan is of another set of pages, and reads its own URLs.",
    )
    ap.add_argument(
        "--replan-timeout",
        type=float,
        default=600.0,
        help="Seconds to wait, after the load, for the second plan to be made.",
    )
    print(json.dumps(run(ap.parse_args()), indent=2))


if __name__ == "__main__":
    main()
