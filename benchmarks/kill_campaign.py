"""kill -9 campaign: SIGKILL recrawl's writers at random (seeded) moments and check exactly-once.

Usage: python benchmarks/kill_campaign.py [--kills 10] [--seed 0]
       [--targets ingest,serve,prune,crawl] [--lines 200000]

Each target runs as its own process (``python -m recrawl ...``), is killed
``--kills`` times at a random moment and restarted:

- ``ingest``: ``recrawl ingest`` of a generated JSONL log (``--lines`` lines
  without ids, so each is keyed by its line) into a new store, killed, and
  run again on that store to the end; once per kill. Acknowledged: every line
  of each round (the completed run acknowledges the file). Lost: a line whose key is not in the observation
  log; doubled: a key in the log more than once.
- ``serve``: ``recrawl serve`` taking batches of 500 observations with ids
  from a client that records each batch the service acknowledged (a 200);
  killed, restarted, and the batch in flight sent again. Lost: an
  acknowledged id not in the log; doubled: a key in the log more than once.
- ``prune``: ``recrawl prune`` of half the log from a copy of a store holding
  it, killed, then run again to the end and once more; once per kill.
  Consistent: SQLite's integrity check, the observations left are exactly the
  log's lines fetched at or after the cut-off (lost: fewer, doubled: more or
  repeated keys), the stats' counts (buckets) and the pages' state as before.
- ``crawl``: ``recrawl crawl`` against ``recrawl simweb`` on one simulation
  clock, killed and restarted; a last run ends on its own. Answered: the page
  requests the synthetic web's request log shows; stored: the crawl's
  observations (fewer by what was in flight at each kill: a crawl
  acknowledges nothing); doubled: a repeated key, a (page, time) stored
  twice, or more stored than answered; lost: observations the store held
  at a kill that were gone after.

Prints one JSON object: per target kills, acknowledged, stored, lost, doubled,
seconds and what else was checked. The load average before the run is
printed too: other work slows the processes, so kills land elsewhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

CLI = [sys.executable, "-m", "recrawl"]
DAY = 86400.0
START = 1_767_225_600.0  # recrawl.testing.fetchlog's default start


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
    return {**env, "PYTHONUNBUFFERED": "1", "RECRAWL_TOKEN": "kill-campaign", "HOME": str(tmp)}


def _store_key(key16: bytes) -> int:
    """An idempotency key as the observation log stores it (its first 8 bytes, signed)."""
    return int.from_bytes(key16[:8], "big", signed=True)


def _id_key(ident: str) -> int:
    """The stored key of an observation with ``id`` (recrawl.observe.observation keys
    an id as blake2b(b"id\\0" + id), 16 bytes)."""
    return _store_key(hashlib.blake2b(b"id\0" + ident.encode(), digest_size=16).digest())


def _kill(proc: subprocess.Popen[Any]) -> bool:
    """SIGKILL ``proc``; True when it was still running (the kill landed)."""
    running = proc.poll() is None
    if running:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return running


def _log_check(db: Path) -> dict[str, Any]:
    """What the observation log holds: rows, repeated keys, (page, time) pairs stored
    twice, and SQLite's integrity check."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        rows = con.execute("SELECT count(*) FROM observations").fetchone()[0]
        keys = con.execute("SELECT count(DISTINCT key) FROM observations").fetchone()[0]
        same = con.execute(
            "SELECT count(*) FROM (SELECT 1 FROM observations "
            "GROUP BY page, fetched_at, rest HAVING count(*) > 1)"
        ).fetchone()[0]
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()
    return {"rows": rows, "repeated_keys": rows - keys, "same_twice": same, "integrity": integrity}


def _keys(db: Path) -> dict[int, int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return dict(con.execute("SELECT key, count(*) FROM observations GROUP BY key").fetchall())
    finally:
        con.close()


# -- ingest ------------------------------------------------------------------


def campaign_ingest(tmp: Path, kills: int, rng: np.random.Generator, lines: int) -> dict[str, Any]:
    from recrawl.observe.observation import line_key
    from recrawl.testing.fetchlog import write_fetch_log

    t0 = time.monotonic()
    log = tmp / "ingest.jsonl"
    write_fetch_log(str(log), lines, n_pages=max(lines // 40, 1), with_ids=False)
    env = _env(tmp)
    t = time.monotonic()  # a complete run, elsewhere, for how long one takes
    subprocess.run([*CLI, "ingest", str(log), "--db", str(tmp / "ingest-ref.db"), "-q"], env=env,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    full = time.monotonic() - t
    landed, counts, runs = 0, [], []
    want = {_store_key(line_key(line)) for line in log.read_text().splitlines() if line.strip()}
    lost = doubled = stored = 0
    integrity = set()
    for k in range(kills):  # each kill on a store of its own, then a run to the end
        db = tmp / f"ingest-{k}.db"
        cmd = [*CLI, "ingest", str(log), "--db", str(db), "-q"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.95) * full)
        landed += _kill(proc)
        counts.append(_log_check(db)["rows"] if db.exists() else 0)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        runs.append(done.returncode)
        held = _keys(db)
        check = _log_check(db)
        stored += check["rows"]
        lost += len(want - held.keys())
        doubled += sum(c - 1 for c in held.values() if c > 1) + len(held.keys() - want)
        integrity.add(check["integrity"])
        db.unlink()
    return {
        "kills": kills, "kills_landed": landed, "acknowledged": len(want) * kills,
        "stored": stored, "lost": lost, "doubled": doubled,
        "seconds": round(time.monotonic() - t0, 1),
        "stored_at_each_kill": counts, "rerun_exits": sorted(set(runs)),
        "integrity": ",".join(sorted(integrity)), "one_full_run_s": round(full, 2),
    }  # fmt: skip


# -- serve -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(tmp: Path, db: Path, port: int) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(
        [*CLI, "serve", "--db", str(db), "--port", str(port), "--log-level", "warning"],
        env=_env(tmp), cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"recrawl serve exited {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError("recrawl serve did not start")


def campaign_serve(tmp: Path, kills: int, rng: np.random.Generator, batch: int) -> dict[str, Any]:
    import httpx

    t0 = time.monotonic()
    db, port = tmp / "serve.db", _free_port()
    (tmp / "recrawl.toml").write_text("budget_per_day = 1000\n")
    base = f"http://127.0.0.1:{port}"
    now = time.time()
    acked: list[str] = []
    sent = 0
    answers = {"stored": 0, "duplicates": 0}
    retried = 0

    def body(b: int) -> tuple[list[str], bytes]:
        ids = [f"b{b}-{i}" for i in range(batch)]
        rows = [
            json.dumps({"id": ident, "url": f"https://s{b % 7}.example/p/{i}",
                        "fetched_at": now - 3600 + b, "status": 200, "record": {"v": b}})
            for i, ident in enumerate(ids)
        ]  # fmt: skip
        return ids, ("\n".join(rows) + "\n").encode()

    stop = threading.Event()
    pending: list[int] = []  # the batch in flight when the server died, sent again

    def client() -> None:
        nonlocal sent, retried
        b = 0
        with httpx.Client(headers={"Authorization": "Bearer kill-campaign"}, timeout=30) as c:
            while not stop.is_set():
                if pending:
                    this, retry = pending.pop(), True
                else:
                    this, retry, b = b, False, b + 1
                ids, data = body(this)
                try:
                    r = c.post(f"{base}/v1/observations", content=data)
                except httpx.TransportError:
                    pending.append(this)
                    time.sleep(0.05)
                    continue
                if r.status_code != 200:
                    pending.append(this)
                    time.sleep(0.05)
                    continue
                a = r.json()
                answers["stored"] += a["stored"]
                answers["duplicates"] += a["duplicates"]
                sent += not retry
                retried += retry
                acked.extend(ids)

    landed = 0
    proc = _start_server(tmp, db, port)
    worker = threading.Thread(target=client, daemon=True)
    worker.start()
    for k in range(kills):
        time.sleep(rng.uniform(0.2, 2.0))
        landed += _kill(proc)
        if k < kills - 1:
            proc = _start_server(tmp, db, port)
    proc = _start_server(tmp, db, port)  # a last life: the batch in flight goes in
    time.sleep(0.5)
    stop.set()
    worker.join(60)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        _kill(proc)
    held = _keys(db)
    want = {_id_key(i) for i in set(acked)}
    check = _log_check(db)
    return {
        "kills": kills, "kills_landed": landed, "acknowledged": len(set(acked)),
        "stored": check["rows"], "lost": len(want - held.keys()),
        "doubled": sum(c - 1 for c in held.values() if c > 1) + len(acked) - len(set(acked)),
        "seconds": round(time.monotonic() - t0, 1),
        "batches_acknowledged": sent, "batches_sent_again_after_a_kill": retried,
        "answers": answers, "not_acknowledged_but_stored": len(held.keys() - want),
        "integrity": check["integrity"],
    }  # fmt: skip


# -- prune -------------------------------------------------------------------


def _snapshot(db: Path) -> tuple[int, str]:
    """The stats' count (buckets) and a digest of every page's state."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        n = con.execute("SELECT sum(n) FROM buckets").fetchone()[0]
        h = hashlib.sha256()
        for row in con.execute("SELECT * FROM pages ORDER BY id"):
            h.update(repr(row).encode())
        return int(n), h.hexdigest()
    finally:
        con.close()


def campaign_prune(tmp: Path, kills: int, rng: np.random.Generator, lines: int) -> dict[str, Any]:
    from recrawl.testing.fetchlog import generate_fetch_log, write_fetch_log

    t0 = time.monotonic()
    log, db = tmp / "prune.jsonl", tmp / "prune.db"
    write_fetch_log(str(log), lines, n_pages=max(lines // 40, 1), with_ids=False)
    env = _env(tmp)
    subprocess.run([*CLI, "ingest", str(log), "--db", str(db), "-q"], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    before = _snapshot(db)
    times = np.array(
        [o["fetched_at"] for o in generate_fetch_log(lines, n_pages=max(lines // 40, 1))]
    )
    cut = START + 15 * DAY  # about half the log goes
    expect = int((times >= cut).sum())
    prune = [*CLI, "prune", "--before", str(cut), "-q", "--db"]
    t = time.monotonic()  # how long one run takes, on a copy
    ref = tmp / "prune-ref.db"
    shutil.copy(db, ref)
    subprocess.run([*prune, str(ref)], env=env, check=True, stdout=subprocess.DEVNULL)
    full = time.monotonic() - t
    landed, rows_after, exits, reruns = 0, [], set(), set()
    lost = doubled = stored = 0
    integrity, stats, unchanged = set(), set(), True
    for _ in range(kills):  # each kill on a copy of the store, then a run to the end
        shutil.copy(db, ref)
        proc = subprocess.Popen(
            [*prune, str(ref)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.3, 1.0) * full)
        landed += _kill(proc)
        rows_after.append(_log_check(ref)["rows"])
        exits.add(subprocess.run([*prune, str(ref)], env=env, capture_output=True).returncode)
        again = subprocess.run([*prune, str(ref)], env=env, capture_output=True, text=True)
        reruns.add(
            again.stdout.strip().split(" observations")[0] + f" removed, exit {again.returncode}"
        )
        after = _snapshot(ref)
        check = _log_check(ref)
        stored += check["rows"]
        lost += max(expect - check["rows"], 0)
        doubled += max(check["rows"] - expect, 0) + check["repeated_keys"]
        integrity.add(check["integrity"])
        stats.add(after[0])
        unchanged &= after[1] == before[1]
    return {
        "kills": kills, "kills_landed": landed, "acknowledged": expect * kills,
        "stored": stored, "lost": lost, "doubled": doubled,
        "seconds": round(time.monotonic() - t0, 1),
        "observations_ingested": lines, "left_after_each_prune": expect,
        "rows_after_each_kill": rows_after,
        "stats_count_before_after": [before[0], sorted(stats)],
        "pages_unchanged": unchanged, "integrity": ",".join(sorted(integrity)),
        "finishing_run_exits": sorted(exits), "run_again": sorted(reruns),
        "one_run_s": round(full, 2),
    }  # fmt: skip


# -- crawl -------------------------------------------------------------------


def campaign_crawl(tmp: Path, kills: int, rng: np.random.Generator, pages: int) -> dict[str, Any]:
    t0 = time.monotonic()
    env = _env(tmp)
    scale = DAY / 20  # a simulated day in 20 real seconds
    real0, virtual0 = time.time() + 3.0, 1_800_000_000.0
    clock = ["--time-scale", str(scale), "--clock-origin", f"{real0}={virtual0}"]
    (tmp / "web.toml").write_text(
        f'[[sites]]\nname = "shop"\nn_pages = {pages}\nrate_per_day = 2.0\n'
        f'[[sites]]\nname = "blog"\nn_pages = {pages // 2}\nrate_per_day = 0.5\n'
    )
    web = subprocess.Popen(
        [*CLI, "simweb", "--scenario", "web.toml", "--seed", "3", "--urls", "urls.txt",
         "--truth", "truth", *clock],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    db = tmp / "crawl.db"
    try:
        assert web.stdout is not None
        json.loads(web.stdout.readline())
        (tmp / "recrawl.toml").write_text(
            "budget_per_day = 2000\n[crawl]\nallow_private_networks = true\nmin_delay_s = 5\n"
        )
        subprocess.run([*CLI, "urls", "add", "urls.txt", "--db", str(db)], cwd=tmp, env=env,
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        landed, counts, shrank = 0, [], 0
        ended: list[str] = []  # runs that had ended before their kill, and how
        for _ in range(kills):
            with (tmp / "crawl.err").open("w") as errs:
                proc = subprocess.Popen(
                    [*CLI, "crawl", "--db", str(db), "--for", "30d", "--json", *clock],
                    cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=errs,
                )  # fmt: skip
                time.sleep(rng.uniform(2.0, 5.0))
                if not _kill(proc):
                    ended.append(
                        f"exit {proc.returncode}: " + (tmp / "crawl.err").read_text()[-300:]
                    )
                    continue
                landed += 1
            n = _log_check(db)["rows"]
            shrank += bool(counts and n < counts[-1])
            counts.append(n)
        last = subprocess.run(
            [*CLI, "crawl", "--db", str(db), "--for", "2h", "--json", *clock],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        summary = json.loads(last.stdout) if last.returncode == 0 else {}
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=60)
    finally:
        if web.poll() is None:
            _kill(web)
    requests = [json.loads(x) for x in (tmp / "truth/requests.jsonl").read_text().splitlines()]
    answered = [r for r in requests if r["path"] != "/robots.txt" and r.get("status") is not None]
    check = _log_check(db)
    return {
        "kills": kills, "kills_landed": landed, "acknowledged": len(answered),
        "stored": check["rows"], "lost": shrank,
        "doubled": check["repeated_keys"] + check["same_twice"]
        + max(check["rows"] - len(answered), 0),
        "seconds": round(time.monotonic() - t0, 1),
        "answered_not_stored": len(answered) - check["rows"], "ended_before_kill": ended,
        "stored_at_each_kill": counts, "last_run_exit": last.returncode,
        "last_run_requests": summary.get("requests"), "last_run_stored": summary.get("stored"),
        "integrity": check["integrity"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10, help="kills per target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", default="ingest,serve,prune,crawl")
    ap.add_argument("--lines", type=int, default=200_000, help="lines of the ingest/prune log")
    ap.add_argument("--batch", type=int, default=500, help="observations a POST to serve")
    ap.add_argument("--pages", type=int, default=40, help="pages of the synthetic web's shop")
    args = ap.parse_args(argv)
    runs = {
        "ingest": lambda tmp, rng: campaign_ingest(tmp, args.kills, rng, args.lines),
        "serve": lambda tmp, rng: campaign_serve(tmp, args.kills, rng, args.batch),
        "prune": lambda tmp, rng: campaign_prune(tmp, args.kills, rng, args.lines),
        "crawl": lambda tmp, rng: campaign_crawl(tmp, args.kills, rng, args.pages),
    }
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown := set(targets) - runs.keys():
        ap.error(f"unknown target(s) {sorted(unknown)}: choose from {sorted(runs)}")
    result: dict[str, Any] = {"seed": args.seed, "load_before": round(os.getloadavg()[0], 2)}
    for name in targets:  # each target's moments from the seed and its name alone
        rng = np.random.default_rng([args.seed, list(runs).index(name)])
        with tempfile.TemporaryDirectory(prefix=f"kill-{name}-") as d:
            result[name] = runs[name](Path(d), rng)
        print(json.dumps({name: result[name]}), file=sys.stderr, flush=True)
    result["ok"] = all(
        result[t]["lost"] == 0 and result[t]["doubled"] == 0 and result[t]["integrity"] == "ok"
        for t in targets
    )
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
