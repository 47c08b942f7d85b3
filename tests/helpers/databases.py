"""Extra roles, databases and connections on the test server, for tests that need more than one database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from throwaway_pg import ThrowawayPostgres

from helpers.sqlhelpers import Db

__all__ = ["connect_as", "fresh_database", "login_role", "unique_name"]


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@contextmanager
def login_role(db: Db) -> Iterator[str]:
    """A new non-superuser LOGIN role; dropped afterwards with what it owns or was granted in db."""
    role = unique_name("jobq_role")
    db.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


@contextmanager
def fresh_database(db: Db, owner: str | None = None) -> Iterator[str]:
    """A new database from template0 (so without pgjobq), dropped afterwards."""
    dbname = unique_name("jobq_db")
    query = sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(dbname))
    if owner is not None:
        query += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
    db.execute(query)
    try:
        yield dbname
    finally:
        db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


def connect_as(server: ThrowawayPostgres, dbname: str, user: str | None = None) -> Db:
    return psycopg.connect(
        host=server.host,
        port=server.port,
        user=user or server.user,
        dbname=dbname,
        autocommit=True,
        row_factory=dict_row,
    )
