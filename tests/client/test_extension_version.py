"""The extension version check: the package works only with the extension versions it supports.

A database still at 0.3.0 (installed with ``CREATE EXTENSION pgjobq VERSION
'0.3.0'``), or without pgjobq, is refused with one IncompatibleExtension
naming what the package supports and what it found: by check_extension and
by every one-shot CLI command, before anything runs.  A worker instead keeps
trying (an operator may be mid-upgrade): tests/worker/test_extension_versions.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq import IncompatibleExtension

from helpers.databases import connect_as, fresh_database
from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import run_cli
from helpers.sqlhelpers import Connect, Db, scalar

OLD = "0.3.0"


@pytest.fixture
def old_database(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database with pgjobq 0.3.0 installed, one queued job, and the handlers' executions table."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute(f"CREATE EXTENSION pgjobq VERSION '{OLD}'")
        conn.execute(EXECUTIONS_DDL)
        conn.execute("SELECT jobq.enqueue('default', '{}')")
        yield conn


@pytest.fixture
def old_dsn(old_database: Db, pg_server: ThrowawayPostgres) -> str:
    return pg_server.dsn(old_database.info.dbname)


def job_untouched(conn: Db) -> bool:
    return bool(scalar(conn, "SELECT status = 'queued' AND attempts = 0 AND lease = 0 FROM jobq.jobs"))


def test_check_extension_returns_the_installed_version_on_a_supported_database(
    db: Db, connect: Connect
) -> None:
    version = pgjobq.check_extension(connect())

    assert version == scalar(db, "SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'")
    assert version in pgjobq.SUPPORTED_EXTENSION_VERSIONS


def test_check_extension_works_on_a_connection_whose_rows_are_dicts(db: Db) -> None:
    assert pgjobq.check_extension(db) in pgjobq.SUPPORTED_EXTENSION_VERSIONS


def test_check_extension_refuses_0_3_0_naming_both_versions_and_the_upgrade(old_dsn: str) -> None:
    with psycopg.connect(old_dsn) as conn, pytest.raises(IncompatibleExtension) as refused:
        pgjobq.check_extension(conn)

    message = str(refused.value)
    for supported in pgjobq.SUPPORTED_EXTENSION_VERSIONS:
        assert supported in message
    assert OLD in message
    assert "ALTER EXTENSION pgjobq UPDATE" in message


def test_check_extension_says_when_the_database_has_no_pgjobq(db: Db, pg_server: ThrowawayPostgres) -> None:
    with (
        fresh_database(db) as dbname,
        psycopg.connect(pg_server.dsn(dbname)) as conn,
        pytest.raises(IncompatibleExtension) as refused,
    ):
        pgjobq.check_extension(conn)

    message = str(refused.value)
    assert "has none" in message
    assert "CREATE EXTENSION pgjobq" in message


@pytest.mark.parametrize(
    "args",
    [
        ("stats",),
        ("enqueue", "default", "{}"),
        ("reap",),
    ],
    ids=["stats", "enqueue", "reap"],
)
def test_cli_one_shot_command_on_a_0_3_0_database_prints_one_line_and_exits_1(
    old_database: Db, old_dsn: str, args: tuple[str, ...]
) -> None:
    result = run_cli(old_dsn, *args)

    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and OLD in lines[0], lines[0]
    assert result.stdout == ""
    assert scalar(old_database, "SELECT count(*) FROM jobq.jobs") == 1  # enqueue added nothing
    assert job_untouched(old_database)
