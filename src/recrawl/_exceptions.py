"""The exceptions recrawl raises.

One tree, rooted at :class:`Error`; every subclass also inherits the builtin
whose meaning it shares, so callers may catch either::

    Error
    ├── InvalidObservation (ValueError)   a fetch observation failed validation
    │   └── InvalidHint                   a hint line or sitemap entry failed validation
    ├── InvalidTrace (ValueError)         a change-trace line failed validation
    ├── InvalidDocument (ValueError)      a whole input is not of a format read (not JSON, not a sitemap)
    ├── ConfigError (ValueError)          configuration is missing or malformed
    ├── StoreError (RuntimeError)         the store could not be opened or written
    │   └── StoreFull                     the disk or the store's size limit is full
    ├── ClusterUnreachable (ConnectionError)  the Dask scheduler to plan on cannot be reached
    └── NotFound (LookupError)            a page, site or lease does not exist
"""

from __future__ import annotations

__all__ = [
    "ClusterUnreachable",
    "ConfigError",
    "Error",
    "InvalidDocument",
    "InvalidHint",
    "InvalidObservation",
    "InvalidTrace",
    "NotFound",
    "StoreError",
    "StoreFull",
]


class Error(Exception):
    """Base class of every error recrawl raises on purpose."""


class InvalidObservation(Error, ValueError):
    """A fetch observation is malformed.

    ``line`` counts from 1 within its input (None when not from a file);
    ``field`` names the offending field (None when the line as a whole is bad).
    """

    def __init__(self, message: str, *, field: str | None = None, line: int | None = None):
        self.field = field
        self.line = line
        self.reason = message
        where = f"line {line}: " if line is not None else ""
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}{what}{message}")


class InvalidHint(InvalidObservation):
    """A hint line or sitemap entry is malformed (``line`` counts from 1,
    ``field`` names the field). A kind of :class:`InvalidObservation`: a hint
    is evidence about a page, read and rejected the same way."""


class InvalidTrace(Error, ValueError):
    """A change-trace line is malformed (``line`` counts from 1)."""

    def __init__(self, message: str, *, line: int | None = None):
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class InvalidDocument(Error, ValueError):
    """A whole input is not of a format recrawl reads: a body that is not a JSON
    array, a document that is not well-formed XML or not a sitemap. Unlike
    :class:`InvalidObservation`, nothing in it could be taken (HTTP 400)."""


class ConfigError(Error, ValueError):
    """Configuration is missing or malformed."""


class StoreError(Error, RuntimeError):
    """The store could not be opened, migrated or written."""


class StoreFull(StoreError):
    """The store's disk is full, or the database reached its size limit
    (SQLite's ``SQLITE_FULL``, PostgreSQL's ``disk_full``). The write that met
    it was rolled back whole: nothing of it is stored, everything written
    before is intact, and the same write succeeds once space is freed (HTTP
    507 from the service)."""


class ClusterUnreachable(Error, ConnectionError):
    """The Dask scheduler a plan was to run on (``cluster`` in
    ``recrawl.toml``, ``recrawl plan --cluster``) did not answer: nothing was
    planned."""


class NotFound(Error, LookupError):
    """A page, site or lease does not exist."""
