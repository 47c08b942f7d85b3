"""Job: what a handler receives."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CURRENT_JOB", "Job", "log_fields"]

# Guards the lazy creation of a job's cancel event: the handler's thread and
# the worker's may both be first to ask for it.
_CANCEL_LOCK = threading.Lock()


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

    async def wait_for_cancel(self, timeout: float | None = None) -> bool:
        """Wait (without blocking the event loop) until cancel_requested is set; whether it is.

        timeout None waits for as long as it takes; at the timeout it
        returns False.  For coroutine handlers; a thread waits on
        ``job.cancel_requested.wait(timeout)`` instead.
        """
        event = self.cancel_requested
        assert isinstance(event, _CancelEvent)
        return await event.wait_async(timeout)


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
