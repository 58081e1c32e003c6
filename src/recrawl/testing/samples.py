"""The sample files shipped in the package, for the demo, tests and benchmarks.

``sample-fetches.jsonl`` (a generated fetch log) and ``demo.toml`` (its
configuration) are what ``recrawl demo`` ingests; ``ota-sample.jsonl`` holds
real change histories of Open Terms Archive documents (ODC-By), as
:func:`recrawl.observe.traces.load_traces` reads them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_file"]


def data_file(name: str) -> Path:
    """The path of the shipped sample file ``name`` (it may not exist)."""
    return Path(__file__).parents[1] / "data" / name
