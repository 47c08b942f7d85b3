"""jobq.hand_back (0.9.0): a worker that cannot run a job (its task is unknown to it) hands it back for
another, without spending an attempt; once the job is older than fail_after it fails for good instead."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Db, claim_one, enqueue

ERROR = "unknown task 'send_invoice'"


def running(db: Db, **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, "default", **options)
    claimed = claim_one(db, "default")
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def hand_back(db: Db, job_id: int, lease: int, fail_after: str = "1 hour") -> str:
    row = db.execute(
        "SELECT jobq.hand_back(%s, %s, interval '30 seconds', %s, %s::interval) AS s",
        (job_id, lease, ERROR, fail_after),
    ).fetchone()
    assert row is not None
    return str(row["s"])


def job_row(db: Db, job_id: int) -> dict[str, object]:
    row = db.execute(
        "SELECT status, attempts, last_error, run_at > now() + interval '20 seconds' AS later,"
        " finished_at IS NOT NULL AS finished FROM jobq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return dict(row)


def test_a_young_job_goes_back_to_its_queue_later_without_spending_an_attempt(db: Db) -> None:
    job_id, lease = running(db, max_attempts=2)

    assert hand_back(db, job_id, lease) == "queued"

    assert job_row(db, job_id) == {
        "status": "queued",
        "attempts": 0,
        "last_error": ERROR,
        "later": True,
        "finished": False,
    }


def test_a_job_older_than_fail_after_fails_for_good_with_the_error(db: Db) -> None:
    job_id, lease = running(db, max_attempts=5)
    db.execute("UPDATE jobq.jobs SET created_at = now() - interval '2 hours' WHERE id = %s", (job_id,))

    assert hand_back(db, job_id, lease, fail_after="1 hour") == "failed"

    row = job_row(db, job_id)
    assert (row["status"], row["finished"], row["last_error"]) == (
        "failed",
        True,
        ERROR,
    )


def test_a_job_whose_cancel_was_requested_is_cancelled_instead(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert hand_back(db, job_id, lease) == "cancelled"
    assert job_row(db, job_id)["status"] == "cancelled"


def test_a_stale_lease_is_refused_and_changes_nothing(db: Db) -> None:
    job_id, lease = running(db)

    with pytest.raises(psycopg.Error) as raised:
        hand_back(db, job_id, lease + 1)

    assert raised.value.sqlstate == "JQ001"
    assert job_row(db, job_id)["status"] == "running"


@pytest.mark.parametrize(
    ("arguments", "sqlstate", "named"),
    [
        ("NULL, 'e', interval '1 hour'", "22004", "delay"),
        ("interval '1 s', NULL, interval '1 hour'", "22004", "error"),
        ("interval '1 s', 'e', NULL", "22004", "fail_after"),
        ("interval '-1 s', 'e', interval '1 hour'", "22023", "delay"),
        ("interval '1 s', 'e', interval '-1 hour'", "22023", "fail_after"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    db: Db, arguments: str, sqlstate: str, named: str
) -> None:
    job_id, lease = running(db)

    with pytest.raises(psycopg.Error) as raised:
        db.execute(f"SELECT jobq.hand_back(%s, %s, {arguments})", (job_id, lease))

    assert (raised.value.sqlstate, named in str(raised.value)) == (sqlstate, True)
    assert job_row(db, job_id)["status"] == "running"
