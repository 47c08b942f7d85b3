"""Unique jobs: jobq.enqueue(unique_key => ...) and enqueue_many(unique_keys => ...), scopes and conflicts."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import (
    Connect,
    Db,
    claim_one,
    enqueue,
    job,
    make_runnable,
    make_stale,
    record_notices,
    scalar,
    statuses,
)


def enqueue_keyed(
    db: Db, key: str, on_conflict: str = "return", queue: str = "default", **options: Any
) -> Any:
    """jobq.enqueue with unique_key, on_conflict, payload and options by name; returns what it returned."""
    payload = Jsonb(options.pop("payload", {}))
    named = "".join(f", {name} => %({name})s" for name in options)
    return scalar(
        db,
        "SELECT jobq.enqueue(%(queue)s, %(payload)s, unique_key => %(key)s, on_conflict => %(on_conflict)s"
        f"{named})",
        {"queue": queue, "payload": payload, "key": key, "on_conflict": on_conflict, **options},
    )


def keys_held(db: Db) -> dict[str, int]:
    """Each key of queue default and the job jobq.unique_keys names as its holder."""
    rows = db.execute("SELECT unique_key, job_id FROM jobq.unique_keys WHERE queue = 'default'").fetchall()
    return {row["unique_key"]: row["job_id"] for row in rows}


def finish(db: Db, job_id: int, how: str) -> None:
    """Bring the claimable job job_id to done, failed or cancelled."""
    if how == "cancelled":
        db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))
        return
    claimed = claim_one(db)
    assert claimed["id"] == job_id
    if how == "done":
        db.execute("SELECT jobq.complete(%s, %s)", (job_id, claimed["lease"]))
    else:
        db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (job_id,))
        db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, claimed["lease"]))
    assert job(db, job_id)["status"] == how


# -- conflicts with a queued holder ----------------------------------------------------------------------


def test_a_second_enqueue_of_a_held_key_returns_the_holders_id_and_inserts_nothing(db: Db) -> None:
    holder = enqueue(db, unique_key="report-42")

    again = enqueue(db, payload={"other": True}, unique_key="report-42")

    assert again == holder
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1
    assert job(db, holder)["payload"] == {}


def test_on_conflict_skip_returns_null_and_inserts_nothing(db: Db) -> None:
    enqueue(db, unique_key="k")

    assert enqueue_keyed(db, "k", "skip") is None
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


def test_on_conflict_raise_raises_jq004_naming_the_key_the_queue_and_the_holder(db: Db) -> None:
    holder = enqueue(db, unique_key="nightly")

    with pytest.raises(psycopg.Error) as raised:
        enqueue_keyed(db, "nightly", "raise")

    diag = raised.value.diag
    assert raised.value.sqlstate == "JQ004"
    assert diag.message_primary == f"unique key 'nightly' of queue 'default' is held by job {holder}"
    assert "queued" in (diag.message_detail or "")
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


def test_on_conflict_replace_gives_a_queued_holder_the_new_payload_priority_and_run_at(db: Db) -> None:
    holder = enqueue(db, payload={"v": 1}, unique_key="debounce")
    later = datetime.now(timezone.utc) + timedelta(minutes=5)

    replaced = enqueue_keyed(db, "debounce", "replace", payload={"v": 2}, priority=7, run_at=later)

    assert replaced == holder
    row = job(db, holder)
    assert (row["payload"], row["priority"], row["run_at"], row["status"]) == ({"v": 2}, 7, later, "queued")
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


def test_replace_of_a_running_holder_inserts_a_new_job_and_asks_the_running_one_to_stop(db: Db) -> None:
    holder = enqueue(db, payload={"v": 1}, unique_key="sync")
    lease = claim_one(db)["lease"]

    newer = enqueue_keyed(db, "sync", "replace", payload={"v": 2})

    assert newer != holder
    old, new = job(db, holder), job(db, newer)
    assert (old["status"], old["lease"], old["control"] & 1) == ("running", lease, 1)  # a cancel request
    assert (new["status"], new["payload"]) == ("queued", {"v": 2})
    assert keys_held(db) == {"sync": newer}
    assert enqueue(db, unique_key="sync") == newer
    db.execute("SELECT jobq.complete(%s, %s)", (holder, lease))  # its lease still holds
    assert job(db, holder)["status"] == "done"


def test_a_running_holder_that_gave_up_its_key_ends_cancelled_at_its_next_failure(db: Db) -> None:
    holder = enqueue(db, unique_key="sync", max_attempts=5)
    lease = claim_one(db)["lease"]
    enqueue_keyed(db, "sync", "replace")

    failed = db.execute("SELECT status FROM jobq.fail(%s, 'boom', %s)", (holder, lease)).fetchone()

    assert failed == {"status": "cancelled"}


@pytest.mark.parametrize(
    "hand_back",
    ["SELECT jobq.release(%s, %s)", "SELECT jobq.snooze(%s, %s, '0 s')"],
    ids=["release", "snooze"],
)
def test_a_replaced_running_holder_handed_back_by_its_worker_does_not_run_again(
    db: Db, hand_back: str
) -> None:
    holder = enqueue(db, payload={"v": 1}, unique_key="sync")
    lease = claim_one(db)["lease"]
    newer = enqueue_keyed(db, "sync", "replace", payload={"v": 2})

    db.execute(hand_back, (holder, lease))

    claimed = [row["id"] for row in db.execute("SELECT id FROM jobq.claim('default', 10, 'w1')")]
    assert claimed == [newer]


# -- scopes ------------------------------------------------------------------------------------------------


def test_until_done_scope_counts_a_done_job_and_purge_frees_the_key(db: Db) -> None:
    holder = enqueue(db, unique_key="once", unique_scope="until_done")
    finish(db, holder, "done")

    assert enqueue(db, unique_key="once", unique_scope="until_done") == holder
    assert enqueue_keyed(db, "once", "replace", unique_scope="until_done") == holder
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1

    assert scalar(db, "SELECT jobq.purge('0 s')") == 1
    newer = enqueue(db, unique_key="once", unique_scope="until_done")
    assert newer != holder
    assert job(db, newer)["status"] == "queued"


@pytest.mark.parametrize("how", ["done", "failed", "cancelled"])
def test_active_scope_lets_a_new_job_in_once_the_holder_is_finished(db: Db, how: str) -> None:
    holder = enqueue(db, unique_key="k")
    finish(db, holder, how)

    newer = enqueue(db, unique_key="k")

    assert newer != holder
    assert job(db, newer)["status"] == "queued"


def test_a_scheduled_holder_holds_its_key(db: Db) -> None:
    holder = enqueue(db, unique_key="k", run_at=datetime.now(timezone.utc) + timedelta(hours=1))

    assert enqueue(db, unique_key="k") == holder


def test_the_same_key_in_two_queues_makes_two_independent_jobs(db: Db) -> None:
    first = enqueue(db, "alpha", unique_key="k")
    second = enqueue(db, "beta", unique_key="k")

    assert first != second
    assert enqueue(db, "alpha", unique_key="k") == first
    assert enqueue(db, "beta", unique_key="k") == second


# -- a keyed job's own life never collides with its key ---------------------------------------------------


def test_a_keyed_job_that_fails_is_queued_again_and_still_holds_its_key(db: Db) -> None:
    holder = enqueue(db, unique_key="k")
    lease = claim_one(db)["lease"]

    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (holder, lease))
    make_runnable(db, holder)
    lease = claim_one(db)["lease"]
    db.execute("SELECT jobq.fail(%s, 'boom again', %s)", (holder, lease))

    row = job(db, holder)
    assert (row["status"], row["attempts"]) == ("queued", 2)
    assert keys_held(db) == {"k": holder}
    assert enqueue(db, unique_key="k") == holder


def test_a_keyed_job_that_is_reaped_is_queued_again_and_still_holds_its_key(db: Db) -> None:
    holder = enqueue(db, unique_key="k")
    claim_one(db)
    make_stale(db, holder)

    reaped = [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")]

    assert reaped == [holder]
    assert job(db, holder)["status"] == "queued"
    assert keys_held(db) == {"k": holder}
    assert enqueue(db, unique_key="k") == holder


def test_retry_failed_skips_a_failed_job_whose_key_a_newer_job_holds_with_a_notice(db: Db) -> None:
    old = enqueue(db, unique_key="k")
    finish(db, old, "failed")
    newer = enqueue(db, unique_key="k")
    notices = record_notices(db)

    redriven = [row["retry_failed"] for row in db.execute("SELECT jobq.retry_failed()")]

    assert redriven == []
    assert (job(db, old)["status"], job(db, newer)["status"]) == ("failed", "queued")
    assert len(notices) == 1
    assert f"job {old} stays failed" in notices[0] and "unique key" in notices[0], notices


def test_retry_failed_leaves_a_failed_keyed_job_failed_once_a_newer_job_took_its_key_even_when_done(
    db: Db,
) -> None:
    # decided: the key went on to a newer job, which ran; redriving the old one would run the work twice
    old = enqueue(db, unique_key="k")
    finish(db, old, "failed")
    newer = enqueue(db, unique_key="k")
    finish(db, newer, "done")

    redriven = [row["retry_failed"] for row in db.execute("SELECT jobq.retry_failed()")]

    assert redriven == []
    assert job(db, old)["status"] == "failed"


def test_retry_failed_redrives_the_free_keyed_jobs_and_the_plain_ones_beside_a_skipped_one(db: Db) -> None:
    blocked = enqueue(db, unique_key="taken")
    finish(db, blocked, "failed")
    free = enqueue(db, unique_key="free")
    finish(db, free, "failed")
    plain = enqueue(db)
    finish(db, plain, "failed")
    enqueue(db, unique_key="taken")

    redriven = [row["retry_failed"] for row in db.execute("SELECT jobq.retry_failed()")]

    assert redriven == sorted([free, plain])
    assert job(db, blocked)["status"] == "failed"


# -- enqueue_many ------------------------------------------------------------------------------------------


def enqueue_many_keyed(db: Db, keys: list[str | None], on_conflict: str = "return") -> list[int | None]:
    ids = scalar(
        db,
        "SELECT jobq.enqueue_many('default', %s, unique_keys => %s::text[], on_conflict => %s)",
        ([Jsonb({"n": n}) for n in range(len(keys))], keys, on_conflict),
    )
    assert isinstance(ids, list)
    return ids


def test_enqueue_many_unique_keys_are_aligned_with_payloads_and_null_means_no_key(db: Db) -> None:
    held = enqueue(db, unique_key="b")

    ids = enqueue_many_keyed(db, ["a", None, "b", None])

    assert ids[2] == held
    assert len({ids[0], ids[1], ids[3], held}) == 4
    payloads = {row["id"]: row["payload"] for row in db.execute("SELECT id, payload FROM jobq.jobs")}
    assert [payloads[i] for i in (ids[0], ids[1], ids[3])] == [{"n": 0}, {"n": 1}, {"n": 3}]
    assert keys_held(db) == {"a": ids[0], "b": held}


@pytest.mark.parametrize(
    ("on_conflict", "second", "payload"),
    [("return", "first", {"n": 0}), ("skip", None, {"n": 0}), ("replace", "first", {"n": 1})],
)
def test_equal_keys_in_one_enqueue_many_the_first_wins(
    db: Db, on_conflict: str, second: str | None, payload: dict[str, int]
) -> None:
    ids = enqueue_many_keyed(db, ["k", "k"], on_conflict)

    first = ids[0]
    assert first is not None
    assert ids[1] == (first if second == "first" else None)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1
    assert job(db, first)["payload"] == payload


def test_equal_keys_in_one_enqueue_many_with_raise_raise_jq004_and_insert_nothing(db: Db) -> None:
    with pytest.raises(psycopg.Error) as raised:
        enqueue_many_keyed(db, ["k", "other", "k"], "raise")

    assert raised.value.sqlstate == "JQ004"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


# -- concurrency -------------------------------------------------------------------------------------------


def test_under_repeatable_read_a_holder_committed_after_the_snapshot_raises_40001_and_a_retry_settles(
    db: Db, connect: Connect
) -> None:
    producer = connect(autocommit=False)
    producer.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    producer.execute("SELECT 1")  # the snapshot
    holder = enqueue(db, unique_key="k")

    with pytest.raises(psycopg.Error) as raised:
        enqueue(producer, unique_key="k")
    assert raised.value.sqlstate == "40001"
    producer.rollback()

    assert enqueue(producer, unique_key="k") == holder
    producer.commit()
    assert statuses(db) == {"queued": 1}


def test_eight_sessions_enqueueing_one_key_at_once_leave_exactly_one_job(db: Db, connect: Connect) -> None:
    sessions = [connect(autocommit=False) for _ in range(8)]
    barrier = threading.Barrier(len(sessions))
    returned: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def produce(conn: psycopg.Connection[Any]) -> None:
        try:
            barrier.wait(timeout=30)
            job_id = scalar(conn, "SELECT jobq.enqueue('default', '{}', unique_key => 'only-one')")
            conn.execute("SELECT pg_sleep(0.05)")  # hold the insert open while the others arrive
            conn.commit()
            with lock:
                returned.append(job_id)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=produce, args=(conn,)) for conn in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert statuses(db) == {"queued": 1}
    only = scalar(db, "SELECT id FROM jobq.jobs")
    assert returned == [only] * 8
