"""Operating the queue: jobq.reap (expired leases), jobq.retry_failed (dead-letter redrive) and jobq.stats."""

from __future__ import annotations

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
    scalar,
    table_fingerprint,
)


def failed_job(db: Db, queue: str = "default") -> tuple[int, int]:
    """A job that failed its only attempt: (id, its last lease)."""
    job_id = enqueue(db, queue, max_attempts=1)
    lease = claim_one(db, queue)["lease"]
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    assert job(db, job_id)["status"] == "failed"
    return job_id, lease


# -- reap -------------------------------------------------------------------


def test_reap_requeues_a_stale_running_job_with_a_backoff_and_a_note(db: Db) -> None:
    job_id = enqueue(db)
    claim_one(db, worker="lost-worker")
    make_stale(db, job_id, "10 minutes")

    reaped = db.execute(
        """
        SELECT r.status, r.run_at = statement_timestamp() + interval '2 s' AS backed_off,
               r.last_error LIKE '%%reaped%%' AS noted, r.last_error LIKE '%%lost-worker%%' AS names_worker
          FROM jobq.reap() AS r
        """
    ).fetchall()

    assert reaped == [{"status": "queued", "backed_off": True, "noted": True, "names_worker": True}]
    assert job(db, job_id)["status"] == "queued"
    assert db.execute("SELECT * FROM jobq.claim('default', 1, 'w2')").fetchall() == []  # still backing off


def test_reap_appends_its_note_to_the_previous_error(db: Db) -> None:
    job_id = enqueue(db)
    db.execute("SELECT jobq.fail(%s, 'first failure', %s)", (job_id, claim_one(db)["lease"]))
    make_runnable(db, job_id)
    claim_one(db)
    make_stale(db, job_id)

    db.execute("SELECT jobq.reap()")

    last_error = job(db, job_id)["last_error"]
    assert last_error.startswith("first failure\n")
    assert "reaped" in last_error.splitlines()[-1]


def test_reap_fails_a_stale_job_that_is_out_of_attempts(db: Db) -> None:
    job_id = enqueue(db, max_attempts=1)
    claim_one(db)
    make_stale(db, job_id)

    reaped = db.execute("SELECT status, finished_at IS NOT NULL AS finished FROM jobq.reap()").fetchall()

    assert reaped == [{"status": "failed", "finished": True}]
    assert job(db, job_id)["status"] == "failed"


def test_reap_leaves_a_fresh_running_job_alone(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]

    reaped = db.execute("SELECT * FROM jobq.reap()").fetchall()

    assert reaped == []
    row = job(db, job_id)
    assert (row["status"], row["lease"]) == ("running", lease)


def test_reap_takes_a_lease_just_past_its_expiry_but_not_one_just_before(db: Db) -> None:
    older = enqueue(db)
    younger = enqueue(db)
    db.execute("SELECT * FROM jobq.claim('default', 2, 'w1')")  # leases of 60 s, the default
    make_stale(db, older, "61 seconds")
    make_stale(db, younger, "59 seconds")

    reaped = [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")]

    assert reaped == [older]


def test_each_job_is_reaped_by_the_length_of_its_own_lease(db: Db) -> None:
    short = enqueue(db, priority=1)
    long = enqueue(db)
    db.execute("SELECT * FROM jobq.claim('default', 1, 'quick', lease_timeout => '2 seconds')")
    db.execute("SELECT * FROM jobq.claim('default', 1, 'patient', lease_timeout => '30 seconds')")
    make_stale(db, short, "10 seconds")
    make_stale(db, long, "10 seconds")

    reaped = [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")]

    assert reaped == [short]
    assert job(db, long)["status"] == "running"


def test_stale_only_holds_reaping_back_and_never_reaps_a_valid_lease(db: Db) -> None:
    expired = enqueue(db, priority=1)
    valid = enqueue(db)
    db.execute("SELECT * FROM jobq.claim('default', 1, 'w1', lease_timeout => '1 minute')")
    db.execute("SELECT * FROM jobq.claim('default', 1, 'w2', lease_timeout => '1 hour')")
    make_stale(db, expired, "2 minutes")  # expired a minute ago
    make_stale(db, valid, "10 minutes")  # older than any stale below, but valid for 50 more minutes

    held_back = [row["id"] for row in db.execute("SELECT id FROM jobq.reap('5 minutes')")]
    taken = [row["id"] for row in db.execute("SELECT id FROM jobq.reap('1 minute')")]

    assert (held_back, taken) == ([], [expired])
    assert job(db, valid)["status"] == "running"


def test_reap_with_a_null_stale_is_reap_by_expiry(db: Db) -> None:
    job_id = enqueue(db)
    claim_one(db)
    make_stale(db, job_id, "61 seconds")

    assert [row["id"] for row in db.execute("SELECT id FROM jobq.reap(NULL)")] == [job_id]


def test_reap_returns_the_recovered_rows_by_id_and_touches_nothing_else(db: Db) -> None:
    ids = [enqueue(db) for _ in range(4)]
    queued = enqueue(db)
    db.execute("SELECT * FROM jobq.claim('default', 4, 'w1')")
    stale = [ids[2], ids[0]]
    for job_id in stale:
        make_stale(db, job_id)

    reaped = db.execute("SELECT * FROM jobq.reap()").fetchall()

    assert [row["id"] for row in reaped] == sorted(stale)
    assert reaped == [job(db, job_id) for job_id in sorted(stale)]
    assert [job(db, job_id)["status"] for job_id in (ids[1], ids[3], queued)] == [
        "running",
        "running",
        "queued",
    ]


@pytest.mark.parametrize(
    ("stale", "sqlstate"),
    [("0 s", "22023"), ("-1 min", "22023")],
    ids=["zero", "negative"],
)
def test_reap_refuses_a_stale_interval_that_is_not_positive(db: Db, stale: str, sqlstate: str) -> None:
    job_id = enqueue(db)
    claim_one(db)
    make_stale(db, job_id)

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.reap(%s::interval)", (stale,))

    assert raised.value.sqlstate == sqlstate
    assert job(db, job_id)["status"] == "running"


def reaped_ids(db: Db, at_most_every: str | None = None) -> list[int]:
    rows = db.execute(
        "SELECT id FROM jobq.reap(NULL, at_most_every => %s::interval)", (at_most_every,)
    ).fetchall()
    return [row["id"] for row in rows]


def test_a_reap_given_at_most_every_is_skipped_within_that_interval_of_the_last(db: Db) -> None:
    first = enqueue(db)
    claim_one(db)
    make_stale(db, first)
    assert reaped_ids(db, "1 minute") == [first]
    second = enqueue(db)
    claim_one(db)
    make_stale(db, second)

    assert reaped_ids(db, "1 minute") == []
    assert job(db, second)["status"] == "running"


def test_a_reap_given_at_most_every_runs_once_the_interval_has_passed(db: Db) -> None:
    reaped_ids(db, "1 minute")
    db.execute("UPDATE jobq._last_reap SET at = at - interval '61 seconds'")
    job_id = enqueue(db)
    claim_one(db)
    make_stale(db, job_id)

    assert reaped_ids(db, "1 minute") == [job_id]


def test_a_reap_without_at_most_every_always_runs(db: Db) -> None:
    reaped_ids(db, "1 minute")
    job_id = enqueue(db)
    claim_one(db)
    make_stale(db, job_id)

    assert reaped_ids(db) == [job_id]


def test_a_reap_given_at_most_every_while_another_runs_returns_at_once(db: Db, connect: Connect) -> None:
    job_id = enqueue(db)
    claim_one(db)
    make_stale(db, job_id)
    reaping = connect(autocommit=False)  # a reap in progress holds the lock to its commit
    reaping.execute("SELECT pg_advisory_xact_lock(hashtext('jobq.reap'), 0)")

    assert reaped_ids(db, "1 second") == []
    reaping.rollback()
    assert reaped_ids(db, "1 second") == [job_id]


# -- retry_failed -----------------------------------------------------------


def test_retry_failed_requeues_failed_jobs_runnable_now_with_attempts_reset(db: Db) -> None:
    job_id, _ = failed_job(db)

    redriven = [row["id"] for row in db.execute("SELECT jobq.retry_failed() AS id")]

    assert redriven == [job_id]
    row = db.execute(
        """
        SELECT status, attempts, finished_at, last_error, run_at <= now() AS runnable
          FROM jobq.jobs WHERE id = %s
        """,
        (job_id,),
    ).fetchone()
    assert row == {
        "status": "queued",
        "attempts": 0,
        "finished_at": None,
        "last_error": "boom",
        "runnable": True,
    }
    assert claim_one(db)["id"] == job_id


def test_retry_failed_redrives_only_the_given_queue(db: Db) -> None:
    mine = [failed_job(db, "mine")[0] for _ in range(2)]
    theirs, _ = failed_job(db, "theirs")

    redriven = [row["id"] for row in db.execute("SELECT jobq.retry_failed('mine') AS id")]

    assert redriven == sorted(mine)
    assert job(db, theirs)["status"] == "failed"


def test_retry_failed_redrives_only_the_given_ids(db: Db) -> None:
    ids = [failed_job(db)[0] for _ in range(3)]

    redriven = [
        row["id"] for row in db.execute("SELECT jobq.retry_failed(ids => %s) AS id", ([ids[2], ids[0]],))
    ]

    assert redriven == [ids[0], ids[2]]
    assert [job(db, job_id)["status"] for job_id in ids] == ["queued", "failed", "queued"]


def test_retry_failed_combines_the_queue_and_ids_filters(db: Db) -> None:
    mine, _ = failed_job(db, "mine")
    theirs, _ = failed_job(db, "theirs")

    redriven = db.execute("SELECT jobq.retry_failed('mine', %s) AS id", ([mine, theirs],)).fetchall()

    assert [row["id"] for row in redriven] == [mine]
    assert job(db, theirs)["status"] == "failed"


def test_retry_failed_leaves_jobs_that_are_not_failed_alone(db: Db) -> None:
    done, running, queued = (enqueue(db) for _ in range(3))
    claimed = db.execute("SELECT id, lease FROM jobq.claim('default', 2, 'w1')").fetchall()
    assert [row["id"] for row in claimed] == [done, running]
    db.execute("SELECT jobq.complete(%s, %s)", (done, claimed[0]["lease"]))
    before = table_fingerprint(db)

    redriven = db.execute("SELECT jobq.retry_failed(ids => %s)", ([done, running, queued],)).fetchall()

    assert redriven == []
    assert table_fingerprint(db) == before


def test_retry_failed_keeps_the_lease_counter_so_an_old_lease_stays_refused(db: Db) -> None:
    job_id, old_lease = failed_job(db)
    db.execute("SELECT jobq.retry_failed()")

    new_lease = claim_one(db)["lease"]

    assert new_lease > old_lease
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.complete(%s, %s)", (job_id, old_lease))
    assert raised.value.sqlstate == "JQ001"
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, new_lease))
    assert job(db, job_id)["status"] == "done"


def test_retry_failed_with_nothing_failed_returns_no_ids(db: Db) -> None:
    enqueue(db)

    assert db.execute("SELECT jobq.retry_failed()").fetchall() == []


# -- stats ------------------------------------------------------------------


def test_stats_counts_the_jobs_of_each_queue_by_status(db: Db) -> None:
    to_fail = enqueue(db, "alpha", max_attempts=1)
    to_finish = enqueue(db, "alpha")
    enqueue(db, "alpha")  # stays running
    enqueue(db, "alpha")  # stays queued
    scalar(db, "SELECT jobq.enqueue('alpha', '{}', run_at => now() + interval '1 hour')")
    enqueue(db, "beta")
    leases = {
        row["id"]: row["lease"] for row in db.execute("SELECT id, lease FROM jobq.claim('alpha', 3, 'w1')")
    }
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (to_fail, leases[to_fail]))
    db.execute("SELECT jobq.complete(%s, %s)", (to_finish, leases[to_finish]))

    rows = db.execute(
        "SELECT queue, queued, runnable, running, done, failed, oldest_queued_age IS NOT NULL AS waiting"
        " FROM jobq.stats()"
    ).fetchall()

    assert rows == [
        {"queue": "alpha", "queued": 2, "runnable": 1, "running": 1, "done": 1, "failed": 1, "waiting": True},
        {"queue": "beta", "queued": 1, "runnable": 1, "running": 0, "done": 0, "failed": 0, "waiting": True},
    ]


def test_stats_measures_the_wait_of_the_oldest_runnable_job(db: Db) -> None:
    scalar(db, "SELECT jobq.enqueue('alpha', '{}', run_at => now() - interval '5 minutes')")
    scalar(db, "SELECT jobq.enqueue('alpha', '{}', run_at => now() - interval '1 minute')")

    waited = scalar(
        db,
        "SELECT oldest_queued_age BETWEEN interval '5 minutes' AND interval '6 minutes' FROM jobq.stats()",
    )

    assert waited is True


def test_stats_has_no_wait_when_no_queued_job_is_runnable(db: Db) -> None:
    scalar(db, "SELECT jobq.enqueue('alpha', '{}', run_at => now() + interval '1 hour')")
    job_id = enqueue(db, "alpha")
    claim_one(db, "alpha")
    assert job(db, job_id)["status"] == "running"

    row = db.execute("SELECT queued, runnable, oldest_queued_age FROM jobq.stats()").fetchone()

    assert row == {"queued": 1, "runnable": 0, "oldest_queued_age": None}


def test_stats_of_an_empty_queue_table_has_no_rows(db: Db) -> None:
    assert db.execute("SELECT * FROM jobq.stats()").fetchall() == []
