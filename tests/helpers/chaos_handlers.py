"""The handler of the chaos run (``pgjobq worker helpers.chaos_handlers:run``), and the tables it writes.

Each execution of a job is recorded in ``chaos.executions`` (job id, lease,
process, worker name) before the handler sleeps ``payload["ms"]``
milliseconds.  Then, by ``payload["mode"]``:

- ``"plain"``: the handler marks its execution finished and returns; the
  worker acknowledges the job in its own batched ``jobq.complete_many``.
- ``"effects"``: the handler writes one row to ``chaos.effects``, marks its
  execution finished and calls ``jobq.complete(id, lease)``, all in one
  statement (so one transaction) on its own connection.  A refused lease
  (JQ001) rolls the effect back and the handler raises LeaseLost; an
  accepted complete makes the worker's later acknowledgement of the same
  lease an accepted repeat.

A job with ``payload["fail"]`` raises after its sleep, on purpose.

Every handler thread has a connection of its own (``PGJOBQ_DSN``, the
worker's: a login role with only the worker level, which HANDLER_GRANTS
lets write these two tables and nothing else of the harness's).  The
chaos run kills connections and restarts the server under the handler, so
its database writes are retried on connection errors, with a capped backoff,
and made idempotent by a token per execution: a retried insert never
duplicates a row, and a retried effect transaction first checks whether the
previous attempt committed.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql

import pgjobq
from pgjobq import Job

__all__ = ["SCHEMA_DDL", "IntentionalFailure", "handler_grants", "run"]

# The evidence tables and the transition log.  The trigger belongs to the
# test, not to the extension: it logs every change of a job's status or lease.
SCHEMA_DDL = """
CREATE SCHEMA chaos;

CREATE TABLE chaos.executions (
    token       uuid        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    lease       bigint      NOT NULL,
    pid         integer     NOT NULL,
    worker      text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz
);

CREATE TABLE chaos.effects (
    token      uuid        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    lease      bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- every id the producer was given, once its transaction committed (filled after the run)
CREATE TABLE chaos.acked (
    id bigint PRIMARY KEY
);

-- one row per change of a job's status, lease or lease expiry: claims,
-- heartbeats (running -> running under the same lease), completions,
-- failures, releases and reaps
CREATE TABLE chaos.transitions (
    seq                  bigserial   PRIMARY KEY,
    job_id               bigint      NOT NULL,
    old_status           text        NOT NULL,
    new_status           text        NOT NULL,
    old_lease            bigint      NOT NULL,
    new_lease            bigint      NOT NULL,
    locked_by            text,
    attempts             integer     NOT NULL,
    reaped               boolean     NOT NULL,
    at                   timestamptz NOT NULL,
    old_lease_expires_at timestamptz,  -- the expiry of the lease this change ended or extended
    locked_at            timestamptz,  -- the new locked_at and lease_expires_at: a claim's or
    new_lease_expires_at timestamptz,  -- heartbeat's lease length is their difference
    by_role              text        NOT NULL  -- session_user: who made the change, not whose function
);

CREATE FUNCTION chaos.log_transition()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- jobq.reap appends 'reaped: lease <lease> of <worker> went stale' to last_error
    INSERT INTO chaos.transitions
        (job_id, old_status, new_status, old_lease, new_lease, locked_by, attempts, reaped, at,
         old_lease_expires_at, locked_at, new_lease_expires_at, by_role)
    VALUES
        (NEW.id, OLD.status, NEW.status, OLD.lease, NEW.lease, NEW.locked_by, NEW.attempts,
         OLD.status = 'running' AND NEW.status <> 'running'
             AND NEW.last_error IS DISTINCT FROM OLD.last_error
             AND NEW.last_error LIKE ('%reaped: lease ' || OLD.lease || ' of %'),
         clock_timestamp(),
         OLD.lease_expires_at, NEW.locked_at, NEW.lease_expires_at, session_user);
    RETURN NULL;
END
$$;

CREATE TRIGGER chaos_transitions_trg
    AFTER UPDATE ON jobq.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease IS DISTINCT FROM NEW.lease
          OR OLD.lease_expires_at IS DISTINCT FROM NEW.lease_expires_at)
    EXECUTE FUNCTION chaos.log_transition();
"""

# What the handler needs of the tables above, on top of the worker level: it
# records executions (INSERT ... ON CONFLICT DO NOTHING, then UPDATE by token)
# and effects (INSERT, and SELECT to tell whether a retried attempt had
# committed).  The transition log is written by the trigger, which runs
# inside the extension's SECURITY DEFINER functions, as their owner.
HANDLER_GRANTS = """
GRANT USAGE ON SCHEMA chaos TO {role};
GRANT SELECT, INSERT, UPDATE ON TABLE chaos.executions TO {role};
GRANT SELECT, INSERT ON TABLE chaos.effects TO {role};
"""


def handler_grants(role: str) -> sql.Composed:
    """The statements that let role (a worker's login role) run this handler."""
    return sql.SQL(HANDLER_GRANTS).format(role=sql.Identifier(role))


# The effect, the end of the execution and jobq.complete in one statement, so
# one transaction: when complete refuses the lease, the effect is rolled back.
# (One round trip instead of BEGIN, three statements and COMMIT: the full run
# has 100,000 of these on a small machine.)
EFFECT_AND_COMPLETE = """
WITH effect AS (
    INSERT INTO chaos.effects (token, job_id, lease) VALUES (%(token)s, %(id)s, %(lease)s)
), finished AS (
    UPDATE chaos.executions SET finished_at = statement_timestamp() WHERE token = %(token)s
)
SELECT jobq.complete(%(id)s, %(lease)s)
"""

EFFECT_WRITTEN = "SELECT FROM chaos.effects WHERE token = %s"

# Give up on the database after this long (the chaos run's outages last seconds).
RETRY_FOR = 120.0
RETRY_DELAY_MAX = 1.0

T = TypeVar("T")

_local = threading.local()


class IntentionalFailure(Exception):
    """Raised by jobs enqueued to fail (payload["fail"])."""


def _connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(
            os.environ["PGJOBQ_DSN"], autocommit=True, application_name=f"chaos handler {os.getpid()}"
        )
        _local.conn = conn
    return conn


def _drop_connection() -> None:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is not None:
        conn.close()
    _local.conn = None


def _retrying(action: Callable[[psycopg.Connection[Any]], T]) -> T:
    """Run action on this thread's connection, reconnecting and retrying on connection errors."""
    deadline = time.monotonic() + RETRY_FOR
    delay = 0.05
    while True:
        try:
            return action(_connection())
        except (psycopg.OperationalError, psycopg.InterfaceError):
            _drop_connection()
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(RETRY_DELAY_MAX, delay * 2)


def _worker_name() -> str:
    return os.environ.get("PGJOBQ_WORKER_NAME", str(os.getpid()))


def run(job: Job) -> None:
    """The chaos run's handler: record, sleep, then finish as payload["mode"] says."""
    token = uuid.uuid4()

    def record_start(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "INSERT INTO chaos.executions (token, job_id, lease, pid, worker) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (token) DO NOTHING",
            (token, job.id, job.lease, os.getpid(), _worker_name()),
        )

    def record_finish(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "UPDATE chaos.executions SET finished_at = coalesce(finished_at, clock_timestamp())"
            " WHERE token = %s",
            (token,),
        )

    attempts = 0

    def effect_and_complete(conn: psycopg.Connection[Any]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts > 1 and conn.execute(EFFECT_WRITTEN, (token,)).fetchone() is not None:
            return  # the previous attempt committed; the connection broke before its reply
        try:
            conn.execute(EFFECT_AND_COMPLETE, {"token": token, "id": job.id, "lease": job.lease})
        except psycopg.Error as exc:
            if exc.sqlstate == "JQ001":  # the statement, effect included, was rolled back
                raise pgjobq.LeaseLost(f"lease {job.lease} of job {job.id} is not current") from exc
            raise

    _retrying(record_start)
    time.sleep(float(job.payload["ms"]) / 1000)
    if job.payload.get("fail"):
        raise IntentionalFailure(f"job {job.id} fails on purpose")
    if job.payload.get("mode") == "effects":
        _retrying(effect_and_complete)
    else:
        _retrying(record_finish)
