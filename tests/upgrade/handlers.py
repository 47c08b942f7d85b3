"""The handler the workers of both releases run in the rolling-upgrade tests (``upgrade.handlers:record``).

It is imported by this release's workers and by the previous release's (in their own venv, with tests/ on
PYTHONPATH), so it uses only what both have: ``Job.id``, ``Job.lease`` and ``Job.payload``, and
``Job.task`` where the package has it.  Each run is recorded twice in the test's table ``runs``
(RUNS_DDL), once as it starts and once as it finishes, through one autocommit connection per process, with
the worker's name (PGJOBQ_WORKER_NAME, which is also the worker's ``--name``): the tests count runs per job
from it, so a job run twice, or started and never finished, shows.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import psycopg

from pgjobq import Job

__all__ = ["RUNS_DDL", "record"]

RUNS_DDL = """
CREATE TABLE runs (
    job_id   bigint  NOT NULL,
    lease    bigint  NOT NULL,
    worker   text    NOT NULL,
    pid      integer NOT NULL,
    task     text,
    finished boolean NOT NULL
)
"""


@functools.cache
def _connection() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["PGJOBQ_DSN"], autocommit=True, application_name="upgrade handler")


def _record(job: Job, *, finished: bool) -> None:
    _connection().execute(
        "INSERT INTO runs (job_id, lease, worker, pid, task, finished) VALUES (%s, %s, %s, %s, %s, %s)",
        (
            job.id,
            job.lease,
            os.environ["PGJOBQ_WORKER_NAME"],
            os.getpid(),
            getattr(job, "task", None),
            finished,
        ),
    )


def record(job: Job) -> None:
    """Records the start, sleeps payload["ms"] milliseconds (the work), then records the finish."""
    _record(job, finished=False)
    time.sleep(float(job.payload.get("ms", 0)) / 1000)
    _record(job, finished=True)
