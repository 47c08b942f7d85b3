"""InHand: the jobs a worker holds, from its claim until the database has its outcome.

A job in hand is, in turn: in the backlog (claimed, not started: handed
back unstarted on stop), running (its handler started and has not returned),
then collected as a success (with its result, as JSON text, when it has
one) or a failure (the exception), until acknowledged.  Acknowledgements are
batched: they wait until ack_due says that the oldest result collected has
waited long enough.

It is the one record of a worker's jobs in hand: the worker core
(pgjobq._worker.steps.Core) holds it for both workers.  No I/O and no
locks: the owner (the sync Worker under its lock, which its keeper and
handler threads take too; the AsyncWorker on its loop) calls it, and
tests/unit exercise it alone.  Times are the owner's monotonic clock,
passed in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from pgjobq._job import Job

__all__ = ["InHand"]


class InHand:
    """The jobs in hand of one worker (see the module docstring)."""

    __slots__ = ("backlog", "failed", "ok", "oldest_unacked", "results", "running")

    def __init__(self) -> None:
        self.backlog: deque[Job] = deque()  # claimed, not started
        self.running: dict[int, Job] = {}  # handler started, not returned
        self.ok: list[Job] = []  # handlers that returned, collected: to acknowledge
        self.results: dict[tuple[int, int], str] = {}  # the results of those in ok that have one
        self.failed: list[tuple[Job, BaseException]] = []  # handlers that raised, collected: to report
        self.oldest_unacked = 0.0  # when the oldest result in ok and failed was collected

    def __bool__(self) -> bool:
        return bool(self.backlog or self.running or self.ok or self.failed)

    def __len__(self) -> int:
        return len(self.backlog) + len(self.running) + len(self.ok) + len(self.failed)

    def hold(self, jobs: Iterable[Job]) -> None:
        """Jobs just claimed: into the backlog, in claim order."""
        self.backlog.extend(jobs)

    def next_to_start(self) -> Job | None:
        """The backlog's first job, taken out of it (None: the backlog is empty)."""
        return self.backlog.popleft() if self.backlog else None

    def start(self, job: Job) -> None:
        """job's handler starts (job taken from the backlog by next_to_start)."""
        self.running[job.id] = job

    def record(self, job: Job, error: BaseException | None, result: str | None, now: float) -> None:
        """job's handler returned (error None: with result, JSON text or None) or raised error."""
        self.running.pop(job.id, None)
        if not self.ok and not self.failed:
            self.oldest_unacked = now
        if error is None:
            self.ok.append(job)
            if result is not None:
                self.results[job.id, job.lease] = result
        else:
            self.failed.append((job, error))

    @property
    def pending(self) -> int:
        """How many outcomes are collected and not acknowledged yet."""
        return len(self.ok) + len(self.failed)

    def ack_due(self, now: float, interval: float) -> bool:
        """Whether the outcomes collected are due: the oldest has waited interval."""
        return bool(self.ok or self.failed) and now >= self.oldest_unacked + interval

    def take_successes(self) -> tuple[list[Job], list[str | None] | None]:
        """Take the successes collected, with their results aligned with them (None when none has one),
        to acknowledge (restore_successes if that fails)."""
        successes, self.ok = self.ok, []
        if not self.results:
            return successes, None
        results, self.results = self.results, {}
        return successes, [results.get((job.id, job.lease)) for job in successes]

    def restore_successes(self, successes: list[Job], results: list[str | None] | None, now: float) -> None:
        """Put back successes whose acknowledgement failed, ahead of the others, to send again."""
        if not successes:
            return
        if not self.ok and not self.failed:
            self.oldest_unacked = now
        self.ok[:0] = successes
        if results is not None:
            for job, result in zip(successes, results, strict=True):
                if result is not None:
                    self.results[job.id, job.lease] = result

    def unfinished(self) -> list[Job]:
        """The jobs whose handler has not returned: running, then the backlog."""
        return [*self.running.values(), *self.backlog]
