"""pgjobq: the Python client, worker and CLI of the pgjobq PostgreSQL extension.

Enqueue on your own connection and transaction::

    import pgjobq
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO orders ...")
        job_id = pgjobq.enqueue(conn, "emails", {"order": 42})

Once that has committed, a caller that needs the outcome waits for it, on a
connection outside a transaction::

    with psycopg.connect(dsn, autocommit=True) as conn:
        state = pgjobq.wait(conn, job_id, timedelta(seconds=30))  # a JobState; None at the timeout

Name job types as tasks, enqueued with checked keyword arguments::

    tasks = pgjobq.Tasks(queue="emails")

    @tasks.task(max_attempts=5)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(conn, user_id=7)

and run them with ``pgjobq worker --tasks myapp.tasks`` (:class:`Tasks`;
:mod:`pgjobq.testing` runs them in an application's own tests).

Run handlers with :class:`Worker` (coroutine handlers with :class:`AsyncWorker`;
the same calls on an asyncio connection are in :mod:`pgjobq.aio`) or the
``pgjobq worker`` command.  This
package works with the extension versions in ``SUPPORTED_EXTENSION_VERSIONS``:
the Worker and the CLI refuse any other when they connect, and
:func:`check_extension` does the same for an application's own connection.
"""

from __future__ import annotations

import logging

from pgjobq import aio
from pgjobq._client.sync import (
    Cancellation,
    Health,
    JobState,
    QueueOverview,
    QueueSettings,
    QueueStats,
    Schedule,
    Step,
    cancel,
    channel,
    claim,
    claim_any,
    complete,
    complete_and_claim,
    complete_many,
    configure_queue,
    enqueue,
    enqueue_flow,
    enqueue_many,
    fail,
    health,
    heartbeat,
    heartbeat_many,
    job,
    pause,
    purge,
    queue_overview,
    queues,
    reap,
    register_waiter,
    release,
    resume,
    retry_failed,
    schedule,
    schedules,
    signal,
    snooze,
    stats,
    steps,
    tick,
    unhold,
    unschedule,
    wait,
    watch,
)
from pgjobq._errors import (
    ConfigurationError,
    Discard,
    Error,
    IncompatibleExtension,
    InvalidArgument,
    IsolationLevelError,
    JobNotFound,
    JobTimedOut,
    LeaseLost,
    PayloadTooLarge,
    PermissionDenied,
    Retry,
    SignalTimeout,
    Snooze,
    Suspended,
    UniqueKeyInUse,
)
from pgjobq._install.check import check_extension
from pgjobq._job import Job, ParentResult
from pgjobq._router import JobAddress, QueueRouter
from pgjobq._tasks import Task, Tasks
from pgjobq._version import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS
from pgjobq._worker.aio import AsyncWorker
from pgjobq._worker.observe import Outcome, WorkerObserver
from pgjobq._worker.settings import WorkerSettings
from pgjobq._worker.sync import Worker

__all__ = [
    "SUPPORTED_EXTENSION_VERSIONS",
    "AsyncWorker",
    "Cancellation",
    "ConfigurationError",
    "Discard",
    "Error",
    "Health",
    "IncompatibleExtension",
    "InvalidArgument",
    "IsolationLevelError",
    "Job",
    "JobAddress",
    "JobNotFound",
    "JobState",
    "JobTimedOut",
    "LeaseLost",
    "Outcome",
    "ParentResult",
    "PayloadTooLarge",
    "PermissionDenied",
    "QueueOverview",
    "QueueRouter",
    "QueueSettings",
    "QueueStats",
    "Retry",
    "Schedule",
    "SignalTimeout",
    "Snooze",
    "Step",
    "Suspended",
    "Task",
    "Tasks",
    "UniqueKeyInUse",
    "Worker",
    "WorkerObserver",
    "WorkerSettings",
    "aio",
    "cancel",
    "channel",
    "check_extension",
    "claim",
    "claim_any",
    "complete",
    "complete_and_claim",
    "complete_many",
    "configure_queue",
    "enqueue",
    "enqueue_flow",
    "enqueue_many",
    "fail",
    "health",
    "heartbeat",
    "heartbeat_many",
    "job",
    "pause",
    "purge",
    "queue_overview",
    "queues",
    "reap",
    "register_waiter",
    "release",
    "resume",
    "retry_failed",
    "schedule",
    "schedules",
    "signal",
    "snooze",
    "stats",
    "steps",
    "tick",
    "unhold",
    "unschedule",
    "wait",
    "watch",
]

__version__ = PACKAGE_VERSION

# Quiet by default: the application (or the CLI) decides what to show.
logging.getLogger(__name__).addHandler(logging.NullHandler())
