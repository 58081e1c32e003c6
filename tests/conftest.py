from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recrawl.store import PostgresStore, SQLiteStore, SQLStore

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pg_schema() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:  # pragma: no cover - CI has PostgreSQL
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {exc}")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin.execute(f"CREATE SCHEMA {name}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        admin.execute(f"DROP SCHEMA {name} CASCADE")
        admin.close()


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "recrawl.db")


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SQLStore]]:
    """A factory of fresh, empty stores of one backend (each call: a new database)."""
    opened: list[SQLStore] = []
    schemas: list[Iterator[str]] = []

    def make() -> SQLStore:
        if request.param == "sqlite":
            s: SQLStore = SQLiteStore(tmp_path / f"s{len(opened)}.db")
        else:
            gen = pg_schema()
            schemas.append(gen)
            s = PostgresStore(next(gen))
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()
    for gen in schemas:
        next(gen, None)


@pytest.fixture
def store(make_store: Callable[[], SQLStore]) -> SQLStore:
    return make_store()


@pytest.fixture(params=["sqlite", "postgres"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SQLStore]]:
    """Open another connection (store object) on one shared, fresh store."""
    opened: list[SQLStore] = []
    schema = None if request.param == "sqlite" else pg_schema()
    url = None if schema is None else next(schema)

    def make() -> SQLStore:
        s: SQLStore = SQLiteStore(tmp_path / "s.db") if url is None else PostgresStore(url)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()
    if schema is not None:
        next(schema, None)
