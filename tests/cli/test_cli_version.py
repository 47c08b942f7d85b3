"""pgjobq version, run as a real process: the client's version, pgjobq's in the database (the extension,
a plain-SQL install, or none; supported by this client or not) and the server's; pgjobq --version, the
client's alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

from pgjobq._install import plain
from pgjobq._version import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS

from helpers.databases import connect_as, fresh_database
from helpers.processes import run_cli
from helpers.sqlhelpers import Db

CLIENT_LINE = (
    f"client: pgjobq-py {PACKAGE_VERSION} "
    f"(supports the pgjobq extension {' or '.join(SUPPORTED_EXTENSION_VERSIONS)})"
)
UNSUPPORTED = "0.7.0"  # an extension version older than every one this client supports


@pytest.fixture
def server_version(db: Db) -> tuple[str, int]:
    """The test server's server_version and server_version_num, as SHOW gives them."""
    shown = db.execute(
        "SELECT current_setting('server_version') AS v, current_setting('server_version_num') AS n"
    )
    row = shown.fetchone()
    assert row is not None
    return row["v"], int(row["n"])


@pytest.fixture
def empty_dsn(db: Db, pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A database of its own without pgjobq; dropped afterwards."""
    with fresh_database(db) as dbname:
        yield pg_server.dsn(dbname)


def test_version_prints_the_client_the_extension_and_the_server(
    dsn: str, server_version: tuple[str, int]
) -> None:
    result = run_cli(dsn, "version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        CLIENT_LINE,
        f"extension: pgjobq {plain.current_version()} (CREATE EXTENSION), supported by this client",
        f"server: PostgreSQL {server_version[0]}, server_version_num {server_version[1]}",
    ]
    assert result.stderr == ""


def test_version_json_prints_one_object_with_the_three(dsn: str, server_version: tuple[str, int]) -> None:
    result = run_cli(dsn, "version", "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "client": {
            "name": "pgjobq-py",
            "version": PACKAGE_VERSION,
            "supported_extension_versions": list(SUPPORTED_EXTENSION_VERSIONS),
        },
        "extension": {"version": plain.current_version(), "mode": "extension", "supported": True},
        "server": {"version": server_version[0], "version_num": server_version[1]},
    }


def test_version_says_when_the_database_has_no_pgjobq(empty_dsn: str) -> None:
    result = run_cli(empty_dsn, "version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        "extension: none in this database (CREATE EXTENSION pgjobq; without the extension's files: "
        "pgjobq sql install | psql)"
    )
    assert json.loads(run_cli(empty_dsn, "version", "--json").stdout)["extension"] is None


def test_version_names_a_plain_sql_install(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(plain.install_script(None).encode())

    result = run_cli(empty_dsn, "version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        f"extension: pgjobq {plain.current_version()} (plain-SQL install), supported by this client"
    )


def test_version_says_this_client_does_not_support_an_older_extension_and_how_to_upgrade(
    empty_dsn: str, pg_server: ThrowawayPostgres
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    assert isinstance(dbname, str)
    with connect_as(pg_server, dbname) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(UNSUPPORTED)))

    text = run_cli(empty_dsn, "version")
    as_json = run_cli(empty_dsn, "version", "--json")

    assert text.returncode == as_json.returncode == 0, text.stderr
    assert text.stdout.splitlines()[1] == (
        f"extension: pgjobq {UNSUPPORTED} (CREATE EXTENSION), not supported by this client: "
        "ALTER EXTENSION pgjobq UPDATE"
    )
    assert json.loads(as_json.stdout)["extension"] == {
        "version": UNSUPPORTED,
        "mode": "extension",
        "supported": False,
    }


def test_version_without_a_reachable_database_prints_the_client_then_one_error_line_and_exits_1(
    tmp_path: Path,
) -> None:
    unreachable = f"host={tmp_path} port=1 dbname=nowhere connect_timeout=5"  # a folder without a socket

    result = run_cli(unreachable, "version")

    assert result.returncode == 1
    assert result.stdout.splitlines() == [CLIENT_LINE]
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: cannot connect to the database: ")


def test_version_json_without_a_reachable_database_prints_the_client_alone(tmp_path: Path) -> None:
    unreachable = f"host={tmp_path} port=1 dbname=nowhere connect_timeout=5"

    result = run_cli(unreachable, "version", "--json")

    assert result.returncode == 1
    assert list(json.loads(result.stdout)) == ["client"]


def test_dash_dash_version_prints_the_client_alone_without_a_database(tmp_path: Path) -> None:
    result = run_cli(f"host={tmp_path} port=1", "--version")

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"pgjobq, version {PACKAGE_VERSION}\n"
