"""Running tasks, through pgjobq.testing.run_due: what each outcome leaves in the database.

run_due settles each job as the worker does (its settlement is the worker's own), so these tests are
also the tests of what a worker does with a task's outcome: a return completes it, an exception retries
it, Discard and retry_on fail it at once, a timeout fails the attempt, a task this registry does not know
is handed back without spending an attempt, and failed for good once older than the grace period.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgjobq
from pgjobq import Discard, InvalidArgument, Job, Retry, Snooze, Tasks
from pgjobq.testing import Ran, run_due, run_due_async

from helpers.processes import wait_until
from helpers.sqlhelpers import Connect, Db, scalar, statuses

tasks = Tasks(queue="work")
released = threading.Event()  # lets the thread of a sync task that timed out end


@tasks.task
def send_welcome(user_id: int, language: str = "en") -> str:
    return f"welcome {user_id} ({language})"


@tasks.task
def whoami(job: Job) -> dict[str, Any]:
    return {"id": job.id, "attempt": job.attempts, "task": job.task}


@tasks.task(max_attempts=5)
def flaky(message: str) -> None:
    raise RuntimeError(message)


@tasks.task(max_attempts=5)
def discarding(reason: str) -> None:
    raise Discard(reason)


@tasks.task(max_attempts=5, retry_on=(ConnectionError,))
def charge(error: str) -> None:
    raise {"connection": ConnectionError, "value": ValueError}[error]("the service said no")


@tasks.task(retry_on=(ConnectionError,))
def snoozing(seconds: int) -> None:
    raise Snooze(seconds)


@tasks.task(timeout=0.2)
def stuck() -> None:
    released.wait(60)


@tasks.task(timeout=0.2)
async def stuck_async() -> None:
    await asyncio.Event().wait()


@tasks.task
async def render(report_id: int, job: Job) -> dict[str, int]:
    await asyncio.sleep(0)
    return {"report": report_id, "attempt": job.attempts}


@tasks.task
def retry_at_once() -> None:
    raise Retry(0)


@tasks.task
def unencodable() -> object:
    return {1, 2}


charges: list[int] = []  # the side effects of the durable tasks' step


@tasks.task
def _charge(order: int) -> str:
    charges.append(order)
    return f"ch_{order}"


@tasks.task
def durable_charge(order: int, job: Job, nap: float = 3600) -> str:
    charged: str = job.step("charge", _charge, order)
    job.sleep(nap)  # 0: over at once, the job goes on
    return charged


@tasks.task
async def durable_charge_async(order: int, job: Job) -> str:
    charged: str = await job.step("charge", _charge, order)
    return charged


@pytest.fixture(autouse=True)
def free_stuck_threads() -> Iterator[None]:
    released.clear()
    yield
    released.set()


def row(db: Db, job_id: int) -> dict[str, Any]:
    found = db.execute(
        "SELECT status, attempts, last_error, run_at > now() AS later FROM jobq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert found is not None
    return found


# -- done -----------------------------------------------------------------------------------


def test_a_task_runs_with_its_arguments_and_its_result_is_stored(db: Db) -> None:
    job_id = send_welcome.enqueue(db, user_id=7)

    [ran] = run_due(db, tasks)

    assert (ran.job.id, ran.status, ran.result) == (job_id, "done", "welcome 7 (en)")
    assert pgjobq.job(db, job_id).result == "welcome 7 (en)"


def test_a_task_enqueued_from_sql_runs(db: Db) -> None:
    db.execute("""SELECT jobq.enqueue('work', '{"user_id": 7, "language": "fr"}', task => 'send_welcome')""")

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.result) == ("done", "welcome 7 (fr)")


def test_the_parameter_annotated_job_receives_the_job(db: Db) -> None:
    job_id = whoami.enqueue(db)

    [ran] = run_due(db, tasks)

    assert ran.result == {"id": job_id, "attempt": 1, "task": "whoami"}


def test_an_async_task_runs_from_sync_code(db: Db) -> None:
    render.enqueue(db, report_id=3)

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.result) == ("done", {"report": 3, "attempt": 1})


def test_a_result_json_cannot_hold_fails_the_attempt(db: Db) -> None:
    unencodable.enqueue(db)

    [ran] = run_due(db, tasks)

    assert ran.status == "retried"
    assert ran.error is not None and "InvalidArgument" in ran.error


# -- failures -------------------------------------------------------------------------------


def test_an_exception_fails_the_attempt_to_be_retried(db: Db) -> None:
    job_id = flaky.enqueue(db, message="boom")

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.error) == ("retried", "RuntimeError: boom")
    assert row(db, job_id) == {"status": "queued", "attempts": 1, "last_error": "RuntimeError: boom",
                               "later": True}  # fmt: skip


def test_discard_fails_the_job_at_once_whatever_attempts_are_left(db: Db) -> None:
    job_id = discarding.enqueue(db, reason="the user is gone")

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.error) == ("failed", "the user is gone")
    assert row(db, job_id)["status"] == "failed"


def test_discard_from_sql_fails_the_job_at_once(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "work", {}, max_attempts=5)
    claimed = pgjobq.claim(db, "work", 1, "w1")

    db.execute("SELECT jobq.fail(%s, 'no retry can help', %s, retry => false)", (job_id, claimed[0].lease))

    assert row(db, job_id)["status"] == "failed"


def test_retry_on_retries_the_exceptions_it_lists(db: Db) -> None:
    charge.enqueue(db, error="connection")

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.error) == ("retried", "ConnectionError: the service said no")


def test_retry_on_fails_any_other_exception_at_once_naming_it(db: Db) -> None:
    charge.enqueue(db, error="value")

    [ran] = run_due(db, tasks)

    assert ran.status == "failed"
    assert (
        ran.error
        == "task charge retries only on ConnectionError, not on ValueError: ValueError: the service said no"
    )
    assert isinstance(ran.exception, Discard) and isinstance(ran.exception.__cause__, ValueError)


def test_retry_on_leaves_snooze_alone(db: Db) -> None:
    job_id = snoozing.enqueue(db, seconds=60)

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.error) == ("snoozed", None)
    assert row(db, job_id) == {"status": "queued", "attempts": 0, "last_error": None, "later": True}


def test_a_payload_that_no_longer_fits_the_task_fails_at_once(db: Db) -> None:
    db.execute("""SELECT jobq.enqueue('work', '{"user": 7}', max_attempts => 5, task => 'send_welcome')""")

    [ran] = run_due(db, tasks)

    assert ran.status == "failed"
    assert ran.error is not None and "missing a required argument: 'user_id'" in ran.error


# -- timeouts -------------------------------------------------------------------------------


def test_a_sync_task_past_its_timeout_fails_the_attempt(db: Db) -> None:
    stuck.enqueue(db)

    [ran] = run_due(db, tasks)

    assert ran.status == "retried"
    assert ran.error is not None
    assert ran.error.startswith("TimeoutError: task stuck ran past its timeout of 0.2 s")


def test_an_async_task_past_its_timeout_is_cancelled_and_fails_the_attempt(db: Db) -> None:
    stuck_async.enqueue(db)

    [ran] = run_due(db, tasks)

    assert (ran.status, ran.error) == (
        "retried",
        "TimeoutError: task stuck_async ran past its timeout of 0.2 s",
    )


def test_a_sync_task_that_ends_after_its_timeout_has_its_result_dropped_with_a_warning(
    db: Db, caplog: pytest.LogCaptureFixture
) -> None:
    stuck.enqueue(db)
    with caplog.at_level(logging.WARNING, "pgjobq.tasks"):
        [ran] = run_due(db, tasks)

        released.set()

        assert wait_until(lambda: any("after its timeout" in r.getMessage() for r in caplog.records))
    assert ran.status == "retried"
    assert "task stuck of job" in caplog.text and "its result is dropped" in caplog.text


# -- a task this registry does not know -------------------------------------------------------


def test_an_unknown_task_is_handed_back_without_spending_an_attempt(
    db: Db, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = pgjobq.enqueue(db, "work", {"invoice": 1}, task="send_invoice")

    with caplog.at_level(logging.WARNING, "pgjobq"):
        [ran] = run_due(db, tasks)

    assert ran.status == "snoozed"
    assert ran.error is not None and "send_invoice" in ran.error
    assert row(db, job_id) | {"last_error": None} == {"status": "queued", "attempts": 0, "last_error": None,
                                                     "later": True}  # fmt: skip
    assert any("send_invoice" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_plain_job_in_a_tasks_queue_is_handed_back_too(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "work", {})

    [ran] = run_due(db, tasks)

    assert ran.status == "snoozed"
    assert row(db, job_id)["attempts"] == 0


def test_an_unknown_task_older_than_the_grace_period_fails_with_the_error(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "work", {"invoice": 1}, task="send_invoice")
    db.execute("UPDATE jobq.jobs SET created_at = now() - interval '2 hours' WHERE id = %s", (job_id,))

    [ran] = run_due(db, tasks)  # the default grace: an hour

    assert ran.status == "failed"
    assert row(db, job_id)["status"] == "failed"
    assert "unknown task 'send_invoice'" in str(row(db, job_id)["last_error"])


# -- which jobs run_due runs, and how ---------------------------------------------------------


def test_jobs_run_in_claim_order(db: Db) -> None:
    low = send_welcome.with_options(priority=0).enqueue(db, user_id=1)
    high = send_welcome.with_options(priority=9).enqueue(db, user_id=2)

    assert [ran.job.id for ran in run_due(db, tasks)] == [high, low]


def test_a_job_due_later_is_not_run(db: Db) -> None:
    db.execute(
        """SELECT jobq.enqueue('work', '{"user_id": 1}', run_at => now() + interval '1 hour',
                               task => 'send_welcome')"""
    )

    assert run_due(db, tasks) == []


def test_each_job_runs_at_most_once_per_call(db: Db) -> None:
    job_id = retry_at_once.enqueue(db)

    first = run_due(db, tasks)
    second = run_due(db, tasks)

    assert [(ran.job.id, ran.status, ran.job.attempts) for ran in first + second] == [
        (job_id, "retried", 1),
        (job_id, "retried", 2),
    ]


def test_only_the_queues_named_run(db: Db) -> None:
    send_welcome.enqueue(db, user_id=1)
    pgjobq.enqueue(db, "elsewhere", {})

    assert [ran.job.queue for ran in run_due(db, tasks)] == ["work"]
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE queue = 'elsewhere'") == "queued"


def test_a_plain_handler_runs_the_jobs_of_the_queues_named(db: Db) -> None:
    pgjobq.enqueue(db, "plain", {"n": 2})

    [ran] = run_due(db, lambda job: job.payload["n"] * 2, queues=["plain"])

    assert (ran.status, ran.result) == ("done", 4)


def test_a_plain_handler_needs_queues() -> None:
    with pytest.raises(InvalidArgument, match="queues must be given with a handler"):
        run_due(None, lambda job: None)  # type: ignore[arg-type]


def test_a_task_that_enqueues_itself_for_ever_stops_at_the_limit(db: Db) -> None:
    pgjobq.enqueue(db, "loop", {})

    def again(job: Job) -> None:
        pgjobq.enqueue(db, "loop", {})

    with pytest.raises(RuntimeError, match="run_due ran 3 jobs and more are due"):
        run_due(db, again, queues=["loop"], limit=3)

    assert statuses(db) == {"done": 3, "queued": 1}  # the fourth handed back unstarted
    assert scalar(db, "SELECT attempts FROM jobq.jobs WHERE status = 'queued'") == 0


def test_in_a_transaction_the_runs_roll_back_with_it(db: Db, connect: Connect) -> None:
    conn = connect(autocommit=False)
    send_welcome.enqueue(conn, user_id=1)

    [ran] = run_due(conn, tasks)
    conn.rollback()

    assert ran.status == "done"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_run_due_async_runs_sync_and_async_tasks(db: Db, dsn: str) -> None:
    send_welcome.enqueue(db, user_id=1)
    render.enqueue(db, report_id=2)

    async def run() -> list[Ran]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await run_due_async(conn, tasks)

    assert [(ran.status, ran.result) for ran in asyncio.run(run())] == [
        ("done", "welcome 1 (en)"),
        ("done", {"report": 2, "attempt": 1}),
    ]


# -- durable tasks (extension 0.11.0) -------------------------------------------------------


def test_a_durable_task_records_its_steps_on_the_callers_connection_and_its_sleep_suspends_it(db: Db) -> None:
    charges.clear()
    job_id = durable_charge.enqueue(db, order=5)

    [ran] = run_due(db, tasks)

    assert (ran.job.id, ran.status) == (job_id, "snoozed")  # asleep for an hour: queued, attempt given back
    assert isinstance(ran.exception, pgjobq.Suspended)
    assert (row(db, job_id)["status"], row(db, job_id)["attempts"], row(db, job_id)["later"]) == (
        "queued",
        0,
        True,
    )
    steps = pgjobq.job(db, job_id).steps
    assert steps is not None and steps.keys() == {"charge", "sleep:1"} and steps["charge"] == "ch_5"
    assert charges == [5]


def test_durable_tasks_sync_and_async_record_their_steps_under_run_due_and_run_due_async(db: Db) -> None:
    charges.clear()
    durable_charge.enqueue(db, order=6, nap=0)
    durable_charge_async.enqueue(db, order=7)
    first = run_due(db, tasks)
    durable_charge.enqueue(db, order=8, nap=0)
    durable_charge_async.enqueue(db, order=9)

    second = asyncio.run(_run_due_async_on(db))

    assert [(r.status, r.result) for r in first] == [("done", "ch_6"), ("done", "ch_7")]
    assert [(r.status, r.result) for r in second] == [("done", "ch_8"), ("done", "ch_9")]
    assert charges == [6, 7, 8, 9]
    assert [(pgjobq.job(db, r.job.id).steps or {}).get("charge") for r in first + second] == [
        "ch_6",
        "ch_7",
        "ch_8",
        "ch_9",
    ]


async def _run_due_async_on(db: Db) -> list[Ran]:
    async with await psycopg.AsyncConnection.connect(db.info.dsn, autocommit=True) as conn:
        return await run_due_async(conn, tasks)
