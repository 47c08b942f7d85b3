"""jobq.claim: which jobs it takes, in which order, what it changes, and how it behaves concurrently."""

from __future__ import annotations

import time
from typing import Any

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, job, make_runnable, scalar


def enqueue_for_ordering(db: Db) -> None:
    """Four jobs named by payload; in one transaction, so now() is the same for all of them."""
    with db.transaction():
        for name, priority, age in [
            ("old-low", 0, "10 s"),
            ("recent-high", 5, "1 s"),
            ("oldest-low", 0, "20 s"),
            ("old-low-later-id", 0, "10 s"),
        ]:
            db.execute(
                "SELECT jobq.enqueue('default', jsonb_build_object('name', %s::text), priority => %s,"
                " run_at => now() - %s::interval)",
                (name, priority, age),
            )


CLAIM_ORDER = ["recent-high", "oldest-low", "old-low", "old-low-later-id"]


def test_claim_takes_higher_priority_first_then_earlier_run_at_then_lower_id(db: Db) -> None:
    enqueue_for_ordering(db)

    claimed = [claim_one(db)["payload"]["name"] for _ in CLAIM_ORDER]

    assert claimed == CLAIM_ORDER


def test_claim_of_several_jobs_returns_them_in_claim_order(db: Db) -> None:
    enqueue_for_ordering(db)

    rows = db.execute("SELECT payload->>'name' AS name FROM jobq.claim('default', 10, 'w1')").fetchall()

    assert [row["name"] for row in rows] == CLAIM_ORDER


def test_claim_never_takes_a_job_whose_run_at_is_in_the_future(db: Db) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('default', '{}', run_at => now() + interval '1 hour')")

    claimed = db.execute("SELECT * FROM jobq.claim('default', 10, 'w1')").fetchall()

    assert claimed == []
    assert job(db, job_id)["status"] == "queued"


def test_claim_takes_a_delayed_job_once_it_is_due(db: Db) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('default', '{}', run_at => now() + interval '0.5 s')")
    assert db.execute("SELECT * FROM jobq.claim('default', 1, 'w1')").fetchall() == []

    claimed: list[dict[str, Any]] = []
    deadline = time.monotonic() + 3
    while not claimed and time.monotonic() < deadline:
        time.sleep(0.1)
        claimed = db.execute(
            "SELECT id, locked_at >= run_at AS due FROM jobq.claim('default', 1, 'w1')"
        ).fetchall()

    assert claimed == [{"id": job_id, "due": True}]


def test_claim_takes_a_job_whose_run_at_is_in_the_past(db: Db) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('default', '{}', run_at => now() - interval '1 day')")

    assert claim_one(db)["id"] == job_id


def test_claim_takes_at_most_n_jobs(db: Db) -> None:
    for _ in range(5):
        enqueue(db)

    claimed = db.execute("SELECT * FROM jobq.claim('default', 3, 'w1')").fetchall()

    assert len(claimed) == 3
    counts = db.execute(
        "SELECT status, count(*) AS jobs FROM jobq.jobs GROUP BY status ORDER BY status"
    ).fetchall()
    assert counts == [{"status": "queued", "jobs": 2}, {"status": "running", "jobs": 3}]


def test_claim_takes_only_jobs_of_its_own_queue(db: Db) -> None:
    mine = {enqueue(db, "mine") for _ in range(3)}
    theirs = {enqueue(db, "theirs") for _ in range(3)}

    claimed = {row["id"] for row in db.execute("SELECT id FROM jobq.claim('mine', 10, 'w1')")}

    assert claimed == mine
    statuses = db.execute(
        "SELECT DISTINCT status FROM jobq.jobs WHERE id = ANY(%s)", (list(theirs),)
    ).fetchall()
    assert statuses == [{"status": "queued"}]


def test_claim_skips_jobs_that_are_already_running_done_or_failed(db: Db) -> None:
    running = enqueue(db)
    done = enqueue(db)
    failed = enqueue(db, max_attempts=1)
    for _ in range(3):
        claim_one(db)
    db.execute("SELECT jobq.complete(%s, 1)", (done,))
    db.execute("SELECT jobq.fail(%s, 'boom', 1)", (failed,))
    assert [job(db, i)["status"] for i in (running, done, failed)] == ["running", "done", "failed"]

    assert db.execute("SELECT * FROM jobq.claim('default', 10, 'w2')").fetchall() == []


def test_claim_marks_the_job_running_for_the_worker_with_a_new_attempt_and_lease(db: Db) -> None:
    job_id = enqueue(db)

    claimed = db.execute(
        """
        SELECT c.status, c.locked_by, c.attempts, c.lease,
               c.locked_at = statement_timestamp() AS locked_now
          FROM jobq.claim('default', 1, 'worker-7') AS c
        """
    ).fetchall()

    expected = {"status": "running", "locked_by": "worker-7", "attempts": 1, "lease": 1, "locked_now": True}
    assert claimed == [expected]
    stored = job(db, job_id)
    assert {key: stored[key] for key in ("status", "locked_by", "attempts", "lease")} == {
        "status": "running",
        "locked_by": "worker-7",
        "attempts": 1,
        "lease": 1,
    }


def test_claim_returns_the_rows_as_stored(db: Db) -> None:
    job_id = enqueue(db, "default", {"k": "v"}, priority=3)

    claimed = claim_one(db)

    assert claimed == job(db, job_id)


def test_every_claim_gives_a_new_larger_lease(db: Db) -> None:
    job_id = enqueue(db)
    first = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, first["lease"]))
    make_runnable(db, job_id)

    second = claim_one(db)

    assert second["id"] == job_id
    assert second["lease"] > first["lease"]
    assert second["attempts"] == first["attempts"] + 1


def test_concurrent_claims_take_disjoint_jobs_without_waiting(db: Db, connect: Connect) -> None:
    for _ in range(10):
        enqueue(db)
    holder = connect(autocommit=False)
    held = {row[0] for row in holder.execute("SELECT id FROM jobq.claim('default', 4, 'holder')")}
    other = connect(autocommit=False)
    other.execute("SET lock_timeout = '2s'")  # waiting on the holder's locks would fail, not hang

    taken = {row[0] for row in other.execute("SELECT id FROM jobq.claim('default', 4, 'other')")}
    other.commit()

    assert len(held) == 4
    assert len(taken) == 4
    assert held.isdisjoint(taken)


def test_a_claim_skips_jobs_locked_by_an_open_claim_and_leaves_the_rest(db: Db, connect: Connect) -> None:
    for _ in range(3):
        enqueue(db)
    holder = connect(autocommit=False)
    held = {row[0] for row in holder.execute("SELECT id FROM jobq.claim('default', 2, 'holder')")}

    rest = {row["id"] for row in db.execute("SELECT id FROM jobq.claim('default', 10, 'other')")}

    assert len(held) == 2
    assert len(rest) == 1
    assert held.isdisjoint(rest)


def test_locked_at_comes_from_the_statement_clock_not_the_transaction_clock(connect: Connect) -> None:
    worker = connect(autocommit=False)
    enqueue(worker)
    worker.commit()
    worker.execute("SELECT pg_sleep(1)")  # opens the transaction: now() is fixed from here

    locked_late = scalar(
        worker, "SELECT locked_at > now() + interval '0.75 s' FROM jobq.claim('default', 1, 'w1')"
    )

    assert locked_late is True
