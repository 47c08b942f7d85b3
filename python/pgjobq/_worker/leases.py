"""Leases: when a worker heartbeats the jobs in hand, and which ones.

Each claim returns its jobs' lease lengths (Job._lease_seconds, by the
database's clock; a queue's timeout may cut one short).  The worker
heartbeats every ``heartbeat_interval`` (WorkerSettings), by default a
quarter of the shortest lease in hand; one heartbeat_status statement
extends every lease due and says which jobs were asked to stop and which
are past their deadline (no more heartbeats for those: the reaper recovers
them once their lease runs out).  A lease taken or extended less than an
interval ago is left alone when two intervals fit in it.

While the database cannot be reached, no heartbeat goes through: once a
job's lease, as this worker last took or extended it, is older than its
length, the database has most likely let it expire (and a reaper may have
handed the job to another worker).  presumed_lost() names those jobs, once
each, so that the worker can ask their handlers to stop (their results
would be refused anyway when the lease is gone; the database alone decides
that, when the worker reconnects).

No I/O and no locks: the owner calls due() when a heartbeat may be due,
sends heartbeat_status for the jobs it returns, and hands the rows to
beat().  Times are the owner's monotonic clock, passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pgjobq._job import Job, log_fields
from pgjobq._worker.settings import DEFAULT_LEASE_SECONDS, WorkerSettings

__all__ = ["Beat", "Leases"]

logger = logging.getLogger("pgjobq.worker")


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat learnt: the ids still held, those asked to stop, those newly past their
    deadline."""

    held: set[int]
    cancels: list[int]
    newly_overdue: set[int]


class Leases:
    """The heartbeat schedule of one worker's jobs in hand."""

    __slots__ = (
        "_interval", "_presumed", "_queue_names", "_warned", "every", "leased_at", "next_due", "overdue",
    )  # fmt: skip

    def __init__(self, settings: WorkerSettings, queue_names: str) -> None:
        self._interval = settings.heartbeat_interval
        self._queue_names = queue_names  # for the warning
        self._warned = False  # said once that heartbeat_interval is too long for a lease
        self.every = settings.heartbeat_seconds or DEFAULT_LEASE_SECONDS / 4
        self.next_due = 0.0
        # when this worker took or last extended each lease it holds
        self.leased_at: dict[int, float] = {}
        # jobs in hand past their deadline, as heartbeat_status said: no more heartbeats
        self.overdue: set[int] = set()
        # (id, lease) of the jobs presumed_lost() named already
        self._presumed: set[tuple[int, int]] = set()

    def interval_for(self, lease: float) -> float:
        """The heartbeat interval that keeps a lease of that many seconds: heartbeat_interval if
        shorter, or a quarter of it."""
        interval = self._interval
        if interval is not None:
            if interval < lease:
                return interval
            if not self._warned:
                self._warned = True
                logger.warning(
                    "heartbeat_interval (%g s) is not shorter than the %.3g s leases of queue %s; "
                    "heartbeating those jobs every %.3g s instead",
                    interval, lease, self._queue_names, lease / 4,
                )  # fmt: skip
        return lease / 4

    def held(self, jobs: Sequence[Job], now: float, *, alone: bool) -> None:
        """Jobs just claimed; alone: nothing else is in hand (the lease times of finished jobs can go)."""
        leases = [job._lease_seconds for job in jobs if job._lease_seconds is not None]
        interval = self.interval_for(min(leases)) if leases else None
        if not alone:
            self.leased_at.update((job.id, now) for job in jobs)
            if interval is not None and interval < self.every:
                self.every = interval
                self.next_due = min(self.next_due, now + interval)
        else:
            self.leased_at = {job.id: now for job in jobs}
            self.overdue.clear()
            self._presumed.clear()
            if interval is not None:
                self.every = interval
            # and no lease in hand needs a heartbeat before one interval from now
            self.next_due = now + self.every

    def due(self, unfinished: Iterable[Job], now: float) -> list[Job] | None:
        """The jobs to heartbeat now (None: no heartbeat is due yet); schedules the next heartbeat."""
        if now < self.next_due:
            return None
        unfinished = list(unfinished)
        self.leased_at = {job.id: self.leased_at.get(job.id, 0.0) for job in unfinished}
        if self.overdue:
            self.overdue.intersection_update(self.leased_at)
        live = [job for job in unfinished if job.id not in self.overdue]
        leases = [job._lease_seconds for job in live if job._lease_seconds is not None]
        if leases:
            self.every = self.interval_for(min(leases))
        interval = self.every
        self.next_due = now + interval
        return [
            job
            for job in live
            if now - self.leased_at[job.id] >= interval or 2 * interval >= (job._lease_seconds or 0.0)
        ]

    def presumed_lost(self, unfinished: Iterable[Job], now: float) -> list[Job]:
        """The jobs whose lease, as this worker last took or extended it, has run out by now (the database
        could not be reached to extend it), each named once, with a warning.

        A job whose claim gave no lease length counts under the default 60
        s.  Jobs past their deadline are left out: the worker stopped
        extending their lease on purpose, and said so.
        """
        lost = []
        for job in unfinished:
            key = (job.id, job.lease)
            if key in self._presumed or job.id in self.overdue:
                continue
            leased_at = self.leased_at.get(job.id)
            length = job._lease_seconds if job._lease_seconds is not None else DEFAULT_LEASE_SECONDS
            if leased_at is not None and now - leased_at > length:
                self._presumed.add(key)
                lost.append(job)
                logger.warning(
                    "job %d: lease %d presumed lost (not extended for %.1f s, longer than its %g s, while "
                    "the database could not be reached); asking its handler to stop (if it does, the job is "
                    "handed back, its attempt not counted)",
                    job.id, job.lease, now - leased_at, length, extra=log_fields(job),
                )  # fmt: skip
        return lost

    def beat(self, rows: Iterable[tuple[int, bool, bool]], now: float) -> Beat:
        """The rows of heartbeat_status (id, cancel_requested, overdue) sent at now."""
        held: set[int] = set()
        cancels: list[int] = []
        overdue: list[int] = []
        for job_id, cancel_requested, past in rows:
            held.add(job_id)
            if cancel_requested:
                cancels.append(job_id)
            if past:
                overdue.append(job_id)
        for job_id in held:
            self.leased_at[job_id] = now
        newly_overdue = set(overdue) - self.overdue
        self.overdue.update(newly_overdue)
        return Beat(held, cancels, newly_overdue)


def warn_overdue(job: Job) -> None:
    logger.warning(
        "job %d is past its deadline (its queue's timeout): no more heartbeats; the reaper recovers it "
        "when its lease ends",
        job.id,
        extra=log_fields(job),
    )


def report_lost(due: Iterable[Job], beat: Beat, still: set[int]) -> list[Job]:
    """Log the jobs due whose lease the heartbeat found gone while their handler runs (still: the ids
    whose handler has not returned); return those to stop (not cancelled already)."""
    stop = []
    for job in due:
        if job.id in beat.newly_overdue:
            warn_overdue(job)
        if job.id not in beat.held and job.id in still and not job._suspended:
            if job._cancel_is_set():
                logger.info("job %d: lease %d void (cancelled meanwhile?)", job.id, job.lease,
                            extra=log_fields(job))  # fmt: skip
            else:
                logger.warning("job %d: lease %d lost while in hand; its result will be discarded",
                               job.id, job.lease, extra=log_fields(job))  # fmt: skip
                stop.append(job)
    return stop
