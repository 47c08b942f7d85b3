"""pgjobq: the Python client, worker and CLI of the pgjobq PostgreSQL extension.

Enqueue on your own connection and transaction::

    import pgjobq
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO orders ...")
        pgjobq.enqueue(conn, "emails", {"order": 42})

Run handlers with :class:`Worker` or the ``pgjobq worker`` command.
"""

from __future__ import annotations

import logging

from pgjobq._client import (
    Health,
    QueueStats,
    channel,
    claim,
    complete,
    complete_and_claim,
    complete_many,
    enqueue,
    enqueue_many,
    fail,
    health,
    heartbeat,
    heartbeat_many,
    purge,
    reap,
    release,
    retry_failed,
    stats,
)
from pgjobq._errors import (
    ConfigurationError,
    Error,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    PermissionDenied,
)
from pgjobq._job import Job
from pgjobq._worker import Worker, WorkerSettings

__all__ = [
    "ConfigurationError",
    "Error",
    "Health",
    "InvalidArgument",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "PayloadTooLarge",
    "PermissionDenied",
    "QueueStats",
    "Worker",
    "WorkerSettings",
    "channel",
    "claim",
    "complete",
    "complete_and_claim",
    "complete_many",
    "enqueue",
    "enqueue_many",
    "fail",
    "health",
    "heartbeat",
    "heartbeat_many",
    "purge",
    "reap",
    "release",
    "retry_failed",
    "stats",
]

__version__ = "0.1.0"

# Quiet by default: the application (or the CLI) decides what to show.
logging.getLogger(__name__).addHandler(logging.NullHandler())
