"""Upkeep: what a worker does every reap_interval besides its jobs (jobq.reap, then jobq.tick), and how
it takes a refusal.  Shared by both workers; the I/O is theirs.

jobq.reap recovers the jobs whose lease expired, whoever held them (every
level that may claim may reap: a role given less is told so once and
leaves reaping to others).  jobq.tick enqueues the schedules' occurrences
that are due (a role refused it leaves ticking to others, such as pg_cron;
a tick that fails warns once until one succeeds again).
"""

from __future__ import annotations

import logging

from pgjobq._errors import first_line

__all__ = ["Upkeep"]

logger = logging.getLogger("pgjobq.worker")


class Upkeep:
    """Whether this worker's role may reap and tick, and how the last tick went."""

    __slots__ = ("may_reap", "may_tick", "next_due", "tick_failing")

    def __init__(self) -> None:
        self.may_reap = True  # False once jobq.reap was refused to this role
        self.may_tick = True  # False once jobq.tick was refused to this role
        self.tick_failing = False  # the last tick failed (warned once)
        self.next_due = 0.0  # when to reap and tick next (monotonic)

    def reap_refused(self, exc: BaseException) -> None:
        self.may_reap = False
        logger.warning(
            "not reaping: jobq.reap was refused to this worker's role (%s); reaping is left to other "
            "workers or a scheduled SELECT jobq.reap()",
            first_line(exc),
        )

    @staticmethod
    def reaped(rows: list[tuple[int, str, str]]) -> None:
        for job_id, queue, status in rows:
            logger.warning("reaped job %d of queue %s: its lease expired; now %s", job_id, queue, status)

    def tick_refused(self, exc: BaseException) -> None:
        self.may_tick = False
        logger.debug("not ticking: jobq.tick was refused to this worker's role (%s)", first_line(exc))

    def tick_failed(self, exc: BaseException) -> None:
        log = logger.debug if self.tick_failing else logger.warning
        log("jobq.tick failed, schedules wait: %s", first_line(exc))
        self.tick_failing = True

    def ticked(self, enqueued: int) -> None:
        self.tick_failing = False
        if enqueued:
            logger.debug("tick: %d scheduled job(s) enqueued", enqueued)
