"""Dependencies (0.7.0): jobq.enqueue(..., depends_on =>, on_parent_failure =>) and jobq.enqueue_flow.

A job with unfinished parents waits (status 'waiting', never claimed); its last parent done makes it
queued; a parent failed or cancelled cancels it, or with on_parent_failure 'run' counts as ended.  The races
(a parent finishing while a dependent is enqueued, two parents at once) are in
tests/isolation/specs/dependency_release.spec.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Connect, Db, enqueue, listen_to_queues, notifications_before_marker, scalar

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major, fresh and
# upgraded; on every other major the isolation specs (tests/isolation) and the bad-input table
# (tests/sql/test_bad_input.py) run these functions, and each major is where locking and plans differ.
pytestmark = pytest.mark.main_targets


def status(db: Db, job_id: int) -> str:
    value = scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,))
    assert isinstance(value, str)
    return value


def run(db: Db, job_id: int) -> dict[str, Any]:
    """Claim the job (it must be the next one of its queue) and return its row."""
    row = db.execute(
        "SELECT * FROM jobq.claim((SELECT queue FROM jobq.jobs WHERE id = %s), 1, 'w1')", (job_id,)
    ).fetchone()
    assert row is not None and row["id"] == job_id, f"job {job_id} was not the one claimed: {row}"
    return row


def finish(db: Db, job_id: int, result: Any = None) -> None:
    lease = run(db, job_id)["lease"]
    db.execute(
        "SELECT jobq.complete(%s, %s, %s)", (job_id, lease, Jsonb(result) if result is not None else None)
    )


def fail_for_good(db: Db, job_id: int) -> None:
    lease = run(db, job_id)["lease"]
    db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (job_id,))
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))


def flow(db: Db, steps: list[dict[str, Any]], queue: str = "default") -> list[int]:
    ids = scalar(db, "SELECT jobq.enqueue_flow(%s, %s)", (queue, Jsonb(steps)))
    assert isinstance(ids, list)
    return ids


def test_a_job_with_an_unfinished_parent_waits_and_is_not_claimed(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])
    run(db, parent)

    assert status(db, child) == "waiting"
    assert db.execute("SELECT id FROM jobq.claim('default', 10, 'w2')").fetchall() == []


def test_the_last_parent_done_makes_the_job_queued(db: Db) -> None:
    first, second = enqueue(db), enqueue(db)
    child = enqueue(db, depends_on=[first, second])

    finish(db, first)
    assert status(db, child) == "waiting"
    finish(db, second)
    assert status(db, child) == "queued"


def test_a_parent_already_done_is_no_reason_to_wait(db: Db) -> None:
    parent = enqueue(db)
    finish(db, parent)

    child = enqueue(db, depends_on=[parent])

    assert status(db, child) == "queued"


def test_a_failed_parent_cancels_the_waiting_job_and_says_why(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])

    fail_for_good(db, parent)

    row = db.execute(
        "SELECT status, last_error, finished_at FROM jobq.jobs WHERE id = %s", (child,)
    ).fetchone()
    assert row is not None
    assert (row["status"], row["last_error"]) == ("cancelled", f"cancelled: parent job {parent} ended failed")
    assert row["finished_at"] is not None


def test_a_failure_that_will_be_retried_does_not_settle_the_dependents(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])
    lease = run(db, parent)["lease"]

    db.execute("SELECT jobq.fail(%s, 'once', %s)", (parent, lease))

    assert status(db, child) == "waiting"


def test_on_parent_failure_run_counts_a_failed_parent_as_ended(db: Db) -> None:
    failing, succeeding = enqueue(db), enqueue(db)
    child = enqueue(db, depends_on=[failing, succeeding], on_parent_failure="run")

    fail_for_good(db, failing)
    assert status(db, child) == "waiting"
    finish(db, succeeding)
    assert status(db, child) == "queued"


def test_a_cancelled_parent_cancels_its_dependents_and_theirs(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])
    grandchild = enqueue(db, depends_on=[child])

    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (parent,))

    assert (status(db, child), status(db, grandchild)) == ("cancelled", "cancelled")


def test_a_parent_already_failed_cancels_a_new_dependent_at_once(db: Db) -> None:
    parent = enqueue(db)
    fail_for_good(db, parent)

    child = enqueue(db, depends_on=[parent])

    assert status(db, child) == "cancelled"


def test_a_waiting_job_can_be_cancelled_and_its_parent_then_finishes_normally(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])

    rows = db.execute("SELECT * FROM jobq.cancel(ARRAY[%s]::bigint[])", (child,)).fetchall()
    finish(db, parent)

    assert rows == [{"id": child, "status": "cancelled"}]
    assert status(db, child) == "cancelled"


def test_a_reaped_parent_out_of_attempts_cancels_its_dependents(db: Db) -> None:
    parent = enqueue(db, max_attempts=1)
    child = enqueue(db, depends_on=[parent])
    run(db, parent)
    db.execute("UPDATE jobq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (parent,))

    db.execute("SELECT jobq.reap()")

    assert (status(db, parent), status(db, child)) == ("failed", "cancelled")


def test_a_parent_completed_in_a_batch_releases_its_dependent(db: Db) -> None:
    parent, other = enqueue(db), enqueue(db)
    child = enqueue(db, depends_on=[parent])
    held = db.execute("SELECT id, lease FROM jobq.claim('default', 2, 'w1')").fetchall()

    db.execute(
        "SELECT jobq.complete_many(%s, %s)", ([row["id"] for row in held], [row["lease"] for row in held])
    )

    assert status(db, child) == "queued"
    assert other in [row["id"] for row in held]


def test_a_released_job_wakes_its_queue(db: Db, connect: Connect) -> None:
    parent = enqueue(db)
    enqueue(db, "later", depends_on=[parent])
    lease = run(db, parent)["lease"]
    ears = connect()
    listen_to_queues(ears, ["later"])

    db.execute("SELECT jobq.complete(%s, %s)", (parent, lease))

    assert notifications_before_marker(ears, db) == [("jobq_later", "")]


def test_a_dependent_reads_its_parents_and_their_results_with_jobq_job(db: Db) -> None:
    first, second = enqueue(db), enqueue(db)
    child = enqueue(db, depends_on=[second, first])
    finish(db, first, result={"rows": 7})

    parents = scalar(db, "SELECT (jobq.job(%s)).depends_on", (child,))
    results = [scalar(db, "SELECT (jobq.job(%s)).result", (parent,)) for parent in parents]

    assert parents == [first, second]
    assert results == [{"rows": 7}, None]


def test_a_job_without_parents_shows_none(db: Db) -> None:
    job_id = enqueue(db)

    assert scalar(db, "SELECT (jobq.job(%s)).depends_on", (job_id,)) is None


def test_a_parent_repeated_in_depends_on_counts_once(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent, parent])

    finish(db, parent)

    assert status(db, child) == "queued"


def test_a_parent_redriven_after_its_failure_does_not_settle_its_dependents_twice(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent], on_parent_failure="run")
    other = enqueue(db, "elsewhere")
    second_child = enqueue(db, depends_on=[parent, other])
    fail_for_good(db, parent)
    assert (status(db, child), status(db, second_child)) == ("queued", "cancelled")

    finish(db, child)
    db.execute("SELECT jobq.retry_failed(ids => ARRAY[%s]::bigint[])", (parent,))
    finish(db, parent)

    assert scalar(db, "SELECT count(*) FROM jobq.job_deps WHERE NOT settled") == 1  # other's edge
    assert status(db, second_child) == "cancelled"


def test_stats_count_the_waiting_jobs(db: Db) -> None:
    parent = enqueue(db)
    enqueue(db, depends_on=[parent])

    row = db.execute("SELECT queued, waiting FROM jobq.stats() WHERE queue = 'default'").fetchone()

    assert row == {"queued": 1, "waiting": 1}


def test_purge_deletes_the_dependency_rows_of_the_jobs_it_deletes(db: Db) -> None:
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent])
    finish(db, parent)
    finish(db, child)

    db.execute("SELECT jobq.purge('0 s')")

    assert scalar(db, "SELECT count(*) FROM jobq.job_deps") == 0
    assert scalar(db, "SELECT count(*) FROM jobq.job_waits") == 0


def test_a_dependent_may_have_a_concurrency_key(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('default', key_concurrency => 1)")
    parent = enqueue(db)
    child = enqueue(db, depends_on=[parent], concurrency_key="tenant")

    finish(db, parent)

    assert run(db, child)["id"] == child


# --- enqueue_flow ------------------------------------------------------------------------------------------


def test_a_flow_returns_one_id_per_step_in_order_and_wires_them(db: Db) -> None:
    ids = flow(
        db,
        [
            {"name": "extract", "payload": {"step": 1}},
            {"name": "transform", "payload": {"step": 2}, "depends_on": ["extract"]},
            {"payload": {"step": 3}, "depends_on": ["extract", "transform"]},
        ],
    )

    payloads = [scalar(db, "SELECT payload->>'step' FROM jobq.jobs WHERE id = %s", (i,)) for i in ids]
    assert payloads == ["1", "2", "3"]
    assert [status(db, i) for i in ids] == ["queued", "waiting", "waiting"]
    assert scalar(db, "SELECT (jobq.job(%s)).depends_on", (ids[2],)) == ids[:2]


def test_a_flow_runs_in_dependency_order(db: Db) -> None:
    extract, transform, load = flow(
        db,
        [
            {"name": "e", "payload": {}},
            {"name": "t", "payload": {}, "depends_on": ["e"]},
            {"name": "l", "payload": {}, "depends_on": ["t"]},
        ],
    )

    finish(db, extract)
    assert (status(db, transform), status(db, load)) == ("queued", "waiting")
    finish(db, transform)
    assert status(db, load) == "queued"


def test_a_flow_fans_in_on_steps_and_existing_jobs(db: Db) -> None:
    existing = enqueue(db)
    a, b, joined = flow(
        db,
        [
            {"name": "a", "payload": {}},
            {"name": "b", "payload": {}},
            {"payload": {}, "depends_on": ["a", "b", existing]},
        ],
    )

    for job_id in (existing, a, b):
        finish(db, job_id)

    assert status(db, joined) == "queued"


def test_a_flow_step_takes_its_options(db: Db) -> None:
    (job_id,) = flow(
        db,
        [
            {
                "payload": {"x": 1},
                "queue": "reports",
                "priority": 7,
                "max_attempts": 2,
                "headers": {"trace": "t"},
                "concurrency_key": "k",
            }
        ],
    )

    row = db.execute(
        "SELECT queue, priority, max_attempts, headers FROM jobq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == {"queue": "reports", "priority": 7, "max_attempts": 2, "headers": {"trace": "t"}}
    assert scalar(db, "SELECT concurrency_key FROM jobq.concurrency_keys WHERE id = %s", (job_id,)) == "k"


def test_a_flow_with_one_bad_step_enqueues_nothing(db: Db) -> None:
    before = scalar(db, "SELECT last_value FROM jobq.jobs_id_seq")

    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"steps\[1\]"):
        flow(db, [{"payload": {}}, {"payload": {}, "priority": 999999}])

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0
    assert scalar(db, "SELECT last_value FROM jobq.jobs_id_seq") == before
