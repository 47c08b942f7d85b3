"""Handlers run by worker processes in the tests (``pgjobq worker helpers.handlers:NAME``).

Each records its executions in the test's table ``executions`` through one
connection per process (PGJOBQ_DSN), so a test can check every execution:
which job, under which lease, in which process, and whether it finished.
"""

from __future__ import annotations

import functools
import os
import time

import psycopg

from pgjobq import Job

__all__ = [
    "EFFECTS_DDL",
    "EXECUTIONS_DDL",
    "fail_on_multiples_of_seven",
    "record",
    "sleep_then_record",
    "slow_first_attempt",
    "two_steps",
]

EXECUTIONS_DDL = """
CREATE TABLE executions (
    job_id   bigint  NOT NULL,
    lease    bigint  NOT NULL,
    pid      integer NOT NULL,
    finished boolean NOT NULL
)
"""


@functools.cache
def _connection() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True)


def _record(job: Job, *, finished: bool = True) -> None:
    _connection().execute(
        "INSERT INTO executions (job_id, lease, pid, finished) VALUES (%s, %s, %s, %s)",
        (job.id, job.lease, os.getpid(), finished),
    )


def record(job: Job) -> None:
    """Succeeds, recording the execution."""
    _record(job)


def sleep_then_record(job: Job) -> None:
    """Records the start, sleeps payload["sleep"] seconds, then records the finish."""
    _record(job, finished=False)
    time.sleep(float(job.payload.get("sleep", 0)))
    _record(job)


def slow_first_attempt(job: Job) -> None:
    """Like sleep_then_record, but only the first attempt sleeps (a crash victim's job)."""
    _record(job, finished=False)
    if job.attempts == 1:
        time.sleep(float(job.payload.get("sleep", 0)))
    _record(job)


def fail_on_multiples_of_seven(job: Job) -> None:
    """Records, then fails when payload["n"] is a multiple of 7 (the article's example)."""
    _record(job)
    n = int(job.payload["n"])
    if n % 7 == 0:
        raise RuntimeError(f"n={n} is a multiple of 7")


__all__ += ["raise_base_exception", "record_without_prepared_statements"]


def raise_base_exception(job: Job) -> None:
    """Records, then raises the BaseException named by payload["raise"] (SystemExit,
    KeyboardInterrupt), if any."""
    _record(job)
    name = job.payload.get("raise")
    if name == "SystemExit":
        raise SystemExit(f"job {job.payload['n']} asked to exit")
    if name == "KeyboardInterrupt":
        raise KeyboardInterrupt(f"job {job.payload['n']} interrupted")


@functools.cache
def _unprepared_connection() -> psycopg.Connection[tuple[object, ...]]:
    # Behind a transaction-pooling PgBouncer (< 1.21) prepared statements break.
    return psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True, prepare_threshold=None)


def record_without_prepared_statements(job: Job) -> None:
    """Like record, on a connection that never prepares statements (for PgBouncer)."""
    _unprepared_connection().execute(
        "INSERT INTO executions (job_id, lease, pid, finished) VALUES (%s, %s, %s, true)",
        (job.id, job.lease, os.getpid()),
    )


__all__ += ["async_callable_record", "async_record"]


async def async_record(job: Job) -> None:
    """An async def handler, which the Worker refuses and AsyncWorker runs: it records the execution."""
    _record(job)


class _AsyncRecorder:
    """An object whose __call__ is a coroutine function: the Worker refuses it too, AsyncWorker runs it."""

    def __repr__(self) -> str:
        return "helpers.handlers.async_callable_record"

    async def __call__(self, job: Job) -> None:
        _record(job)


async_callable_record = _AsyncRecorder()


__all__ += ["return_payload", "stop_when_cancelled"]


def return_payload(job: Job) -> object:
    """Records, then returns payload["result"] (None when absent): the job's result."""
    _record(job)
    return job.payload.get("result")


def stop_when_cancelled(job: Job) -> None:
    """Records the start, waits for the job's cancel request (payload["wait"] seconds at most, 60 by
    default), records the finish, and raises if the request came (the job then ends cancelled)."""
    _record(job, finished=False)
    asked = job.cancel_requested.wait(float(job.payload.get("wait", 60)))
    _record(job)
    if asked:
        raise RuntimeError(f"job {job.id} stopped: cancel requested")


# -- durable jobs (extension 0.11.0): each step's side effect is a row of the test's table effects, written
# through this process's own connection, outside the job's statements (what a charge to a card would be)

EFFECTS_DDL = """
CREATE TABLE effects (
    job_id bigint  NOT NULL,
    step   text    NOT NULL,
    pid    integer NOT NULL
)
"""


def _effect(job: Job, step: str) -> str:
    _connection().execute(
        "INSERT INTO effects (job_id, step, pid) VALUES (%s, %s, %s)", (job.id, step, os.getpid())
    )
    return f"{step} of {job.id}"


def _slow_effect(job: Job, step: str) -> str:
    """The effect after payload["pause"] seconds (in the first attempt only): a worker killed meanwhile
    dies between the previous step and this one's effect."""
    if job.attempts == 1:
        time.sleep(float(job.payload.get("pause", 0)))
    return _effect(job, step)


def two_steps(job: Job) -> object:
    """Step one's effect at once, step two's after a pause; returns both results."""
    one = job.step("one", _effect, job, "one")
    two = job.step("two", _slow_effect, job, "two")
    return [one, two]
