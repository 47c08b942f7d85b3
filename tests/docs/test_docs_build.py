"""The documentation site builds with Sphinx, warnings as errors (what ``make docs`` runs), and its
generated reference names every public SQL function and every CLI command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import clickref
import pytest
from docutils import nodes  # type: ignore[import-untyped]

from pgjobq._cli import main

from helpers.fixtures import REPO_ROOT
from helpers.sqlhelpers import Db

SPHINX_BUILD = Path(sys.executable).parent / "sphinx-build"

pytestmark = pytest.mark.xdist_group("docs-build")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module's tests by make docs' command."""
    if not SPHINX_BUILD.exists():
        pytest.fail(f"no {SPHINX_BUILD}: make venv installs it (the docs group, Python 3.11 or newer)")
    html = tmp_path_factory.mktemp("docs") / "html"
    # -n: every cross-reference must resolve; the SQL reference pages start a throwaway server of their
    # own, from the copy of PostgreSQL this session's servers use
    argv = [str(SPHINX_BUILD), "-W", "--keep-going", "-n", "-q", "-b", "html", "docs", str(html)]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        command = " ".join(argv[:-1])
        output = done.stderr + done.stdout
        pytest.fail(f"{command} <tmp> failed (exit status {done.returncode}):\n{output}", pytrace=False)
    return html


def ids(page: Path) -> set[str]:
    """The element ids of an HTML page: the targets a link can name."""
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_the_docs_build_without_warnings(site: Path) -> None:
    assert (site / "index.html").is_file()


def test_the_sql_reference_has_an_entry_for_every_public_function(site: Path, db: Db) -> None:
    rows = db.execute(
        "SELECT oid::regprocedure::text AS signature FROM pg_proc"
        " WHERE pronamespace = 'jobq'::regnamespace AND proname !~ '^_'"
    ).fetchall()
    assert len(rows) > 30  # the catalog was read
    anchors = ids(site / "reference/sql.html")
    missing = [row["signature"] for row in rows if nodes.make_id(f"sql-{row['signature']}") not in anchors]
    assert missing == [], f"docs/reference/sql.md has no entry for {', '.join(missing)}"


def test_the_cli_reference_has_an_entry_for_every_command(site: Path) -> None:
    every = [context.command_path for context in clickref.commands(main, "pgjobq")][
        1:
    ]  # pgjobq's own: the page
    assert len(every) > 20  # the tree was walked
    anchors = ids(site / "reference/cli.html")
    missing = [path for path in every if path.replace(" ", "-").replace("_", "-") not in anchors]
    assert missing == [], f"docs/reference/cli.md has no entry for {', '.join(missing)}"
