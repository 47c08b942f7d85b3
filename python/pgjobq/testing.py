"""pgjobq.testing: run the jobs due now inline, in an application's own tests, against its test database.

::

    import pgjobq.testing
    from myapp.tasks import send_welcome, tasks

    def test_a_new_user_is_welcomed(conn):
        send_welcome.enqueue(conn, user_id=7)

        [ran] = pgjobq.testing.run_due(conn, tasks)

        assert ran.status == "done"

:func:`run_due` claims the jobs due now, one at a time in the order a
worker would claim them, runs each in the calling process (a task, or a
plain handler), and settles it exactly as the worker does (the same
statements, as the database's extension version has them: complete with
the result, ``jobq.fail`` for an exception and for ``Retry`` and
``Discard``, ``jobq.snooze`` for ``Snooze``, ``jobq.hand_back`` for a task
the registry does not know), then returns what happened to each, as
:class:`Ran`.
Nothing runs concurrently and nothing is left to a clock of this process:
the same jobs in the same database give the same runs.

The connection is used as it is and nothing is committed:

- an autocommit connection commits each claim and each settlement at once,
  as a worker's do (the jobs enqueued by other connections are seen once
  they have committed);
- on a connection that is not autocommit, everything happens in its
  current transaction (begun if there is none): the jobs enqueued in it are
  seen, and rolling it back at the end of the test undoes every run.  Each
  settlement runs in a savepoint, so that one the database refuses leaves
  the transaction usable.  A task that writes through a connection of its
  own does not see that transaction's uncommitted rows, and cannot lock
  them without waiting for it.

Each job runs at most once per call: a job due again after its run
(retried or snoozed with no delay) is left queued, to run in the next call.
Jobs that become due during the call (enqueued by a task, or children of a
flow whose parents are done) run in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pgjobq import aio
from pgjobq._client import proto
from pgjobq._client import sync as client
from pgjobq._client.proto import JobState
from pgjobq._errors import InvalidArgument, Snooze, UnknownTask
from pgjobq._install.check import check_extension
from pgjobq._job import CURRENT_JOB, Job
from pgjobq._tasks import Tasks
from pgjobq._worker import acks, durable, steps
from pgjobq._worker.observe import Outcome

__all__ = ["WORKER", "Ran", "run_due", "run_due_async"]

WORKER = "pgjobq.testing"
"""The worker name the jobs are claimed under (jobq.jobs.locked_by while they run)."""

LIMIT = 1000
"""How many jobs one call runs at most (see run_due)."""

logger = logging.getLogger("pgjobq.testing")

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]
Handler = Callable[[Job], Any]


@dataclass(frozen=True, slots=True)
class Ran:
    """What happened to one job that run_due ran.

    ``job``: the job as claimed (``job.attempts`` is this attempt).
    ``status``: how the worker's settlement left it: "done" (completed, with
    ``result``), "retried" (failed, queued to run again), "failed" (failed
    for good: out of attempts, discarded, or a task unknown for longer than
    the registry's grace), "snoozed" (put back, the attempt not counted: by
    a Snooze, or handed back because the registry does not know its task),
    "cancelled" (its cancel was requested meanwhile), or "lost" (its lease
    was gone when it was settled).
    ``error``: the error recorded with the job (``jobq.job(id).last_error``,
    as ``"ValueError: boom"``) when it did not end done, nor snoozed by a
    Snooze; for a lost job, the exception's type and message.
    ``result``: what the task returned (None when it raised).
    ``exception``: what it raised, with its traceback (None when it
    returned); not compared.
    """

    job: Job
    status: Outcome
    error: str | None = None
    result: Any = None
    exception: BaseException | None = field(default=None, compare=False)


def run_due(
    conn: Conn,
    tasks: Tasks | Handler,
    queues: Iterable[str] | None = None,
    *,
    limit: int = LIMIT,
) -> list[Ran]:
    """Run every job of queues that is due now, here and now, one at a time; what happened to each, in
    the order they ran.

    tasks: a :class:`pgjobq.Tasks` (each job runs its task: a sync one in
    this thread, an async one with ``asyncio.run``, so not from inside a
    running event loop: use :func:`run_due_async` there), or a plain
    handler called with each Job (a coroutine function is run with
    ``asyncio.run``).  queues: the queues to run (default: the registry's
    queues; a plain handler has none, so it needs them).  Jobs are claimed
    as a worker claims them (priority, then run_at, then id; paused queues
    and limits respected) with the registry's longest lease_timeout, and
    never heartbeated.  See the module docstring for the connection, its
    transaction, and which jobs run.  limit: RuntimeError once that many
    jobs have run and another is due (a task that enqueues itself, due
    now, for ever).  IncompatibleExtension when the database's pgjobq is
    not one this package supports.
    """
    names, lease_timeout = _plan(tasks, queues, limit)
    if not names:
        return []
    if _coroutines(tasks) and _in_event_loop():
        raise RuntimeError(
            "run_due runs async tasks with asyncio.run, which cannot run inside a running event loop: "
            "await pgjobq.testing.run_due_async there"
        )

    def send(request: steps.Request | _Run) -> Any:
        if isinstance(request, _Run):
            return _called(tasks, request.job, runs)
        assert isinstance(request, proto.Call), request  # a report asks for statements only
        if conn.autocommit or conn.info.transaction_status != TransactionStatus.INTRANS:
            return client._run(conn, request)
        with conn.transaction():  # a savepoint: a refusal leaves the caller's transaction usable
            return client._run(conn, request)

    async def send_awaited(call: proto.Call[Any]) -> Any:
        return send(call)  # an async task's durable calls, on this same connection

    # the jobs' durable calls (job.step, ...), on the caller's connection as the rest
    runs = (durable.Durable(send), durable.AsyncDurable(send_awaited))

    features = steps.FEATURES[check_extension(conn)]
    claim = _claim_call(features, names, lease_timeout)
    return steps.drive(_runs(features, claim, tasks, limit), send)


async def run_due_async(
    conn: AsyncConn,
    tasks: Tasks | Handler,
    queues: Iterable[str] | None = None,
    *,
    limit: int = LIMIT,
) -> list[Ran]:
    """As :func:`run_due`, on an AsyncConnection from a coroutine: async tasks (and coroutine handlers)
    are awaited on the running loop, sync ones run on a thread (asyncio.to_thread), one job at a time."""
    names, lease_timeout = _plan(tasks, queues, limit)
    if not names:
        return []

    async def send(request: steps.Request | _Run) -> Any:
        if isinstance(request, _Run):
            return await _awaited(tasks, request.job, runs)
        assert isinstance(request, proto.Call), request
        if conn.autocommit or conn.info.transaction_status != TransactionStatus.INTRANS:
            return await aio._run(conn, request)
        async with conn.transaction():
            return await aio._run(conn, request)

    # the jobs' durable calls (job.step, ...): awaited here, or sent here from a sync task's thread
    runs = durable.OnLoop(send, asyncio.get_running_loop())

    features = steps.FEATURES[await aio.check_extension(conn)]
    claim = _claim_call(features, names, lease_timeout)
    return await steps.adrive(_runs(features, claim, tasks, limit), send)


# -- the parts both share ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Run:
    """What _runs asks its driver besides statements: run the job's task (or the handler) and answer
    with what it returned (what it raised is thrown back into _runs)."""

    job: Job


def _runs(
    features: steps.Features, claim: proto.Call[list[Job]], tasks: Tasks | Handler, limit: int
) -> Generator[steps.Request | _Run, Any, list[Ran]]:
    """run_due's and run_due_async's one loop, as a step (pgjobq._worker.steps): claim a job, run it,
    settle it as the worker would, until no job is due; what happened to each, in the order they ran."""
    ran: list[Ran] = []
    seen: set[int] = set()
    repeats: list[Job] = []  # claimed again after their run in this call: held, handed back at the end
    try:
        while True:
            claimed: list[Job] = yield claim
            if not claimed:
                return ran
            job = claimed[0]
            if job.id in seen or len(ran) >= limit:
                repeats.append(job)
                if job.id in seen:
                    continue
                raise RuntimeError(_over(limit))
            seen.add(job.id)
            try:
                result = yield _Run(job)
                encoded = acks.encode_result(tasks, result)
            except Exception as exc:
                _warn_unknown(job, exc)
                outcome = yield from _report(features, job, exc)
                error = None
                if _recorded(outcome, exc):
                    error = _error((yield proto.job_state("job", proto.job_id_params(job.id))), exc)
                ran.append(Ran(job, outcome, error, exception=exc))
            else:
                accepted = yield proto.complete_many_unchecked([job.id], [job.lease], [encoded])
                ran.append(Ran(job, _acknowledged(job, accepted), result=result))
    finally:
        for job in repeats:
            yield proto.release(job.id, job.lease)


def _plan(
    tasks: Tasks | Handler, queues: Iterable[str] | None, limit: int
) -> tuple[list[str], timedelta | None]:
    """The queues to claim from and the lease to claim with; InvalidArgument for what cannot be run."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidArgument(f"limit must be an integer of 1 or more, got {limit!r}")
    if isinstance(tasks, Tasks):
        names = list(tasks.queues) if queues is None else _queue_names(queues)
        lease = tasks.lease_timeout
        return names, None if lease is None else timedelta(seconds=lease)
    if not callable(tasks):
        raise InvalidArgument(f"tasks must be a pgjobq.Tasks or a handler, got {type(tasks).__name__}")
    if queues is None:
        raise InvalidArgument("queues must be given with a handler (a Tasks knows its own)")
    return _queue_names(queues), None


def _coroutines(tasks: Tasks | Handler) -> bool:
    """Whether running tasks may need an event loop (an async task, or a coroutine handler)."""
    return tasks.is_async if isinstance(tasks, Tasks) else acks.is_coroutine_function(tasks)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _queue_names(queues: Iterable[str]) -> list[str]:
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Iterable):
        raise InvalidArgument(f"queues must be a list of queue names, got {type(queues).__name__}")
    names = list(queues)
    if not names:
        raise InvalidArgument("queues must name at least one queue, got none")
    return names


def _over(limit: int) -> str:
    return (
        f"run_due ran {limit} jobs and more are due (a task that enqueues itself, due now, runs for "
        "ever): give a higher limit if that many are expected"
    )


def _called(tasks: Tasks | Handler, job: Job, runs: tuple[durable.Durable, durable.AsyncDurable]) -> object:
    """Run job's task (or the handler) on it in this thread, its durable calls through runs (the first
    for a sync one, the second for one run with asyncio.run); what it returned."""
    token = CURRENT_JOB.set(job)
    try:
        if isinstance(tasks, Tasks):
            task = tasks.task_of(job)
            if task.is_async:
                object.__setattr__(job, "_durable", runs[1])
                return asyncio.run(task.run_async(job))
            object.__setattr__(job, "_durable", runs[0])
            return task.run(job)
        if acks.is_coroutine_function(tasks):
            object.__setattr__(job, "_durable", runs[1])
            return asyncio.run(tasks(job))
        object.__setattr__(job, "_durable", runs[0])
        return tasks(job)
    finally:
        CURRENT_JOB.reset(token)


async def _awaited(tasks: Tasks | Handler, job: Job, runs: durable.OnLoop) -> object:
    """Run job's task (or the handler) on it from this coroutine (as the AsyncWorker does), its durable
    calls through runs; what it returned."""
    object.__setattr__(job, "_durable", runs)
    token = CURRENT_JOB.set(job)
    try:
        if isinstance(tasks, Tasks):
            return await tasks.task_of(job).run_async(job)
        if acks.is_coroutine_function(tasks):
            return await tasks(job)
        result = await asyncio.to_thread(tasks, job)
        return await result if inspect.isawaitable(result) else result
    finally:
        CURRENT_JOB.reset(token)


def _claim_call(
    features: steps.Features, queues: list[str], lease_timeout: timedelta | None
) -> proto.Call[Any]:
    """The claim of one job of queues, with the statement of the database's extension version (the
    worker's: its jobs carry their task from 0.9.0 on)."""
    checked = proto.claim_any(queues, 1, WORKER, lease_timeout)
    return dataclasses.replace(checked, name=features.claim_any, decode=features.jobs)


def _report(features: steps.Features, job: Job, exc: Exception) -> steps.Step[Outcome]:
    """The worker's settlement of a job whose task raised exc, as the extension version can."""
    return acks.report(job, exc, fail_for_good=features.fail_for_good, hand_back=features.hand_back)


def _warn_unknown(job: Job, exc: Exception) -> None:
    if isinstance(exc, UnknownTask):
        logger.warning(
            "job %d of queue %s has task %r, which this registry does not know: handed back (again in %g s; "
            "failed for good once older than %g s)",
            job.id, job.queue, exc.task, exc.retry_in, exc.grace,
        )  # fmt: skip


def _acknowledged(job: Job, accepted: set[int]) -> Outcome:
    """done, or lost when the database refused the job's lease."""
    [(_, outcome)] = acks.acknowledged([job], accepted)
    return outcome


def _recorded(outcome: Outcome, exc: Exception) -> bool:
    """Whether a job whose task raised exc, settled to outcome, has an error recorded with it, to read
    back as Ran.error (what the worker recorded): not after a Snooze, nor for a job whose lease was lost
    (its row is not this run's any more)."""
    return outcome != "lost" and not (outcome == "snoozed" and isinstance(exc, Snooze))


def _error(state: JobState, exc: Exception) -> str:
    return state.last_error if state.last_error is not None else _described(exc)


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
