"""What every ``recrawl`` sub-command shares: the consoles, the common options, opening the store, JSON out."""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import math
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, TextIO

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from recrawl._exceptions import InvalidObservation, StoreError
from recrawl.config import Settings
from recrawl.observe.observation import parse_timestamp
from recrawl.store import SQLStore, default_db, open_store

out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False)
# a log (stderr not a terminal) gets each error and note on one line, never wrapped
err.soft_wrap = not err.is_terminal

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Store: a SQLite file, or a postgresql:// URL (default $RECRAWL_DB or ./recrawl.db).",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="Config file (default ./recrawl.toml when present).", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RowsOpt = Annotated[
    int | None,
    typer.Option(
        "--limit",
        help="Rows shown (default: 50 in the table, every row with --json).",
        min=0,
        show_default=False,
    ),
]


def rows_shown(limit: int | None, as_json: bool) -> int | None:
    """The rows a listing shows (:data:`RowsOpt`): ``limit``, else every one
    with ``--json`` (None), else 50."""
    return limit if limit is not None or as_json else 50


AtOpt = Annotated[
    str | None,
    typer.Option("--at", help="As of this time (RFC 3339 or unix seconds; default now)."),
]


RejectsOpt = Annotated[
    Path | None,
    typer.Option(
        "--rejects",
        help="Write every rejected line to this file as JSONL (file, line, field, "
        "reason), instead of naming each on stderr.",
        dir_okay=False,
    ),
]


class Rejections:
    """Names every rejected line of an input, as ``recrawl ingest`` does: one
    line each on stderr (``rejected FILE: line N: field 'f': reason``, plain
    text when stderr is not a terminal, never wrapped), or each as a JSONL row
    ``{"file", "line", "field", "reason"}`` to ``to`` (a ``--rejects`` file);
    counted by field (``whole line`` when no field is to blame) for
    :meth:`summary`."""

    def __init__(self, to: TextIO | None = None, path: Path | str | None = None) -> None:
        self.to = to
        self.path = path
        self.count = 0
        self.by_field: dict[str, int] = {}
        self.plain = not err.is_terminal

    @classmethod
    def open(cls, path: Path | None, stack: ExitStack) -> Rejections:
        """Rejections to ``path`` (opened on ``stack``; a ``--rejects`` option's
        value), or to stderr when it is None."""
        if path is None:
            return cls()
        try:
            f = stack.enter_context(path.open("w", encoding="utf-8"))
        except OSError as exc:
            raise typer.BadParameter(
                f"{path} cannot be written ({exc.strerror})", param_hint="--rejects"
            ) from None
        return cls(f, path)

    def __call__(
        self,
        file: str,
        line: int | None,
        field: str | None,
        reason: str,
        *,
        kind: str = "line",
    ) -> None:
        """Name one rejected ``line`` (a ``kind``: ``line``, or ``entry`` of a sitemap)."""
        self.count += 1
        key = field or "whole line"
        self.by_field[key] = self.by_field.get(key, 0) + 1
        if self.to is not None:
            row = {"file": file, "line": line, "field": field, "reason": reason}
            if kind != "line":
                row["kind"] = kind
            self.to.write(json.dumps(row) + "\n")
            return
        where = f"{kind} {line}: " if line is not None else ""
        what = f"field {field!r}: " if field else ""
        text = f"{file}: {where}{what}{reason}"
        if self.plain:  # (a log of many rejections: 5 times faster than rich)
            err.file.write(f"rejected {text}\n")
        else:
            err.print(f"[red]rejected[/] {escape(text)}", soft_wrap=True)

    def error(self, file: str, exc: InvalidObservation, *, kind: str = "line") -> None:
        """Name the line ``exc`` rejects (an :class:`InvalidObservation` or hint)."""
        self(file, exc.line, exc.field, exc.reason, kind=kind)

    def summary(self, what: str = "lines") -> None:
        """The closing line on stderr: how many ``what`` were rejected, by field
        (and where they were written); nothing when none was."""
        if not self.count:
            return
        fields = ", ".join(
            f"{k}: {v:,}" for k, v in sorted(self.by_field.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        where = f", each written to {self.path}" if self.path is not None else ""
        err.print(
            escape(f"{self.count:,} {what} rejected{where} (by field: {fields})"), soft_wrap=True
        )


#: What each extra of ``pyproject.toml`` brings, as imported (one import each suffices).
EXTRAS: dict[str, tuple[str, ...]] = {
    "service": ("fastapi", "fastapi_offline", "uvicorn", "prometheus_client", "plotly"),
    "postgres": ("psycopg",),
    "cluster": ("dask.distributed", "pyarrow"),
    "scrapy": ("scrapy",),
}


def missing_module(*modules: str) -> str | None:
    """The name of the first module that ``modules`` cannot import (one of them,
    or one it needs), None when all import."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return exc.name or name
    return None


def extra_sentence(what: str, extra: str, missing: str) -> str:
    """One sentence: ``what`` needs ``extra`` (``missing`` is not installed), and the pip line."""
    return f"{what} needs the {extra} extra ({missing} is not installed): pip install 'recrawl[{extra}]'"


def require_extra(what: str, extra: str, *modules: str) -> None:
    """Exit 2 with one sentence on stderr naming ``extra`` unless ``modules``
    (default: all of the extra's, :data:`EXTRAS`) import; ``what`` is the
    command, ``recrawl report``. Call before the imports that need them."""
    missing = missing_module(*(modules or EXTRAS[extra]))
    if missing is not None:
        err.print(f"[red]error:[/] {escape(extra_sentence(what, extra, missing))}", soft_wrap=True)
        raise typer.Exit(2)


def at_required(at: str, option: str = "--at") -> float:
    try:
        return parse_timestamp(at)
    except ValueError as exc:
        raise typer.BadParameter(f"{at!r} {exc}", param_hint=option) from None


def at_time(at: str | None) -> float | None:
    return None if not at else at_required(at)


def cli_store(
    db: str | None,
    settings: Settings | None = None,
    *,
    existing: bool = False,
    make_dirs: bool = False,
) -> SQLStore:
    """Open the store; with ``existing``, a SQLite file that is not there is an
    error (a mistyped ``--db`` would otherwise read as an empty crawl). A new
    SQLite file goes only into a directory that is there (a mistyped directory
    is an error, not a new store in a new directory) unless ``make_dirs``
    (``recrawl init`` and ``recrawl demo``, which say they create the store)."""
    where = db or default_db()
    sqlite = not where.startswith(("postgresql://", "postgres://"))
    if existing and sqlite and not Path(where).is_file():
        raise StoreError(f"no store at {where}: create it with `recrawl init` or `recrawl ingest`")
    parent = Path(where).parent
    if sqlite and not make_dirs and not parent.is_dir() and where != ":memory:":
        raise StoreError(
            f"no directory {parent} for the store {where}: create it first "
            "(or `recrawl init --db` creates it)"
        )
    return open_store(db, half_life_days=settings.half_life_days if settings else None)


def finite(x: Any) -> Any:
    """``x`` with every infinite or NaN float replaced by None (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def print_json(obj: Any) -> None:
    """Valid JSON on stdout: non-finite numbers become null, as the service writes them."""
    out.print_json(json.dumps(finite(obj), default=json_default, allow_nan=False))


def write_json(obj: Any) -> None:
    """:func:`print_json` written directly: rich's takes minutes over 100,000 rows."""
    sys.stdout.write(
        json.dumps(finite(obj), default=json_default, allow_nan=False, indent=2) + "\n"
    )


def json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return finite(x.item())
    raise TypeError(type(x).__name__)


def iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
