"""WorkerObserver: the seam through which a worker reports what it does.

Both workers (``Worker`` and ``AsyncWorker``) call these methods on every
observer in ``WorkerSettings(observers=[...])``, from the worker's own
thread or event loop, never while holding a database connection busy.  The
base class does nothing; subclass it and override what you need (the
Prometheus exporter in :mod:`pgjobq.prometheus` is one).  An observer must be
quick and must not raise: an exception is logged once and the observer is
dropped, the jobs carry on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pgjobq._job import Job

__all__ = ["Outcome", "WorkerObserver"]

# How a job in hand ended, as the worker settled it:
# done: completed (the database accepted it); retried: failed, to run again;
# failed: failed for good (dead letter: out of attempts, or Discard); cancelled:
# ended cancelled; snoozed: put back for later, the attempt not counted (Snooze,
# or handed back for a worker that knows its task: UnknownTask); released: handed
# back unstarted; lost: its lease was gone when the worker reported (reaped meanwhile).
Outcome = Literal["done", "retried", "failed", "cancelled", "snoozed", "released", "lost"]


class WorkerObserver:
    """Callbacks of a running worker; every method is optional (the defaults do nothing)."""

    def claimed(self, queues: Sequence[str], jobs: Sequence[Job], seconds: float) -> None:
        """A claim over ``queues`` returned ``jobs`` (maybe none) after ``seconds`` of round trip."""

    def started(self, job: Job, waited: float | None) -> None:
        """A handler starts on ``job``; ``waited`` is the seconds since it became runnable (its run_at)."""

    def finished(self, job: Job, outcome: Outcome, seconds: float | None) -> None:
        """The database settled ``job``; ``seconds`` is the handler's run time (None: it never ran)."""

    def pending(self, acknowledgements: int) -> None:
        """The worker now owes the database this many acknowledgements (results it has not sent)."""

    def reconnected(self) -> None:
        """The worker lost its database connections and made them again."""
