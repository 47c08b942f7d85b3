"""The lease of a claimed job: jobq.complete, complete_many, fail, heartbeat, and fencing of stale leases."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import (
    Connect,
    Db,
    claim_one,
    enqueue,
    job,
    make_runnable,
    make_stale,
    row_digest,
    scalar,
)


def sqlstate_of(db: Db, query: str, params: Any = None) -> str | None:
    """Run query, which must fail; the SQLSTATE it failed with."""
    with pytest.raises(psycopg.Error) as raised:
        db.execute(query, params)
    return raised.value.sqlstate


def claim_fail_reclaim(db: Db) -> tuple[int, int, int]:
    """A job claimed, failed and claimed again: (id, the old lease, the current lease)."""
    job_id = enqueue(db)
    old = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, old["lease"]))
    make_runnable(db, job_id)
    new = claim_one(db)
    return job_id, old["lease"], new["lease"]


def reap_and_reclaim(db: Db) -> tuple[int, int, int]:
    """Worker A's job reaped and claimed by worker B: (id, A's lease, B's lease)."""
    job_id = enqueue(db)
    lease_a = claim_one(db, worker="worker-a")["lease"]
    make_stale(db, job_id)
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")] == [job_id]
    make_runnable(db, job_id)
    lease_b = claim_one(db, worker="worker-b")["lease"]
    return job_id, lease_a, lease_b


# -- complete ---------------------------------------------------------------


def test_complete_marks_a_running_job_done_with_finished_at(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    row = db.execute(
        "SELECT status, finished_at BETWEEN locked_at AND now() AS finished_after_claim"
        " FROM jobq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row == {"status": "done", "finished_after_claim": True}


def test_repeating_a_complete_with_the_same_lease_succeeds_and_changes_nothing(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))
    before = row_digest(db, job_id)

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert row_digest(db, job_id) == before


def test_complete_with_a_stale_lease_raises_jq001_and_changes_nothing(db: Db) -> None:
    job_id, old_lease, _ = claim_fail_reclaim(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s)", (job_id, old_lease)) == "JQ001"
    assert row_digest(db, job_id) == before
    assert job(db, job_id)["status"] == "running"


def test_complete_of_an_unknown_id_raises_jq002(db: Db) -> None:
    enqueue(db)
    claim_one(db)
    unknown = scalar(db, "SELECT max(id) + 1000 FROM jobq.jobs")

    assert sqlstate_of(db, "SELECT jobq.complete(%s, 1)", (unknown,)) == "JQ002"


def test_complete_of_a_never_claimed_job_raises_jq001(db: Db) -> None:
    job_id = enqueue(db)
    before = row_digest(db, job_id)

    for lease in (0, 1):
        assert sqlstate_of(db, "SELECT jobq.complete(%s, %s)", (job_id, lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_complete_of_a_reaped_job_with_its_old_lease_raises_jq001(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    make_stale(db, job_id)
    db.execute("SELECT jobq.reap()")

    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s)", (job_id, lease)) == "JQ001"
    assert job(db, job_id)["status"] == "queued"


@pytest.mark.parametrize(
    "call",
    [
        "SELECT jobq.complete(%s, %s)",
        "SELECT jobq.fail(%s, 'late failure', %s)",
        "SELECT jobq.heartbeat(%s, %s)",
    ],
    ids=["complete", "fail", "heartbeat"],
)
def test_after_a_reap_and_reclaim_the_old_lease_is_refused_with_jq001(db: Db, call: str) -> None:
    job_id, lease_a, _ = reap_and_reclaim(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, call, (job_id, lease_a)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_after_a_reap_and_reclaim_the_new_lease_completes_the_job(db: Db) -> None:
    job_id, lease_a, lease_b = reap_and_reclaim(db)
    assert lease_b > lease_a

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease_b))

    row = job(db, job_id)
    assert (row["status"], row["locked_by"]) == ("done", "worker-b")
    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s)", (job_id, lease_a)) == "JQ001"


def test_the_jq001_error_explains_the_state_of_the_job(db: Db) -> None:
    job_id, old_lease, _ = claim_fail_reclaim(db)

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.complete(%s, %s)", (job_id, old_lease))

    assert raised.value.diag.message_detail is not None
    assert "running" in raised.value.diag.message_detail


def test_a_complete_waiting_on_a_reaper_is_refused_once_the_reaper_commits(db: Db, connect: Connect) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    make_stale(db, job_id)
    reaper = connect(autocommit=False)
    assert len(reaper.execute("SELECT * FROM jobq.reap()").fetchall()) == 1  # holds the row lock
    worker = connect()
    outcome: list[str | None] = []

    def complete() -> None:
        try:
            worker.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))
            outcome.append(None)
        except psycopg.Error as error:
            outcome.append(error.sqlstate)

    thread = threading.Thread(target=complete)
    thread.start()
    waiting_on_lock = False
    deadline = time.monotonic() + 3
    while not waiting_on_lock and time.monotonic() < deadline:
        time.sleep(0.05)
        waiting_on_lock = scalar(
            db,
            "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = %s",
            (worker.info.backend_pid,),
        )
    reaper.commit()
    thread.join(5)

    assert waiting_on_lock
    assert outcome == ["JQ001"]
    assert job(db, job_id)["status"] == "queued"


# -- complete_many ----------------------------------------------------------


def test_complete_many_acknowledges_valid_pairs_and_leaves_out_stale_and_unknown_ones(db: Db) -> None:
    fresh = [enqueue(db) for _ in range(2)]
    leases = {row["id"]: row["lease"] for row in db.execute("SELECT * FROM jobq.claim('default', 2, 'w1')")}
    stale_id, old_lease, _ = claim_fail_reclaim(db)
    unknown = scalar(db, "SELECT max(id) + 1000 FROM jobq.jobs")
    ids = [fresh[0], stale_id, fresh[1], unknown]
    pair_leases = [leases[fresh[0]], old_lease, leases[fresh[1]], 1]

    acknowledged = [
        row["ack"] for row in db.execute("SELECT jobq.complete_many(%s, %s) AS ack", (ids, pair_leases))
    ]

    assert acknowledged == sorted(fresh)
    assert [job(db, i)["status"] for i in (*fresh, stale_id)] == ["done", "done", "running"]


def test_complete_many_repeated_acknowledges_the_same_jobs_and_changes_nothing(db: Db) -> None:
    for _ in range(3):
        enqueue(db)
    claimed = db.execute("SELECT id, lease FROM jobq.claim('default', 3, 'w1')").fetchall()
    ids = [row["id"] for row in claimed]
    leases = [row["lease"] for row in claimed]
    first = [row["ack"] for row in db.execute("SELECT jobq.complete_many(%s, %s) AS ack", (ids, leases))]
    before = [row_digest(db, i) for i in ids]

    again = [row["ack"] for row in db.execute("SELECT jobq.complete_many(%s, %s) AS ack", (ids, leases))]

    assert first == again == sorted(ids)
    assert [row_digest(db, i) for i in ids] == before


def test_complete_many_of_empty_arrays_acknowledges_nothing(db: Db) -> None:
    rows = db.execute("SELECT jobq.complete_many('{}'::bigint[], '{}'::bigint[])").fetchall()

    assert rows == []


def test_complete_many_with_arrays_of_different_lengths_raises_22023(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    before = row_digest(db, job_id)

    state = sqlstate_of(db, "SELECT jobq.complete_many(%s, %s)", ([job_id], [lease, lease]))

    assert state == "22023"
    assert row_digest(db, job_id) == before


@pytest.mark.parametrize(
    "call",
    [
        "SELECT jobq.complete_many(NULL, ARRAY[%s, %s]::bigint[])",
        "SELECT jobq.complete_many(ARRAY[%s, %s]::bigint[], NULL)",
    ],
    ids=["null-ids", "null-leases"],
)
def test_complete_many_with_a_null_array_raises_22004(db: Db, call: str) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]

    assert sqlstate_of(db, call, (job_id, lease)) == "22004"
    assert job(db, job_id)["status"] == "running"


# -- fail -------------------------------------------------------------------


def fail_now(db: Db, job_id: int, lease: int, error: str = "boom") -> dict[str, Any]:
    """jobq.fail; the returned row's status, and run_at less the failing statement's clock."""
    row = db.execute(
        "SELECT f.status, f.run_at - statement_timestamp() AS delay, f.finished_at IS NOT NULL AS finished"
        " FROM jobq.fail(%s, %s, %s) AS f",
        (job_id, error, lease),
    ).fetchone()
    assert row is not None
    return row


def test_fail_backs_off_2_s_then_4_s_then_fails_at_the_third_attempt(db: Db) -> None:
    job_id = enqueue(db)

    first = fail_now(db, job_id, claim_one(db)["lease"])
    assert scalar(
        db,
        "SELECT run_at BETWEEN now() + interval '1.5 s' AND now() + interval '2.5 s'"
        " FROM jobq.jobs WHERE id = %s",
        (job_id,),
    )
    make_runnable(db, job_id)
    second = fail_now(db, job_id, claim_one(db)["lease"])
    make_runnable(db, job_id)
    third = fail_now(db, job_id, claim_one(db)["lease"])

    assert [first["status"], second["status"], third["status"]] == ["queued", "queued", "failed"]
    assert [first["delay"], second["delay"]] == [timedelta(seconds=2), timedelta(seconds=4)]
    assert [first["finished"], second["finished"], third["finished"]] == [False, False, True]
    assert job(db, job_id)["attempts"] == 3


def test_fail_of_a_job_with_one_attempt_makes_it_failed_at_once(db: Db) -> None:
    job_id = enqueue(db, max_attempts=1)

    assert fail_now(db, job_id, claim_one(db)["lease"])["status"] == "failed"
    assert db.execute("SELECT * FROM jobq.claim('default', 1, 'w1')").fetchall() == []


def test_fail_keeps_a_short_error_verbatim(db: Db) -> None:
    job_id = enqueue(db)
    error = "ValueError: bad input\n  at line 3 — «quoted» ' \" ;"

    fail_now(db, job_id, claim_one(db)["lease"], error)

    assert job(db, job_id)["last_error"] == error


def test_fail_cuts_a_long_error_to_its_first_2000_characters(db: Db) -> None:
    job_id = enqueue(db)
    error = "".join(f"{i % 10}é€" for i in range(3334))[:10_000]

    fail_now(db, job_id, claim_one(db)["lease"], error)

    assert job(db, job_id)["last_error"] == error[:2000]


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_a_job_never_stays_running_after_a_fail(db: Db, max_attempts: int) -> None:
    job_id = enqueue(db, max_attempts=max_attempts)

    statuses = []
    for _ in range(max_attempts):
        make_runnable(db, job_id)
        statuses.append(fail_now(db, job_id, claim_one(db)["lease"])["status"])

    assert statuses == ["queued"] * (max_attempts - 1) + ["failed"]


def test_fail_with_a_stale_lease_raises_jq001_and_changes_nothing(db: Db) -> None:
    job_id, old_lease, _ = claim_fail_reclaim(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.fail(%s, 'late', %s)", (job_id, old_lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_a_second_fail_with_the_same_lease_raises_jq001(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    fail_now(db, job_id, lease, "first")
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.fail(%s, 'second', %s)", (job_id, lease)) == "JQ001"
    assert row_digest(db, job_id) == before
    assert job(db, job_id)["last_error"] == "first"


def test_fail_of_an_unknown_id_raises_jq002(db: Db) -> None:
    enqueue(db)
    unknown = scalar(db, "SELECT max(id) + 1000 FROM jobq.jobs")

    assert sqlstate_of(db, "SELECT jobq.fail(%s, 'boom', 1)", (unknown,)) == "JQ002"


# -- heartbeat --------------------------------------------------------------


def test_heartbeat_extends_the_lease_so_the_reaper_leaves_the_job_alone(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    make_stale(db, job_id, "1 hour")

    extended_now = scalar(db, "SELECT jobq.heartbeat(%s, %s) = statement_timestamp()", (job_id, lease))
    reaped = db.execute("SELECT * FROM jobq.reap()").fetchall()

    assert extended_now is True
    assert reaped == []
    row = job(db, job_id)
    assert (row["status"], row["lease"]) == ("running", lease)


def test_claim_stores_the_expiry_of_a_lease_of_the_length_asked_for(db: Db) -> None:
    enqueue(db, priority=1)
    enqueue(db)

    asked = db.execute(
        "SELECT lease_expires_at = locked_at + interval '90 seconds' AS ninety_seconds,"
        " locked_at = statement_timestamp() AS now"
        " FROM jobq.claim('default', 1, 'w1', lease_timeout => '90 seconds')"
    ).fetchall()
    by_default = db.execute(
        "SELECT lease_expires_at = locked_at + interval '60 seconds' AS sixty_seconds"
        " FROM jobq.claim('default', 1, 'w1')"
    ).fetchall()

    assert asked == [{"ninety_seconds": True, "now": True}]
    assert by_default == [{"sixty_seconds": True}]


def test_heartbeat_extends_a_lease_by_its_own_length(db: Db) -> None:
    job_id = enqueue(db)
    lease = scalar(db, "SELECT lease FROM jobq.claim('default', 1, 'w1', lease_timeout => '2 hours')")
    make_stale(db, job_id, "90 minutes")

    db.execute("SELECT jobq.heartbeat(%s, %s)", (job_id, lease))

    row = job(db, job_id)
    assert row["lease_expires_at"] - row["locked_at"] == timedelta(hours=2)
    assert scalar(
        db, "SELECT locked_at > now() - interval '1 minute' FROM jobq.jobs WHERE id = %s", (job_id,)
    )


def test_heartbeat_many_extends_each_lease_by_its_own_length(db: Db) -> None:
    short = enqueue(db, priority=1)
    long = enqueue(db)
    held = {
        row["id"]: row["lease"]
        for lengths in ("'5 seconds'", "'1 hour'")
        for row in db.execute(
            f"SELECT id, lease FROM jobq.claim('default', 1, 'w1', lease_timeout => {lengths})"
        )
    }
    make_stale(db, short, "1 minute")
    make_stale(db, long, "1 minute")

    extended = db.execute(
        "SELECT id FROM jobq.heartbeat_many(%s, %s) AS id", (list(held), list(held.values()))
    ).fetchall()

    assert sorted(row["id"] for row in extended) == sorted([short, long])
    lengths = {job_id: job(db, job_id)["lease_expires_at"] - job(db, job_id)["locked_at"] for job_id in held}
    assert lengths == {short: timedelta(seconds=5), long: timedelta(hours=1)}
    assert db.execute("SELECT id FROM jobq.reap()").fetchall() == []


def test_heartbeat_stores_the_locked_at_it_returns(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    make_stale(db, job_id, "1 hour")

    returned = scalar(db, "SELECT jobq.heartbeat(%s, %s)", (job_id, lease))

    assert scalar(db, "SELECT locked_at = %s FROM jobq.jobs WHERE id = %s", (returned, job_id)) is True


def test_heartbeat_with_a_stale_lease_raises_jq001_and_changes_nothing(db: Db) -> None:
    job_id, old_lease, _ = claim_fail_reclaim(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.heartbeat(%s, %s)", (job_id, old_lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_heartbeat_of_a_done_job_raises_jq001(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert sqlstate_of(db, "SELECT jobq.heartbeat(%s, %s)", (job_id, lease)) == "JQ001"


# -- release ----------------------------------------------------------------


def test_release_hands_an_unstarted_job_back_without_counting_the_attempt(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]

    db.execute("SELECT jobq.release(%s, %s)", (job_id, lease))

    row = job(db, job_id)
    assert (row["status"], row["attempts"], row["lease"]) == ("queued", 0, lease)
    assert claim_one(db)["lease"] == lease + 1


def test_release_with_a_stale_lease_raises_jq001_and_changes_nothing(db: Db) -> None:
    job_id, old_lease, _ = claim_fail_reclaim(db)
    before = row_digest(db, job_id)

    assert sqlstate_of(db, "SELECT jobq.release(%s, %s)", (job_id, old_lease)) == "JQ001"
    assert row_digest(db, job_id) == before


def test_release_of_an_unknown_id_raises_jq002(db: Db) -> None:
    assert sqlstate_of(db, "SELECT jobq.release(424242, 1)") == "JQ002"
