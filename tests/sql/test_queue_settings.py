"""Per-queue settings: jobq.configure_queue, the view jobq.queues, and what claim, fail, heartbeat and reap
take from them (max_attempts, backoff with jitter, lease_timeout, timeout and the deadline)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, job, make_runnable, row_digest, scalar


def configure(db: Db, queue: str = "default", **settings: Any) -> dict[str, Any]:
    """jobq.configure_queue(queue, <settings by name>): the row it returns."""
    named = "".join(f", {name} => %({name})s" for name in settings)
    row = db.execute(
        f"SELECT * FROM jobq.configure_queue(%(queue)s{named})", {"queue": queue, **settings}
    ).fetchone()
    assert row is not None
    return row


def queues(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT * FROM jobq.queues ORDER BY queue").fetchall()


def running(
    db: Db, queue: str = "default", lease_timeout: str | None = None, **options: Any
) -> dict[str, Any]:
    """A job enqueued (with options) and claimed (with lease_timeout, when given): its claimed row."""
    job_id = enqueue(db, queue, **options)
    if lease_timeout is None:
        rows = db.execute("SELECT * FROM jobq.claim(%s, 1, 'w1')", (queue,)).fetchall()
    else:
        rows = db.execute("SELECT * FROM jobq.claim(%s, 1, 'w1', %s)", (queue, lease_timeout)).fetchall()
    assert [row["id"] for row in rows] == [job_id]
    return {**rows[0], "deadline": deadline_of(db, job_id)}


def retry_delay_after_fail(db: Db, claimed: dict[str, Any], retry_in: str | None = None) -> timedelta:
    """Fail the claimed job; the delay until its retry (run_at - the failing statement's clock)."""
    delay = scalar(
        db,
        "SELECT f.run_at - statement_timestamp() FROM jobq.fail(%s, 'boom', %s, %s::interval) AS f",
        (claimed["id"], claimed["lease"], retry_in),
    )
    assert isinstance(delay, timedelta)
    return delay


def shift(db: Db, job_id: int, by: str) -> None:
    """Move a running job's claim into the past by `by`: locked_at, lease_expires_at and deadline alike."""
    db.execute(
        "UPDATE jobq.jobs SET locked_at = locked_at - %(by)s::interval,"
        " lease_expires_at = lease_expires_at - %(by)s::interval WHERE id = %(id)s",
        {"by": by, "id": job_id},
    )
    db.execute("UPDATE jobq.deadlines SET deadline = deadline - %s::interval WHERE id = %s", (by, job_id))


def deadline_of(db: Db, job_id: int) -> Any:
    """The deadline of the job's current attempt (jobq.deadlines, the row of its current lease), or None."""
    row = db.execute(
        "SELECT d.deadline FROM jobq.deadlines AS d JOIN jobq.jobs AS j ON j.id = d.id AND j.lease = d.lease"
        " WHERE d.id = %s",
        (job_id,),
    ).fetchone()
    return None if row is None else row["deadline"]


def job_now(db: Db, job_id: int) -> dict[str, Any]:
    """The job's row, with the deadline of its current attempt."""
    return {**job(db, job_id), "deadline": deadline_of(db, job_id)}


DEFAULTS = {
    "paused": False,
    "max_attempts": 3,
    "backoff_base": timedelta(seconds=1),
    "backoff_max": timedelta(seconds=300),
    "backoff_jitter": 0.0,
    "lease_timeout": timedelta(seconds=60),
    "timeout": None,
    "concurrency": None,
    "key_concurrency": None,
    "key_order": "priority",
    "rate_limit": None,
    "rate_interval": None,
    "retain_done": timedelta(days=1),
    "retain_failed": timedelta(days=14),
    "retain_cancelled": timedelta(days=7),
}


# -- configure_queue and jobq.queues -----------------------------------------------------------------------


def test_configure_queue_returns_the_queues_row_with_the_defaults_filled_in(db: Db) -> None:
    row = configure(db, max_attempts=5, timeout="10 minutes")

    assert row == {
        **DEFAULTS,
        "queue": "default",
        "max_attempts": 5,
        "timeout": timedelta(minutes=10),
        "configured": True,
    }
    assert queues(db) == [row]


def test_configure_queue_leaves_a_setting_not_given_as_it_was(db: Db) -> None:
    configure(db, max_attempts=5, backoff_jitter=0.25)

    row = configure(db, lease_timeout="2 minutes")

    assert (row["max_attempts"], row["backoff_jitter"], row["lease_timeout"]) == (
        5,
        0.25,
        timedelta(minutes=2),
    )


def test_configure_queue_unset_puts_the_named_settings_back_to_their_defaults(db: Db) -> None:
    configure(db, max_attempts=5, timeout="1 minute", lease_timeout="2 minutes")

    row = configure(db, unset=["timeout", "max_attempts"])

    assert (row["max_attempts"], row["timeout"], row["lease_timeout"]) == (3, None, timedelta(minutes=2))
    assert scalar(db, "SELECT max_attempts IS NULL AND timeout IS NULL FROM jobq.queue_settings") is True


def test_the_queues_view_lists_configured_queues_and_queues_with_queued_or_running_jobs(db: Db) -> None:
    configure(db, "configured_only", max_attempts=7)
    enqueue(db, "with_queued")
    enqueue(db, "with_running")
    claim_one(db, "with_running")
    done = enqueue(db, "with_done_only")
    db.execute("SELECT jobq.complete(%s, %s)", (done, claim_one(db, "with_done_only")["lease"]))

    rows = queues(db)

    assert [(row["queue"], row["max_attempts"], row["configured"]) for row in rows] == [
        ("configured_only", 7, True),
        ("with_queued", 3, False),
        ("with_running", 3, False),
    ]
    assert {k: rows[1][k] for k in DEFAULTS} == DEFAULTS


def test_the_queues_view_is_empty_without_jobs_or_settings(db: Db) -> None:
    assert queues(db) == []


# -- max_attempts --------------------------------------------------------------------------------------------


def test_a_job_enqueued_without_max_attempts_has_3_on_a_queue_without_settings(db: Db) -> None:
    job_id = enqueue(db)
    assert scalar(db, "SELECT max_attempts FROM jobq.job(%s)", (job_id,)) == 3

    for attempt in (1, 2, 3):
        claimed = claim_one(db)
        status = scalar(db, "SELECT status FROM jobq.fail(%s, 'boom', %s)", (job_id, claimed["lease"]))
        make_runnable(db, job_id)
        assert status == ("failed" if attempt == 3 else "queued")


def test_a_job_enqueued_without_max_attempts_gets_the_queues_at_its_claim(db: Db) -> None:
    configure(db, max_attempts=6)

    assert running(db)["max_attempts"] == 6


def test_job_reports_the_queues_max_attempts_for_a_job_not_yet_claimed(db: Db) -> None:
    configure(db, max_attempts=6)
    job_id = enqueue(db)

    assert scalar(db, "SELECT max_attempts FROM jobq.job(%s)", (job_id,)) == 6
    assert job(db, job_id)["max_attempts"] is None


def test_a_job_enqueued_with_max_attempts_keeps_its_own(db: Db) -> None:
    configure(db, max_attempts=6)

    assert running(db, max_attempts=2)["max_attempts"] == 2


def test_a_claimed_job_keeps_its_max_attempts_when_the_queues_setting_changes(db: Db) -> None:
    configure(db, max_attempts=2)
    claimed = running(db)
    configure(db, max_attempts=9)

    retry_delay_after_fail(db, claimed)
    make_runnable(db, claimed["id"])
    again = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (again["id"], again["lease"]))

    assert (job(db, claimed["id"])["status"], job(db, claimed["id"])["max_attempts"]) == ("failed", 2)


def test_a_job_runs_out_of_attempts_at_the_queues_max_attempts(db: Db) -> None:
    configure(db, max_attempts=1)
    claimed = running(db)

    status = scalar(db, "SELECT status FROM jobq.fail(%s, 'boom', %s)", (claimed["id"], claimed["lease"]))

    assert status == "failed"


# -- backoff -----------------------------------------------------------------------------------------------


def test_without_settings_the_backoff_after_attempt_a_is_2_to_the_a_seconds(db: Db) -> None:
    claimed = running(db)

    assert retry_delay_after_fail(db, claimed) == timedelta(seconds=2)


def test_the_backoff_follows_the_queues_backoff_base(db: Db) -> None:
    configure(db, backoff_base="10 seconds", max_attempts=5)
    claimed = running(db)
    assert retry_delay_after_fail(db, claimed) == timedelta(seconds=20)

    make_runnable(db, claimed["id"])
    assert retry_delay_after_fail(db, claim_one(db)) == timedelta(seconds=40)


def test_the_backoff_is_capped_at_the_queues_backoff_max(db: Db) -> None:
    configure(db, backoff_base="10 seconds", backoff_max="15 seconds")

    assert retry_delay_after_fail(db, running(db)) == timedelta(seconds=15)


def test_the_reaper_retries_after_the_queues_backoff_too(db: Db) -> None:
    configure(db, backoff_base="1 minute")
    claimed = running(db)
    shift(db, claimed["id"], "10 minutes")

    delay = scalar(db, "SELECT r.run_at - statement_timestamp() FROM jobq.reap() AS r")

    assert delay == timedelta(minutes=2)


def test_jittered_delays_lie_between_the_delay_shortened_by_the_jitter_and_the_delay(db: Db) -> None:
    configure(db, backoff_base="50 seconds", backoff_jitter=0.5)

    row = db.execute(
        "SELECT min(d) AS shortest, max(d) AS longest, count(DISTINCT d) AS distinct_delays,"
        " count(*) FILTER (WHERE d < interval '75 seconds') AS short_half"
        " FROM (SELECT jobq._retry_delay('default', 1) AS d FROM generate_series(1, 2000)) AS s"
    ).fetchone()

    assert row is not None
    assert timedelta(seconds=50) <= row["shortest"] <= row["longest"] <= timedelta(seconds=100)
    assert row["distinct_delays"] > 100
    assert 0 < row["short_half"] < 2000


def test_a_failure_on_a_jittered_queue_retries_within_the_jitter_bounds(db: Db) -> None:
    configure(db, backoff_base="50 seconds", backoff_jitter=1)
    delays = []
    for _ in range(10):
        delays.append(retry_delay_after_fail(db, running(db)))
        db.execute("DELETE FROM jobq.jobs")

    assert all(timedelta(0) <= delay <= timedelta(seconds=100) for delay in delays), delays
    assert len(set(delays)) > 1


def test_fail_retry_in_overrides_the_backoff_once(db: Db) -> None:
    configure(db, backoff_base="10 seconds", max_attempts=5)
    claimed = running(db)
    assert retry_delay_after_fail(db, claimed, retry_in="5 minutes") == timedelta(minutes=5)

    make_runnable(db, claimed["id"])
    assert retry_delay_after_fail(db, claim_one(db)) == timedelta(seconds=40)


def test_fail_retry_in_zero_makes_the_job_runnable_at_once(db: Db) -> None:
    claimed = running(db)

    assert retry_delay_after_fail(db, claimed, retry_in="0 s") == timedelta(0)
    assert claim_one(db)["id"] == claimed["id"]


def test_fail_retry_in_on_the_last_attempt_still_fails_the_job(db: Db) -> None:
    claimed = running(db, max_attempts=1)

    row = db.execute(
        "SELECT status FROM jobq.fail(%s, 'boom', %s, retry_in => '1 minute')",
        (claimed["id"], claimed["lease"]),
    ).fetchone()

    assert row == {"status": "failed"}


# -- lease_timeout -----------------------------------------------------------------------------------------


def lease_length(row: dict[str, Any]) -> timedelta:
    length = row["lease_expires_at"] - row["locked_at"]
    assert isinstance(length, timedelta)
    return length


def test_a_claim_without_lease_timeout_takes_60_seconds(db: Db) -> None:
    assert lease_length(running(db)) == timedelta(seconds=60)


def test_a_claim_without_lease_timeout_takes_the_queues(db: Db) -> None:
    configure(db, lease_timeout="5 minutes")

    assert lease_length(running(db)) == timedelta(minutes=5)


def test_a_claim_with_lease_timeout_takes_its_own_over_the_queues(db: Db) -> None:
    configure(db, lease_timeout="5 minutes")

    assert lease_length(running(db, lease_timeout="20 seconds")) == timedelta(seconds=20)


def test_complete_and_claim_without_lease_timeout_takes_the_queues(db: Db) -> None:
    configure(db, lease_timeout="5 minutes")
    enqueue(db)

    row = db.execute("SELECT * FROM jobq.complete_and_claim('{}', '{}', 'default', 1, 'w1')").fetchone()

    assert row is not None
    assert lease_length(row) == timedelta(minutes=5)


# -- timeout and deadline ----------------------------------------------------------------------------------


def test_a_job_without_timeout_has_no_deadline(db: Db) -> None:
    claimed = running(db)

    assert claimed["deadline"] is None
    assert lease_length(claimed) == timedelta(seconds=60)


def test_the_queues_timeout_sets_the_deadline_at_claim_and_caps_the_lease(db: Db) -> None:
    configure(db, timeout="20 seconds")
    claimed = running(db, lease_timeout="60 seconds")

    assert claimed["deadline"] - claimed["locked_at"] == timedelta(seconds=20)
    assert claimed["lease_expires_at"] == claimed["deadline"]


def test_a_timeout_longer_than_the_lease_leaves_the_lease_as_it_is(db: Db) -> None:
    configure(db, timeout="10 minutes")
    claimed = running(db, lease_timeout="60 seconds")

    assert claimed["deadline"] - claimed["locked_at"] == timedelta(minutes=10)
    assert lease_length(claimed) == timedelta(seconds=60)


def test_a_heartbeat_never_extends_the_lease_past_the_deadline(db: Db) -> None:
    configure(db, timeout="90 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "50 seconds")  # 40 seconds left before the deadline

    db.execute("SELECT jobq.heartbeat(%s, %s)", (claimed["id"], claimed["lease"]))

    row = job_now(db, claimed["id"])
    assert row["lease_expires_at"] == row["deadline"]
    assert row["deadline"] == claimed["deadline"] - timedelta(seconds=50)


@pytest.mark.parametrize("call", ["heartbeat_many", "heartbeat_status"])
def test_the_batch_heartbeats_never_extend_the_lease_past_the_deadline(db: Db, call: str) -> None:
    configure(db, timeout="90 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "50 seconds")

    db.execute(f"SELECT * FROM jobq.{call}(%s, %s)", ([claimed["id"]], [claimed["lease"]]))

    row = job_now(db, claimed["id"])
    assert row["lease_expires_at"] == row["deadline"]


def test_heartbeat_many_leaves_out_a_job_past_its_deadline_as_heartbeat_refuses_it(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "31 seconds")

    extended = db.execute("SELECT * FROM jobq.heartbeat_many(%s, %s)", ([claimed["id"]], [claimed["lease"]]))

    assert extended.fetchall() == []


def test_reap_without_stale_recovers_a_job_past_its_deadline_that_heartbeat_many_keeps_fresh(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "31 seconds")
    db.execute("SELECT * FROM jobq.heartbeat_many(%s, %s)", ([claimed["id"]], [claimed["lease"]]))

    assert [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")] == [claimed["id"]]


def test_a_heartbeat_before_the_deadline_extends_the_lease_by_its_length(db: Db) -> None:
    configure(db, timeout="1 hours")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "30 seconds")

    locked_at = scalar(db, "SELECT jobq.heartbeat(%s, %s)", (claimed["id"], claimed["lease"]))

    assert job(db, claimed["id"])["lease_expires_at"] == locked_at + timedelta(seconds=60)


def test_a_heartbeat_after_the_deadline_raises_jq003_and_changes_nothing(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    shift(db, claimed["id"], "31 seconds")
    before = row_digest(db, claimed["id"])

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.heartbeat(%s, %s)", (claimed["id"], claimed["lease"]))

    assert raised.value.sqlstate == "JQ003"
    assert str(claimed["id"]) in (raised.value.diag.message_primary or "")
    assert row_digest(db, claimed["id"]) == before


def test_reap_recovers_a_timed_out_job_although_it_heartbeats(db: Db) -> None:
    configure(db, timeout="90 seconds")
    claimed = running(db, lease_timeout="60 seconds")
    for _ in range(3):  # a worker heartbeating every 25 seconds
        shift(db, claimed["id"], "25 seconds")
        db.execute("SELECT jobq.heartbeat(%s, %s)", (claimed["id"], claimed["lease"]))
        assert db.execute("SELECT id FROM jobq.reap()").fetchall() == []
    shift(db, claimed["id"], "25 seconds")  # 100 seconds after the claim

    reaped = db.execute("SELECT id, status, last_error FROM jobq.reap()").fetchall()

    assert [(row["id"], row["status"]) for row in reaped] == [(claimed["id"], "queued")]
    assert "deadline" in reaped[0]["last_error"]


def test_a_reclaimed_job_gets_a_fresh_deadline(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db)
    shift(db, claimed["id"], "10 minutes")
    db.execute("SELECT jobq.reap()")
    make_runnable(db, claimed["id"])

    again = claim_one(db)

    assert deadline_of(db, claimed["id"]) - again["locked_at"] == timedelta(seconds=30)


def test_a_claimed_job_keeps_its_deadline_when_the_queues_timeout_changes(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db)

    configure(db, timeout="10 minutes")
    db.execute("SELECT jobq.heartbeat(%s, %s)", (claimed["id"], claimed["lease"]))

    assert deadline_of(db, claimed["id"]) == claimed["deadline"]


# -- settings changed after claims read them -------------------------------------------------------------
# claim keeps each queue's settings at hand (jobq._claim_hints); a change must reach the claims after it.


def test_a_claim_after_a_change_of_lease_timeout_takes_the_new_one(db: Db) -> None:
    configure(db, lease_timeout="2 minutes")
    assert lease_length(running(db)) == timedelta(minutes=2)

    configure(db, lease_timeout="3 minutes")

    assert lease_length(running(db)) == timedelta(minutes=3)


def test_a_claim_after_a_pause_gets_nothing_though_an_earlier_claim_read_the_settings(db: Db) -> None:
    configure(db, lease_timeout="2 minutes")
    running(db)
    enqueue(db)

    db.execute("SELECT jobq.pause('default')")

    assert db.execute("SELECT id FROM jobq.claim('default', 1, 'w1')").fetchall() == []


def test_a_claim_after_settings_are_unset_takes_the_defaults(db: Db) -> None:
    configure(db, lease_timeout="2 minutes", max_attempts=7, timeout="1 hour")
    running(db)

    configure(db, unset=["lease_timeout", "max_attempts", "timeout"])

    claimed = running(db)
    assert (lease_length(claimed), claimed["max_attempts"], claimed["deadline"]) == (
        timedelta(seconds=60),
        3,
        None,
    )


def test_a_claim_after_an_admin_writes_the_settings_table_directly_sees_the_change(db: Db) -> None:
    configure(db, lease_timeout="2 minutes")
    running(db)

    db.execute("UPDATE jobq.queue_settings SET lease_timeout = '4 minutes' WHERE queue = 'default'")
    assert lease_length(running(db)) == timedelta(minutes=4)

    db.execute("DELETE FROM jobq.queue_settings")
    assert lease_length(running(db)) == timedelta(seconds=60)


def test_a_claim_in_another_session_after_a_change_sees_it(db: Db, connect: Connect) -> None:
    worker = connect()
    enqueue(db)
    configure(db, max_attempts=4)
    assert scalar(worker, "SELECT max_attempts FROM jobq.claim('default', 1, 'w1')") == 4
    enqueue(db)

    configure(db, max_attempts=8)

    assert scalar(worker, "SELECT max_attempts FROM jobq.claim('default', 1, 'w1')") == 8


def test_a_settings_change_rolled_back_leaves_claims_on_the_old_settings(db: Db, connect: Connect) -> None:
    configure(db, lease_timeout="2 minutes")
    running(db)
    admin = connect(autocommit=False)
    admin.execute("SELECT jobq.configure_queue('default', lease_timeout => '9 minutes')")
    admin.rollback()

    assert lease_length(running(db)) == timedelta(minutes=2)


# -- heartbeat_status --------------------------------------------------------------------------------------


def test_heartbeat_status_reports_each_job_still_held_with_its_new_expiry(db: Db) -> None:
    first, second = running(db), running(db)
    db.execute("SELECT jobq.complete(%s, %s)", (second["id"], second["lease"]))

    rows = db.execute(
        "SELECT s.*, statement_timestamp() AS now FROM jobq.heartbeat_status(%s, %s) AS s",
        ([second["id"], first["id"], 999_999], [second["lease"], first["lease"], 1]),
    ).fetchall()

    assert [(row["id"], row["cancel_requested"]) for row in rows] == [(first["id"], False)]
    assert rows[0]["lease_expires_at"] == rows[0]["now"] + timedelta(seconds=60)


def test_heartbeat_status_reports_a_cancel_request(db: Db) -> None:
    claimed = running(db)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (claimed["id"],))

    row = db.execute(
        "SELECT id, cancel_requested FROM jobq.heartbeat_status(%s, %s)",
        ([claimed["id"]], [claimed["lease"]]),
    ).fetchone()

    assert row == {"id": claimed["id"], "cancel_requested": True}


def test_heartbeat_status_after_the_deadline_reports_an_expiry_not_after_now(db: Db) -> None:
    configure(db, timeout="30 seconds")
    claimed = running(db)
    shift(db, claimed["id"], "31 seconds")

    row = db.execute(
        "SELECT s.lease_expires_at <= statement_timestamp() AS expired"
        " FROM jobq.heartbeat_status(%s, %s) AS s",
        ([claimed["id"]], [claimed["lease"]]),
    ).fetchone()

    assert row == {"expired": True}
