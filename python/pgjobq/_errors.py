"""pgjobq's exceptions, and the mapping from the extension's SQLSTATEs to them."""

from __future__ import annotations

import re
from datetime import timedelta

import psycopg

__all__ = [
    "ConfigurationError",
    "Error",
    "IncompatibleExtension",
    "InvalidArgument",
    "IsolationLevelError",
    "JobNotFound",
    "JobTimedOut",
    "LeaseLost",
    "PayloadTooLarge",
    "PermissionDenied",
    "SignalTimeout",
    "UniqueKeyInUse",
    "first_line",
    "translate",
]


class Error(Exception):
    """Root of every exception pgjobq raises.

    When the error comes from the database, ``sqlstate`` holds its SQLSTATE and
    ``__cause__`` the original psycopg exception.
    """

    sqlstate: str | None = None

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate


class InvalidArgument(Error, ValueError):
    """An argument was refused: NULL (22004), out of its domain (22023) or unserialisable."""


class PayloadTooLarge(InvalidArgument):
    """A payload exceeds the extension's limit of 1 MiB (54000)."""


class LeaseLost(Error):
    """The lease presented is not the job's current one (JQ001): the job was reaped,
    finished or claimed again, and this worker's result must be discarded."""


class JobNotFound(Error, LookupError):
    """No job has that id (JQ002)."""


class JobTimedOut(Error):
    """The job ran past its deadline, its queue's timeout (JQ003): its heartbeat is refused, and
    the reaper takes the job back once its lease runs out."""


class UniqueKeyInUse(Error):
    """An enqueue with ``on_conflict="raise"`` met a job holding its unique key (JQ004).

    ``job_id`` is the holder's id and ``status`` its status, as the database
    names them in the message and its DETAIL (None if they could not be read).
    """

    job_id: int | None = None
    status: str | None = None


class SignalTimeout(Error):
    """The signal a job awaited did not arrive before its timeout (JQ005, extension 0.11.0).

    Raised by ``job.await_signal(key, timeout)`` in the run after the
    timeout, and in every later run of the job (the outcome is recorded, as
    a step's is), whatever was sent since.  Let it propagate to fail the
    attempt, or catch it and go on.
    """


class PermissionDenied(Error):
    """The role lacks a privilege on the jobq schema, its table or a function (42501)."""


class IsolationLevelError(Error):
    """A claim of a queue with limits (concurrency, key_concurrency, rate_limit) ran in a transaction
    that is not READ COMMITTED (25000): the limits are counted from rows other transactions commit, so
    such a claim must see each commit as it happens.  Claim on an autocommit connection, or in a READ
    COMMITTED transaction."""


class ConfigurationError(Error, ValueError):
    """A worker or CLI setting makes no sense (raised before touching the database)."""


class IncompatibleExtension(Error):
    """The database has no pgjobq extension, or a version of it this package does not support."""


# 40001 (serialization_failure: a unique enqueue that could not settle, safe to
# retry) is left to psycopg as psycopg.errors.SerializationFailure, the error
# every retry loop around PostgreSQL already catches.
_BY_SQLSTATE: dict[str, type[Error]] = {
    "22004": InvalidArgument,  # null_value_not_allowed
    "22023": InvalidArgument,  # invalid_parameter_value
    "22P02": InvalidArgument,  # invalid_text_representation (e.g. bad JSON)
    "22P05": InvalidArgument,  # untranslatable_character (\u0000 in jsonb)
    "23514": InvalidArgument,  # check_violation on jobq.jobs
    "54000": PayloadTooLarge,  # program_limit_exceeded
    "JQ001": LeaseLost,
    "JQ002": JobNotFound,
    "JQ003": JobTimedOut,
    "JQ004": UniqueKeyInUse,
    "JQ005": SignalTimeout,
    "25000": IsolationLevelError,  # invalid_transaction_state: a limited claim outside READ COMMITTED
    "42501": PermissionDenied,  # insufficient_privilege
}


def translate(exc: psycopg.Error) -> Error | None:
    """The pgjobq exception for a database error, or None when pgjobq has none for it."""
    sqlstate = exc.sqlstate
    if sqlstate is None or sqlstate not in _BY_SQLSTATE:
        return None
    diag = exc.diag
    message = diag.message_primary or str(exc)
    if diag.message_detail:
        message = f"{message} ({diag.message_detail})"
    error = _BY_SQLSTATE[sqlstate](message, sqlstate=sqlstate)
    if isinstance(error, UniqueKeyInUse):
        holder = _HOLDER.search(diag.message_primary or "")
        error.job_id = None if holder is None else int(holder.group(1))
        status = _STATUS.search(diag.message_detail or "")
        error.status = None if status is None else status.group(1)
    error.__cause__ = exc
    return error


# JQ004: "unique key 'K' of queue 'Q' is held by job N", DETAIL "Job N is <status>."
_HOLDER = re.compile(r"is held by job (\d+)\s*$")
_STATUS = re.compile(r"\bis (\w+)\.?\s*$")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty), for logs."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- raised by handlers, to the Worker -------------------------------------------

__all__ += ["Discard", "Retry", "Snooze", "Suspended", "UnknownTask"]

# The database's bound on a snooze's delay and on retry_in: interval '10 years' (3,600 days to it).
_LONGEST_DELAY = timedelta(days=3600)


def _delay(name: str, value: object) -> timedelta:
    """value (seconds, or a timedelta) as a timedelta; InvalidArgument unless 0 <= value <= 10 years."""
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
        if not 0 <= seconds <= _LONGEST_DELAY.total_seconds():  # NaN fails both comparisons
            raise InvalidArgument(f"{name} must be between 0 seconds and 10 years, got {value!r}")
        delay = timedelta(seconds=seconds)
    else:
        kind = type(value).__name__
        raise InvalidArgument(f"{name} must be a number of seconds or a timedelta, got {kind}")
    if not timedelta(0) <= delay <= _LONGEST_DELAY:
        raise InvalidArgument(f"{name} must be between 0 seconds and 10 years, got {value!r}")
    return delay


class Snooze(Error):
    """Raise it in a handler to put the job back in its queue for ``delay``, the attempt not counted.

    ``delay`` is seconds (int or float) or a timedelta, from 0 to 10 years;
    anything else raises InvalidArgument here, in the handler, and so fails
    the job.  The Worker calls ``jobq.snooze``: the job is queued again with
    run_at = now + delay and its attempt given back.  A job whose cancel was
    requested becomes cancelled instead.
    """

    def __init__(self, delay: float | timedelta) -> None:
        self.delay = _delay("delay", delay)
        super().__init__(f"snoozed for {self.delay.total_seconds():g} s")


class Suspended(Error):
    """The job was given back to the database to wait without a worker (extension 0.11.0).

    Raised by ``job.sleep``, ``job.sleep_until`` and ``job.await_signal``
    once the database has parked the job: queued until the sleep's end, or
    waiting for the signal; its lease is spent, its attempt given back.  The
    run is over: let it propagate (the worker then has nothing to report),
    and do not catch it with ``except Exception`` and go on, because the job
    is no longer this worker's (anything it records next is refused with
    LeaseLost).  The job runs again, on any worker, when the time comes or
    the signal arrives, and its recorded steps return their results at once.
    """


class Discard(Error):
    """Raise it in a handler or task to fail the job for good at once, whatever attempts it has left.

    ``reason`` is recorded as the job's error (raised ``from`` another
    exception, that one's first line follows it).  The worker calls
    ``jobq.fail(..., retry => false)`` (extension 0.9.0): the job is failed,
    as at its last attempt, and its dependents and watchers learn it.  A job
    whose cancel was requested becomes cancelled instead, as with any failure.
    """

    def __init__(self, reason: str = "discarded") -> None:
        if not isinstance(reason, str):
            raise InvalidArgument(f"reason must be a string, got {type(reason).__name__}")
        self.reason = reason
        super().__init__(reason)


class UnknownTask(Error):
    """A job's task that this worker does not know (raised by the task dispatcher, handled by the worker).

    The worker hands the job back to its queue for a worker that knows the
    task, after ``retry_in`` seconds and without spending an attempt, and logs
    a warning naming the task; once the job is older than ``grace`` seconds it
    fails for good with this error instead.
    """

    def __init__(self, task: str | None, retry_in: float, grace: float) -> None:
        self.task = task
        self.retry_in = retry_in
        self.grace = grace
        super().__init__(f"unknown task {task!r}: no task of that name is registered with this worker")


class Retry(Error):
    """Raise it in a handler to fail this attempt and retry after ``after``, not the queue's backoff.

    ``after`` is seconds or a timedelta, from 0 to 10 years.  The attempt
    counts: when it was the last one the job fails for good, as any failure.
    The error recorded is ``message`` (default "retry in N s"); raised ``from``
    another exception, that one is recorded, as if it had been raised.
    """

    def __init__(self, after: float | timedelta, message: str | None = None) -> None:
        self.after = _delay("after", after)
        super().__init__(message if message is not None else f"retry in {self.after.total_seconds():g} s")
