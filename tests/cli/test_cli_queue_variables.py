"""PGJOBQ_QUEUE is the worker's: the operator commands that take --queue read a variable of their own
(PGJOBQ_JOBS_LIST_QUEUE, PGJOBQ_RETRY_FAILED_QUEUE, PGJOBQ_SCHEDULE_QUEUE), so that a worker container's
environment does not silently filter an operator's command.  Each test runs the command as a real
process with PGJOBQ_QUEUE=emails set, as in the environment of a worker of queue emails.

(schedule taking its queue from PGJOBQ_SCHEDULE_QUEUE: test_cli_flow_control.py.)
"""

from __future__ import annotations

import json

from helpers.processes import run_cli
from helpers.sqlhelpers import Db, scalar


def fail_one_job_of_each(db: Db, *queues: str) -> None:
    """One failed job (a dead letter) in each of queues."""
    for queue in queues:
        db.execute("SELECT jobq.enqueue(%s, '{}', max_attempts => 1)", (queue,))
        db.execute("SELECT jobq.fail(id, 'boom', lease) FROM jobq.claim(%s, 1, 'w')", (queue,))


def listed_queues(stdout: str) -> list[str]:
    return [row["queue"] for row in json.loads(stdout)]


def test_jobs_list_is_not_filtered_by_the_workers_queue_variable(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}'), jobq.enqueue('reports', '{}')")

    result = run_cli(dsn, "jobs", "list", "--json", PGJOBQ_QUEUE="emails")

    assert result.returncode == 0, result.stderr
    assert listed_queues(result.stdout) == ["reports", "emails"]


def test_jobs_list_takes_its_queue_from_its_own_variable(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}'), jobq.enqueue('reports', '{}')")

    result = run_cli(dsn, "jobs", "list", "--json", PGJOBQ_JOBS_LIST_QUEUE="reports", PGJOBQ_QUEUE="emails")

    assert result.returncode == 0, result.stderr
    assert listed_queues(result.stdout) == ["reports"]


def test_retry_failed_is_not_filtered_by_the_workers_queue_variable(dsn: str, db: Db) -> None:
    fail_one_job_of_each(db, "emails", "reports")

    result = run_cli(dsn, "retry-failed", PGJOBQ_QUEUE="emails")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "2 job(s) back in the queue\n"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'failed'") == 0


def test_retry_failed_takes_its_queue_from_its_own_variable(dsn: str, db: Db) -> None:
    fail_one_job_of_each(db, "emails", "reports")

    result = run_cli(dsn, "retry-failed", PGJOBQ_RETRY_FAILED_QUEUE="reports", PGJOBQ_QUEUE="emails")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 job(s) back in the queue\n"
    assert scalar(db, "SELECT queue FROM jobq.jobs WHERE status = 'failed'") == "emails"


def test_schedule_does_not_take_its_queue_from_the_workers_queue_variable(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--every", "60", PGJOBQ_QUEUE="emails")

    assert result.returncode == 2
    assert "Missing option '--queue'" in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.schedules") == 0
