"""Workers running tasks: Worker(tasks=...), AsyncWorker(tasks=...), a real `pgjobq worker --tasks` process.

One worker runs many tasks: it claims from every queue they use, runs each job's task with its keyword
arguments (async tasks on the event loop, sync ones on threads), and hands back, without spending an
attempt and with a warning naming it, a task it does not know.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import pgjobq
from examples.tasks_app import tasks as example
from pgjobq import AsyncWorker, Job, Tasks, Worker, WorkerSettings

from helpers.fixtures import REPO_ROOT
from helpers.processes import TESTS, run_cli, wait_until
from helpers.sqlhelpers import Db, scalar

sync_tasks = Tasks(queue="emails")


@sync_tasks.task
def send_welcome(user_id: int) -> str:
    return f"welcome {user_id}"


@sync_tasks.task(queue="reports")
def render(report_id: int, job: Job) -> dict[str, Any]:
    return {"report": report_id, "task": job.task}


mixed_tasks = Tasks(queue="emails")
mixed_tasks.add(send_welcome)


@mixed_tasks.task(queue="reports")
async def render_async(report_id: int, job: Job) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"report": report_id, "task": job.task}


SETTINGS = WorkerSettings(poll_interval=0.1, name="tasks-test")


@pytest.fixture
def run_in_thread() -> Iterator[Any]:
    """Runs a Worker or AsyncWorker on a thread of this process; stops and joins it after the test."""
    started: list[tuple[Worker | AsyncWorker, threading.Thread]] = []

    def run(worker: Worker | AsyncWorker) -> None:
        if isinstance(worker, AsyncWorker):
            thread = threading.Thread(target=lambda: asyncio.run(worker.run(install_signal_handlers=False)))
        else:
            thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        started.append((worker, thread))

    yield run
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(60)
        assert not thread.is_alive()


def handed_back(db: Db, job_id: int) -> bool:
    """The job is queued again, to run later (the worker handed it back)."""
    return bool(
        scalar(db, "SELECT status = 'queued' AND run_at > now() FROM jobq.jobs WHERE id = %s", (job_id,))
    )


def result(db: Db, job_id: int) -> Any:
    state = pgjobq.wait(db, job_id, timedelta(seconds=30))
    assert state is not None, f"job {job_id} did not finish"
    assert state.status == "done", state
    return state.result


def test_a_worker_runs_every_task_of_its_registry_across_their_queues(
    db: Db, dsn: str, run_in_thread: Any
) -> None:
    welcome = send_welcome.enqueue(db, user_id=7)
    report = scalar(db, """SELECT jobq.enqueue('reports', '{"report_id": 3}', task => 'render')""")

    run_in_thread(Worker(dsn, tasks=sync_tasks, settings=SETTINGS))

    assert result(db, welcome) == "welcome 7"
    assert result(db, report) == {"report": 3, "task": "render"}


def test_an_async_worker_runs_async_tasks_and_sync_ones(db: Db, dsn: str, run_in_thread: Any) -> None:
    welcome = send_welcome.enqueue(db, user_id=7)
    report = render_async.enqueue(db, report_id=3)

    run_in_thread(AsyncWorker(dsn, tasks=mixed_tasks, settings=SETTINGS))

    assert result(db, welcome) == "welcome 7"
    assert result(db, report) == {"report": 3, "task": "render_async"}


def test_a_worker_hands_back_a_task_it_does_not_know_without_spending_an_attempt(
    db: Db, dsn: str, run_in_thread: Any, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = pgjobq.enqueue(db, "emails", {"invoice": 1}, task="send_invoice")
    known = send_welcome.enqueue(db, user_id=1)

    with caplog.at_level(logging.INFO, "pgjobq"):
        run_in_thread(Worker(dsn, tasks=sync_tasks, settings=SETTINGS))
        result(db, known)  # the worker has claimed the queue's jobs by now
        assert wait_until(lambda: handed_back(db, job_id))

    assert scalar(db, "SELECT attempts FROM jobq.jobs WHERE id = %s", (job_id,)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("send_invoice" in message for message in warnings), warnings


def test_a_worker_process_runs_the_example_apps_tasks_enqueued_from_python_and_sql(db: Db, dsn: str) -> None:
    welcome = example.send_welcome.enqueue(db, user_id=7)
    report = scalar(db, """SELECT jobq.enqueue('reports', '{"report_id": 3}', task => 'render_report')""")
    declined = example.charge.enqueue(db, order_id=1, cents=0)

    done = run_cli(
        dsn,
        "worker",
        "--tasks",
        "examples.tasks_app.tasks",
        "--burst",
        "--log-level",
        "INFO",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(TESTS)]),
    )

    assert done.returncode == 0, done.stderr
    assert result(db, welcome) == "welcome sent to user 7"
    assert result(db, report) == {"report": 3, "attempt": 1}
    failed = pgjobq.job(db, declined)
    assert (failed.status, failed.attempts) == ("failed", 1)
    assert failed.last_error is not None and "cannot charge 0 cents" in failed.last_error
