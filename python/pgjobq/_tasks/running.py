"""Running a task on a job: its keyword arguments from the payload, its timeout, its retry_on.

What the call raises is what the worker settles the job by (see
:class:`pgjobq.Worker`): a return completes it, ``Snooze``, ``Retry`` and
``Discard`` mean what they say, and any other exception fails the attempt,
to be retried while attempts are left, unless the task has ``retry_on``
and the exception is none of those: then it is a ``Discard`` raised from
it, which fails the job at once.

The timeout (``timeout=`` seconds): an async task is cancelled at its
timeout; a sync task runs on a thread of its own, and the attempt fails at
its timeout the same way while the thread, which nothing can stop, runs on
(what it ends with is dropped, with a warning).  Either way the attempt
fails with a TimeoutError naming the task and its timeout, which retry_on
judges as any other exception (list TimeoutError there to retry a task
that timed out).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from pgjobq._errors import Discard, Retry, Snooze, Suspended, first_line
from pgjobq._job import Job

if TYPE_CHECKING:
    from pgjobq._tasks.task import Task

__all__ = ["arguments", "run", "run_async"]

logger = logging.getLogger("pgjobq.tasks")

# Raised by a task to settle its job itself: never judged by retry_on.
_SETTLING = (Snooze, Retry, Discard, Suspended)


def arguments(task: Task[..., Any], job: Job) -> dict[str, Any]:
    """The keyword arguments of the call that runs job (see Task.arguments)."""
    payload = job.payload
    if not isinstance(payload, Mapping):
        raise Discard(
            f"task {task.name}: the job's payload is a JSON {type(payload).__name__}, not an object of "
            "keyword arguments"
        )
    given = dict(payload)
    if task.job_parameter is not None:
        if task.job_parameter in given:
            raise Discard(
                f"task {task.name}: the payload has the key {task.job_parameter!r}, the parameter that "
                "receives the job"
            )
        given[task.job_parameter] = job
    try:
        task.signature.bind(**given)
    except TypeError as exc:
        raise Discard(
            f"task {task.name}: the job's payload does not fit the task's arguments ({exc}); "
            "no retry can change that"
        ) from None
    return given


def _judged(task: Task[..., Any], exc: Exception) -> Exception:
    """What the attempt ends with when the task raised exc: exc, or, when the task has retry_on and exc is
    none of those, a Discard (to be raised from exc, so that the worker records exc after it)."""
    if task.retry_on is None or isinstance(exc, (*_SETTLING, *task.retry_on)):
        return exc
    names = ", ".join(kind.__name__ for kind in task.retry_on) or "nothing"
    return Discard(f"task {task.name} retries only on {names}, not on {type(exc).__name__}")


def _timed_out(task: Task[..., Any], *, thread: bool) -> TimeoutError:
    runs_on = " (its thread runs on: a thread cannot be stopped)" if thread else ""
    return TimeoutError(f"task {task.name} ran past its timeout of {task.timeout:g} s{runs_on}")


def run(task: Task[..., Any], job: Job) -> object:
    """Call the task's function on job's arguments in this thread (on a thread of its own when it has a
    timeout); its result, or the exception the attempt ends with (see the module docstring).

    For a sync task: an async one (whose call would only make a coroutine) raises TypeError.
    """
    if task.is_async:
        raise TypeError(f"task {task.name} is async: it runs on an event loop (run_async, AsyncWorker)")
    given = arguments(task, job)
    try:
        if task.timeout is None:
            return task.function(**given)
        return _on_own_thread(task, job, given)
    except Exception as exc:
        judged = _judged(task, exc)
        if judged is exc:
            raise
        raise judged from exc


async def run_async(task: Task[..., Any], job: Job) -> object:
    """Run the task on job from a coroutine: an async task awaited on the running loop (cancelled at its
    timeout), a sync one by :func:`run` on a thread (asyncio.to_thread)."""
    if not task.is_async:
        return await asyncio.to_thread(run, task, job)
    given = arguments(task, job)
    try:
        call: Awaitable[object] = task.function(**given)
        if task.timeout is None:
            return await call
        return await _within(task, job, call)
    except Exception as exc:
        judged = _judged(task, exc)
        if judged is exc:
            raise
        raise judged from exc


async def _within(task: Task[..., Any], job: Job, call: Awaitable[object]) -> object:
    """call's value, or TimeoutError once the task's timeout has passed (call is then cancelled).

    Not asyncio.wait_for: a TimeoutError the task raises itself must stay its own.
    """
    assert task.timeout is not None
    running = asyncio.ensure_future(call)  # with this context: the job's CURRENT_JOB
    try:
        done, _ = await asyncio.wait({running}, timeout=task.timeout)
    except BaseException:  # this coroutine was cancelled (the worker stops): so is the task's
        running.cancel()
        raise
    if not done:
        running.cancel()
        running.add_done_callback(_dropped(task, job, time.monotonic()))
        raise _timed_out(task, thread=False)
    return running.result()


def _dropped(task: Task[..., Any], job: Job, since: float) -> Callable[[asyncio.Future[object]], None]:
    """A done callback for a task's coroutine cancelled at its timeout: warns when it ended otherwise
    than cancelled (it caught the cancellation), since what it ended with is dropped."""

    def done(future: asyncio.Future[object]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        what = "its result" if error is None else f"its {type(error).__name__}: {first_line(error)}"
        logger.warning(
            "task %s of job %d ended %.3g s after its timeout (it caught the cancellation): %s is dropped",
            task.name, job.id, time.monotonic() - since, what,
        )  # fmt: skip

    return done


def _on_own_thread(task: Task[..., Any], job: Job, given: dict[str, Any]) -> object:
    """Call the task's function on a thread of its own, with this thread's context; its result, or its
    exception, or TimeoutError at the task's timeout (the thread runs on; what it ends with is then
    dropped, with a warning)."""
    assert task.timeout is not None
    context = contextvars.copy_context()
    lock = threading.Lock()
    ended: list[tuple[bool, Any]] = []  # (returned, value or exception), once the call is over
    late: list[float] = []  # when the attempt gave up on it (monotonic), once it has
    finished = threading.Event()

    def call() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(task.function, **given))
        except BaseException as exc:
            outcome = (False, exc)
        with lock:
            ended.append(outcome)
            gave_up = late[0] if late else None
        finished.set()
        if gave_up is not None:
            returned, value = outcome
            what = "its result" if returned else f"its {type(value).__name__}: {first_line(value)}"
            logger.warning(
                "task %s of job %d ended %.3g s after its timeout: %s is dropped",
                task.name, job.id, time.monotonic() - gave_up, what,
            )  # fmt: skip

    thread = threading.Thread(target=call, name=f"pgjobq-task-{task.name}-{job.id}", daemon=True)
    thread.start()
    finished.wait(task.timeout)
    with lock:
        if not ended:
            late.append(time.monotonic())
            raise _timed_out(task, thread=True)
    returned, value = ended[0]
    if returned:
        return value
    raise value
