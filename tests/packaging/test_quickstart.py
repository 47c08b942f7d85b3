"""The README's quickstart, run as a new user runs it: from the built wheel, in a clean virtualenv.

The quickstart is the part of README.md between the lines ``<!-- quickstart -->`` and
``<!-- /quickstart -->``.  Its blocks run in order, in an empty folder, against a new empty database of
the test server that libpq's variables (PGHOST, PGPORT, PGUSER, PGDATABASE) name, and nothing else of the
suite: no PYTHONPATH, no PGJOBQ_DSN, a virtualenv made with ``python -m venv`` first on PATH.  Unlike the
page test (tests/docs), the console blocks' set-up commands run too (``python -m venv .venv``,
``. .venv/bin/activate``), and ``pip install "pgjobq-py[...]"`` installs the wheel built from this tree
with the same extras (its dependencies come from the package index).  A shell's state carries from one
console block to the next as in a reader's terminal: the later blocks start with the ``.``/``source``,
``export`` and ``cd`` commands of the earlier ones.  Outputs are compared by the page test's rules
(tests/docs/runner.py); a set-up command's output is not compared, but it must succeed.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import psycopg
import pytest
from docs.runner import (
    Database,
    Failure,
    Page,
    environment,
    parse_page,
    run_console,
    run_sql,
    split_console,
    write_file_block,
)
from psycopg.rows import dict_row
from throwaway_pg import ThrowawayPostgres, find_bindir

from helpers.databases import fresh_database
from helpers.distributions import Distributions, run
from helpers.fixtures import REPO_ROOT

pytestmark = pytest.mark.xdist_group("pgjobq-py")

README = REPO_ROOT / "README.md"
QUICKSTART = re.compile(
    r"^<!-- quickstart -->\n(?P<body>.*?)^<!-- /quickstart -->$", re.MULTILINE | re.DOTALL
)
# the command that installs the published package, which here installs the built wheel instead
INSTALL_PACKAGE = re.compile(r"""^pip3?\s+install\s+(["']?)pgjobq-py(?P<extras>\[[\w,-]+\])?\1\s*$""")
# commands whose effect on the shell the following blocks keep
SHELL_STATE = re.compile(r"^(?:\.|source|export|cd)\s")
BLOCK_TIMEOUT = 600.0  # pip installing the wheel's dependencies on an empty cache
# the suite's own settings that a new user's shell does not have
NOT_A_NEW_USERS = ("PYTHONPATH", "PGJOBQ_DSN", "DATABASE_URL", "VIRTUAL_ENV")


def quickstart() -> Page:
    """The quickstart's blocks, numbered by their lines in README.md."""
    text = README.read_text(encoding="utf-8")
    found = QUICKSTART.search(text)
    if found is None:
        pytest.fail("README.md has no lines <!-- quickstart --> ... <!-- /quickstart -->", pytrace=False)
    padding = "\n" * text[: found.start("body")].count("\n")
    return parse_page(padding + found["body"], "README.md")


def as_run_here(command: str, wheel: Path) -> str:
    """The command, or for the package's install, the same install from the built wheel."""
    install = INSTALL_PACKAGE.match(command.strip())
    if install is None:
        return command
    requirement = f"{wheel}{install['extras'] or ''}"
    return f"pip install --quiet {shlex.quote(requirement)}"


def shell_state(console: str) -> list[str]:
    """The commands of a console block whose effect on the shell the following blocks keep (none from a
    block that cannot be read: run_console reports it)."""
    try:
        commands = split_console(console)
    except ValueError:
        return []
    return [command.command for command in commands if SHELL_STATE.match(command.command)]


def new_users_environment(database: Database, folder: Path, venv: Path, bindir: Path) -> dict[str, str]:
    """libpq's variables for database, venv's programs then the server's (psql) first on PATH, and none of
    the suite's own settings."""
    env = environment(database, folder, bindir)
    suite = str(Path(sys.executable).parent)
    path = [part for part in env["PATH"].split(":") if part != suite]
    env["PATH"] = ":".join([str(venv / "bin"), *path])
    for name in NOT_A_NEW_USERS:
        env.pop(name, None)
    return env


def run_quickstart(page: Page, env: dict[str, str], folder: Path, psql: Path, wheel: Path) -> list[Failure]:
    """Run the quickstart's blocks in folder, in order, as a new user would (module docstring); the
    failures."""
    failures: list[Failure] = []
    shell: list[str] = []  # the commands of the blocks so far that changed the shell's state
    for block in page.runnable:
        if block.info == "python" and write_file_block(block, folder):
            continue
        if block.info == "python":
            failure: Failure | None = Failure(
                block, "a python block of the quickstart must be a file (`# file: NAME.py`) that it runs"
            )
        elif block.info == "sql":
            failure = run_sql(block, env, str(psql), folder)
        else:
            failure = run_console(
                block,
                env,
                folder,
                BLOCK_TIMEOUT,
                setup=lambda command: as_run_here(command, wheel),
                prelude=shell,
            )
            shell += shell_state(block.text)
        if failure is not None:
            failures.append(failure)
    return failures


@pytest.mark.slow
def test_the_readme_quickstart_runs_from_the_built_wheel_in_a_clean_virtualenv(
    distributions: Distributions, pg_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    page = quickstart()
    if page.errors:
        pytest.fail("the quickstart's markup:\n" + "\n".join(page.errors), pytrace=False)
    if not any(INSTALL_PACKAGE.match(line.removeprefix("$ ").strip()) for line in page.lines):
        pytest.fail('the quickstart never runs `pip install "pgjobq-py[...]"`: nothing installs the wheel')
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, what="python -m venv")
    folder = tmp_path / "work"
    folder.mkdir()
    bindir = find_bindir()
    with (
        psycopg.connect(pg_server.dsn(), autocommit=True, row_factory=dict_row) as admin,
        fresh_database(admin) as dbname,
    ):
        database = Database(pg_server.host, pg_server.port, pg_server.user, dbname)
        env = new_users_environment(database, folder, venv, bindir)
        failures = run_quickstart(page, env, folder, bindir / "psql", distributions.wheel)
    if failures:
        pytest.fail("\n\n".join(str(failure) for failure in failures), pytrace=False)
