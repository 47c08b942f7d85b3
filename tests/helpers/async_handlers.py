"""Coroutine handlers run by AsyncWorker processes in the tests (pgjobq worker helpers.async_handlers:NAME).

Each records its executions in the test's table ``executions``
(helpers.handlers.EXECUTIONS_DDL) through one connection per process.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

import psycopg

from pgjobq import Job

__all__ = ["sleep_then_record"]


@functools.cache
def _connection() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True)


def _record(job: Job, *, finished: bool) -> None:
    _connection().execute(
        "INSERT INTO executions (job_id, lease, pid, finished) VALUES (%s, %s, %s, %s)",
        (job.id, job.lease, os.getpid(), finished),
    )


async def sleep_then_record(job: Job) -> None:
    """Records the start, awaits asyncio.sleep(payload["sleep"]), then records the finish."""
    _record(job, finished=False)
    await asyncio.sleep(float(job.payload.get("sleep", 0)))
    _record(job, finished=True)
