"""AsyncWorker as a real process: ``pgjobq worker MODULE:COROUTINE`` picks it, SIGTERM stops it gracefully."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import pgjobq_command, process_env, run_cli, wait_until
from helpers.sqlhelpers import Db, scalar, statuses


@pytest.fixture
def start_async_worker(dsn: str, tmp_path: Path) -> Iterator[Any]:
    """Starts `pgjobq worker helpers.async_handlers:sleep_then_record ARGS...` (its log: the process's
    log_path attribute); kills those left."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        path = tmp_path / f"async-worker-{len(started)}.log"
        log = path.open("w")
        process = subprocess.Popen(
            pgjobq_command(
                "worker", "helpers.async_handlers:sleep_then_record", "--log-level", "DEBUG", *args
            ),
            env=process_env(dsn),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        process.log_path = path  # type: ignore[attr-defined]
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def enqueue_sleeping(db: Db, count: int, seconds: float) -> None:
    db.execute(
        "SELECT jobq.enqueue_many('default', array_fill(%s::jsonb, ARRAY[%s]))",
        (Jsonb({"sleep": seconds}), count),
    )


def started_executions(db: Db) -> int:
    return int(scalar(db, "SELECT count(*) FROM executions WHERE NOT finished"))


def test_cli_worker_runs_a_coroutine_handler_under_asyncworker(db: Db, dsn: str) -> None:
    db.execute(EXECUTIONS_DDL)
    enqueue_sleeping(db, 3, 0)

    result = run_cli(
        dsn, "worker", "helpers.async_handlers:sleep_then_record", "--burst", "--poll-interval", "0.1"
    )

    assert result.returncode == 0, result.stderr
    assert "asyncio" in result.stderr  # its start-up line
    assert statuses(db) == {"done": 3}
    assert scalar(db, "SELECT count(*) FROM executions WHERE finished") == 3


def test_sigterm_lets_the_running_tasks_finish_and_hands_back_the_jobs_not_started(
    db: Db, start_async_worker: Any
) -> None:
    db.execute(EXECUTIONS_DDL)
    enqueue_sleeping(db, 5, 1.0)
    worker = start_async_worker("--concurrency", "2", "--batch", "5", "--poll-interval", "0.1")
    assert wait_until(lambda: started_executions(db) == 2, timeout=20)

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(20) == 0
    assert statuses(db) == {"done": 2, "queued": 3}
    assert scalar(db, "SELECT count(*) FROM executions WHERE finished") == 2
    assert scalar(db, "SELECT max(attempts) FROM jobq.jobs WHERE status = 'queued'") == 0


def test_a_second_sigterm_gives_up_the_running_tasks_at_once(db: Db, start_async_worker: Any) -> None:
    db.execute(EXECUTIONS_DDL)
    enqueue_sleeping(db, 2, 60)
    worker = start_async_worker("--concurrency", "2", "--poll-interval", "0.1")
    assert wait_until(lambda: started_executions(db) == 2, timeout=20)

    worker.send_signal(signal.SIGTERM)
    assert wait_until(lambda: "finishing jobs in hand" in worker.log_path.read_text(), timeout=10)
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(20) == 1  # the jobs in hand were abandoned
    assert "abandoning 2 job(s)" in worker.log_path.read_text()
    assert statuses(db) == {"running": 2}  # left to the reaper
    assert scalar(db, "SELECT count(*) FROM executions WHERE finished") == 0
