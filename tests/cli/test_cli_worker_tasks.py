"""pgjobq worker --tasks MODULE[:ATTRIBUTE]: a worker of a pgjobq.Tasks registry, run as a real process.

It claims from every queue its tasks use unless --queue says which, runs a registry with an async task
under an AsyncWorker, and takes either a handler or --tasks: both, neither, or a registry it cannot
load is bad usage (exit 2).
"""

from __future__ import annotations

from typing import Any

import pytest

from helpers.processes import run_cli
from helpers.sqlhelpers import Db, scalar


def enqueue(db: Db, queue: str, task: str | None, payload: str) -> int:
    """A job of task enqueued from SQL, as a producer in any language would; its id."""
    return int(scalar(db, "SELECT jobq.enqueue(%s, %s, task => %s)", (queue, payload, task)))


def outcome(db: Db, job_id: int) -> tuple[str, Any]:
    row = db.execute("SELECT status, result FROM jobq.job(%s)", (job_id,)).fetchone()
    assert row is not None
    return row["status"], row["result"]


def error_line(stderr: str) -> str:
    """The one line of stderr that is the error (click's usage lines come before it)."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    return line


def test_worker_with_tasks_runs_the_jobs_of_every_queue_its_tasks_use(dsn: str, db: Db) -> None:
    greet = enqueue(db, "emails", "greet", '{"name": "ada"}')
    tally = enqueue(db, "reports", "tally", '{"numbers": [1, 2, 3]}')
    elsewhere = enqueue(db, "other", None, "{}")

    result = run_cli(dsn, "worker", "--tasks", "cli.sync_tasks", "--burst")

    assert result.returncode == 0, result.stderr
    assert outcome(db, greet) == ("done", {"greeted": "ada"})
    assert outcome(db, tally) == ("done", {"total": 6})
    assert outcome(db, elsewhere) == ("queued", None)


def test_worker_with_tasks_and_a_queue_claims_from_that_queue_only(dsn: str, db: Db) -> None:
    greet = enqueue(db, "emails", "greet", '{"name": "ada"}')
    tally = enqueue(db, "reports", "tally", '{"numbers": [4]}')

    result = run_cli(dsn, "worker", "--tasks", "cli.sync_tasks", "--queue", "reports", "--burst")

    assert result.returncode == 0, result.stderr
    assert outcome(db, tally) == ("done", {"total": 4})
    assert outcome(db, greet) == ("queued", None)


def test_worker_takes_its_tasks_from_the_environment(dsn: str, db: Db) -> None:
    greet = enqueue(db, "emails", "greet", '{"name": "bo"}')

    result = run_cli(dsn, "worker", "--burst", PGJOBQ_TASKS="cli.sync_tasks")

    assert result.returncode == 0, result.stderr
    assert outcome(db, greet) == ("done", {"greeted": "bo"})


def test_worker_with_an_async_task_among_its_tasks_runs_the_sync_and_the_async_ones(dsn: str, db: Db) -> None:
    greet = enqueue(db, "emails", "greet", '{"name": "cy"}')
    shout = enqueue(db, "emails", "shout", '{"name": "cy"}')

    result = run_cli(dsn, "worker", "--tasks", "cli.mixed_tasks:tasks", "--burst")

    assert result.returncode == 0, result.stderr
    assert outcome(db, greet) == ("done", {"greeted": "cy"})
    assert outcome(db, shout) == ("done", {"shouted": "CY"})  # only an AsyncWorker runs an async task


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("helpers.handlers:record", "--tasks", "cli.sync_tasks"), "not both"),
        ((), "give a handler (MODULE:FUNCTION) or --tasks MODULE[:ATTRIBUTE]"),
        (("--tasks", "cli.mixed_tasks"), "several pgjobq.Tasks"),
        (("--tasks", "helpers.handlers"), "has no pgjobq.Tasks"),
        (("--tasks", "cli.sync_tasks:greet"), "not a pgjobq.Tasks"),
        (("--tasks", "no_such_module"), "no_such_module"),
    ],
    ids=["both", "neither", "several", "none", "not-tasks", "no-module"],
)
def test_worker_without_exactly_one_loadable_handler_or_tasks_is_bad_usage(
    dsn: str, db: Db, args: tuple[str, ...], message: str
) -> None:
    job_id = enqueue(db, "emails", "greet", '{"name": "ada"}')

    result = run_cli(dsn, "worker", *args, "--burst")

    assert result.returncode == 2, result.stderr
    assert message in error_line(result.stderr)
    assert "Traceback" not in result.stderr
    assert outcome(db, job_id) == ("queued", None)


def test_worker_with_a_handler_and_tasks_from_the_environment_is_bad_usage(dsn: str, db: Db) -> None:
    job_id = enqueue(db, "emails", "greet", '{"name": "ada"}')

    result = run_cli(dsn, "worker", "helpers.handlers:record", "--burst", PGJOBQ_TASKS="cli.sync_tasks")

    assert result.returncode == 2, result.stderr
    assert "not both" in error_line(result.stderr)
    assert outcome(db, job_id) == ("queued", None)
