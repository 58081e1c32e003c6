"""``recrawl simweb``: serve a synthetic web on loopback, on the simulation clock (:mod:`recrawl.sim.web`)."""

from __future__ import annotations

import json
import math
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from recrawl.cli.common import err
from recrawl.clock import ScaledClock
from recrawl.crawl.simclock import parse_duration, simulation_clock
from recrawl.sim.web import Scenario, SimWeb, read_scenario, write_ground_truth

__all__ = ["simweb"]


def simweb(
    scenario: Annotated[
        Path | None,
        typer.Option(
            help="Sites and routes as TOML or JSON (see recrawl.sim.web.read_scenario); "
            "'example' is the shipped scenario (three routes, page types, sitemaps, feeds, "
            "listings, validators, hostile phases); default: the crawl loop's politeness "
            "scenario, direct."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Everything but the ad slots follows from it.")] = 0,
    time_scale: Annotated[
        float, typer.Option(help="Simulated seconds per real second (with --clock-origin).")
    ] = 1.0,
    clock_origin: Annotated[
        str | None,
        typer.Option(help="REAL=VIRTUAL: simulated time is VIRTUAL + (now − REAL) × --time-scale."),
    ] = None,
    days: Annotated[float, typer.Option(help="Pages change over this many simulated days.")] = 30.0,
    duration: Annotated[
        str | None,
        typer.Option("--for", help="Serve this long (simulated: 20d, 6h); default until Ctrl-C."),
    ] = None,
    urls_out: Annotated[
        Path | None,
        typer.Option("--urls", help="Write every page's URL here (for `recrawl urls add`)."),
    ] = None,
    truth: Annotated[
        Path | None,
        typer.Option(
            help="At the end, write the ground truth here: changes.jsonl (traces), "
            "requests.jsonl, sites.json, billing.json."
        ),
    ] = None,
) -> None:
    """Serve synthetic sites on 127.0.0.1 whose pages change at known times.

    Each site gets its own port; robots.txt, validators, sitemaps, feeds,
    listings, faulty pages and hostile windows as the scenario says. With
    routes, each route is a proxy port and sites are reached through them by
    name (shop.example): put the printed "routes" in recrawl.toml's [crawl]
    routes. Prints the sites' base URLs, the routes and the admin URL (the
    ground truth, live) as JSON once serving. A simulation feature: give
    `recrawl crawl` the same --time-scale and --clock-origin and both run on
    one clock.
    """  # fmt: skip
    from recrawl.sim.crawl import politeness_web
    from recrawl.testing import data_file

    if scenario is not None and str(scenario) == "example" and not scenario.exists():
        scenario = data_file("simweb.toml")
    loaded = read_scenario(scenario) if scenario is not None else Scenario(politeness_web())
    try:
        clock = simulation_clock(time_scale, clock_origin)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--time-scale/--clock-origin") from None
    origin = clock.virtual_origin if isinstance(clock, ScaledClock) else clock()
    try:
        until = clock() + parse_duration(duration) if duration else math.inf
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--for") from None
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    web = SimWeb(
        loaded.sites, clock=clock, seed=seed, origin=origin, horizon_s=days * 86400.0,
        routes=loaded.routes,
    )  # fmt: skip
    with web:
        sites = {web.spec(s).name: web.base_url(s) for s in web.sites}
        if urls_out is not None:
            urls_out.write_text("".join(u + "\n" for u in web.urls(private=True, faults=True)))
        ready = {
            "sites": sites, "origin": origin, "time_scale": time_scale,
            "routes": web.proxies, "admin": web.admin_url,
        }  # fmt: skip
        print(json.dumps(ready), flush=True)
        err.print(f"serving {len(sites)} sites; Ctrl-C stops")
        while not done.is_set() and clock() < until:
            done.wait(min(1.0, max((until - clock()) / time_scale, 0.01)))
        if truth is not None:
            written = write_ground_truth(web, truth)
            err.print(f"ground truth: {', '.join(written.values())}")
