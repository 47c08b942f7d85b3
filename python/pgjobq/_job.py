"""Job: what a handler receives."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pgjobq._errors import Error

__all__ = ["CURRENT_JOB", "Job", "ParentResult", "log_fields"]

# Guards the lazy creation of a job's cancel event: the handler's thread and
# the worker's may both be first to ask for it.
_CANCEL_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ParentResult:
    """One parent of a job, as ``job.parent_results()`` gives it: its id, its status (done, failed,
    cancelled; queued or running while it has not ended), and its result (None when it returned none or
    did not end done)."""

    id: int
    status: str | None
    result: Any


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed job, as handed to a handler.

    ``lease`` is the fencing token of this claim: the worker presents it to
    complete, fail or heartbeat the job, and the database refuses it once the
    job has been reaped and claimed again.

    ``headers`` is the JSON object given to ``jobq.enqueue(headers => ...)``
    (``{}`` when none was).

    A job has no deadline of its own to read: when its queue has a timeout
    (``jobq.configure_queue(timeout => ...)``), the database alone keeps the
    deadline (claim time plus that timeout), extends the lease no further,
    and ``jobq.reap`` recovers the job (it counts as a failed attempt) once
    the lease runs out.  The worker learns at a heartbeat that the deadline
    has passed, stops heartbeating the job and says so once in a warning.

    ``cancel_requested`` is a :class:`threading.Event`, set by the worker when
    it learns that the job should stop: ``jobq.cancel`` asked for it (the
    worker hears it within a tenth of a second by notification, or at its
    next heartbeat), or the job's lease is gone (force-cancelled, or reaped),
    so that its result would be discarded anyway, or the worker could not
    reach the database to extend the lease for longer than its length (the
    lease is presumed lost: another worker may be running the job; a handler
    that then raises has its job handed back, the attempt not counted, rather
    than failed).  It is never cleared, and
    the deadline passing does not set it.  A long handler polls
    ``job.cancel_requested.is_set()`` between steps, or waits on it
    (``if job.cancel_requested.wait(5): ...``).  To leave the
    job ``cancelled``, raise (any exception: the failure is recorded, never
    retried; ``Snooze`` too); to mark it done (the work happened after all),
    return.

    In a coroutine handler (``AsyncWorker``), ``await
    job.wait_for_cancel(timeout)`` waits for the same request without
    blocking the event loop (True once it is set, False at the timeout).

    ``task`` is the name of the job's task (``@tasks.task``, or
    ``jobq.enqueue(..., task => ...)``), None for a plain job.

    ``_lease_seconds`` and ``_waited`` are the worker's bookkeeping, not
    part of the interface: the length of the lease as claimed, and how long
    the job had been runnable (since its run_at) when it was claimed, both
    in seconds by the database's clock (a queue's timeout may have cut the
    lease short).
    """

    id: int
    queue: str
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    lease: int
    _lease_seconds: float | None = field(default=None, repr=False, compare=False)
    _waited: float | None = field(default=None, repr=False, compare=False)
    # last, so that a claimed row without headers (most) leaves it out and gets the default
    headers: dict[str, Any] = field(default_factory=dict)
    # the job's task (jobq.jobs.task, extension 0.9.0): None for a plain job
    task: str | None = None
    # jobq.jobs.control as claimed (extension 0.11.0): bit 64, the job recorded steps
    _control: int | None = field(default=None, repr=False, compare=False)
    # Set by the worker before the handler runs: how the durable calls reach the database
    # (pgjobq._worker.durable); None for a job no worker runs.
    _durable: _Durable | None = field(default=None, init=False, repr=False, compare=False)
    # The steps recorded, read at the run's first step (pgjobq._worker.durable), and the sleeps named so far.
    _recorded: dict[str, tuple[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)
    _sleeps: int = field(default=0, init=False, repr=False, compare=False)
    _fan_outs: int = field(default=0, init=False, repr=False, compare=False)
    # The database parked the job (a sleep, a wait for a signal): its lease is spent, not lost.
    _suspended: bool = field(default=False, init=False, repr=False, compare=False)
    # Made on first use: most jobs are never asked for it, and an Event costs
    # as much to make as the rest of the job.
    _cancel: _CancelEvent | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def cancel_requested(self) -> threading.Event:
        """Set once the job should stop (see the class docstring); never cleared."""
        event = self._cancel
        if event is None:
            with _CANCEL_LOCK:
                event = self._cancel
                if event is None:
                    event = _CancelEvent()
                    object.__setattr__(self, "_cancel", event)  # frozen: the one field made late
        return event

    def _cancel_is_set(self) -> bool:
        """Whether cancel_requested is set, without making the event (the worker's check)."""
        event = self._cancel
        return event is not None and event.is_set()

    def _request_cancel(self) -> None:
        """Set cancel_requested (from any thread; a coroutine in wait_for_cancel wakes up)."""
        self.cancel_requested.set()

    def _presume_lost(self) -> None:
        """Set cancel_requested because the worker presumes the lease lost: it could not reach the database
        to extend it for longer than its length (pgjobq._worker.leases.Leases.presumed_lost)."""
        event = self.cancel_requested
        assert isinstance(event, _CancelEvent)
        event.presumed_lost = True  # before set(): whoever sees the event set can tell why
        event.set()

    def _lease_presumed_lost(self) -> bool:
        """Whether the worker asked the handler to stop because it presumed the lease lost."""
        event = self._cancel
        return event is not None and event.presumed_lost

    # -- durable execution (extension 0.11.0) ----------------------------------------------------

    def _runner(self) -> _Durable:
        durable = self._durable
        if durable is None:
            raise Error(f"job {self.id} is not run by a pgjobq worker: its durable calls need one")
        return durable

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once as the step ``name`` of this job, and return its result.

        The result (any JSON value: JSON cannot hold it, InvalidArgument is
        raised before anything is recorded) is recorded in the database under
        the job's lease before this returns; when the job runs again (a
        retry, a reaped lease, after a sleep or a signal), the step returns
        the recorded result, as JSON gives it back, without calling fn.  A
        worker whose lease was taken from it cannot record a step
        (LeaseLost).  Names are 1 to 200 characters, unique within the job
        (its sleeps and waits share them), and must stay the same from one
        deploy to the next.  In a coroutine handler, ``await job.step(...)``;
        fn may then be a coroutine function.
        """
        return self._runner().step(self, name, fn, args, kwargs)

    def sleep(self, duration: float | timedelta, *, name: str | None = None) -> Any:
        """Sleep for duration (seconds or a timedelta, up to 10 years) without holding a worker.

        The first time, the sleep's end is recorded and the job given back
        (queued until then, its attempt given back): this raises
        :class:`pgjobq.Suspended`, which ends the run.  Run again at the end
        of the sleep (on any worker), the job passes this call and goes on;
        the recorded end holds whatever duration a later run gives.
        ``name`` defaults to ``sleep:N``, the N-th unnamed sleep of the run.
        Awaited in a coroutine handler.
        """
        return self._runner().sleep(self, duration, None, name)

    def sleep_until(self, when: datetime, *, name: str | None = None) -> Any:
        """Sleep until when (timezone-aware) without holding a worker: as :meth:`sleep`."""
        return self._runner().sleep(self, None, when, name)

    def await_signal(self, key: str, timeout: Seconds | None = None) -> Any:
        """The payload of the signal key (``pgjobq.signal``), waiting for it without holding a worker.

        When the signal was sent, its payload is returned (and recorded as the
        wait's outcome).  Otherwise the job waits in the database (status
        waiting, its attempt given back), this raises
        :class:`pgjobq.Suspended`, and the job runs again once the signal
        arrives, or after timeout (seconds or a timedelta; None: no end), when
        this raises :class:`pgjobq.SignalTimeout` (in that run and every
        later one).  Awaited in a coroutine handler.
        """
        return self._runner().await_signal(self, key, timeout)

    def fan_out(
        self,
        children: Sequence[Mapping[str, Any]],
        then: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
    ) -> Any:
        """Enqueue children, and then (unless None) one continuation that runs once every child ended; the
        ids, the children's in their order, then the continuation's.

        Each job is a mapping as a step of ``pgjobq.enqueue_flow``: "payload",
        and optionally "queue" (default: this job's), "task", "priority",
        "headers", ...; the continuation depends on every child with
        on_parent_failure "run" (unless it says "cancel"), and reads their
        results with :meth:`parent_results`.  Recorded as a step (``name``,
        default ``fan_out:N``) in the transaction that enqueues them: run
        again, the job gets the same ids and enqueues nothing twice.
        Awaited in a coroutine handler.
        """
        return self._runner().fan_out(self, children, then, name)

    def parent_results(self) -> Any:
        """The job's parents (its depends_on, or the children of the fan_out that enqueued it), in the
        order enqueued, each a :class:`ParentResult`: one call for all.  Awaited in a coroutine handler."""
        return self._runner().parent_results(self)

    def progress(self, value: Any) -> Any:
        """Store value (any JSON value) as the job's latest progress, shown by ``jobq.job`` and the
        dashboard: one write.  Awaited in a coroutine handler."""
        return self._runner().progress(self, value)

    async def wait_for_cancel(self, timeout: float | None = None) -> bool:
        """Wait (without blocking the event loop) until cancel_requested is set; whether it is.

        timeout None waits for as long as it takes; at the timeout it
        returns False.  For coroutine handlers; a thread waits on
        ``job.cancel_requested.wait(timeout)`` instead.
        """
        event = self.cancel_requested
        assert isinstance(event, _CancelEvent)
        return await event.wait_async(timeout)


Seconds = float | timedelta
"""A duration: seconds, or a timedelta."""


class _Durable(Protocol):
    """What a worker gives its jobs for their durable calls (pgjobq._worker.durable)."""

    def step(self, job: Job, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> Any: ...  # fmt: skip

    def sleep(self, job: Job, delay: Seconds | None, until: datetime | None, name: str | None) -> Any: ...

    def await_signal(self, job: Job, key: str, timeout: Seconds | None) -> Any: ...

    def progress(self, job: Job, value: object) -> Any: ...

    def fan_out(self, job: Job, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None,
                name: str | None) -> Any: ...  # fmt: skip

    def parent_results(self, job: Job) -> Any: ...


# The job whose handler runs in this context (thread or asyncio task), set by the workers around each
# handler call: what a log line written from inside a handler is about (pgjobq worker --log-format json).
CURRENT_JOB: contextvars.ContextVar[Job | None] = contextvars.ContextVar("pgjobq_current_job", default=None)


def log_fields(job: Job) -> dict[str, Any]:
    """The fields a log line about job carries (``logger.warning(..., extra=log_fields(job))``)."""
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempts}


class _CancelEvent(threading.Event):
    """Job.cancel_requested: a threading.Event that also wakes the coroutines awaiting it (wait_async)."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        # set by the worker, with the event, when it presumed the job's lease lost (Job._presume_lost)
        self.presumed_lost = False

    def set(self) -> None:
        with _CANCEL_LOCK:
            super().set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if loop.is_closed():
                continue
            try:
                same = asyncio.get_running_loop() is loop
            except RuntimeError:
                same = False
            if same:
                event.set()
            else:
                loop.call_soon_threadsafe(event.set)

    async def wait_async(self, timeout: float | None = None) -> bool:
        """As wait(timeout), awaited on the running event loop without blocking it."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with _CANCEL_LOCK:
            if self.is_set():
                return True
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except asyncio.TimeoutError:  # (TimeoutError itself from Python 3.11)
            with _CANCEL_LOCK:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            return self.is_set()
        return True
