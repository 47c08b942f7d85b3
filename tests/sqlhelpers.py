"""Small helpers shared by the tests of the SQL API (tests/test_sql_*.py, tests/test_extension.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import psycopg
from psycopg.types.json import Jsonb

__all__ = [
    "Connect",
    "Db",
    "claim_one",
    "enqueue",
    "job",
    "make_runnable",
    "make_stale",
    "row_digest",
    "scalar",
    "table_fingerprint",
]

Db: TypeAlias = psycopg.Connection[dict[str, Any]]
Connect: TypeAlias = Callable[..., psycopg.Connection[Any]]


def scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    """The first column of the first row of query (works with tuple and dict rows)."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, f"no row from {query!r}"
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def enqueue(
    conn: psycopg.Connection[Any],
    queue: str = "default",
    payload: dict[str, Any] | None = None,
    **options: Any,
) -> int:
    """jobq.enqueue(queue, payload, <options by name>); returns the new id."""
    named = "".join(f", {name} => %({name})s" for name in options)
    job_id = scalar(
        conn,
        f"SELECT jobq.enqueue(%(queue)s, %(payload)s{named})",
        {"queue": queue, "payload": Jsonb(payload if payload is not None else {}), **options},
    )
    assert isinstance(job_id, int)
    return job_id


def claim_one(db: Db, queue: str = "default", worker: str = "w1") -> dict[str, Any]:
    """Claim exactly one job of queue; fails the test when none is runnable."""
    rows = db.execute("SELECT * FROM jobq.claim(%s, 1, %s)", (queue, worker)).fetchall()
    assert len(rows) == 1, f"expected one claimed job in {queue!r}, got {len(rows)}"
    return rows[0]


def job(db: Db, job_id: int) -> dict[str, Any]:
    """The row of one job."""
    row = db.execute("SELECT * FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None, "no such job"
    return row


def make_runnable(db: Db, job_id: int) -> None:
    """Skip a retry backoff: the job's run_at becomes now."""
    db.execute("UPDATE jobq.jobs SET run_at = now() WHERE id = %s", (job_id,))


def make_stale(db: Db, job_id: int, age: str = "10 minutes") -> None:
    """Age a running job's lease, as if its worker had died that long ago."""
    db.execute("UPDATE jobq.jobs SET locked_at = now() - %s::interval WHERE id = %s", (age, job_id))


def table_fingerprint(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Row count and a checksum of every column of every job: equal means unchanged."""
    row = conn.execute("SELECT count(*), coalesce(sum(hashtext(j::text)), 0) FROM jobq.jobs AS j").fetchone()
    assert row is not None
    values = list(row.values()) if isinstance(row, dict) else list(row)
    return int(values[0]), int(values[1])


def row_digest(db: Db, job_id: int) -> str:
    """An md5 of one job's whole row: equal digests mean the row did not change."""
    digest = scalar(db, "SELECT md5(j::text) FROM jobq.jobs AS j WHERE j.id = %s", (job_id,))
    assert isinstance(digest, str)
    return digest
