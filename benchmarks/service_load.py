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
  (the warm-up lease) and at the end (the load, during which the plan is
  made again in the background while the first one serves);
* ``server_cpu_s``: CPU seconds the server used during the load, and
  ``server_cpu_us_per_observation`` (steadier than the rate on a machine
  shared with other work).

Measured (2026-12-05, 2 cores shared, ``--reporters 2 --batches 5``): 100,000
pages 851 bytes a page, 188 MB peak (489 once the URLs are registered, 851
after the first plan); 1,000,000 pages 670 bytes a page, 773 MB peak (70 /
392 / 670: the load's peak is a second plan made while the first serves).
The code before: 1,827 and 1,505 bytes a page, 286 MB and 1.61 GB.

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
        peak = _peak_rss(proc.pid)
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
                "load": round((peak - idle) / max(args.pages, 1), 1),
            },
            "server_cpu_s": round(cpu, 2),
            "server_cpu_us_per_observation": round(cpu / max(total, 1) * 1e6, 1),
            "pages": args.pages,
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
    print(json.dumps(run(ap.parse_args()), indent=2))


if __name__ == "__main__":
    main()
