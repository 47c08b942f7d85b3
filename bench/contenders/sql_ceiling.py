"""The SQL-only ceiling: pgjobq's claim and bulk acknowledge driven by pgbench, no Python.

Each pgbench client (``-c workers -j workers``, prepared statements ``-M
prepared``) loops over this script::

    SELECT array_agg(id) AS ids, array_agg(lease) AS leases
      FROM jobq.claim('bench', :batch, 'pgbench') HAVING count(*) > 0 \\gset
    SELECT count(*) FROM jobq.complete_many(:ids, :leases);

two autocommit statements, so two commits per batch, as a worker makes them.
A claim that finds nothing returns no row, which ends that client (pgbench
reports "expected one row, got 0" and exits 2: that is how a client stops
once the backlog is drained).  ``-T`` (the run's time limit, rounded up to
whole seconds) stops a run that is too slow.  The rate is the number of
jobs done divided by pgbench's own measured time, without its connection
set-up (the Python contenders connect before the start barrier).  Zero work
only: it has no handler to wait in.

``CLAIM`` and ``ACK`` are the two statements; a new fast path is a change of
those lines.

``SqlCeilingOneTrip`` is the same ceiling for the path pgjobq's Worker
takes: one ``jobq.complete_and_claim`` per batch, which acknowledges the
previous batch and claims the next in one statement and one commit::

    SELECT coalesce(array_agg(id) FILTER (WHERE status = 'running'), '{}') AS ids,
           coalesce(array_agg(lease) FILTER (WHERE status = 'running'), '{}') AS leases
      FROM jobq.complete_and_claim(:ids, :leases, 'bench', :batch, 'pgbench')
    HAVING count(*) > 0 \\gset

(from ``ids`` and ``leases`` defined empty); the call that acknowledges
the last batch and claims nothing returns that batch's rows as done, so a
client ends one call later, with nothing left unacknowledged.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .base import Contender, Target, WorkerHooks
from .pgjobq_sql import QUEUE, pgjobq_enqueue, pgjobq_reset, pgjobq_setup

__all__ = ["ACK", "CLAIM", "ONE_TRIP", "Driven", "DrivenContender", "SqlCeiling", "SqlCeilingOneTrip"]

CLAIM = (
    "SELECT array_agg(id) AS ids, array_agg(lease) AS leases\n"
    f"  FROM jobq.claim('{QUEUE}', :batch, 'pgbench') HAVING count(*) > 0 \\gset\n"
)
ACK = "SELECT count(*) FROM jobq.complete_many(:ids, :leases);\n"
ONE_TRIP = (
    "SELECT coalesce(array_agg(id) FILTER (WHERE status = 'running'), '{}') AS ids,\n"
    "       coalesce(array_agg(lease) FILTER (WHERE status = 'running'), '{}') AS leases\n"
    f"  FROM jobq.complete_and_claim(:ids, :leases, '{QUEUE}', :batch, 'pgbench')\n"
    "HAVING count(*) > 0 \\gset\n"
)

# what pgbench says when a client ends because its claim found nothing
DRAINED = ("expected one row, got 0", "Run was aborted")

DONE = "SELECT count(*) FROM jobq.jobs WHERE status = 'done'"


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


class SqlCeiling(DrivenContender):
    """pgbench -M prepared, one client per worker: jobq.claim then jobq.complete_many, two commits."""

    name = "sql_ceiling"
    label = "SQL-only ceiling (pgbench)"
    script: ClassVar[str] = CLAIM + ACK
    defines: ClassVar[tuple[str, ...]] = ()

    def setup(self, target: Target) -> None:
        pgjobq_setup(target)

    def reset(self, target: Target) -> None:
        pgjobq_reset(target)

    def enqueue(self, target: Target, count: int) -> None:
        pgjobq_enqueue(target, count)

    def drive(
        self, target: Target, workers: int, batch: int, jobs: int, limit: float, bindir: Path
    ) -> Driven:
        params = conninfo_to_dict(target.dsn)
        with tempfile.TemporaryDirectory(prefix="pgjobq-pgbench-") as folder:
            script = Path(folder) / "claim_ack.sql"
            script.write_text(self.script)
            command = [
                str(bindir / "pgbench"),
                "--no-vacuum",
                "--protocol=prepared",
                f"--client={workers}",
                f"--jobs={workers}",
                f"--time={max(1, math.ceil(limit))}",
                f"--define=batch={batch}",
                *(f"--define={definition}" for definition in self.defines),
                f"--file={script}",
                f"--host={params.get('host', '127.0.0.1')}",
                f"--port={params.get('port', '5432')}",
                f"--username={params.get('user', 'postgres')}",
                str(params.get("dbname", "postgres")),
            ]
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=math.ceil(limit) + 120
            )
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        unexpected = [line for line in errors if not any(sign in line for sign in DRAINED)]
        if result.returncode not in (0, 2) or unexpected:
            raise RuntimeError(f"pgbench failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", result.stdout, re.M)
        done_tx = re.search(r"^number of transactions actually processed: (\d+)", result.stdout, re.M)
        if tps is None or done_tx is None or float(tps.group(1)) <= 0:
            raise RuntimeError(f"cannot read pgbench's output:\n{result.stdout}{result.stderr}")
        seconds = int(done_tx.group(1)) / float(tps.group(1))
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            row = conn.execute(DONE).fetchone()
        done = int(row[0]) if row else 0
        return Driven(processed=done, seconds=seconds, capped=done < jobs)


class SqlCeilingOneTrip(SqlCeiling):
    """pgbench -M prepared, one client per worker: one jobq.complete_and_claim per batch, one commit."""

    name = "sql_ceiling_one_trip"
    label = "SQL-only ceiling, complete_and_claim (pgbench)"
    script = ONE_TRIP
    defines = ("ids={}", "leases={}")
