"""The handler of the chaos run (``pgjobq worker chaos.chaos_handlers:run``), and the tables it writes.

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

The job control of 0.6.0 mixes in:

- ``payload["snooze"]`` (k > 0): while the job's lease (its claims so far)
  is at most k, the handler raises ``pgjobq.Snooze`` for
  ``payload["snooze_ms"]`` milliseconds, right after recording its
  execution (outcome 'snoozed'): the worker calls ``jobq.snooze``, the
  attempt is given back, and a later claim runs the job.  Deterministic, and
  it ends: every claim spends a lease.
- ``payload["result"]``: the handler returns ``result_of(payload)`` (it
  echoes the payload's number), which the worker stores as the job's result;
  in effects mode the handler's own ``jobq.complete`` stores it, and the
  worker's repeat acknowledgement leaves it be.
- a cancel request (``job.cancel_requested``, set by the worker when
  ``jobq.cancel`` asks, or when the lease is gone) ends the sleep early: the
  handler records outcome 'stopped' and raises CancelHeard, so the job ends
  cancelled (or the refused lease is logged).  A handler past its sleep
  finishes the job all the same: it is done then.

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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

import pgjobq
from pgjobq import Job

__all__ = [
    "SCHEMA_DDL",
    "CancelHeard",
    "IntentionalFailure",
    "canceller_grants",
    "handler_grants",
    "result_of",
    "run",
]

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
    finished_at timestamptz,
    outcome     text  -- 'returned', 'snoozed', 'stopped' (a cancel request heard), 'failed' (on purpose)
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

-- one row per change of a job's status, lease, lease expiry, max_attempts or
-- cancel request: claims, heartbeats (running -> running under the same
-- lease, a new expiry), completions, failures, snoozes, releases, reaps,
-- cancels, cancel requests (running -> running, new_cancel_requested) and
-- a running holder giving up its key and its retries to a replacement
-- (running -> running, new_max_attempts below old_max_attempts: nothing
-- else lowers it)
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
    by_role              text        NOT NULL,  -- session_user: who made the change, not whose function
    run_at               timestamptz NOT NULL,  -- the new run_at
    old_max_attempts     integer,
    new_max_attempts     integer,
    old_cancel_requested boolean     NOT NULL,
    new_cancel_requested boolean     NOT NULL,
    old_attempts         integer     NOT NULL
);

-- one row each time a job became the holder of a unique key: its insert
-- with the key, or its taking over the key (jobq.unique_keys), at the clock
-- of that statement (after any wait for a conflicting taker); until_done:
-- the scope it took the key with
-- running jobs that may have given up their key to a replacement
-- (on_conflict replace: by losing their retries, or by a cancel request),
-- when, and in which transaction (written by chaos_given_up_trg); a
-- holder gave its key up when the transaction made another job the holder
CREATE TABLE chaos.given_up (
    job_id bigint      NOT NULL,
    at     timestamptz NOT NULL,
    xid    bigint      NOT NULL DEFAULT txid_current()
);

CREATE TABLE chaos.holders (
    seq        bigserial   PRIMARY KEY,
    queue      text        NOT NULL,
    unique_key text        NOT NULL,
    job_id     bigint      NOT NULL,
    until_done boolean     NOT NULL,
    at         timestamptz NOT NULL,
    by_role    text        NOT NULL,
    xid        bigint      NOT NULL DEFAULT txid_current()
);

-- every replace of an active-scope key the producer committed: the number
-- of its payload and the id it was given (filled after the run)
CREATE TABLE chaos.replaced (
    n      bigint NOT NULL,
    job_id bigint NOT NULL
);

-- the holders that gave their key up to a replacement: a given_up row of a
-- transaction that made another job the holder of a key
CREATE VIEW chaos.gave_up_key AS
SELECT g.job_id, g.at, g.xid, h.queue, h.unique_key
  FROM chaos.given_up AS g JOIN chaos.holders AS h ON h.xid = g.xid AND h.job_id <> g.job_id;

-- one row per job a jobq.cancel call returned, written by the same
-- statement (so it exists exactly when the cancel committed)
CREATE TABLE chaos.cancels (
    seq    bigserial   PRIMARY KEY,
    job_id bigint      NOT NULL,
    force  boolean     NOT NULL,
    status text        NOT NULL,  -- what jobq.cancel returned for it
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The triggers are made for the extension as it is: 0.6.0's job control
-- keeps the cancel request and unique keys either in columns of jobq.jobs
-- (cancel_requested_at; unique_key, unique_scope) or in a bit field and a
-- table of their own (control & 1; jobq.unique_keys).  SECURITY DEFINER:
-- jobq.cancel runs with its caller's rights (the admin level, no rights on
-- these tables), unlike the worker's functions.
DO $do$
DECLARE
    has_control boolean := EXISTS (SELECT FROM pg_attribute
                                    WHERE attrelid = 'jobq.jobs'::regclass AND attname = 'control'
                                      AND NOT attisdropped);
    key_table   boolean := to_regclass('jobq.unique_keys') IS NOT NULL;
    old_cancel  text := CASE WHEN has_control THEN '(coalesce(OLD.control, 0) & 1 <> 0)'
                             ELSE '(OLD.cancel_requested_at IS NOT NULL)' END;
    new_cancel  text := replace(old_cancel, 'OLD.', 'NEW.');
BEGIN
    EXECUTE format($fn$
CREATE FUNCTION chaos.log_transition()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    -- jobq.reap appends 'reaped: lease <lease> of <worker> went stale' to last_error
    INSERT INTO chaos.transitions
        (job_id, old_status, new_status, old_lease, new_lease, locked_by, attempts, reaped, at,
         old_lease_expires_at, locked_at, new_lease_expires_at, by_role, run_at, old_max_attempts,
         new_max_attempts, old_cancel_requested, new_cancel_requested, old_attempts)
    VALUES
        (NEW.id, OLD.status, NEW.status, OLD.lease, NEW.lease, NEW.locked_by, NEW.attempts,
         OLD.status = 'running' AND NEW.status <> 'running'
             AND NEW.last_error IS DISTINCT FROM OLD.last_error
             AND NEW.last_error LIKE ('%%reaped: lease ' || OLD.lease || ' of %%'),
         clock_timestamp(),
         OLD.lease_expires_at, NEW.locked_at, NEW.lease_expires_at, session_user, NEW.run_at,
         OLD.max_attempts, NEW.max_attempts, %1$s, %2$s, OLD.attempts);
    RETURN NULL;
END
$body$;
$fn$, old_cancel, new_cancel);

    EXECUTE format($fn$
CREATE TRIGGER chaos_transitions_trg
    AFTER UPDATE ON jobq.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease IS DISTINCT FROM NEW.lease
          OR OLD.lease_expires_at IS DISTINCT FROM NEW.lease_expires_at
          OR OLD.max_attempts IS DISTINCT FROM NEW.max_attempts
          OR %1$s IS DISTINCT FROM %2$s)
    EXECUTE FUNCTION chaos.log_transition();
$fn$, old_cancel, new_cancel);

    -- a running job that lost its retries or was asked to cancel, under the
    -- same lease, may have given its key up.  Asked again too: a replace of
    -- a running holder whose cancel was requested before (by jobq.cancel)
    -- sets the request again, a change of nothing, which the trigger above
    -- does not log, but the holder gives its key up all the same
    CREATE FUNCTION chaos.log_given_up()
    RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
        INSERT INTO chaos.given_up (job_id, at) VALUES (NEW.id, clock_timestamp());
        RETURN NULL;
    END
    $body$;
    EXECUTE format($fn$
CREATE TRIGGER chaos_given_up_trg
    AFTER UPDATE ON jobq.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'running'
          AND (NEW.max_attempts < OLD.max_attempts
               OR (%2$s AND NOT %1$s)
               OR (%2$s AND OLD.lease = NEW.lease
                   AND OLD.lease_expires_at IS NOT DISTINCT FROM NEW.lease_expires_at)))
    EXECUTE FUNCTION chaos.log_given_up();
$fn$, old_cancel, new_cancel);

    EXECUTE format($fn$
CREATE FUNCTION chaos.log_holder()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    INSERT INTO chaos.holders (queue, unique_key, job_id, until_done, at, by_role)
    VALUES (NEW.queue, NEW.unique_key, %1$s, %2$s, clock_timestamp(), session_user);
    RETURN NULL;
END
$body$;
$fn$, CASE WHEN key_table THEN 'NEW.job_id' ELSE 'NEW.id' END,
      CASE WHEN key_table THEN 'NEW.until_done'
           ELSE 'NEW.unique_scope IS NOT DISTINCT FROM ''until_done''' END);

    IF key_table THEN
        CREATE TRIGGER chaos_holders_insert_trg
            AFTER INSERT ON jobq.unique_keys
            FOR EACH ROW
            EXECUTE FUNCTION chaos.log_holder();
        CREATE TRIGGER chaos_holders_update_trg
            AFTER UPDATE ON jobq.unique_keys
            FOR EACH ROW
            WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id)
            EXECUTE FUNCTION chaos.log_holder();
    ELSE
        EXECUTE $fn$
CREATE TRIGGER chaos_holders_insert_trg
    AFTER INSERT ON jobq.jobs
    FOR EACH ROW
    WHEN (NEW.unique_key IS NOT NULL)
    EXECUTE FUNCTION chaos.log_holder();
$fn$;
    END IF;
END
$do$;
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


# What the chaos run's canceller (a login role with the admin level) needs of
# the tables above: it records, in the statement that cancels, what
# jobq.cancel returned, and samples the unique keys held twice.
CANCELLER_GRANTS = """
GRANT USAGE ON SCHEMA chaos TO {role};
GRANT SELECT, INSERT ON TABLE chaos.cancels TO {role};  -- SELECT: for its RETURNING
GRANT SELECT ON TABLE chaos.holders, chaos.given_up, chaos.gave_up_key TO {role};  -- for its samples
GRANT USAGE ON SEQUENCE chaos.cancels_seq_seq TO {role};
"""


def canceller_grants(role: str) -> sql.Composed:
    """The statements that let role (an admin-level login role) record its cancels."""
    return sql.SQL(CANCELLER_GRANTS).format(role=sql.Identifier(role))


# The effect, the end of the execution and jobq.complete in one statement, so
# one transaction: when complete refuses the lease, the effect is rolled back.
# (One round trip instead of BEGIN, three statements and COMMIT: the full run
# has 100,000 of these on a small machine.)
EFFECT_AND_COMPLETE = """
WITH effect AS (
    INSERT INTO chaos.effects (token, job_id, lease) VALUES (%(token)s, %(id)s, %(lease)s)
), finished AS (
    UPDATE chaos.executions SET finished_at = statement_timestamp(), outcome = 'returned'
     WHERE token = %(token)s
)
SELECT jobq.complete(%(id)s, %(lease)s, %(result)s::jsonb)
"""

EFFECT_WRITTEN = "SELECT FROM chaos.effects WHERE token = %s"

# Give up on the database after this long (the chaos run's outages last seconds).
RETRY_FOR = 120.0
RETRY_DELAY_MAX = 1.0

T = TypeVar("T")

_local = threading.local()


class IntentionalFailure(Exception):
    """Raised by jobs enqueued to fail (payload["fail"])."""


class CancelHeard(Exception):
    """Raised by a handler whose job's cancel_requested was set during its sleep: the job is to stop."""


def result_of(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the handler returns for payload, and so the result its job must end with when done."""
    return {"echo": payload["n"]} if payload.get("result") else None


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


def run(job: Job) -> dict[str, Any] | None:
    """The chaos run's handler: record, maybe snooze, sleep, then finish as payload["mode"] says."""
    token = uuid.uuid4()
    payload = job.payload
    result = result_of(payload)

    def record_start(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "INSERT INTO chaos.executions (token, job_id, lease, pid, worker) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (token) DO NOTHING",
            (token, job.id, job.lease, os.getpid(), _worker_name()),
        )

    def record_finish(outcome: str) -> Callable[[psycopg.Connection[Any]], None]:
        def action(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "UPDATE chaos.executions SET finished_at = coalesce(finished_at, clock_timestamp()),"
                " outcome = coalesce(outcome, %s) WHERE token = %s",
                (outcome, token),
            )

        return action

    attempts = 0

    def effect_and_complete(conn: psycopg.Connection[Any]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts > 1 and conn.execute(EFFECT_WRITTEN, (token,)).fetchone() is not None:
            return  # the previous attempt committed; the connection broke before its reply
        try:
            params = {
                "token": token,
                "id": job.id,
                "lease": job.lease,
                "result": None if result is None else Jsonb(result),
            }
            conn.execute(EFFECT_AND_COMPLETE, params)
        except psycopg.Error as exc:
            if exc.sqlstate == "JQ001":  # the statement, effect included, was rolled back
                raise pgjobq.LeaseLost(f"lease {job.lease} of job {job.id} is not current") from exc
            raise

    _retrying(record_start)
    if job.lease <= int(payload.get("snooze", 0)):
        _retrying(record_finish("snoozed"))
        raise pgjobq.Snooze(float(payload.get("snooze_ms", 0)) / 1000)
    if job.cancel_requested.wait(float(payload["ms"]) / 1000):
        _retrying(record_finish("stopped"))
        raise CancelHeard(f"job {job.id} stops: its cancel was requested (or its lease is gone)")
    if payload.get("fail"):
        _retrying(record_finish("failed"))
        raise IntentionalFailure(f"job {job.id} fails on purpose")
    if payload.get("mode") == "effects":
        _retrying(effect_and_complete)
    else:
        _retrying(record_finish("returned"))
    return result
