"""The library surface: what ``import recrawl`` gives, and what it does not load."""

from __future__ import annotations

import builtins
import inspect
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import BaseModel

import recrawl

EXCEPTIONS = sorted(
    name
    for name in recrawl.__all__
    if inspect.isclass(getattr(recrawl, name)) and issubclass(getattr(recrawl, name), BaseException)
)


def test_all_is_sorted_and_unique() -> None:
    assert len(set(recrawl.__all__)) == len(recrawl.__all__)
    assert recrawl.__all__ == sorted(recrawl.__all__, key=lambda n: (not n[0].isupper(), n))


@pytest.mark.parametrize("name", recrawl.__all__)
def test_every_name_resolves(name: str) -> None:
    assert getattr(recrawl, name) is not None


def test_star_import_gives_all() -> None:
    space: dict[str, object] = {}
    exec("from recrawl import *", space)
    assert set(recrawl.__all__) <= set(space)


def test_main_names_are_public() -> None:
    for name in ("Engine", "open_store", "Settings", "load_settings", "Observation",
                 "parse_observation", "PlannerConfig", "plan_cycle", "evaluate_sites",
                 "ManualClock", "ScaledClock", "Error"):  # fmt: skip
        assert name in recrawl.__all__


def test_import_loads_no_edge() -> None:
    code = (
        "import recrawl, sys; "
        "print(','.join(m for m in ('fastapi', 'uvicorn', 'plotly') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", recrawl.__version__)
    assert metadata.version("recrawl") == recrawl.__version__


def test_exceptions_are_found() -> None:
    assert {"Error", "ConfigError", "InvalidObservation", "NotFound"} <= set(EXCEPTIONS)


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_exception_subclasses_error_and_a_builtin(name: str) -> None:
    cls = getattr(recrawl, name)
    assert issubclass(cls, recrawl.Error)
    if cls is recrawl.Error:
        return
    builtin = [
        b
        for b in cls.__mro__
        if b is not Exception
        and b is not BaseException
        and b is not object
        and getattr(builtins, b.__name__, None) is b
    ]
    assert builtin, f"{name} inherits no builtin exception besides Exception"


def test_every_exception_in_the_tree_is_exported() -> None:
    from recrawl import _exceptions

    assert set(_exceptions.__all__) <= set(recrawl.__all__)


# -- the documentation names what the code has -------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _models() -> list[tuple[str, type[BaseModel]]]:
    from recrawl.config import CrawlSettings, Reserves, Settings
    from recrawl.observe.fingerprint import FieldRule

    return [("", Settings), ("reserves.", Reserves), ("crawl.", CrawlSettings),
            ("page_types.<type>.", FieldRule)]  # fmt: skip


@pytest.mark.parametrize(("prefix", "model"), _models())
def test_configuration_page_has_every_key(prefix: str, model: type[BaseModel]) -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    nested = {"reserves", "crawl", "page_types"}
    missing = [
        prefix + name
        for name in model.model_fields
        if not (prefix == "" and name in nested) and f"| `{name}` |" not in page
    ]
    assert not missing, f"docs/configuration.md has no row for {missing}"


def test_configuration_page_has_every_environment_variable() -> None:
    import recrawl.config

    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    variables = set(re.findall(r"RECRAWL_[A-Z_]+", recrawl.config.__doc__ or ""))
    assert variables
    assert {v for v in variables if f"`{v}`" not in page} == set()


def test_service_page_has_every_route() -> None:
    page = (DOCS / "service.md").read_text(encoding="utf-8")
    routes = set()
    for path in (ROOT / "src" / "recrawl" / "service").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for method, route in re.findall(
            r"@\w+\.(get|post|put|delete|patch)\(\s*\"([^\"]+)\"", text
        ):
            routes.add((method.upper(), route.replace("{url:path}", "{url}")))
    assert len(routes) > 10
    missing = sorted(f"{m} {r}" for m, r in routes if f"`{m} {r}" not in page)
    assert not missing, f"docs/service.md does not list {missing}"


def test_reference_lists_every_public_name() -> None:
    page = (DOCS / "reference" / "recrawl.md").read_text(encoding="utf-8")
    missing = [n for n in recrawl.__all__ if n != "__version__" and f"[`{n}`]" not in page]
    assert not missing, f"docs/reference/recrawl.md does not list {missing}"


def test_readme_opens_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    head = "\n".join(lines[:10])
    assert lines[0] == "# recrawl"
    assert "make demo" in head and "make test" in head
    assert len(lines) <= 130  # issue 24: a README of about 120 lines
