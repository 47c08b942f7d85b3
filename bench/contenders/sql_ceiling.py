"""The SQL-only ceiling: pgjobq's claim and bulk acknowledge driven by pgbench, no Python.

Each pgbench client (``-c workers -j workers``, prepared statements ``-M
prepared``) loops over ``_pgbench.CLAIM`` + ``_pgbench.ACK``: ``jobq.claim``
of a batch, then one ``jobq.complete_many`` of it, two autocommit
statements, so two commits per batch, as a worker makes them.  A claim that
finds nothing ends that client: that is how a client stops once the
backlog is drained.  ``-T`` (the run's time limit, rounded up to whole
seconds) stops a run that is too slow.  The rate is the number of jobs done
divided by pgbench's own measured time, without its connection set-up (the
Python contenders connect before the start barrier).  Zero work only: it
has no handler to wait in.

``SqlCeilingOneTrip`` is the same ceiling for the path pgjobq's Worker
takes: ``_pgbench.ONE_TRIP``, one ``jobq.complete_and_claim`` per batch,
which acknowledges the previous batch and claims the next in one statement
and one commit.

The scripts live in ``_pgbench.py``; a new fast path is a change of those
lines.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import psycopg

from ._pgbench import ACK, CLAIM, ONE_TRIP, run_pgbench
from .base import Contender, Target, WorkerHooks
from .pgjobq_sql import PgjobqContender

__all__ = ["DONE_SQL", "Driven", "DrivenContender", "SqlCeiling", "SqlCeilingOneTrip", "count_done"]

DONE_SQL = "SELECT count(*) FROM jobq.jobs WHERE status = 'done'"


def count_done(dsn: str) -> int:
    """How many jobs of the database's jobq.jobs are done."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(DONE_SQL).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Driven:
    """What a self-driven run did: jobs processed in seconds (measured by the contender's own tool)."""

    processed: int
    seconds: float
    capped: bool = False


class DrivenContender(Contender):
    """A contender that runs its own clients instead of the driver's worker processes."""

    #: False when it cannot wait in a handler (the "work" workload skips it)
    supports_work: ClassVar[bool] = False

    @abstractmethod
    def drive(
        self, target: Target, workers: int, batch: int, jobs: int, limit: float, bindir: Path
    ) -> Driven:
        """Process the jobs already enqueued with workers clients, stopping after limit seconds at the
        latest; return what was done and how long it took."""

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        raise NotImplementedError(f"{self.name} runs its own clients (drive)")


class SqlCeiling(PgjobqContender, DrivenContender):
    """pgbench -M prepared, one client per worker: jobq.claim then jobq.complete_many, two commits."""

    name = "sql_ceiling"
    label = "SQL-only ceiling (pgbench)"
    script: ClassVar[str] = CLAIM + ACK

    def drive(
        self, target: Target, workers: int, batch: int, jobs: int, limit: float, bindir: Path
    ) -> Driven:
        run = run_pgbench(bindir, target.dsn, self.script, clients=workers, seconds=limit, batch=batch)
        done = count_done(target.dsn)
        return Driven(processed=done, seconds=run.seconds, capped=done < jobs)


class SqlCeilingOneTrip(SqlCeiling):
    """pgbench -M prepared, one client per worker: one jobq.complete_and_claim per batch, one commit."""

    name = "sql_ceiling_one_trip"
    label = "SQL-only ceiling, complete_and_claim (pgbench)"
    script = ONE_TRIP
