"""jobq.pause and jobq.resume: a paused queue hands out no job until resumed; nothing else changes."""

from __future__ import annotations

from helpers.sqlhelpers import (
    Connect,
    Db,
    claim_one,
    enqueue,
    listen_to_queues,
    notifications_before_marker,
    record_notices,
    scalar,
)


def claimed_ids(db: Db, queue: str = "default") -> list[int]:
    return [row["id"] for row in db.execute("SELECT id FROM jobq.claim(%s, 10, 'w1')", (queue,))]


def test_a_paused_queue_hands_out_none_of_its_jobs(db: Db) -> None:
    enqueue(db)
    db.execute("SELECT jobq.pause('default')")

    assert claimed_ids(db) == []
    assert scalar(db, "SELECT status FROM jobq.jobs") == "queued"


def test_complete_and_claim_claims_nothing_from_a_paused_queue_but_still_acknowledges(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    enqueue(db)
    db.execute("SELECT jobq.pause('default')")

    rows = db.execute(
        "SELECT id, status FROM jobq.complete_and_claim(%s, %s, 'default', 5, 'w1')", ([job_id], [lease])
    ).fetchall()

    assert rows == [{"id": job_id, "status": "done"}]


def test_pausing_one_queue_leaves_the_others_claimable(db: Db) -> None:
    enqueue(db, "default")
    other = enqueue(db, "other")
    db.execute("SELECT jobq.pause('default')")

    assert claimed_ids(db, "other") == [other]


def test_enqueue_into_a_paused_queue_still_works(db: Db) -> None:
    db.execute("SELECT jobq.pause('default')")

    job_id = enqueue(db)
    ids = scalar(db, "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[])")

    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'queued'") == 3
    assert job_id not in ids


def test_running_jobs_of_a_paused_queue_can_still_complete(db: Db) -> None:
    job_id = enqueue(db)
    lease = claim_one(db)["lease"]
    db.execute("SELECT jobq.pause('default')")

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert scalar(db, "SELECT status FROM jobq.jobs") == "done"


def test_a_pause_is_stored_and_a_new_connection_sees_the_queue_paused(db: Db, connect: Connect) -> None:
    enqueue(db)
    db.execute("SELECT jobq.pause('default')")
    fresh = connect()

    assert fresh.execute("SELECT id FROM jobq.claim('default', 1, 'w2')").fetchall() == []
    assert scalar(fresh, "SELECT paused FROM jobq.queue_settings WHERE queue = 'default'") is True
    assert scalar(fresh, "SELECT paused FROM jobq.queues WHERE queue = 'default'") is True


def test_an_uncommitted_pause_does_not_stop_other_sessions_claims(db: Db, connect: Connect) -> None:
    job_id = enqueue(db)
    admin = connect(autocommit=False)
    admin.execute("SELECT jobq.pause('default')")

    assert claimed_ids(db) == [job_id]
    admin.rollback()


def test_pausing_twice_then_resuming_once_resumes(db: Db) -> None:
    job_id = enqueue(db)
    db.execute("SELECT jobq.pause('default')")
    db.execute("SELECT jobq.pause('default')")

    db.execute("SELECT jobq.resume('default')")

    assert claimed_ids(db) == [job_id]


def test_resume_makes_the_jobs_claimable_again(db: Db) -> None:
    job_id = enqueue(db)
    db.execute("SELECT jobq.pause('default')")

    db.execute("SELECT jobq.resume('default')")

    assert claimed_ids(db) == [job_id]
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'default'") is False


def test_resume_notifies_the_queue_channel(db: Db, connect: Connect) -> None:
    enqueue(db)
    db.execute("SELECT jobq.pause('default')")
    ears = connect()
    listen_to_queues(ears, ["default"])

    db.execute("SELECT jobq.resume('default')")

    assert notifications_before_marker(ears, db) == [("jobq_default", "")]


def test_pause_notifies_nobody(db: Db, connect: Connect) -> None:
    ears = connect()
    listen_to_queues(ears, ["default"])

    db.execute("SELECT jobq.pause('default')")

    assert notifications_before_marker(ears, db) == []


def test_resume_of_a_queue_never_paused_changes_nothing(db: Db) -> None:
    db.execute("SELECT jobq.resume('default')")

    assert scalar(db, "SELECT count(*) FROM jobq.queue_settings") == 0


def test_pausing_a_queue_that_never_existed_pauses_it_and_says_so(db: Db) -> None:
    notices = record_notices(db)

    db.execute("SELECT jobq.pause('reports')")
    enqueue(db, "reports")

    assert claimed_ids(db, "reports") == []
    assert notices == ["queue 'reports' has no settings, jobs or schedules yet: paused all the same"]


def test_pausing_a_queue_known_by_its_finished_jobs_alone_says_nothing(db: Db) -> None:
    enqueue(db, "reports")
    claimed = claim_one(db, "reports")
    db.execute("SELECT jobq.complete(%s, %s)", (claimed["id"], claimed["lease"]))
    notices = record_notices(db)

    db.execute("SELECT jobq.pause('reports')")

    assert notices == []


def test_pausing_the_queue_of_a_schedule_before_its_first_job_says_nothing(db: Db) -> None:
    db.execute("SELECT * FROM jobq.schedule('nightly', 'reports', every => '1 day')")
    notices = record_notices(db)

    db.execute("SELECT jobq.pause('reports')")

    assert notices == []
