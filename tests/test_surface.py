"""The library surface: what ``import recrawl`` gives, and what it does not load."""

from __future__ import annotations

import builtins
import inspect
import re
import subprocess
import sys
from importlib import metadata

import pytest

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
