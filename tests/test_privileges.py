"""Privileges in 0.1.0: nothing for PUBLIC; the README's grants make a producer and a worker role."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgjobq

Db = psycopg.Connection[dict[str, Any]]
RoleConnect = Callable[[str, str], psycopg.Connection[Any]]

# The grants the README documents.
COMMON_GRANTS = """
GRANT USAGE ON SCHEMA jobq TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA jobq TO {role};
"""
PRODUCER_GRANTS = """
GRANT SELECT (id), INSERT ON jobq.jobs TO {role};
GRANT USAGE ON SEQUENCE jobq.jobs_id_seq TO {role};
"""
WORKER_GRANTS = "GRANT SELECT, UPDATE ON jobq.jobs TO {role};"


@pytest.fixture
def as_role(db: Db, dsn: str) -> Iterator[RoleConnect]:
    """Creates a login role with the grants given (a template naming {role}) and connects as it."""
    created: list[str] = []
    opened: list[psycopg.Connection[Any]] = []

    def connect(role: str, grants: str) -> psycopg.Connection[Any]:
        role = f"privileges_test_{role}"
        db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        created.append(role)
        db.execute(sql.SQL(grants).format(role=sql.Identifier(role)))
        conn = psycopg.connect(dsn, user=role, autocommit=True)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()
    for role in created:
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_public_can_use_nothing_in_jobq(db: Db, as_role: RoleConnect) -> None:
    stranger = as_role("stranger", "SELECT 1")

    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        stranger.execute("SELECT jobq.enqueue('default', '{}')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        stranger.execute("SELECT count(*) FROM jobq.jobs")


def test_producer_grants_allow_enqueue_only(db: Db, as_role: RoleConnect) -> None:
    producer = as_role("producer", COMMON_GRANTS + PRODUCER_GRANTS)

    pgjobq.enqueue(producer, "emails", {"n": 1})
    pgjobq.enqueue_many(producer, "emails", [{"n": 2}, {"n": 3}])
    with pytest.raises(pgjobq.PermissionDenied):
        pgjobq.claim(producer, "emails", 1, "sneaky")

    assert db.execute("SELECT count(*) AS n FROM jobq.jobs WHERE status = 'queued'").fetchone() == {"n": 3}


def test_worker_grants_allow_working_but_not_enqueueing(db: Db, as_role: RoleConnect) -> None:
    worker = as_role("worker", COMMON_GRANTS + WORKER_GRANTS)
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[2]))")

    first, second = pgjobq.claim(worker, "emails", 2, "w1")
    pgjobq.heartbeat(worker, first.id, first.lease)
    pgjobq.complete(worker, first.id, first.lease)
    pgjobq.fail(worker, second.id, "boom", second.lease)
    pgjobq.reap(worker)
    with pytest.raises(pgjobq.PermissionDenied):
        pgjobq.enqueue(worker, "emails", {})

    assert [s.done for s in pgjobq.stats(worker)] == [1]
