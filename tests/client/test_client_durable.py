"""The client's side of durable execution (extension 0.11.0): signal, unhold, enqueue(hold=True), steps,
and what job() tells of a durable job (steps, step_attempts, progress, waiting_for).

The jobs are put in their durable states with the extension's own worker-side functions (jobq.checkpoint,
jobq.sleep, jobq.await_signal, jobq.progress), which tests/worker/test_durable.py drives through a real
Worker.  On extension 0.10.0 every call that needs 0.11.0 raises IncompatibleExtension saying so, and
the rest (enqueue without hold, job) keeps working there.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from throwaway_pg import ThrowawayPostgres

import pgjobq
import pgjobq.aio
from pgjobq import IncompatibleExtension, InvalidArgument, JobNotFound, Tasks
from pgjobq._client import proto

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, scalar

T = TypeVar("T")

tasks = Tasks(queue="emails")


@tasks.task
def send_welcome(user_id: int) -> None: ...


def run(dsn: str, body: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
    """body(conn) on a fresh autocommit AsyncConnection to dsn, in a new event loop."""

    async def main() -> T:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await body(conn)

    return asyncio.run(main())


def status(db: Db, job_id: int) -> str:
    return str(scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)))


def running(db: Db, queue: str = "default") -> tuple[int, int]:
    """A new job of queue, claimed: its id and lease."""
    enqueue(db, queue)
    claimed = claim_one(db, queue)
    return claimed["id"], claimed["lease"]


def parked_on_signal(db: Db, key: str, queue: str = "default", timeout: str | None = None) -> int:
    """A job of queue waiting (jobq.await_signal) for the signal key; its id."""
    job_id, lease = running(db, queue)
    db.execute("SELECT jobq.await_signal(%s, %s, %s, %s::interval)", (job_id, lease, key, timeout))
    assert status(db, job_id) == "waiting"
    return job_id


def sleeping(db: Db, name: str = "nap") -> int:
    """A job in a durable sleep (jobq.sleep) of an hour; its id."""
    job_id, lease = running(db)
    db.execute("SELECT jobq.sleep(%s, %s, %s, now() + interval '1 hour')", (job_id, lease, name))
    return job_id


@pytest.fixture
def old_db(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database of its own at extension 0.10.0, which has no durable execution; dropped after the test."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.10.0'")
        yield conn


# -- enqueue(hold=True) and unhold --------------------------------------------------------------


def test_a_held_job_waits_and_no_claim_takes_it(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "emails", {"to": "ada"}, hold=True)

    assert pgjobq.claim(db, "emails", 10, "w") == []
    assert status(db, job_id) == "waiting"


def test_unhold_queues_the_held_jobs_and_returns_how_many(db: Db) -> None:
    held = [pgjobq.enqueue(db, "emails", {"n": n}, hold=True) for n in range(2)]

    released = pgjobq.unhold(db, held)

    assert released == 2
    assert sorted(job.id for job in pgjobq.claim(db, "emails", 10, "w")) == held


def test_unhold_leaves_the_jobs_that_are_not_held_alone(db: Db) -> None:
    held = pgjobq.enqueue(db, "emails", {}, hold=True)
    plain = pgjobq.enqueue(db, "emails", {})

    released = pgjobq.unhold(db, [held, plain, 424242])

    assert released == 1
    assert pgjobq.unhold(db, [held]) == 0  # released already


def test_a_held_job_keeps_its_task(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "emails", {}, task="send_welcome", hold=True)

    assert pgjobq.job(db, job_id).task == "send_welcome"


def test_hold_with_a_unique_key_is_refused_by_the_database(db: Db) -> None:
    with pytest.raises(InvalidArgument, match="hold cannot be combined with unique_key") as refused:
        pgjobq.enqueue(db, "emails", {}, unique_key="k", hold=True)

    assert refused.value.sqlstate == "22023"
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_enqueue_without_hold_sends_the_statement_it_sent_before() -> None:
    for task, name in ((None, "enqueue"), ("send_welcome", "enqueue_task")):
        params = proto.enqueue_checked(
            "q", {}, unique_key=None, concurrency_key=None, depends_on=None, on_parent_failure="cancel",
            task=task,
        )  # fmt: skip
        call = proto.enqueue_call(
            params, priority=0, run_at=None, max_attempts=None, unique_scope="active", on_conflict="return",
            headers=None,
        )  # fmt: skip

        assert call.params is not None
        assert (call.name, "hold" in call.params) == (name, False)


def test_aio_enqueue_holds_and_unhold_releases(db: Db, dsn: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> tuple[str, int]:
        job_id = await pgjobq.aio.enqueue(conn, "emails", {}, hold=True)
        held = status(db, job_id)
        return held, await pgjobq.aio.unhold(conn, [job_id])

    assert run(dsn, body) == ("waiting", 1)


def test_a_task_with_options_hold_enqueues_its_job_held(db: Db) -> None:
    job_id = send_welcome.with_options(hold=True).enqueue(db, user_id=7)

    state = pgjobq.job(db, job_id)
    assert (state.task, state.status, state.waiting_for) == ("send_welcome", "waiting", {"hold": True})
    assert send_welcome.options.hold is False  # the task itself is unchanged


def test_a_task_with_options_hold_enqueues_held_on_an_async_connection_too(db: Db, dsn: str) -> None:
    job_id = run(dsn, lambda conn: send_welcome.with_options(hold=True).enqueue_async(conn, user_id=7))

    assert status(db, job_id) == "waiting"


def test_enqueue_many_of_a_task_refuses_hold(db: Db) -> None:
    with pytest.raises(InvalidArgument, match=r"hold \(with_options\) applies to one job"):
        send_welcome.with_options(hold=True).enqueue_many(db, [{"user_id": 1}])

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


# -- signal -------------------------------------------------------------------------------------


def test_signal_queues_the_jobs_waiting_for_its_key_and_returns_how_many(db: Db) -> None:
    waiting = [parked_on_signal(db, "approved:7"), parked_on_signal(db, "approved:7", queue="other")]
    elsewhere = parked_on_signal(db, "approved:8")

    released = pgjobq.signal(db, "approved:7", {"by": "ada"})

    assert released == 2
    assert [status(db, job_id) for job_id in (*waiting, elsewhere)] == ["queued", "queued", "waiting"]


def test_the_signals_payload_is_the_waits_recorded_outcome(db: Db) -> None:
    job_id = parked_on_signal(db, "approved:7")

    pgjobq.signal(db, "approved:7", {"by": "ada"})

    [step] = pgjobq.steps(db, job_id)
    assert (step.name, step.kind, step.result) == ("approved:7", "signal", {"payload": {"by": "ada"}})


def test_a_signal_without_payload_sends_json_null(db: Db) -> None:
    job_id = parked_on_signal(db, "go")

    pgjobq.signal(db, "go")

    assert pgjobq.steps(db, job_id)[0].result == {"payload": None}


def test_a_second_signal_of_a_key_releases_nothing(db: Db) -> None:
    pgjobq.signal(db, "go", 1)
    parked_later = running(db)

    again = pgjobq.signal(db, "go", 2)

    assert again == 0
    # the first signal is kept: a job that awaits the key now gets its payload at once
    payload = scalar(db, "SELECT jobq.await_signal(%s, %s, 'go')", parked_later)
    assert payload == 1


def test_signal_keeps_the_signal_for_keep(db: Db) -> None:
    pgjobq.signal(db, "go", keep=timedelta(hours=2))

    kept = scalar(db, "SELECT expires_at - signalled_at FROM jobq.signals WHERE key = 'go'")
    assert kept == timedelta(hours=2)


def test_signal_sends_in_the_callers_transaction(db: Db, connect: Connect) -> None:
    job_id = parked_on_signal(db, "go")
    conn = connect(autocommit=False)

    pgjobq.signal(conn, "go")
    before_commit = status(db, job_id)
    conn.commit()

    assert (before_commit, status(db, job_id)) == ("waiting", "queued")


def test_a_negative_keep_is_refused_by_the_database(db: Db) -> None:
    with pytest.raises(InvalidArgument, match="keep must be an interval between 0 and 10 years"):
        pgjobq.signal(db, "go", keep=timedelta(seconds=-1))


def test_aio_signal_returns_how_many_it_released(db: Db, dsn: str) -> None:
    parked_on_signal(db, "go")

    assert run(dsn, lambda conn: pgjobq.aio.signal(conn, "go", [1, 2])) == 1


# -- steps --------------------------------------------------------------------------------------


def test_steps_lists_what_the_job_recorded_oldest_first(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.checkpoint(%s, %s, 'fetch', '{\"rows\": 3}')", (job_id, lease))
    db.execute("SELECT jobq.checkpoint(%s, %s, 'store', 'null')", (job_id, lease))

    recorded = pgjobq.steps(db, job_id)

    assert [(s.name, s.kind, s.result, s.attempt) for s in recorded] == [
        ("fetch", "step", {"rows": 3}, 1),
        ("store", "step", None, 1),
    ]
    assert all(isinstance(s, pgjobq.Step) and isinstance(s.recorded_at, datetime) for s in recorded)
    assert recorded[0].recorded_at <= recorded[1].recorded_at


def test_steps_of_a_job_that_recorded_none_is_empty(db: Db) -> None:
    job_id = pgjobq.enqueue(db, "emails", {})

    assert pgjobq.steps(db, job_id) == []


def test_steps_of_an_unknown_job_raises_job_not_found(db: Db) -> None:
    with pytest.raises(JobNotFound):
        pgjobq.steps(db, 424242)


def test_aio_steps_gives_the_same_steps(db: Db, dsn: str) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.checkpoint(%s, %s, 'fetch', '[1]')", (job_id, lease))

    async_steps = run(dsn, lambda conn: pgjobq.aio.steps(conn, job_id))

    assert async_steps == pgjobq.steps(db, job_id)


# -- job(): steps, step_attempts, progress, waiting_for ------------------------------------------


def test_job_of_a_plain_job_has_no_steps_progress_or_wait(db: Db) -> None:
    state = pgjobq.job(db, pgjobq.enqueue(db, "emails", {}))

    assert (state.steps, state.step_attempts, state.progress, state.waiting_for) == (None, None, None, None)


def test_job_tells_the_steps_results_and_attempts_and_the_latest_progress(db: Db) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.checkpoint(%s, %s, 'fetch', '{\"rows\": 3}')", (job_id, lease))
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 1}')", (job_id, lease))
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 2}')", (job_id, lease))

    state = pgjobq.job(db, job_id)

    assert state.steps == {"fetch": {"rows": 3}}
    assert state.step_attempts == {"fetch": 1}
    assert state.progress == {"done": 2}


def test_job_says_a_held_job_waits_for_unhold(db: Db) -> None:
    state = pgjobq.job(db, pgjobq.enqueue(db, "emails", {}, hold=True))

    assert (state.status, state.waiting_for) == ("waiting", {"hold": True})


def test_job_says_which_signal_a_job_waits_for_and_until_when(db: Db) -> None:
    forever = pgjobq.job(db, parked_on_signal(db, "go"))
    bounded = pgjobq.job(db, parked_on_signal(db, "later", timeout="1 hour"))

    assert forever.waiting_for == {"signal": "go", "timeout_at": None}
    assert bounded.waiting_for is not None and bounded.waiting_for["signal"] == "later"
    assert datetime.fromisoformat(bounded.waiting_for["timeout_at"]) > datetime.now().astimezone()


def test_job_says_which_sleep_a_job_sleeps_and_until_when(db: Db) -> None:
    state = pgjobq.job(db, sleeping(db, "nap"))

    assert state.status == "queued"
    assert state.waiting_for is not None and state.waiting_for["sleep"] == "nap"
    assert datetime.fromisoformat(state.waiting_for["until"]) == state.run_at


def test_job_says_which_parents_a_job_waits_for(db: Db) -> None:
    parent = pgjobq.enqueue(db, "emails", {})
    child = pgjobq.enqueue(db, "emails", {}, depends_on=[parent])

    assert pgjobq.job(db, child).waiting_for == {"parents": [parent]}


def test_watch_tells_the_same_durable_fields_as_job(db: Db) -> None:
    job_id = parked_on_signal(db, "go")

    assert pgjobq.watch(db, job_id) == pgjobq.job(db, job_id)


def test_aio_job_tells_the_durable_fields(db: Db, dsn: str) -> None:
    job_id = pgjobq.enqueue(db, "emails", {}, hold=True)

    state = run(dsn, lambda conn: pgjobq.aio.job(conn, job_id))

    assert state.waiting_for == {"hold": True}


# -- bad input: refused before any SQL ----------------------------------------------------------


BAD_CALLS: dict[str, tuple[Callable[[psycopg.Connection[Any]], object], str]] = {
    "signal key not a string": (
        lambda c: pgjobq.signal(c, 7),  # type: ignore[arg-type]
        "key must be a string, got int",
    ),
    "signal key empty": (lambda c: pgjobq.signal(c, ""), "key must be 1 to 200 characters, got 0"),
    "signal key too long": (
        lambda c: pgjobq.signal(c, "k" * 201),
        "key must be 1 to 200 characters, got 201",
    ),
    "signal payload not JSON": (
        lambda c: pgjobq.signal(c, "go", {1, 2}),
        "payload is not serialisable as JSON",
    ),
    "signal payload NaN": (
        lambda c: pgjobq.signal(c, "go", float("nan")),
        "payload is not serialisable as JSON",
    ),
    "signal keep not a timedelta": (
        lambda c: pgjobq.signal(c, "go", keep=3600),  # type: ignore[arg-type]
        "keep must be a timedelta, got int",
    ),
    "unhold ids a string": (
        lambda c: pgjobq.unhold(c, "12"),  # type: ignore[arg-type]
        "ids must be a list",
    ),
    "unhold an id not an integer": (
        lambda c: pgjobq.unhold(c, [1, "2"]),  # type: ignore[list-item]
        "ids[] must be an integer, got str",
    ),
    "steps id not an integer": (
        lambda c: pgjobq.steps(c, "1"),  # type: ignore[arg-type]
        "id must be an integer, got str",
    ),
    "enqueue hold not a bool": (
        lambda c: pgjobq.enqueue(c, "q", {}, hold="yes"),  # type: ignore[call-overload]
        "hold must be a bool, got str",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_raises_invalid_argument_before_any_sql(connect: Connect, case: str) -> None:
    call, message = BAD_CALLS[case]
    conn = connect(autocommit=False)

    with pytest.raises(InvalidArgument, match=re.escape(message)):
        call(conn)

    assert conn.info.transaction_status == TransactionStatus.IDLE  # not even a BEGIN was sent


def test_aio_bad_input_raises_invalid_argument_too(dsn: str) -> None:
    with pytest.raises(InvalidArgument, match="key must be 1 to 200 characters, got 0"):
        run(dsn, lambda conn: pgjobq.aio.signal(conn, ""))


# -- extension 0.10.0 ---------------------------------------------------------------------------


OLD_CALLS: dict[str, tuple[Callable[[psycopg.Connection[Any]], object], str]] = {
    "signal": (lambda c: pgjobq.signal(c, "go"), "signals need"),
    "unhold": (lambda c: pgjobq.unhold(c, [1]), "held jobs need"),
    "steps": (lambda c: pgjobq.steps(c, 1), "steps need"),
    "enqueue hold": (lambda c: pgjobq.enqueue(c, "q", {}, hold=True), "held jobs need"),
    "enqueue task and hold": (lambda c: pgjobq.enqueue(c, "q", {}, task="t", hold=True), "held jobs need"),
}


@pytest.mark.parametrize("case", sorted(OLD_CALLS))
def test_a_durable_call_on_0_10_0_says_it_needs_0_11_0_and_changes_nothing(old_db: Db, case: str) -> None:
    call, what = OLD_CALLS[case]
    old_db.execute("SELECT jobq.enqueue('q', '{}')")

    with pytest.raises(IncompatibleExtension, match=rf"^{what} the pgjobq extension 0\.11\.0 or later: "):
        call(old_db)

    assert scalar(old_db, "SELECT count(*) FROM jobq.jobs") == 1


def test_aio_a_durable_call_on_0_10_0_says_it_needs_0_11_0(old_db: Db, pg_server: ThrowawayPostgres) -> None:
    dsn = pg_server.dsn(old_db.info.dbname)

    with pytest.raises(IncompatibleExtension, match=r"^signals need the pgjobq extension 0\.11\.0 or later"):
        run(dsn, lambda conn: pgjobq.aio.signal(conn, "go"))


def test_enqueue_and_job_still_work_on_0_10_0_without_durable_fields(old_db: Db) -> None:
    job_id = pgjobq.enqueue(old_db, "q", {}, hold=False)

    state = pgjobq.job(old_db, job_id)

    assert state.status == "queued"
    assert (state.steps, state.step_attempts, state.progress, state.waiting_for) == (None, None, None, None)
