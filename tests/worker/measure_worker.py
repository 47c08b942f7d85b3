"""Measures the Worker's hot path by hand (not a test): client CPU per job, and wake-up latency.

    .venv/bin/python tests/worker/measure_worker.py throughput --batch 1 --jobs 5000
    .venv/bin/python tests/worker/measure_worker.py throughput --batch 50 --jobs 50000
    .venv/bin/python tests/worker/measure_worker.py throughput --batch 50 --profile   # cProfile, top 25
    .venv/bin/python tests/worker/measure_worker.py latency --jobs 200
    .venv/bin/python tests/worker/measure_worker.py scheduled --jobs 40

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
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import pstats
import random
import statistics
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import pgjobq
from pgjobq._install import check as pgjobq_extension
from pgjobq._install.check import extension_version

from throwaway_pg import ThrowawayPostgres


def backlog(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE jobq.jobs")
        pgjobq.enqueue_many(conn, "default", [{"i": i} for i in range(jobs)])
        conn.execute("VACUUM ANALYZE jobq.jobs")
        conn.execute("CHECKPOINT")


def throughput(dsn: str, batch: int, jobs: int, profile: bool) -> tuple[float, float]:
    """One run: (jobs/s, client CPU microseconds per job)."""
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
    pgjobq_extension.SUPPORTED_EXTENSION_VERSIONS = (version,)

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["throughput", "latency", "scheduled"])
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--extension-version", help="CREATE EXTENSION pgjobq VERSION this (an older client)")
    args = parser.parse_args()
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
            installed = extension_version(conn)
        # a measuring tool: whichever client runs this accepts the version installed
        pgjobq_extension.SUPPORTED_EXTENSION_VERSIONS = (str(installed),)
        if args.mode == "throughput":
            jobs = args.jobs or (50_000 if args.batch >= 10 else 5_000)
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
                samples = latency(dsn, args.jobs or 200, str(installed))
                q = statistics.quantiles(samples, n=100, method="inclusive")
                print(
                    f"latency  {len(samples)} jobs  p50 {q[49]:6.2f} ms  p90 {q[89]:6.2f} ms  "
                    f"p99 {q[98]:6.2f} ms"
                )


if __name__ == "__main__":
    main()
