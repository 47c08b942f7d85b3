"""pgjobq: the Python client, worker and CLI of the pgjobq PostgreSQL extension.

Enqueue on your own connection and transaction::

    import pgjobq
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO orders ...")
        pgjobq.enqueue(conn, "emails", {"order": 42})

Run handlers with :class:`Worker` or the ``pgjobq worker`` command.  This
package works with the extension versions in ``SUPPORTED_EXTENSION_VERSIONS``:
the Worker and the CLI refuse any other when they connect, and
:func:`check_extension` does the same for an application's own connection.
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
    wait,
)
from pgjobq._errors import (
    ConfigurationError,
    Error,
    IncompatibleExtension,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    PermissionDenied,
)
from pgjobq._extension import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS, check_extension
from pgjobq._job import Job
from pgjobq._worker import Worker, WorkerSettings

__all__ = [
    "SUPPORTED_EXTENSION_VERSIONS",
    "ConfigurationError",
    "Error",
    "Health",
    "IncompatibleExtension",
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
    "check_extension",
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
    "wait",
]

__version__ = PACKAGE_VERSION

# Quiet by default: the application (or the CLI) decides what to show.
logging.getLogger(__name__).addHandler(logging.NullHandler())
