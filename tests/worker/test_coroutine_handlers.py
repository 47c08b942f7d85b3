"""Coroutine handlers: the Worker calls its handler and cannot await it, so it must never count one as done.

An ``async def`` handler (or an object whose ``__call__`` is one) is refused
when the Worker is made, before it connects; a handler that still returns an
awaitable (a lambda calling an async function) fails its job instead of
completing it.  In 0.3.0 both marked every job done without running it.  The
``pgjobq worker`` command runs such a handler under AsyncWorker (0.8.0).
"""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest

from pgjobq import ConfigurationError, Job, Worker, WorkerSettings

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import run_cli
from helpers.sqlhelpers import Db, fill, scalar, statuses

UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=1"


def untouched(db: Db) -> bool:
    """Every job is still queued, never claimed."""
    return bool(
        scalar(db, "SELECT bool_and(status = 'queued' AND attempts = 0 AND lease = 0) FROM jobq.jobs")
    )


def worker_sessions(db: Db) -> int:
    return int(scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgjobq %'"))


ran: list[int] = []  # the ids of the jobs whose async code below ran


async def notify_async(job: Job) -> None:
    """Stands for application code that is async; its body must never run under this Worker."""
    ran.append(job.id)


class AsyncHandler:
    async def __call__(self, job: Job) -> None:
        ran.append(job.id)


@pytest.mark.parametrize(
    ("handler", "name"),
    [(notify_async, "notify_async"), (AsyncHandler(), "AsyncHandler")],
    ids=["async-def", "async-call-method"],
)
def test_worker_refuses_a_coroutine_function_handler_before_connecting(
    db: Db, dsn: str, handler: Any, name: str
) -> None:
    fill(db, 3)

    with pytest.raises(ConfigurationError, match="coroutine function") as refused:
        Worker(dsn, handler)
    # nothing to connect to: the refusal comes first
    with pytest.raises(ConfigurationError, match="coroutine function"):
        Worker(UNREACHABLE, handler, WorkerSettings(burst=True))

    assert name in str(refused.value)
    assert untouched(db)
    assert worker_sessions(db) == 0


@pytest.mark.parametrize("handler", ["async_record", "async_callable_record"])
def test_cli_worker_runs_a_coroutine_handler_under_the_async_worker_and_each_job_once(
    db: Db, dsn: str, handler: str
) -> None:
    # 0.8.0: the command picks AsyncWorker for a coroutine function, or an object whose __call__ is one
    db.execute(EXECUTIONS_DDL)
    fill(db, 3)

    result = run_cli(dsn, "worker", f"helpers.handlers:{handler}", "--burst", "--poll-interval", "0.1")

    assert result.returncode == 0, result.stderr
    assert statuses(db) == {"done": 3}
    assert scalar(db, "SELECT count(*) FROM executions") == 3


@pytest.mark.parametrize("concurrency", [1, 3], ids=["on-the-workers-thread", "on-handler-threads"])
def test_handler_returning_a_coroutine_fails_every_job_and_completes_none(
    db: Db, dsn: str, concurrency: int
) -> None:
    ids = fill(db, 4)
    ran.clear()
    worker = Worker(
        dsn,
        lambda job: notify_async(job),
        WorkerSettings(burst=True, concurrency=concurrency, listen=False, poll_interval=0.1),
    )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker.run(install_signal_handlers=False)
        gc.collect()

    rows = db.execute("SELECT id, status, attempts, last_error FROM jobq.jobs ORDER BY id").fetchall()
    assert [row["id"] for row in rows] == ids
    for row in rows:
        assert row["status"] in ("queued", "failed"), row
        assert row["attempts"] == 1, row
        assert row["last_error"].startswith("TypeError: "), row
        assert "returned coroutine" in row["last_error"] and "the job did not run" in row["last_error"], row
    assert "done" not in statuses(db)
    assert ran == []  # the coroutine was closed unstarted
    assert not [w for w in caught if "never awaited" in str(w.message)]
