"""What every ``recrawl`` sub-command shares: the consoles, the common options, opening the store, JSON out."""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console

from recrawl._exceptions import StoreError
from recrawl.config import Settings
from recrawl.observe.observation import parse_timestamp
from recrawl.store import SQLStore, default_db, open_store

out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False)

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
AtOpt = Annotated[
    str | None,
    typer.Option("--at", help="As of this time (RFC 3339 or unix seconds; default now)."),
]


def at_required(at: str, option: str = "--at") -> float:
    try:
        return parse_timestamp(at)
    except ValueError as exc:
        raise typer.BadParameter(f"{at!r} {exc}", param_hint=option) from None


def at_time(at: str | None) -> float | None:
    return None if not at else at_required(at)


def cli_store(
    db: str | None, settings: Settings | None = None, *, existing: bool = False
) -> SQLStore:
    """Open the store; with ``existing``, a SQLite file that is not there is an
    error (a mistyped ``--db`` would otherwise read as an empty crawl)."""
    where = db or default_db()
    sqlite = not where.startswith(("postgresql://", "postgres://"))
    if existing and sqlite and not Path(where).is_file():
        raise StoreError(f"no store at {where}: create it with `recrawl init` or `recrawl ingest`")
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


def json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return finite(x.item())
    raise TypeError(type(x).__name__)


def iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
