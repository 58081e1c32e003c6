"""``recrawl hints``: cheap signals (sitemaps, feeds, listings) in, and how far each is trusted.

A thin edge over :meth:`recrawl.engine.Engine.ingest_hints` and
:meth:`recrawl.engine.Engine.hint_trust`, registered on the ``recrawl`` command
by :mod:`recrawl.cli`.
"""

from __future__ import annotations

import gzip
import io
import math
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any, cast

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from recrawl.cli.common import (
    AtOpt,
    ConfigOpt,
    DbOpt,
    JsonOpt,
    Rejections,
    RejectsOpt,
    at_required,
    at_time,
    cli_store,
    err,
    iso,
    out,
    print_json,
)
from recrawl.config import load_settings
from recrawl.engine.engine import HINT_FUTURE_S, HINT_TRUST_DAYS, LAG_MEANS, Engine
from recrawl.estimate.hints import (
    TRUSTED_MEANS,
    Hint,
    InvalidHint,
    read_hint_document,
)
from recrawl.observe.compression import is_gzip
from recrawl.store import HintResult

__all__ = ["LAG_MEANS", "TRUSTED_MEANS", "hints_app"]

hints_app = typer.Typer(
    help="Cheap signals: what sitemaps, feeds and listings say of pages' last changes.",
    invoke_without_command=True,
)


@dataclass
class _FileResult:
    """What one input gave: its format, hints per source, what the store did, what was rejected."""

    name: str
    format: str = "jsonl"
    sources: Counter[str] = field(default_factory=Counter)
    result: HintResult = field(default_factory=HintResult)
    rejected: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "file": self.name,
            "format": self.format,
            "sources": dict(sorted(self.sources.items())),
            "hints": sum(self.sources.values()),
            "stored": r.stored,
            "unchanged": r.unchanged,
            "unknown": r.unknown,
            "added_urls": r.added_urls,
            "future": r.future,
            "rejected": self.rejected,
            "error": self.error,
        }


class _Position:
    """How far into a file its reader is, in bytes of the file (compressed or not)."""

    def __init__(self, raw: IO[bytes] | None) -> None:
        self.raw = raw

    def __call__(self) -> int:
        try:
            return self.raw.tell() if self.raw is not None else 0
        except (OSError, ValueError):
            return 0


def _open(name: str, stack: ExitStack) -> tuple[Any, int, _Position]:
    """A reader of the bytes of ``name`` ('-': stdin) that can peek ahead,
    decompressed when gzipped; the file's size on disk (0: unknown) and where
    its reader is."""
    if name == "-":
        raw: IO[bytes] = sys.stdin.buffer
        size = 0
        pos = _Position(None)
    else:
        p = Path(name)
        if not p.is_file():
            raise typer.BadParameter(f"{name} is not a readable file", param_hint="FILE")
        raw = stack.enter_context(p.open("rb"))
        size = p.stat().st_size
        pos = _Position(raw)
    data: Any = raw if hasattr(raw, "peek") else io.BufferedReader(cast(Any, raw))
    if is_gzip(data.peek(2)):
        data = stack.enter_context(gzip.GzipFile(fileobj=data))
    return data, size, pos


def _hints_of(
    data: Any,
    got: _FileResult,
    *,
    source: str | None,
    seen_at: float | None,
    read_at: float,
    reject: Callable[[_FileResult, str, InvalidHint], None],
) -> Iterator[Hint]:
    """The good hints of one input (:func:`recrawl.hints.read_hint_document`);
    bad entries go to ``reject``, and a document that cannot be read on ends
    the input (``got.error``): what came before it is kept. A sitemap without
    ``seen_at`` was read at ``read_at``."""
    got.format, entries = read_hint_document(data, source=source, seen_at=seen_at, read_at=read_at)
    kind = "entry" if got.format == "sitemap" else "line"
    try:
        for h in entries:
            if isinstance(h, InvalidHint):
                reject(got, kind, h)
                continue
            got.sources[h.source] += 1
            yield h
    except ET.ParseError as exc:
        got.error = f"not well-formed XML ({exc})"
    except ValueError as exc:  # a sitemap index, or another document
        got.error = str(exc)
    except (OSError, EOFError) as exc:  # a corrupt or truncated gzip file
        got.error = f"cannot be read on ({exc or type(exc).__name__})"


def _describe(r: _FileResult) -> str:
    """One line on what a file gave, for people."""
    d = r.as_dict()
    sources = ", ".join(f"{escape(s)} {n:,}" for s, n in d["sources"].items()) or "no hints"
    what = "sitemap" if r.format == "sitemap" else "hint lines"
    text = (
        f"{escape(r.name)} ({what}; {sources}): {d['stored']:,} stored, "
        f"{d['unchanged']:,} unchanged, {d['unknown']:,} for unknown URLs"
        + (f" ({d['added_urls']:,} URLs registered)" if d["added_urls"] else "")
        + f", {d['rejected']:,} rejected"
    )
    if r.error:
        text += f"; [red]stopped[/]: {escape(r.error)}"
    return text


@hints_app.command("add")
def hints_add(
    files: Annotated[
        list[str],
        typer.Argument(
            help="JSONL hint lines (url, lastmod, seen_at, source) or sitemaps (<urlset>), "
            "gzipped or not; '-' reads stdin."
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="Source name (default: each line's own; 'sitemap' for a sitemap).",
            show_default=False,
        ),
    ] = None,
    seen_at: Annotated[
        str | None,
        typer.Option(
            "--seen-at",
            help="When the files were read (RFC 3339 or unix seconds; default: each line's "
            "own; for a sitemap file, its modification time; for a sitemap on stdin, now).",
            show_default=False,
        ),
    ] = None,
    add_urls: Annotated[
        bool,
        typer.Option(
            "--add-urls",
            help="Register the URLs the store does not know, as `recrawl urls add` does "
            "(default: count and skip their hints).",
        ),
    ] = False,
    db: DbOpt = None,
    config: ConfigOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    as_json: JsonOpt = False,
    rejects: RejectsOpt = None,
) -> None:
    """Store what sitemaps, feeds and listings say of pages' last changes.

    A sitemap (found by its content, <urlset>) gives a hint per URL with a
    <lastmod>; hint lines are JSON objects with url, lastmod (W3C datetime,
    RFC 3339 or unix seconds; a date alone is its last second), seen_at (when
    the source was read) and source (a name: sitemap, feed, listing, ...).
    Only each page's latest hint per source and each new lastmod are kept: a
    sitemap read again unchanged adds nothing but when it was read. Bad lines
    are skipped and every one is named with its line (or sitemap entry) and
    field (on stderr, or in the --rejects file); the good ones are stored. Hints read (seen_at) more than 5 minutes after this
    machine's clock are rejected too. A sitemap without --seen-at was read when
    its file was last modified (stdin: now). Every FILE is checked before any
    is read: a missing one exits 2 with nothing stored. Exits 1 when any hint
    was rejected.

    Hints are acted on only once the revisits show their source right on a
    site: `recrawl hints` tells which are.
    """
    if source is not None and (not source.strip() or len(source) > 100 or "\x00" in source):
        raise typer.BadParameter("must be a name of 1 to 100 characters", param_hint="--source")
    seen = None if seen_at is None else at_required(seen_at, "--seen-at")
    for name in files:  # every path, before anything is stored
        if name != "-" and not Path(name).is_file():
            raise typer.BadParameter(f"{name} is not a readable file", param_hint="FILE")
    settings = load_settings(config)
    results: list[_FileResult] = []
    shut = ExitStack()
    named = Rejections.open(rejects, shut)

    def reject(got: _FileResult, where: str, exc: InvalidHint) -> None:
        got.rejected += 1
        named.error(got.name, exc, kind=where)

    with shut, cli_store(db, settings, existing=not add_urls) as store, ExitStack() as stack:
        engine = Engine(store, settings)
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[hints]:,} hints"), TimeRemainingColumn(),
            console=err, disable=quiet or not err.is_terminal, transient=True,
        )  # fmt: skip
        with progress:
            for name in files:
                data, size, pos = _open(name, stack)
                got = _FileResult("stdin" if name == "-" else name)
                results.append(got)
                task = progress.add_task(got.name, total=size or None, hints=0)
                read_at = time.time() if name == "-" else Path(name).stat().st_mtime
                hints: Iterable[Hint] = _hints_of(
                    data, got, source=source, seen_at=seen, read_at=read_at, reject=reject
                )

                def tick(r: HintResult, task: Any = task, pos: _Position = pos) -> None:
                    done = r.stored + r.unchanged + r.unknown
                    progress.update(task, completed=pos(), hints=done)

                got.result = engine.ingest_hints(hints, add_urls=add_urls, on_batch=tick)
                if got.result.future:
                    got.rejected += got.result.future
                    err.print(
                        f"[red]rejected[/] {escape(got.name)}: {got.result.future:,} hints "
                        f"seen after now (seen_at more than {HINT_FUTURE_S / 60:g} minutes "
                        "after this machine's clock: a wrong clock or --seen-at), not stored"
                    )
    named.summary("lines or entries")
    total = HintResult()
    for r in results:
        total.add(r.result)
    rejected = sum(r.rejected for r in results)
    failed = any(r.error for r in results)
    if as_json:
        print_json(
            {
                "files": [r.as_dict() for r in results],
                "total": {
                    "stored": total.stored,
                    "unchanged": total.unchanged,
                    "unknown": total.unknown,
                    "added_urls": total.added_urls,
                    "rejected": rejected,
                },
            }
        )
    else:
        for r in results:
            out.print(_describe(r))
        if len(results) > 1:
            out.print(
                f"total: {total.stored:,} stored, {total.unchanged:,} unchanged, "
                f"{total.unknown:,} for unknown URLs, {rejected:,} rejected"
            )
        if total.unknown and not add_urls:
            out.print(
                "Hints for URLs the store does not know are skipped (--add-urls registers them)."
            )
    if rejected or failed:
        raise typer.Exit(1)


_VERDICT_STYLE = {"trusted": "green", "not trusted": "red", "too few revisits to judge": "dim"}


def _duration(s: float | None) -> str:
    """Seconds for people: ``–``, ``40m``, ``5.2h``, ``2.7d``."""
    if s is None:
        return "–"
    if s < 3600:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h" if s < 86_400 else f"{s / 86_400:.1f}d"


def _share(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.0%}" if x in (0.0, 1.0) else f"{x:.1%}"


@hints_app.callback()
def hints(
    ctx: typer.Context,
    days: Annotated[
        float,
        typer.Option("--days", help="Judge the sources on the revisits of the last N days."),
    ] = HINT_TRUST_DAYS,
    db: DbOpt = None,
    config: ConfigOpt = None,
    at: AtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """How far each source's lastmod agreed with the revisits, per site: which hints the plan trusts.

    A revisit counts for a source when the source listed the page at the
    previous fetch already and was read again since; its lastmod moved when
    it fell between the two fetches. Recall: of the revisits that found a
    change, the share where it moved; precision: of those where it moved, the
    share that found a change. The window ends at the newest fetch in the log
    (or --at).
    """
    if ctx.invoked_subcommand is not None:
        return
    if not (days > 0 and math.isfinite(days)):
        raise typer.BadParameter("must be a positive number of days", param_hint="--days")
    settings = load_settings(config)
    until = at_time(at)
    with cli_store(db, settings, existing=True) as store:
        report = Engine(store, settings).hint_report(days=days, until=until)
    if as_json:
        print_json(report.as_dict())
        return
    sources, trust, lags = report.sources, report.trust, report.lags
    if not sources:
        out.print("No hints in the store: `recrawl hints add FILE` reads sitemaps and hint lines.")
        return
    for s in sources:
        out.print(
            f"{escape(s['source'])}: {s['pages']:,} pages, {s['lastmods']:,} lastmods, "
            f"read from {iso(s['first_seen'])} to {iso(s['last_seen'])}"
        )
    if not trust:
        out.print(
            f"No revisit of the last {days:g} days was covered by a source yet (a source "
            "covers a revisit when it listed the page at the previous fetch and was read "
            "again after it): nothing is trusted."
        )
        return
    table = Table(title=f"Hint sources against the revisits of the last {days:g} days")
    cols = (
        "site",
        "source",
        "revisits",
        "changed",
        "moved",
        "recall",
        "precision",
        "lag",
        "verdict",
    )
    for col in cols:
        table.add_column(col, justify="left" if col in ("site", "source", "verdict") else "right")
    for t in trust:
        style = _VERDICT_STYLE.get(t.verdict, "yellow")
        table.add_row(
            escape(t.site), escape(t.source), f"{t.revisits:,}", f"{t.changed:,}",
            f"{t.moved:,}", _share(t.recall), _share(t.precision),
            _duration(lags.get((t.site, t.source))), f"[{style}]{escape(t.verdict)}[/]",
        )  # fmt: skip
    out.print(table)
    out.print(TRUSTED_MEANS)
    out.print(LAG_MEANS)
