"""Issue 31's command-line rough edges, each as a user meets it.

In-process: ``recrawl`` is run through :func:`recrawl.cli.main.main` (the
entry point, with its one-sentence errors and exit codes) with stdout and
stderr captured as a log would get them (not a terminal)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from recrawl.cli.main import main


class Run:
    """``run(*args)`` → ``(exit code, stdout, stderr)`` of ``recrawl *args``."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "argv", ["recrawl", *args])
        with pytest.raises(SystemExit) as done:
            main()
        got = self.capsys.readouterr()
        code = done.value.code
        return (code if isinstance(code, int) else 0), got.out, got.err


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    return Run(capsys, monkeypatch)


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "log.jsonl"
    rows = [
        {"url": "https://shop.example/p/1", "fetched_at": 1000, "status": 200, "record": {"p": 1}},
        {"url": "https://shop.example/p/1", "fetched_at": 90000, "status": 200, "record": {"p": 2}},
        {"url": "https://news.example/a", "fetched_at": 1000, "status": 200, "record": {"t": 1}},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.fixture
def db(tmp_path: Path, run: Run) -> str:
    """A store holding :func:`_log`."""
    path = str(tmp_path / "s.db")
    assert run("ingest", str(_log(tmp_path)), "--db", path, "-q")[0] == 0
    return path


def test_an_error_is_one_line_of_a_log_however_long(tmp_path: Path, run: Run) -> None:
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "store.db"
    code, _, err = run("stats", "--db", str(deep))
    assert code == 2
    assert err.count("\n") == 1 and f"no store at {deep}" in err, err


def test_a_mistyped_store_directory_is_refused_not_created(tmp_path: Path, run: Run) -> None:
    typo = tmp_path / "typo" / "dir" / "x.db"
    code, out, err = run("ingest", str(_log(tmp_path)), "--db", str(typo))
    assert code == 2 and f"no directory {typo.parent}" in err, err
    assert not (tmp_path / "typo").exists() and "stored" not in out
    code, _, err = run("urls", "add", str(_log(tmp_path)), "--db", str(typo))
    assert code == 2 and not (tmp_path / "typo").exists()
    # init says it creates the store: it may create its directory
    code, _, err = run("init", "--db", str(typo), "--config", str(tmp_path / "r.toml"))
    assert code == 0, err
    assert typo.is_file()


def test_site_history_of_an_unknown_site_names_it(db: str, run: Run) -> None:
    code, out, err = run("site", "history", "nosuch.example", "--db", db)
    assert code == 2 and "no site 'nosuch.example'" in err and out == ""
    # a known site with no event yet: an empty history, not an error
    code, out, err = run("site", "history", "shop.example", "--db", db, "--json")
    assert code == 0 and json.loads(out) == [], err


def test_report_into_a_new_directory_creates_it(db: str, tmp_path: Path, run: Run) -> None:
    pytest.importorskip("plotly")
    where = tmp_path / "some" / "new" / "dir"
    code, out, err = run("report", "--db", db, "--out", f"{where}/")
    assert code == 0, err
    assert (where / "report.html").is_file() and (where / "plotly.min.js").is_file()
    assert "report.html" in out
