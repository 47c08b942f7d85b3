"""Shared fixtures (a pytest plugin): one throwaway PostgreSQL per test session, one database per test.

The server is started once (as an unprivileged user when the tests run as
root); a template database with the extension installed is built once; every
test gets its own database cloned from that template by pytest-postgresql.
tests/conftest.py loads this module (pytest_plugins), so every test folder has these fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from pytest_postgresql import factories
from pytest_postgresql.executors import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from helpers.sqlhelpers import Connect, Db
from throwaway_pg import ThrowawayPostgres


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of our own for the whole session."""
    server = ThrowawayPostgres(fast=True)
    with server:
        yield server


def _install_extension(host: str, port: int, user: str, dbname: str, **_: Any) -> None:
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")


@pytest.fixture(scope="session")
def jobq_template(pg_server: ThrowawayPostgres) -> Iterator[NoopExecutor]:
    """A template database with pgjobq installed, cloned for every test."""
    executor = NoopExecutor(
        host=pg_server.host, port=pg_server.port, user=pg_server.user, options="", dbname="pgjobq_test"
    )
    janitor = DatabaseJanitor(
        user=executor.user,
        host=executor.host,
        port=executor.port,
        dbname=executor.template_dbname,
        as_template=True,
    )
    with janitor:
        janitor.load(_install_extension)
        yield executor


postgresql = factories.postgresql("jobq_template")


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """The connection string of this test's database."""
    info = postgresql.info
    return f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"


@pytest.fixture
def db(dsn: str) -> Iterator[Db]:
    """An autocommit connection to this test's database, rows as dicts."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def connect(dsn: str) -> Iterator[Connect]:
    """Opens more connections to this test's database; closes them afterwards."""
    opened: list[psycopg.Connection[Any]] = []

    def _connect(**kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        conn = psycopg.connect(dsn, **kwargs)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()
