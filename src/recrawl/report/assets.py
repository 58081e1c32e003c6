"""plotly.js as a static asset: read once from the installed ``plotly`` package.

The dashboard references the script by URL instead of inlining its 4.8 MB in
every page: ``recrawl serve`` serves it at :data:`PLOTLY_PATH` with a year's
cache lifetime and an ETag (:mod:`recrawl.service.static`), and ``recrawl
report`` writes it beside the HTML file as :data:`PLOTLY_FILE` (or inlines it
with ``--inline``). The served name carries plotly's version, so a new version
is a new URL and the long cache lifetime never serves a stale script.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import plotly
from plotly.offline import get_plotlyjs

__all__ = [
    "PLOTLY_FILE",
    "PLOTLY_PATH",
    "PLOTLY_VERSION",
    "plotly_etag",
    "plotly_js",
    "write_plotly",
]

PLOTLY_VERSION: str = str(plotly.__version__)
"""The version of the installed ``plotly`` package (whose plotly.js is served)."""

PLOTLY_PATH = f"/static/plotly-{PLOTLY_VERSION}.min.js"
"""Where the service serves plotly.js (absolute path on the service)."""

PLOTLY_FILE = "plotly.min.js"
"""The script's file name beside a report written by ``recrawl report``."""


@lru_cache(maxsize=1)
def plotly_js() -> bytes:
    """plotly.js, minified, UTF-8 (about 4.8 MB)."""
    return str(get_plotlyjs()).encode("utf-8")


@lru_cache(maxsize=1)
def plotly_etag() -> str:
    """A strong ETag for :func:`plotly_js` (quoted, as the header carries it)."""
    return '"' + hashlib.sha256(plotly_js()).hexdigest()[:32] + '"'


def write_plotly(directory: Path) -> Path:
    """Write :data:`PLOTLY_FILE` into ``directory`` (unless it already holds
    the same bytes) and return its path."""
    path = directory / PLOTLY_FILE
    data = plotly_js()
    if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
        path.write_bytes(data)
    return path
