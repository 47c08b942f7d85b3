"""How long the upgrade to the current version keeps enqueues and claims waiting, with many finished jobs.

    .venv/bin/python bench/upgrade_lock.py                 # 1,000,000 finished jobs, the previous version
    .venv/bin/python bench/upgrade_lock.py --jobs 100000 --from-version 0.9.0

Makes a throwaway cluster (durable commits), installs the previous version, fills jobq.jobs with the given
number of finished jobs (done, with 2% failed and 1% cancelled, finished over the last two days, payloads of
about 60 bytes) and 1,000 queued ones, vacuums and analyses, then runs ``ALTER EXTENSION pgjobq UPDATE``
while two other sessions keep working: one enqueues a job and one claims and completes one, in a loop, each
recording how long every call took. Prints the upgrade's duration, the longest call of each session during
it (the time they waited for the upgrade's locks) and the locks the upgrade held on jobq.jobs, sampled from
pg_locks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from throwaway_pg import ThrowawayPostgres  # noqa: E402

from workloads import previous_version  # noqa: E402


def fill(conn: psycopg.Connection[tuple[object, ...]], jobs: int) -> None:
    conn.execute(
        """
        INSERT INTO jobq.jobs (queue, payload, status, attempts, lease, locked_by, locked_at, created_at,
                               finished_at, run_at)
        SELECT 'emails', jsonb_build_object('to', 'user' || i || '@example.com', 'template', 'welcome'),
               CASE WHEN i %% 100 < 2 THEN 'failed' WHEN i %% 100 = 2 THEN 'cancelled' ELSE 'done' END,
               1, 1, 'w1', t, t, t, t
          FROM generate_series(1, %s) AS i,
               LATERAL (SELECT now() - make_interval(secs => 172800.0 * (%s - i) / %s)) AS f (t)
        """,
        (jobs, jobs, jobs),
    )
    conn.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[1000]))")


class Caller(threading.Thread):
    """Runs statement in a loop on its own connection, recording (start, seconds) of every call."""

    def __init__(self, dsn: str, statement: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.statement = dsn, statement
        self.calls: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.perf_counter()
                conn.execute(self.statement)
                self.calls.append((started, time.perf_counter() - started))

    def longest_within(self, start: float, end: float) -> float:
        return max(
            (seconds for at, seconds in self.calls if at + seconds >= start and at <= end), default=0.0
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finished jobs in the table [1,000,000]")
    parser.add_argument("--from-version", help="the version to upgrade from [the one before the current]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pgjobq-upgrade-") as folder:
        work = Path(folder)
        work.chmod(0o755)
        with ThrowawayPostgres(work / "pg") as server, psycopg.connect(server.dsn(), autocommit=True) as conn:
            old = previous_version(conn, args.from_version)
            conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(old)))
            began = time.perf_counter()
            fill(conn, args.jobs)
            conn.execute("VACUUM ANALYZE jobq.jobs")
            filled = time.perf_counter() - began
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('jobq.jobs'))").fetchone()
            enqueuer = Caller(server.dsn(), "SELECT jobq.enqueue('emails', '{}')")
            worker = Caller(
                server.dsn(), "SELECT jobq.complete(c.id, c.lease) FROM jobq.claim('emails', 1, 'w2') AS c"
            )
            locks: set[str] = set()
            watching = threading.Event()

            def watch() -> None:
                with psycopg.connect(server.dsn(), autocommit=True) as probe:
                    while not watching.is_set():
                        for (mode,) in probe.execute(
                            "SELECT l.mode FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid"
                            " WHERE l.relation = 'jobq.jobs'::regclass AND l.granted"
                            " AND a.query LIKE 'ALTER EXTENSION%%'"
                        ):
                            locks.add(str(mode))
                        time.sleep(0.005)

            watcher = threading.Thread(target=watch, daemon=True)
            for thread in (enqueuer, worker, watcher):
                thread.start()
            time.sleep(1.0)
            start = time.perf_counter()
            conn.execute("ALTER EXTENSION pgjobq UPDATE")
            end = time.perf_counter()
            time.sleep(0.5)
            for caller in (enqueuer, worker):
                caller.stop.set()
                caller.join()
            watching.set()
            watcher.join()
            new = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'").fetchone()
            usual = sorted(seconds for at, seconds in enqueuer.calls if at + seconds < start)
            median = usual[len(usual) // 2] if usual else 0.0
            assert size is not None and new is not None
            print(
                f"{args.jobs:,} finished jobs ({size[0]} with indexes, filled in {filled:.0f} s): "
                f"{old} -> {new[0]}"
            )
            print(f"- ALTER EXTENSION pgjobq UPDATE took {end - start:.2f} s")
            print(
                f"- the longest enqueue during it took {enqueuer.longest_within(start, end):.2f} s "
                f"(median before it: {median * 1000:.2f} ms); the longest claim + complete "
                f"{worker.longest_within(start, end):.2f} s"
            )
            print(
                "- locks the upgrade was seen holding on jobq.jobs: "
                f"{', '.join(sorted(locks)) or 'none seen'}"
            )


if __name__ == "__main__":
    main()
