"""The ``recrawl`` command: a thin edge over the library."""

from __future__ import annotations

import csv
import functools
import gc
import gzip
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from recrawl import __version__
from recrawl._exceptions import ClusterUnreachable, Error, InvalidObservation
from recrawl.cli.common import (
    AtOpt,
    ConfigOpt,
    DbOpt,
    JsonOpt,
    Rejections,
    RejectsOpt,
    RowsOpt,
    at_required,
    at_time,
    cli_store,
    err,
    extra_sentence,
    iso,
    missing_module,
    out,
    print_json,
    require_extra,
    rows_shown,
    write_json,
)
from recrawl.cli.crawl import crawl
from recrawl.cli.hints import hints_app
from recrawl.cli.simweb import simweb
from recrawl.config import Settings, load_settings
from recrawl.engine.engine import BudgetOutlook, Engine, PlanResult, url_registration
from recrawl.engine.ingest import IngestReport, fewer_collections
from recrawl.engine.pipeline import prune_log
from recrawl.engine.results import CalibrationReport, PageTable, health_overview, site_detail
from recrawl.engine.stats import Stats
from recrawl.estimate.calibration import Calibration
from recrawl.observe.compression import is_gzip
from recrawl.observe.observation import not_utf8, parse_timestamp
from recrawl.store import default_db
from recrawl.testing.samples import data_file

app = typer.Typer(
    name="recrawl",
    help="Decide what a long-running crawler should fetch next under a budget, "
    "and notice when a site starts pushing back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from recrawl import __version__

        print(f"recrawl {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


def _pct(x: float) -> str:
    """A share as a percentage, with as many decimals as it needs (up to 3)."""
    for d in range(4):
        if abs(round(x * 100, d) - x * 100) < 1e-9:
            break
    return f"{x * 100:.{d}f}%"


def _fmt_num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


@contextmanager
def _open_inputs(
    files: list[str], fmt: str | None = None
) -> Iterator[list[tuple[str, TextIO, int]]]:
    """Each file (``-``: stdin) as ``(name, text stream, size or 0)``.

    A CSV input (``fmt``, else by its name) ends lines as the csv module reads
    them (CR, LF or CRLF; a quoted field may hold any); any other ends them at
    LF only, as the service splits a body: a raw CR inside a JSON line is that
    line's (JSON whitespace between tokens), and a CRLF ending is stripped with
    the line's other surrounding whitespace."""
    with ExitStack() as stack:
        opened = []
        for name in files:
            newline = "" if (fmt or ("csv" if _is_csv(name) else "jsonl")) == "csv" else "\n"
            # a byte that is not UTF-8 reaches the parser as a lone surrogate, which
            # rejects that line alone; a byte-order mark (Excel's "CSV UTF-8") is dropped
            if name == "-":
                stdin = sys.stdin
                if hasattr(stdin, "buffer"):
                    stdin = io.TextIOWrapper(
                        stdin.buffer,
                        encoding="utf-8-sig",
                        errors="surrogateescape",
                        newline=newline,
                    )
                opened.append(("stdin", stdin, 0))
                continue
            p = Path(name)
            if not p.is_file():
                raise typer.BadParameter(f"{name} is not a readable file", param_hint="FILE")
            enc, errs = "utf-8-sig", "surrogateescape"
            with p.open("rb") as probe:
                gzipped = is_gzip(probe.read(2))
            if gzipped:  # a compressed log is read as it is: its size says nothing of its lines
                gz = stack.enter_context(
                    gzip.open(p, "rt", encoding=enc, errors=errs, newline=newline)
                )
                opened.append((name, gz, 0))
            else:
                opened.append(
                    (
                        name,
                        stack.enter_context(p.open(encoding=enc, errors=errs, newline=newline)),
                        p.stat().st_size,
                    )
                )
        yield opened


def _is_csv(name: str) -> bool:
    """A file named as CSV (gzipped or not)."""
    return name.lower().removesuffix(".gz").endswith(".csv")


class _Counting:
    """Wraps a text stream, counting characters read (for the progress bar)."""

    def __init__(self, f: TextIO) -> None:
        self.f = f
        self.pos = 0

    def __iter__(self) -> Iterator[str]:
        for line in self.f:
            self.pos += len(line)
            yield line


@app.command()
def ingest(
    files: Annotated[list[str], typer.Argument(help="JSONL or CSV fetch logs; '-' reads stdin.")],
    db: DbOpt = None,
    config: ConfigOpt = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="jsonl or csv (default: from the file name).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    rejects: RejectsOpt = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Now, for the check of future dates (RFC 3339 or unix seconds; default "
            "the clock): a line fetched more than an hour after it is rejected. For a log "
            "of a crawl run on a simulated clock.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store fetch observations (JSONL or CSV, SPEC §5).

    Bad lines are skipped and every one is named (on stderr, or in the --rejects
    file), then counted by field; good lines are stored. A JSONL line ends at LF
    only (a CR inside it is its own, as the service reads a body). Exits 1 when
    any line was rejected."""
    settings = load_settings(config)
    if fmt is not None and fmt not in ("jsonl", "csv"):
        raise typer.BadParameter("must be jsonl or csv", param_hint="--format")
    total = IngestReport()
    now = at_time(at)
    with ExitStack() as stack:
        inputs = stack.enter_context(_open_inputs(files, fmt))  # each there, before writing
        named = Rejections.open(rejects, stack)
        store = cli_store(db, settings)
        stack.callback(store.close)
        engine = Engine(store, settings)
        _ingest_inputs(
            engine, inputs, fmt, quiet, total, named, engine.clock() if now is None else now
        )
    named.summary()
    if as_json:
        print_json(
            {"read": total.read, "stored": total.stored, "duplicates": total.duplicates,
             "rejected": total.rejected, "rejected_by_field": named.by_field,
             "reordered_pages": total.reordered_pages}
        )  # fmt: skip
    else:
        _say_ingested(total)
    if total.rejected:
        raise typer.Exit(1)


def _say_ingested(total: IngestReport) -> None:
    out.print(
        f"{total.stored:,} observations stored, {total.duplicates:,} already known, "
        f"{total.rejected:,} rejected"
        + (
            f" ({total.reordered_pages:,} times a page's late observations were put in time order)"
            if total.reordered_pages
            else ""
        )
    )


def _ingest_inputs(
    engine: Engine,
    inputs: list[tuple[str, TextIO, int]],
    fmt: str | None,
    quiet: bool,
    total: IngestReport,
    named: Rejections,
    now: float,
) -> None:
    """``recrawl ingest``'s reading: each input into ``total``, each rejection
    named by ``named``; a line dated more than an hour after ``now`` is one."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[stored]:,} stored"), TimeRemainingColumn(),
        console=err, disable=quiet or not err.is_terminal, transient=True,
    )  # fmt: skip
    with progress:
        for name, f, size in inputs:
            kind = fmt or ("csv" if _is_csv(name) else "jsonl")
            task = progress.add_task(name, total=size or None, stored=0)
            counting = _Counting(f)

            def tick(rep: IngestReport, task: Any = task, counting: _Counting = counting) -> None:
                progress.update(task, completed=counting.pos, stored=rep.stored)

            def show(exc: InvalidObservation, name: str = name) -> None:
                named.error(name, exc)

            kind_lit: Literal["jsonl", "csv"] = "csv" if kind == "csv" else "jsonl"
            rep = engine.ingest_lines(counting, fmt=kind_lit, on_batch=tick, on_error=show, now=now)
            total.read += rep.read + rep.rejected
            total.stored += rep.stored
            total.duplicates += rep.duplicates
            total.rejected += rep.rejected
            total.reordered_pages += rep.reordered_pages


def _print_stats(data: dict[str, Any]) -> None:
    unit = data["unit"]
    table = Table(title=f"Fetch stats (cost in {unit})", title_justify="left")
    for col in (
        "site",
        "type",
        "fetches",
        "revisits",
        "changes",
        "no change",
        "cost",
        "per change",
    ):
        table.add_column(col, justify="left" if col in ("site", "type") else "right", no_wrap=True)
    for g in data["groups"]:
        table.add_row(
            escape(g["site"]), escape(g["page_type"]), _fmt_num(g["fetches"]), _fmt_num(g["revisits"]),
            _fmt_num(g["changes_detected"]), _fmt_num(g["fetches_without_change"]),
            _fmt_num(g["cost"]), _fmt_num(g["cost_per_change"]),
        )  # fmt: skip
    t = data["total"]
    table.add_row(
        "[b]total[/]", "", _fmt_num(t["fetches"]), _fmt_num(t["revisits"]),
        _fmt_num(t["changes_detected"]), _fmt_num(t["fetches_without_change"]),
        _fmt_num(t["cost"]), _fmt_num(t["cost_per_change"]), end_section=True,
    )  # fmt: skip
    out.print(table)


@app.command()
def stats(
    db: DbOpt = None,
    config: ConfigOpt = None,
    unit: Annotated[
        str | None,
        typer.Option("--unit", help="Billing unit: fetches, bytes or credits (default: config)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fetches, changes, fetches that found no change and cost per change, per site and type.

    A revisit is a fetch of a page reached before: a page's first success and
    the failures before it (a 404, a block, a timeout on a URL never reached)
    are first fetches. Changes and fetches without change count revisits that
    reached the page; a failed revisit is a revisit that found neither.
    """
    settings = load_settings(config)
    u = unit or settings.billing_unit
    if u not in ("fetches", "bytes", "credits"):
        raise typer.BadParameter("must be fetches, bytes or credits", param_hint="--unit")
    with cli_store(db, existing=True) as store:
        data = Stats.of(store.group_totals(), u).as_dict()  # type: ignore[arg-type]
    if as_json:
        print_json(data)
    else:
        _print_stats(data)


_URL_COLUMNS = {"url", "site", "page_type", "value"}
urls_app = typer.Typer(help="Register URLs for discovery.", no_args_is_help=True)
app.add_typer(urls_app, name="urls")
app.command("crawl")(crawl)
app.command("simweb")(simweb)


_HEADER_CELL = re.compile(r"[a-z_][a-z0-9_ ]*")


def _is_header(names: list[str]) -> bool:
    """A URL file's first line names columns: ``url``, or two or more cells that
    are all names (letters, digits, _ and spaces), none of them a URL."""
    if names == ["url"]:
        return True
    return len(names) > 1 and all(_HEADER_CELL.fullmatch(n) for n in names)


_FIELD_BLAMED = re.compile(r"field '([^']+)': (.*)", re.DOTALL)
"""A reason that names its field (as :func:`url_registration` words them)."""


@dataclass
class _UrlRows:
    """URL rows read from a file: the good ones (first of each URL), how many
    lines were rejected and how many repeated an earlier URL."""

    rows: list[dict[str, Any]]
    bad: int
    repeated: int


def _read_url_rows(
    file: str,
    named: Rejections,
    *,
    site: str | None = None,
    page_type: str | None = None,
    value: float | None = None,
) -> _UrlRows:
    """The rows of a URL file (see ``urls add``), each checked with
    :func:`url_registration`; every rejected line is named by ``named``."""
    rows: list[dict[str, Any]] = []
    bad = 0
    with _open_inputs([file]) as inputs:
        name, f, _ = inputs[0]
        lines = list(f)

    def reject(n: int, why: str) -> None:
        nonlocal bad
        bad += 1
        blamed = _FIELD_BLAMED.match(why)
        if blamed:
            named(name, n, blamed[1], blamed[2])
        else:
            named(name, n, None, why)

    header: list[str] | None = None
    csv_default = _is_csv(name)
    seen: set[str] = set()
    repeated = 0
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        why = not_utf8(text)
        if why is not None:
            reject(n, why)
            continue
        row: dict[str, Any]
        if text.startswith("{"):
            try:
                row = json.loads(text)
            except ValueError:
                reject(n, "not JSON")
                continue
            if not isinstance(row, dict):
                reject(n, "not a JSON object")
                continue
        else:
            cells = next(csv.reader([text]))
            names = [c.strip().lower() for c in cells]
            if header is None and not rows and not bad and _is_header(names):
                if "url" not in names or not set(names) <= _URL_COLUMNS:
                    raise typer.BadParameter(
                        f"{name}: its header ({', '.join(names)}) "
                        + (
                            "names no url column"
                            if "url" not in names
                            else f"names columns recrawl does not know "
                            f"({', '.join(n for n in names if n not in _URL_COLUMNS)})"
                        )
                        + "; name them url and any of site, page_type, value (nothing registered)",
                        param_hint="FILE",
                    )
                header = names
                continue
            if header is None and not csv_default:
                row = {"url": text}
            else:
                cols = header or ["url", "site", "page_type", "value"]
                if len(cells) > len(cols):
                    reject(n, f"{len(cells)} cells for {len(cols)} columns")
                    continue
                row = dict(zip(cols, (c.strip() for c in cells), strict=False))
        row = {k: v for k, v in row.items() if v not in (None, "")}
        if site:
            row["site"] = site
        if page_type:
            row["page_type"] = page_type
        if value is not None:
            row["value"] = value
        if "url" not in row:
            reject(n, "field 'url': is missing")
            continue
        try:
            url = url_registration(row)[0]
        except (ValueError, TypeError) as exc:
            reject(n, str(exc))
            continue
        if url in seen:
            repeated += 1
            continue
        seen.add(url)
        row["url"] = url
        rows.append(row)
    return _UrlRows(rows, bad, repeated)


@urls_app.command("add")
def urls_add(
    file: Annotated[
        str,
        typer.Argument(
            help="One URL per line, or JSONL/CSV with url[,site,page_type,value]; '-' reads stdin."
        ),
    ],
    db: DbOpt = None,
    site: Annotated[
        str | None, typer.Option(help="Site for every URL (default: its host).")
    ] = None,
    page_type: Annotated[
        str | None, typer.Option("--page-type", help="Page type for every URL.")
    ] = None,
    value: Annotated[
        float | None, typer.Option(help="Value tier for every URL (default 1).")
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Also re-tier URLs already known: set their value to the file's (or --value).",
        ),
    ] = False,
    rejects: RejectsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register new URLs: they have no history, so the planner's discovery reserve fetches them.

    A plain file holds one URL per line (commas and all). A CSV needs a header
    naming its columns (url and any of site, page_type, value), or a name
    ending in .csv for the columns in that order (a header naming no url, or
    another column, refuses the file); lines starting with { are
    JSON objects with those keys. Blank lines and # comments are skipped.
    Every rejected line is named (on stderr, or in the --rejects file) and
    the rest registered; exits 1 when any was rejected.
    With --update, the URLs already known take the value given (their site,
    page type and history stay); a URL given no value keeps its own.
    """
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter("must be a number ≥ 0", param_hint="--value")
    if page_type == "canary":
        raise typer.BadParameter(
            "'canary' is reserved for canaries (recrawl canary add)", param_hint="--page-type"
        )
    with ExitStack() as stack:
        named = Rejections.open(rejects, stack)
        got = _read_url_rows(file, named, site=site, page_type=page_type, value=value)
    named.summary()
    rows = got.rows
    retiered = 0
    with cli_store(db) as store:
        engine = Engine(store)
        added = engine.add_urls(rows)
        if update:
            retiered = engine.update_values([r for r in rows if "value" in r])
    _url_summary(
        as_json,
        {"received": len(rows), "added": added, "known": len(rows) - added,
         "updated": retiered, "repeated": got.repeated, "rejected": got.bad},
        f"{added:,} new URLs registered, {len(rows) - added:,} already known"
        + (f" ({retiered:,} re-tiered)" if update else "")
        + ", ",
    )  # fmt: skip


def _url_summary(as_json: bool, counts: dict[str, int], text: str) -> None:
    """What `urls add` or `urls remove` did, in JSON or a line (``text``, then
    the repeated and rejected counts); exit 1 if input rows were rejected."""
    if as_json:
        print_json(counts)
    else:
        repeated, bad = counts["repeated"], counts["rejected"]
        out.print(
            text
            + (f"{repeated:,} repeated in the input, " if repeated else "")
            + f"{bad:,} rejected"
        )
    if counts["rejected"]:
        raise typer.Exit(1)


@urls_app.command("remove")
def urls_remove(
    file: Annotated[
        str,
        typer.Argument(help="The URLs, in any form `urls add` reads; '-' reads stdin."),
    ],
    db: DbOpt = None,
    rejects: RejectsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Forget URLs: their pages, fetch logs, leases and canaries leave the store.

    Stats and health keep the counts they hold. A URL that a fetcher reports,
    or that is registered, again later starts over as a new page.
    """
    with ExitStack() as stack:
        named = Rejections.open(rejects, stack)
        got = _read_url_rows(file, named)
    named.summary()
    with cli_store(db, existing=True) as store:
        removed = Engine(store).remove_urls([r["url"] for r in got.rows])
    _url_summary(
        as_json,
        {"received": len(got.rows), "removed": removed, "unknown": len(got.rows) - removed,
         "repeated": got.repeated, "rejected": got.bad},
        f"{removed:,} URLs removed, {len(got.rows) - removed:,} not in the store, ",
    )  # fmt: skip


@urls_app.command("list")
def urls_list(
    db: DbOpt = None,
    site: Annotated[str | None, typer.Option("--site", help="Only this site's URLs.")] = None,
    page_type: Annotated[
        str | None, typer.Option("--page-type", help="Only URLs of this page type.")
    ] = None,
    limit: RowsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The URLs the store knows, by URL: site, page type, value, state (new: never
    fetched, known, gone, moved) and last fetch. Canaries are listed by
    `recrawl canary list`."""
    with cli_store(db, existing=True) as store:
        rows = Engine(store).urls(site=site, page_type=page_type)
    shown = rows[: rows_shown(limit, as_json)]
    if as_json:
        write_json(shown)
        return
    t = Table(title=f"URLs: {len(rows):,}", title_justify="left")
    for col in ("url", "site", "type", "value", "state", "last fetch"):
        t.add_column(
            col, justify="right" if col == "value" else "left", overflow="fold" if col == "url" else "ellipsis"
        )  # fmt: skip
    for r in shown:
        t.add_row(
            escape(r["url"]), escape(r["site"]), escape(r["page_type"]), _fmt_num(r["value"]),
            r["state"], "–" if r["last_fetch"] is None else iso(r["last_fetch"]),
        )  # fmt: skip
    out.print(t)
    if len(rows) > len(shown):
        out.print(f"{len(rows) - len(shown):,} more (--limit, or --json for every one)")


@app.command()
def plan(
    budget: Annotated[
        float | None,
        typer.Option(
            help="This cycle's budget in the billing unit (default: budget_per_day × cycle length)."
        ),
    ] = None,
    db: DbOpt = None,
    config: ConfigOpt = None,
    objective: Annotated[str | None, typer.Option(help="freshness (default) or events.")] = None,
    policy: Annotated[
        str, typer.Option(help="recrawl, greedy, uniform, proportional or nutch.")
    ] = "recrawl",
    at: AtOpt = None,
    limit: Annotated[
        int, typer.Option(help="Rows shown in the table (JSON has every task).", min=0)
    ] = 50,
    as_json: JsonOpt = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="Plan on this Dask scheduler, tcp://host:8786 (default: the cluster setting).",
            show_default=False,
        ),
    ] = None,
    parquet: Annotated[
        str | None,
        typer.Option(
            help="Where --cluster exports the page state: a directory every worker reads, "
            "or an s3://… URL (default: <store>.parquet beside a SQLite store).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The next cycle's fetch tasks, best first, each with why it was chosen.

    With --json, each task also carries the ``headers`` of a conditional
    request (If-None-Match / If-Modified-Since), as a lease does: none for
    verification and canary tasks, or for a site whose validators are off.
    With --cluster, the plan is computed on a Dask cluster (recrawl policy).
    """
    settings = load_settings(config)
    if cluster or settings.cluster:
        require_extra("recrawl plan --cluster", "cluster")
    elif parquet is not None:
        raise typer.BadParameter(
            "needs --cluster (or cluster in recrawl.toml)", param_hint="--parquet"
        )
    if objective is not None and objective not in ("freshness", "events"):
        raise typer.BadParameter("must be freshness or events", param_hint="--objective")
    if budget is not None and not (budget >= 0 and math.isfinite(budget)):
        raise typer.BadParameter("must be a number ≥ 0", param_hint="--budget")
    now = at_time(at)
    with cli_store(db, settings, existing=True) as store:
        engine = Engine(store, settings)
        try:
            result = engine.plan(
                budget=budget, now=now, objective=objective, policy=policy,
                cluster=cluster, parquet=parquet,
            )  # fmt: skip
        except ClusterUnreachable as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        doc = engine.plan_dict(result) if as_json else None
    if doc is not None:
        write_json(doc)  # a task per row: rich's print_json takes minutes over 100,000
        return
    _print_plan(result, settings.billing_unit, limit)


def _print_plan(result: PlanResult, unit: str, limit: int) -> None:
    table = Table(
        title=f"Plan: {len(result.tasks):,} tasks, {result.spent:,.2f} of {result.budget:,.2f} {unit}",
        title_justify="left",
    )
    for col in ("url", "reason", "priority", "expected gain", "cost"):
        table.add_column(
            col,
            justify="left" if col in ("url", "reason") else "right",
            overflow="fold" if col == "url" else "ellipsis",
        )
    for t in result.tasks[:limit]:
        table.add_row(
            escape(t["url"]),
            t["reason"] + (f" ({escape(sig)})" if (sig := result.signals.get(t["url"])) else ""),
            f"{t['priority']:.4g}",
            f"{t['expected_gain']:.4f}",
            f"{t['cost']:.4g}",
        )
    out.print(table)
    if len(result.tasks) > limit:
        out.print(f"… {len(result.tasks) - limit:,} more (use --json or --limit)")
    out.print("by reason: " + ", ".join(f"{k} {v:,}" for k, v in sorted(result.split().items())))
    if result.resolution is not None and result.resolution.revisited:
        advice = result.resolution.advice()
        out.print(
            f"rates: {result.resolution.summary()}." + (f"\n[yellow]{advice}[/]" if advice else "")
        )


@app.command()
def budget(
    freshness: Annotated[
        list[float] | None,
        typer.Option(
            "--freshness",
            help="Mean freshness to price, between 0 and 1 (repeat; default 0.8, 0.9, 0.95).",
            show_default=False,
        ),
    ] = None,
    per_day: Annotated[
        float | None,
        typer.Option(
            "--per-day",
            help="Daily budget to assess, billing units (default: budget_per_day).",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: AtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What each level of freshness would cost per day, at the rates learned so far.

    Model figures (Poisson changes at each page's estimated rate), for the
    pages fetched so far: the budget the planner's allocation needs, against one
    interval for every page, and the freshness a daily budget buys.
    """
    settings = load_settings(config)
    targets = freshness or [0.8, 0.9, 0.95]
    for x in targets:
        if not 0.0 < x < 1.0:
            raise typer.BadParameter(f"{x} is not between 0 and 1", param_hint="--freshness")
    if per_day is not None and not (per_day > 0 and math.isfinite(per_day)):
        raise typer.BadParameter("must be a positive number", param_hint="--per-day")
    now = at_time(at)
    with cli_store(db, settings, existing=True) as store:
        outlook = Engine(store, settings).budget_outlook(targets, budget_per_day=per_day, now=now)
    if as_json:
        print_json(outlook.as_dict())
        return
    _print_budget(outlook, settings.billing_unit)


@app.command()
def pages(
    site: Annotated[
        str | None, typer.Option("--site", help="Only this site's pages.", show_default=False)
    ] = None,
    sort: Annotated[
        Literal["rate", "due", "value", "cost"],
        typer.Option(
            help="rate (fastest first), due (soonest first), value or cost (highest first)."
        ),
    ] = "rate",
    limit: RowsOpt = None,
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: AtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What recrawl believes of each page: its change rate per day with a 90 %
    interval, the evidence behind it, its cost, its visits, when it is next due
    and its state.

    The document of ``GET /v1/pages`` (times in unix seconds); the fields are
    those of :meth:`Engine.pages <recrawl.engine.engine.Engine.pages>`.
    """
    settings = load_settings(config)
    now = at_time(at)
    shown = rows_shown(limit, as_json)
    with cli_store(db, settings, existing=True) as store:
        table = Engine(store, settings).pages(site=site, now=now, limit=shown, sort=sort)
    if as_json:
        write_json(table.as_dict())
        return
    _print_pages(table)


@app.command()
def signals(
    site: Annotated[
        str | None, typer.Option("--site", help="Only this site.", show_default=False)
    ] = None,
    db: DbOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What each cheap signal cost per change it found, per site: its own reads
    (sitemaps, feeds, listing pages) plus the fetches it caused (it proved the
    page changed), over the changes those fetches found; ``schedule`` is every
    other fetch. Also the items per site that left every listing.

    The document of ``GET /v1/signals``; the fields are those of
    :meth:`Engine.signal_costs <recrawl.engine.engine.Engine.signal_costs>`.
    """
    settings = load_settings(config)
    with cli_store(db, settings, existing=True) as store:
        doc = Engine(store, settings).signal_report(site=site)
    if as_json:
        print_json(doc)
        return
    unit = doc["unit"]
    t = Table(title=f"Cost per change found, per signal (in {unit})", title_justify="left")
    for col in ("site", "signal", "reads", "read cost", "fetches", "fetch cost", "changes",
                "cost/change"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("site", "signal") else "right")
    for r in doc["signals"]:
        t.add_row(
            escape(r["site"]), escape(r["signal"]), f"{r['reads']:,}", f"{r['read_cost']:,.4g}",
            f"{r['fetches']:,}", f"{r['fetch_cost']:,.4g}", f"{r['changes']:,}",
            "–" if r["per_change"] is None else f"{r['per_change']:,.4g}",
        )  # fmt: skip
    out.print(t)
    if not doc["signals"]:
        out.print("No fetch counted per signal yet (`recrawl crawl` counts them).")
    for s, n in doc["delisted"].items():
        out.print(f"{escape(s)}: {n:,} item{'s' if n != 1 else ''} left every listing")


def _print_pages(table: PageTable) -> None:
    rows = table.pages
    where = f" of {table.site}" if table.site else ""
    t = Table(
        title=f"Pages{escape(where)}: {table.total:,}, by {table.sort}; "
        f"cost in {table.billing_unit}, rates per day (90 % interval)",
        title_justify="left",
    )
    for col in (
        "url",
        "state",
        "rate/day",
        "90 % interval",
        "evidence",
        "cost",
        "visits/day",
        "next due",
    ):
        t.add_column(
            col,
            justify="left" if col in ("url", "state", "next due") else "right",
            overflow="fold" if col == "url" else "ellipsis",
        )
    for r in rows:
        fails = f" ({r['fails']})" if r["state"] == "backing_off" else ""
        t.add_row(
            escape(r["url"]),
            r["state"] + fails,
            f"{r['rate_per_day']:.3g}",
            f"{r['rate_low_per_day']:.3g}–{r['rate_high_per_day']:.3g}",
            f"{r['evidence_changed']:.3g} ch / {r['evidence_unchanged']:.3g} same, "
            f"{r['evidence_days']:.3g} d",
            f"{r['cost']:.4g}",
            f"{r['visits_per_day']:.3g}",
            "–" if r["next_due"] is None else iso(r["next_due"]),
        )
    out.print(t)
    if table.total > len(rows):
        out.print(f"… {table.total - len(rows):,} more not shown (use --limit or --json)")
    out.print("by state: " + ", ".join(f"{k} {v:,}" for k, v in sorted(table.states.items())))


@app.command()
def calibration(
    days: Annotated[
        float, typer.Option("--days", help="Check the revisits of the last N days of the log.")
    ] = 30.0,
    by: Annotated[
        str, typer.Option("--by", help="Figures per 'site' or per 'group' (site and page type).")
    ] = "site",
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Send no validators to the sites whose 304s hide changes (recorded).",
        ),
    ] = False,
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: AtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Did the change model predict what the revisits found? Expected against observed changes.

    Each revisit of the window (default: the last 30 days before the newest
    fetch in the log, or before --at) is scored with the probability of a
    change the model gave it from the page's history before it. Many more
    changes than expected: pages change faster than estimated (freshness is
    lower than planned); many fewer: fetches go to pages that did not change.
    Sites whose figures are off beyond chance are named.

    For sites fetched with validators (ETag / Last-Modified): how often an
    unchanged page was answered 304, and whether 304s hide changes (the
    conditional revisits find far fewer than the site's revisits without
    validators say its pages make). --apply turns validators off for those
    sites; recrawl site validators SITE on turns them back on.
    """
    if not (days > 0 and math.isfinite(days)):
        raise typer.BadParameter("must be a positive number of days", param_hint="--days")
    if by not in ("site", "group"):
        raise typer.BadParameter("must be 'site' or 'group'", param_hint="--by")
    settings = load_settings(config)
    until = at_time(at)
    if apply and by != "site":
        raise typer.BadParameter("--apply needs --by site", param_hint="--apply")
    with cli_store(db, settings, existing=True) as store:
        engine = Engine(store, settings)
        cal = engine.calibration(days=days, by="site" if by == "site" else "group", until=until)
        turned = engine.apply_calibration(cal) if apply else []
    if as_json:
        print_json(CalibrationReport(cal, turned).as_dict())
        return
    _print_calibration(cal, by)
    if turned:
        out.print(
            f"Validators turned off for {', '.join(map(escape, turned))} (recorded; "
            "recrawl site validators SITE on turns them back on)."
        )
    elif cal.hiding_changes and not apply:
        out.print("--apply turns their validators off.")
    if cal.validators_off:
        out.print(
            f"Requests go without validators to {', '.join(map(escape, cal.validators_off))} "
            "(recrawl site history SITE says since when and why)."
        )


def _print_calibration(cal: Calibration, by: str) -> None:
    if not math.isnan(cal.since):
        out.print(f"Revisits from {iso(cal.since)} to {iso(cal.until)}:")
    out.print(escape(cal.verdict()) + ".")
    if not cal.overall.revisits:
        return
    out.print(
        f"Brier score {cal.brier:.4f} against {cal.brier_reference:.4f} for the base rate alone "
        f"(skill {cal.skill:.2f}; 0 is none, 1 perfect foresight)."
    )
    table = Table(title="By predicted probability of a change")
    for col in ("predicted", "revisits", "mean predicted", "observed"):
        table.add_column(col, justify="right")
    for b in cal.bins:
        if b.revisits:
            table.add_row(
                f"{b.lo:.2f}–{b.hi:.2f}", f"{b.revisits:,}",
                f"{b.mean_predicted:.3f}", f"{b.observed_share:.3f}",
            )  # fmt: skip
    out.print(table)
    groups = Table(title=f"By {by}, most surprising first")
    for col in (by, "revisits", "expected", "observed", "observed ÷ expected", "z", ""):
        groups.add_column(col, justify="left" if col == by else "right")
    for g in cal.groups[:20]:
        ratio = "–" if math.isnan(g.ratio) else f"{g.ratio:.2f}"
        groups.add_row(
            escape(g.name), f"{g.revisits:,}", f"{g.expected_changes:,.1f}",
            f"{g.observed_changes:,}", ratio, f"{g.z:+.1f}", "[red]off[/]" if g.flagged else "",
        )  # fmt: skip
    out.print(groups)
    if len(cal.groups) > 20:
        out.print(f"… and {len(cal.groups) - 20} more (--json lists them all).")
    if len(cal.by_history) > 1:
        h_table = Table(title="By the page's history before the revisit")
        for col in ("earlier revisits", "revisits", "expected", "observed", "observed ÷ expected"):
            h_table.add_column(col, justify="right")
        for g in cal.by_history:
            h_table.add_row(
                g.name, f"{g.revisits:,}", f"{g.expected_changes:,.1f}", f"{g.observed_changes:,}",
                "–" if math.isnan(g.ratio) else f"{g.ratio:.2f}",
            )  # fmt: skip
        out.print(h_table)
    if cal.validators:
        v_table = Table(title="Conditional requests (ETag / Last-Modified), by site")
        for col in (by, "with validators", "304", "full, unchanged", "full, changed",
                    "without validators", "changes expected", "z", ""):  # fmt: skip
            v_table.add_column(col, justify="left" if col == by else "right")
        for v in cal.validators[:20]:
            if v.hides_changes:
                note = "[red]304s hide changes[/]"
            elif not v.tested:
                note = "too few to tell"
            else:
                note = "[yellow]never 304[/]" if v.ignored else ""
            v_table.add_row(
                escape(v.name), f"{v.conditional:,}", f"{v.not_modified:,}",
                f"{v.full_unchanged:,}", f"{v.full_changed:,}", f"{v.unconditional:,}",
                "–" if math.isnan(v.expected_conditional) else f"{v.expected_conditional:,.1f}",
                "–" if math.isnan(v.z) else f"{v.z:+.1f}", note,
            )  # fmt: skip
        out.print(v_table)


def _fmt_amount(x: float) -> str:
    """Four significant figures, with thousands separators rather than an exponent."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def _print_budget(o: BudgetOutlook, unit: str) -> None:
    if not o.pages:
        out.print(
            "No revisitable page (live, with a value, on a site not paused) has been "
            "fetched yet: nothing to learn rates from"
            + (f" ({o.never_fetched:,} never fetched)." if o.never_fetched else ".")
        )
        return
    out.print(f"What a mean freshness costs over {o.pages:,} pages fetched so far, {unit} per day:")
    table = Table()
    for col in ("freshness", "planner's split", "budget_per_day", "one interval for all", "saving"):
        table.add_column(col, justify="right")
    for t in o.targets:
        table.add_row(
            _pct(t["freshness"]),
            _fmt_amount(t["optimal"]),
            _fmt_amount(t["configure"]),
            _fmt_amount(t["uniform"]),
            f"{1 - t['configure'] / t['uniform']:.0%}" if t["uniform"] > 0 else "-",
        )
    out.print(table)
    if o.freshness_at_budget is not None and o.budget_per_day is not None:
        f = o.freshness_at_budget
        out.print(
            f"At {_fmt_amount(o.budget_per_day)} {unit} a day: mean freshness at least "
            f"{f['optimal']:.1%} with the planner, {f['uniform']:.1%} with one interval for all."
        )
    notes = ["Model figures: Poisson changes at each page's estimated rate"]
    if o.reserve_share > 0:
        notes.append(
            f"budget_per_day adds the {o.reserve_share:.0%} the planner keeps for verification "
            "and re-estimation, whose fetches refresh pages too"
        )
    if o.never_fetched:
        notes.append(
            f"{o.never_fetched:,} pages never fetched are not counted (discovery takes its "
            "share of each cycle until they are)"
        )
    out.print("; ".join(notes) + ".")
    if o.resolution is not None and o.resolution.revisited:
        advice = o.resolution.advice()
        if advice:
            out.print(
                f"[yellow]rates: {o.resolution.summary()}. Those pages may change faster than "
                f"assumed, and these budgets be too low for them. {advice}[/]"
            )


def _print_replay(res: dict[str, Any], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for col in (
        "policy",
        "freshness",
        "vs oracle",
        "fetches",
        "changes",
        "no change",
        "cost",
        "per change",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    pol = res["policies"]
    best = pol.get("oracle", {}).get("freshness")
    for name, r in sorted(pol.items(), key=lambda kv: -kv[1]["freshness"]):
        ratio = f"{r['freshness'] / best:.3f}" if best else "–"
        table.add_row(
            f"[b]{name}[/]" if name == "recrawl" else name, f"{r['freshness']:.4f}", ratio,
            _fmt_num(r["fetches"]), _fmt_num(r["changes_detected"]), _fmt_num(r["fetches_without_change"]),
            _fmt_num(r["cost"]), _fmt_num(r["cost_per_change"]),
        )  # fmt: skip
    out.print(table)


@app.command()
def simulate(
    trace: Annotated[
        Path,
        typer.Option(
            "--trace", help="Change traces (JSONL, SPEC §5).", exists=True, dir_okay=False
        ),
    ],
    budget: Annotated[
        float,
        typer.Option(
            help="Cost units per live page per day (fetches per page per day at unit cost)."
        ),
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help=(
                "Policy to replay (repeatable; default: all plus oracle; the yardsticks "
                "oracle_rates and recrawl_known_rates on request)."
            ),
        ),
    ] = None,
    cycle_hours: Annotated[
        float, typer.Option("--cycle-hours", help="Planning cycle, hours.")
    ] = 1.0,
    objective: Annotated[str, typer.Option(help="freshness or events.")] = "freshness",
    seed: Annotated[
        int, typer.Option(help="Random seed (verification sample, oracle phases).")
    ] = 0,
    sitemap_hours: Annotated[
        float | None,
        typer.Option(
            "--sitemap-hours",
            help=(
                "Also read a simulated sitemap every this many hours, free; every policy "
                "but the oracle judges it from its own revisits and uses it once trusted."
            ),
        ),
    ] = None,
    sitemap_kind: Annotated[
        str | None,
        typer.Option(
            "--sitemap-kind",
            help=(
                "What the sitemap's lastmod says: honest (the last change), silent (never "
                "moves), stamped (the read's time), noisy (also moves for edits not hashed) "
                "or lazy (misses a third of the changes). Default honest."
            ),
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay real or generated change traces under each policy and compare freshness and cost."""
    from recrawl.observe.traces import load_traces
    from recrawl.sim.replay import SITEMAP_KINDS, max_budget, replay

    if objective not in ("freshness", "events"):
        raise typer.BadParameter("must be freshness or events", param_hint="--objective")
    if not (budget > 0 and math.isfinite(budget)):
        raise typer.BadParameter("must be a positive number", param_hint="--budget")
    if not (cycle_hours > 0 and math.isfinite(cycle_hours)):
        raise typer.BadParameter("must be a positive number", param_hint="--cycle-hours")
    if sitemap_hours is not None and not (sitemap_hours > 0 and math.isfinite(sitemap_hours)):
        raise typer.BadParameter("must be a positive number", param_hint="--sitemap-hours")
    if sitemap_kind is not None and sitemap_hours is None:
        raise typer.BadParameter(
            "needs --sitemap-hours (how often the sitemap is read)", param_hint="--sitemap-kind"
        )
    if sitemap_kind is not None and sitemap_kind not in SITEMAP_KINDS:
        raise typer.BadParameter(
            f"must be one of {', '.join(SITEMAP_KINDS)}", param_hint="--sitemap-kind"
        )
    traces = load_traces(trace)
    if not traces:
        raise typer.BadParameter(f"{trace} holds no traces", param_hint="--trace")
    ceiling = max_budget(traces, cycle_hours)
    if budget > ceiling:
        raise typer.BadParameter(
            f"{budget:g} is more than fetching every page every cycle costs ({ceiling:g})",
            param_hint="--budget",
        )
    run = functools.partial(replay, sitemap_hours=sitemap_hours, sitemap_kind=sitemap_kind)
    res = _replay_with_progress(run, traces, budget, policy, cycle_hours, objective, seed)
    if as_json:
        print_json(res)
    else:
        if "sitemap" in res:
            sm, trusted = res["sitemap"], ""
            if (v := res["policies"].get("recrawl", {}).get("sitemap_trust")) is not None:
                trusted = (
                    f" recrawl trusts its silence on {v['quiet_sites']}/{v['sites']} sites, "
                    f"its moves on {v['changes_sites']}/{v['sites']};"
                )
            out.print(
                f"Sitemap ({sm['kind']}, read every {sm['hours']:g} h, free):{trusted} "
                "oracle replays without it."
            )
        _print_replay(
            res,
            f"Replay of {trace.name}: {res['pages']:,} pages over {res['days']:,.0f} days, budget {budget:g} per page per day",
        )


def _replay_with_progress(
    replay: Any,
    traces: Any,
    budget: float,
    policies: Any,
    cycle_hours: float,
    objective: str,
    seed: int,
) -> dict[str, Any]:
    progress = Progress(
        TextColumn("{task.description:<12}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
        console=err, disable=not err.is_terminal, transient=True,
    )  # fmt: skip
    tasks: dict[str, Any] = {}

    def hook(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done)

    with progress:
        return dict(replay(traces, budget, policies=policies or None, cycle_hours=cycle_hours,
                           objective=objective, seed=seed, progress=hook))  # fmt: skip


health_app = typer.Typer(
    help="Per-site target health against each site's own normal.",
    invoke_without_command=True,
)
app.add_typer(health_app, name="health")

_BAND_STYLE = {"critical": "bold red", "degrading": "yellow", "healthy": "green", "unknown": "dim"}


@health_app.callback()
def health(
    ctx: typer.Context,
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Evaluate as of this time (RFC 3339 or unix seconds; rounded down to a 15-minute boundary), using only observations before it.",
        ),
    ] = None,
    site: Annotated[str | None, typer.Option("--site", help="Only this site.")] = None,
    record: Annotated[
        bool | None,
        typer.Option(
            "--record/--no-record",
            help="Keep the result in the history and apply band actions (default: only when evaluating now).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score every site (worst first): band, reasons, route diagnosis, parser health, action."""
    if ctx.invoked_subcommand is not None:
        return
    settings = load_settings(config)
    t = None
    if at:
        from recrawl.health.buckets import bucket_start

        # buckets are 15 minutes wide: a past time is read at the last bucket
        # boundary, so no observation after it is used
        t = float(bucket_start(at_required(at)))
    keep = (t is None) if record is None else record
    with cli_store(db, settings, existing=True) as store:
        engine = Engine(store, settings)
        now = engine.clock() if t is None else t
        reports = engine.health(now, site=site, record=keep)
        overview = health_overview(store, reports, at=now, now=now, site=site)
    if as_json:
        print_json(overview.as_dict())
        return
    paused = overview.paused
    _print_health(reports, now)
    if paused:
        out.print(
            f"[red]paused[/] (a human resumes them: recrawl site resume SITE): "
            f"{escape(', '.join(paused))}"
        )


@health_app.command("review")
def health_review(
    incidents: Annotated[
        Path,
        typer.Option(
            "--incidents",
            help="Labelled incidents, JSONL: site, start, end[, cause, band, route].",
            exists=True,
            dir_okay=False,
        ),
    ],
    db: DbOpt = None,
    config: ConfigOpt = None,
    step_minutes: Annotated[
        float, typer.Option("--step", help="Minutes between evaluations.")
    ] = 15.0,
    margin_hours: Annotated[
        float,
        typer.Option(
            "--margin", help="Hours reviewed before the first and after the last incident."
        ),
    ] = 24.0,
    from_history: Annotated[
        bool,
        typer.Option(
            "--recorded",
            help="Read the health the store recorded (what recrawl health and the service "
            "showed) instead of scoring the buckets again every --step.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Review the score like an alert, against labelled incidents.

    Per incident, how long the band took to move and whether the top reason
    named the cause; false alarms outside incidents, and their rate per
    site-day reviewed. Scores the stored buckets again every --step; with
    --recorded, reads the health the store recorded over the incidents and
    --margin instead (what the operator saw: recrawl health, the service), at
    the cadence it was recorded."""
    from recrawl._exceptions import NotFound
    from recrawl.health.score import Incident, RecordedHealth, action_effects, review

    if not (0 < step_minutes <= 24 * 60):
        raise typer.BadParameter("must be more than 0 and at most a day", param_hint="--step")
    if not (0 <= margin_hours <= 24 * 366):
        raise typer.BadParameter("must be between 0 and a year (8,784)", param_hint="--margin")
    labelled: list[Incident] = []
    for n, line in enumerate(incidents.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            labelled.append(
                Incident(
                    site=str(raw["site"]), start=parse_timestamp(raw["start"]), end=parse_timestamp(raw["end"]),
                    cause=raw.get("cause"), band=raw.get("band"), route=raw.get("route"),
                )
            )  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise typer.BadParameter(f"line {n}: {exc}", param_hint="--incidents") from None
        if labelled[-1].end < labelled[-1].start:
            raise typer.BadParameter(f"line {n}: ends before it starts", param_hint="--incidents")
    if not labelled:
        raise typer.BadParameter("holds no incident", param_hint="--incidents")
    step = step_minutes * 60.0
    first = min(i.start for i in labelled) - margin_hours * 3600.0
    last = max(i.end for i in labelled) + margin_hours * 3600.0
    times = [float(t) for t in np.arange(first - first % step, last, step)]
    sites = sorted({i.site for i in labelled})
    settings = load_settings(config)
    recorded: list[RecordedHealth] = []
    with cli_store(db, settings, existing=True) as store:
        if from_history:
            recorded = [
                RecordedHealth.of(at, r)
                for site in sites
                for at, r in store.health_history(site, since=first, until=last)
            ]
            if not recorded:
                raise NotFound(
                    f"no recorded health of {', '.join(sites)} from {iso(first)} to {iso(last)}: "
                    "review without --recorded to score the buckets again"
                )
        if recorded:
            source = f"the recorded history ({len(recorded):,} evaluations)"
            gaps = np.diff(sorted({h.at for h in recorded}))
            step = float(np.median(gaps)) if len(gaps) else step
            reviewed = review(recorded, labelled, step_s=step)
        else:
            source = f"scored again every {step_minutes:g} min ({len(times):,} times)"
            evaluations = Engine(store, settings).evaluate_health(times, sites=sites)
            reviewed = review(
                [h for per_time in evaluations for h in per_time], labelled, step_s=step
            )
        effects = action_effects(reviewed, store.buckets(first - 3600.0, last + 3600.0, sites))
    report = reviewed.to_dict()
    for row, effect in zip(report["incidents"], effects, strict=True):
        row["action"] = effect
    report["source"] = "recorded" if recorded else "recomputed"
    if as_json:
        print_json(report)
        return
    table = Table(
        title=f"Health review: {len(labelled)} incidents, from {source}",
        title_justify="left",
    )
    for col in (
        "site",
        "cause",
        "start",
        "band moved",
        "detected",
        "band reached",
        "top reason",
        "named",
        "action helped",
    ):
        table.add_column(col)
    for r in report["incidents"]:
        table.add_row(
            escape(r["site"]), escape(str(r["cause"])), iso(r["start"]),
            _minutes(r["moved_after_s"]), _minutes(r["detected_after_s"]),
            r["band_reached"], escape(str(r["top_reason"])), "yes" if r["cause_named"] else "[red]no[/]",
            _helped(r["action"]),
        )  # fmt: skip
    out.print(table)
    fa = report["false_alarms"]
    rate = report["false_alarms_per_site_day"]
    out.print(
        f"false alarms outside incidents: {len(fa)} ({report['false_alarm_seconds'] / 3600:.2f} h), "
        + ("–" if rate is None else f"{rate:.3g}")
        + f" per site-day over {report['site_days']:.3g} site-days reviewed"
    )
    for a in fa[:20]:
        out.print(f"  {escape(str(a))}")


def _helped(effect: dict[str, Any]) -> str:
    """One cell: did the band's action lower the refusal rate (before → after, the hour each side)."""
    if effect.get("action_at") is None:
        return "no action"
    before, after = effect["refusal_rate_before"], effect["refusal_rate_after"]
    if before is None or after is None:
        return f"cannot tell ({effect['requests_after']:,} requests after)"
    word = "yes" if effect["helped"] else "[red]no[/]"
    return f"{word} (refusals {_pct(before)} → {_pct(after)})"


def _minutes(s: float | None) -> str:
    return "never" if s is None else f"{s / 60:.0f} min"


def _per_record(r: dict[str, Any]) -> str:
    """Bytes a record cost in the window, against the site's normal (cost drift)."""
    cost = r.get("cost") or {}
    now, normal = cost.get("bytes_per_record"), cost.get("bytes_per_record_normal")
    if now is None:
        return "–"
    shown = f"{now:,.0f}"
    return shown if normal is None else f"{shown} (normal {normal:,.0f})"


def _print_health(reports: list[dict[str, Any]], now: float) -> None:
    table = Table(title=f"Site health at {iso(now)}", title_justify="left")
    for col in (
        "site",
        "score",
        "band",
        "reasons",
        "diagnosis",
        "parser",
        "bytes/record",
        "action",
    ):
        table.add_column(col, justify="right" if col == "score" else "left")
    for r in reports:
        style = _BAND_STYLE.get(r["band"], "")
        routes = f" ({', '.join(r['failing_routes'])})" if r["failing_routes"] else ""
        p = r["parser"]
        table.add_row(
            escape(r["site"]), "–" if r["score"] is None else str(r["score"]), f"[{style}]{r['band']}[/]",
            ", ".join(r["reasons"]) or "–", escape(r["diagnosis"] + routes),
            f"{'–' if p['score'] is None else p['score']} {p['band']}", _per_record(r),
            r["action"]["name"],
        )  # fmt: skip
    out.print(table)
    if not reports:
        out.print("no site has observations in the window")


site_app = typer.Typer(help="A human's controls over a site.", no_args_is_help=True)
app.add_typer(site_app, name="site")


ReasonOpt = Annotated[str, typer.Option(help="Why (kept in the site's history).")]
ByOpt = Annotated[str, typer.Option(help="Who decided (kept in the site's history).")]


@site_app.command("pause")
def site_pause(
    site: Annotated[str, typer.Argument(help="The site to pause.")],
    db: DbOpt = None,
    reason: ReasonOpt = "",
    by: ByOpt = os.environ.get("USER", "operator"),
    as_json: JsonOpt = False,
) -> None:
    """Pause a site by hand: none of its pages is planned or leased (its canaries
    still run) until a human resumes it."""
    with cli_store(db, existing=True) as store:
        done = Engine(store).pause(site, by=by, reason=reason)
    if as_json:
        print_json({"site": site, "paused": True, "changed": done, "by": by, "reason": reason})
        return
    if done:
        out.print(
            f"{escape(site)} paused (recorded, by {escape(by)}); "
            f"recrawl site resume {escape(site)} lifts it"
        )
    else:
        out.print(f"{escape(site)} was already paused: nothing recorded")


@site_app.command("resume")
def site_resume(
    site: Annotated[str, typer.Argument(help="The site to resume.")],
    db: DbOpt = None,
    by: ByOpt = os.environ.get("USER", "operator"),
    as_json: JsonOpt = False,
) -> None:
    """Resume a paused site. Recorded; recrawl never resumes a site by itself."""
    with cli_store(db, existing=True) as store:
        Engine(store).resume(site, by=by)
    if as_json:
        print_json({"site": site, "paused": False, "by": by})
        return
    out.print(f"{escape(site)} resumed (recorded, by {escape(by)})")


@site_app.command("validators")
def site_validators(
    site: Annotated[str, typer.Argument(help="The site.")],
    state: Annotated[str, typer.Argument(help="on or off.")],
    db: DbOpt = None,
    reason: ReasonOpt = "",
    by: ByOpt = os.environ.get("USER", "operator"),
    as_json: JsonOpt = False,
) -> None:
    """Send conditional requests (ETag / Last-Modified) to a site's pages, or not.

    Off, leases carry no validators for its pages: every fetch gets the full
    page. For a host that answers 304 while the content changed (recrawl
    calibration finds them)."""
    if state not in ("on", "off"):
        raise typer.BadParameter("must be 'on' or 'off'", param_hint="STATE")
    with cli_store(db, existing=True) as store:
        done = Engine(store).set_validators(site, state == "on", by=by, reason=reason)
    if as_json:
        print_json({"site": site, "validators": state == "on", "changed": done, "by": by})
        return
    if done:
        out.print(f"{escape(site)}: validators {state} (recorded, by {escape(by)})")
    else:
        out.print(f"{escape(site)}: validators were already {state}: nothing recorded")


@site_app.command("history")
def site_history(
    site: Annotated[str, typer.Argument(help="The site.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pauses, resumes and band changes of a site, oldest first.

    A site the store does not know (no page, no control, no event) is an
    error naming it (exit 2), not an empty history."""
    from recrawl._exceptions import NotFound

    with cli_store(db, existing=True) as store:
        events = store.site_events(site)
        known = bool(events) or site in store.site_controls() or site in store.sites()
    if not known:
        raise NotFound(f"no site {site!r} in the store")
    if as_json:
        print_json(events)
        return
    for e in events:
        out.print(f"{iso(e['at'])}  {e['kind']:<7} {escape(str(e['detail'] or ''))}")


@site_app.command("show")
def site_show(
    site: Annotated[str, typer.Argument(help="The site.")],
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Evaluate as of this time (RFC 3339 or unix seconds; rounded down to a 15-minute boundary).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="History from this time (RFC 3339 or unix seconds)."),
    ] = None,
    record: Annotated[
        bool | None,
        typer.Option(
            "--record/--no-record",
            help="Keep the evaluation in the history and apply band actions (default: only when evaluating now).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """One site: its health, controls and leases, its recorded health and its events.

    The document of ``GET /v1/sites/{site}``.
    """
    from recrawl._exceptions import NotFound
    from recrawl.health.buckets import bucket_start

    settings = load_settings(config)
    t = None if not at else float(bucket_start(at_required(at)))
    keep = (t is None) if record is None else record
    first = 0.0 if not since else at_required(since, "--since")
    with cli_store(db, settings, existing=True) as store:
        engine = Engine(store, settings)
        now = engine.clock() if t is None else t
        reports = engine.health(now, site=site, record=keep)
        overview = health_overview(store, reports, at=now, now=now, site=site)
        detail = site_detail(store, overview, site, since=first)
    if detail is None:
        raise NotFound(f"no site {site!r} in the store")
    if as_json:
        print_json(detail.as_dict())
        return
    if reports:
        _print_health(reports, now)
    else:
        out.print(f"{escape(site)}: no observations in the window")
    row = detail.row
    out.print(f"controls: {row['controls']}; leases outstanding: {row['leases_outstanding']}")
    for h in detail.history[-10:]:
        out.print(
            f"{iso(h['at'])}  {h['band'] or '–':<9} {'–' if h['score'] is None else h['score']}"
        )
    for e in detail.events:
        out.print(f"{iso(e['at'])}  {e['kind']:<7} {escape(str(e['detail'] or ''))}")


canary_app = typer.Typer(
    help="Canaries: stable pages whose right answer is known.", no_args_is_help=True
)
app.add_typer(canary_app, name="canary")


@canary_app.command("add")
def canary_add(
    url: Annotated[str, typer.Argument(help="The canary page.")],
    expect: Annotated[
        list[str],
        typer.Option(
            "--expect",
            help="FIELD=VALUE the record must carry (repeatable; dotted paths reach nested fields).",
        ),
    ],
    db: DbOpt = None,
    site: Annotated[str | None, typer.Option(help="Site (default: the URL's host).")] = None,
    every: Annotated[
        float,
        typer.Option(
            help="Fetch every this many minutes (outside the budget, also when the site is paused)."
        ),
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Declare a canary: a stable page whose right answer is known.

    A canary that parses but carries the wrong value lowers its site's health
    (canary_mismatch)."""
    from recrawl.health.canary import parse_expectations
    from recrawl.observe.observation import normalize_url

    try:
        normalize_url(url)
        expectations = parse_expectations(expect)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not (1 <= every <= 30 * 24 * 60):
        raise typer.BadParameter(
            "must be between 1 minute and 30 days (43,200)", param_hint="--every"
        )
    with cli_store(db) as store:
        c = Engine(store).add_canary(url, expectations, site=site, every_s=every * 60.0)
    if as_json:
        print_json(c)
        return
    out.print(
        escape(
            f"canary {c['url']} on {c['site']}: expects "
            f"{', '.join(f'{k}={v}' for k, v in c['expect'].items())}, every {every:g} min"
        )
    )


@canary_app.command("list")
def canary_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The declared canaries: what each must carry, how often it is fetched, its last fetch."""
    with cli_store(db, existing=True) as store:
        rows = Engine(store).canaries()
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no canary declared (recrawl canary add URL --expect FIELD=VALUE)")
        return
    t = Table(title=f"Canaries: {len(rows):,}", title_justify="left")
    for col in ("url", "site", "expects", "every", "last fetch"):
        t.add_column(col, overflow="fold" if col == "url" else "ellipsis")
    for c in rows:
        t.add_row(
            escape(c["url"]), escape(c["site"]),
            escape(", ".join(f"{k}={v}" for k, v in c["expect"].items())),
            f"{c['every_s'] / 60:g} min", "–" if c["last_fetch"] is None else iso(c["last_fetch"]),
        )  # fmt: skip
    out.print(t)


@canary_app.command("remove")
def canary_remove(
    url: Annotated[str, typer.Argument(help="The canary page.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw a canary. A page made for it leaves the store with its log
    (stats and health keep their counts); a page of another type stays and is
    planned as before. A URL without a canary is an error naming it."""
    from recrawl._exceptions import NotFound
    from recrawl.observe.observation import normalize_url

    try:
        norm = normalize_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="URL") from None
    with cli_store(db, existing=True) as store:
        removed = Engine(store).remove_canary(norm)
    if not removed:
        raise NotFound(f"no canary on {norm} (recrawl canary list names them)")
    if as_json:
        print_json({"url": norm, "removed": True})
        return
    out.print(f"canary on {escape(norm)} withdrawn")


@app.command()
def demo(
    db: Annotated[
        str, typer.Option("--db", help="Store for the demo (recreated).")
    ] = "recrawl-demo.db",
    crawl_days: Annotated[
        float,
        typer.Option(
            help="Simulated days of the closed loop (a synthetic web crawled by each policy; "
            "4 real seconds a day); 0 leaves it out.",
            min=0.0,
        ),
    ] = 30.0,
) -> None:
    """The main job on the embedded store, start to finish, with the dashboard.

    Where the money goes, what to fetch next, what freshness costs, whether the
    change model is calibrated, how policies compare on real change histories, a site pushing back, and the dashboard
    (report.html; it needs the service extra, the rest runs without)."""
    for suffix in ("", "-wal", "-shm"):
        Path(db + suffix).unlink(missing_ok=True)
    settings = load_settings(data_file("demo.toml"))
    out.rule("[b]recrawl demo[/]: ingest a fetch log into the embedded SQLite store")
    with (
        cli_store(db, settings, make_dirs=True) as store,
        data_file("sample-fetches.jsonl").open(encoding="utf-8") as f,
    ):
        rep = Engine(store, settings).ingest_lines(f)
        out.print(f"{rep.stored:,} observations stored in {db} ({rep.rejected} rejected)")
        data = Stats.of(store.group_totals(), "fetches").as_dict()
    _print_stats(data)
    out.rule("[b]recrawl demo[/]: what to fetch in the next hour")
    with cli_store(db, settings) as store:
        engine = Engine(store, settings)
        # the hour that starts when the sample log ends
        last = float(np.nanmax(store.page_columns()["last_fetch"]))
        _print_plan(engine.plan(now=last, seed=0), settings.billing_unit, 10)
        out.rule("[b]recrawl demo[/]: what freshness costs at the rates learned so far")
        _print_budget(engine.budget_outlook(now=last), settings.billing_unit)
        out.rule("[b]recrawl demo[/]: did the change model predict what the revisits found?")
        _print_calibration(engine.calibration(days=30, until=last), "site")
    from recrawl.observe.traces import load_traces
    from recrawl.sim.replay import replay

    out.rule("[b]recrawl demo[/]: replay real change histories under each revisit policy")
    traces = load_traces(data_file("ota-sample.jsonl"))
    res = _replay_with_progress(replay, traces, 0.05, None, 1.0, "freshness", 0)
    _print_replay(
        res,
        f"{res['pages']} real documents over {res['days']:,.0f} days (Open Terms Archive, ODC-By), "
        "0.05 fetches per page per day",
    )
    # the same with a daily sitemap, judged from recrawl's own revisits (recrawl.hints)
    mapped = _replay_with_progress(
        functools.partial(replay, sitemap_hours=24.0, sitemap_kind="honest"),
        traces, 0.05, ["recrawl"], 1.0, "freshness", 0,
    )  # fmt: skip
    before, after = res["policies"]["recrawl"], mapped["policies"]["recrawl"]
    trust = after["sitemap_trust"]
    out.print(
        f"With a daily sitemap whose lastmod is each page's last change (read free; trusted "
        f"only where recrawl's own revisits proved it right: {trust['changes_sites']} of "
        f"{trust['sites']} sites), recrawl's freshness is {after['freshness']:.4f} instead of "
        f"{before['freshness']:.4f}, at {after['cost_per_change']:.2f} fetches per change "
        f"detected instead of {before['cost_per_change']:.2f} (recrawl simulate --sitemap-hours 24; "
        "for a real crawl: recrawl hints add sitemap.xml)."
    )

    if crawl_days > 0:
        _demo_closed_loop(crawl_days)
    out.rule("[b]recrawl demo[/]: three sites, three weeks; one starts pushing back")
    end = _demo_health(db, settings)
    _demo_dashboard(db, settings, end)


def _demo_dashboard(db: str, settings: Settings, end: float) -> None:
    """The demo's last step: report.html as of ``end``, or, without plotly, one
    sentence naming the extra (every other step has run: the demo exits 0)."""
    missing = missing_module("plotly")
    if missing is not None:
        out.print(
            escape(
                extra_sentence("The dashboard (report.html)", "service", missing)
                + f", then `recrawl report --db {db} --out report.html` writes it; "
                "every other step of the demo ran."
            ),
            soft_wrap=True,
        )
        return
    from recrawl.report.dashboard import render_report

    with cli_store(db, settings) as store:
        html = render_report(Engine(store, settings, clock=lambda: end))
    report_path = Path("report.html").resolve()
    report_path.write_text(html, encoding="utf-8")
    out.print(f"dashboard written to [b]{report_path}[/] (open it in a browser; works offline)")


def _demo_closed_loop(days: float) -> None:
    """recrawl, uniform and Nutch's schedule each crawling an identical synthetic web."""
    import tempfile

    from recrawl.sim.crawl import closed_loop, route_diagnosis

    out.rule(
        f"[b]recrawl demo[/]: a synthetic web on 127.0.0.1 crawled for {days:g} simulated days, "
        "judged by its own ground truth"
    )
    out.print(
        "Six sites (robots.txt, a Crawl-delay, faulty pages, one turning hostile on day 10), "
        f"300 fetches a day from a cold start; each policy crawls its own copy, "
        f"about {4 * days:.0f} s of real time."
    )
    with tempfile.TemporaryDirectory() as d:
        got = closed_loop(Path(d), days=days)
    t = Table(title="Closed loop: what each policy bought (from the servers' request logs)")
    for col in ("policy", "freshness", "fetches", "changes found", "fetches/change",
                "304 share", "MB", "hostile after turning", "hostile paused (days)"):  # fmt: skip
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, f in got["policies"].items():
        paused = f.get("hostile_paused_days_after_turning")
        t.add_row(
            name, f"{f['freshness']:.3f}", str(f["fetches"]), str(f["changes_detected"]),
            f"{f['fetches_per_change']:.2f}" if f["fetches_per_change"] else "-",
            f"{f['revisits_304_share']:.0%}" if f["revisits_304_share"] is not None else "-",
            f"{f['bytes'] / 1e6:.1f}", str(f.get("hostile_requests_after_turning", "-")),
            "-" if paused is None else f"{paused:.2f}",
        )  # fmt: skip
    out.print(t)
    w = got["warm"]
    if w["ratio"] is None:
        seen = "" if w["warm"] is None else f" (freshness {w['warm']:.3f} from each first fetch on)"
        out.print(
            f"The crawl was too short to revisit a page{seen}, so there is no hindsight optimum "
            "to hold recrawl to: give it more --crawl-days."
        )
    else:
        out.print(
            f"From each page's first fetch on, recrawl's freshness is {w['warm']:.3f}: "
            f"{w['ratio']:.3f} of the hindsight optimum's {w['oracle']:.3f} at the same number of "
            "revisits on the same change times (recrawl simweb and recrawl crawl do the same as "
            "two processes; benchmarks/closed_loop.py over seeds and budgets)."
        )
    for name, f in got["policies"].items():
        p = f["politeness"]
        under = p["crawl_delay_gaps_under_90pct"]
        out.print(
            f"{name}: {p['to_disallowed_paths']} requests to robots-disallowed paths "
            f"({p['disallowed_counted']} planned ones refused), {p['requests_inside_retry_after']} "
            f"inside {p['retry_after_windows']} Retry-After windows, {under} of "
            f"{p['crawl_delay_gaps']} gaps on the Crawl-delay site under 90 % of its delay "
            "(as the server saw them)."
        )
    out.rule("[b]recrawl demo[/]: two proxy routes, one dies: is the route blamed, or the sites?")
    with tempfile.TemporaryDirectory() as d:
        routes = route_diagnosis(Path(d))
    dead = ", ".join(
        f"{route or 'direct'}: {sum(n.values())} ({', '.join(sorted(n))})"
        for route, n in routes["requests_after_by_route"].items()
    )
    out.print(
        f"Requests after route pool-b/de died ({routes['route_died_after_days']:g} days in), "
        f"by route: {dead}."
    )
    for site in routes["sites"]:
        failing = ", ".join(site["failing_routes"]) or "-"
        out.print(
            f"{site['site']}: band {site['band']}, diagnosis [b]{site['diagnosis']}[/] "
            f"(failing routes: {failing})"
        )
    paused = ", ".join(routes["paused_by_crawl"]) or "none"
    out.print(f"Sites the crawl paused: {paused}.")


def _demo_health(db: str, settings: Settings) -> float:
    """Ingest a generated log with a hard-block wave, score it hourly, show the worst hour."""
    from recrawl.observe.observation import parse_observation
    from recrawl.sim.health import DAY, HOUR, Effect, HealthScenario, SiteProfile

    item = {"item": (1.0, 80_000, ("title", "price"))}
    start = 1_767_225_600 + 21 * DAY  # after the fetch log above
    wave = (start + 19 * DAY + 13 * HOUR, start + 19 * DAY + 17 * HOUR)
    sc = HealthScenario(
        sites=[
            SiteProfile("calm.example", 90, item, challenge_rate=0.04),
            SiteProfile("shop.example", 90, item),
            SiteProfile("hostile.example", 120, item, hard_rate=0.01),
        ],
        effects=[
            Effect(
                "hostile.example", *wave, hard=0.7, challenge=0.2, latency_factor=3.0, ramp_s=600
            )
        ],
        incidents=[],
        start=start,
        pages_per_type=150,
    )
    with cli_store(db, settings) as store:
        engine = Engine(store, settings)
        rep = engine.ingest(parse_observation(o) for o in sc.observations())
        out.print(
            f"{rep.stored:,} observations of 3 sites stored (calm.example challenges 4 % of requests every day)"
        )
        worst: list[dict[str, Any]] = []
        peak = float(wave[0])
        for t in np.arange(sc.end - 3 * DAY, sc.end, HOUR):
            reports = engine.health(float(t), record=True)
            if t <= wave[0] + 2 * HOUR:
                worst, peak = reports, float(t)
        _print_health(worst, peak)
        events = store.site_events("hostile.example")
    for e in events:
        if e["kind"] == "pause":
            out.print(
                f"[red]hostile.example paused[/] at {iso(e['at'])}: {e['detail']}; only a human resumes it (recrawl site resume)"
            )
    return float(sc.end)


@app.command()
def version() -> None:
    """Print the version."""
    out.print(__version__)


# -- service: init, serve, report ----------------------------------------------------------------


_INIT_TOML = """\
# recrawl configuration, created by `recrawl init`. Environment variables override it
# (RECRAWL_TOKEN, RECRAWL_READ_TOKEN, RECRAWL_BUDGET_PER_DAY, ...).

billing_unit = "{unit}"          # fetches | bytes | credits
budget_per_day = {budget}        # in the billing unit
cycle_hours = 1
objective = "freshness"         # freshness | events
lease_seconds = 600             # a lease not reported by then returns its URL to the plan
max_body_bytes = 16777216       # larger request bodies get 413

# Writes to the HTTP API need `Authorization: Bearer <token>`. Keep it secret.
token = "{token}"
{read_line}
[reserves]                      # shares of each cycle's budget
discovery = 0.05
reestimate = 0.03
verify = 0.02
"""


@app.command()
def init(
    db: DbOpt = None,
    config: Annotated[Path, typer.Option("--config", help="Config file to create.")] = Path(
        "recrawl.toml"
    ),
    unit: Annotated[
        str, typer.Option("--unit", help="Billing unit: fetches, bytes or credits.")
    ] = "fetches",
    budget: Annotated[
        float, typer.Option("--budget", help="Budget per day in the billing unit.")
    ] = 10_000.0,
    read_token: Annotated[
        bool, typer.Option("--read-token", help="Also require a token for reads.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing config.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create the store and a config with a fresh random write token.

    --json names the store and the config written, never the token (it is in
    the config, mode 600)."""
    import secrets

    if unit not in ("fetches", "bytes", "credits"):
        raise typer.BadParameter("must be fetches, bytes or credits", param_hint="--unit")
    if not (budget > 0 and math.isfinite(budget)):
        raise typer.BadParameter("must be a positive number", param_hint="--budget")
    if config.is_dir():
        raise typer.BadParameter(f"{config} is a directory", param_hint="--config")
    if config.exists() and not force:
        raise typer.BadParameter(
            f"{config} exists (use --force to replace it)", param_hint="--config"
        )
    token = secrets.token_urlsafe(32)
    read_line = f'read_token = "{secrets.token_urlsafe(32)}"\n' if read_token else ""
    text = _INIT_TOML.format(
        unit=unit, budget=repr(float(budget)), token=token, read_line=read_line
    )
    config.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # a file that was there keeps its mode through O_CREAT: the token is secret
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    load_settings(config, env={})  # what init writes must load
    path = db or default_db()
    cli_store(path, make_dirs=True).close()
    if as_json:
        print_json(
            {"store": path, "config": str(config), "billing_unit": unit,
             "budget_per_day": float(budget), "read_token": read_token}
        )  # fmt: skip
        return
    out.print(f"store {path} ready; config {config} written with a fresh token (mode 600)")


@app.command()
def serve(
    db: DbOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.", min=0, max=65535)] = 8470,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /docs), /metrics and the dashboard at /.

    Needs the service extra."""
    require_extra("recrawl serve", "service")
    import uvicorn

    from recrawl.service import create_app
    from recrawl.service.memory import tune_allocator

    # large arrays (a plan's) given back to the system when freed (see the module)
    tune_allocator()
    settings = load_settings(config)
    application = create_app(cli_store(db, settings), settings)
    err.print(f"recrawl serving on http://{host}:{port} (store {db or default_db()})")
    # What start-up made lives as long as the server: collections stop walking
    # it; and requests allocate much, few cycles: young collections less often.
    gc.freeze()
    with fewer_collections():
        uvicorn.run(application, host=host, port=port, log_level=log_level, access_log=False)


@app.command()
def report(
    out_path: Annotated[
        str,
        typer.Option(
            "--out",
            help="HTML file to write; a directory (ending in /, or one that exists) gets "
            "report.html, and is created when it is not there.",
        ),
    ],
    db: DbOpt = None,
    config: ConfigOpt = None,
    days: Annotated[
        float | None,
        typer.Option(help="Show the last N days (default 7), up to now or the log's end.", min=0),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Show from this time (RFC 3339, YYYY-MM-DD or unix seconds)."),
    ] = None,
    inline: Annotated[
        bool, typer.Option(help="One file with plotly.js inside, not plotly.min.js beside it.")
    ] = False,
) -> None:
    """Write the dashboard as an HTML file with plotly.min.js beside it (works offline).

    --out DIR/ writes DIR/report.html, creating DIR; a file's directory must be
    there. Needs the service extra (plotly)."""
    require_extra("recrawl report", "service", "plotly")
    from recrawl.report.dashboard import write_report
    from recrawl.report.window import parse_time

    settings = load_settings(config)
    target = Path(out_path)
    with cli_store(db, settings, existing=True) as store:
        try:
            start = None if since is None else parse_time(since)
            if out_path.endswith(("/", os.sep)) or target.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                target = target / "report.html"
            said = write_report(
                Engine(store, settings), target, days=days, since=start, inline=inline
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    out.print(said)


@app.command()
def prune(
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            help="Delete the observations fetched before this time (RFC 3339 or unix seconds).",
        ),
    ] = None,
    keep_days: Annotated[
        float | None,
        typer.Option(
            "--keep-days",
            help="... or keep only the last N days of the log, counted back from its newest fetch.",
            min=0,
        ),
    ] = None,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="Then give the space back: a SQLite file is rewritten (takes a while, "
            "needs about its size free on disk).",
        ),
    ] = False,
    db: DbOpt = None,
    config: ConfigOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Allow a --before after the log's newest fetch (the whole log)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be removed.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete old fetch observations from the log, keeping what they taught.

    Each page keeps a checkpoint of its state after them, so a late report
    still ends as if the whole log were there; stats and health do not change;
    a report fetched before its page's last pruned fetch is refused. Safe to
    interrupt and run again. --vacuum holds the store's write lock while it
    rewrites the file: writers (a running service) wait meanwhile.

    --keep-days counts back from the log's newest fetch, not from now: a log
    that ended a year ago keeps its last N days. A --before after the newest
    fetch would delete the whole log: refused without --force."""
    import time

    from recrawl.store.sqlite import SQLiteStore

    if (before is None) == (keep_days is None):
        raise typer.BadParameter("give one of --before or --keep-days", param_hint="--before")
    now = time.time()
    cut = at_required(before, "--before") if before is not None else None
    settings = load_settings(config)
    with cli_store(db, settings, existing=True) as store:
        end = Engine(store, settings).log_end()
        if cut is None and end is None:  # nothing fetched: nothing to keep or delete
            if as_json:
                print_json({"dry_run": dry_run, "before": None, "removed": 0})
            else:
                out.print("the log holds no fetch: nothing removed")
            return
        until = cut if cut is not None else (end or 0.0) - (keep_days or 0) * 86400
        if not force and end is not None and until > end:
            when = "in the future" if until > now else f"after the log's newest fetch ({iso(end)})"
            raise typer.BadParameter(
                f"{iso(until)} is {when}: the whole log would go (--force if that is meant)",
                param_hint="--before",
            )
        if dry_run:
            rep = prune_log(store, until, dry_run=True)
            if as_json:
                print_json(
                    {"dry_run": True, "before": until, "to_remove": rep.to_remove,
                     "pages_to_checkpoint": rep.pages_to_checkpoint}
                )  # fmt: skip
                return
            out.print(
                f"would remove {rep.to_remove:,} observations fetched before {iso(until)}, "
                f"checkpointing {rep.pages_to_checkpoint:,} pages; nothing removed (--dry-run)"
            )
            return
        size0 = store.size_bytes() if isinstance(store, SQLiteStore) else None
        progress = Progress(
            TextColumn("pruning"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
            console=err, disable=quiet or not err.is_terminal, transient=True,
        )  # fmt: skip
        with progress:
            task = progress.add_task("prune", total=None)
            rep = prune_log(
                store,
                until,
                on_progress=lambda r: progress.update(
                    task, total=r.to_remove, completed=r.observations_removed
                ),
            )
        if vacuum:
            store.vacuum()
        if as_json:
            size1 = store.size_bytes() if isinstance(store, SQLiteStore) else None
            print_json(
                {"dry_run": False, "before": until, "removed": rep.observations_removed,
                 "pages_checkpointed": rep.pages_checkpointed, "vacuumed": vacuum,
                 "file_bytes_before": size0, "file_bytes_after": size1}
            )  # fmt: skip
            return
        size = ""
        if isinstance(store, SQLiteStore) and size0 is not None:
            size = f"; file {size0 / 1e6:,.2f} MB before, {store.size_bytes() / 1e6:,.2f} MB after"
            if not vacuum:
                size += (
                    f", {store.free_bytes() / 1e6:,.2f} MB of it free for new observations "
                    "(--vacuum gives it back to the disk)"
                )
    out.print(
        f"{rep.observations_removed:,} observations fetched before {iso(until)} removed, "
        f"{rep.pages_checkpointed:,} pages checkpointed{size}"
    )


app.add_typer(hints_app, name="hints")


def main() -> None:
    """Entry point: one clear sentence on error, never a traceback."""
    try:
        rc = app(standalone_mode=False)
    except Error as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except OSError as exc:  # a file that cannot be written or read: say which, in one sentence
        if os.environ.get("RECRAWL_DEBUG"):
            raise
        where = f": {exc.filename}" if exc.filename else ""
        err.print(f"[red]error:[/] {escape((exc.strerror or str(exc)) + where)}")
        sys.exit(1)
    except Exception as exc:
        show = getattr(exc, "show", None)
        if callable(show):  # a usage error from the command-line parser
            show()
            sys.exit(getattr(exc, "exit_code", 2))
        if os.environ.get("RECRAWL_DEBUG"):
            raise
        if isinstance(exc, ValueError):  # the library's word on bad input: one sentence
            err.print(f"[red]error:[/] {escape(str(exc))}")
            sys.exit(2)
        err.print(f"[red]error:[/] {type(exc).__name__}: {escape(str(exc))}")
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
