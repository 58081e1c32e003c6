"""`recrawl --version`."""

from __future__ import annotations

import subprocess
import sys

import recrawl


def test_version_prints_the_package_version_and_exits_0() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "recrawl.cli.main", "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"recrawl {recrawl.__version__}"
    helped = subprocess.run(
        [sys.executable, "-m", "recrawl.cli.main", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (
        helped.returncode == 0 and "--version" in helped.stdout and "pushing back" in helped.stdout
    )
