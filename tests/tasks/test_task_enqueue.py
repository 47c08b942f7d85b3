"""Enqueueing tasks: checked before anything is written, stored as the job's task and payload, in the caller's
transaction, and visible to every language through jobq.jobs.task, jobq.job and jobq.schedules.

The client sends a task only when one is given, so that every call without one keeps working on
extension 0.8.0; a call with one there raises IncompatibleExtension, saying tasks need 0.9.0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq import IncompatibleExtension, InvalidArgument, Job, Tasks

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Connect, Db, scalar

tasks = Tasks(queue="emails")


@tasks.task(priority=3, max_attempts=5)
def send_welcome(user_id: int, language: str = "en") -> None: ...


@tasks.task(queue="reports")
def render_report(report_id: int, job: Job) -> None: ...


def jobs(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT queue, task, payload FROM jobq.jobs ORDER BY id").fetchall()


# -- enqueue --------------------------------------------------------------------------------


def test_enqueue_stores_the_task_its_arguments_and_its_options(db: Db) -> None:
    job_id = send_welcome.enqueue(db, user_id=7)

    row = db.execute(
        "SELECT queue, task, payload, priority, max_attempts FROM jobq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == {"queue": "emails", "task": "send_welcome", "payload": {"user_id": 7}, "priority": 3,
                   "max_attempts": 5}  # fmt: skip


def test_enqueue_commits_with_the_callers_transaction(db: Db, connect: Connect) -> None:
    conn = connect(autocommit=False)
    send_welcome.enqueue(conn, user_id=7)
    assert jobs(db) == []

    conn.commit()

    assert jobs(db) == [{"queue": "emails", "task": "send_welcome", "payload": {"user_id": 7}}]


def test_a_missing_argument_enqueues_nothing(db: Db) -> None:
    with pytest.raises(TypeError, match="missing a required argument: 'user_id'"):
        send_welcome.enqueue(db, language="fr")

    assert jobs(db) == []


def test_an_unknown_argument_enqueues_nothing(db: Db) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'user'"):
        send_welcome.enqueue(db, user_id=7, user=7)

    assert jobs(db) == []


def test_an_argument_json_cannot_hold_enqueues_nothing(db: Db) -> None:
    with pytest.raises(InvalidArgument, match="payload is not serialisable as JSON"):
        send_welcome.enqueue(db, user_id={7})

    assert jobs(db) == []


def test_the_job_parameter_is_filled_at_run_time_not_enqueued(db: Db) -> None:
    render_report.enqueue(db, report_id=3)

    assert jobs(db) == [{"queue": "reports", "task": "render_report", "payload": {"report_id": 3}}]


def test_with_options_enqueues_with_them_and_the_task_keeps_its_own(db: Db) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=1)

    first = send_welcome.with_options(run_at=later, priority=9, unique_key="welcome-7").enqueue(db, user_id=7)
    again = send_welcome.with_options(unique_key="welcome-7").enqueue(db, user_id=7)
    plain = send_welcome.enqueue(db, user_id=8)

    assert again == first  # on_conflict "return": the holder's id
    rows = db.execute("SELECT id, run_at, priority FROM jobq.jobs ORDER BY id").fetchall()
    assert rows == [{"id": first, "run_at": later, "priority": 9}, {"id": plain, "run_at": rows[1]["run_at"],
                                                                    "priority": 3}]  # fmt: skip


def test_enqueue_async_stores_the_task(db: Db, dsn: str) -> None:
    async def enqueue() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await send_welcome.enqueue_async(conn, user_id=7)

    job_id = asyncio.run(enqueue())

    assert scalar(db, "SELECT task FROM jobq.jobs WHERE id = %s", (job_id,)) == "send_welcome"


# -- enqueue_many -------------------------------------------------------------------------


def test_enqueue_many_enqueues_one_job_per_element_in_order(db: Db) -> None:
    ids = send_welcome.enqueue_many(db, [{"user_id": 1}, {"user_id": 2, "language": "fr"}])

    assert len(ids) == 2
    assert jobs(db) == [
        {"queue": "emails", "task": "send_welcome", "payload": {"user_id": 1}},
        {"queue": "emails", "task": "send_welcome", "payload": {"user_id": 2, "language": "fr"}},
    ]


def test_enqueue_many_names_the_element_that_does_not_bind_and_enqueues_nothing(db: Db) -> None:
    with pytest.raises(TypeError, match=r"arguments\[1\]: send_welcome\(\): missing a required argument"):
        send_welcome.enqueue_many(db, [{"user_id": 1}, {"language": "fr"}])

    assert jobs(db) == []


def test_enqueue_many_names_the_element_json_cannot_hold(db: Db) -> None:
    with pytest.raises(InvalidArgument, match=r"arguments\[2\] is not serialisable as JSON"):
        send_welcome.enqueue_many(db, [{"user_id": 1}, {"user_id": 2}, {"user_id": b"3"}])

    assert jobs(db) == []


def test_enqueue_many_refuses_an_option_of_one_job(db: Db) -> None:
    with pytest.raises(InvalidArgument, match="unique_key \\(with_options\\) applies to one job"):
        send_welcome.with_options(unique_key="k").enqueue_many(db, [{"user_id": 1}])


def test_enqueue_many_async_stores_the_task(db: Db, dsn: str) -> None:
    async def enqueue() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await send_welcome.enqueue_many_async(conn, [{"user_id": 1}, {"user_id": 2}])

    assert len(asyncio.run(enqueue())) == 2
    assert [row["task"] for row in jobs(db)] == ["send_welcome", "send_welcome"]


# -- the client's task= ---------------------------------------------------------------------


def test_pgjobq_enqueue_takes_a_task(db: Db) -> None:
    pgjobq.enqueue(db, "emails", {"user_id": 7}, task="send_welcome")
    pgjobq.enqueue_many(db, "emails", [{"user_id": 8}], task="send_welcome")

    assert [row["task"] for row in jobs(db)] == ["send_welcome", "send_welcome"]


@pytest.mark.parametrize("name", ["", "9lives", "send welcome", "x" * 201])
def test_a_bad_task_name_is_refused_before_any_sql(db: Db, name: str) -> None:
    with pytest.raises(InvalidArgument, match="task must be 1 to 200 characters"):
        pgjobq.enqueue(db, "emails", {}, task=name)

    assert jobs(db) == []


def test_a_flow_step_takes_a_task(db: Db) -> None:
    ids = pgjobq.enqueue_flow(
        db,
        "emails",
        [
            {"name": "a", "payload": {"user_id": 1}, "task": "send_welcome"},
            {"payload": {}, "depends_on": ["a"]},
        ],
    )

    tasks_of = [scalar(db, "SELECT task FROM jobq.jobs WHERE id = %s", (job_id,)) for job_id in ids]
    assert tasks_of == ["send_welcome", None]


def test_a_flow_steps_bad_task_name_is_refused_naming_the_step(db: Db) -> None:
    with pytest.raises(InvalidArgument, match=r"steps\[0\]\.task must be 1 to 200 characters"):
        pgjobq.enqueue_flow(db, "emails", [{"payload": {}, "task": "no spaces"}])


def test_job_shows_the_task_and_none_for_a_plain_job(db: Db) -> None:
    task_job = send_welcome.enqueue(db, user_id=7)
    plain_job = pgjobq.enqueue(db, "emails", {})

    assert pgjobq.job(db, task_job).task == "send_welcome"
    assert pgjobq.job(db, plain_job).task is None


def test_a_schedule_takes_a_task_and_shows_it(db: Db) -> None:
    made = pgjobq.schedule(
        db, "daily-digest", "emails", {"user_id": 1}, every=timedelta(days=1), task="send_welcome"
    )
    plain = pgjobq.schedule(db, "cleanup", "emails", every=timedelta(hours=1))

    assert (made.task, plain.task) == ("send_welcome", None)
    assert {s.name: s.task for s in pgjobq.schedules(db)} == {"cleanup": None, "daily-digest": "send_welcome"}


def test_a_producer_in_sql_enqueues_a_python_task(db: Db) -> None:
    job_id = scalar(db, """SELECT jobq.enqueue('emails', '{"user_id": 7}', task => 'send_welcome')""")

    state = pgjobq.job(db, job_id)
    assert (state.queue, state.task) == ("emails", "send_welcome")


# -- extension 0.8.0 ------------------------------------------------------------------------


@pytest.fixture
def old_db(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database at extension 0.8.0, whose jobs have no task."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.8.0'")
        yield conn


def test_calls_without_a_task_keep_working_on_0_8_0(old_db: Db) -> None:
    job_id = pgjobq.enqueue(old_db, "emails", {"user_id": 7})
    pgjobq.enqueue_many(old_db, "emails", [{"user_id": 8}])
    pgjobq.schedule(old_db, "cleanup", "emails", every=timedelta(hours=1))

    assert pgjobq.job(old_db, job_id).task is None
    assert [s.task for s in pgjobq.schedules(old_db)] == [None]


@pytest.mark.parametrize(
    "call",
    [
        lambda conn: send_welcome.enqueue(conn, user_id=7),
        lambda conn: send_welcome.enqueue_many(conn, [{"user_id": 7}]),
        lambda conn: pgjobq.schedule(conn, "digest", "emails", every=timedelta(days=1), task="send_welcome"),
        lambda conn: pgjobq.enqueue_flow(conn, "emails", [{"payload": {}, "task": "send_welcome"}]),
    ],
    ids=["enqueue", "enqueue_many", "schedule", "enqueue_flow"],
)
def test_a_call_with_a_task_on_0_8_0_says_tasks_need_0_9_0(old_db: Db, call: Any) -> None:
    with pytest.raises(IncompatibleExtension, match=r"tasks need the pgjobq extension 0\.9\.0 or later"):
        call(old_db)

    assert scalar(old_db, "SELECT count(*) FROM jobq.jobs") == 0
