"""Leases belong to their job: real worker processes with different lease lengths, and at the worker level.

Each job's lease expires at the time claim stored on it, moved on by each
heartbeat of its own worker, and jobq.reap recovers exactly the jobs whose
lease expired.  So a worker with a short lease, reaping often, leaves alone
the long job of a worker with a long lease that heartbeats seldom (in 0.3.0
its reap(stale => its own lease) recovered that job and it ran twice); and
workers that have only the worker level recover a killed worker's job among
themselves, with no admin anywhere.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from helpers.databases import login_role
from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, wait_until
from helpers.sqlhelpers import Db, scalar

# Every reap of a job, and who did it: jobq.reap is SECURITY DEFINER, so
# session_user (not current_user) is the role that called it.  The trigger
# runs under reap's search_path unless it sets its own.
REAP_LOG_DDL = """
CREATE TABLE reap_log (
    job_id           bigint      NOT NULL,
    lease            bigint      NOT NULL,
    lease_expired_at timestamptz NOT NULL,
    reaped_at        timestamptz NOT NULL,
    session_role     text        NOT NULL,
    application_name text        NOT NULL
);
CREATE FUNCTION log_reap() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    INSERT INTO reap_log
    VALUES (NEW.id, OLD.lease, OLD.lease_expires_at, clock_timestamp(), session_user,
            current_setting('application_name'));
    RETURN NULL;
END
$$;
CREATE TRIGGER reap_log_trg AFTER UPDATE ON jobq.jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status <> 'running'
          AND NEW.last_error IS DISTINCT FROM OLD.last_error
          AND NEW.last_error LIKE ('%reaped: lease ' || OLD.lease || ' of %'))
    EXECUTE FUNCTION log_reap();
"""


def job_row(db: Db, job_id: int) -> dict[str, Any]:
    row = db.execute(
        "SELECT status, attempts, lease, locked_by, locked_at, last_error FROM jobq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def executions(db: Db, job_id: int) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT pid, lease, finished FROM executions WHERE job_id = %s ORDER BY lease, finished", (job_id,)
    ).fetchall()


def test_short_lease_worker_never_reaps_the_heartbeating_long_job_of_a_long_lease_worker(
    db: Db, dsn: str, start_worker: StartWorker
) -> None:
    db.execute(EXECUTIONS_DDL)
    long_job = scalar(db, """SELECT jobq.enqueue('default', '{"sleep": 10}')""")
    # heartbeats every 3 s: between two of them the lease is older than the other worker's 2 s lease
    long_lease = start_worker(
        "sleep_then_record", "--lease-timeout", "30", "--heartbeat-interval", "3", name="long"
    )
    assert wait_until(lambda: len(executions(db, long_job)) == 1, timeout=30), long_lease.log()
    claimed_at = job_row(db, long_job)["locked_at"]
    short_lease = start_worker(
        "sleep_then_record",
        *(
            "--lease-timeout",
            "2",
            "--heartbeat-interval",
            "0.5",
            "--reap-interval",
            "0.2",
            "--poll-interval",
            "0.2",
        ),
        name="short",
    )
    assert wait_until(lambda: "started on queue default" in short_lease.log(), timeout=30), short_lease.log()
    # a job of the same queue abandoned by a worker that vanished: its 1 s lease runs out at once
    with db.transaction():
        bait = scalar(db, "SELECT jobq.enqueue('default', '{}')")
        db.execute("SELECT jobq.claim('default', 1, 'vanished', lease_timeout => '1 second')")

    # the short-lease worker's reaper is at work while the long job runs...
    assert wait_until(lambda: f"reaped job {bait} of" in short_lease.log(), timeout=30), short_lease.log()
    # ...and meets it with its last heartbeat older than its own lease: 0.3.0's reaper, which took
    # every job claimed or extended more than that long ago, would have recovered it
    older_than_two_seconds = False
    extended = False

    def long_job_done() -> bool:
        nonlocal older_than_two_seconds, extended
        row = db.execute(
            "SELECT status, locked_at, locked_at < statement_timestamp() - interval '2 seconds' AS old"
            " FROM jobq.jobs WHERE id = %s",
            (long_job,),
        ).fetchone()
        assert row is not None
        if row["status"] == "running":
            older_than_two_seconds |= row["old"]
            extended |= row["locked_at"] > claimed_at
        return bool(row["status"] == "done")

    assert wait_until(long_job_done, timeout=40, interval=0.1), long_lease.log()

    assert older_than_two_seconds
    assert extended, "the long-lease worker never heartbeat its job"
    final = job_row(db, long_job)
    assert (final["status"], final["attempts"], final["lease"], final["locked_by"]) == ("done", 1, 1, "long")
    assert final["last_error"] is None
    assert executions(db, long_job) == [
        {"pid": long_lease.pid, "lease": 1, "finished": False},
        {"pid": long_lease.pid, "lease": 1, "finished": True},
    ]
    assert f"reaped job {long_job} of" not in short_lease.log()
    assert f"job {long_job}: lease 1 lost" not in long_lease.log()
    assert long_lease.process.poll() is None and short_lease.process.poll() is None


@pytest.fixture
def worker_role(db: Db) -> Iterator[str]:
    """A login role with only the worker level, and INSERT on the handlers' executions table."""
    db.execute(EXECUTIONS_DDL)
    with login_role(db) as role:
        db.execute("SELECT jobq.grant_worker(%s)", (role,))
        db.execute(sql.SQL("GRANT INSERT ON executions TO {}").format(sql.Identifier(role)))
        yield role


def test_worker_level_workers_finish_a_sigkilled_workers_job_with_no_admin_anywhere(
    db: Db, dsn: str, worker_role: str, start_worker: StartWorker
) -> None:
    db.execute(REAP_LOG_DDL)
    as_worker = make_conninfo(dsn, user=worker_role)
    fast_recovery = ("--lease-timeout", "2", "--heartbeat-interval", "0.5", "--reap-interval", "0.2",
                     "--poll-interval", "0.2")  # fmt: skip
    workers = {
        name: start_worker("slow_first_attempt", *fast_recovery, dsn=as_worker, name=name)
        for name in ("w1", "w2")
    }
    assert wait_until(lambda: all("started on queue" in w.log() for w in workers.values()), timeout=30)
    job_id = scalar(db, """SELECT jobq.enqueue('default', '{"sleep": 120}')""")
    assert wait_until(lambda: len(executions(db, job_id)) == 1, timeout=30), [
        w.log() for w in workers.values()
    ]
    victim_name = job_row(db, job_id)["locked_by"]
    victim = workers.pop(victim_name)
    ((rescuer_name, rescuer),) = workers.items()

    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()

    assert wait_until(lambda: job_row(db, job_id)["status"] == "done", timeout=30), rescuer.log()
    final = job_row(db, job_id)
    assert (final["attempts"], final["lease"], final["locked_by"]) == (2, 2, rescuer_name)
    assert f"reaped: lease 1 of {victim_name} went stale" in final["last_error"]
    assert executions(db, job_id) == [
        {"pid": victim.pid, "lease": 1, "finished": False},
        {"pid": rescuer.pid, "lease": 2, "finished": False},
        {"pid": rescuer.pid, "lease": 2, "finished": True},
    ]
    reaps = db.execute(
        "SELECT job_id, lease, session_role, application_name, reaped_at > lease_expired_at AS after_expiry"
        " FROM reap_log"
    ).fetchall()
    assert reaps == [
        {
            "job_id": job_id,
            "lease": 1,
            "session_role": worker_role,
            "application_name": f"pgjobq worker {rescuer_name}",
            "after_expiry": True,
        }
    ]
    assert f"reaped job {job_id} of queue default" in rescuer.log()
    assert "not reaping" not in rescuer.log()
