"""recrawl: decide what a long-running crawler should fetch next under a budget,
and notice when a site starts pushing back."""

from __future__ import annotations

from recrawl._exceptions import (
    ConfigError,
    Error,
    InvalidObservation,
    InvalidTrace,
    NotFound,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Error",
    "InvalidObservation",
    "InvalidTrace",
    "NotFound",
    "StoreError",
    "__version__",
]
