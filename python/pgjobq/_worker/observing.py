"""Observers: how both workers call the WorkerObserver hooks of their settings.

An observer that raises is logged once, with its traceback, and dropped:
the jobs carry on.  A worker without observers holds an empty Observers,
which is falsy, so that the hot path costs one truth test
(``if self._observers: ...``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pgjobq._job import Job
from pgjobq._worker.observe import Outcome, WorkerObserver

__all__ = ["Observers"]

logger = logging.getLogger("pgjobq.worker")


class Observers:
    """The observers of one worker, called in turn."""

    __slots__ = ("_observers",)

    def __init__(self, observers: Sequence[WorkerObserver]) -> None:
        self._observers = list(observers)

    def __bool__(self) -> bool:
        return bool(self._observers)

    def _failed(self, observer: WorkerObserver, hook: str) -> None:
        logger.exception("observer %r raised in %s; dropped", observer, hook)
        if observer in self._observers:
            self._observers.remove(observer)

    def claimed(self, queues: Sequence[str], jobs: Sequence[Job], seconds: float) -> None:
        for observer in list(self._observers):
            try:
                observer.claimed(queues, jobs, seconds)
            except Exception:
                self._failed(observer, "claimed")

    def started(self, job: Job, waited: float | None) -> None:
        for observer in list(self._observers):
            try:
                observer.started(job, waited)
            except Exception:
                self._failed(observer, "started")

    def finished(self, job: Job, outcome: Outcome, seconds: float | None) -> None:
        for observer in list(self._observers):
            try:
                observer.finished(job, outcome, seconds)
            except Exception:
                self._failed(observer, "finished")

    def pending(self, acknowledgements: int) -> None:
        for observer in list(self._observers):
            try:
                observer.pending(acknowledgements)
            except Exception:
                self._failed(observer, "pending")

    def reconnected(self) -> None:
        for observer in list(self._observers):
            try:
                observer.reconnected()
            except Exception:
                self._failed(observer, "reconnected")


class Timing:
    """When each job in hand was claimed and how long its handler ran, for the observers' started and
    finished (kept only by a worker with observers).

    waited (at the start): the seconds from the job's run_at to its claim, by
    the database's clock (Job._waited), plus its time in hand since the claim.
    """

    __slots__ = ("_claimed", "_ran", "_started")

    def __init__(self) -> None:
        self._claimed: dict[int, float] = {}
        self._started: dict[int, float] = {}
        self._ran: dict[int, float] = {}

    def held(self, jobs: Sequence[Job], now: float) -> None:
        for job in jobs:
            self._claimed[job.id] = now

    def start(self, job: Job, now: float) -> float | None:
        """The job's handler starts now: how long the job has waited (None: unknown)."""
        self._started[job.id] = now
        claimed = self._claimed.pop(job.id, None)
        if job._waited is None or claimed is None:
            return None
        return max(0.0, job._waited) + (now - claimed)

    def end(self, job: Job, now: float) -> None:
        started = self._started.pop(job.id, None)
        if started is not None:
            self._ran[job.id] = now - started

    def settled(self, job: Job) -> float | None:
        """Forget the job; its handler's run time (None: it never ran)."""
        self._claimed.pop(job.id, None)
        self._started.pop(job.id, None)
        return self._ran.pop(job.id, None)
