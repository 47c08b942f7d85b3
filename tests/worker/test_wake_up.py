"""How an in-process Worker sleeps and wakes: jobq.wait, a job due later, acknowledgements meanwhile."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from psycopg import sql

import pgjobq
from pgjobq import Job, WorkerSettings

from helpers.fixtures import RunWorker
from helpers.processes import wait_until
from helpers.sqlhelpers import Connect, Db, statuses


def waiting(db: Db, worker: str) -> bool:
    """Whether worker is registered as waiting (jobq.wait) on a queue."""
    row = db.execute(
        "SELECT count(*) AS n FROM jobq._waiters WHERE worker = %s AND until > now()", (worker,)
    ).fetchone()
    return row is not None and row["n"] > 0


def test_a_job_due_later_starts_at_its_run_at_not_at_the_next_poll(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    started: list[datetime] = []
    run_worker(dsn, lambda job: started.append(datetime.now(timezone.utc)),
               WorkerSettings(poll_interval=30, name="sleeper"))  # fmt: skip
    assert wait_until(lambda: waiting(db, "sleeper"), timeout=30)

    run_at = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    pgjobq.enqueue(db, "default", {}, run_at=run_at)

    # polling would take 30 s; the worker slept until the job's run_at instead
    assert wait_until(lambda: bool(started), timeout=10)
    assert started[0] >= run_at


def test_a_worker_refused_a_registration_by_a_producer_in_flight_claims_again_soon(
    db: Db,
    dsn: str,
    connect: Connect,
    run_worker: RunWorker,
) -> None:
    producer = connect(autocommit=False)
    pgjobq.enqueue(producer, "default", {})  # holds the queue's producer lock until it commits
    done = threading.Event()
    run_worker(dsn, lambda job: done.set(), WorkerSettings(poll_interval=30, name="refused"))
    time.sleep(1)  # the worker found nothing and was refused its registration, again and again
    assert not waiting(db, "refused")

    producer.commit()  # notifies nobody: no worker is registered

    # polling would take 30 s: the worker claimed again shortly after being refused
    assert done.wait(10)


@pytest.fixture
def role_without_wait(db: Db) -> Iterator[str]:
    """A login role given the worker level (jobq.grant_worker) less jobq.register_waiter."""
    role = f"jobq_worker_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT jobq.grant_worker(%s)", (role,))
    db.execute(
        sql.SQL("REVOKE EXECUTE ON FUNCTION jobq.register_waiter(text, text, interval) FROM {}").format(
            sql.Identifier(role)
        )
    )
    yield role
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_a_worker_whose_role_may_not_wait_warns_once_and_keeps_working_by_polling(
    db: Db,
    dsn: str,
    role_without_wait: str,
    caplog: pytest.LogCaptureFixture,
    run_worker: RunWorker,
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    run_worker(f"{dsn} user={role_without_wait}", lambda job: None, WorkerSettings(poll_interval=0.1))
    pgjobq.enqueue(db, "default", {})
    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=30), caplog.text
    time.sleep(0.5)  # five more polls

    pgjobq.enqueue(db, "default", {})

    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=30), caplog.text
    warnings = [r.getMessage() for r in caplog.records if "not registering as waiting" in r.getMessage()]
    assert len(warnings) == 1, caplog.text


def test_the_keeper_acknowledges_a_finished_job_while_the_next_handler_runs(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    first, second = pgjobq.enqueue_many(db, "default", [{"n": 1}, {"n": 2}])
    release = threading.Event()

    def handler(job: Job) -> None:
        if job.id == second:
            release.wait(30)

    # concurrency 1, both jobs in one batch: the loop's thread is in the second handler
    run_worker(dsn, handler, WorkerSettings(batch=2, ack_interval=0.05, poll_interval=30))
    try:

        def first_done_second_running() -> bool:
            rows = db.execute("SELECT id, status FROM jobq.jobs ORDER BY id").fetchall()
            return [(r["id"], r["status"]) for r in rows] == [(first, "done"), (second, "running")]

        assert wait_until(first_done_second_running, timeout=10)
    finally:
        release.set()
    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=10)
