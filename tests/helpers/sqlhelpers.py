"""Small helpers shared by the tests of the SQL API (tests/sql/, tests/install/), and the types of every test.

Db is the type of the ``db`` fixture (rows as dicts), Connect that of the ``connect`` fixture.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeAlias

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from helpers.processes import wait_until

__all__ = [
    "MARKER_CHANNEL",
    "Connect",
    "Db",
    "JobsSnapshot",
    "claim_one",
    "enqueue",
    "fill",
    "job",
    "jobs_snapshot",
    "listen_to_queues",
    "make_runnable",
    "make_stale",
    "notifications_before_marker",
    "queued_rows_unlocked",
    "record_notices",
    "row_digest",
    "scalar",
    "statistic",
    "statuses",
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


def fill(conn: psycopg.Connection[Any], count: int, queue: str = "default", priority: int = 0) -> list[int]:
    """count jobs with empty payloads in one jobq.enqueue_many; returns their ids in order."""
    ids = scalar(
        conn,
        "SELECT jobq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]), priority => %s)",
        (queue, count, priority),
    )
    assert isinstance(ids, list)
    return ids


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
    """Age a running job's lease, as if its worker had died that long ago (its length stays the same)."""
    db.execute(
        "UPDATE jobq.jobs SET locked_at = now() - %(age)s::interval,"
        " lease_expires_at = now() - %(age)s::interval + (lease_expires_at - locked_at) WHERE id = %(id)s",
        {"age": age, "id": job_id},
    )


def statuses(db: Db) -> dict[str, int]:
    """How many jobs of each status jobq.jobs holds (statuses without jobs left out)."""
    rows = db.execute("SELECT status, count(*) AS n FROM jobq.jobs GROUP BY status").fetchall()
    return {row["status"]: row["n"] for row in rows}


def statistic(db: Db, query: str, settled: Callable[[Any], bool], timeout: float = 10.0) -> Any:
    """The value of query (over cumulative statistics) once settled(value) holds; fails after timeout.

    PostgreSQL 15 and newer report a session's statistics when asked to
    (pg_stat_force_next_flush); before 15 a backend sends them to the
    statistics collector at most every half second, so the value is read
    again until it settles.
    """
    flush = scalar(db, "SELECT current_setting('server_version_num')::int >= 150000")
    values: list[Any] = []

    def read() -> bool:
        if flush:
            db.execute("SELECT pg_stat_force_next_flush()")
        values.append(scalar(db, query))
        return settled(values[-1])

    assert wait_until(read, timeout, interval=0.1), f"{query!r} gave {values[-1]!r} for {timeout} s"
    return values[-1]


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


class JobsSnapshot(NamedTuple):
    """Every row of jobq.jobs with every column, in id order, and where the id sequence stands."""

    rows: list[dict[str, Any]]
    sequence: dict[str, Any]


def jobs_snapshot(conn: psycopg.Connection[Any]) -> JobsSnapshot:
    """All of jobq.jobs and its id sequence: equal snapshots mean nothing changed, not even an id spent."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT j.* FROM jobq.jobs AS j ORDER BY j.id").fetchall()
        sequence = cur.execute("SELECT s.last_value, s.is_called FROM jobq.jobs_id_seq AS s").fetchone()
    assert sequence is not None
    return JobsSnapshot(rows, sequence)


# The channel notifications_before_marker sends its marker on; listen_to_queues listens on it.
MARKER_CHANNEL = "pgjobq_test_marker"


def listen_to_queues(conn: psycopg.Connection[Any], queues: Iterable[str]) -> None:
    """LISTEN, on an autocommit connection, on jobq_<queue> for every queue, and on the marker channel.

    The listener also waits on every valid queue name (jobq.register_waiter, for an hour), as an idle worker
    does, so that enqueues notify it.  The names need not be valid queue names: a channel is any
    identifier, so a test can listen where a bad name would have notified.
    """
    assert conn.autocommit, "LISTEN takes effect at commit: use an autocommit connection"
    for channel in [MARKER_CHANNEL, *(f"jobq_{queue}" for queue in queues)]:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    for queue in queues:
        if re.fullmatch(r"[a-z0-9_]{1,58}", queue):
            registered = conn.execute(
                "SELECT registered FROM jobq.register_waiter(%s, 'listener', '1 hour')", (queue,)
            )
            assert registered.fetchone() == (True,), "no producer may be in flight while a listener registers"


def notifications_before_marker(
    listener: psycopg.Connection[Any], sender: psycopg.Connection[Any], timeout: float = 10.0
) -> list[tuple[str, str]]:
    """The (channel, payload) of every notification listener receives before a marker that sender sends now.

    Notifications reach a listener in the order their transactions committed, so anything committed
    before this call arrives before the marker: no waiting on a guess.  listener must have run
    listen_to_queues; sender must be in autocommit mode.
    """
    assert sender.autocommit, "a notification is only delivered at commit: use an autocommit sender"
    token = uuid.uuid4().hex
    sender.execute("SELECT pg_catalog.pg_notify(%s, %s)", (MARKER_CHANNEL, token))
    heard: list[tuple[str, str]] = []
    for notify in listener.notifies(timeout=timeout):
        if notify.channel == MARKER_CHANNEL:
            if notify.payload == token:
                return heard
            continue  # a marker of an earlier call
        heard.append((notify.channel, notify.payload))
    raise AssertionError(f"the marker notification did not arrive within {timeout} s; heard {heard}")


def queued_rows_unlocked(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(queued jobs, queued jobs that no transaction holds a row lock on), seen from conn.

    FOR UPDATE conflicts with every row lock, so SKIP LOCKED leaves out each row another transaction
    has locked in any mode.
    """
    row = conn.execute(
        "SELECT (SELECT count(*) FROM jobq.jobs WHERE status = 'queued') AS queued,"
        " (SELECT count(*) FROM (SELECT 1 FROM jobq.jobs WHERE status = 'queued'"
        "  FOR UPDATE SKIP LOCKED) AS free) AS unlocked"
    ).fetchone()
    assert row is not None
    queued, unlocked = row.values() if isinstance(row, dict) else row
    return int(queued), int(unlocked)


def record_notices(conn: psycopg.Connection[Any]) -> list[str]:
    """A list that collects the primary message of every notice conn receives from now on.

    Notices are sent as they are raised, so they survive the rollback of a failed statement.
    """
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    return notices
