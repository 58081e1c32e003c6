"""Public helpers for tests: generated fetch logs, a manual clock, the shipped sample
files, a real server on 127.0.0.1.

``recrawl.testing.server`` (``serve_in_thread``) needs the ``service`` extra.
"""

from recrawl.clock import ManualClock
from recrawl.testing.fetchlog import generate_fetch_log, write_fetch_log
from recrawl.testing.samples import data_file

__all__ = ["ManualClock", "data_file", "generate_fetch_log", "write_fetch_log"]
