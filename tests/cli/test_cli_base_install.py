"""``pip install recrawl`` with no extras: each command works or names its extra in one sentence.

A base install is simulated in a subprocess whose imports of the extras'
packages fail as they would where they are not installed (a ``sys.meta_path``
finder raising ModuleNotFoundError), so no fresh environment is built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from recrawl.cli.common import EXTRAS, require_extra
from recrawl.testing import data_file

# the top-level packages of every extra, and what they bring (fastapi's starlette)
BLOCKED = sorted(
    {m.partition(".")[0] for mods in EXTRAS.values() for m in mods} | {"distributed", "starlette"}
)

BASE_INSTALL = f"""
import sys
from importlib.abc import MetaPathFinder

class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""

CLI = (
    BASE_INSTALL
    + """
sys.argv = ["recrawl", *sys.argv[1:]]
from recrawl.cli.main import main
main()
"""
)


def base(tmp_path: Path, *args: str, code: str = CLI) -> subprocess.CompletedProcess[str]:
    """``recrawl *args`` (or ``code``) in ``tmp_path``, without any extra importable."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_sentence(stderr: str, sentence: str) -> None:
    assert stderr.strip() == f"error: {sentence}", stderr
    assert "Traceback" not in stderr


def test_the_simulated_base_install_has_no_extra(tmp_path: Path):
    res = base(tmp_path, code=BASE_INSTALL + "import plotly")
    assert res.returncode == 1 and "ModuleNotFoundError: No module named 'plotly'" in res.stderr


def test_report_names_the_service_extra_in_one_sentence(tmp_path: Path):
    # what needs no extra works: ingest, stats
    res = base(tmp_path, "ingest", "--db", "r.db", str(data_file("sample-fetches.jsonl")))
    assert res.returncode == 0, res.stderr
    assert "3,000 observations stored" in res.stdout
    res = base(tmp_path, "stats", "--db", "r.db", "--json")
    assert res.returncode == 0, res.stderr

    res = base(tmp_path, "report", "--db", "r.db", "--out", "report.html")
    assert res.returncode == 2
    one_sentence(
        res.stderr,
        "recrawl report needs the service extra (plotly is not installed): "
        "pip install 'recrawl[service]'",
    )
    assert res.stdout == ""
    assert not (tmp_path / "report.html").exists()
    assert not (tmp_path / "plotly.min.js").exists()


def test_serve_names_the_service_extra_in_one_sentence(tmp_path: Path):
    res = base(tmp_path, "serve", "--db", "s.db", "--port", "0")
    assert res.returncode == 2
    one_sentence(
        res.stderr,
        "recrawl serve needs the service extra (fastapi is not installed): "
        "pip install 'recrawl[service]'",
    )
    assert not (tmp_path / "s.db").exists()


def test_a_postgresql_store_names_the_postgres_extra(tmp_path: Path):
    res = base(tmp_path, "stats", "--db", "postgresql://nobody@127.0.0.1:1/none")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "pip install 'recrawl[postgres]'" in res.stderr and "Traceback" not in res.stderr


def test_the_demo_ends_without_its_dashboard_in_one_sentence(tmp_path: Path):
    # the demo's last step, after every other has run (the whole demo takes minutes)
    code = BASE_INSTALL + (
        "from recrawl.cli.main import _demo_dashboard\n"
        "from recrawl.config import Settings\n"
        "_demo_dashboard('recrawl-demo.db', Settings(), 0.0)\n"
    )
    res = base(tmp_path, code=code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (
        "The dashboard (report.html) needs the service extra (plotly is not installed): "
        "pip install 'recrawl[service]', then `recrawl report --db recrawl-demo.db --out "
        "report.html` writes it; every other step of the demo ran."
    )
    assert res.stderr == ""
    assert not (tmp_path / "report.html").exists()


def test_require_extra_passes_when_installed_and_exits_2_when_not(
    capsys: pytest.CaptureFixture[str],
):
    require_extra("recrawl x", "service", "json")  # importable: nothing said
    with pytest.raises(typer.Exit) as exc:
        require_extra("recrawl x", "cluster", "json", "no_such_module_of_recrawl")
    assert exc.value.exit_code == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "error: recrawl x needs the cluster extra (no_such_module_of_recrawl is not "
        "installed): pip install 'recrawl[cluster]'\n"
    )
    assert captured.out == ""


def test_plan_on_a_cluster_names_the_cluster_extra_in_one_sentence(tmp_path: Path):
    res = base(tmp_path, "plan", "--db", "r.db", "--budget", "5", "--cluster", "tcp://127.0.0.1:1")
    assert res.returncode == 2
    one_sentence(
        res.stderr,
        "recrawl plan --cluster needs the cluster extra (dask is not installed): "
        "pip install 'recrawl[cluster]'",
    )
    assert not (tmp_path / "r.db").exists()
