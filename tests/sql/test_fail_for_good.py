"""jobq.fail(..., retry => false) (0.9.0): a job failed for good at once, whatever attempts it has left,
exactly as its last attempt failing would leave it.

retry => NULL is refused in the bad-input table (test_bad_input.py), which proves that it changes nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, listen_to_queues, notifications_before_marker


def running(db: Db, queue: str = "default", **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, queue, **options)
    claimed = claim_one(db, queue)
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def fail(db: Db, job_id: int, lease: int, retry: bool) -> dict[str, Any]:
    """jobq.fail(id, 'boom', lease, retry => retry): the job it returns, projected (no ids, no times)."""
    before = db.execute("SELECT run_at FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert before is not None
    row = db.execute(
        "SELECT f.status, f.attempts, f.finished_at IS NOT NULL AS finished,"
        " f.run_at = %(run_at)s AS run_at_kept, f.last_error"
        " FROM jobq.fail(%(id)s, 'boom', %(lease)s, retry => %(retry)s) AS f",
        {"id": job_id, "lease": lease, "retry": retry, "run_at": before["run_at"]},
    ).fetchone()
    assert row is not None
    return row


def test_fail_without_retry_fails_the_job_at_once_with_attempts_left(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)

    failed = fail(db, job_id, lease, retry=False)

    assert failed == {
        "status": "failed",
        "attempts": 1,
        "finished": True,
        "run_at_kept": True,
        "last_error": "boom",
    }
    assert db.execute("SELECT * FROM jobq.claim('default', 1, 'w1')").fetchall() == []


def test_fail_without_retry_leaves_the_job_as_a_failure_at_max_attempts_does(db: Db) -> None:
    last_attempt, last_lease = running(db, max_attempts=1)
    for_good, for_good_lease = running(db, max_attempts=5)

    at_max_attempts = fail(db, last_attempt, last_lease, retry=True)
    without_retry = fail(db, for_good, for_good_lease, retry=False)

    assert without_retry == at_max_attempts
    assert db.execute("SELECT status, count(*) AS n FROM jobq.jobs GROUP BY status").fetchall() == [
        {"status": "failed", "n": 2}
    ]


def test_fail_with_retry_true_retries_while_attempts_are_left_as_by_default(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)

    failed = fail(db, job_id, lease, retry=True)

    assert (failed["status"], failed["finished"]) == ("queued", False)


def test_retry_may_be_given_by_position_after_retry_in(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)

    row = db.execute("SELECT status FROM jobq.fail(%s, 'boom', %s, NULL, false)", (job_id, lease)).fetchone()

    assert row == {"status": "failed"}


def test_a_job_failed_without_retry_is_redriven_like_any_failed_job(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)
    fail(db, job_id, lease, retry=False)

    redriven = db.execute("SELECT jobq.retry_failed('default') AS id").fetchall()

    assert redriven == [{"id": job_id}]
    assert claim_one(db)["attempts"] == 1  # attempts reset by the redrive, then this claim


def test_a_watched_job_failed_without_retry_notifies_that_it_finished(db: Db, connect: Connect) -> None:
    ears = connect()
    listen_to_queues(ears, [])
    ears.execute(sql.SQL("LISTEN {}").format(sql.Identifier("jobq.done")))
    job_id, lease = running(db, max_attempts=5)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    fail(db, job_id, lease, retry=False)

    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_job_failed_without_retry_cancels_its_waiting_dependents(db: Db) -> None:
    parent = enqueue(db, max_attempts=5)
    child = enqueue(db, depends_on=[parent])
    lease = claim_one(db)["lease"]

    fail(db, parent, lease, retry=False)

    row = db.execute("SELECT status, last_error FROM jobq.jobs WHERE id = %s", (child,)).fetchone()
    assert row == {"status": "cancelled", "last_error": f"cancelled: parent job {parent} ended failed"}


def test_a_job_asked_to_cancel_that_fails_without_retry_ends_cancelled(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)
    db.execute("SELECT * FROM jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    failed = fail(db, job_id, lease, retry=False)

    assert (failed["status"], failed["finished"]) == ("cancelled", True)


def test_fail_without_retry_refuses_a_lease_that_is_not_current(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.fail(%s, 'boom', %s, retry => false)", (job_id, lease + 1))

    assert raised.value.sqlstate == "JQ001"
    assert db.execute("SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone() == {
        "status": "running"
    }
