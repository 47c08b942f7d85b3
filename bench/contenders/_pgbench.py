"""pgbench as the benchmark runs it, and the scripts of pgjobq's SQL it runs (not a contender module).

``run_pgbench`` is the one way bench/ starts pgbench (the SQL ceilings,
the version comparison, profile.py): ``-M prepared``, one thread per client,
``-T`` whole seconds, no vacuum, with ``batch``, ``ids`` and ``leases``
defined (``ids`` and ``leases`` empty: the batch a one-trip loop starts
from).  A claim that finds nothing returns no row, so its ``\\gset`` fails
and that client ends ("expected one row, got 0", exit code 2): the run is
then *drained*, which the ceilings use to stop once the backlog is done.
Every other error raises.

The scripts, each the only copy of its statements:

- ``CLAIM`` + ``ACK``: ``jobq.claim`` of ``:batch`` jobs, then one
  ``jobq.complete_many``; two statements, two commits per batch.
- ``ONE_TRIP``: one ``jobq.complete_and_claim`` per batch, acknowledging the
  previous batch and claiming the next (one commit); the call that claims
  nothing returns the last batch's rows as done, so a client ends one call
  later with nothing left unacknowledged.
- ``CLAIM_COMPLETE``: one job per transaction pair, ``jobq.claim(q, 1, w)``
  then ``jobq.complete(id, lease)``.
- ``ENQUEUE_ONE``: one single-row ``jobq.enqueue(q, '{}')`` per transaction.
- ``CLAIM_WAIT``: ``CLAIM`` + ``ACK`` for a queue with limits, where a claim
  may find nothing while a limit is reached: such a claim does not end the
  client, which waits ``EMPTY_WAIT_MS`` (as pgjobq_sql's loop does) and
  claims again, to the end of ``-T``; the run never drains, so its backlog
  must outlast it.

Functions are called positionally with as many arguments as their first
version took (claim 3, complete_and_claim 5), so the scripts run on every
version that has the function, whatever optional arguments later ones add.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from .pgjobq_sql import QUEUE

__all__ = [
    "ACK",
    "CLAIM",
    "CLAIM_COMPLETE",
    "CLAIM_WAIT",
    "EMPTY_WAIT_MS",
    "ENQUEUE_ONE",
    "ONE_TRIP",
    "PgbenchRun",
    "run_pgbench",
]

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
CLAIM_COMPLETE = (
    f"SELECT id, lease FROM jobq.claim('{QUEUE}', 1, 'pgbench') \\gset\nSELECT jobq.complete(:id, :lease);\n"
)
ENQUEUE_ONE = f"SELECT jobq.enqueue('{QUEUE}', '{{}}');\n"
EMPTY_WAIT_MS = 10  # CLAIM_WAIT's wait after a claim that found nothing (pgjobq_sql.EMPTY_SLEEP)
CLAIM_WAIT = (
    "SELECT count(*) AS n, coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(lease), '{}') AS leases\n"
    f"  FROM jobq.claim('{QUEUE}', :batch, 'pgbench') \\gset\n"
    "\\if :n > 0\n"
    "SELECT count(*) FROM jobq.complete_many(:ids, :leases);\n"
    "\\else\n"
    f"\\sleep {EMPTY_WAIT_MS} ms\n"
    "\\endif\n"
)

# what pgbench says when a client ends because its claim found nothing
DRAINED = ("expected one row, got 0", "Run was aborted")


@dataclass(frozen=True)
class PgbenchRun:
    """What pgbench reported: transactions (script runs) done, their rate, whether a client drained."""

    transactions: int
    tps: float  # pgbench's "without initial connection time"
    drained: bool

    @property
    def seconds(self) -> float:
        """pgbench's own measured time, without its connection set-up."""
        return self.transactions / self.tps


def run_pgbench(
    bindir: Path,
    dsn: str,
    script: str,
    *,
    clients: int,
    seconds: float,
    batch: int = 1,
    options: str = "",
) -> PgbenchRun:
    """Run script from clients pgbench clients for seconds (rounded up to whole seconds) on dsn's
    database; options is PGOPTIONS for the clients' sessions (say ``-c synchronous_commit=off``)."""
    params = conninfo_to_dict(dsn)
    limit = max(1, math.ceil(seconds))
    env = {**os.environ, "PGOPTIONS": options} if options else None
    with tempfile.TemporaryDirectory(prefix="pgjobq-pgbench-") as folder:
        path = Path(folder) / "script.sql"
        path.write_text(script)
        command = [
            str(bindir / "pgbench"), "--no-vacuum", "--protocol=prepared",
            f"--client={clients}", f"--jobs={clients}", f"--time={limit}",
            f"--define=batch={batch}", "--define=ids={}", "--define=leases={}", f"--file={path}",
            f"--host={params.get('host', '127.0.0.1')}", f"--port={params.get('port', '5432')}",
            f"--username={params.get('user', 'postgres')}", str(params.get("dbname", "postgres")),
        ]  # fmt: skip
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, env=env, timeout=limit + 120
        )
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    unexpected = [line for line in errors if not any(sign in line for sign in DRAINED)]
    if result.returncode not in (0, 2) or unexpected:
        raise RuntimeError(f"pgbench failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", result.stdout, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", result.stdout, re.M)
    if tps is None or done is None or float(tps.group(1)) <= 0:
        raise RuntimeError(f"cannot read pgbench's output:\n{result.stdout}{result.stderr}")
    return PgbenchRun(int(done.group(1)), float(tps.group(1)), drained=result.returncode == 2 or bool(errors))
