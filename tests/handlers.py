"""Handlers run by worker processes in the tests (pgjobq worker handlers:NAME).

Each records what it did in the test's database, through its own connection
(PGJOBQ_DSN), so the test can check every execution.
"""

from __future__ import annotations

import os
import time

import psycopg

from pgjobq import Job

__all__ = ["fail_on_multiples_of_seven", "record", "sleep_then_record"]


def _record(job: Job) -> None:
    with psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO executions (job_id, lease, pid) VALUES (%s, %s, %s)", (job.id, job.lease, os.getpid())
        )


def record(job: Job) -> None:
    """Succeeds, recording the execution."""
    _record(job)


def sleep_then_record(job: Job) -> None:
    """Sleeps payload["sleep"] seconds (default 0), then records the execution."""
    time.sleep(float(job.payload.get("sleep", 0)))
    _record(job)


def fail_on_multiples_of_seven(job: Job) -> None:
    """Records, then fails when payload["n"] is a multiple of 7 (the article's example)."""
    _record(job)
    n = int(job.payload["n"])
    if n % 7 == 0:
        raise RuntimeError(f"n={n} is a multiple of 7")
