"""Acknowledgements: how a worker reports each handler's outcome, shared by both workers (no I/O).

Successes are batched (InHand.ack_due): one jobq.complete_many, or riding on
the next claim (jobq.complete_and_claim); the database refuses the lease of
a job reaped meanwhile (``lost``).  Every other outcome is reported on its
own by :func:`report`, a step (pgjobq._worker.steps) that yields the
statements to send (pgjobq._client.proto.Call) and is sent each one's value
(or has its error thrown in), then returns the Outcome: jobq.release for a
job asked to stop before its handler started, and for a job whose lease the
worker presumed lost (it could not reach the database to extend it) unless
its handler snoozed: the attempt was cut short by the worker, not by the
job; jobq.snooze for Snooze (a delay the database refuses fails the job
instead); for UnknownTask (a task this worker does not know) jobq.hand_back
(extension 0.9.0: queued again after its retry_in, the attempt not counted,
or failed for good once older than its grace), or jobq.snooze for its
retry_in where the extension has no hand_back (0.8.0); jobq.fail for the
rest, with retry_in for Retry, and retry => false for Discard (extension
0.9.0: failed for good at once; 0.8.0 can only fail it as any failure).

Every log line about one job carries its fields (pgjobq._job.log_fields:
job_id, task, queue, attempt), for a JSON log formatter.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Generator, Iterable
from datetime import datetime, timedelta
from typing import Any

from pgjobq._client import proto
from pgjobq._errors import (
    Discard,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    Retry,
    Snooze,
    Suspended,
    UnknownTask,
    first_line,
)
from pgjobq._job import Job, log_fields
from pgjobq._worker.observe import Outcome

__all__ = [
    "CancelledUnstarted",
    "Report",
    "acknowledged",
    "encode_result",
    "failure_message",
    "is_coroutine_function",
    "lost",
    "report",
]

logger = logging.getLogger("pgjobq.worker")

Report = Generator["proto.Call[Any]", Any, Outcome]


class CancelledUnstarted(Exception):
    """The outcome of a job whose cancel was requested before its handler started: handed back."""


def is_coroutine_function(handler: object) -> bool:
    """Whether handler is an async def, or an object whose __call__ is one: calling it makes a coroutine."""
    call = type(handler).__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def handler_name(handler: object) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))


def encode_result(handler: object, result: object) -> str | None:
    """A handler's return value as JSON text (None: no result).

    An awaitable fails the job (TypeError): a sync worker cannot await it.
    A value JSON cannot encode, or jsonb cannot store, fails the job with
    InvalidArgument naming its type, rather than completing it without its
    result.
    """
    if result is None:
        return None
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never started: no "was never awaited" warning
        raise TypeError(
            f"handler {handler_name(handler)} returned {type(result).__name__}, an awaitable this Worker "
            "cannot await: the job did not run"
        )
    return proto.dump_json(result, f"the handler's result (a {type(result).__name__})")


def lost(job: Job, what: str) -> None:
    """Log that the database refused job's lease: a warning, unless the job was cancelled meanwhile, or
    the worker presumed the lease lost already (and warned then)."""
    fields = log_fields(job)
    if job._lease_presumed_lost():
        logger.info("job %d: lease %d gone, as presumed; %s", job.id, job.lease, what, extra=fields)
    elif job._cancel_is_set():  # most likely cancelled by force, which voids the lease
        logger.info("job %d: lease %d void (cancelled meanwhile?); %s", job.id, job.lease, what, extra=fields)
    else:
        logger.warning("job %d: lease %d lost; %s", job.id, job.lease, what, extra=fields)


def acknowledged(successes: Iterable[Job], accepted: set[int]) -> list[tuple[Job, Outcome]]:
    """Log the outcome of acknowledging successes; each one's Outcome (done, or lost when refused).

    A success is logged at DEBUG: a line per job done cost a worker of zero-work
    jobs about as many instructions as the database spent on the job
    (bench/results/profile.md); failures, retries and the rest stay at INFO and up.
    """
    outcomes: list[tuple[Job, Outcome]] = []
    debug = logger.isEnabledFor(logging.DEBUG)
    for job in successes:
        if job.id in accepted:
            if debug:
                logger.debug("job %d done (attempt %d)", job.id, job.attempts, extra=log_fields(job))
            outcomes.append((job, "done"))
        else:
            lost(job, "result discarded")
            outcomes.append((job, "lost"))
    return outcomes


def _when(moment: datetime | None) -> str:
    return "?" if moment is None else moment.isoformat(timespec="seconds")


def failure_message(error: BaseException) -> str:
    """The error a failure records: "<ExceptionType>: <message>" (for Retry raised from another exception,
    that one's); for Discard its reason (raised from another exception, that one's first line after it)."""
    cause = error.__cause__
    if isinstance(error, Discard):
        if cause is None:
            return error.reason
        return f"{error.reason}: {type(cause).__name__}: {first_line(cause)}"
    failure = cause if isinstance(error, Retry) and cause is not None else error
    return f"{type(failure).__name__}: {failure}"


def report(job: Job, error: BaseException, *, fail_for_good: bool = False, hand_back: bool = False) -> Report:
    """Report one outcome other than success (see the module docstring).

    fail_for_good: the extension's jobq.fail takes retry => false; hand_back:
    it has jobq.hand_back (both from 0.9.0; the defaults are 0.8.0's).
    """
    fields = log_fields(job)
    if isinstance(error, Suspended):
        # job.sleep or job.await_signal gave the job back in the database (extension 0.11.0): its
        # lease is spent, its attempt given back; nothing is left to report
        logger.info("job %d suspended, attempt %d given back: %s", job.id, job.attempts, error, extra=fields)
        return "snoozed"
    if job._lease_presumed_lost() and not isinstance(error, Snooze):
        # The worker asked the handler to stop (or not to start) because it could not reach the database
        # to extend the lease: the attempt is not the job's to count.  Handed back: queued again with the
        # attempt given back, or cancelled if jobq.cancel asked meanwhile; refused if reaped meanwhile.
        try:
            yield proto.release(job.id, job.lease)
        except (LeaseLost, JobNotFound):
            lost(
                job,
                "not started"
                if isinstance(error, CancelledUnstarted)
                else f"stopped ({type(error).__name__}: {first_line(error)})",
            )
            return "lost"
        logger.info(
            "job %d handed back, attempt %d given back: its lease was presumed lost, and its handler %s",
            job.id, job.attempts, "had not started" if isinstance(error, CancelledUnstarted) else "stopped",
            extra=fields,
        )  # fmt: skip
        return "released"
    if isinstance(error, CancelledUnstarted):
        try:
            yield proto.release(job.id, job.lease)
        except (LeaseLost, JobNotFound):
            lost(job, "not started")
            return "lost"
        logger.info("job %d: cancel requested before it started; handed back unstarted", job.id, extra=fields)
        return "released"
    if isinstance(error, UnknownTask) and hand_back:
        message = str(error)
        call = proto.hand_back(
            job.id, job.lease, timedelta(seconds=error.retry_in), message, timedelta(seconds=error.grace)
        )
        try:
            status = yield call
        except (LeaseLost, JobNotFound):
            lost(job, "not handed back")
            return "lost"
        if status == "failed":
            logger.error(
                "job %d failed for good (older than %g s, and no worker knew its task): %s",
                job.id, error.grace, message, extra=fields,
            )  # fmt: skip
            return "failed"
        if status == "cancelled":
            logger.info("job %d cancelled (its task is unknown here)", job.id, extra=fields)
            return "cancelled"
        logger.info(
            "job %d handed back for %g s, attempt %d given back: its task %r is unknown here",
            job.id, error.retry_in, job.attempts, error.task, extra=fields,
        )  # fmt: skip
        return "snoozed"
    delay = (
        error.delay
        if isinstance(error, Snooze)
        else timedelta(seconds=error.retry_in)  # no hand_back (0.8.0): snoozed for a worker that knows it
        if isinstance(error, UnknownTask)
        else None
    )
    if delay is not None:
        try:
            run_at = yield proto.snooze(job.id, job.lease, delay)
        except (LeaseLost, JobNotFound):
            lost(job, "snooze discarded")
            return "lost"
        except InvalidArgument as refused:  # a delay the database does not take: a failure then
            error = refused
        else:
            if run_at is None:  # its cancel was requested: cancelled instead
                logger.info("job %d cancelled (its handler asked to snooze)", job.id, extra=fields)
                return "cancelled"
            logger.info(
                "job %d snoozed for %s s, until %s (attempt %d given back)",
                job.id, delay.total_seconds(), _when(run_at), job.attempts, extra=fields,
            )  # fmt: skip
            return "snoozed"
    retry_in = error.after if isinstance(error, Retry) else None
    discard = isinstance(error, Discard) and fail_for_good
    message = failure_message(error)
    try:
        status, run_at = yield proto.fail(job.id, message, job.lease, retry_in, retry=not discard)
    except (LeaseLost, JobNotFound):
        lost(job, f"failure discarded ({message})")
        return "lost"
    if status == "cancelled":
        logger.info("job %d cancelled (attempt %d): %s", job.id, job.attempts, message, extra=fields)
        return "cancelled"
    if status == "failed":
        logger.error(
            "job %d %s (attempt %d/%d): %s",
            job.id, "discarded: failed for good" if discard else "failed for good", job.attempts,
            job.max_attempts, message, extra=fields,
        )  # fmt: skip
        return "failed"
    logger.warning(
        "job %d failed (attempt %d/%d), retry at %s: %s",
        job.id, job.attempts, job.max_attempts, _when(run_at), message, extra=fields,
    )  # fmt: skip
    return "retried"
