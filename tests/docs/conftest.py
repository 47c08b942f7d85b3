"""Fixtures of the documentation's tests: each page's own database on the suite's server; docs/_ext
importable.

The examples run on the machine's own PostgreSQL only (the fixtures' default target for this folder): they
show behaviour, and the other majors are covered by the rest of the suite.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from throwaway_pg import ThrowawayPostgres

from .runner import Database
from helpers.databases import fresh_database
from helpers.fixtures import REPO_ROOT, Clones

__all__ = ["PageDatabase"]

# docs/_ext: the Sphinx extensions that test_reference.py imports, as docs/conf.py puts them on sys.path
sys.path.insert(0, str(REPO_ROOT / "docs" / "_ext"))

PageDatabase = Callable[[bool], AbstractContextManager[Database]]


@contextlib.contextmanager
def roles_dropped_after(server: ThrowawayPostgres) -> Iterator[None]:
    """Drop the roles created meanwhile (a role belongs to the server, not to the page's database: so two
    pages may each create role app).  Their database must be gone by then, with what they owned there."""
    query = "SELECT rolname FROM pg_roles"
    before = {row[0] for row in server.query(query)}
    try:
        yield
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            for (role,) in admin.execute(query).fetchall():
                if role not in before:
                    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def page_database(pg_server: ThrowawayPostgres, clones: Clones) -> PageDatabase:
    """Makes a page's database, dropped afterwards with the roles the page created: a clone of the template
    with pgjobq installed, or, given empty=True, a database from template0 without it."""

    @contextlib.contextmanager
    def make(empty: bool) -> Iterator[Database]:
        with roles_dropped_after(pg_server), database(empty) as made:
            yield made

    @contextlib.contextmanager
    def database(empty: bool) -> Iterator[Database]:
        if empty:
            with (
                psycopg.connect(pg_server.dsn(), autocommit=True, row_factory=dict_row) as admin,
                fresh_database(admin) as dbname,
            ):
                yield Database(pg_server.host, pg_server.port, pg_server.user, dbname)
            return
        clones.clone()
        try:
            yield Database(pg_server.host, pg_server.port, pg_server.user, clones.name)
        finally:
            clones.remove()

    return make
