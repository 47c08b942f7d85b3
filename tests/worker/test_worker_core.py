"""What both workers take besides a conninfo and a handler, and what they tell handlers and logs, on a real
database: a connect callable (``connect=``), a task registry (``tasks=``), the job a handler runs for
(``pgjobq._job.CURRENT_JOB``), and the outcomes Discard and UnknownTask on the current extension version
(tests/worker/test_extension_versions.py has them on the previous one).

Each test runs the worker in this process: a Worker on a thread, an AsyncWorker's event loop on a thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgjobq import AsyncWorker, Discard, Job, Worker, WorkerSettings
from pgjobq._errors import UnknownTask
from pgjobq._job import CURRENT_JOB

from helpers.processes import wait_until
from helpers.sqlhelpers import Db, enqueue, fill, scalar, statuses

FAST: dict[str, Any] = {"poll_interval": 0.05, "reap_interval": 0.2, "ack_interval": 0.0}

Start = Callable[[Worker | AsyncWorker], None]


@pytest.fixture
def start() -> Iterator[Start]:
    """Runs workers on threads (an AsyncWorker on an event loop of its own); stops and joins them after."""
    started: list[tuple[Worker | AsyncWorker, threading.Thread]] = []

    def run(worker: Worker | AsyncWorker) -> None:
        if isinstance(worker, AsyncWorker):
            thread = threading.Thread(target=asyncio.run, args=(worker.run(install_signal_handlers=False),))
        else:
            thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        started.append((worker, thread))

    yield run
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(30)
        assert not thread.is_alive()


def burst(worker: Worker | AsyncWorker) -> None:
    if isinstance(worker, AsyncWorker):
        asyncio.run(worker.run(install_signal_handlers=False))
    else:
        worker.run(install_signal_handlers=False)


def connections_named(db: Db, name: str) -> int:
    return int(
        scalar(
            db, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", (f"pgjobq % {name}",)
        )
    )


def terminate(db: Db, name: str) -> None:
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"pgjobq % {name}",),
    )


# -- connect= ---------------------------------------------------------------------------------------------


def test_a_worker_opens_every_connection_with_its_connect_callable_reconnects_included(
    db: Db, dsn: str, start: Start
) -> None:
    made: list[psycopg.Connection[Any]] = []

    def connect() -> psycopg.Connection[Any]:
        conn = psycopg.connect(dsn)  # not autocommit: the worker makes it so
        made.append(conn)
        return conn

    worker = Worker(
        connect=connect,
        handler=lambda job: None,
        settings=WorkerSettings(name="made", reconnect_delay_max=1, **FAST),
    )
    start(worker)
    enqueue(db)
    assert wait_until(lambda: statuses(db) == {"done": 1})
    assert len(made) == 2  # the work connection and the listening one
    assert connections_named(db, "made") == 2  # named by the worker

    terminate(db, "made")
    enqueue(db)

    assert wait_until(lambda: statuses(db) == {"done": 2}), statuses(db)
    assert len(made) >= 3


def test_an_async_worker_opens_every_connection_with_its_async_connect_callable_reconnects_included(
    db: Db, dsn: str, start: Start
) -> None:
    made: list[psycopg.AsyncConnection[Any]] = []

    async def connect() -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(dsn)
        made.append(conn)
        return conn

    async def handler(job: Job) -> None:
        pass

    settings = WorkerSettings(name="amade", reconnect_delay_max=1, **FAST)
    start(AsyncWorker(connect=connect, handler=handler, settings=settings))
    enqueue(db)
    assert wait_until(lambda: statuses(db) == {"done": 1})
    assert len(made) == 2
    assert connections_named(db, "amade") == 2

    terminate(db, "amade")
    enqueue(db)

    assert wait_until(lambda: statuses(db) == {"done": 2}), statuses(db)
    assert len(made) >= 3


def test_a_connect_callable_that_fails_for_a_while_is_tried_again_with_backoff(
    db: Db, dsn: str, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[int] = []

    def connect() -> psycopg.Connection[Any]:
        attempts.append(1)
        if len(attempts) <= 2:
            raise ConnectionRefusedError("the token service is not up yet")
        return psycopg.connect(dsn)

    start(
        Worker(
            connect=connect, handler=lambda job: None, settings=WorkerSettings(reconnect_delay_max=1, **FAST)
        )
    )
    enqueue(db)

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=30), caplog.text
    assert caplog.text.count("the connect callable failed: ConnectionRefusedError") == 2


# -- tasks= -----------------------------------------------------------------------------------------------


class Registry:
    """A task registry as a worker sees one (pgjobq._worker.settings.TaskRegistry): it runs every job."""

    queues = ("emails", "reports")
    lease_timeout: float | None = 30.0

    def __init__(self) -> None:
        self.ran: list[tuple[str, float | None]] = []

    def sync_handler(self) -> Callable[[Job], object]:
        return lambda job: self.ran.append((job.queue, job._lease_seconds))

    def async_handler(self) -> Callable[[Job], Awaitable[object]]:
        async def handle(job: Job) -> object:
            self.ran.append((job.queue, job._lease_seconds))
            return None

        return handle


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_given_tasks_claims_from_their_queues_under_their_lease(
    db: Db, dsn: str, kind: type[Worker | AsyncWorker]
) -> None:
    fill(db, 2, "emails")
    fill(db, 2, "reports")
    fill(db, 2, "elsewhere")
    registry = Registry()

    burst(kind(dsn, tasks=registry, settings=WorkerSettings(burst=True, **FAST)))

    assert sorted(registry.ran) == [("emails", 30.0)] * 2 + [("reports", 30.0)] * 2
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'elsewhere' AND status = 'queued'") == 2


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_queue_setting_narrows_the_queues_of_the_tasks(
    db: Db, dsn: str, kind: type[Worker | AsyncWorker]
) -> None:
    fill(db, 2, "emails")
    fill(db, 2, "reports")
    registry = Registry()

    burst(kind(dsn, tasks=registry, settings=WorkerSettings(queue="reports", burst=True, **FAST)))

    assert sorted(registry.ran) == [("reports", 30.0)] * 2


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_jobs_task_reaches_its_handler_whether_claimed_alone_or_with_acknowledgements(
    db: Db, dsn: str, kind: type[Worker | AsyncWorker]
) -> None:
    # batch 1: the first claim goes alone, the next ones with the acknowledgement (complete_and_claim)
    for n, task in enumerate(["send_welcome", None, "billing.invoice:v2"]):
        enqueue(db, payload={"n": n}, task=task, priority=-n)
    seen: list[str | None] = []

    def handler(job: Job) -> None:
        seen.append(job.task)

    async def handler_async(job: Job) -> None:
        handler(job)

    burst(
        kind(dsn, handler if kind is Worker else handler_async, WorkerSettings(batch=1, burst=True, **FAST))
    )

    assert seen == ["send_welcome", None, "billing.invoice:v2"]


# -- CURRENT_JOB ------------------------------------------------------------------------------------------


def test_a_sync_handler_runs_with_current_job_set_to_its_job(db: Db, dsn: str) -> None:
    fill(db, 3)
    seen: list[bool] = []

    burst(Worker(dsn, lambda job: seen.append(CURRENT_JOB.get() is job), WorkerSettings(burst=True, **FAST)))

    assert seen == [True] * 3
    assert CURRENT_JOB.get() is None


def test_handlers_on_threads_run_with_current_job_set_to_their_job(db: Db, dsn: str) -> None:
    fill(db, 6)
    seen: list[bool] = []

    settings = WorkerSettings(burst=True, concurrency=3, **FAST)
    burst(Worker(dsn, lambda job: seen.append(CURRENT_JOB.get() is job), settings))

    assert seen == [True] * 6


def test_coroutine_handlers_and_plain_ones_of_an_async_worker_see_their_job_as_current(
    db: Db, dsn: str
) -> None:
    fill(db, 4)
    seen: list[bool] = []

    async def coroutine(job: Job) -> None:
        await asyncio.sleep(0.01)  # the other tasks run meanwhile: each keeps its own
        seen.append(CURRENT_JOB.get() is job)

    burst(AsyncWorker(dsn, coroutine, WorkerSettings(burst=True, concurrency=4, **FAST)))
    fill(db, 2)
    burst(
        AsyncWorker(
            dsn, lambda job: seen.append(CURRENT_JOB.get() is job), WorkerSettings(burst=True, **FAST)
        )
    )

    assert seen == [True] * 6


# -- Discard and UnknownTask on the current version ----------------------------------------------------------


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_discard_fails_its_job_for_good_at_once_whatever_attempts_it_has_left(
    db: Db, dsn: str, kind: type[Worker | AsyncWorker]
) -> None:
    job_id = enqueue(db, max_attempts=5)

    def discard(job: Job) -> None:
        raise Discard("no such user")

    async def discard_async(job: Job) -> None:
        discard(job)

    burst(kind(dsn, discard if kind is Worker else discard_async, WorkerSettings(burst=True, **FAST)))

    row = db.execute("SELECT status, attempts, last_error FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"status": "failed", "attempts": 1, "last_error": "no such user"}


def test_a_job_whose_task_the_worker_does_not_know_is_handed_back_without_spending_its_attempt(
    db: Db, dsn: str
) -> None:
    if scalar(db, "SELECT to_regproc('jobq.hand_back') IS NULL"):
        pytest.skip("this database's extension has no jobq.hand_back yet (0.9.0's SQL is not finished)")
    job_id = enqueue(db)

    def unknown(job: Job) -> None:
        raise UnknownTask("send_welcome", retry_in=120, grace=3600)

    burst(Worker(dsn, unknown, WorkerSettings(burst=True, **FAST)))

    held_back = scalar(
        db,
        "SELECT status = 'queued' AND attempts = 0 AND run_at > now() + interval '100 seconds' "
        "FROM jobq.jobs WHERE id = %s",
        (job_id,),
    )
    assert held_back
