"""jobq.snooze: a running job goes back to queued for a while, its attempt not spent; fenced by its lease."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Db, claim_one, enqueue, job, make_runnable, row_digest, scalar


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


def test_snooze_puts_the_job_back_to_queued_with_run_at_now_plus_the_delay(db: Db) -> None:
    job_id, lease = running(db)

    row = db.execute(
        "SELECT jobq.snooze(%s, %s, '10 minutes') AS run_at,"
        " statement_timestamp() + interval '10 minutes' AS expected",
        (job_id, lease),
    ).fetchone()

    assert row is not None
    assert row["run_at"] == row["expected"]
    stored = job(db, job_id)
    assert (stored["status"], stored["run_at"]) == ("queued", row["run_at"])


def test_a_snoozed_job_is_not_claimed_before_its_delay(db: Db) -> None:
    job_id, lease = running(db)

    db.execute("SELECT jobq.snooze(%s, %s, '1 hour')", (job_id, lease))

    assert db.execute("SELECT id FROM jobq.claim('default', 1, 'w1')").fetchall() == []


def test_a_snooze_spends_no_attempt(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.snooze(%s, %s, '0 s')", (job_id, lease))

    claimed = claim_one(db)

    assert (claimed["id"], claimed["attempts"]) == (job_id, 1)


def test_a_job_snoozed_on_its_last_attempt_is_claimed_again_and_can_still_fail_once(db: Db) -> None:
    job_id, lease = running(db, max_attempts=1)
    db.execute("SELECT jobq.snooze(%s, %s, '0 s')", (job_id, lease))
    lease = claim_one(db)["lease"]

    failed = db.execute("SELECT status, attempts FROM jobq.fail(%s, 'boom', %s)", (job_id, lease)).fetchone()

    assert failed == {"status": "failed", "attempts": 1}


def test_a_snooze_spends_the_lease(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.snooze(%s, %s, '0 s')", (job_id, lease))
    make_runnable(db, job_id)
    new_lease = claim_one(db)["lease"]

    assert new_lease == lease + 1
    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s)", (job_id, lease)) == "JQ001"


def test_snooze_with_a_stale_lease_raises_jq001_and_changes_nothing(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.snooze(%s, %s, '0 s')", (job_id, lease))
    claim_one(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.snooze(%s, %s, '1 minute')", (job_id, lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_snooze_of_a_queued_job_raises_jq001(db: Db) -> None:
    job_id = enqueue(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.snooze(%s, 0, '1 minute')", (job_id,)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_snooze_of_an_unknown_id_raises_jq002(db: Db) -> None:
    job_id, lease = running(db)

    assert sqlstate_of(db, "SELECT jobq.snooze(%s, %s, '1 minute')", (job_id + 1000, lease)) == "JQ002"
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "running"
