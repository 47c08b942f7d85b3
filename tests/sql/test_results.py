"""Results and following a job: complete(result), complete_many and complete_and_claim (results), job, wait
and watch with the "jobq.done" notification."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import (
    Connect,
    Db,
    claim_one,
    enqueue,
    jobs_snapshot,
    listen_to_queues,
    make_runnable,
    notifications_before_marker,
    scalar,
)

OVER_1_MIB = {"data": "x" * (1024 * 1024 + 1)}


def running(db: Db, **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, **options)
    claimed = claim_one(db)
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def state(db: Db, job_id: int) -> dict[str, Any]:
    """jobq.job(id), as a dict."""
    row = db.execute("SELECT * FROM jobq.job(%s)", (job_id,)).fetchone()
    assert row is not None
    return row


def sqlstate_of(db: Db, query: str, params: Any = None) -> str | None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(query, params)
    return raised.value.sqlstate


def done_listener(connect: Connect) -> psycopg.Connection[Any]:
    """An autocommit connection listening on "jobq.done" (and the marker channel)."""
    ears = connect()
    listen_to_queues(ears, [])
    ears.execute(sql.SQL("LISTEN {}").format(sql.Identifier("jobq.done")))
    return ears


# -- complete(result) --------------------------------------------------------------------------------------


def test_complete_stores_the_result_and_job_returns_it(db: Db) -> None:
    job_id, lease = running(db)

    db.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb({"rows": 12})))

    found = state(db, job_id)
    assert (found["status"], found["result"]) == ("done", {"rows": 12})


@pytest.mark.parametrize(
    "result",
    ["a string", 42, 2.5, [1, "two", None], True, None],
    ids=["string", "integer", "float", "array", "boolean", "json-null"],
)
def test_a_result_may_be_any_json_value(db: Db, result: Any) -> None:
    job_id, lease = running(db)

    db.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb(result)))

    assert scalar(db, "SELECT (jobq.job(%s)).result = %s", (job_id, Jsonb(result))) is True


def test_complete_without_a_result_stores_none(db: Db) -> None:
    job_id, lease = running(db)

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert scalar(db, "SELECT (jobq.job(%s)).result IS NULL", (job_id,)) is True


def test_a_repeated_complete_does_not_overwrite_the_result(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb("first")))

    db.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb("second")))
    db.execute("SELECT jobq.complete_many(%s, %s, %s)", ([job_id], [lease], [Jsonb("third")]))

    assert state(db, job_id)["result"] == "first"


def test_complete_refuses_a_result_over_1_mib_with_54000_and_changes_nothing(db: Db) -> None:
    job_id, lease = running(db)
    before = jobs_snapshot(db)

    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb(OVER_1_MIB))) == "54000"
    assert jobs_snapshot(db) == before


def test_complete_measures_a_result_read_from_a_table_uncompressed(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("CREATE TABLE outputs (body jsonb)")
    db.execute("INSERT INTO outputs SELECT jsonb_build_object('data', repeat('x', 3000000))")
    assert scalar(db, "SELECT pg_column_size(body) < 1048576 FROM outputs") is True  # stored compressed
    before = jobs_snapshot(db)

    assert sqlstate_of(db, "SELECT jobq.complete(%s, %s, body) FROM outputs", (job_id, lease)) == "54000"
    assert jobs_snapshot(db) == before


# -- complete_many and complete_and_claim with results ----------------------------------------------------


def test_complete_many_stores_the_results_aligned_with_the_ids_null_meaning_none(db: Db) -> None:
    jobs = [running(db) for _ in range(3)]
    ids, leases = [j for j, _ in jobs], [lease for _, lease in jobs]

    done = db.execute(
        "SELECT * FROM jobq.complete_many(%s, %s, ARRAY[%s, NULL, %s]::jsonb[])",
        (ids, leases, Jsonb("a"), Jsonb([3])),
    ).fetchall()

    assert [row["complete_many"] for row in done] == ids
    assert [state(db, job_id)["result"] for job_id in ids] == ["a", None, [3]]


def test_complete_and_claim_stores_the_results_aligned_with_the_ids(db: Db) -> None:
    first, second = running(db), running(db)
    enqueue(db)

    rows = db.execute(
        "SELECT id, status FROM jobq.complete_and_claim(%s, %s, 'default', 1, 'w1', results => %s)",
        ([first[0], second[0]], [first[1], second[1]], [None, Jsonb({"ok": True})]),
    ).fetchall()

    assert [row["status"] for row in rows] == ["done", "done", "running"]
    assert [state(db, row["id"])["result"] for row in rows] == [None, {"ok": True}, None]


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM jobq.complete_many(%s, %s, %s)",
        "SELECT * FROM jobq.complete_and_claim(%s, %s, 'default', 1, 'w1', results => %s)",
    ],
    ids=["complete_many", "complete_and_claim"],
)
@pytest.mark.parametrize("results", [1, 3], ids=["shorter", "longer"])
def test_results_of_another_length_than_ids_are_refused_with_22023_and_change_nothing(
    db: Db, call: str, results: int
) -> None:
    jobs = [running(db) for _ in range(2)]
    enqueue(db)
    before = jobs_snapshot(db)

    args = ([j for j, _ in jobs], [lease for _, lease in jobs], [Jsonb(n) for n in range(results)])
    with pytest.raises(psycopg.Error) as raised:
        db.execute(call, args)

    assert raised.value.sqlstate == "22023"
    assert "results" in (raised.value.diag.message_primary or "")
    assert jobs_snapshot(db) == before


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM jobq.complete_many(%s, %s, %s)",
        "SELECT * FROM jobq.complete_and_claim(%s, %s, 'default', 1, 'w1', results => %s)",
    ],
    ids=["complete_many", "complete_and_claim"],
)
def test_a_result_over_1_mib_in_a_batch_is_refused_with_54000_naming_it_and_changes_nothing(
    db: Db, call: str
) -> None:
    jobs = [running(db) for _ in range(2)]
    enqueue(db)
    before = jobs_snapshot(db)

    args = ([j for j, _ in jobs], [lease for _, lease in jobs], [Jsonb("small"), Jsonb(OVER_1_MIB)])
    with pytest.raises(psycopg.Error) as raised:
        db.execute(call, args)

    assert raised.value.sqlstate == "54000"
    assert "results[2]" in (raised.value.diag.message_primary or "")
    assert jobs_snapshot(db) == before


# -- job ---------------------------------------------------------------------------------------------------


def test_job_returns_the_public_state_of_a_job(db: Db) -> None:
    job_id, lease = running(db, max_attempts=4)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))

    found = state(db, job_id)

    assert {k: found[k] for k in ("id", "queue", "status", "attempts", "max_attempts", "last_error")} == {
        "id": job_id,
        "queue": "default",
        "status": "queued",
        "attempts": 1,
        "max_attempts": 4,
        "last_error": "boom",
    }
    assert (found["result"], found["finished_at"], found["cancel_requested"]) == (None, None, False)


def test_job_fills_in_the_default_max_attempts_of_a_job_never_claimed(db: Db) -> None:
    job_id = enqueue(db)

    assert state(db, job_id)["max_attempts"] == 3


def test_job_of_an_unknown_id_raises_jq002(db: Db) -> None:
    job_id = enqueue(db)

    assert sqlstate_of(db, "SELECT * FROM jobq.job(%s)", (job_id + 1000,)) == "JQ002"


# -- wait(id, timeout) -------------------------------------------------------------------------------------


def test_wait_returns_the_state_once_another_session_completes_the_job(db: Db, connect: Connect) -> None:
    job_id, lease = running(db)
    worker = connect()
    waiting = threading.Event()

    def complete_soon() -> None:
        waiting.wait(10)
        worker.execute("SELECT pg_sleep(0.3)")
        worker.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb("finished")))

    thread = threading.Thread(target=complete_soon)
    thread.start()
    try:
        waiting.set()
        row = db.execute("SELECT * FROM jobq.wait(%s, '30 seconds')", (job_id,)).fetchone()
    finally:
        thread.join(30)

    assert row is not None
    assert (row["id"], row["status"], row["result"]) == (job_id, "done", "finished")


@pytest.mark.parametrize("how", ["failed", "cancelled"])
def test_wait_returns_the_state_of_a_job_that_failed_or_was_cancelled(db: Db, how: str) -> None:
    job_id, lease = running(db, max_attempts=1)
    if how == "failed":
        db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    else:
        db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[], force => true)", (job_id,))

    row = db.execute("SELECT status FROM jobq.wait(%s, '0 s')", (job_id,)).fetchone()

    assert row == {"status": how}


def test_wait_returns_null_at_the_timeout_when_the_job_is_not_finished(db: Db) -> None:
    job_id, _ = running(db)

    assert scalar(db, "SELECT jobq.wait(%s, '200 milliseconds') IS NULL", (job_id,)) is True


@pytest.mark.parametrize(
    ("timeout", "sqlstate"),
    [("61 seconds", "22023"), ("1 hour", "22023"), ("-1 second", "22023"), (None, "22004")],
)
def test_wait_refuses_a_timeout_outside_0_to_60_seconds(db: Db, timeout: str | None, sqlstate: str) -> None:
    job_id = enqueue(db)

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.wait(%s, %s::interval)", (job_id, timeout))

    assert raised.value.sqlstate == sqlstate
    assert "timeout" in (raised.value.diag.message_primary or "")


def test_wait_of_an_unknown_id_raises_jq002(db: Db) -> None:
    assert sqlstate_of(db, "SELECT jobq.wait(%s, '1 s')", (12345,)) == "JQ002"


# -- watch and "jobq.done" ---------------------------------------------------------------------------------


def test_watch_returns_the_current_state_and_marks_the_job_watched(db: Db) -> None:
    job_id, _ = running(db)

    row = db.execute("SELECT id, status FROM jobq.watch(%s)", (job_id,)).fetchone()

    assert row == {"id": job_id, "status": "running"}
    assert (
        scalar(db, "SELECT control & 2 = 2 FROM jobq.jobs WHERE id = %s", (job_id,)) is True
    )  # bit 2: watched


def test_a_watched_job_that_completes_sends_one_notification_with_its_id(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))  # a repeat

    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_watched_job_notifies_when_it_fails_for_good_not_when_it_is_retried(
    db: Db, connect: Connect
) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db, max_attempts=2)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    assert notifications_before_marker(ears, db) == []

    make_runnable(db, job_id)
    lease = claim_one(db)["lease"]
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_watched_queued_job_that_is_cancelled_notifies(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id = enqueue(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_watched_job_completed_by_complete_many_notifies(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT * FROM jobq.complete_many(%s, %s)", ([job_id], [lease]))

    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_watched_running_job_force_cancelled_notifies(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, _ = running(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[], force => true)", (job_id,))

    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_watched_job_sends_nothing_while_it_heartbeats_or_is_asked_to_cancel(
    db: Db, connect: Connect
) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.heartbeat(%s, %s)", (job_id, lease))
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert notifications_before_marker(ears, db) == []


EXPIRE = "UPDATE jobq.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %(id)s"

# Every way a running job (id, lease) of max_attempts 1 ends: each must notify a watcher once.
FINISHES = {
    "complete": ["SELECT jobq.complete(%(id)s, %(lease)s)"],
    "complete_many": ["SELECT jobq.complete_many(ARRAY[%(id)s], ARRAY[%(lease)s])"],
    "complete_and_claim": [
        "SELECT * FROM jobq.complete_and_claim(ARRAY[%(id)s], ARRAY[%(lease)s], 'default', 1, 'w1')"
    ],
    "fail-for-good": ["SELECT jobq.fail(%(id)s, 'boom', %(lease)s)"],
    "reap-for-good": [EXPIRE, "SELECT jobq.reap()"],
    "force-cancel": ["SELECT jobq.cancel(ARRAY[%(id)s], force => true)"],
    **{
        f"cancel-request-then-{name}": ["SELECT jobq.cancel(ARRAY[%(id)s])", *calls]
        for name, calls in {
            "fail": ["SELECT jobq.fail(%(id)s, 'stopped', %(lease)s)"],
            "release": ["SELECT jobq.release(%(id)s, %(lease)s)"],
            "snooze": ["SELECT jobq.snooze(%(id)s, %(lease)s, '1 minute')"],
            "complete": ["SELECT jobq.complete(%(id)s, %(lease)s)"],
            "reap": [EXPIRE, "SELECT jobq.reap()"],
        }.items()
    },
}

# Every way a running job (id, lease) of max_attempts 3 goes back to queued: none may notify.
REQUEUES = {
    "fail-with-retries-left": ["SELECT jobq.fail(%(id)s, 'boom', %(lease)s)"],
    "reap-with-retries-left": [EXPIRE, "SELECT jobq.reap()"],
    "snooze": ["SELECT jobq.snooze(%(id)s, %(lease)s, '1 minute')"],
    "release": ["SELECT jobq.release(%(id)s, %(lease)s)"],
}


@pytest.mark.parametrize("finish", FINISHES.values(), ids=FINISHES.keys())
def test_every_way_a_watched_job_finishes_sends_one_notification(
    db: Db, connect: Connect, finish: list[str]
) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db, max_attempts=1)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    for statement in finish:
        db.execute(statement, {"id": job_id, "lease": lease})

    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) != "running"
    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


@pytest.mark.parametrize("requeue", REQUEUES.values(), ids=REQUEUES.keys())
def test_a_watched_job_going_back_to_queued_sends_nothing(
    db: Db, connect: Connect, requeue: list[str]
) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db, max_attempts=3)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    for statement in requeue:
        db.execute(statement, {"id": job_id, "lease": lease})

    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "queued"
    assert notifications_before_marker(ears, db) == []


def test_watching_a_job_asked_to_cancel_keeps_the_request(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db, max_attempts=3)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert db.execute("SELECT cancel_requested FROM jobq.watch(%s)", (job_id,)).fetchone() == {
        "cancel_requested": True
    }
    status = scalar(db, "SELECT status FROM jobq.fail(%s, 'stopped', %s)", (job_id, lease))

    assert status == "cancelled"
    assert notifications_before_marker(ears, db) == [("jobq.done", str(job_id))]


def test_a_direct_update_of_a_watched_job_by_an_admin_notifies_nobody(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id = enqueue(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("UPDATE jobq.jobs SET status = 'done', finished_at = now() WHERE id = %s", (job_id,))

    assert notifications_before_marker(ears, db) == []


def test_a_rolled_back_complete_of_a_watched_job_sends_no_notification(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    with db.transaction(force_rollback=True):
        db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert notifications_before_marker(ears, db) == []
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "running"


def test_the_completion_of_an_unwatched_job_sends_no_notification(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert notifications_before_marker(ears, db) == []


def test_watch_of_a_finished_job_returns_its_state_and_sends_nothing(db: Db, connect: Connect) -> None:
    ears = done_listener(connect)
    job_id, lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb(1)))

    row = db.execute("SELECT status, result FROM jobq.watch(%s)", (job_id,)).fetchone()

    assert row == {"status": "done", "result": 1}
    assert notifications_before_marker(ears, db) == []


def test_watch_of_an_unknown_id_raises_jq002(db: Db) -> None:
    assert sqlstate_of(db, "SELECT jobq.watch(%s)", (12345,)) == "JQ002"
