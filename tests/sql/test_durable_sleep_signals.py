"""Durable sleeps, signals and held jobs (0.11.0): jobq.sleep gives a running job back until the sleep's end;
jobq.await_signal parks it (waiting) until jobq.signal or its timeout (jobq.tick); jobq.enqueue(..., hold =>
true) enqueues it waiting until jobq.unhold.  None of them spends an attempt or holds a worker.

Steps and progress are in test_durable_steps.py; a signal racing an await in
tests/isolation/specs/signal_vs_await.spec; the bad arguments in test_bad_input.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
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
    listen_to_queues,
    make_runnable,
    make_stale,
    notifications_before_marker,
    scalar,
)

# The semantics are the same PL/pgSQL on every major: this file runs on the machine's major; on every other
# major the isolation specs (tests/isolation) and the bad-input table (tests/sql/test_bad_input.py) run
# these functions.
pytestmark = pytest.mark.main_targets


def running(db: Db, queue: str = "default", **options: Any) -> tuple[int, int]:
    """A job enqueued and claimed: (id, lease)."""
    job_id = enqueue(db, queue, **options)
    claimed = claim_one(db, queue)
    assert claimed["id"] == job_id
    return job_id, claimed["lease"]


def sqlstate_of(db: Db, query: str, params: Any = None) -> str | None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(query, params)
    return raised.value.sqlstate


def status(db: Db, job_id: int) -> str:
    value = scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,))
    assert isinstance(value, str)
    return value


def waiting_for(db: Db, job_id: int) -> Any:
    return scalar(db, "SELECT (jobq.job(%s)).waiting_for", (job_id,))


def steps(db: Db, job_id: int) -> list[dict[str, Any]]:
    """jobq.steps(id) without its times: name, kind, result, attempt, in order."""
    return db.execute("SELECT name, kind, result, attempt FROM jobq.steps(%s)", (job_id,)).fetchall()


def sleep(db: Db, job_id: int, lease: int, until: datetime, step: str = "nap") -> bool:
    slept = scalar(db, "SELECT jobq.sleep(%s, %s, %s, %s)", (job_id, lease, step, until))
    assert isinstance(slept, bool)
    return slept


def later(db: Db, delay: str) -> datetime:
    """The database's clock plus delay."""
    moment = scalar(db, "SELECT statement_timestamp() + %s::interval", (delay,))
    assert isinstance(moment, datetime)
    return moment


def park(db: Db, job_id: int, lease: int, key: str = "approval", timeout: str | None = None) -> None:
    """await_signal(key) of a running job whose key was not sent: the job is parked."""
    awaited = db.execute(
        "SELECT jobq.await_signal(%s, %s, %s, %s) IS NULL AS parked", (job_id, lease, key, timeout)
    ).fetchone()
    assert awaited == {"parked": True}


def signal(db: Db, key: str, payload: Any = None, keep: str = "7 days") -> int:
    released = scalar(db, "SELECT jobq.signal(%s, %s, %s)", (key, Jsonb(payload), keep))
    assert isinstance(released, int)
    return released


def claimable(db: Db) -> list[int]:
    """The ids a claim of every job of 'default' would take, without taking them."""
    with db.transaction(force_rollback=True):
        return [row["id"] for row in db.execute("SELECT id FROM jobq.claim('default', 100, 'probe')")]


def listener(connect: Connect, *queues: str) -> psycopg.Connection[Any]:
    ears = connect()
    listen_to_queues(ears, queues)
    return ears


# -- sleep ------------------------------------------------------------------------------------------------


def test_a_sleep_gives_the_job_back_queued_runnable_at_its_end(db: Db) -> None:
    job_id, lease = running(db)
    until = later(db, "1 hour")

    slept = sleep(db, job_id, lease, until)

    row = job(db, job_id)
    assert (slept, row["status"], row["run_at"], row["attempts"]) == (False, "queued", until, 0)


def test_a_sleeping_job_is_not_claimed_before_its_end(db: Db) -> None:
    job_id, lease = running(db)

    sleep(db, job_id, lease, later(db, "1 hour"))

    assert claimable(db) == []


def test_a_sleep_spends_no_attempt_and_the_lease_given_back(db: Db) -> None:
    job_id, lease = running(db)
    sleep(db, job_id, lease, later(db, "1 hour"))
    make_runnable(db, job_id)

    claimed = claim_one(db)

    assert (claimed["attempts"], claimed["lease"]) == (1, lease + 1)
    assert sqlstate_of(db, "SELECT jobq.checkpoint(%s, %s, 'x', '1')", (job_id, lease)) == "JQ001"


def test_a_sleep_run_again_early_keeps_its_first_end(db: Db) -> None:
    job_id, lease = running(db)
    first_end = later(db, "1 hour")
    sleep(db, job_id, lease, first_end)
    make_runnable(db, job_id)
    lease = claim_one(db)["lease"]

    slept = sleep(db, job_id, lease, later(db, "5 hours"))

    assert (slept, job(db, job_id)["run_at"]) == (False, first_end)
    assert [row["result"] for row in steps(db, job_id)] == [
        {"until": scalar(db, "SELECT to_jsonb(%s::timestamptz)", (first_end,))}
    ]


def test_a_sleep_run_again_once_past_its_end_returns_true_and_the_job_goes_on(db: Db) -> None:
    job_id, lease = running(db)
    sleep(db, job_id, lease, later(db, "100 milliseconds"))
    db.execute("SELECT pg_sleep(0.15)")
    lease = claim_one(db)["lease"]  # runnable now, without help

    slept = sleep(db, job_id, lease, later(db, "1 hour"))

    assert (slept, status(db, job_id)) == (True, "running")
    assert [row["attempt"] for row in steps(db, job_id)] == [1]


def test_a_sleep_whose_end_has_passed_at_the_first_call_is_recorded_and_returns_true(db: Db) -> None:
    job_id, lease = running(db)

    slept = sleep(db, job_id, lease, later(db, "-1 second"))

    assert (slept, status(db, job_id)) == (True, "running")
    assert [(row["name"], row["kind"]) for row in steps(db, job_id)] == [("nap", "sleep")]


def test_jobq_job_shows_the_sleep_a_job_sleeps(db: Db) -> None:
    job_id, lease = running(db)
    until = later(db, "1 hour")

    sleep(db, job_id, lease, until)

    shown = waiting_for(db, job_id)
    assert (shown["sleep"], datetime.fromisoformat(shown["until"])) == ("nap", until)


def test_a_sleep_across_a_change_of_the_sessions_utc_offset_ends_at_its_until(db: Db) -> None:
    """Across a change of daylight saving time, statement_timestamp() + (until - statement_timestamp())
    is not until: the difference comes back in days, and a day in Europe/Paris may last 23 or 25 hours."""
    db.execute("SET TIME ZONE 'Europe/Paris'")
    until = scalar(  # a week after the next change of offset
        db,
        "SELECT min(t) + interval '7 days' FROM generate_series(now() + interval '1 day',"
        " now() + interval '1 year', interval '1 day') AS t"
        " WHERE extract(timezone FROM t) <> extract(timezone FROM now())",
    )
    job_id, lease = running(db)

    sleep(db, job_id, lease, until)

    assert job(db, job_id)["run_at"] == until
    assert waiting_for(db, job_id)["sleep"] == "nap"


def test_a_sleep_of_nearly_10_years_is_accepted(db: Db) -> None:
    """until may be up to 10 calendar years ahead: more days than the 3,600 that interval '10 years' stands
    for when two intervals are compared."""
    job_id, lease = running(db)
    until = later(db, "10 years") - timedelta(days=1)

    slept = sleep(db, job_id, lease, until)

    assert (slept, job(db, job_id)["run_at"]) == (False, until)


def test_a_sleep_of_a_job_asked_to_cancel_cancels_it(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    slept = sleep(db, job_id, lease, later(db, "1 hour"))

    assert (slept, status(db, job_id)) == (False, "cancelled")


def test_a_sleep_under_a_stale_lease_is_refused_with_jq001(db: Db) -> None:
    job_id, lease = running(db)
    make_stale(db, job_id)
    db.execute("SELECT jobq.reap()")
    make_runnable(db, job_id)
    claim_one(db)

    refused = sqlstate_of(db, "SELECT jobq.sleep(%s, %s, 'nap', now() + interval '1 hour')", (job_id, lease))

    assert (refused, status(db, job_id), steps(db, job_id)) == ("JQ001", "running", [])


# -- await_signal and signal --------------------------------------------------------------------------------


def test_await_of_a_key_already_signalled_returns_its_payload_at_once(db: Db) -> None:
    signal(db, "approval", {"approved_by": "ada"})
    job_id, lease = running(db)

    payload = scalar(db, "SELECT jobq.await_signal(%s, %s, 'approval')", (job_id, lease))

    assert (payload, status(db, job_id)) == ({"approved_by": "ada"}, "running")
    assert steps(db, job_id) == [
        {"name": "approval", "kind": "signal", "result": {"payload": {"approved_by": "ada"}}, "attempt": 1}
    ]


def test_a_signal_sent_without_a_payload_is_told_from_a_parked_await(db: Db) -> None:
    db.execute("SELECT jobq.signal('approval')")
    job_id, lease = running(db)

    row = db.execute(
        "SELECT a IS NULL AS parked, a = 'null'::jsonb AS json_null"
        " FROM jobq.await_signal(%s, %s, 'approval') AS a",
        (job_id, lease),
    ).fetchone()

    assert row == {"parked": False, "json_null": True}


def test_await_of_a_key_not_signalled_parks_the_job_waiting_with_its_attempt_given_back(db: Db) -> None:
    job_id, lease = running(db)

    park(db, job_id, lease)

    row = job(db, job_id)
    assert (row["status"], row["attempts"]) == ("waiting", 0)
    assert claimable(db) == []


def test_jobq_job_shows_the_key_a_parked_job_awaits_and_its_timeout(db: Db) -> None:
    job_id, lease = running(db)

    expected = db.execute(
        "SELECT jobq.await_signal(%s, %s, 'approval', '1 hour') AS parked,"
        " statement_timestamp() + interval '1 hour' AS timeout_at",
        (job_id, lease),
    ).fetchone()

    assert expected is not None and expected["parked"] is None
    shown = waiting_for(db, job_id)
    timeout_at = datetime.fromisoformat(shown["timeout_at"])
    assert (shown["signal"], timeout_at) == ("approval", expected["timeout_at"])


def test_a_job_awaiting_without_a_timeout_shows_none(db: Db) -> None:
    job_id, lease = running(db)

    park(db, job_id, lease)

    assert waiting_for(db, job_id) == {"signal": "approval", "timeout_at": None}


def test_a_signal_releases_exactly_the_jobs_waiting_for_its_key(db: Db) -> None:
    first, second, other = running(db), running(db), running(db)
    park(db, *first)
    park(db, *second)
    park(db, *other, key="another")

    released = signal(db, "approval", "yes")

    assert released == 2
    assert [status(db, job_id) for job_id, _ in (first, second, other)] == ["queued", "queued", "waiting"]
    assert sorted(claimable(db)) == [first[0], second[0]]


def test_a_released_job_run_again_gets_the_payload_from_its_await(db: Db) -> None:
    job_id, lease = running(db)
    park(db, job_id, lease)
    signal(db, "approval", {"approved_by": "ada"})
    claimed = claim_one(db)

    payload = scalar(db, "SELECT jobq.await_signal(%s, %s, 'approval')", (job_id, claimed["lease"]))

    assert (payload, claimed["attempts"]) == ({"approved_by": "ada"}, 1)
    assert steps(db, job_id) == [
        {"name": "approval", "kind": "signal", "result": {"payload": {"approved_by": "ada"}}, "attempt": 1}
    ]


def test_a_signal_notifies_the_queue_of_each_job_it_releases_once(db: Db, connect: Connect) -> None:
    park(db, *running(db, "emails"))
    park(db, *running(db, "emails"))
    park(db, *running(db, "reports"))
    park(db, *running(db, "other"), key="another")
    ears = listener(connect, "emails", "reports", "other")
    notifications_before_marker(ears, db)

    signal(db, "approval")

    assert sorted(notifications_before_marker(ears, db)) == [("jobq_emails", ""), ("jobq_reports", "")]


def test_a_signal_that_releases_nobody_notifies_nobody(db: Db, connect: Connect) -> None:
    park(db, *running(db), key="another")
    ears = listener(connect, "default")
    notifications_before_marker(ears, db)

    assert signal(db, "approval") == 0

    assert notifications_before_marker(ears, db) == []


def test_the_first_signal_of_a_key_wins(db: Db) -> None:
    job_id, lease = running(db)
    park(db, job_id, lease)
    assert signal(db, "approval", "first") == 1

    assert signal(db, "approval", "second") == 0

    lease = claim_one(db)["lease"]
    assert scalar(db, "SELECT jobq.await_signal(%s, %s, 'approval')", (job_id, lease)) == "first"


def test_an_await_after_the_signal_gets_the_first_payload(db: Db) -> None:
    signal(db, "approval", "first")
    signal(db, "approval", "second")
    job_id, lease = running(db)

    assert scalar(db, "SELECT jobq.await_signal(%s, %s, 'approval')", (job_id, lease)) == "first"


def test_a_cancelled_waiting_job_is_not_counted_nor_released_by_the_signal(db: Db) -> None:
    cancelled, still = running(db), running(db)
    park(db, *cancelled)
    park(db, *still)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (cancelled[0],))

    assert signal(db, "approval") == 1

    assert (status(db, cancelled[0]), status(db, still[0])) == ("cancelled", "queued")
    assert steps(db, cancelled[0]) == []


def test_await_of_a_job_asked_to_cancel_cancels_it_instead_of_parking(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    park(db, job_id, lease)

    assert status(db, job_id) == "cancelled"
    assert scalar(db, "SELECT count(*) FROM jobq.signal_waits") == 0
    assert signal(db, "approval") == 0


def test_await_under_a_stale_lease_is_refused_with_jq001_and_parks_nothing(db: Db) -> None:
    job_id, lease = running(db)
    make_stale(db, job_id)
    db.execute("SELECT jobq.reap()")
    make_runnable(db, job_id)
    claim_one(db)

    refused = sqlstate_of(db, "SELECT jobq.await_signal(%s, %s, 'approval')", (job_id, lease))

    assert (refused, status(db, job_id)) == ("JQ001", "running")
    assert scalar(db, "SELECT count(*) FROM jobq.signal_waits") == 0


# -- timeouts, and the tick ---------------------------------------------------------------------------------


def park_past_its_timeout(db: Db) -> tuple[int, int]:
    """A job parked on 'approval' with a 1 ms timeout, which has passed: (id, lease)."""
    job_id, lease = running(db)
    park(db, job_id, lease, timeout="1 millisecond")
    db.execute("SELECT pg_sleep(0.01)")
    return job_id, lease


def test_tick_ends_a_wait_past_its_timeout_with_a_timed_out_outcome(db: Db, connect: Connect) -> None:
    job_id, _ = park_past_its_timeout(db)
    ears = listener(connect, "default")
    notifications_before_marker(ears, db)

    db.execute("SELECT jobq.tick()")

    assert status(db, job_id) == "queued"
    assert steps(db, job_id) == [
        {"name": "approval", "kind": "signal", "result": {"timed_out": True}, "attempt": 1}
    ]
    assert notifications_before_marker(ears, db) == [("jobq_default", "")]


def test_tick_leaves_a_wait_before_its_timeout(db: Db) -> None:
    job_id, lease = running(db)
    park(db, job_id, lease, timeout="1 hour")

    db.execute("SELECT jobq.tick()")

    assert status(db, job_id) == "waiting"


def test_await_after_a_timeout_raises_jq005_even_once_the_signal_was_sent(db: Db) -> None:
    job_id, _ = park_past_its_timeout(db)
    db.execute("SELECT jobq.tick()")
    assert signal(db, "approval", "too late") == 0
    lease = claim_one(db)["lease"]

    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT jobq.await_signal(%s, %s, 'approval', '1 hour')", (job_id, lease))

    assert raised.value.sqlstate == "JQ005"
    assert status(db, job_id) == "running"


def test_tick_deletes_the_key_of_a_wait_it_ended(db: Db) -> None:
    park_past_its_timeout(db)

    db.execute("SELECT jobq.tick()")

    assert scalar(db, "SELECT count(*) FROM jobq.signals") == 0


def test_tick_deletes_a_signal_past_its_keep_so_a_later_await_parks(db: Db) -> None:
    signal(db, "approval", "yes", keep="0 s")
    signal(db, "kept", "yes")

    db.execute("SELECT jobq.tick()")

    assert [row["key"] for row in db.execute("SELECT key FROM jobq.signals")] == ["kept"]
    job_id, lease = running(db)
    park(db, job_id, lease)


# -- held jobs ----------------------------------------------------------------------------------------------


def test_a_held_job_is_waiting_and_not_claimed(db: Db) -> None:
    job_id = enqueue(db, hold=True)

    assert (status(db, job_id), waiting_for(db, job_id)) == ("waiting", {"hold": True})
    assert claimable(db) == []


def test_a_held_job_keeps_the_options_it_was_enqueued_with(db: Db) -> None:
    job_id = enqueue(
        db,
        "emails",
        {"to": "ada"},
        hold=True,
        priority=5,
        max_attempts=2,
        task="send",
        headers=Jsonb({"tenant": "a"}),
    )

    row = job(db, job_id)

    kept = ("queue", "payload", "priority", "max_attempts", "task", "headers")
    assert {name: row[name] for name in kept} == {
        "queue": "emails",
        "payload": {"to": "ada"},
        "priority": 5,
        "max_attempts": 2,
        "task": "send",
        "headers": {"tenant": "a"},
    }


def test_enqueueing_a_held_job_wakes_no_worker(db: Db, connect: Connect) -> None:
    ears = listener(connect, "default")

    enqueue(db, hold=True)

    assert notifications_before_marker(ears, db) == []


def test_unhold_releases_the_held_jobs_and_says_how_many(db: Db) -> None:
    first, second = enqueue(db, hold=True), enqueue(db, hold=True)

    released = scalar(db, "SELECT jobq.unhold(%s)", ([first, second],))

    assert released == 2
    assert [status(db, job_id) for job_id in (first, second)] == ["queued", "queued"]
    assert [waiting_for(db, job_id) for job_id in (first, second)] == [None, None]
    assert [job(db, job_id)["control"] for job_id in (first, second)] == [None, None]  # a plain job again
    assert sorted(claimable(db)) == [first, second]


def test_unhold_notifies_the_queues_of_the_jobs_it_releases(db: Db, connect: Connect) -> None:
    held = [enqueue(db, "emails", hold=True), enqueue(db, "reports", hold=True)]
    ears = listener(connect, "emails", "reports")
    notifications_before_marker(ears, db)

    db.execute("SELECT jobq.unhold(%s)", (held,))

    assert sorted(notifications_before_marker(ears, db)) == [("jobq_emails", ""), ("jobq_reports", "")]


def test_an_unheld_job_still_runs_at_its_run_at(db: Db) -> None:
    job_id = enqueue(db, hold=True, run_at=later(db, "1 hour"))

    db.execute("SELECT jobq.unhold(%s)", ([job_id],))

    assert status(db, job_id) == "queued"
    assert claimable(db) == []


def test_unhold_leaves_the_jobs_that_are_not_held_alone(db: Db) -> None:
    queued = enqueue(db)
    parent = enqueue(db, "parents")
    child = enqueue(db, "parents", depends_on=[parent])
    parked, lease = running(db, "parked")
    park(db, parked, lease)
    released = enqueue(db, hold=True)
    db.execute("SELECT jobq.unhold(%s)", ([released],))
    cancelled = enqueue(db, hold=True)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (cancelled,))

    count = scalar(db, "SELECT jobq.unhold(%s)", ([queued, child, parked, released, cancelled, 2**62],))

    assert count == 0
    assert [status(db, job_id) for job_id in (queued, child, parked, released, cancelled)] == [
        "queued",
        "waiting",
        "waiting",
        "queued",
        "cancelled",
    ]


@pytest.mark.parametrize(
    ("option", "value"),
    [("unique_key", "k"), ("concurrency_key", "k"), ("depends_on", "parent")],
)
def test_hold_with_an_option_a_held_job_cannot_have_is_refused_with_22023(
    db: Db, option: str, value: str
) -> None:
    parent = enqueue(db)
    argument: Any = [parent] if value == "parent" else value
    before = scalar(db, "SELECT count(*) FROM jobq.jobs")

    with pytest.raises(psycopg.Error) as raised:
        enqueue(db, hold=True, **{option: argument})

    assert (raised.value.sqlstate, option in (raised.value.diag.message_primary or "")) == ("22023", True)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == before


def test_hold_null_is_refused_with_22004(db: Db) -> None:
    assert sqlstate_of(db, "SELECT jobq.enqueue('default', '{}', hold => NULL)") == "22004"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_hold_false_enqueues_a_plain_job(db: Db) -> None:
    job_id = enqueue(db, hold=False)

    assert (status(db, job_id), job(db, job_id)["control"]) == ("queued", None)
