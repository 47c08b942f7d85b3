"""A user's table with a foreign key to jobq.jobs(id): never in the queue's way; purge keeps what it names.

The common case: a row of the application's (an invoice, an upload) names the job that handles it.  A
foreign key without ON DELETE keeps a job its rows reference from being deleted; it must never block a
claim or a settlement, which update jobs but never their id (FOR NO KEY UPDATE, which a referencing
row's FOR KEY SHARE lets through).  Each settlement runs while another session has inserted a
referencing row and not committed (so it holds FOR KEY SHARE on the job), with a lock_timeout that
turns a wait into an error.  jobq.purge (and retention, through jobq._delete_jobs) deletes the jobs it
can and keeps the referenced ones; ON DELETE CASCADE and SET NULL act as declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, make_stale, row_digest, scalar, statuses


def referenced_by(db: Db, on_delete: str = "", deferrable: str = "") -> None:
    """The application's table, invoices, whose job_id references jobq.jobs(id) with these clauses."""
    db.execute(
        f"CREATE TABLE invoices (id serial PRIMARY KEY, job_id bigint"
        f" CONSTRAINT invoices_job_fkey REFERENCES jobq.jobs (id) {on_delete} {deferrable})"
    )


@pytest.fixture
def invoices(db: Db) -> Iterator[None]:
    referenced_by(db)
    yield
    db.execute("DROP TABLE invoices")


@pytest.fixture
def held(connect: Connect) -> Iterator[Callable[[int], None]]:
    """Inserts a row referencing a job in a transaction of another session, left open to the end."""
    other = connect(autocommit=False)

    def hold(job_id: int) -> None:
        other.execute("INSERT INTO invoices (job_id) VALUES (%s)", (job_id,))

    yield hold
    other.rollback()


def running(db: Db, **options: Any) -> dict[str, Any]:
    enqueue(db, **options)
    return claim_one(db)


# Each settlement, given a running job's id and lease; each changes the job's row.
SETTLEMENTS: dict[str, str] = {
    "complete": "SELECT jobq.complete(%(id)s, %(lease)s)",
    "complete_many": "SELECT * FROM jobq.complete_many(ARRAY[%(id)s]::bigint[], ARRAY[%(lease)s]::bigint[])",
    "complete_and_claim": "SELECT * FROM jobq.complete_and_claim(ARRAY[%(id)s]::bigint[],"
    " ARRAY[%(lease)s]::bigint[], 'default', 1, 'w1')",
    "fail": "SELECT * FROM jobq.fail(%(id)s, 'boom', %(lease)s)",
    "fail_for_good": "SELECT * FROM jobq.fail(%(id)s, 'boom', %(lease)s, NULL, false)",
    "snooze": "SELECT jobq.snooze(%(id)s, %(lease)s, '1 minute')",
    "hand_back": "SELECT jobq.hand_back(%(id)s, %(lease)s, '1 minute', 'unknown task', '1 day')",
    "heartbeat": "SELECT jobq.heartbeat(%(id)s, %(lease)s)",
    "release": "SELECT jobq.release(%(id)s, %(lease)s)",
    "cancel_running": "SELECT * FROM jobq.cancel(ARRAY[%(id)s]::bigint[])",
    "cancel_forced": "SELECT * FROM jobq.cancel(ARRAY[%(id)s]::bigint[], force => true)",
}


@pytest.mark.parametrize("call", SETTLEMENTS.values(), ids=SETTLEMENTS.keys())
def test_a_settlement_is_not_blocked_by_a_referencing_row_in_flight(
    db: Db, invoices: None, held: Callable[[int], None], call: str
) -> None:
    claimed = running(db)
    held(claimed["id"])
    before = row_digest(db, claimed["id"])
    db.execute("SET lock_timeout = '5s'")  # a wait for the referencing row's lock would fail, not hang

    db.execute(call, {"id": claimed["id"], "lease": claimed["lease"]})

    assert row_digest(db, claimed["id"]) != before


def test_a_claim_takes_a_job_whose_referencing_row_is_in_flight(
    db: Db, invoices: None, held: Callable[[int], None]
) -> None:
    job_id = enqueue(db)
    held(job_id)
    db.execute("SET lock_timeout = '5s'")

    assert claim_one(db)["id"] == job_id


def test_reap_recovers_a_job_whose_referencing_row_is_in_flight(
    db: Db, invoices: None, held: Callable[[int], None]
) -> None:
    claimed = running(db)
    held(claimed["id"])
    make_stale(db, claimed["id"], "2 hours")
    db.execute("SET lock_timeout = '5s'")

    reaped = db.execute("SELECT id FROM jobq.reap()").fetchall()

    assert reaped == [{"id": claimed["id"]}]


def test_cancelling_a_queued_job_and_redriving_a_failed_one_are_not_blocked(
    db: Db, invoices: None, held: Callable[[int], None]
) -> None:
    queued = enqueue(db, priority=-1)
    failed = running(db, max_attempts=1)
    db.execute("SELECT * FROM jobq.fail(%s, 'boom', %s)", (failed["id"], failed["lease"]))
    held(queued)
    held(failed["id"])
    db.execute("SET lock_timeout = '5s'")

    cancelled = db.execute("SELECT id, status FROM jobq.cancel(ARRAY[%s]::bigint[])", (queued,)).fetchall()
    redriven = db.execute("SELECT * FROM jobq.retry_failed('default')").fetchall()

    assert (cancelled, len(redriven)) == ([{"id": queued, "status": "cancelled"}], 1)


def finished(db: Db, count: int) -> list[int]:
    """count jobs, done with a result and finished a day ago, oldest first."""
    ids = [enqueue(db) for _ in range(count)]
    for _ in ids:
        claimed = claim_one(db)
        db.execute(
            "SELECT jobq.complete(%s, %s, result => '{\"ok\": true}')", (claimed["id"], claimed["lease"])
        )
    db.execute("UPDATE jobq.jobs SET finished_at = finished_at - interval '1 day'")
    return ids


def test_purge_keeps_the_job_a_row_references_and_deletes_the_others(db: Db, invoices: None) -> None:
    ids = finished(db, 5)
    db.execute("INSERT INTO invoices (job_id) VALUES (%s)", (ids[2],))

    purged = scalar(db, "SELECT jobq.purge('1 hour')")

    assert purged == 4
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.jobs")] == [ids[2]]
    assert scalar(db, "SELECT result FROM jobq.job(%s)", (ids[2],)) == {"ok": True}


def test_delete_jobs_finds_each_referenced_job_among_many(db: Db, invoices: None) -> None:
    ids = finished(db, 40)
    kept = [ids[0], ids[17], ids[18], ids[39]]
    db.execute("INSERT INTO invoices (job_id) SELECT unnest(%s::bigint[])", (kept,))

    with db.transaction():
        locked = [row["id"] for row in db.execute("SELECT id FROM jobq.jobs ORDER BY id FOR UPDATE")]
        deleted = scalar(db, "SELECT jobq._delete_jobs(%s)", (locked,))

    assert deleted == 36
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.jobs ORDER BY id")] == kept
    assert scalar(db, "SELECT count(*) FROM jobq.results") == 4


def test_purge_of_a_referenced_job_only_deletes_nothing_and_fails_nothing(db: Db, invoices: None) -> None:
    (job_id,) = finished(db, 1)
    db.execute("INSERT INTO invoices (job_id) VALUES (%s)", (job_id,))

    assert scalar(db, "SELECT jobq.purge('1 hour')") == 0
    assert statuses(db) == {"done": 1}


@pytest.mark.parametrize(
    ("on_delete", "left"),
    [("ON DELETE CASCADE", []), ("ON DELETE SET NULL", [None])],
    ids=["cascade", "set-null"],
)
def test_purge_deletes_a_job_whose_foreign_key_cascades_or_sets_null_as_declared(
    db: Db, on_delete: str, left: list[int | None]
) -> None:
    referenced_by(db, on_delete)
    (job_id,) = finished(db, 1)
    db.execute("INSERT INTO invoices (job_id) VALUES (%s)", (job_id,))

    purged = scalar(db, "SELECT jobq.purge('1 hour')")

    assert purged == 1
    assert [row["job_id"] for row in db.execute("SELECT job_id FROM invoices")] == left


def test_purge_keeps_a_job_a_deferred_foreign_key_references_and_the_commit_succeeds(db: Db) -> None:
    referenced_by(db, deferrable="DEFERRABLE INITIALLY DEFERRED")
    ids = finished(db, 2)
    db.execute("INSERT INTO invoices (job_id) VALUES (%s)", (ids[0],))

    with db.transaction():  # the commit would check the deferred key, were it left to the commit
        purged = scalar(db, "SELECT jobq.purge('1 hour')")

    assert purged == 1
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.jobs")] == [ids[0]]


def test_a_deferred_foreign_key_stays_deferred_after_purge(db: Db) -> None:
    referenced_by(db, deferrable="DEFERRABLE INITIALLY DEFERRED")
    finished(db, 1)

    with db.transaction(force_rollback=True):
        db.execute("SELECT jobq.purge('1 hour')")
        # checked at the commit, as declared: a row naming a job that does not exist gets in until then
        db.execute("INSERT INTO invoices (job_id) VALUES (%s)", (2**62,))
        inserted = scalar(db, "SELECT count(*) FROM invoices")

    assert inserted == 1
