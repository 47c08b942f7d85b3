"""Where one PostgreSQL stops: the measurements behind docs/explanation/scaling.md.

    .venv/bin/python bench/scaling.py            # make bench-scaling: 7 minutes on 2 quiet cores
    .venv/bin/python bench/scaling.py --quick    # every part scaled down: does it run? (~3 minutes)
    .venv/bin/python bench/scaling.py --parts sharding --repeats 5 --out /tmp/shard

Four parts, each interleaving what it compares within every repeat (the
machine is shared: read the ratios, and the load average each part notes):

- saturation: a backlog drained by 1, 2, 4, 8 and 16 pgjobq Worker
  processes (bench/driver.py's pool, zero-work handlers) at batch 1, 10 and
  50, beside pgbench looping over jobq.complete_and_claim (the Worker's own
  path, no Python; contenders/sql_ceiling.py's one-trip ceiling), and the
  same pgbench runs with synchronous_commit off (the commits' WAL flush taken
  away).  For every run: jobs/s, the CPU seconds of the server's backends and
  background processes, of the clients and of everything else on the
  machine (/proc), what the backends were waiting for (pg_stat_activity,
  sampled every 20 ms), commits per second and per WAL flush (pg_stat_wal).
  pg_test_fsync, once, measures what the disk's flush allows.
- enqueue: single-row jobq.enqueue from 1, 4 and 16 Python clients
  (workloads.EnqueueTask) and from pgbench, durable and with
  synchronous_commit off; pgjobq.enqueue_many of 100 and 1,000 jobs per call
  from 1 and 4 clients.
- growth: one database per table state (empty; 100,000 and 1,000,000 done
  jobs kept; 1,000,000 done jobs purged with jobq.purge and vacuumed): the
  sizes of jobq.jobs and its indexes, the server time of one claim, complete,
  enqueue, jobq.stats() and jobq.metrics() (EXPLAIN ANALYZE), and pgbench's
  claim + complete and enqueue rates.  The cost under a held-back vacuum is
  bench/run.py's soak and claim-cost workloads' (bench/results/latest).
- sharding: the same load, three queues, against one server holding all of
  them and against three servers holding one each, chosen through
  pgjobq.QueueRouter: a drain by 2 Workers per queue (batch 1 and 10) and
  single-row enqueues by 2 producers per queue.  Four fresh servers, alike.
- row_movement: the trap of a jobs table partitioned by status.  A claim
  (SELECT ... FOR UPDATE SKIP LOCKED) whose snapshot predates another
  claim's commit moving a row to the running partition, on a plain table
  and on the partitioned one: what each claimer gets.

Every server is tools/throwaway_pg.py's with the benchmark's durable
settings (fsync, synchronous_commit and full_page_writes on, 128 MB of
shared_buffers; driver.Servers), plus track_wal_io_timing.  The raw records
go to results.json and a summary to summary.md in the output folder
(default bench/results/scaling/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from run import SERVER_FACTS, _git  # noqa: E402

import pgjobq  # noqa: E402

from contenders._pgbench import CLAIM_COMPLETE, ENQUEUE_ONE, ONE_TRIP, run_pgbench  # noqa: E402
from contenders._util import insert_queued, payloads  # noqa: E402
from contenders.base import Target, WorkerHooks  # noqa: E402
from contenders.pgjobq_sql import QUEUE, pgjobq_setup  # noqa: E402
from contenders.pgjobq_worker import PgjobqWorker, _GatedWorker, run_until, worker_settings  # noqa: E402
from contenders.sql_ceiling import count_done  # noqa: E402
from driver import Measured, Servers, Task, WorkerPool, WorkTask  # noqa: E402
from workloads import FINISHED_SQL, SIZES, EnqueueTask, rotated  # noqa: E402

__all__ = ["FULL", "QUICK", "Scale", "main"]

PARTS = ("saturation", "enqueue", "growth", "sharding", "row_movement")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 0.02  # seconds between two looks at pg_stat_activity
SATURATION_DB, ENQUEUE_DB, SHARD_DB = "scaling_saturation", "scaling_enqueue", "scaling_shard"


@dataclass(frozen=True)
class Scale:
    """How big each part is."""

    name: str
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    run_seconds: float  # a drain run's limit; its backlog outlasts it
    async_batches: tuple[int, ...]  # pgbench with synchronous_commit off, at these batches
    enqueue_clients: tuple[int, ...]
    enqueue_seconds: float
    enqueue_batches: tuple[int, ...]  # enqueue_many, jobs per call
    enqueue_batch_clients: tuple[int, ...]
    growth_states: tuple[tuple[str, int, bool], ...]  # (name, done rows, purged)
    growth_samples: int
    growth_seconds: int  # pgbench -T
    shard_queues: tuple[str, ...]
    shard_workers_per_queue: int
    shard_batches: tuple[int, ...]
    shard_seconds: float


FULL = Scale(
    name="full",
    workers=(1, 2, 4, 8, 16),
    batches=(1, 10, 50),
    run_seconds=1.0,
    async_batches=(1, 10),
    enqueue_clients=(1, 4, 16),
    enqueue_seconds=1.5,
    enqueue_batches=(100, 1_000),
    enqueue_batch_clients=(1, 4),
    growth_states=(
        ("empty", 0, False),
        ("done_100k", 100_000, False),
        ("done_1m", 1_000_000, False),
        ("done_1m_purged", 1_000_000, True),
    ),
    growth_samples=15,
    growth_seconds=1,
    shard_queues=("shard_a", "shard_b", "shard_c"),
    shard_workers_per_queue=2,
    shard_batches=(1, 10),
    shard_seconds=1.5,
)

QUICK = Scale(
    name="quick",
    workers=(1, 4),
    batches=(1, 10),
    run_seconds=0.5,
    async_batches=(1,),
    enqueue_clients=(1, 4),
    enqueue_seconds=0.5,
    enqueue_batches=(100,),
    enqueue_batch_clients=(1,),
    growth_states=(("empty", 0, False), ("done_20k", 20_000, False), ("done_20k_purged", 20_000, True)),
    growth_samples=5,
    growth_seconds=1,
    shard_queues=("shard_a", "shard_b", "shard_c"),
    shard_workers_per_queue=1,
    shard_batches=(10,),
    shard_seconds=0.5,
)

# What one durable server adds to driver.Servers' settings: the time spent writing and flushing WAL
# (pg_stat_wal.wal_write_time, wal_sync_time), at the cost of two clock reads per write and flush.
EXTRA_SETTINGS = {"track_wal_io_timing": "on"}

# what one worker drains per second, by batch, until earlier runs say more: sizes the first backlogs
FIRST_GUESS = {1: 2_000.0, 10: 10_000.0, 50: 25_000.0}
MIN_BACKLOG = 2_000


# -- CPU time, from /proc --------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _own_ticks(fields: list[str]) -> int:
    return int(fields[11]) + int(fields[12])  # utime + stime


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                found.append(int(entry.name))
    return found


def _is_client_backend(pid: int) -> bool:
    """A backend serving a client connection ("postgres: user db 127.0.0.1(port) ...")."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "127.0.0.1(" in title or "[local]" in title


def _machine_ticks() -> tuple[int, int, int]:
    """(busy, idle, iowait) ticks of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait = values[:5]
    rest = sum(values[5:8])  # irq, softirq, steal
    return user + nice + system + rest, idle, iowait


@dataclass(frozen=True)
class CpuSnapshot:
    at: float
    machine: tuple[int, int, int]
    server_total: int  # ticks: postmasters, their live children, and their reaped children
    server_background: int  # ticks of live non-backend children (walwriter, checkpointer, autovacuum ...)
    clients: int  # ticks of the client processes given, and of this process's reaped children (pgbench)
    driver: int  # this process


def cpu_snapshot(postmasters: list[int], clients: list[int]) -> CpuSnapshot:
    total = background = 0
    for postmaster in postmasters:
        fields = _stat_fields(postmaster)
        if fields is not None:
            total += _own_ticks(fields) + int(fields[13]) + int(fields[14])  # + cutime + cstime
        for child in _children(postmaster):
            child_fields = _stat_fields(child)
            if child_fields is None:
                continue
            ticks = _own_ticks(child_fields)
            total += ticks
            if not _is_client_backend(child):
                background += ticks
    client_ticks = sum(_own_ticks(f) for f in map(_stat_fields, clients) if f is not None)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = os.times()
    return CpuSnapshot(
        at=time.perf_counter(),
        machine=_machine_ticks(),
        server_total=total,
        server_background=background,
        clients=client_ticks + round((reaped.ru_utime + reaped.ru_stime) * CLK_TCK),
        driver=round((own.user + own.system) * CLK_TCK),
    )


def cpu_split(
    before: CpuSnapshot, after: CpuSnapshot, server_after: CpuSnapshot | None = None
) -> dict[str, float]:
    """CPU used between two snapshots, in cores (CPU seconds per second of wall time).

    server_after, when given, is a snapshot taken once the run's backends have exited and been
    reaped (their CPU time is then in the postmaster's cutime; between their exit and the reap it is
    nowhere): the server's figures come from it, the rest from after.
    """
    wall = max(after.at - before.at, 1e-9)
    settled = server_after or after

    def cores(ticks: int) -> float:
        return ticks / CLK_TCK / wall

    busy = after.machine[0] - before.machine[0]
    server = settled.server_total - before.server_total
    background = settled.server_background - before.server_background
    clients = after.clients - before.clients
    driver = after.driver - before.driver
    return {
        "wall": wall,
        "machine_busy": cores(busy),
        "iowait": cores(after.machine[2] - before.machine[2]),
        "server": cores(server),
        "server_backends": cores(server - background),
        "server_background": cores(background),
        "clients": cores(clients),
        "driver": cores(driver),
        "other": cores(busy - server - clients - driver),
    }


def postmaster_pid(server: Any) -> int:
    """The postmaster's pid, the first line of the cluster's postmaster.pid."""
    return int((Path(server.data_dir) / "postmaster.pid").read_text().split()[0])


# -- what the server did: waits, commits, WAL --------------------------------------------

WAITS_SQL = """
SELECT CASE WHEN state = 'active' AND wait_event IS NULL THEN 'running (CPU)'
            WHEN state = 'active' THEN wait_event_type || ':' || wait_event
            WHEN state = 'idle' THEN 'idle (the client''s turn)'
            ELSE state END
  FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND datname = %s AND pid <> pg_backend_pid()
   AND application_name NOT LIKE 'pgjobq listen%%'
"""

WAL_SQL = """
SELECT w.wal_records, w.wal_bytes::bigint, w.wal_write, w.wal_sync, w.wal_write_time, w.wal_sync_time,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = %s) AS commits
  FROM pg_stat_wal AS w
"""

BACKENDS_SQL = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'"


class WaitSampler:
    """Looks at the target database's client backends every SAMPLE_EVERY seconds, on a thread."""

    def __init__(self, dsn: str, dbname: str) -> None:
        self._dsn, self._dbname = dsn, dbname
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wait-sampler", daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            conn.prepare_threshold = 0
            while not self._stop.wait(SAMPLE_EVERY):
                rows = conn.execute(WAITS_SQL, (self._dbname,)).fetchall()
                self.samples += 1
                self.counts.update(str(row[0]) for row in rows)

    def shares(self) -> dict[str, float]:
        """Each state's share of the backend samples, largest first."""
        total = sum(self.counts.values()) or 1
        return {state: n / total for state, n in self.counts.most_common()}


def wal_counters(admin_dsn: str, dbname: str) -> dict[str, float]:
    """pg_stat_wal's counters, and the commits of the database dbname."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(WAL_SQL, (dbname,))
        row = cur.fetchone()
        names = [d.name for d in cur.description or []]
    return {name: float(value or 0) for name, value in zip(names, row or (), strict=False)}


def wal_delta(
    before: dict[str, float], after: dict[str, float], seconds: float, jobs: float
) -> dict[str, float]:
    """What the server did for the run: commits (of the run's database; the read-only transactions of
    the workers and of the wait sampler among them), WAL flushes (pg_stat_wal.wal_sync: by backends
    at commit and by the WAL writer) and what they cost."""
    diff = {name: after[name] - before[name] for name in before}
    syncs = diff["wal_sync"]
    return {
        "commits_per_s": diff["commits"] / seconds,
        "wal_syncs_per_s": syncs / seconds,
        "jobs_per_sync": jobs / syncs if syncs else 0.0,
        "wal_bytes_per_job": diff["wal_bytes"] / jobs if jobs else 0.0,
        "wal_sync_ms_per_s": diff["wal_sync_time"] / seconds,  # ms of flushing per second of run
        "ms_per_sync": diff["wal_sync_time"] / syncs if syncs else 0.0,
    }


# -- tasks the worker processes run -----------------------------------------------------


@dataclass(frozen=True)
class QueueWorkerTask(Task):
    """pgjobq.Worker on one queue (contenders/pgjobq_worker's, gated the same way), zero work."""

    dsn: str
    queue: str
    batch: int

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        processed = hooks.processed
        settings = worker_settings(self.batch, queue=self.queue)
        worker = _GatedWorker(self.dsn, lambda job: processed(1), settings, hooks.ready)
        run_until(worker, hooks.should_stop)


@dataclass(frozen=True)
class RoutedEnqueueTask(Task):
    """Single-row pgjobq.enqueue on one queue, on the server a QueueRouter gives it, until stopped."""

    servers: tuple[tuple[str, str], ...]
    placements: tuple[tuple[str, str], ...]
    queue: str
    count: int

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        router = pgjobq.QueueRouter(dict(self.servers), dict(self.placements))
        with psycopg.connect(router.conninfo(self.queue), autocommit=True) as conn:
            hooks.ready()
            for i in range(self.count):
                if hooks.should_stop():
                    return
                pgjobq.enqueue(conn, self.queue, {"i": i})
                hooks.processed(1)


@dataclass(frozen=True)
class EnqueueManyTask(Task):
    """pgjobq.enqueue_many of ``batch`` jobs per call (one statement, one commit), until stopped."""

    dsn: str
    batch: int

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        jobs = payloads(range(self.batch))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            hooks.ready()
            while not hooks.should_stop():
                pgjobq.enqueue_many(conn, QUEUE, jobs)
                hooks.processed(self.batch)


# -- the run ------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


@dataclass
class Scaling:
    """One run of this script: the main server, the worker processes, the records."""

    scale: Scale
    repeats: int
    servers: Servers
    pool: WorkerPool
    log: Callable[[str], None]
    records: dict[str, Any] = field(default_factory=dict)

    @property
    def postmaster(self) -> int:
        return postmaster_pid(self.servers.pg)

    def pool_pids(self) -> list[int]:
        return [child.process.pid or 0 for child in self.pool.children]

    def load_note(self, part: str) -> None:
        self.records.setdefault("load", {})[part] = list(os.getloadavg())

    def measure_pool(
        self,
        tasks: list[Task],
        goal: int,
        limit: float,
        *,
        servers: list[Servers],
        dbname: str,
        sample: bool = True,
    ) -> dict[str, Any]:
        """One run in the pool's processes on the database dbname of servers: jobs/s, the CPU split,
        the WAL flushes, and (sample, on one server) what the backends waited for."""
        admins = [server.pg.dsn() for server in servers]
        postmasters = [postmaster_pid(server.pg) for server in servers]
        wal_before = [wal_counters(dsn, dbname) for dsn in admins]
        started = self.pool.start(tasks, goal)
        before = cpu_snapshot(postmasters, self.pool_pids())
        sampler = WaitSampler(admins[0], dbname) if sample else None
        with sampler or contextlib.nullcontext():
            measured = self.pool.wait(started, limit)
            after = cpu_snapshot(postmasters, self.pool_pids())
        errors = self.pool.finish()
        time.sleep(0.3)  # the backends report their counters as they exit
        record = self._outcome(measured, cpu_split(before, after), errors)
        if sampler is not None:
            record["waits"] = sampler.shares()
        record["wal"] = self._wal(wal_before, admins, dbname, measured.seconds, measured.processed)
        return record

    def measure_pgbench(
        self,
        target: Target,
        script: str,
        clients: int,
        batch: int,
        seconds: float,
        options: str = "",
        count: Callable[[], int] | None = None,
    ) -> dict[str, Any]:
        """One pgbench run on the main server: jobs/s (the jobs count() finds done afterwards, else
        pgbench's transactions), the CPU split, what the backends waited for, the WAL flushes."""
        admin = self.servers.pg.dsn()
        dbname = str(psycopg.conninfo.conninfo_to_dict(target.dsn)["dbname"])
        wal_before = [wal_counters(admin, dbname)]
        before = cpu_snapshot([self.postmaster], [])
        with WaitSampler(admin, dbname) as sampler:
            run = run_pgbench(
                self.servers.pg.bindir, target.dsn, script,
                clients=clients, seconds=seconds, batch=batch, options=options,
            )  # fmt: skip
            after = cpu_snapshot([self.postmaster], [])
        with psycopg.connect(admin, autocommit=True) as conn:  # the backends gone, and reaped
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                row = conn.execute(BACKENDS_SQL, (dbname,)).fetchone()
                if not row or not row[0]:
                    break
                time.sleep(0.02)
        time.sleep(0.2)
        settled = cpu_snapshot([self.postmaster], [])
        jobs = count() if count is not None else run.transactions
        return {
            "processed": jobs,
            "rate": jobs / run.seconds,
            "transactions": run.transactions,
            "tps": run.tps,
            "seconds": run.seconds,
            "drained": run.drained,
            "cpu": cpu_split(before, after, settled),
            "waits": sampler.shares(),
            "wal": self._wal(wal_before, [admin], dbname, run.seconds, jobs),
        }

    def _wal(
        self, before: list[dict[str, float]], admins: list[str], dbname: str, seconds: float, jobs: float
    ) -> dict[str, float]:
        after = [wal_counters(dsn, dbname) for dsn in admins]
        total_before = {k: sum(b[k] for b in before) for k in before[0]}
        total_after = {k: sum(a[k] for a in after) for k in after[0]}
        return wal_delta(total_before, total_after, max(seconds, 1e-9), jobs)

    @staticmethod
    def _outcome(measured: Measured, cpu: dict[str, float], errors: list[str]) -> dict[str, Any]:
        return {
            "processed": measured.processed,
            "seconds": measured.seconds,
            "rate": measured.rate,
            "capped": measured.capped,
            "error": measured.error or (errors[0] if errors else None),
            "cpu": cpu,
        }

    # -- saturation -------------------------------------------------------------------------

    def _backlog(self, kind: str, workers: int, batch: int) -> int:
        """Jobs to queue for a drain run: 1.5 x what it can do in run_seconds, from the earlier runs of
        the same kind and batch (a run with fewer workers scaled up, at most 2x: two cores) or
        FIRST_GUESS."""
        best = 0.0
        for run in self.records.get("saturation", []):
            if run["kind"] == kind and run["batch"] == batch and run["rate"] > 0:
                factor = 1.0 if run["workers"] >= workers else min(workers / run["workers"], 2.0)
                best = max(best, run["rate"] * factor)
        rate = best or FIRST_GUESS.get(batch, 10_000.0) * min(workers, 2)
        return max(MIN_BACKLOG, round(1.5 * rate * self.scale.run_seconds))

    def _fresh_backlog(self, target: Target, count: int) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE jobq.jobs")
            insert_queued(conn, "jobq.jobs", QUEUE, 1, count)
        self.servers.settle(target.dsn)

    def saturation(self) -> None:
        scale = self.scale
        self.load_note("saturation (start)")
        target = self.servers.create_database(SATURATION_DB)
        pgjobq_setup(target)
        self.records["fsync"] = self._pg_test_fsync()
        runs: list[dict[str, Any]] = self.records.setdefault("saturation", [])
        kinds = ["worker", "pgbench", "pgbench_async"]
        for repeat in range(self.repeats):
            for workers in scale.workers:
                for batch in scale.batches:
                    for kind in rotated(kinds, repeat):
                        if kind == "pgbench_async" and batch not in scale.async_batches:
                            continue
                        record = self._saturation_run(target, kind, workers, batch)
                        record.update(repeat=repeat)
                        runs.append(record)
                        self.log(f"  r{repeat} {kind:<13} w={workers:<2} b={batch:<2} {_line(record)}")
        self.load_note("saturation (end)")

    def _saturation_run(self, target: Target, kind: str, workers: int, batch: int) -> dict[str, Any]:
        """One drain: a fresh backlog, then Worker processes or pgbench (durable, or with
        synchronous_commit off) for run_seconds."""
        jobs = self._backlog(kind, workers, batch)
        self._fresh_backlog(target, jobs)
        if kind == "worker":
            tasks: list[Task] = [WorkTask(PgjobqWorker, target, batch, 0.0)] * workers
            record = self.measure_pool(
                tasks, jobs, self.scale.run_seconds, servers=[self.servers], dbname=SATURATION_DB
            )
        else:
            options = "-c synchronous_commit=off" if kind == "pgbench_async" else ""
            record = self.measure_pgbench(
                target, ONE_TRIP, workers, batch, self.scale.run_seconds, options,
                count=lambda: count_done(target.dsn),
            )  # fmt: skip
            record.update(capped=record["processed"] < jobs)
        record.update(kind=kind, workers=workers, batch=batch, jobs=jobs)
        return record

    def _pg_test_fsync(self) -> dict[str, Any]:
        """pg_test_fsync -s 1 in the server's folder (its disk): flushes per second by method."""
        path = Path(self.servers.pg.base_dir) / "fsync_test.out"
        result = subprocess.run(
            [str(self.servers.pg.bindir / "pg_test_fsync"), "-s", "1", "-f", str(path)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        path.unlink(missing_ok=True)
        found: dict[str, float] = {}
        section = ""
        for line in result.stdout.splitlines():
            if line.strip().startswith("Compare file sync methods using one"):
                section = "one 8kB write"
            elif line.strip().startswith("Compare file sync methods using two"):
                section = "two 8kB writes"
            elif line.strip().startswith("Compare open_sync"):
                section = "open_sync sizes"
            elif line.strip().startswith("Test if fsync on non-write"):
                section = "non-write fd"
            elif line.strip().startswith("Non-sync'ed"):
                section = "non-synced"
            number = re.search(r"^\s+(\S.*?)\s+([\d.]+) ops/sec", line)
            if number and section in ("one 8kB write", "two 8kB writes"):
                found[f"{section}: {number.group(1).strip()}"] = float(number.group(2))
        self.log(f"  pg_test_fsync: {found}")
        return {"ops_per_s": found, "raw": result.stdout[-4000:]}

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(self) -> None:
        scale = self.scale
        self.load_note("enqueue (start)")
        target = self.servers.create_database(ENQUEUE_DB)
        pgjobq_setup(target)
        runs: list[dict[str, Any]] = self.records.setdefault("enqueue", [])
        variants: list[tuple[str, int, int]] = []  # (kind, clients, jobs per call)
        for clients in scale.enqueue_clients:
            variants += [("python", clients, 1), ("pgbench", clients, 1), ("pgbench_async", clients, 1)]
        for per_call in scale.enqueue_batches:
            variants += [("python_many", clients, per_call) for clients in scale.enqueue_batch_clients]
        for repeat in range(self.repeats):
            for index in rotated([str(i) for i in range(len(variants))], repeat):
                kind, clients, per_call = variants[int(index)]
                with psycopg.connect(target.dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE jobq.jobs")
                self.servers.settle(target.dsn)
                if kind.startswith("pgbench"):
                    options = "-c synchronous_commit=off" if kind == "pgbench_async" else ""
                    record = self.measure_pgbench(
                        target, ENQUEUE_ONE, clients, 1, scale.enqueue_seconds, options
                    )
                    record.update(processed=record["transactions"], rate=record["tps"])
                else:
                    big = 10**9  # the time limit ends the run
                    tasks: list[Task] = (
                        [EnqueueTask(target.dsn, "pgjobq", big)] * clients
                        if kind == "python"
                        else [EnqueueManyTask(target.dsn, per_call)] * clients
                    )
                    record = self.measure_pool(
                        tasks, big, scale.enqueue_seconds, servers=[self.servers], dbname=ENQUEUE_DB
                    )
                record.update(kind=kind, clients=clients, per_call=per_call, repeat=repeat)
                runs.append(record)
                self.log(f"  r{repeat} {kind:<13} c={clients:<2} x{per_call:<5} {_line(record)}")
        self.load_note("enqueue (end)")

    # -- growth ---------------------------------------------------------------------------

    def _growth_state(self, name: str, done: int, purged: bool) -> Target:
        target = self.servers.create_database(f"scaling_growth_{name}")
        pgjobq_setup(target)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            for start in range(0, done, 500_000):
                count = min(500_000, done - start)
                conn.execute(FINISHED_SQL, {"queue": QUEUE, "count": count})
            if purged:
                while True:
                    row = conn.execute("SELECT jobq.purge(interval '0', 500000)").fetchone()
                    if not row or not row[0]:
                        break
            conn.execute("VACUUM (ANALYZE) jobq.jobs")
            conn.execute("CHECKPOINT")
        return target

    def _explain_ms(self, conn: psycopg.Connection[Any], statement: str, params: Any = None) -> float:
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params).fetchone()
        assert row is not None
        return float(row[0][0]["Execution Time"])

    def _growth_costs(self, target: Target) -> dict[str, Any]:
        """Server time (EXPLAIN ANALYZE, ms) of one claim of 10, one complete, one enqueue, one
        jobq.stats() and one jobq.metrics(), growth_samples each (the first of each apart)."""
        samples = self.scale.growth_samples
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE jobq._claim_hints")
            first = conn.execute("SELECT coalesce(max(id), 0) FROM jobq.jobs").fetchone()
            insert_queued(conn, "jobq.jobs", QUEUE, 1, samples * 10 + 100)
            conn.execute("ANALYZE jobq.jobs")
            conn.execute("SELECT count(*) FROM jobq.claim('warmup', 10, 'scaling')")  # plans the claim
            claim = [self._explain_ms(conn, "SELECT * FROM jobq.claim(%s, 10, 'scaling')", (QUEUE,))
                     for _ in range(samples)]  # fmt: skip
            held = conn.execute(
                "SELECT id, lease FROM jobq.jobs WHERE status = 'running' AND id > %s ORDER BY id LIMIT %s",
                (first[0] if first else 0, samples),
            ).fetchall()
            complete = [
                self._explain_ms(conn, "SELECT jobq.complete(%s, %s)", (i, lease)) for i, lease in held
            ]
            enqueue = [
                self._explain_ms(conn, "SELECT jobq.enqueue(%s, '{}')", (QUEUE,)) for _ in range(samples)
            ]
            stats = [self._explain_ms(conn, "SELECT * FROM jobq.stats()") for _ in range(3)]
            metrics = [self._explain_ms(conn, "SELECT * FROM jobq.metrics()") for _ in range(3)]
            conn.execute("DELETE FROM jobq.jobs WHERE id > %s", (first[0] if first else 0,))
        return {"claim": claim, "complete": complete, "enqueue": enqueue, "stats": stats, "metrics": metrics}

    def _sizes(self, target: Target) -> dict[str, Any]:
        with psycopg.connect(target.dsn, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_stat_force_next_flush()")
            cur.execute(SIZES)
            row = cur.fetchone()
            names = [d.name for d in cur.description or []]
            sizes = dict(zip(names, row or (), strict=False))
            total = conn.execute("SELECT pg_total_relation_size('jobq.jobs')").fetchone()
            rows = conn.execute("SELECT count(*) FROM jobq.jobs").fetchone()
        sizes.update(total_bytes=total[0] if total else None, rows=rows[0] if rows else None)
        return sizes

    def _growth_rates(self, target: Target, backlog: int) -> dict[str, float]:
        """pgbench, 4 clients: claim + complete (one job per transaction pair) from a backlog, then
        single-row enqueues; the rows they add are deleted afterwards."""
        seconds = self.scale.growth_seconds
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            first = conn.execute("SELECT coalesce(max(id), 0) FROM jobq.jobs").fetchone()
            start = first[0] if first else 0
            insert_queued(conn, "jobq.jobs", QUEUE, 1, backlog)
            conn.execute("ANALYZE jobq.jobs")
        claimed = run_pgbench(self.servers.pg.bindir, target.dsn, CLAIM_COMPLETE, clients=4, seconds=seconds)
        enqueued = run_pgbench(self.servers.pg.bindir, target.dsn, ENQUEUE_ONE, clients=4, seconds=seconds)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM jobq.jobs WHERE id > %s", (start,))
        return {"claim_complete": claimed.tps, "enqueue": enqueued.tps}

    def growth(self) -> None:
        scale = self.scale
        self.load_note("growth (start)")
        targets: dict[str, Target] = {}
        built: dict[str, Any] = self.records.setdefault("growth_states", {})
        for name, done, purged in scale.growth_states:
            began = time.perf_counter()
            targets[name] = self._growth_state(name, done, purged)
            built[name] = {"done": done, "purged": purged, "build_seconds": time.perf_counter() - began}
            built[name]["sizes"] = self._sizes(targets[name])
            self.log(f"  built {name} in {built[name]['build_seconds']:.1f} s: {built[name]['sizes']}")
        runs: list[dict[str, Any]] = self.records.setdefault("growth", [])
        backlog = 10_000
        for repeat in range(self.repeats):
            for name in rotated(list(targets), repeat):
                costs = self._growth_costs(targets[name])
                rates = self._growth_rates(targets[name], backlog)
                backlog = max(backlog, round(2 * rates["claim_complete"] * scale.growth_seconds))
                runs.append({"state": name, "repeat": repeat, "costs_ms": costs, "rates": rates})
                self.log(
                    f"  r{repeat} {name:<16} claim {_median(costs['claim'][1:]):.3f} ms,"
                    f" complete {_median(costs['complete'][1:]):.3f} ms,"
                    f" enqueue {_median(costs['enqueue'][1:]):.3f} ms,"
                    f" stats {_median(costs['stats']):.1f} ms;"
                    f" claim+complete {rates['claim_complete']:.0f}/s, enqueue {rates['enqueue']:.0f}/s"
                )
        self.load_note("growth (end)")

    # -- sharding ---------------------------------------------------------------------------

    def sharding(self) -> None:
        scale = self.scale
        self.load_note("sharding (start)")
        queues = scale.shard_queues
        with contextlib.ExitStack() as stack:
            fresh = [stack.enter_context(Servers(redis=False)) for _ in range(4)]
            for server in fresh:
                configure(server)
            dsns = []
            for server in fresh:
                target = server.create_database(SHARD_DB)
                pgjobq_setup(target)
                dsns.append(target.dsn)
            layouts = {
                "one_server": pgjobq.QueueRouter({"one": dsns[0]}),
                "three_servers": pgjobq.QueueRouter(
                    {"s1": dsns[1], "s2": dsns[2], "s3": dsns[3]},
                    {queue: f"s{i + 1}" for i, queue in enumerate(queues)},
                ),
            }
            servers_of = {"one_server": fresh[:1], "three_servers": fresh[1:]}
            runs: list[dict[str, Any]] = self.records.setdefault("sharding", [])
            loads = [("drain", batch) for batch in scale.shard_batches] + [("enqueue", 1)]
            for repeat in range(self.repeats):
                for load, batch in loads:
                    for layout in rotated(list(layouts), repeat):
                        router, used = layouts[layout], servers_of[layout]
                        record = self._shard_run(router, used, load, batch, queues, layout)
                        record.update(layout=layout, load=load, batch=batch, repeat=repeat)
                        runs.append(record)
                        self.log(f"  r{repeat} {load:<7} b={batch:<2} {layout:<13} {_line(record)}")
        self.load_note("sharding (end)")

    def _shard_run(
        self,
        router: pgjobq.QueueRouter,
        used: list[Servers],
        load: str,
        batch: int,
        queues: tuple[str, ...],
        layout: str,
    ) -> dict[str, Any]:
        scale = self.scale
        per_queue = scale.shard_workers_per_queue
        for conninfo in router.servers.values():
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute("TRUNCATE jobq.jobs")
        tasks: list[Task] = []
        if load == "drain":
            guess = self._shard_guess(layout, batch)
            backlog = max(MIN_BACKLOG, round(1.5 * guess * scale.shard_seconds / len(queues)))
            for queue in queues:
                with psycopg.connect(router.conninfo(queue), autocommit=True) as conn:
                    insert_queued(conn, "jobq.jobs", queue, 1, backlog)
            tasks = [QueueWorkerTask(router.conninfo(q), q, batch) for q in queues for _ in range(per_queue)]
            goal = backlog * len(queues)
        else:
            servers = tuple(router.servers.items())
            placements = tuple(router.placements.items())
            tasks = [
                RoutedEnqueueTask(servers, placements, q, 10**9) for q in queues for _ in range(per_queue)
            ]
            goal = 10**9
        for server, conninfo in zip(used, router.servers.values(), strict=True):
            server.settle(conninfo)
        return self.measure_pool(
            tasks, goal, scale.shard_seconds, servers=used, dbname=SHARD_DB, sample=False
        )

    def row_movement(self) -> None:
        target = self.servers.create_database("scaling_row_movement")
        self.records["row_movement"] = row_movement(target.dsn)
        self.log(f"  {self.records['row_movement']}")

    def _shard_guess(self, layout: str, batch: int) -> float:
        rates = [
            r["rate"]
            for r in self.records.get("sharding", [])
            if r["load"] == "drain" and r["batch"] == batch and r["layout"] == layout
        ]
        return max(rates) if rates else FIRST_GUESS.get(batch, 20_000.0)


ROW_MOVEMENT_DDL = """
CREATE TABLE moved_jobs (id bigint, status text, PRIMARY KEY (id, status)) PARTITION BY LIST (status);
CREATE TABLE moved_jobs_queued PARTITION OF moved_jobs FOR VALUES IN ('queued');
CREATE TABLE moved_jobs_running PARTITION OF moved_jobs FOR VALUES IN ('running');
CREATE TABLE flat_jobs (id bigint PRIMARY KEY, status text);
INSERT INTO moved_jobs SELECT g, 'queued' FROM generate_series(1, 3) AS g;
INSERT INTO flat_jobs SELECT g, 'queued' FROM generate_series(1, 3) AS g;
"""
# the slow claimer's scan waits 1 s on job 1 after taking its snapshot and before locking the row;
# meanwhile a fast claimer moves job 1 to running and commits
SLOW_CLAIM = """
SELECT id FROM {table} WHERE status = 'queued' AND (id <> 1 OR pg_sleep(1) IS NOT NULL)
 ORDER BY id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
"""


def row_movement(dsn: str) -> dict[str, str]:
    """What a READ COMMITTED SKIP LOCKED claimer gets when the row it is about to lock was claimed and
    committed meanwhile: on one table, the next job; on a table partitioned by status, whose claim
    moved the row to another partition, SQLSTATE 40001."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROW_MOVEMENT_DDL)
    outcome: dict[str, str] = {}
    for table in ("flat_jobs", "moved_jobs"):
        got: list[str] = []

        def slow_claim(table: str = table, got: list[str] = got) -> None:
            with psycopg.connect(dsn) as conn:
                try:
                    rows = conn.execute(sql.SQL(SLOW_CLAIM).format(table=sql.Identifier(table))).fetchall()
                    got.append(f"claimed job {rows[0][0]}" if rows else "claimed nothing")
                except psycopg.Error as exc:
                    got.append(f"{exc.sqlstate}: {exc}")

        thread = threading.Thread(target=slow_claim)
        thread.start()
        time.sleep(0.3)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {} SET status = 'running' WHERE id = 1").format(sql.Identifier(table))
            )
        thread.join()
        outcome[table] = got[0] if got else "no answer"
    return outcome


def _line(record: dict[str, Any]) -> str:
    """A run on one line of the log: its rate and CPU split, and its error if it failed."""
    cpu = record["cpu"]
    error = f"  ERROR {record['error']}" if record.get("error") else ""
    return (
        f"{record['rate']:>8.0f} jobs/s  server {cpu['server']:.2f} clients {cpu['clients']:.2f}"
        f" busy {cpu['machine_busy']:.2f} iowait {cpu['iowait']:.2f} cores{error}"
    )


def configure(servers: Servers) -> None:
    """EXTRA_SETTINGS on a running server (ALTER SYSTEM, then a reload)."""
    with servers.admin() as conn:
        for name, value in EXTRA_SETTINGS.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")


# -- the summary ----------------------------------------------------------------------------

TIMES = "\u00d7"  # the multiplication sign of ratios (as report.py writes them)
DASH = "\u2013"  # the en dash of ranges

KIND_LABELS = {
    "worker": "pgjobq Worker processes",
    "pgbench": "pgbench, jobq.complete_and_claim (no Python)",
    "pgbench_async": "the same, synchronous_commit off",
}
ENQUEUE_LABELS = {
    "python": "pgjobq.enqueue from Python, one row per call",
    "python_many": "pgjobq.enqueue_many from Python",
    "pgbench": "pgbench, jobq.enqueue (no Python)",
    "pgbench_async": "the same, synchronous_commit off",
}


def _spread(values: list[float], digits: int = 0) -> str:
    """The median of values, then (min-max) when there are several."""
    if not values:
        return ""
    fmt = f"{{:,.{digits}f}}"
    middle = fmt.format(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({fmt.format(min(values))}{DASH}{fmt.format(max(values))})"


def _ratio(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    return f"{statistics.median(values):.2f}{TIMES} ({low:.2f}{TIMES}{DASH}{high:.2f}{TIMES})"


def _med(records: list[dict[str, Any]], group: str, key: str, digits: int = 2) -> str:
    """The median of record[group][key] over records, formatted."""
    return f"{_median([float(r[group][key]) for r in records]):,.{digits}f}"


def _waits(records: list[dict[str, Any]], top: int = 3) -> str:
    totals: Counter[str] = Counter()
    for record in records:
        for state, share in record.get("waits", {}).items():
            totals[state] += share / len(records)
    return ", ".join(f"{state} {share:.0%}" for state, share in totals.most_common(top))


def _paired(
    records: list[dict[str, Any]], cell: Callable[[dict[str, Any]], Any], side: str, top: str, bottom: str
) -> dict[Any, list[float]]:
    """For each cell, the ratios top / bottom of records[side], paired per repeat."""
    by: dict[tuple[Any, int], dict[str, float]] = {}
    for r in records:
        by.setdefault((cell(r), r["repeat"]), {})[r[side]] = r["rate"]
    ratios: dict[Any, list[float]] = {}
    for (key, _), rates in sorted(by.items(), key=lambda item: str(item[0])):
        if rates.get(top) and rates.get(bottom):
            ratios.setdefault(key, []).append(rates[top] / rates[bottom])
    return ratios


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def _saturation_section(runs: list[dict[str, Any]]) -> list[str]:
    rows = []
    cells = sorted(
        {(r["kind"], r["workers"], r["batch"]) for r in runs},
        key=lambda c: (list(KIND_LABELS).index(c[0]), c[2], c[1]),
    )
    for kind, workers, batch in cells:
        rs = [r for r in runs if (r["kind"], r["workers"], r["batch"]) == (kind, workers, batch)]
        rows.append([
            KIND_LABELS[kind], str(workers), str(batch), _spread([r["rate"] for r in rs]),
            f"{_med(rs, 'cpu', 'server')} ({_med(rs, 'cpu', 'server_backends')} + "
            f"{_med(rs, 'cpu', 'server_background')})",
            _med(rs, "cpu", "clients"), _med(rs, "cpu", "machine_busy"), _med(rs, "cpu", "iowait"),
            _med(rs, "cpu", "other"), _med(rs, "wal", "commits_per_s", 0),
            _med(rs, "wal", "wal_syncs_per_s", 0), _med(rs, "wal", "jobs_per_sync", 1),
            _med(rs, "wal", "ms_per_sync", 2), _waits(rs),
        ])  # fmt: skip
    lines = ["## Saturation: claim + complete, zero work", ""]
    lines += _table(
        ["what", "workers", "batch", "jobs/s", "server cores (backends + background)", "client cores",
         "machine busy", "iowait", "other", "commits/s", "WAL flushes/s", "jobs per WAL flush",
         "ms per flush", "backends were (share of samples)"],
        rows,
    )  # fmt: skip
    ratios = _paired(runs, lambda r: (r["workers"], r["batch"]), "kind", "pgbench_async", "pgbench")
    if ratios:
        lines += [
            "pgbench with synchronous_commit off / durable, paired per repeat: what the commit's WAL flush "
            "costs.",
            "",
        ]
        lines += _table(
            ["clients", "batch", "off / on"],
            [[str(w), str(b), _ratio(v)] for (w, b), v in sorted(ratios.items())],
        )
    return lines


def _enqueue_section(runs: list[dict[str, Any]]) -> list[str]:
    rows = []
    cells = sorted(
        {(r["kind"], r["clients"], r["per_call"]) for r in runs},
        key=lambda c: (list(ENQUEUE_LABELS).index(c[0]), c[2], c[1]),
    )
    for kind, clients, per_call in cells:
        rs = [r for r in runs if (r["kind"], r["clients"], r["per_call"]) == (kind, clients, per_call)]
        rows.append([
            ENQUEUE_LABELS[kind], str(clients), f"{per_call:,}", _spread([r["rate"] for r in rs]),
            _med(rs, "cpu", "server"), _med(rs, "cpu", "clients"), _med(rs, "cpu", "machine_busy"),
            _med(rs, "cpu", "iowait"), _med(rs, "wal", "wal_syncs_per_s", 0),
            _med(rs, "wal", "jobs_per_sync", 1),
        ])  # fmt: skip
    table = _table(
        ["what", "clients", "jobs per call", "jobs/s", "server cores", "client cores", "machine busy",
         "iowait", "WAL flushes/s", "jobs per WAL flush"],
        rows,
    )  # fmt: skip
    return ["## Enqueue", "", *table]


def _mib(value: Any) -> str:
    return f"{(value or 0) / 2**20:,.1f}"


def _growth_section(runs: list[dict[str, Any]], states: dict[str, Any]) -> list[str]:
    rows = []
    for name, state in states.items():
        rs = [r for r in runs if r["state"] == name]
        sizes = state["sizes"]
        index = sizes.get("index_bytes") or {}

        def cost(key: str, rs: list[dict[str, Any]] = rs, digits: int = 3) -> str:
            return _spread([_median(r["costs_ms"][key][1:] or r["costs_ms"][key]) for r in rs], digits)

        rows.append([
            name, f"{sizes.get('rows') or 0:,}", _mib(sizes.get("table_bytes")), _mib(index.get("jobs_pkey")),
            _mib(index.get("jobs_claim_idx")), _mib(index.get("jobs_running_failed_idx")),
            cost("claim"), cost("complete"), cost("enqueue"), cost("stats", digits=1), cost("metrics"),
            _spread([r["rates"]["claim_complete"] for r in rs]), _spread([r["rates"]["enqueue"] for r in rs]),
        ])  # fmt: skip
    lines = ["## What grows with the table", ""]
    lines += _table(
        ["table", "rows", "heap MiB", "jobs_pkey MiB", "jobs_claim_idx MiB", "jobs_running_failed_idx MiB",
         "claim of 10, ms", "complete, ms", "enqueue, ms", "jobq.stats(), ms", "jobq.metrics(), ms",
         "claim + complete /s", "enqueue /s"],
        rows,
    )  # fmt: skip
    first = next(iter(states))
    ratio_rows = []
    for key in ("claim_complete", "enqueue"):
        flat = [
            {"state": r["state"], "repeat": r["repeat"], "rate": r["rates"][key]} for r in runs
        ]  # fmt: skip
        for name in list(states)[1:]:
            paired = _paired(flat, lambda r: 0, "state", name, first)
            ratio_rows.append([name, key.replace("_", " + "), _ratio(paired.get(0, []))])
    lines += [f"Rates against the {first} table, paired per repeat:", ""]
    lines += _table(["table", "path", "ratio"], ratio_rows)
    return lines


def _sharding_section(runs: list[dict[str, Any]]) -> list[str]:
    rows = []
    for load, batch, layout in sorted({(r["load"], r["batch"], r["layout"]) for r in runs}):
        rs = [r for r in runs if (r["load"], r["batch"], r["layout"]) == (load, batch, layout)]
        rows.append([
            load, str(batch), layout.replace("_", " "), _spread([r["rate"] for r in rs]),
            _med(rs, "cpu", "server"), _med(rs, "cpu", "clients"), _med(rs, "cpu", "machine_busy"),
            _med(rs, "cpu", "iowait"), _med(rs, "wal", "wal_syncs_per_s", 0),
            _med(rs, "wal", "jobs_per_sync", 1),
        ])  # fmt: skip
    lines = ["## Sharding on one machine: three queues on one server, or one queue on each of three", ""]
    lines += _table(
        ["load", "batch", "layout", "jobs/s", "server cores", "client cores", "machine busy", "iowait",
         "WAL flushes/s (all servers)", "jobs per WAL flush"],
        rows,
    )  # fmt: skip
    ratios = _paired(runs, lambda r: (r["load"], r["batch"]), "layout", "three_servers", "one_server")
    lines += ["Three servers / one server, paired per repeat:", ""]
    lines += _table(
        ["load", "batch", "ratio"], [[ld, str(b), _ratio(v)] for (ld, b), v in sorted(ratios.items())]
    )
    return lines


def summary(records: dict[str, Any]) -> str:
    """summary.md: the tables of every part that ran, and how the run was made."""
    meta = records["meta"]
    loads = "; ".join(
        f"{part} {'/'.join(f'{v:.1f}' for v in load)}" for part, load in records["load"].items()
    )
    lines = [
        "# Where one PostgreSQL stops: scaling measurements",
        "",
        f"`{meta['command']}` · {meta['started']} · {meta['cpus']} CPUs · git {meta['git']} · "
        f"wall time {meta.get('wall_seconds', 0):.0f} s. Load average (1, 5, 15 min) at each part: {loads}.",
        "",
        "Server: " + ", ".join(f"{k} {v}" for k, v in meta["server"].items()) + ". Figures are medians of "
        f"{meta['repeats']} interleaved repeats (min{DASH}max). CPU is in cores (CPU seconds per second of "
        "the run; the machine has 2), from /proc: the server's processes, the client processes (Worker or "
        "producer processes, or pgbench), and everything else on the machine (other).",
        "",
    ]
    fsync = records.get("fsync", {}).get("ops_per_s", {})
    if fsync:
        lines += ["pg_test_fsync -s 1 on the server's disk, flushes per second:", ""]
        lines += [f"- {name}: {value:,.0f}" for name, value in fsync.items()] + [""]
    if records.get("saturation"):
        lines += _saturation_section(records["saturation"])
    if records.get("enqueue"):
        lines += _enqueue_section(records["enqueue"])
    if records.get("growth"):
        lines += _growth_section(records["growth"], records["growth_states"])
    if records.get("sharding"):
        lines += _sharding_section(records["sharding"])
    if records.get("row_movement"):
        lines += [
            "## The row-movement trap",
            "",
            "A READ COMMITTED claim (`FOR NO KEY UPDATE SKIP LOCKED`) whose snapshot predates another "
            "claim's commit of job 1 (status queued -> running), as it reaches job 1:",
            "",
            f"- one table: {records['row_movement'].get('flat_jobs')}",
            f"- partitioned by status (the claim moved the row): {records['row_movement'].get('moved_jobs')}",
            "",
        ]
    errors = [
        f"- {part}: {r.get('kind') or r.get('layout')}: {r['error']}"
        for part in ("saturation", "enqueue", "sharding")
        for r in records.get(part, [])
        if r.get("error")
    ]
    if errors:
        lines += ["## Errors", "", *errors, ""]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="every part scaled down (a check that it runs)")
    parser.add_argument(
        "--parts", type=_csv, default=list(PARTS), metavar="NAMES",
        help=f"comma-separated parts to run (default: all of {', '.join(PARTS)})",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "scaling", help="output folder")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    scale = QUICK if args.quick else FULL
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {message}", file=sys.stderr, flush=True)

    records: dict[str, Any] = {
        "meta": {
            "command": "bench/scaling.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "git": _git(),
            "scale": scale.__dict__,
            "repeats": args.repeats,
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip(),
        },
        "load": {},
    }
    pool_size = max(
        *scale.workers, *scale.enqueue_clients, len(scale.shard_queues) * scale.shard_workers_per_queue
    )
    with Servers(redis=False) as servers, WorkerPool(pool_size) as pool:
        configure(servers)
        pool.preload(["contenders.pgjobq_worker", "workloads"])
        with servers.admin() as conn, conn.cursor() as cur:
            cur.execute(SERVER_FACTS + ", current_setting('wal_sync_method') AS wal_sync_method")
            row = cur.fetchone()
            records["meta"]["server"] = dict(
                zip([d.name for d in cur.description or []], row or (), strict=False)
            )
        log(f"PostgreSQL {records['meta']['server'].get('server_version')}; {records['meta']['uptime']}")
        run = Scaling(scale, args.repeats, servers, pool, log, records)
        for part in PARTS:
            if part in args.parts:
                log(f"== {part}")
                getattr(run, part)()
                (out / "results.json").write_text(json.dumps(records, indent=1, default=str) + "\n")
    records["meta"]["wall_seconds"] = time.perf_counter() - began
    records["meta"]["uptime_end"] = subprocess.run(
        ["uptime"], capture_output=True, text=True, check=False
    ).stdout.strip()
    (out / "results.json").write_text(json.dumps(records, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(summary(records) + "\n")
    log(f"wrote {out / 'summary.md'} and results.json; {records['meta']['uptime_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
