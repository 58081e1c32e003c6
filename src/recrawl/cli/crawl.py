"""``recrawl crawl``: execute the plan, politely, cycle after cycle (:mod:`recrawl.crawl.loop`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
import sys
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from recrawl.cli.common import ConfigOpt, DbOpt, JsonOpt, cli_store, err, print_json
from recrawl.config import load_settings
from recrawl.crawl.loop import Crawler, CrawlStats, EmbeddedSource, ServiceSource, TaskSource
from recrawl.crawl.simclock import parse_duration, simulation_clock
from recrawl.observe.observation import parse_timestamp

__all__ = ["crawl"]


def _view(stats: CrawlStats) -> Table:
    t = Table(title=f"recrawl crawl — cycle {stats.cycles}", title_justify="left")
    t.add_column("site")
    t.add_column("band")
    t.add_column("state")
    t.add_column("requests", justify="right")
    t.add_column("ok", justify="right")
    t.add_column("304", justify="right")
    t.add_column("failed", justify="right")
    t.add_column("robots-disallowed", justify="right")
    t.add_column("delay s", justify="right")
    for site, s in sorted(stats.sites.items(), key=lambda kv: -kv[1].requests)[:20]:
        t.add_row(
            site, s.band, s.state, str(s.requests), str(s.ok), str(s.not_modified),
            str(s.failed), str(s.disallowed), f"{s.delay_s:.1f}",
        )  # fmt: skip
    rate = stats.requests / stats.real_seconds if stats.real_seconds > 0 else 0.0
    t.caption = (
        f"{rate:.1f} requests/s · spent {stats.spent:,.0f} of {stats.budget:,.0f} {stats.unit} · "
        f"{stats.bytes_received / 1e6:,.1f} MB received · {stats.stored} stored"
    )
    last = stats.cycle_spend[-1] if stats.cycle_spend else None
    if last is not None and last.ratio is not None:
        t.caption += (
            f"\nlast cycle's {last.fetches} fetches cost {last.reported:,.0f} {stats.unit} "
            f"against {last.expected:,.0f} planned ({100 * (last.ratio - 1):+.0f} %)"
        )
    return t


def _log_line(stats: CrawlStats) -> None:
    logging.getLogger("recrawl.crawl").info(
        "cycle=%d requests=%d ok=%d not_modified=%d failed=%d disallowed=%d spent=%.0f budget=%.0f",
        stats.cycles, stats.requests, stats.ok, stats.not_modified, stats.failed,
        stats.disallowed, stats.spent, stats.budget,
    )  # fmt: skip


async def _run(crawler: Crawler, until: float) -> CrawlStats:
    loop = asyncio.get_running_loop()
    stopping = 0

    def on_signal() -> None:
        nonlocal stopping
        stopping += 1
        if stopping == 1:
            err.print("stopping: in-flight fetches finish and are stored (Ctrl-C again to abort)")
            crawler.stop.set()
        else:
            raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on the main thread
            loop.add_signal_handler(sig, on_signal)
    return await crawler.run(until)


def crawl(
    db: DbOpt = None,
    config: ConfigOpt = None,
    duration: Annotated[
        str | None, typer.Option("--for", help="How long to crawl: 20d, 6h, 90m (crawl clock).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Crawl until this time (RFC 3339 or unix seconds).")
    ] = None,
    service: Annotated[
        str | None,
        typer.Option(
            help="Lease tasks from a running `recrawl serve` at this URL and report to it."
        ),
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="The service's write token (or $RECRAWL_TOKEN).")
    ] = None,
    worker: Annotated[
        str | None, typer.Option(help="This crawler's name in the service's leases.")
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option(
            help="Simulation: crawl time runs this many times faster than real time "
            "(with --clock-origin; for tests, demos and the synthetic web).",
            min=0.0,
        ),
    ] = 1.0,
    clock_origin: Annotated[
        str | None,
        typer.Option(
            help="Simulation: REAL=VIRTUAL; crawl time is VIRTUAL + (now − REAL) × --time-scale."
        ),
    ] = None,
    budget_per_day: Annotated[
        float | None, typer.Option(help="Override budget_per_day (billing unit).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fetch what the plan says, cycle after cycle, politely.

    robots.txt (Allow/Disallow, Crawl-delay), per-site concurrency and delay,
    Retry-After on 429/503, back-off on bursts of blocks, timeouts and 5xx and
    on rising latency, and each site's health band (degrading: half the
    concurrency, twice the delay; critical: paused, canaries only). A cycle
    never spends more than its budget. Ctrl-C stops: fetches in flight finish
    and are stored. Without --for or --until it runs until stopped.
    """
    settings = load_settings(config)
    if budget_per_day is not None:
        if not (budget_per_day > 0 and math.isfinite(budget_per_day)):
            raise typer.BadParameter("must be a positive number", param_hint="--budget-per-day")
        settings = settings.model_copy(update={"budget_per_day": budget_per_day})
    if settings.budget_per_day is None and service is None:
        raise typer.BadParameter(
            "no budget: set budget_per_day in recrawl.toml or pass it",
            param_hint="--budget-per-day",
        )
    try:
        clock = simulation_clock(time_scale, clock_origin)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--time-scale/--clock-origin") from None
    now = clock()
    end = math.inf
    try:
        if duration is not None:
            end = now + parse_duration(duration)
        if until is not None:
            end = min(end, parse_timestamp(until))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--for/--until") from None
    if not as_json:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
        )
    with cli_store(db, settings) if service is None else _nothing() as store:
        source: TaskSource
        if service is None:
            from recrawl.engine.engine import Engine

            source = EmbeddedSource(Engine(store, settings, clock=clock))
        else:
            import os

            source = ServiceSource(
                service,
                token or os.environ.get("RECRAWL_TOKEN"),
                worker=worker or f"{socket.gethostname()}-{os.getpid()}",
                unit=settings.billing_unit,
            )
        live: Live | None = None
        if sys.stderr.isatty() and not as_json:
            live = Live(console=err, refresh_per_second=2, transient=False)
            live.start()

        def progress(stats: CrawlStats) -> None:
            if live is not None:
                live.update(_view(stats))
            else:
                _log_line(stats)

        crawler = Crawler(source, settings, clock=clock, on_progress=progress)
        try:
            stats = asyncio.run(_run(crawler, end))
        finally:
            if live is not None:
                live.stop()
    if as_json:
        print_json(stats.as_dict())
    else:
        err.print(_view(stats))


class _nothing:
    def __enter__(self) -> Any:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
