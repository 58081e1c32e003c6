from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recrawl.store import SQLiteStore


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "recrawl.db")


@pytest.fixture
def store(db_path: str) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db_path)
    yield s
    s.close()
