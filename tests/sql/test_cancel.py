"""jobq.cancel: queued jobs end at once, running ones are asked to stop (or forced), finished ones stay."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import (
    Connect,
    Db,
    claim_one,
    enqueue,
    job,
    listen_to_queues,
    make_stale,
    notifications_before_marker,
    row_digest,
    scalar,
)


def cancel(db: Db, *ids: int, force: bool = False) -> list[tuple[int, str]]:
    """jobq.cancel(ids, force): its rows as (id, status)."""
    rows = db.execute("SELECT * FROM jobq.cancel(%s::bigint[], %s)", (list(ids), force)).fetchall()
    return [(row["id"], row["status"]) for row in rows]


def running(db: Db, **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, **options)
    claimed = claim_one(db)
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def sqlstate_of(db: Db, query: str, params: Any = None) -> str | None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(query, params)
    return raised.value.sqlstate


# -- queued jobs -------------------------------------------------------------------------------------------


def test_cancel_of_a_queued_job_cancels_it_at_once_and_it_is_never_claimed(db: Db) -> None:
    job_id = enqueue(db)

    assert cancel(db, job_id) == [(job_id, "cancelled")]

    row = job(db, job_id)
    assert (row["status"], row["finished_at"] is not None) == ("cancelled", True)
    assert db.execute("SELECT id FROM jobq.claim('default', 10, 'w1')").fetchall() == []


def test_cancel_of_a_scheduled_job_cancels_it_at_once(db: Db) -> None:
    job_id = enqueue(db, run_at=datetime.now(timezone.utc) + timedelta(hours=1))

    assert cancel(db, job_id) == [(job_id, "cancelled")]
    assert job(db, job_id)["status"] == "cancelled"


def test_cancel_of_a_job_queued_for_a_retry_cancels_it_at_once(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))

    assert cancel(db, job_id) == [(job_id, "cancelled")]


# -- running jobs: a request -------------------------------------------------------------------------------


def test_cancel_of_a_running_job_requests_it_and_leaves_it_running_under_its_lease(db: Db) -> None:
    job_id, lease = running(db)

    assert cancel(db, job_id) == [(job_id, "cancel_requested")]

    row = job(db, job_id)
    assert (row["status"], row["lease"], row["control"] & 1) == (
        "running",
        lease,
        1,
    )  # bit 1: cancel requested
    assert scalar(db, "SELECT (jobq.job(%s)).cancel_requested", (job_id,)) is True
    db.execute("SELECT jobq.heartbeat(%s, %s)", (job_id, lease))  # still held


def test_a_requested_job_that_completes_ends_done(db: Db) -> None:
    job_id, lease = running(db)
    cancel(db, job_id)

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert job(db, job_id)["status"] == "done"


def test_a_requested_job_that_fails_ends_cancelled_and_is_not_retried(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)
    cancel(db, job_id)

    failed = db.execute("SELECT status FROM jobq.fail(%s, 'stopped', %s)", (job_id, lease)).fetchone()

    assert failed == {"status": "cancelled"}
    row = job(db, job_id)
    assert (row["status"], row["attempts"], row["finished_at"] is not None) == ("cancelled", 1, True)


def test_a_requested_job_that_snoozes_ends_cancelled(db: Db) -> None:
    job_id, lease = running(db)
    cancel(db, job_id)

    new_run_at = scalar(db, "SELECT jobq.snooze(%s, %s, '1 minute')", (job_id, lease))

    assert new_run_at is None
    assert job(db, job_id)["status"] == "cancelled"


def test_a_requested_job_that_is_released_ends_cancelled(db: Db) -> None:
    job_id, lease = running(db)
    cancel(db, job_id)

    db.execute("SELECT jobq.release(%s, %s)", (job_id, lease))

    assert job(db, job_id)["status"] == "cancelled"


def test_a_requested_job_whose_lease_expires_is_reaped_to_cancelled(db: Db) -> None:
    job_id, _ = running(db)
    cancel(db, job_id)
    make_stale(db, job_id)

    reaped = db.execute("SELECT id, status FROM jobq.reap()").fetchall()

    assert reaped == [{"id": job_id, "status": "cancelled"}]


def test_cancelling_a_requested_job_again_still_reports_cancel_requested(db: Db) -> None:
    job_id, _ = running(db)
    cancel(db, job_id)
    before = row_digest(db, job_id)

    assert cancel(db, job_id) == [(job_id, "cancel_requested")]
    assert row_digest(db, job_id) == before


# -- running jobs: force -----------------------------------------------------------------------------------


def test_force_cancels_a_running_job_at_once(db: Db) -> None:
    job_id, _ = running(db)

    assert cancel(db, job_id, force=True) == [(job_id, "cancelled")]

    row = job(db, job_id)
    assert (row["status"], row["finished_at"] is not None) == ("cancelled", True)


@pytest.mark.parametrize(
    "call",
    [
        "SELECT jobq.complete(%s, %s)",
        "SELECT jobq.fail(%s, 'late', %s)",
        "SELECT jobq.heartbeat(%s, %s)",
        "SELECT jobq.snooze(%s, %s, '1 s')",
        "SELECT jobq.release(%s, %s)",
    ],
    ids=["complete", "fail", "heartbeat", "snooze", "release"],
)
def test_after_a_forced_cancel_the_old_lease_is_refused_with_jq001(db: Db, call: str) -> None:
    job_id, lease = running(db)
    cancel(db, job_id, force=True)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, call, (job_id, lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_after_a_forced_cancel_the_lease_is_left_out_of_the_batch_calls(db: Db) -> None:
    job_id, lease = running(db)
    cancel(db, job_id, force=True)

    pairs = ([job_id], [lease])
    assert db.execute("SELECT * FROM jobq.complete_many(%s, %s)", pairs).fetchall() == []
    assert db.execute("SELECT * FROM jobq.heartbeat_many(%s, %s)", pairs).fetchall() == []
    assert db.execute("SELECT * FROM jobq.heartbeat_status(%s, %s)", pairs).fetchall() == []
    assert job(db, job_id)["status"] == "cancelled"


# -- finished and unknown jobs ---------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["request", "force"])
def test_cancelling_finished_jobs_changes_nothing_and_reports_their_status(db: Db, force: bool) -> None:
    done_id, lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s)", (done_id, lease))
    failed_id, lease = running(db, max_attempts=1)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (failed_id, lease))
    cancelled_id = enqueue(db)
    cancel(db, cancelled_id)
    before = [row_digest(db, i) for i in (done_id, failed_id, cancelled_id)]

    reported = cancel(db, done_id, failed_id, cancelled_id, force=force)

    assert reported == [(done_id, "done"), (failed_id, "failed"), (cancelled_id, "cancelled")]
    assert [row_digest(db, i) for i in (done_id, failed_id, cancelled_id)] == before


def test_cancel_leaves_unknown_ids_out_and_reports_the_others_by_id(db: Db) -> None:
    first, second = enqueue(db), enqueue(db)
    unknown = second + 1000

    assert cancel(db, unknown, second, first) == [(first, "cancelled"), (second, "cancelled")]
    assert cancel(db, unknown) == []


def test_cancel_of_no_ids_returns_nothing(db: Db) -> None:
    enqueue(db)

    assert cancel(db) == []
    assert scalar(db, "SELECT status FROM jobq.jobs") == "queued"


# -- notifications -----------------------------------------------------------------------------------------


def test_cancel_notifies_the_queue_of_the_running_jobs_only_with_their_ids(db: Db, connect: Connect) -> None:
    queued_id = enqueue(db, priority=-1)
    first, _ = running(db)
    second, _ = running(db)
    other_id = enqueue(db, "other")
    ears = connect()
    listen_to_queues(ears, ["default", "other"])

    cancel(db, queued_id, second, first, other_id)

    assert notifications_before_marker(ears, db) == [("jobq_default", f"cancel:{first},{second}")]


def test_a_forced_cancel_notifies_the_running_jobs_too(db: Db, connect: Connect) -> None:
    job_id, _ = running(db)
    ears = connect()
    listen_to_queues(ears, ["default"])

    cancel(db, job_id, force=True)

    assert notifications_before_marker(ears, db) == [("jobq_default", f"cancel:{job_id}")]


def test_cancelling_only_queued_or_finished_jobs_notifies_nobody(db: Db, connect: Connect) -> None:
    done_id, lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s)", (done_id, lease))
    queued_id = enqueue(db)
    ears = connect()
    listen_to_queues(ears, ["default"])

    cancel(db, queued_id, done_id)

    assert notifications_before_marker(ears, db) == []


def test_a_rolled_back_cancel_changes_nothing_and_notifies_nobody(db: Db, connect: Connect) -> None:
    job_id, _ = running(db)
    ears = connect()
    listen_to_queues(ears, ["default"])
    before = row_digest(db, job_id)

    with db.transaction(force_rollback=True):
        cancel(db, job_id)

    assert row_digest(db, job_id) == before
    assert notifications_before_marker(ears, db) == []


# -- afterwards --------------------------------------------------------------------------------------------


def test_cancelled_jobs_are_purged_with_the_done_ones(db: Db) -> None:
    done_id, lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s)", (done_id, lease))
    cancelled_id = enqueue(db)
    cancel(db, cancelled_id)
    failed_id, lease = running(db, max_attempts=1)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (failed_id, lease))

    assert scalar(db, "SELECT jobq.purge('0 s')") == 2

    assert [row["id"] for row in db.execute("SELECT id FROM jobq.jobs")] == [failed_id]


def test_stats_counts_the_cancelled_jobs_of_each_queue(db: Db) -> None:
    cancel(db, enqueue(db), enqueue(db))
    enqueue(db)

    row = db.execute("SELECT queue, queued, cancelled FROM jobq.stats()").fetchone()

    assert row == {"queue": "default", "queued": 1, "cancelled": 2}


def test_stats_adds_its_columns_at_the_end_cancelled_then_waiting(db: Db) -> None:
    columns = db.execute("SELECT * FROM jobq.stats()").description
    assert columns is not None

    assert [column.name for column in columns] == [
        *(
            "queue",
            "queued",
            "runnable",
            "running",
            "done",
            "failed",
            "oldest_queued_age",
            "cancelled",
            "waiting",
        )
    ]
