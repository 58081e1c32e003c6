"""The package's import graph: no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Each recrawl module → the recrawl modules it imports anywhere in its text
    (``TYPE_CHECKING`` blocks and function bodies included: a cycle hidden there
    is still a cycle a reader has to follow)."""
    files = {_module(p): p for p in (SRC / "recrawl").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in files else base
                    if target in files and target != mod:
                        graph[mod].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in files and alias.name != mod:
                        graph[mod].add(alias.name)
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return False


def test_no_module_imports_one_that_imports_it_back() -> None:
    """The service's metrics read the service through a Protocol of their own
    (``MeteredService``) rather than importing the app that serves them."""
    graph = _graph()
    cycles = sorted((a, b) for a in graph for b in graph[a] if _reaches(graph, b, a))
    assert cycles == []
    assert "recrawl.service.app" not in graph["recrawl.service.metrics"]


def _private_imports(root: Path) -> list[str]:
    """``path: from recrawl.x import _name`` for each private name imported from recrawl."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recrawl"):
                for alias in node.names:
                    module = SRC.joinpath(*(node.module or "").split("."), alias.name)
                    if module.with_suffix(".py").exists():
                        continue  # a module (the private _exceptions, as a test reads its tree)
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(root.parent)}: {node.module}.{alias.name}")
    return found


def test_no_private_name_is_imported_from_another_module() -> None:
    """Helpers one module shares with another (or a test, or a benchmark) have a
    public name there. tests/crawl is left to the crawl loop's own review."""
    root = SRC.parent
    found = _private_imports(SRC) + _private_imports(root / "benchmarks")
    found += [f for f in _private_imports(root / "tests") if not f.startswith("tests/crawl/")]
    assert found == []


def test_the_store_imports_none_of_the_math_and_no_edge() -> None:
    """The store keeps rows: it imports the record shapes (``recrawl.records``)
    and the observation format, never the estimators, the planner, health or
    the engine, which is what lets another store implement the protocol."""
    graph = _graph()
    store = [m for m in graph if m == "recrawl.store" or m.startswith("recrawl.store.")]
    assert store
    banned = ("recrawl.estimate", "recrawl.plan", "recrawl.health", "recrawl.engine")
    found = sorted(f"{m} -> {t}" for m in store for t in graph[m] if t.startswith(banned))
    assert found == []


def test_the_records_are_data_only() -> None:
    """``recrawl.records`` (page state, outcome codes, bucket layout) imports
    nothing of recrawl but the observation format and itself."""
    graph = _graph()
    recs = [m for m in graph if m.startswith("recrawl.records")]
    assert recs
    found = sorted(
        f"{m} -> {t}"
        for m in recs
        for t in graph[m]
        if not t.startswith(("recrawl.records", "recrawl.observe.observation"))
    )
    assert found == []
