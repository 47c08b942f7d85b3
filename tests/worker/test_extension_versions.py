"""Workers on each extension version this package supports, and on one it does not.

A release supports the extension version it was made for and the one before
it (pgjobq._version.SUPPORTED_EXTENSION_VERSIONS), so that its workers keep
working while the database is upgraded.  The tests here install the one
before (``CREATE EXTENSION pgjobq VERSION '0.10.0'``, which has no durable
execution) and check that both workers pick that version's statements when
they connect; the rest of tests/worker runs them on the current one.  A worker that meets a
version it does not support, or no pgjobq at all, says so and keeps trying
with its reconnect backoff (an upgrade may be under way), and starts once
the database is upgraded.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

from pgjobq import AsyncWorker, Discard, Job, Worker, WorkerSettings
from pgjobq._errors import UnknownTask
from pgjobq._version import SUPPORTED_EXTENSION_VERSIONS

from helpers.databases import connect_as, fresh_database
from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, wait_until
from helpers.sqlhelpers import Db, enqueue, fill, scalar, statuses

PREVIOUS, CURRENT = SUPPORTED_EXTENSION_VERSIONS  # "0.10.0", "0.11.0"
UNSUPPORTED = "0.9.0"

FAST: dict[str, Any] = {
    "poll_interval": 0.05,
    "reap_interval": 0.2,
    "ack_interval": 0.0,
    "listen": False,
    "burst": True,
}


@contextmanager
def installed_at(db: Db, pg_server: ThrowawayPostgres, version: str) -> Iterator[tuple[Db, str]]:
    """A new database with pgjobq installed at version: a connection to it, and its dsn."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(version)))
        yield conn, pg_server.dsn(dbname)


@pytest.fixture
def previous(db: Db, pg_server: ThrowawayPostgres) -> Iterator[tuple[Db, str]]:
    """A database at the previous supported version (see the module docstring), and its dsn."""
    with installed_at(db, pg_server, PREVIOUS) as made:
        yield made


def run_burst(kind: str, dsn: str, handler: Callable[[Job], Any]) -> Worker | AsyncWorker:
    """A Worker or an AsyncWorker (kind) in burst mode over queue default, run to its end here."""
    settings = WorkerSettings(**FAST)
    if kind == "sync":
        worker = Worker(dsn, handler, settings)
        worker.run(install_signal_handlers=False)
        return worker

    async def handle(job: Job) -> Any:
        result = handler(job)
        return await result if inspect.isawaitable(result) else result  # job.step awaited on the loop

    async_worker = AsyncWorker(dsn, handle, settings)
    asyncio.run(async_worker.run(install_signal_handlers=False))
    return async_worker


KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_runs_the_jobs_of_a_database_at_the_previous_version_with_their_tasks(
    previous: tuple[Db, str], kind: str
) -> None:
    conn, dsn = previous
    fill(conn, 20)
    enqueue(conn, task="send_welcome")
    tasks: list[str | None] = []

    worker = run_burst(kind, dsn, lambda job: tasks.append(job.task))

    assert statuses(conn) == {"done": 21}
    assert worker.processed == 21
    assert sorted(tasks, key=str) == [*[None] * 20, "send_welcome"]


def idle_worker_registers(kind: str, dsn: str, conn: Db) -> bool:
    """Whether a Worker or an AsyncWorker (kind) on queue default, listening and idle, registers as
    waiting (a row of jobq._waiters); the worker is stopped afterwards."""
    settings = WorkerSettings(poll_interval=0.2, reap_interval=0.2)
    stop: Callable[[], None]
    if kind == "sync":
        worker = Worker(dsn, lambda job: None, settings)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        stop = worker.stop
    else:

        async def handle(job: Job) -> None:
            return None

        async_worker = AsyncWorker(dsn, handle, settings)
        thread = threading.Thread(target=asyncio.run, args=(async_worker.run(install_signal_handlers=False),))
        stop = async_worker.stop
    thread.start()
    try:
        return wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq._waiters") > 0, timeout=30)
    finally:
        stop()
        thread.join(30)


@pytest.mark.parametrize("kind", KINDS)
def test_an_idle_worker_at_the_previous_version_registers_as_waiting(
    previous: tuple[Db, str], kind: str
) -> None:
    conn, dsn = previous

    assert idle_worker_registers(kind, dsn, conn)


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_at_the_previous_version_fails_its_job_saying_the_version_it_needs(
    previous: tuple[Db, str], kind: str
) -> None:
    conn, dsn = previous
    job_id = enqueue(conn, "default", {}, max_attempts=1)
    run_burst(kind, dsn, lambda job: job.step("charge", lambda: "ch"))

    assert statuses(conn) == {"failed": 1}
    error = scalar(conn, "SELECT last_error FROM jobq.jobs WHERE id = %s", (job_id,))
    assert error.startswith("IncompatibleExtension: durable execution (job.step") and "0.11.0" in error


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_acknowledges_on_its_next_claim_at_the_previous_version(
    previous: tuple[Db, str], kind: str
) -> None:
    conn, dsn = previous
    fill(conn, 3)
    results: dict[int, Any] = {}

    def handler(job: Job) -> Any:
        results[job.id] = {"id": job.id}
        return results[job.id]

    run_burst(kind, dsn, handler)

    rows = conn.execute("SELECT j.id, s.result FROM jobq.jobs AS j CROSS JOIN LATERAL jobq.job(j.id) AS s")
    assert {row["id"]: row["result"] for row in rows} == results


@pytest.mark.parametrize("kind", KINDS)
def test_discard_at_the_previous_version_fails_the_job_for_good(previous: tuple[Db, str], kind: str) -> None:
    conn, dsn = previous
    job_id = enqueue(conn, max_attempts=3)

    def handler(job: Job) -> None:
        raise Discard("bad input")

    run_burst(kind, dsn, handler)

    row = conn.execute("SELECT status, attempts FROM jobq.jobs WHERE id = %s", (job_id,))
    assert row.fetchone() == {"status": "failed", "attempts": 1}


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_task_at_the_previous_version_is_handed_back_without_spending_its_attempt(
    previous: tuple[Db, str], kind: str
) -> None:
    conn, dsn = previous
    job_id = enqueue(conn)

    def handler(job: Job) -> None:
        raise UnknownTask("send_welcome", retry_in=120, grace=3600)

    run_burst(kind, dsn, handler)

    held_back = scalar(
        conn,
        "SELECT status = 'queued' AND attempts = 0 AND run_at > now() + interval '100 seconds' "
        "FROM jobq.jobs WHERE id = %s",
        (job_id,),
    )
    assert held_back


def test_a_worker_process_on_an_unsupported_version_keeps_trying_then_works_once_upgraded(
    db: Db, pg_server: ThrowawayPostgres, start_worker: StartWorker
) -> None:
    with installed_at(db, pg_server, UNSUPPORTED) as (conn, dsn):
        conn.execute(EXECUTIONS_DDL)
        job_id = enqueue(conn)
        worker = start_worker("record", "--reconnect-delay-max", "1", "--poll-interval", "0.2", dsn=dsn)

        def refused() -> int:
            return worker.log().count("an upgrade may be under way")

        assert wait_until(lambda: refused() >= 2, timeout=30), worker.log()
        line = next(line for line in worker.log().splitlines() if "an upgrade may be under way" in line)
        assert UNSUPPORTED in line and all(version in line for version in SUPPORTED_EXTENSION_VERSIONS)
        assert worker.process.poll() is None, worker.log()
        assert statuses(conn) == {"queued": 1}

        conn.execute(sql.SQL("ALTER EXTENSION pgjobq UPDATE TO {}").format(sql.Literal(PREVIOUS)))

        assert wait_until(lambda: statuses(conn) == {"done": 1}, timeout=30), worker.log()
        assert scalar(conn, "SELECT count(*) FROM executions WHERE job_id = %s", (job_id,)) == 1
        assert "started on queue default" in worker.log()


def test_an_async_worker_on_an_unsupported_version_keeps_trying_then_works_once_upgraded(
    db: Db, pg_server: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    with installed_at(db, pg_server, UNSUPPORTED) as (conn, dsn):
        job_id = enqueue(conn)
        worker = AsyncWorker(dsn, handler, WorkerSettings(reconnect_delay_max=1, poll_interval=0.2))
        thread = threading.Thread(target=asyncio.run, args=(worker.run(install_signal_handlers=False),))
        thread.start()
        try:
            assert wait_until(lambda: caplog.text.count("an upgrade may be under way") >= 2), caplog.text
            assert ran == []

            conn.execute(sql.SQL("ALTER EXTENSION pgjobq UPDATE TO {}").format(sql.Literal(PREVIOUS)))

            assert wait_until(lambda: statuses(conn) == {"done": 1}), caplog.text
            assert ran == [job_id]
        finally:
            worker.stop()
            thread.join(30)


def test_a_worker_on_a_database_without_pgjobq_keeps_trying(
    db: Db, pg_server: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    with fresh_database(db) as dbname:
        settings = WorkerSettings(reconnect_delay_max=1, listen=False)
        worker = Worker(pg_server.dsn(dbname), lambda job: None, settings)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        try:
            assert wait_until(lambda: caplog.text.count("has none") >= 2, timeout=30), caplog.text
            assert thread.is_alive()
        finally:
            worker.stop()
            thread.join(30)

    assert "an upgrade may be under way" in caplog.text


def test_the_start_line_names_the_version_found(
    previous: tuple[Db, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="pgjobq.worker")
    _, dsn = previous

    run_burst("sync", dsn, lambda job: None)

    assert f"started on queue default (pgjobq {PREVIOUS})" in caplog.text
