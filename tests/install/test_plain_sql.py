"""Plain-SQL installs (pgjobq sql install | upgrade) and the pg_tle registration (pgjobq sql pgtle).

Where the extension's files cannot be installed (a managed PostgreSQL), the
plain scripts are run with psql by a database owner without superuser.  They
run here on a private copy of the machine's PostgreSQL that has no pgjobq
files at all, and the catalog they leave is compared with that of CREATE
EXTENSION on the test server (the comparison of test_installation.py, less
what only an extension has: its pg_extension row and initial privileges).
pg_tle cannot be installed here (no Debian package, no network to build it):
its script is checked to register exactly the bodies the plain scripts run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pg_versions
import psycopg
import pytest
from install.test_installation import CATALOG, catalog
from psycopg import sql
from throwaway_pg import ThrowawayPostgres, find_bindir

import pgjobq
from pgjobq._install import plain as _sql_install

from helpers.databases import connect_as, unique_name
from helpers.fixtures import REPO_ROOT
from helpers.sqlhelpers import Db, scalar

CURRENT = _sql_install.current_version()
OLD = "0.4.0"  # the plain install that is upgraded
ONLY_EXTENSIONS_HAVE = ("extension", "initial privileges")


@pytest.fixture(scope="module")
def bare_server() -> Iterator[ThrowawayPostgres]:
    """A server of the machine's major with no pgjobq files: CREATE EXTENSION pgjobq cannot work there."""
    with tempfile.TemporaryDirectory(prefix="pgjobq-bare-") as folder:
        Path(folder).chmod(0o755)
        # a copy of the machine's PostgreSQL without pgjobq's files; an error here fails the tests: no skip
        bindir = pg_versions.installed_copy(Path(folder) / "programs", extension_files=())
        with ThrowawayPostgres(fast=True, bindir=bindir) as server:
            yield server


class Owner:
    """A database owned by a new LOGIN role without superuser, on one server."""

    def __init__(self, server: ThrowawayPostgres, role: str) -> None:
        self.server = server
        self.role = role
        self.dbname = unique_name("jobq_plain")
        with connect_as(server, "postgres") as admin:
            if scalar(admin, "SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)) == 0:
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(role)))
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                    sql.Identifier(self.dbname), sql.Identifier(role)
                )
            )

    @property
    def dsn(self) -> str:
        return f"host={self.server.host} port={self.server.port} user={self.role} dbname={self.dbname}"

    def connect(self) -> Db:
        return connect_as(self.server, self.dbname, self.role)

    def psql(self, script: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run script with psql as the owner, stopping at the first error, as docs/howto/install.md says."""
        psql = find_bindir() / "psql"
        command = [str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", self.dsn]
        result = subprocess.run(command, input=script, capture_output=True, text=True)
        if check:
            assert result.returncode == 0, result.stderr
        return result


@pytest.fixture(scope="module")
def role() -> str:
    """The owner's name, the same on both servers (the privileges compared name it)."""
    return unique_name("jobq_owner")


@pytest.fixture
def plain(bare_server: ThrowawayPostgres, role: str) -> Owner:
    """An owner's database on the server without pgjobq's files."""
    return Owner(bare_server, role)


@pytest.fixture(scope="module")
def created(pg_server: ThrowawayPostgres, role: str) -> dict[str, list[Any]]:
    """The catalog CREATE EXTENSION pgjobq makes, run by a database owner (on the test server)."""
    owner = Owner(pg_server, role)
    with owner.connect() as conn:
        conn.execute("CREATE EXTENSION pgjobq")
        assert scalar(conn, "SELECT jobq.version()") == CURRENT
        return catalog(conn)


def assert_same_catalog(conn: Db, created: dict[str, list[Any]]) -> None:
    found = catalog(conn)
    assert found["extension"] == []
    for part in CATALOG:
        if part not in ONLY_EXTENSIONS_HAVE:
            assert found[part] == created[part], part


def smoke(conn: Db) -> None:
    """Enqueue, claim, complete, fail and redrive through the SQL API."""
    first = scalar(conn, "SELECT jobq.enqueue('emails', '{\"to\": \"ada\"}', max_attempts => 1)")
    second = scalar(conn, "SELECT jobq.enqueue('emails', '{}')")
    leases = {row["id"]: row["lease"] for row in conn.execute("SELECT * FROM jobq.claim('emails', 2, 'w1')")}
    conn.execute("SELECT jobq.complete(%s, %s)", (second, leases[second]))
    conn.execute("SELECT jobq.fail(%s, 'boom', %s)", (first, leases[first]))
    redriven = [row["id"] for row in conn.execute("SELECT jobq.retry_failed('emails') AS id")]
    stats = conn.execute("SELECT queue, queued, done, failed FROM jobq.stats()").fetchall()
    assert len(leases) == 2
    assert redriven == [first]
    assert stats == [{"queue": "emails", "queued": 1, "done": 1, "failed": 0}]


def test_the_current_script_the_package_puts_together_is_the_one_make_builds(tmp_path: Path) -> None:
    built = tmp_path / f"pgjobq--{CURRENT}.sql"
    subprocess.run(["make", "-s", "build", f"SCRIPT={built}"], cwd=REPO_ROOT, check=True, capture_output=True)

    assembled = _sql_install.install_parts(CURRENT)

    # the package builds it from sql/src with make build's builder, so the plain, the pg_tle and the
    # extension install all run the same text
    assert [part.sql for part in assembled] == [_sql_install.plain(built.read_text(), built.name)]


def test_a_database_owner_installs_pgjobq_as_plain_sql_where_the_extension_files_are_absent(
    plain: Owner, created: dict[str, list[Any]]
) -> None:
    with plain.connect() as conn:
        assert scalar(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
        assert scalar(conn, "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgjobq'") == 0

        plain.psql(_sql_install.install_script())

        assert scalar(conn, "SELECT jobq.version()") == CURRENT
        assert_same_catalog(conn, created)
        smoke(conn)


def test_a_plain_install_of_an_old_version_upgraded_by_the_cli_equals_create_extension(
    plain: Owner, created: dict[str, list[Any]]
) -> None:
    with plain.connect() as conn:
        plain.psql(_sql_install.install_script(OLD))
        recorded = scalar(conn, "SELECT version FROM jobq.plain_install")
        job_id = scalar(conn, "SELECT jobq.enqueue('emails', '{\"kept\": true}')")

        upgrade = cli("sql", "upgrade", "--dsn", plain.dsn)
        plain.psql(upgrade.stdout)

        assert recorded == OLD
        assert f"-- pgjobq--{OLD}--" in upgrade.stdout
        assert scalar(conn, "SELECT jobq.version()") == CURRENT
        assert scalar(conn, "SELECT payload FROM jobq.jobs WHERE id = %s", (job_id,)) == {"kept": True}
        conn.execute("DELETE FROM jobq.jobs")
        assert_same_catalog(conn, created)
        smoke(conn)


def test_the_client_and_the_cli_work_on_a_plain_install(plain: Owner) -> None:
    plain.psql(_sql_install.install_script())
    with psycopg.connect(plain.dsn, autocommit=True) as conn:
        version = pgjobq.check_extension(conn)
        job_id = pgjobq.enqueue(conn, "emails", {"n": 1})
    listed = cli("jobs", "list", "--json", "--dsn", plain.dsn)

    assert version == CURRENT
    assert f'"id": {job_id}' in listed.stdout


def test_a_superuser_installs_for_the_owner_with_owner(plain: Owner) -> None:
    script = cli("sql", "install", "--owner", plain.role).stdout
    with connect_as(plain.server, plain.dbname) as superuser:  # the server's superuser runs psql
        superuser.execute(script)
        owners = superuser.execute(
            "SELECT DISTINCT relowner::regrole::text AS owner FROM pg_class"
            " WHERE relnamespace = 'jobq'::regnamespace"
        ).fetchall()
    with plain.connect() as conn:
        version = scalar(conn, "SELECT jobq.version()")

    assert owners == [{"owner": plain.role}]
    assert version == CURRENT


def test_an_upgrade_refuses_a_database_at_another_version_and_changes_nothing(plain: Owner) -> None:
    plain.psql(_sql_install.install_script(OLD))
    result = plain.psql(_sql_install.upgrade_script("0.5.0"), check=False)

    with plain.connect() as conn:
        recorded = scalar(conn, "SELECT version FROM jobq.plain_install")
    assert result.returncode != 0
    assert "this upgrade starts from pgjobq 0.5.0, but the database has 0.4.0" in result.stderr
    assert recorded == OLD


def test_a_second_install_refuses_an_existing_jobq_schema(plain: Owner) -> None:
    plain.psql(_sql_install.install_script())
    result = plain.psql(_sql_install.install_script(), check=False)

    assert result.returncode != 0
    assert "schema jobq already exists" in result.stderr


def test_the_cli_sends_an_extension_install_to_alter_extension(
    pg_server: ThrowawayPostgres, role: str
) -> None:
    owner = Owner(pg_server, role)
    with owner.connect() as conn:
        conn.execute("CREATE EXTENSION pgjobq")
    result = cli("sql", "upgrade", "--dsn", owner.dsn, check=False)

    assert result.returncode == 1
    assert result.stdout == ""
    assert "ALTER EXTENSION pgjobq UPDATE" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_pgtle_script_registers_the_bodies_the_plain_scripts_run() -> None:
    script = cli("sql", "pgtle").stdout
    calls = re.findall(
        r"^SELECT pgtle\.(\w+)\('pgjobq', ([^$]*?),? ?\$_pgtle_\$\n(.*?)\n\$_pgtle_\$\);$",
        script,
        re.MULTILINE | re.DOTALL,
    )
    plain_install = _sql_install.install_script()
    first = _sql_install.released_versions()[0]
    steps = _sql_install.upgrade_parts(first)

    assert [(name, arguments.split(",")[0]) for name, arguments, _ in calls] == [
        ("install_extension", f"'{first}'"),
        ("install_extension_version_sql", f"'{CURRENT}'"),
        *[("install_update_path", f"'{step.source}'") for step in steps],
    ]
    # byte for byte what the plain scripts run: the current install, the first release, every step
    bodies = [body for _, _, body in calls]
    assert bodies[1] + "\n" in plain_install
    assert bodies[0] + "\n" == _sql_install.install_parts(first)[0].sql
    assert bodies[2:] == [step.sql.rstrip("\n") for step in steps]
    assert all(step.sql.rstrip("\n") in _sql_install.upgrade_script(first) for step in steps)
    assert script.rstrip().endswith(f"SELECT pgtle.set_default_version('pgjobq', '{CURRENT}');\n\nCOMMIT;")
    comment = re.search(r"^comment = '(.*)'$", (REPO_ROOT / "pgjobq.control").read_text(), re.MULTILINE)
    assert comment is not None
    assert calls[0][1] == f"'{first}', '{comment.group(1)}'"  # the control file's description


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("SELECT 1;\n", "a psql guard line"),
        ("\\echo x \\quit\nSELECT pg_catalog.pg_extension_config_dump('jobq.t', '') WHERE true;\n",
         "an unguarded pg_extension_config_dump"),
        ("\\echo x \\quit\nCREATE SCHEMA @extschema@;\n", "@extschema@"),
        ("\\echo x \\quit\n\\set ON_ERROR_STOP on\n", "a psql meta-command"),
        ("\\echo x \\quit\nSELECT '$_pgtle_$';\n", "$_pgtle_$"),
    ],
    ids=["no-guard", "config-dump", "extschema", "meta-command", "pgtle-quote"],
)  # fmt: skip
def test_a_script_the_generator_cannot_make_plain_is_refused_naming_why(script: str, problem: str) -> None:
    with pytest.raises(
        pgjobq.InvalidArgument, match=re.escape(f"pgjobq--9.9.9.sql cannot be made plain SQL: {problem}")
    ):
        _sql_install.plain(script, "pgjobq--9.9.9.sql")


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The pgjobq command, run as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "pgjobq", *args], capture_output=True, text=True, timeout=60
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result
