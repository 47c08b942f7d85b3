"""Measures the Worker's hot path by hand (not a test): client CPU per job, and wake-up latency.

    .venv/bin/python tests/worker/measure_worker.py throughput --batch 1 --jobs 5000
    .venv/bin/python tests/worker/measure_worker.py throughput --batch 50 --jobs 50000
    .venv/bin/python tests/worker/measure_worker.py throughput --batch 50 --profile   # cProfile, top 25
    .venv/bin/python tests/worker/measure_worker.py latency --jobs 200
    .venv/bin/python tests/worker/measure_worker.py scheduled --jobs 40
    .venv/bin/python tests/worker/measure_worker.py compare --old /tmp/old --batch 1 --repeats 7
    .venv/bin/python tests/worker/measure_worker.py compare --old /tmp/old --batch 1 --no-database

Each run starts a throwaway PostgreSQL (durable commits, as the benchmark's) and removes it after.

throughput: a backlog of --jobs jobs, one Worker (concurrency 1, zero-work handler, burst mode) on
this process's main thread; reports jobs/s and the process's CPU time per job (user + system, the
keeper thread's included): the client's microseconds per job.  Repeated --repeats times; each
line is one run, the last the median.

latency: an idle Worker in a child process (poll interval 1 s, as the benchmark's); --jobs jobs
enqueued one at a time, 5 to 25 ms apart; the time from each enqueue's commit returning to its
handler starting (perf_counter, one clock for both processes), p50 and p99.

scheduled: an idle Worker on a thread (poll interval 1 s); --jobs jobs enqueued 50 to 300 ms
apart, each with run_at 0.1 to 0.9 s ahead; how long after its run_at each started.

compare: throughput's client CPU per job of two source trees, --old and --new (by default the tree
this script is in), each tree's package imported in a child process of its own (PYTHONPATH=TREE/python)
on one server and one database; the runs alternate, old, new, new, old, old, new, ... (--repeats of
each, the backlog made afresh before each), so that a machine that slows down or speeds up meanwhile
weighs on both alike.  Reports each run, both medians and their ratio (new / old).  An old tree is a
checkout of an earlier commit: ``git worktree add --detach /tmp/old <commit>``.  With --no-database the
Worker runs on an in-memory connection that answers its statements at once (LoopOnly): what is left is
the Python of the worker's loop, without libpq, psycopg's I/O or a server, whose CPU time on a machine
others load too can swing by half from one run to the next; the same psycopg calls are made by both
trees, so the difference of the two is the difference of the real ones.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import os
import pstats
import random
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

import pgjobq

# Where the imported tree keeps its supported extension versions: a compare child may import an older
# tree, from before the package was grouped (pgjobq._extension), and must not reach past it (the venv's
# editable install would find pgjobq._install in this tree).
if (Path(pgjobq.__file__).parent / "_install").is_dir():
    from pgjobq._install import check as pgjobq_extension
else:
    import pgjobq._extension as pgjobq_extension  # type: ignore[import-not-found,no-redef]

HERE = Path(__file__).resolve()


def accept(version: str) -> None:
    """Have this process's pgjobq accept the installed extension version (a measuring tool, not a check)."""
    supported = pgjobq_extension.SUPPORTED_EXTENSION_VERSIONS
    if version not in supported:
        pgjobq_extension.SUPPORTED_EXTENSION_VERSIONS = (*supported, version)


def backlog(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE jobq.jobs")
        pgjobq.enqueue_many(conn, "default", [{"i": i} for i in range(jobs)])
        conn.execute("VACUUM ANALYZE jobq.jobs")
        conn.execute("CHECKPOINT")


def throughput(dsn: str, batch: int, jobs: int, profile: bool, *, fill: bool = True) -> tuple[float, float]:
    """One run: (jobs/s, client CPU microseconds per job); fill False: the backlog is there already."""
    if fill:
        backlog(dsn, jobs)
    done = 0

    def handler(job: pgjobq.Job) -> None:
        nonlocal done
        done += 1

    settings = pgjobq.WorkerSettings(batch=batch, burst=True, name="measure")
    worker = pgjobq.Worker(dsn, handler, settings)
    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    worker.run(install_signal_handlers=False)
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert done == jobs == worker.processed, (done, jobs, worker.processed)
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return jobs / wall, cpu / jobs * 1e6


def _latency_worker(dsn: str, started: Any, stop: Event, version: str) -> None:
    accept(version)

    def handler(job: pgjobq.Job) -> None:
        started.put((job.payload["i"], time.perf_counter()))

    worker = pgjobq.Worker(dsn, handler, pgjobq.WorkerSettings(batch=10, poll_interval=1.0, name="latency"))

    def stop_on_request() -> None:
        stop.wait()
        worker.stop()

    threading.Thread(target=stop_on_request, daemon=True).start()
    worker.run(install_signal_handlers=False)


def latency(dsn: str, jobs: int, version: str) -> list[float]:
    backlog(dsn, 0)
    context = multiprocessing.get_context("spawn")
    started: Any = context.Queue()
    stop = context.Event()
    child = context.Process(target=_latency_worker, args=(dsn, started, stop, version))
    child.start()
    seen: dict[int, float] = {}

    def collect(until: float) -> None:
        while (remaining := until - time.perf_counter()) > 0:
            try:
                i, clock = started.get(timeout=remaining)
            except Exception:  # queue.Empty
                return
            seen[int(i)] = float(clock)

    rng = random.Random(4)
    committed: dict[int, float] = {}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in (-3, -2, -1):  # warm-up: connected, listening, idle once these ran
                pgjobq.enqueue(conn, "default", {"i": i})
            deadline = time.perf_counter() + 30
            while not all(i in seen for i in (-3, -2, -1)) and time.perf_counter() < deadline:
                collect(time.perf_counter() + 0.1)
            collect(time.perf_counter() + 0.2)
            for i in range(jobs):
                collect(time.perf_counter() + rng.uniform(0.005, 0.025))
                pgjobq.enqueue(conn, "default", {"i": i})
                committed[i] = time.perf_counter()
            deadline = time.perf_counter() + 10
            while not all(i in seen for i in committed) and time.perf_counter() < deadline:
                collect(time.perf_counter() + 0.1)
    finally:
        stop.set()
        child.join(30)
    missing = [i for i in committed if i not in seen]
    if missing:
        print(f"{len(missing)} jobs not started", file=sys.stderr)
    return [(seen[i] - committed[i]) * 1000 for i in committed if i in seen]


def scheduled(dsn: str, jobs: int) -> list[float]:
    backlog(dsn, 0)
    started: dict[int, datetime] = {}

    def handler(job: pgjobq.Job) -> None:
        started[job.payload["i"]] = datetime.now(timezone.utc)

    worker = pgjobq.Worker(dsn, handler, pgjobq.WorkerSettings(poll_interval=1.0, name="scheduled"))
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    rng = random.Random(1)
    due: dict[int, datetime] = {}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            time.sleep(2)  # connected and idle
            for i in range(jobs):
                due[i] = datetime.now(timezone.utc) + timedelta(seconds=rng.uniform(0.1, 0.9))
                pgjobq.enqueue(conn, "default", {"i": i}, run_at=due[i])
                time.sleep(rng.uniform(0.05, 0.3))
            time.sleep(2)
    finally:
        worker.stop()
        thread.join(30)
    return [(started[i] - due[i]).total_seconds() * 1000 for i in due if i in started]


class _LoopOnlyCursor:
    def __init__(self, conn: LoopOnly) -> None:
        self.conn = conn
        self.rows: list[tuple[Any, ...]] = []

    def __enter__(self) -> _LoopOnlyCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, query: str, params: Any = None, prepare: bool | None = None) -> _LoopOnlyCursor:
        self.rows = self.conn.answer(query, params)
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class LoopOnly:
    """A connection that answers the Worker's statements from memory, on a backlog of jobs jobs (rows of
    extension 0.8.0's claim statements: those of both trees)."""

    closed = False
    autocommit = True
    prepare_threshold = 5

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.next_id = 1
        self.adapters = psycopg.adapt.AdaptersMap(psycopg.adapters)

    def cursor(self, row_factory: Any = None) -> _LoopOnlyCursor:
        return _LoopOnlyCursor(self)

    def add_notify_handler(self, handler: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def _claimed(self, n: int) -> list[tuple[Any, ...]]:
        first, self.next_id = self.next_id, min(self.jobs + 1, self.next_id + n)
        return [(i, "default", {"i": i}, 0, 1, 3, i, 60.0, 0.1, None) for i in range(first, self.next_id)]

    def answer(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        if "jobq.complete_and_claim(" in query:
            done = [("done", i, "default", None, 0, 1, 3, i, None, None, None) for i in params["ids"]]
            return done + [("running", *row) for row in self._claimed(params["n"])]
        if "jobq.claim(" in query:
            return self._claimed(params["n"])
        if "jobq.complete_many(" in query or "jobq.heartbeat_status(" in query:
            return [(i, False, False) for i in params["ids"]]
        if "jobq.reap(" in query:
            return []
        if "jobq.tick()" in query:
            return [(0,)]
        if "jobq.version()" in query:  # what the worker reads at each reap (both trees run at 0.8.0)
            return [("0.8.0",)]
        raise AssertionError(f"LoopOnly does not answer {query}")


def loop_only(batch: int, jobs: int) -> float:
    """The client CPU microseconds per job of a Worker on LoopOnly (listen=False: no probe)."""
    worker_module: Any  # patched below: whichever tree this is, its Worker connects to LoopOnly
    if (Path(pgjobq.__file__).parent / "_worker").is_dir():
        from pgjobq._worker import sync as worker_module
    else:  # an older tree: the Worker was pgjobq._worker, a module
        import pgjobq._worker as worker_module
    worker_module.check_extension = lambda conn: "0.8.0"
    worker_module.Worker._open = lambda self, role: LoopOnly(jobs)
    done = 0

    def handler(job: pgjobq.Job) -> None:
        nonlocal done
        done += 1

    settings = pgjobq.WorkerSettings(batch=batch, burst=True, listen=False, name="measure")
    worker = pgjobq.Worker("", handler, settings)
    cpu = time.process_time()
    worker.run(install_signal_handlers=False)
    cpu = time.process_time() - cpu
    assert done == jobs == worker.processed, (done, jobs, worker.processed)
    return cpu / jobs * 1e6


def installed_version(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'").fetchone()
    assert row is not None
    return str(row[0])


def one_run(dsn: str | None, batch: int, jobs: int) -> None:
    """A compare child: one throughput run on the backlog the parent made (dsn None: on LoopOnly); prints
    its figures as JSON."""
    if dsn is None:
        rate, cpu = 0.0, loop_only(batch, jobs)
    else:
        accept(installed_version(dsn))
        rate, cpu = throughput(dsn, batch, jobs, False, fill=False)
    print(json.dumps({"rate": rate, "cpu": cpu, "package": str(Path(pgjobq.__file__).parent)}))


def compare(dsn: str | None, old: Path, new: Path, batch: int, jobs: int, repeats: int) -> None:
    """Alternate old and new runs (see the module docstring; dsn None: --no-database); print each, the
    medians and their ratio."""
    cpus: dict[str, list[float]] = {"old": [], "new": []}
    for round_ in range(repeats):
        pair = [("old", old), ("new", new)]
        for label, tree in pair if round_ % 2 == 0 else pair[::-1]:  # old new, new old, ...
            if dsn is not None:
                backlog(dsn, jobs)
            env = {**os.environ, "PYTHONPATH": str(tree / "python")}
            where = ["--dsn", dsn] if dsn is not None else ["--no-database"]
            command = [sys.executable, str(HERE), "one-run", *where, "--batch", str(batch)]
            child = subprocess.run(
                [*command, "--jobs", str(jobs)], env=env, capture_output=True, text=True, check=False
            )
            if child.returncode != 0:
                raise SystemExit(f"the {label} run failed:\n{child.stderr}")
            figures = json.loads(child.stdout.strip().splitlines()[-1])
            if not Path(figures["package"]).is_relative_to(tree):
                raise SystemExit(f"the {label} run imported {figures['package']}, not {tree}'s package")
            cpus[label].append(figures["cpu"])
            rate = f"{figures['rate']:9.0f} jobs/s  " if dsn is not None else ""
            print(
                f"{label}  batch {batch:>4}  {jobs} jobs  {rate}client {figures['cpu']:7.2f} us/job",
                flush=True,
            )
    old_median, new_median = statistics.median(cpus["old"]), statistics.median(cpus["new"])
    print(
        f"median  batch {batch:>4}  old {old_median:7.2f} us/job  new {new_median:7.2f} us/job  "
        f"new/old {new_median / old_median:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["throughput", "latency", "scheduled", "compare", "one-run"])
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--extension-version", help="CREATE EXTENSION pgjobq VERSION this (an older client)")
    parser.add_argument("--old", type=Path, help="compare: the source tree to compare against")
    parser.add_argument("--new", type=Path, default=HERE.parents[2], help="compare: the tree measured")
    parser.add_argument("--dsn", help="one-run: the database (made by compare)")
    parser.add_argument("--no-database", action="store_true", help="compare: the worker's loop alone")
    args = parser.parse_args()
    jobs = args.jobs or (50_000 if args.batch >= 10 else 5_000)
    if args.mode == "one-run":
        one_run(None if args.no_database else args.dsn, args.batch, jobs)
        return
    if args.mode == "compare" and args.old is None:
        parser.error("compare needs --old TREE")
    if args.mode == "compare" and args.no_database:
        compare(None, args.old.resolve(), args.new.resolve(), args.batch, jobs, args.repeats)
        return
    with ThrowawayPostgres() as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE measure")
        dsn = server.dsn("measure")
        with psycopg.connect(dsn, autocommit=True) as conn:
            if args.extension_version:
                conn.execute(
                    sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(args.extension_version))
                )
            else:
                conn.execute("CREATE EXTENSION pgjobq")
        installed = installed_version(dsn)
        # a measuring tool: whichever client runs this accepts the version installed
        accept(installed)
        if args.mode == "compare":
            compare(dsn, args.old.resolve(), args.new.resolve(), args.batch, jobs, args.repeats)
        elif args.mode == "throughput":
            rates, cpus = [], []
            for _ in range(1 if args.profile else args.repeats):
                rate, cpu = throughput(dsn, args.batch, jobs, args.profile)
                rates.append(rate)
                cpus.append(cpu)
                print(f"batch {args.batch:>4}  {jobs} jobs  {rate:9.0f} jobs/s  client {cpu:7.1f} us/job")
            print(
                f"median    batch {args.batch:>4}  {statistics.median(rates):9.0f} jobs/s  "
                f"client {statistics.median(cpus):7.1f} us/job"
            )
        elif args.mode == "scheduled":
            for _ in range(args.repeats):
                late = scheduled(dsn, args.jobs or 40)
                print(
                    f"scheduled  {len(late)} jobs  start - run_at: min {min(late):.1f} ms  "
                    f"p50 {statistics.median(late):.1f} ms  max {max(late):.1f} ms"
                )
        else:
            for _ in range(args.repeats):
                samples = latency(dsn, args.jobs or 200, installed)
                q = statistics.quantiles(samples, n=100, method="inclusive")
                print(
                    f"latency  {len(samples)} jobs  p50 {q[49]:6.2f} ms  p90 {q[89]:6.2f} ms  "
                    f"p99 {q[98]:6.2f} ms"
                )


if __name__ == "__main__":
    main()
