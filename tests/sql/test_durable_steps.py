"""Durable steps (0.11.0): jobq.checkpoint records a step of a running job under its lease, in the caller's
transaction; jobq.steps and jobq.job show the steps, each with the attempt that recorded it; jobq.progress
keeps a running job's latest report; the side rows leave with their job (jobq.purge, retention).

Sleeps, signals and held jobs are in test_durable_sleep_signals.py; a signal racing an await in
tests/isolation/specs/signal_vs_await.spec; the bad arguments in test_bad_input.py.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, make_runnable, make_stale, row_digest, scalar

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major; on every other
# major the isolation specs (tests/isolation) and the bad-input table (tests/sql/test_bad_input.py) run
# these functions.
pytestmark = pytest.mark.main_targets

DURABLE_TABLES = ["jobq.job_steps", "jobq.signals", "jobq.signal_waits", "jobq.job_progress"]


def running(db: Db, **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, **options)
    claimed = claim_one(db)
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def sqlstate_of(db: psycopg.Connection[Any], query: str, params: Any = None) -> str | None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(query, params)
    return raised.value.sqlstate


def checkpoint(db: psycopg.Connection[Any], job_id: int, lease: int, step: str, result: Any) -> Any:
    return scalar(db, "SELECT jobq.checkpoint(%s, %s, %s, %s)", (job_id, lease, step, Jsonb(result)))


def steps(db: Db, job_id: int) -> list[dict[str, Any]]:
    """jobq.steps(id) without its times: name, kind, result, attempt, in order."""
    return db.execute("SELECT name, kind, result, attempt FROM jobq.steps(%s)", (job_id,)).fetchall()


def state(db: Db, job_id: int) -> dict[str, Any]:
    """jobq.job(id), as a dict."""
    row = db.execute("SELECT * FROM jobq.job(%s)", (job_id,)).fetchone()
    assert row is not None
    return row


def side_rows(db: Db, job_id: int) -> dict[str, int]:
    """How many rows of each durable table belong to the job (jobq.signals has no job: left out)."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM jobq.job_steps WHERE id = %(id)s) AS steps,"
        " (SELECT count(*) FROM jobq.signal_waits WHERE id = %(id)s) AS waits,"
        " (SELECT count(*) FROM jobq.job_progress WHERE id = %(id)s) AS progress",
        {"id": job_id},
    ).fetchone()
    assert row is not None
    return row


def durable_table_uses(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Scans and row writes of each durable table by conn's open transaction (pg_stat_xact_user_tables)."""
    rows = conn.execute(
        "SELECT relid::regclass::text, coalesce(seq_scan, 0) + coalesce(idx_scan, 0)"
        " + n_tup_ins + n_tup_upd + n_tup_del"
        " FROM pg_stat_xact_user_tables WHERE relid = ANY (%s::regclass[])",
        (DURABLE_TABLES,),
    ).fetchall()
    return {table: int(uses) for table, uses in rows}


# -- checkpoint and steps ---------------------------------------------------------------------------------


def test_a_checkpoint_returns_its_result_and_jobq_steps_shows_it_with_its_attempt(db: Db) -> None:
    job_id, lease = running(db)

    returned = checkpoint(db, job_id, lease, "charge", {"charge_id": "ch_1"})

    assert returned == {"charge_id": "ch_1"}
    assert steps(db, job_id) == [
        {"name": "charge", "kind": "step", "result": {"charge_id": "ch_1"}, "attempt": 1}
    ]


def test_steps_are_listed_in_the_order_they_were_recorded(db: Db) -> None:
    job_id, lease = running(db)

    for name in ("zeta", "alpha", "mid"):
        checkpoint(db, job_id, lease, name, None)

    assert [row["name"] for row in steps(db, job_id)] == ["zeta", "alpha", "mid"]


def test_a_checkpoint_rolled_back_with_its_transaction_leaves_no_step(db: Db, connect: Connect) -> None:
    job_id, lease = running(db)
    db.execute("CREATE TABLE charges (job bigint)")
    before = row_digest(db, job_id)
    worker = connect(autocommit=False)
    worker.execute("INSERT INTO charges VALUES (%s)", (job_id,))
    checkpoint(worker, job_id, lease, "charge", "ch_1")

    worker.rollback()

    assert steps(db, job_id) == []
    assert scalar(db, "SELECT count(*) FROM charges") == 0
    assert row_digest(db, job_id) == before  # not marked durable either


def test_a_checkpoint_commits_with_the_steps_own_write(db: Db, connect: Connect) -> None:
    job_id, lease = running(db)
    db.execute("CREATE TABLE charges (job bigint)")
    worker = connect(autocommit=False)
    worker.execute("INSERT INTO charges VALUES (%s)", (job_id,))
    checkpoint(worker, job_id, lease, "charge", "ch_1")
    assert steps(db, job_id) == []  # nothing seen before the commit

    worker.commit()

    assert [row["result"] for row in steps(db, job_id)] == ["ch_1"]
    assert scalar(db, "SELECT count(*) FROM charges") == 1


def test_a_repeated_step_keeps_its_first_result_and_returns_it(db: Db) -> None:
    job_id, lease = running(db)
    checkpoint(db, job_id, lease, "charge", {"charge_id": "ch_1"})

    returned = checkpoint(db, job_id, lease, "charge", {"charge_id": "ch_2"})

    assert returned == {"charge_id": "ch_1"}
    assert [row["result"] for row in steps(db, job_id)] == [{"charge_id": "ch_1"}]


def test_a_step_recorded_by_an_earlier_attempt_keeps_its_result_and_attempt(db: Db) -> None:
    job_id, lease = running(db)
    checkpoint(db, job_id, lease, "charge", "ch_1")
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    make_runnable(db, job_id)
    lease = claim_one(db)["lease"]

    returned = checkpoint(db, job_id, lease, "charge", "ch_2")

    assert returned == "ch_1"
    assert steps(db, job_id) == [{"name": "charge", "kind": "step", "result": "ch_1", "attempt": 1}]


def test_a_checkpoint_under_a_reaped_lease_is_refused_with_jq001_and_records_nothing(db: Db) -> None:
    job_id, zombie_lease = running(db)
    make_stale(db, job_id)
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")] == [job_id]
    make_runnable(db, job_id)
    claim_one(db)  # another worker runs it now
    before = row_digest(db, job_id)

    refused = sqlstate_of(
        db, "SELECT jobq.checkpoint(%s, %s, 'charge', %s)", (job_id, zombie_lease, Jsonb("zombie"))
    )

    assert refused == "JQ001"
    assert steps(db, job_id) == []
    assert row_digest(db, job_id) == before


def test_a_checkpoint_of_a_queued_job_is_refused_with_jq001(db: Db) -> None:
    job_id = enqueue(db)

    assert sqlstate_of(db, "SELECT jobq.checkpoint(%s, 0, 'charge', 'null')", (job_id,)) == "JQ001"
    assert steps(db, job_id) == []


def test_a_checkpoint_of_an_unknown_job_is_refused_with_jq002(db: Db) -> None:
    job_id, lease = running(db)

    refused = sqlstate_of(db, "SELECT jobq.checkpoint(%s, %s, 'charge', 'null')", (job_id + 1000, lease))

    assert refused == "JQ002"
    assert scalar(db, "SELECT count(*) FROM jobq.job_steps") == 0


def test_steps_survive_a_retry_and_show_the_attempt_that_recorded_each(db: Db) -> None:
    job_id, lease = running(db)
    checkpoint(db, job_id, lease, "charge", "ch_1")
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    make_runnable(db, job_id)
    lease = claim_one(db)["lease"]

    checkpoint(db, job_id, lease, "email", {"sent": True})

    assert steps(db, job_id) == [
        {"name": "charge", "kind": "step", "result": "ch_1", "attempt": 1},
        {"name": "email", "kind": "step", "result": {"sent": True}, "attempt": 2},
    ]
    shown = state(db, job_id)
    assert shown["steps"] == {"charge": "ch_1", "email": {"sent": True}}
    assert shown["step_attempts"] == {"charge": 1, "email": 2}


def test_a_job_that_recorded_a_step_is_claimed_with_control_bit_64(db: Db) -> None:
    job_id, lease = running(db)
    checkpoint(db, job_id, lease, "charge", "ch_1")
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))
    make_runnable(db, job_id)

    claimed = claim_one(db)

    assert claimed["control"] & 64 == 64


def test_jobq_steps_of_a_job_without_steps_is_empty(db: Db) -> None:
    job_id = enqueue(db)

    assert steps(db, job_id) == []


def test_jobq_steps_of_an_unknown_job_raises_jq002(db: Db) -> None:
    job_id = enqueue(db)

    assert sqlstate_of(db, "SELECT * FROM jobq.steps(%s)", (job_id + 1000,)) == "JQ002"


# -- what a plain job pays --------------------------------------------------------------------------------


def test_a_plain_job_is_claimed_and_completed_without_control_bit_64(db: Db) -> None:
    job_id, lease = running(db)

    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))

    assert scalar(db, "SELECT coalesce(control & 64, 0) FROM jobq.jobs WHERE id = %s", (job_id,)) == 0
    assert side_rows(db, job_id) == {"steps": 0, "waits": 0, "progress": 0}


def test_enqueue_claim_and_complete_of_a_plain_job_never_touch_the_durable_tables(connect: Connect) -> None:
    worker = connect(autocommit=False)
    job_id = enqueue(worker)
    lease = worker.execute("SELECT lease FROM jobq.claim('default', 1, 'w1')").fetchone()

    assert lease is not None
    worker.execute("SELECT jobq.complete(%s, %s)", (job_id, lease[0]))

    assert durable_table_uses(worker) == dict.fromkeys(DURABLE_TABLES, 0)


def test_the_table_probe_sees_a_checkpoint(connect: Connect) -> None:
    worker = connect(autocommit=False)
    job_id = enqueue(worker)
    lease = worker.execute("SELECT lease FROM jobq.claim('default', 1, 'w1')").fetchone()
    assert lease is not None

    checkpoint(worker, job_id, lease[0], "charge", "ch_1")

    assert durable_table_uses(worker)["jobq.job_steps"] > 0


def test_jobq_job_of_a_plain_job_shows_no_steps_progress_or_wait(db: Db) -> None:
    job_id = enqueue(db)

    shown = state(db, job_id)

    assert [shown[name] for name in ("steps", "step_attempts", "progress", "waiting_for")] == [None] * 4


# -- one namespace per job --------------------------------------------------------------------------------


STEP = "SELECT jobq.checkpoint(%s, %s, 'x', '1')"
SLEEP = "SELECT jobq.sleep(%s, %s, 'x', now() - interval '1 s')"  # over at once: the job goes on
AWAIT = "SELECT jobq.await_signal(%s, %s, 'x')"


@pytest.mark.parametrize(
    ("first", "second"),
    [(STEP, SLEEP), (STEP, AWAIT), (SLEEP, STEP), (SLEEP, AWAIT)],
    ids=["step-then-sleep", "step-then-await", "sleep-then-step", "sleep-then-await"],
)
def test_a_name_taken_by_another_kind_of_step_is_refused_with_22023(db: Db, first: str, second: str) -> None:
    job_id, lease = running(db)
    db.execute(first, (job_id, lease))
    before = steps(db, job_id)

    with pytest.raises(psycopg.Error) as raised:
        db.execute(second, (job_id, lease))

    assert raised.value.sqlstate == "22023"
    assert "'x'" in (raised.value.diag.message_primary or "")
    assert steps(db, job_id) == before
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "running"


def test_a_signal_received_takes_its_key_as_a_name_of_the_job(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.signal('x', '\"ok\"')")
    assert scalar(db, "SELECT jobq.await_signal(%s, %s, 'x')", (job_id, lease)) == "ok"

    assert sqlstate_of(db, "SELECT jobq.checkpoint(%s, %s, 'x', '1')", (job_id, lease)) == "22023"


# -- progress ---------------------------------------------------------------------------------------------


def test_progress_is_stored_and_shown_by_jobq_job(db: Db) -> None:
    job_id, lease = running(db)

    row = db.execute(
        "SELECT jobq.progress(%s, %s, %s) = statement_timestamp() AS stamped",
        (job_id, lease, Jsonb({"done": 3, "of": 10})),
    ).fetchone()

    assert row == {"stamped": True}
    assert state(db, job_id)["progress"] == {"done": 3, "of": 10}


def test_a_new_progress_report_replaces_the_last(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.progress(%s, %s, %s)", (job_id, lease, Jsonb({"done": 3})))

    db.execute("SELECT jobq.progress(%s, %s, %s)", (job_id, lease, Jsonb(0.9)))

    assert state(db, job_id)["progress"] == 0.9
    assert side_rows(db, job_id)["progress"] == 1


def test_progress_under_a_stale_lease_is_refused_with_jq001_and_keeps_the_last_report(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.progress(%s, %s, %s)", (job_id, lease, Jsonb({"done": 3})))
    make_stale(db, job_id)
    db.execute("SELECT jobq.reap()")
    make_runnable(db, job_id)
    claim_one(db)

    refused = sqlstate_of(db, "SELECT jobq.progress(%s, %s, %s)", (job_id, lease, Jsonb({"done": 9})))

    assert refused == "JQ001"
    assert state(db, job_id)["progress"] == {"done": 3}


def test_progress_of_an_unknown_job_is_refused_with_jq002(db: Db) -> None:
    job_id, lease = running(db)

    assert sqlstate_of(db, "SELECT jobq.progress(%s, %s, '1')", (job_id + 1000, lease)) == "JQ002"
    assert scalar(db, "SELECT count(*) FROM jobq.job_progress") == 0


# -- the side rows leave with their job ----------------------------------------------------------------------


def durable_job_done(db: Db, queue: str = "default") -> int:
    """A job that recorded a step and a progress report, then completed; its id."""
    job_id = enqueue(db, queue)
    lease = claim_one(db, queue)["lease"]
    checkpoint(db, job_id, lease, "charge", "ch_1")
    db.execute("SELECT jobq.progress(%s, %s, '1')", (job_id, lease))
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))
    assert side_rows(db, job_id) == {"steps": 1, "waits": 0, "progress": 1}
    return job_id


def test_purge_deletes_the_steps_and_progress_of_the_jobs_it_deletes(db: Db) -> None:
    purged = durable_job_done(db)
    kept, lease = running(db)
    checkpoint(db, kept, lease, "charge", "ch_2")
    db.execute("SELECT jobq.progress(%s, %s, '1')", (kept, lease))

    assert scalar(db, "SELECT jobq.purge('0 s')") == 1

    assert side_rows(db, purged) == {"steps": 0, "waits": 0, "progress": 0}
    assert side_rows(db, kept) == {"steps": 1, "waits": 0, "progress": 1}


def test_retention_deletes_the_steps_and_progress_of_the_jobs_it_deletes(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0 s')")
    retained = durable_job_done(db, "emails")
    kept = durable_job_done(db)  # default queue: kept a day

    db.execute("SELECT jobq.tick()")

    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE id = %s", (retained,)) == 0
    assert side_rows(db, retained) == {"steps": 0, "waits": 0, "progress": 0}
    assert side_rows(db, kept) == {"steps": 1, "waits": 0, "progress": 1}


def test_purge_deletes_the_wait_of_a_cancelled_job_that_awaited_a_signal(db: Db) -> None:
    job_id, lease = running(db)
    assert scalar(db, "SELECT jobq.await_signal(%s, %s, 'approval') IS NULL", (job_id, lease)) is True
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))
    assert side_rows(db, job_id)["waits"] == 1

    assert scalar(db, "SELECT jobq.purge('0 s')") == 1

    assert side_rows(db, job_id) == {"steps": 0, "waits": 0, "progress": 0}


# -- fan_out and parent_results ---------------------------------------------------------------------------


def fan_out(
    db: psycopg.Connection[Any],
    job_id: int,
    lease: int,
    children: list[dict[str, Any]],
    continuation: dict[str, Any] | None = None,
    step: str = "split",
) -> list[int]:
    ids = scalar(
        db,
        "SELECT jobq.fan_out(%s, %s, %s, %s, %s)",
        (job_id, lease, step, Jsonb(children), None if continuation is None else Jsonb(continuation)),
    )
    assert isinstance(ids, list)
    return ids


def jobs_of(db: Db, ids: list[int]) -> list[dict[str, Any]]:
    """queue, payload and status of each job of ids, in the order of ids."""
    return db.execute(
        "SELECT j.queue, j.payload, j.status FROM unnest(%s::bigint[]) WITH ORDINALITY AS i(id, n)"
        " JOIN jobq.jobs AS j ON j.id = i.id ORDER BY i.n",
        (ids,),
    ).fetchall()


def parent_results(db: Db, job_id: int) -> list[tuple[Any, ...]]:
    return [
        (row["parent"], row["status"], row["result"])
        for row in db.execute("SELECT * FROM jobq.parent_results(%s)", (job_id,))
    ]


def claimed(db: Db, queue: str = "default", n: int = 10) -> dict[int, int]:
    """Claims up to n jobs of queue: id -> lease."""
    return {
        row["id"]: row["lease"] for row in db.execute("SELECT * FROM jobq.claim(%s, %s, 'w2')", (queue, n))
    }


def test_fan_out_returns_the_ids_in_order_and_the_continuation_waits_for_every_child(db: Db) -> None:
    job_id, lease = running(db)

    ids = fan_out(
        db, job_id, lease, [{"payload": {"n": 1}}, {"payload": {"n": 2}}], {"payload": {"merge": 1}}
    )

    assert len(ids) == 3 and ids == sorted(ids) and job_id not in ids
    assert jobs_of(db, ids) == [
        {"queue": "default", "payload": {"n": 1}, "status": "queued"},
        {"queue": "default", "payload": {"n": 2}, "status": "queued"},
        {"queue": "default", "payload": {"merge": 1}, "status": "waiting"},
    ]
    assert state(db, ids[2])["waiting_for"] == {"parents": ids[:2]}
    assert steps(db, job_id) == [{"name": "split", "kind": "fan_out", "result": ids, "attempt": 1}]
    assert state(db, job_id)["status"] == "running"


def test_fan_out_without_a_continuation_enqueues_only_the_children(db: Db) -> None:
    job_id, lease = running(db)

    ids = fan_out(db, job_id, lease, [{"payload": {"n": 1}}, {"payload": {"n": 2}}])

    assert [row["status"] for row in jobs_of(db, ids)] == ["queued", "queued"]
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 3


def test_the_continuation_runs_once_every_child_ended_done_failed_or_cancelled(db: Db) -> None:
    job_id, lease = running(db)
    children = [{"payload": {"n": n}, "max_attempts": 1} for n in (1, 2, 3)]
    done, failed, cancelled, continuation = fan_out(db, job_id, lease, children, {"payload": {}})
    db.execute("SELECT jobq.complete(%s, %s)", (job_id, lease))
    leases = claimed(db)
    assert sorted(leases) == [done, failed, cancelled]  # the continuation is not claimable

    db.execute("SELECT jobq.complete(%s, %s, '{\"sum\": 1}')", (done, leases[done]))
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (failed, leases[failed]))
    assert state(db, continuation)["status"] == "waiting"
    assert state(db, continuation)["waiting_for"] == {"parents": [cancelled]}
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[], force => true)", (cancelled,))

    assert state(db, continuation)["status"] == "queued"  # on_parent_failure 'run' by default
    assert parent_results(db, continuation) == [
        (done, "done", {"sum": 1}),
        (failed, "failed", None),
        (cancelled, "cancelled", None),
    ]
    assert claim_one(db)["id"] == continuation


def test_a_continuation_that_says_cancel_is_cancelled_when_a_child_fails(db: Db) -> None:
    job_id, lease = running(db)
    children = [{"payload": {"n": n}, "max_attempts": 1} for n in (1, 2)]
    first, second, continuation = fan_out(
        db, job_id, lease, children, {"payload": {}, "on_parent_failure": "cancel"}
    )
    leases = claimed(db)
    db.execute("SELECT jobq.complete(%s, %s)", (first, leases[first]))
    assert state(db, continuation)["status"] == "waiting"

    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (second, leases[second]))

    assert state(db, continuation)["status"] == "cancelled"
    assert parent_results(db, continuation) == [(first, "done", None), (second, "failed", None)]


def test_a_repeated_fan_out_of_the_same_step_returns_the_same_ids_and_enqueues_nothing(db: Db) -> None:
    job_id, lease = running(db, max_attempts=3)
    children = [{"payload": {"n": 1}, "queue": "children"}]
    ids = fan_out(db, job_id, lease, children, {"payload": {}})
    jobs = scalar(db, "SELECT count(*) FROM jobq.jobs")

    again = fan_out(db, job_id, lease, [*children, {"payload": {"n": 2}}], {"payload": {}})
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, lease))  # run again, by the next attempt
    make_runnable(db, job_id)
    retried = claim_one(db)
    assert retried["id"] == job_id
    after_retry = fan_out(db, job_id, retried["lease"], children, {"payload": {}})

    assert again == after_retry == ids
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == jobs
    assert [row["attempt"] for row in steps(db, job_id)] == [1]


def test_a_fan_out_under_a_stale_lease_is_refused_with_jq001_and_enqueues_nothing(db: Db) -> None:
    job_id, zombie_lease = running(db)
    make_stale(db, job_id)
    assert [row["id"] for row in db.execute("SELECT id FROM jobq.reap()")] == [job_id]
    make_runnable(db, job_id)
    claim_one(db)  # another worker runs it now
    before = row_digest(db, job_id)
    last_id = scalar(db, "SELECT max(id) FROM jobq.jobs")

    refused = sqlstate_of(
        db,
        "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}]', '{\"payload\": {}}')",
        (job_id, zombie_lease),
    )

    assert refused == "JQ001"
    assert scalar(db, "SELECT max(id) FROM jobq.jobs") == last_id
    assert scalar(db, "SELECT count(*) FROM jobq.job_deps") == 0
    assert steps(db, job_id) == []
    assert row_digest(db, job_id) == before


def test_fan_out_enqueues_on_the_running_jobs_queue_unless_a_job_names_its_own(db: Db) -> None:
    job_id = enqueue(db, "emails")
    lease = claim_one(db, "emails")["lease"]

    ids = fan_out(db, job_id, lease, [{"payload": {}}, {"payload": {}, "queue": "reports"}], {"payload": {}})

    assert [row["queue"] for row in jobs_of(db, ids)] == ["emails", "reports", "emails"]


def test_parent_results_lists_the_parents_in_the_order_enqueued_with_their_status_and_result(db: Db) -> None:
    done_id, done_lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s, '[1, 2]')", (done_id, done_lease))
    plain_done, plain_lease = running(db)
    db.execute("SELECT jobq.complete(%s, %s)", (plain_done, plain_lease))
    queued_id = enqueue(db)
    child = enqueue(db, depends_on=[queued_id, done_id, plain_done], on_parent_failure="run")
    orphan = enqueue(db)

    assert parent_results(db, child) == [
        (done_id, "done", [1, 2]),
        (plain_done, "done", None),
        (queued_id, "queued", None),
    ]
    assert parent_results(db, orphan) == []
