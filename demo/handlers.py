"""The demo's job handler, run by ``pgjobq worker handlers:handle`` (see demo.py).

Each execution is recorded in ``demo_runs`` on a connection of the worker
process's own (PGJOBQ_DSN), so the demo can count executions and check that
no lease ran twice.  Multiples of 7 fail on their first two attempts and
succeed on the third; multiples of 49 always fail and end up dead letters.
"""

from __future__ import annotations

import atexit
import functools
import os
import random
import time

import psycopg

from pgjobq import Job

__all__ = ["handle"]

RECORD_RUN = """
INSERT INTO demo_runs (job_id, lease, worker_pid, attempt, ok)
VALUES (%(job_id)s, %(lease)s, %(worker_pid)s, %(attempt)s, %(ok)s)
"""


@functools.cache
def _connection() -> psycopg.Connection[tuple[object, ...]]:
    """This process's connection for demo_runs: opened on first use, closed at exit."""
    conn = psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True, application_name="pgjobq demo handler")
    atexit.register(conn.close)
    return conn


def failure(n: int, attempt: int) -> str | None:
    """Why this attempt of job n fails, or None when it succeeds."""
    if n % 49 == 0:
        return f"n={n}: multiples of 49 always fail"
    if n % 7 == 0 and attempt <= 2:
        return f"n={n}: multiples of 7 fail attempts 1 and 2 (this is attempt {attempt})"
    return None


def handle(job: Job) -> None:
    """Imitate a little I/O, record the execution, and fail when failure() says so."""
    n = int(job.payload["n"])
    reason = failure(n, job.attempts)
    time.sleep(random.uniform(0.002, 0.005))
    params = {
        "job_id": job.id,
        "lease": job.lease,
        "worker_pid": os.getpid(),
        "attempt": job.attempts,
        "ok": reason is None,
    }
    _connection().execute(RECORD_RUN, params)
    if reason is not None:
        raise RuntimeError(reason)
