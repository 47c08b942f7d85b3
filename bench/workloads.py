"""The workloads of the benchmark, at two scales (quick and full).

Every workload repeats ``repeats`` times and interleaves what it compares
inside each repeat (contenders, variants, table states), so that a drift of
the machine hits all of them alike.  Results are plain dicts and lists
(``Results``), written to results.json and rendered by report.py.

- throughput: zero work per job, every contender, workers x batch, a
  backlog of ``jobs`` jobs drained from the start barrier to the last job.
- work: 5 ms of work per job (the handler sleeps), 1 and 8 workers.
- enqueue: single-row enqueues from 4 clients, jobq.enqueue against the
  article's INSERT, with no consumer and with one idle consumer running
  (a pgjobq Worker on pgjobq's queue, the article's own worker loop on the
  article's table); and one bulk call, pgjobq.enqueue_many against one
  multi-row INSERT of the same rows into the article's table.
- latency: enqueue commit to handler start on an idle pgjobq Worker, with
  LISTEN/NOTIFY and polling only.
- scheduled: jobs enqueued with run_at 1 s ahead, on an idle pgjobq
  Worker: how late after its run_at each handler starts.
- claim cost: jobq.claim's execution time and shared buffers with finished
  rows in the table, and with dead tuples not yet vacuumed.
- soak: a large backlog through 4 pgjobq Workers while another session
  holds a transaction (a snapshot) open for the whole run, then, the
  snapshot released and the tables vacuumed, a second one with none;
  throughput and the space the queue uses over time.
- versions: pgjobq's own SQL, the current version against the previous one
  (two databases, one per version), on the hot paths, driven by pgbench.
- limits: claim + complete (pgbench) on queues with limits (a global
  concurrency, 10,000 concurrency keys, one hot key with a long backlog)
  against the plain queue, same clients and batch, in one run.
- rate_limit: pgjobq Workers on a rate-limited queue: jobs/s against the
  limit, and how many claims the Workers make per second meanwhile.
- asyncio: pgjobq.AsyncWorker (100 tasks) beside the sync Worker (100
  threads), one process each, zero work and 5 ms of sleep per job
  (contenders/pgjobq_async.py).
- node: `pgjobq worker` processes beside Graphile Worker and pg-boss (Node.js),
  each in OS processes of its own as its users run it: drain at 1 and 4
  processes x batch 1 and 50, single-row enqueue, latency on an idle worker
  (contenders/node_peers.py; skipped, with the reason, without Node.js 22).
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pgjobq

from contenders import article, node_peers
from contenders._pgbench import CLAIM_COMPLETE, CLAIM_WAIT, EMPTY_WAIT_MS, ENQUEUE_ONE, ONE_TRIP, run_pgbench
from contenders._util import describe, explain_nested, insert_queued, payloads
from contenders.base import Contender, Target, WorkerHooks
from contenders.pgjobq_async import KINDS, run_worker
from contenders.pgjobq_sql import QUEUE, pgjobq_reset, pgjobq_setup
from contenders.pgjobq_worker import PgjobqWorker, run_until, worker_settings
from contenders.sql_ceiling import DrivenContender, count_done
from driver import Measured, Servers, Task, WorkerPool, WorkTask, timer

__all__ = [
    "FULL",
    "QUICK",
    "VERSION_PATHS",
    "Bench",
    "LimitVariant",
    "Scale",
    "limit_variants",
    "previous_version",
]

IDEAL_PER_WORKER = 200.0  # jobs/s one worker can do at 5 ms per job
MIN_BACKLOG = 1_000  # the smallest backlog a zero-work run is given (see Bench._backlog)

# Table states for the claim cost, the soak and the version comparison are built straight into
# jobq.jobs (insert_queued, as the extension's owner): these workloads measure claiming, not
# enqueueing, and this is several times faster.
FINISHED_SQL = """
INSERT INTO jobq.jobs (queue, payload, status, attempts, lease, locked_by, locked_at, finished_at)
SELECT %(queue)s, jsonb_build_object('i', g), 'done', 1, 1, 'builder', now(), now()
  FROM generate_series(1, %(count)s::bigint) AS g
"""


@dataclass(frozen=True)
class Scale:
    """How big each workload is."""

    name: str
    # throughput, zero work
    jobs: int
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    run_limit: float  # seconds; a run still short of its goal then is stopped and reported as capped
    # throughput, work
    work_ms: float
    work_workers: tuple[int, ...]
    work_batch: int
    work_run_seconds: float  # jobs = workers * ideal rate * this
    # enqueue
    enqueue_clients: int
    enqueue_single_jobs: int  # in all, over the clients
    enqueue_bulk_jobs: int
    # latency
    latency_jobs: int
    latency_gap: tuple[float, float]  # seconds between enqueues, uniform
    latency_poll: float  # the Worker's poll_interval (its default is 1 s)
    # scheduled: jobs enqueued with run_at this far ahead, one every scheduled_gap seconds (uniform)
    scheduled_jobs: int
    scheduled_ahead: float
    scheduled_gap: tuple[float, float]
    # claim cost
    claim_finished: tuple[int, ...]
    claim_dead: int
    claim_queued: int
    claim_samples: int
    # soak
    soak_jobs: int
    soak_workers: int
    soak_batch: int
    soak_retain_done: float  # seconds the soak's queue keeps its done jobs (retain_done)
    soak_window: float
    soak_limit: float
    soak_compare: float  # "first minute" and "last minute" of the soak, in seconds
    soak_held_repeats: int  # runs with the snapshot held, each in a fresh database (the ratio's median)
    # versions
    versions_clients: int
    versions_seconds: int  # per run (pgbench -T, whole seconds)
    versions_backlog: int  # jobs queued before a claim run, times its batch, until earlier runs tell more
    # limits (pgbench, _pgbench.CLAIM_WAIT): queues with limits against the plain queue, same clients/batch
    limits_cells: tuple[tuple[int, int], ...]  # (clients, batch): the plain queue and the global limits
    limits_keyed_cells: tuple[tuple[int, int], ...]  # (clients, batch): the plain queue and the keyed ones
    limits_seconds: int  # per run (pgbench -T, whole seconds)
    limits_backlog: int  # jobs queued before a run (the skew's: on small keys), until runs tell more
    limits_keys: int  # the many-keys variants: job i gets key i mod this
    limits_key_concurrency: tuple[int, ...]
    limits_orders: tuple[str, ...]  # key_order of the keyed variants
    limits_loose: int  # a global concurrency that does not bind
    limits_binding: int  # one that does: below clients x batch
    limits_hot: tuple[int, ...]  # the skew: the hot key's backlog, enqueued ahead of the small keys' jobs
    limits_small_keys: int  # the skew: the small keys sharing the rest of the backlog
    limits_pick: tuple[str, ...]  # the queues (LimitVariant.name) to run, the plain one always; (): all
    # rate limit: pgjobq Workers on a queue with rate_limit per second
    rate_limit: int
    rate_workers: int
    rate_batch: int
    rate_seconds: float  # per run
    # a CHECKPOINT before every run, so that none falls inside one (the quick run is shorter than
    # checkpoint_timeout and writes far less than max_wal_size: no checkpoint can start during it)
    checkpoint_each_run: bool = True
    # asyncio: one process, AsyncWorker with this many tasks against the Worker with this many threads
    asyncio_concurrency: int = 100
    asyncio_batch: int = 100
    asyncio_jobs: int = 20_000  # per run, zero work
    asyncio_work_jobs: int = 20_000  # per run, 5 ms of work each
    asyncio_limit: float = 10.0  # seconds; a run short of its goal then is reported as capped
    # node: `pgjobq worker` processes beside Graphile Worker and pg-boss (contenders/node_peers.py)
    node_jobs: int = 20_000  # the backlog of a drain run
    node_workers: tuple[int, ...] = (1, 4)
    node_batches: tuple[int, ...] = (1, 50)
    node_limit: float = 5.0  # seconds; a drain still short of its backlog then is reported as capped
    node_enqueue_clients: int = 4
    node_enqueue_jobs: int = 2_000  # in all, over the clients
    node_latency_jobs: int = 100
    node_latency_gap: tuple[float, float] = (0.005, 0.025)  # seconds between the producer's jobs

    @property
    def pool_size(self) -> int:
        # the enqueue's clients run beside one consumer
        return max(
            *self.workers, *self.work_workers, self.enqueue_clients + 1, self.soak_workers, self.rate_workers
        )


FULL = Scale(
    name="full",
    jobs=20_000,
    workers=(1, 4, 8),
    batches=(1, 10, 50),
    run_limit=0.7,
    work_ms=5.0,
    work_workers=(1, 8),
    work_batch=10,
    work_run_seconds=1.0,
    enqueue_clients=4,
    enqueue_single_jobs=4_000,
    enqueue_bulk_jobs=100_000,
    latency_jobs=200,
    latency_gap=(0.005, 0.025),
    latency_poll=1.0,
    scheduled_jobs=20,
    scheduled_ahead=1.0,
    scheduled_gap=(0.15, 0.3),
    claim_finished=(100_000, 1_000_000),
    claim_dead=100_000,
    claim_queued=2_000,
    claim_samples=20,
    soak_jobs=1_000_000,
    soak_workers=4,
    soak_batch=10,
    soak_retain_done=60.0,
    soak_window=10.0,
    soak_limit=300.0,
    soak_compare=60.0,
    soak_held_repeats=3,
    versions_clients=4,
    versions_seconds=2,
    versions_backlog=10_000,
    limits_cells=((16, 1), (16, 10)),
    limits_keyed_cells=((4, 10),),
    limits_seconds=2,
    limits_backlog=30_000,
    limits_keys=10_000,
    limits_key_concurrency=(1, 2),
    limits_orders=("priority", "round_robin"),
    limits_loose=1_000,
    limits_binding=8,
    limits_hot=(1_000, 10_000, 30_000),
    limits_small_keys=1_000,
    limits_pick=(),
    rate_limit=200,
    rate_workers=4,
    rate_batch=10,
    rate_seconds=3.0,
)

QUICK = Scale(
    name="quick",
    jobs=1_500,
    workers=(4,),
    batches=(1, 50),
    run_limit=0.3,
    work_ms=5.0,
    work_workers=(8,),
    work_batch=10,
    work_run_seconds=0.25,
    enqueue_clients=4,
    enqueue_single_jobs=400,
    enqueue_bulk_jobs=10_000,
    latency_jobs=20,
    latency_gap=(0.02, 0.05),
    latency_poll=1.0,
    scheduled_jobs=5,
    scheduled_ahead=1.0,
    scheduled_gap=(0.15, 0.3),
    claim_finished=(10_000, 50_000),
    claim_dead=5_000,
    claim_queued=500,
    claim_samples=10,
    soak_jobs=50_000,
    soak_workers=4,
    soak_batch=10,
    soak_retain_done=5.0,
    soak_window=1.0,
    soak_limit=10.0,
    soak_compare=2.5,
    soak_held_repeats=1,
    versions_clients=4,
    versions_seconds=1,
    versions_backlog=10_000,
    limits_cells=((4, 10),),
    limits_keyed_cells=((4, 10),),
    limits_seconds=1,
    limits_backlog=5_000,
    limits_keys=2_000,
    limits_key_concurrency=(1,),
    limits_orders=("priority", "round_robin"),
    limits_loose=1_000,
    limits_binding=8,
    limits_hot=(3_000,),
    limits_small_keys=1_000,
    limits_pick=("concurrency_8", "keys_2000_kc1_round_robin", "skew_3000_priority_jit_off"),
    rate_limit=200,
    rate_workers=4,
    rate_batch=10,
    rate_seconds=1.0,
    checkpoint_each_run=False,
    asyncio_jobs=5_000,
    asyncio_work_jobs=5_000,
    asyncio_limit=5.0,
    node_jobs=3_000,
    node_limit=2.0,
    node_enqueue_jobs=800,
    node_latency_jobs=20,
    node_latency_gap=(0.02, 0.05),
)


@dataclass(frozen=True)
class VersionPath:
    """A hot path of the version comparison: its pgbench script and batch, and what its rate counts."""

    name: str
    label: str
    script: str
    batch: int = 1
    claims: bool = True  # True: a backlog is queued before each run and the jobs done are counted
    needs: str | None = None  # a call, as the script makes it, that older versions cannot take


# positional, as the script calls it: a later version with more (defaulted) arguments still takes it
COMPLETE_AND_CLAIM = "jobq.complete_and_claim('{}'::bigint[], '{}'::bigint[], 'bench', 1, 'pgbench')"

VERSION_PATHS = (
    VersionPath("claim_complete", "claim + complete, one job per transaction pair", CLAIM_COMPLETE),
    VersionPath("enqueue", "single-row enqueue", ENQUEUE_ONE, claims=False),
    VersionPath("complete_and_claim_1", "complete_and_claim, batch 1", ONE_TRIP, 1, needs=COMPLETE_AND_CLAIM),
    VersionPath(
        "complete_and_claim_10", "complete_and_claim, batch 10", ONE_TRIP, 10, needs=COMPLETE_AND_CLAIM
    ),
)
HOT_PATHS = ("claim_complete", "enqueue")  # a new version keeps these within 3% of the previous one
WITHIN = 0.97  # current / previous, at least


@dataclass(frozen=True)
class LimitVariant:
    """A queue of the limits workload: its limits (jobq.configure_queue's named arguments), how its
    backlog's jobs get concurrency keys, and whether its database turns JIT compilation off."""

    name: str
    label: str
    settings: tuple[tuple[str, Any], ...] = ()  # none: the plain queue
    keys: int = 0  # job i of the backlog gets key "k<i mod keys>"
    hot: int = 0  # the skew: this many jobs of key "hot" enqueued first, then the backlog on small keys
    small_keys: int = 0  # the skew: the backlog's job i gets key "s<i mod small_keys>"
    jit: bool = True  # False: ALTER DATABASE ... SET jit = off (the server's default is on)

    @property
    def keyed(self) -> bool:
        return bool(self.keys or self.hot)


PLAIN = "plain"  # the limits workload's baseline: the same queue without limits
JIT_OFF = "jit off"  # the label of the variants whose database has jit = off


def limit_variants(scale: Scale) -> list[LimitVariant]:
    """The queues the limits workload compares, the plain one first (limits_pick keeps some only).

    Priority order's pick of a keyed queue is a cursor whose estimated cost grows with the queue's
    backlog: past PostgreSQL's jit_above_cost every claim compiles it.  So the priority variants come
    twice where it matters: as the server runs them (jit on, its default) and with jit off, which
    leaves the cost of walking the backlog alone.
    """
    found = [
        LimitVariant(PLAIN, "plain queue, no limits"),
        LimitVariant(
            f"concurrency_{scale.limits_loose}",
            f"concurrency {scale.limits_loose:,} (does not bind)",
            (("concurrency", scale.limits_loose),),
        ),
        LimitVariant(
            f"concurrency_{scale.limits_binding}",
            f"concurrency {scale.limits_binding}",
            (("concurrency", scale.limits_binding),),
        ),
    ]
    keys = scale.limits_keys
    for per_key in scale.limits_key_concurrency:
        for order in scale.limits_orders:
            settings = (("key_concurrency", per_key), ("key_order", order))
            name, label = (
                f"keys_{keys}_kc{per_key}_{order}",
                f"{keys:,} keys, key_concurrency {per_key}, {order}",
            )
            found.append(LimitVariant(name, label, settings, keys=keys))
            if order == "priority" and per_key == scale.limits_key_concurrency[0]:
                found.append(
                    LimitVariant(f"{name}_jit_off", f"{label}, {JIT_OFF}", settings, keys=keys, jit=False)
                )
    small = scale.limits_small_keys
    for hot in scale.limits_hot:
        for order in scale.limits_orders:
            settings = (("key_concurrency", 1), ("key_order", order))
            name = f"skew_{hot}_{order}"
            label = f"one hot key of {hot:,} jobs + {small:,} small keys, key_concurrency 1, {order}"
            if order == "priority":
                if hot == max(scale.limits_hot):  # as the server runs it: jit on, whatever the hot backlog
                    found.append(LimitVariant(name, label, settings, hot=hot, small_keys=small))
                found.append(
                    LimitVariant(
                        f"{name}_jit_off",
                        f"{label}, {JIT_OFF}",
                        settings,
                        hot=hot,
                        small_keys=small,
                        jit=False,
                    )
                )
            else:
                found.append(LimitVariant(name, label, settings, hot=hot, small_keys=small))
    if scale.limits_pick:
        found = [v for v in found if v.name == PLAIN or v.name in scale.limits_pick]
    return found


# jobs %(first)s..%(last)s of queue %(queue)s in one jobq.enqueue_many call, each with the concurrency key
# {key} (an SQL expression of g, the job's number; NULL: none), payloads built by the server
KEYED_ENQUEUE_SQL = """
SELECT cardinality(jobq.enqueue_many(%(queue)s, array_agg(jsonb_build_object('i', g) ORDER BY g),
                                     concurrency_keys => array_agg({key} ORDER BY g)))
  FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""
LOAD_CHUNK = 100_000  # jobs per enqueue_many call when loading a backlog

# the state kept by a queue with limits besides jobq.jobs (52_limits.sql); TRUNCATE'd between runs
LIMIT_TABLES = ("jobq.concurrency_keys", "jobq.queue_gates")

# the queue's jobs still queued after a run, the hot key's left out (it never drains)
LEFT_SQL = """
SELECT count(*) FROM jobq.jobs AS j
 WHERE j.queue = %s AND j.status = 'queued'
   AND NOT EXISTS (SELECT FROM jobq.concurrency_keys AS k WHERE k.id = j.id AND k.concurrency_key = 'hot')
"""

# the most jobs of the queue claimed within any rate window (a claim's time is its jobs' locked_at,
# which completing leaves alone): what rate_limit bounds
WINDOW_MAX_SQL = """
SELECT coalesce(max(w.claimed), 0) FROM (
  SELECT count(*) OVER (ORDER BY j.locked_at RANGE BETWEEN CURRENT ROW
                                            AND %(window)s::interval - interval '1 microsecond' FOLLOWING)
         AS claimed
    FROM jobq.jobs AS j WHERE j.queue = %(queue)s AND j.locked_at IS NOT NULL) AS w
"""

# claims made on queues with limits: every path of a claim (claim, claim_any, complete_and_claim) goes
# through jobq._claim_gated once per queue with limits; counted with track_functions = 'pl'
GATED_CALLS_SQL = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
 WHERE schemaname = 'jobq' AND funcname = '_claim_gated'
"""

AVAILABLE_VERSIONS = """
SELECT e.default_version, array_agg(v.version::text)
  FROM pg_available_extensions AS e JOIN pg_available_extension_versions AS v USING (name)
 WHERE e.name = 'pgjobq'
 GROUP BY e.default_version
"""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


COMPARE_WITH_ENV = "PGJOBQ_BENCH_COMPARE_WITH"  # the twin of --compare-with (run.py, instructions.py)


def previous_version(conn: psycopg.Connection[Any], compare_with: str | None) -> str:
    """The version the versions workload compares the current one (the default_version of the installed
    extension) with: compare_with, else the newest version below the current among those installed."""
    row = conn.execute(AVAILABLE_VERSIONS).fetchone()
    if row is None:
        raise RuntimeError("the pgjobq extension is not installed in this PostgreSQL")
    current, available = str(row[0]), sorted((str(v) for v in row[1]), key=_version_key)
    if compare_with is not None:
        if compare_with not in available:
            raise RuntimeError(f"pgjobq {compare_with} is not installed (installed: {', '.join(available)})")
        return compare_with
    older = [version for version in available if _version_key(version) < _version_key(current)]
    if not older:
        raise RuntimeError(f"no version of pgjobq older than {current} is installed to compare with")
    return older[-1]


# -- tasks the worker processes run besides contenders' loops ----------------------------


@dataclass(frozen=True)
class EnqueueTask(Task):
    """Single-row enqueues, one statement and one commit each, until count or the stop."""

    dsn: str
    kind: str  # "pgjobq" (jobq.enqueue through the Python client) or "article" (the article's INSERT)
    count: int

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            hooks.ready()
            for i in range(self.count):
                if hooks.should_stop():
                    return
                if self.kind == "pgjobq":
                    pgjobq.enqueue(conn, QUEUE, {"i": i})
                else:
                    conn.execute(article.SINGLE_INSERT_SQL, (json.dumps({"i": i}),))
                hooks.processed(1)


@dataclass(frozen=True)
class AsyncioTask(Task):
    """The asyncio workload's worker process (contenders/pgjobq_async.py): "sync" or "async"."""

    kind: str
    target: Target
    batch: int
    concurrency: int
    work_seconds: float

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        run_worker(self.kind, self.target, self.batch, self.concurrency, self.work_seconds, hooks)


CONSUMER_BATCH = 10  # the batch of the consumer beside the enqueue's clients
IDLE_WAIT = 1.0  # seconds at most for that consumer to go idle before the clients start


@dataclass(frozen=True)
class ConsumerTask(Task):
    """A consumer running beside the enqueue's clients, counting nothing: a pgjobq Worker (zero-work
    handler) on pgjobq's queue, or the article's own worker loop on its table.

    It passes the start barrier once idle: the article's loop at once (its first claim finds nothing,
    then it sleeps), the Worker once it registered as waiting (a row in ``jobq._waiters``, where the
    extension has that table; else 0.5 s after it started), so that the first enqueues find it
    waiting.
    """

    dsn: str
    kind: str  # "pgjobq" or "article"

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        uncounted = WorkerHooks(
            ready=hooks.ready, processed=lambda count: None, should_stop=hooks.should_stop
        )
        if self.kind == "article":
            article.ArticleQueue().work(Target(self.dsn), CONSUMER_BATCH, 0.0, uncounted)
            return
        worker = pgjobq.Worker(self.dsn, lambda job: None, worker_settings(CONSUMER_BATCH))
        failed: list[BaseException] = []

        def serve() -> None:
            try:
                run_until(worker, hooks.should_stop)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=serve, name="bench-consumer", daemon=True)
        thread.start()
        try:
            outbox.put(("consumer_waiting", _until_waiting(self.dsn, thread)))
        finally:
            hooks.ready()
            thread.join()
        if failed:
            raise failed[0]


WAITERS_SQL = """
SELECT CASE WHEN to_regclass('jobq._waiters') IS NULL THEN NULL
            ELSE (SELECT count(*) FROM jobq._waiters WHERE queue = %s AND until > now()) END
"""


def _until_waiting(dsn: str, thread: threading.Thread) -> bool | None:
    """Wait until a worker waits on the queue (see ConsumerTask): True once one does, False if none did
    within IDLE_WAIT (or the Worker's thread ended), None where the extension keeps no registry."""
    deadline = time.monotonic() + IDLE_WAIT
    with psycopg.connect(dsn, autocommit=True) as conn:
        while thread.is_alive() and time.monotonic() < deadline:
            row = conn.execute(WAITERS_SQL, (QUEUE,)).fetchone()
            if row is None or row[0] is None:
                time.sleep(0.5)  # no registry of waiters: give the Worker time to claim and listen
                return None
            if row[0] > 0:
                return True
            time.sleep(0.01)
    return False


@dataclass(frozen=True)
class LatencyTask(Task):
    """An idle pgjobq Worker whose handler reports when each job started:
    ("started", i, monotonic clock, wall clock)."""

    dsn: str
    listen: bool
    poll_interval: float

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        clock = time.perf_counter

        def handler(job: pgjobq.Job) -> None:
            outbox.put(("started", job.payload["i"], clock(), time.time()))

        settings = worker_settings(10, listen=self.listen, poll_interval=self.poll_interval)
        worker = pgjobq.Worker(self.dsn, handler, settings)
        hooks.ready()
        run_until(worker, hooks.should_stop)


# -- results --------------------------------------------------------------------------


@dataclass
class Results:
    """Everything measured, as JSON-ready lists of records."""

    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    work: list[dict[str, Any]] = field(default_factory=list)
    loads: list[dict[str, Any]] = field(default_factory=list)
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    scheduled: list[dict[str, Any]] = field(default_factory=list)
    claim_cost: list[dict[str, Any]] = field(default_factory=list)
    claim_plans: dict[str, str] = field(default_factory=dict)
    soak: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    rate_limit: list[dict[str, Any]] = field(default_factory=list)
    asyncio: list[dict[str, Any]] = field(default_factory=list)
    node: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Results:
        return cls(**json.loads(path.read_text()))


def _measured(record: dict[str, Any], measured: Measured) -> dict[str, Any]:
    record.update(
        processed=measured.processed,
        seconds=measured.seconds,
        rate=measured.rate,
        capped=measured.capped,
        error=measured.error,
        first_job=measured.first_job,
        phases=measured.phases,
    )
    return record


def _error(measured: Measured) -> str:
    return f"  FAILED: {measured.summary}" if measured.error else ""


def _failed(run: node_peers.Run) -> str:
    return f"  FAILED: {run.error}" if run.error else ""


def _node_record(cell: dict[str, Any], repeat: int, run: node_peers.Run) -> dict[str, Any]:
    """A run of the node workload as a results.json record: its cell, repeat and measurement."""
    cell.update(
        repeat=repeat,
        processed=run.processed,
        seconds=run.seconds,
        rate=run.rate,
        capped=run.capped,
        error=run.error,
        first_job=run.first_job,
    )
    return cell


def _queued(conn: psycopg.Connection[Any], first: int, last: int) -> None:
    """Queued jobs first..last inserted straight into jobq.jobs (building a table state, not enqueueing)."""
    insert_queued(conn, "jobq.jobs", QUEUE, first, last)


def quantile(data: list[float], q: float) -> float:
    """The q-quantile (0..1) of data, linear between closest ranks (report.quantile's twin)."""
    ordered = sorted(data)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rotated(items: list[str], repeat: int) -> list[str]:
    """items in the order of this repeat: rotated, so that none always follows the same one."""
    if not items:
        return items
    shift = repeat % len(items)
    return items[shift:] + items[:shift]


def _batch_for(contender: Contender, batch: int) -> int:
    """batch if the contender honours it, else the largest it honours below it (or its smallest)."""
    if contender.batches is None or batch in contender.batches:
        return batch
    below = [b for b in contender.batches if b <= batch]
    return max(below) if below else min(contender.batches)


# -- the workloads -----------------------------------------------------------------------


@dataclass
class Bench:
    """One benchmark run: the servers, the worker processes, the contenders, the results."""

    scale: Scale
    repeats: int
    servers: Servers
    pool: WorkerPool
    contenders: dict[str, Contender]
    results: Results
    log: Callable[[str], None]
    compare_with: str | None = None  # the versions workload's previous version (None: the one before)
    targets: dict[str, Target] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    # -- contenders ---------------------------------------------------------------------

    def prepare_contenders(self) -> None:
        """A fresh database per contender, and its setup; a contender whose setup fails is skipped."""
        for name, contender in list(self.contenders.items()):
            if contender.needs_redis and self.servers.redis_url is None:
                self.results.skipped[name] = f"needs Redis: {self.servers.redis_note}"
                del self.contenders[name]
                continue
            try:
                target = self.servers.create_database(f"bench_{name}")
                contender.setup(target)
            except Exception as exc:
                self.results.skipped[name] = f"setup failed: {describe(exc)}"
                del self.contenders[name]
                continue
            self.targets[name] = target

    def _settle(self, target: Target) -> None:
        """ANALYZE the target's tables, and CHECKPOINT where the scale asks for it (Servers.settle)."""
        self.servers.settle(target.dsn, checkpoint=self.scale.checkpoint_each_run)

    def _load(self, name: str, count: int, workload: str) -> dict[str, float]:
        """Reset the contender, load count jobs (timed), and settle the database; return the phases' times."""
        contender, target = self.contenders[name], self.targets[name]
        with timer() as reset:
            contender.reset(target)
        with timer() as load:
            contender.enqueue(target, count)
        self.results.loads.append({"contender": name, "workload": workload, "jobs": count, "seconds": load()})
        with timer() as settle:
            self._settle(target)
        return {"reset": reset(), "load": load(), "settle": settle()}

    def _run(
        self, name: str, workers: int, batch: int, jobs: int, work_seconds: float, limit: float
    ) -> Measured:
        contender, target = self.contenders[name], self.targets[name]
        phases = self._load(name, jobs, "work" if work_seconds else "throughput")
        if isinstance(contender, DrivenContender):
            driven = contender.drive(target, workers, batch, jobs, limit, self.servers.pg.bindir)
            measured = Measured(driven.processed, driven.seconds, capped=driven.capped)
        else:
            tasks: list[Task] = [WorkTask(type(contender), target, batch, work_seconds)] * workers
            measured = self.pool.measure(tasks, goal=jobs, limit=limit)
        measured.phases.update(phases)
        return measured

    def _plan(self, work: bool) -> Iterator[tuple[int, int, int, str]]:
        """(repeat, workers, batch, contender) of every run, interleaved: each repeat goes through every
        cell, and each cell through every contender (rotated per repeat) that can run it."""
        scale = self.scale
        for repeat in range(self.repeats):
            for count in scale.work_workers if work else scale.workers:
                for batch in (scale.work_batch,) if work else scale.batches:
                    for name in rotated(list(self.contenders), repeat):
                        contender = self.contenders[name]
                        if work and isinstance(contender, DrivenContender) and not contender.supports_work:
                            continue  # pgbench has no handler to wait in
                        used = _batch_for(contender, batch)
                        if used != batch and not work:
                            continue  # it cannot batch this way: the zero-work grid leaves the cell empty
                        yield repeat, count, used, name

    def _backlog(self, name: str, workers: int, batch: int) -> int:
        """How many jobs to load for a zero-work run: scale.jobs, unless earlier runs show the run will
        stop at its time limit long before; then twice what it is expected to process (at least
        MIN_BACKLOG), so that loading never dominates the benchmark's time and the queue never runs dry.

        The expectation is the most this contender processed in the same cell in an earlier repeat, or
        else in a cell of the same batch with fewer workers, scaled by the worker count.
        """
        best = 0.0
        for run in self.results.throughput:
            if run["contender"] != name or run["batch"] != batch or run["error"] or not run["capped"]:
                continue
            if run["workers"] == workers:
                best = max(best, float(run["processed"]))
            elif run["workers"] < workers:
                best = max(best, run["processed"] * workers / run["workers"])
        if best <= 0:
            return self.scale.jobs
        return min(self.scale.jobs, max(MIN_BACKLOG, math.ceil(2 * best)))

    def throughput(self, *, work: bool) -> None:
        """Drain a backlog: every contender, every worker count and batch it can honour."""
        scale = self.scale
        work_seconds = scale.work_ms / 1000 if work else 0.0
        records = self.results.work if work else self.results.throughput
        for repeat, count, batch, name in self._plan(work):
            if name in self.broken:
                continue
            if work:
                jobs = round(count * IDEAL_PER_WORKER * scale.work_run_seconds)
                limit = 2 * scale.work_run_seconds  # a run at 50% of ideal still finishes
            else:
                jobs, limit = self._backlog(name, count, batch), scale.run_limit
            try:
                measured = self._run(name, count, batch, jobs, work_seconds, limit)
            except Exception as exc:
                measured = Measured(0, 0.0, error=f"{type(exc).__name__}: {exc}")
            run = {
                "contender": name,
                "workers": count,
                "batch": batch,
                "work_ms": scale.work_ms if work else 0.0,
            }
            run.update(repeat=repeat, jobs=jobs, limit=limit)
            records.append(_measured(run, measured))
            if measured.error:
                self.broken[name] = measured.summary
                self.log(f"  {name}: FAILED ({self.broken[name]}); skipping it from now on")
                continue
            first = f"first job {measured.first_job * 1000:5.0f} ms" if measured.first_job else ""
            capped = "  (capped)" if measured.capped else ""
            self.log(
                f"  r{repeat} {name:<16} w={count} b={batch:<3} {measured.rate:>9.0f} jobs/s {first}{capped}"
            )

    # -- enqueue ------------------------------------------------------------------------

    def enqueue(self) -> None:
        """Single-row enqueues from several clients, with no consumer and with an idle one running beside
        them; then one bulk call, pgjobq's against a multi-row INSERT into the article's table."""
        scale = self.scale
        pgjobq_target = self.servers.create_database("bench_enqueue")
        pgjobq_setup(pgjobq_target)
        article_target = self.servers.create_database("bench_enqueue_article")
        article.ArticleQueue().setup(article_target)
        per_client = scale.enqueue_single_jobs // scale.enqueue_clients
        total = per_client * scale.enqueue_clients
        targets = {"pgjobq": pgjobq_target, "article": article_target}
        # variant: (whose enqueue, whether its consumer runs beside the clients)
        variants: dict[str, tuple[str, bool]] = {
            "pgjobq_no_waiter": ("pgjobq", False),
            "article_insert": ("article", False),
            "pgjobq_idle_worker": ("pgjobq", True),
            "article_insert_worker": ("article", True),
        }
        for repeat in range(self.repeats):
            for variant in rotated(list(variants), repeat):
                kind, consumer = variants[variant]
                target = targets[kind]
                with psycopg.connect(target.dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE jobq.jobs" if kind == "pgjobq" else article.RESET_SQL)
                self._settle(target)
                tasks: list[Task] = [EnqueueTask(target.dsn, kind, per_client)] * scale.enqueue_clients
                if consumer:
                    tasks.append(ConsumerTask(target.dsn, kind))
                self.pool.take_messages("consumer_waiting")
                measured = self.pool.measure(tasks, goal=total, limit=120)
                said = [message[1] for message in self.pool.take_messages("consumer_waiting")]
                waiting = said[0] if said else None  # True: registered as waiting; None: nothing to tell
                self.results.enqueue.append(
                    _measured(
                        {
                            "variant": variant,
                            "clients": scale.enqueue_clients,
                            "consumer": consumer,
                            "consumer_waiting": waiting,
                            "jobs": total,
                            "repeat": repeat,
                        },
                        measured,
                    )
                )
                note = "  (the Worker never registered as waiting)" if waiting is False else ""
                self.log(f"  r{repeat} {variant:<22} {measured.rate:>9.0f} jobs/s{note}{_error(measured)}")
            # server-side variants of the bulk path (payloads built in SQL, other INSERT shapes, a table
            # without indexes) are in bench/profile.py
            for variant in rotated(["bulk_python", "bulk_article"], repeat):
                count = scale.enqueue_bulk_jobs
                target = article_target if variant == "bulk_article" else pgjobq_target
                with psycopg.connect(target.dsn, autocommit=True) as conn:
                    conn.execute(article.RESET_SQL if variant == "bulk_article" else "TRUNCATE jobq.jobs")
                self._settle(target)
                jobs = payloads(range(count))
                with psycopg.connect(target.dsn, autocommit=True) as conn, timer() as elapsed:
                    if variant == "bulk_python":
                        pgjobq.enqueue_many(conn, QUEUE, jobs)
                    else:
                        # the same rows from the same dicts, sent as pgjobq.enqueue_many sends them: one
                        # JSON array (dumped here, timed), one INSERT ... SELECT over its elements
                        conn.execute(article.BULK_INSERT_SQL, (json.dumps(jobs),))
                    seconds = elapsed()
                measured = Measured(count, seconds)
                self.results.enqueue.append(
                    _measured({"variant": variant, "clients": 1, "jobs": count, "repeat": repeat}, measured)
                )
                self.log(f"  r{repeat} {variant:<22} {measured.rate:>9.0f} jobs/s")

    # -- latency ------------------------------------------------------------------------

    def latency(self) -> None:
        """Enqueue commit to handler start on an idle pgjobq Worker: LISTEN/NOTIFY, then polling only."""
        scale = self.scale
        target = self.servers.create_database("bench_latency")
        pgjobq_setup(target)
        rng = random.Random(4)
        for repeat in range(self.repeats):
            for mode in rotated(["notify", "poll"], repeat):
                samples, missing = self._latency_run(target, mode == "notify", rng)
                self.results.latency.append(
                    {
                        "mode": mode,
                        "repeat": repeat,
                        "jobs": scale.latency_jobs,
                        "poll_interval": scale.latency_poll,
                        "samples_ms": samples,
                        "missing": missing,
                    }
                )
                if samples:
                    quantiles = statistics.quantiles(samples, n=100, method="inclusive")
                    self.log(
                        f"  r{repeat} {mode:<7} p50 {quantiles[49]:8.2f} ms  p99 {quantiles[98]:8.2f} ms"
                        f"{f'  ({missing} missing)' if missing else ''}"
                    )

    def _latency_run(self, target: Target, listen: bool, rng: random.Random) -> tuple[list[float], int]:
        scale = self.scale
        pgjobq_reset(target)
        self._settle(target)
        self.pool.take_messages("started")
        self.pool.start([LatencyTask(target.dsn, listen, scale.latency_poll)], goal=1 << 60)
        committed: dict[int, float] = {}
        started: dict[int, float] = {}

        def collect(until: Callable[[], bool], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not until() and time.monotonic() < deadline:
                for message in self.pool.take_messages("started"):
                    started.setdefault(int(message[1]), float(message[2]))
                time.sleep(0.001)

        try:
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                # warm-up: the Worker is connected, listening and idle once these ran
                for i in (-3, -2, -1):
                    pgjobq.enqueue(conn, QUEUE, {"i": i})
                collect(lambda: all(i in started for i in (-3, -2, -1)), scale.latency_poll + 10)
                collect(lambda: False, 0.05)
                for i in range(scale.latency_jobs):
                    pause = rng.uniform(*scale.latency_gap)
                    collect(lambda: False, pause)
                    pgjobq.enqueue(conn, QUEUE, {"i": i})
                    committed[i] = time.perf_counter()
                collect(lambda: all(i in started for i in committed), scale.latency_poll + 10)
        finally:
            errors = self.pool.finish()
        if errors:
            raise RuntimeError(errors[0])
        samples = [(started[i] - committed[i]) * 1000 for i in committed if i in started]
        return samples, len(committed) - len(samples)

    # -- scheduled ----------------------------------------------------------------------

    def scheduled(self) -> None:
        """Jobs enqueued with run_at scheduled_ahead seconds ahead, one at a time, on an idle pgjobq
        Worker (LISTEN, its default 1 s poll): how late after its run_at each handler starts."""
        scale = self.scale
        target = self.servers.create_database("bench_scheduled")
        pgjobq_setup(target)
        rng = random.Random(5)
        for repeat in range(self.repeats):
            samples, missing = self._scheduled_run(target, rng)
            self.results.scheduled.append(
                {
                    "repeat": repeat,
                    "jobs": scale.scheduled_jobs,
                    "ahead": scale.scheduled_ahead,
                    "poll_interval": scale.latency_poll,
                    "samples_ms": samples,
                    "missing": missing,
                }
            )
            if samples:
                self.log(
                    f"  r{repeat} p50 {quantile(samples, 0.5):8.2f} ms  p99 {quantile(samples, 0.99):8.2f} ms"
                    f"  max {max(samples):8.2f} ms{f'  ({missing} missing)' if missing else ''}"
                )

    def _scheduled_run(self, target: Target, rng: random.Random) -> tuple[list[float], int]:
        """One repeat: the jobs' handler start minus their run_at, in ms, by the wall clock (the server,
        the producer and the Worker share the machine's), and how many never started."""
        scale = self.scale
        pgjobq_reset(target)
        self._settle(target)
        self.pool.take_messages("started")
        self.pool.start([LatencyTask(target.dsn, True, scale.latency_poll)], goal=1 << 60)
        due: dict[int, float] = {}
        started: dict[int, float] = {}

        def collect(until: Callable[[], bool], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not until() and time.monotonic() < deadline:
                for message in self.pool.take_messages("started"):
                    started.setdefault(int(message[1]), float(message[3]))
                time.sleep(0.001)

        try:
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                pgjobq.enqueue(conn, QUEUE, {"i": -1})  # warm-up: connected, listening, then idle
                collect(lambda: -1 in started, scale.latency_poll + 10)
                collect(lambda: False, 0.2)
                for i in range(scale.scheduled_jobs):
                    run_at = datetime.now(timezone.utc) + timedelta(seconds=scale.scheduled_ahead)
                    pgjobq.enqueue(conn, QUEUE, {"i": i}, run_at=run_at)
                    due[i] = run_at.timestamp()
                    collect(lambda: False, rng.uniform(*scale.scheduled_gap))
                wait = scale.scheduled_ahead + scale.latency_poll + 5
                collect(lambda: all(i in started for i in due), wait)
        finally:
            errors = self.pool.finish()
        if errors:
            raise RuntimeError(errors[0])
        samples = [(started[i] - due[i]) * 1000 for i in due if i in started]
        return samples, len(due) - len(samples)

    # -- claim cost ---------------------------------------------------------------------

    def claim_cost(self) -> None:
        """jobq.claim(queue, 10, ...) on tables of several states, each in its own database.

        The finished-rows states are built once.  The dead-tuples state is built afresh for every
        repeat (its first claim marks the dead index entries it walks, so a second first claim would
        not be one), and once more at the end for its plan.
        """
        scale = self.scale
        states: dict[str, tuple[int, int]] = {"empty": (0, 0)}
        for finished in scale.claim_finished:
            states[f"finished_{finished}"] = (finished, 0)
        dead_state = f"dead_{scale.claim_dead}"
        states[dead_state] = (scale.claim_dead, scale.claim_dead)
        targets: dict[str, Target] = {}

        def build(state: str) -> Target:
            with timer() as elapsed:
                targets[state] = self._claim_state(state, *states[state])
            self.log(f"  built {state} in {elapsed():.1f} s")
            return targets[state]

        for state in states:
            if state != dead_state:
                build(state)
        for repeat in range(self.repeats):
            for state in rotated(list(states), repeat):
                finished, dead = states[state]
                target = build(state) if state == dead_state else targets[state]
                times, buffers = self._claim_samples(target)
                self.results.claim_cost.append(
                    {
                        "state": state,
                        "finished_rows": finished,
                        "dead_tuples": dead,
                        "repeat": repeat,
                        "queued": scale.claim_queued,
                        "times_ms": times,
                        "buffers": buffers,
                    }
                )
                self.log(
                    f"  r{repeat} {state:<16} first {times[0]:7.3f} ms {buffers[0]:>6} buf; "
                    f"median {statistics.median(times[1:]):7.3f} ms {statistics.median(buffers[1:]):>6} buf"
                )
        build(dead_state)
        for state, target in targets.items():
            self.results.claim_plans[state] = self._claim_plan(target)

    def _claim_state(self, state: str, finished: int, dead: int) -> Target:
        """A database whose jobq.jobs holds finished rows (vacuumed) and dead tuples (not), then the
        queued jobs to claim.  Autovacuum is off on jobq.jobs there, so nothing changes underneath."""
        target = self.servers.create_database(f"bench_claim_{state}")
        pgjobq_setup(target)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE jobq.jobs SET (autovacuum_enabled = false)")
            live_finished = finished - dead
            if live_finished > 0:
                conn.execute(
                    FINISHED_SQL,
                    {"queue": QUEUE, "count": live_finished},
                )
            if dead > 0:
                # jobs that went through the queue: queued, then done, the old versions not vacuumed
                _queued(conn, 1, dead)
            conn.execute("VACUUM (ANALYZE) jobq.jobs")
            if dead > 0:
                conn.execute(
                    "UPDATE jobq.jobs SET status = 'done', attempts = 1, lease = lease + 1,"
                    " locked_by = 'builder', locked_at = now(), finished_at = now() WHERE status = 'queued'"
                )
            _queued(conn, dead + 1, dead + self.scale.claim_queued)
            conn.execute("ANALYZE jobq.jobs")
            conn.execute("CHECKPOINT")
        return target

    def _claim_samples(self, target: Target) -> tuple[list[float], list[int]]:
        """claim_samples claims of 10 on a fresh connection (after one on an empty queue, which plans
        the statement and warms the caches): execution time (ms) and shared buffers of each."""
        times: list[float] = []
        buffers: list[int] = []
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("SELECT count(*) FROM jobq.claim('warmup', 10, 'bench')")
            for _ in range(self.scale.claim_samples):
                row = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM jobq.claim(%s, 10, 'bench')",
                    (QUEUE,),
                ).fetchone()
                assert row is not None
                plan = row[0][0]
                times.append(float(plan["Execution Time"]))
                node = plan["Plan"]
                buffers.append(int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0)))
        return times, buffers

    def _claim_plan(self, target: Target) -> str:
        """The plan of the statement inside jobq.claim, with buffers (auto_explain, nested statements)."""
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            notices = explain_nested(conn)
            conn.execute("SELECT count(*) FROM jobq.claim(%s, 10, 'bench')", (QUEUE,)).fetchall()
        # the pick from jobq.jobs, not the look at jobq._claim_hints before it
        inner = [n for n in notices if "FROM jobq.jobs" in n] or [n for n in notices if "Index Scan" in n]
        return inner[0] if inner else (notices[0] if notices else "")

    # -- versions -----------------------------------------------------------------------

    def versions(self) -> None:
        """pgjobq's SQL, the current version against the previous one, on the hot paths (pgbench).

        One database per version on the same server: the default version of the installed extension,
        and ``CREATE EXTENSION pgjobq VERSION '<previous>'``.  Every repeat runs every path on both,
        the two runs of a path back to back in alternating order; a path calling a function one of the
        versions lacks is left out and said so.
        """
        scale = self.scale
        record: dict[str, Any] = {
            "clients": scale.versions_clients,
            "seconds": scale.versions_seconds,
            "within": WITHIN,
            "runs": [],
        }
        self.results.versions = record
        targets: dict[str, Target] = {}
        try:
            with self.servers.admin() as conn:
                previous = previous_version(conn, self.compare_with)
            for role, version in (("previous", previous), ("current", None)):
                targets[role] = self.servers.create_database(f"bench_version_{role}")
                pgjobq_setup(targets[role], version)
        except Exception as exc:
            record["error"] = describe(exc)
            self.log(f"  cannot compare versions: {record['error']}")
            return
        installed = {role: _extension_version(target) for role, target in targets.items()}
        record.update(current=installed["current"], previous=installed["previous"], paths=[])
        measured: list[VersionPath] = []
        for path in VERSION_PATHS:
            lacking = [version for role, version in installed.items() if not _has(targets[role], path.needs)]
            name = (path.needs or "").split("(")[0]
            missing = (
                f"{name}, called as the script calls it, is not in {', '.join(lacking)}" if lacking else None
            )
            record["paths"].append(
                {
                    "name": path.name,
                    "label": path.label,
                    "batch": path.batch,
                    "hot": path.name in HOT_PATHS,
                    "missing": missing,
                }
            )
            if missing:
                self.log(f"  {path.name}: left out, {missing}")
            else:
                measured.append(path)
        self.log(f"  pgjobq {installed['current']} (current) against {installed['previous']} (previous)")
        failed: set[str] = set()
        for repeat in range(self.repeats):
            for path in measured:
                if path.name in failed:
                    continue
                backlog = self._version_backlog(path)
                for role in rotated(["previous", "current"], repeat):
                    try:
                        run = self._version_run(targets[role], path, backlog)
                    except Exception as exc:
                        run = {"error": describe(exc)}
                        failed.add(path.name)
                    run.update(path=path.name, role=role, version=installed[role], repeat=repeat)
                    record["runs"].append(run)
                    shown = (
                        run.get("error")
                        or f"{run['rate']:>9.0f} jobs/s{'  (drained)' if run['drained'] else ''}"
                    )
                    self.log(f"  r{repeat} {path.name:<22} {role:<8} {installed[role]:<8} {shown}")

    def _version_backlog(self, path: VersionPath) -> int:
        """Jobs to queue before a claim run of path: versions_backlog per job of its batch, or twice the
        most an earlier run of it processed if that is more (none for the enqueue)."""
        if not path.claims:
            return 0
        runs = self.results.versions["runs"]
        best = max(
            (run["processed"] for run in runs if run["path"] == path.name and "error" not in run), default=0
        )
        return max(self.scale.versions_backlog * path.batch, math.ceil(2 * best))

    def _version_run(self, target: Target, path: VersionPath, backlog: int) -> dict[str, Any]:
        """One pgbench run of path on target, from an empty table (and the backlog, for a claim path)."""
        pgjobq_reset(target)
        if backlog:
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                _queued(conn, 1, backlog)
        # always a checkpoint, even at the quick scale: the two versions' runs follow each other, and the
        # one after a checkpoint pays the full-page writes that the other would have left to it
        self.servers.settle(target.dsn, checkpoint=True)
        run = run_pgbench(
            self.servers.pg.bindir,
            target.dsn,
            path.script,
            clients=self.scale.versions_clients,
            seconds=self.scale.versions_seconds,
            batch=path.batch,
        )
        processed = count_done(target.dsn) if path.claims else run.transactions
        return {
            "backlog": backlog,
            "processed": processed,
            "seconds": run.seconds,
            "rate": processed / run.seconds,
            "drained": run.drained,
        }

    # -- limits -------------------------------------------------------------------------

    def limits(self) -> None:
        """Claim + complete on queues with limits against the plain queue (pgbench, CLAIM_WAIT).

        One database per queue (LimitVariant), configured once.  Every repeat runs, in every cell
        (clients, batch), the plain queue and the others of the cell (the global limits in
        limits_cells, the keyed ones in limits_keyed_cells) in rotated order: the same clients, the same
        seconds, a fresh backlog each.
        """
        scale = self.scale
        variants = limit_variants(scale)
        record: dict[str, Any] = {
            "seconds": scale.limits_seconds,
            "empty_wait_ms": EMPTY_WAIT_MS,
            "variants": [{**asdict(v), "settings": dict(v.settings)} for v in variants],
            "runs": [],
        }
        self.results.limits = record
        targets: dict[str, Target] = {}
        try:
            for variant in variants:
                target = self.servers.create_database(f"bench_limits_{variant.name}")
                pgjobq_setup(target)
                if not variant.jit:
                    with psycopg.connect(target.dsn, autocommit=True) as conn:
                        database = sql.Identifier(conn.info.dbname)
                        conn.execute(sql.SQL("ALTER DATABASE {} SET jit = off").format(database))
                if variant.settings:
                    _configure(target, dict(variant.settings))
                targets[variant.name] = target
        except Exception as exc:
            record["error"] = describe(exc)
            self.log(f"  cannot set up the queues with limits: {record['error']}")
            return
        failed: set[tuple[str, int, int]] = set()  # (queue, clients, batch)
        for repeat in range(self.repeats):
            for clients, batch in dict.fromkeys((*scale.limits_cells, *scale.limits_keyed_cells)):
                cell = [
                    v.name
                    for v in variants
                    if v.name == PLAIN
                    or (clients, batch) in (scale.limits_keyed_cells if v.keyed else scale.limits_cells)
                ]
                for name in rotated(cell, repeat):
                    if (name, clients, batch) in failed:
                        continue
                    variant = next(v for v in variants if v.name == name)
                    backlog = self._limits_backlog(variant, clients, batch)
                    try:
                        run = self._limits_run(targets[name], variant, clients, batch, backlog)
                    except Exception as exc:
                        run = {"error": describe(exc)}
                        failed.add((name, clients, batch))
                    run.update(variant=name, clients=clients, batch=batch, repeat=repeat)
                    record["runs"].append(run)
                    shown = run.get("error") or (
                        f"{run['rate']:>8.0f} jobs/s {run['claims_per_second']:>7.0f} claims/s"
                        f"{'  (drained)' if run['drained'] else ''}"
                    )
                    self.log(f"  r{repeat} c={clients:<2} b={batch:<3} {name:<28} {shown}")

    def _limits_backlog(self, variant: LimitVariant, clients: int, batch: int) -> int:
        """Jobs to queue before a run (the skew: besides the hot key's): limits_backlog, or twice the
        most an earlier run of this queue in this cell processed if that is more, and at least one per
        key for the many-keys queues."""
        runs = self.results.limits["runs"]
        best = max(
            (
                run["processed"]
                for run in runs
                if (run["variant"], run["clients"], run["batch"]) == (variant.name, clients, batch)
                and "error" not in run
            ),
            default=0,
        )
        return max(self.scale.limits_backlog, math.ceil(2 * best), variant.keys)

    def _limits_run(
        self, target: Target, variant: LimitVariant, clients: int, batch: int, backlog: int
    ) -> dict[str, Any]:
        """One pgbench run on a queue: reset, its backlog, settle, CLAIM_WAIT for limits_seconds."""
        with timer() as load:
            _reset_limited(target)
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                first = 1
                if variant.hot:
                    _enqueue_keyed(conn, first, variant.hot, "'hot'::text")
                    first += variant.hot
                if variant.small_keys:
                    key = f"'s' || mod(g, {variant.small_keys})"
                elif variant.keys:
                    key = f"'k' || mod(g, {variant.keys})"
                else:
                    key = "NULL::text"
                _enqueue_keyed(conn, first, first + backlog - 1, key)
        self.servers.settle(target.dsn, checkpoint=self.scale.checkpoint_each_run)
        run = run_pgbench(
            self.servers.pg.bindir,
            target.dsn,
            CLAIM_WAIT,
            clients=clients,
            seconds=self.scale.limits_seconds,
            batch=batch,
        )
        processed = count_done(target.dsn)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            row = conn.execute(LEFT_SQL, (QUEUE,)).fetchone()
        left = int(row[0]) if row else 0
        return {
            "backlog": backlog,
            "hot": variant.hot,
            "load_seconds": load(),
            "processed": processed,
            "seconds": run.seconds,
            "rate": processed / run.seconds,
            "claims": run.transactions,
            "claims_per_second": run.transactions / run.seconds,
            "left": left,
            "drained": left == 0,
        }

    # -- rate limit ---------------------------------------------------------------------

    def rate_limit(self) -> None:
        """pgjobq Workers on a queue with rate_limit per second: the jobs they process per second
        against the limit, and the claims they make per second (jobq._claim_gated's calls)."""
        scale = self.scale
        target = self.servers.create_database("bench_rate_limit")
        pgjobq_setup(target)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            # counts the calls of PL/pgSQL functions in every session of the database
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
                    sql.Identifier(conn.info.dbname)
                )
            )
        _configure(target, {"rate_limit": scale.rate_limit, "rate_interval": timedelta(seconds=1)})
        backlog = max(MIN_BACKLOG, math.ceil(3 * scale.rate_limit * scale.rate_seconds))
        for repeat in range(self.repeats):
            _reset_limited(target)
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                _enqueue_keyed(conn, 1, backlog, "NULL::text")
            self._settle(target)
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_stat_reset()")
            tasks: list[Task] = [WorkTask(PgjobqWorker, target, scale.rate_batch, 0.0)] * scale.rate_workers
            started = self.pool.start(tasks, goal=1 << 60)
            try:
                measured = self.pool.wait(started, scale.rate_seconds)
            finally:
                errors = self.pool.finish()
            claims = _gated_calls(target)
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                row = conn.execute(
                    WINDOW_MAX_SQL, {"queue": QUEUE, "window": timedelta(seconds=1)}
                ).fetchone()
            window_max = int(row[0]) if row else 0
            record = _measured(
                {
                    "repeat": repeat,
                    "rate_limit": scale.rate_limit,
                    "workers": scale.rate_workers,
                    "batch": scale.rate_batch,
                    "backlog": backlog,
                    "limit": scale.rate_seconds,
                    "claims": claims,
                    "claims_per_second": claims / measured.seconds if measured.seconds > 0 else 0.0,
                    "window_max": window_max,
                },
                measured,
            )
            if errors and not record["error"]:
                record["error"] = errors[0]
            self.results.rate_limit.append(record)
            self.log(
                f"  r{repeat} {measured.rate:>7.0f} jobs/s (limit {scale.rate_limit}/s), "
                f"at most {window_max} claimed in a 1 s window, "
                f"{record['claims_per_second']:>6.1f} claims/s over {scale.rate_workers} Workers"
                f"{_error(measured)}"
            )

    # -- node ---------------------------------------------------------------------------

    def node(self) -> None:
        """`pgjobq worker` processes beside Graphile Worker and pg-boss, each peer in OS processes of its
        own as its users run it (contenders/node_peers.py): drain at 1 and 4 processes x batch 1 and 50,
        single-row enqueue from several clients, and latency on an idle worker; interleaved per repeat.

        Without Node.js 22 and the peers in bench/node (`make bench-node`), the workload is skipped and
        the reason recorded: the report says so where the figures would be."""
        record: dict[str, Any] = {"drain": [], "enqueue": [], "latency": [], "settings": node_peers.SETTINGS}
        self.results.node = record
        version, why = node_peers.node_status()
        if version is None:
            record["skipped"] = why
            self.results.skipped["node"] = f"Graphile Worker and pg-boss were not measured: {why}"
            self.log(f"  SKIPPED: Graphile Worker and pg-boss not measured: {why}")
            return
        record.update(node=version, versions=node_peers.package_versions())
        logs = node_peers.log_folder()
        peers: dict[str, tuple[node_peers.Peer, Target]] = {}
        for name in node_peers.PEERS:
            peer = node_peers.Peer(name, logs)
            try:
                target = self.servers.create_database(f"bench_node_{name}")
                peer.setup(target)
            except Exception as exc:
                record.setdefault("broken", {})[name] = f"setup failed: {describe(exc)}"
                self.log(f"  {peer.label}: setup FAILED ({describe(exc)}); skipping it")
                continue
            peers[name] = (peer, target)
        for repeat in range(self.repeats):
            order = rotated([name for name in node_peers.PEERS if name in peers], repeat)
            for workers in self.scale.node_workers:
                for batch in self.scale.node_batches:
                    for name in order:
                        self._node_drain(record, repeat, *peers[name], workers, batch)
            for name in order:
                self._node_enqueue(record, repeat, *peers[name])
            for name in order:
                self._node_latency(record, repeat, *peers[name])
        if any(rec["error"] for kind in ("drain", "enqueue", "latency") for rec in record[kind]):
            record["logs"] = str(logs)  # kept: the processes' output says more than the error's line
            self.log(f"  some runs failed: the processes' logs are kept in {logs}")
        else:
            node_peers.remove_logs(logs)

    def _node_drain(
        self,
        record: dict[str, Any],
        repeat: int,
        peer: node_peers.Peer,
        target: Target,
        workers: int,
        batch: int,
    ) -> None:
        """One drain: the backlog loaded by the peer's bulk call, then workers processes until it is gone."""
        jobs = self.scale.node_jobs
        try:
            peer.load(target, jobs)
            self._settle(target)
            run = node_peers.drain(peer, target, workers, batch, jobs, self.scale.node_limit)
        except Exception as exc:
            run = node_peers.Run(error=describe(exc))
        cell = {"peer": peer.name, "workers": workers, "batch": batch, "jobs": jobs}
        record["drain"].append(_node_record(cell, repeat, run))
        capped = "  (capped)" if run.capped else ""
        shown = f"{run.rate:>9.0f} jobs/s{capped}{_failed(run)}"
        self.log(f"  r{repeat} {peer.name:<16} w={workers} b={batch:<3} {shown}")

    def _node_enqueue(
        self, record: dict[str, Any], repeat: int, peer: node_peers.Peer, target: Target
    ) -> None:
        """Single-row enqueues from node_enqueue_clients processes, no worker running."""
        clients = self.scale.node_enqueue_clients
        per_client = self.scale.node_enqueue_jobs // clients
        try:
            peer.load(target, 0)
            self._settle(target)
            run = node_peers.enqueue_clients(peer, target, clients, per_client, 120.0)
        except Exception as exc:
            run = node_peers.Run(error=describe(exc))
        cell = {"peer": peer.name, "clients": clients, "jobs": clients * per_client}
        record["enqueue"].append(_node_record(cell, repeat, run))
        self.log(f"  r{repeat} {peer.name:<16} enqueue x{clients} {run.rate:>9.0f} jobs/s{_failed(run)}")

    def _node_latency(
        self, record: dict[str, Any], repeat: int, peer: node_peers.Peer, target: Target
    ) -> None:
        """One idle worker, one producer adding jobs one at a time: commit to handler start."""
        jobs = self.scale.node_latency_jobs
        try:
            peer.load(target, 0)
            self._settle(target)
            run = node_peers.latency(peer, target, jobs, self.scale.node_latency_gap, repeat, 60.0)
        except Exception as exc:
            run = node_peers.Run(error=describe(exc))
        entry = _node_record({"peer": peer.name, "jobs": jobs}, repeat, run)
        entry.update(samples_ms=run.samples_ms, missing=run.missing)
        record["latency"].append(entry)
        shown = (
            f"p50 {quantile(run.samples_ms, 0.5):7.2f} ms  p99 {quantile(run.samples_ms, 0.99):7.2f} ms"
            if run.samples_ms
            else "no sample"
        )
        missing = f"  ({run.missing} missing)" if run.missing else ""
        self.log(f"  r{repeat} {peer.name:<16} latency {shown}{missing}{_failed(run)}")

    # -- asyncio ------------------------------------------------------------------------

    def asyncio(self) -> None:
        """AsyncWorker (tasks) beside the sync Worker (threads), one process each, zero work and 5 ms."""
        scale = self.scale
        target = self.servers.create_database("bench_asyncio")
        pgjobq_setup(target)
        contender = PgjobqWorker()
        for repeat in range(self.repeats):
            for work_ms, jobs in ((0.0, scale.asyncio_jobs), (scale.work_ms, scale.asyncio_work_jobs)):
                for kind in rotated(list(KINDS), repeat):
                    pgjobq_reset(target)
                    contender.enqueue(target, jobs)
                    self._settle(target)
                    task = AsyncioTask(
                        kind, target, scale.asyncio_batch, scale.asyncio_concurrency, work_ms / 1000
                    )
                    try:
                        measured = self.pool.measure([task], goal=jobs, limit=scale.asyncio_limit)
                    except Exception as exc:
                        measured = Measured(0, 0.0, error=f"{type(exc).__name__}: {exc}")
                    record = {
                        "repeat": repeat,
                        "kind": kind,
                        "work_ms": work_ms,
                        "concurrency": scale.asyncio_concurrency,
                        "batch": scale.asyncio_batch,
                        "jobs": jobs,
                    }
                    self.results.asyncio.append(_measured(record, measured))
                    label = "AsyncWorker, tasks" if kind == "async" else "Worker, threads"
                    self.log(
                        f"  r{repeat} {work_ms:g} ms {label:<18} x{scale.asyncio_concurrency}: "
                        f"{measured.rate:>7.0f} jobs/s{' (capped)' if measured.capped else ''}"
                        f"{_error(measured)}"
                    )

    # -- soak ---------------------------------------------------------------------------

    def soak(self) -> None:
        """Two runs of a backlog through pgjobq Workers, and the space the queue uses after each.

        The first run goes while another session holds one REPEATABLE READ transaction (a snapshot)
        open for the whole run, so that vacuum can remove no row version the run leaves behind; it is
        repeated scale.soak_held_repeats times, each in a fresh database, since one run's ratio moves
        with what else the machine and the server do meanwhile (a checkpoint, an autovacuum).  After the
        last, the snapshot is released and every table of the jobq schema vacuumed (an explicit VACUUM,
        which has no cost delay); the second run goes with no snapshot held.  The
        queue keeps its done jobs scale.soak_retain_done seconds (jobq.configure_queue's retain_done,
        enforced by the workers' jobq.tick), where the extension has retention."""
        scale = self.scale
        held: list[dict[str, Any]] = []
        for repeat in range(scale.soak_held_repeats):
            target = self.servers.create_database("bench_soak")
            pgjobq_setup(target)
            retain_done = _soak_retention(target, scale.soak_retain_done)
            self.log(f"  r{repeat}, snapshot held:")
            first, space = self._soak_run(target, 0, hold=True)
            held.append(first)
        with timer() as elapsed, psycopg.connect(target.dsn, autocommit=True) as conn:
            tables = [sql.Identifier("jobq", name) for (name,) in conn.execute(JOBQ_TABLES).fetchall()]
            conn.execute(sql.SQL("VACUUM {}").format(sql.SQL(", ").join(tables)))
            vacuumed = _space(conn)
        self.log(
            f"  snapshot released, VACUUM in {elapsed():.1f} s: queue "
            f"{space['queue_bytes'] / 2**20:,.1f} MiB -> {vacuumed['queue_bytes'] / 2**20:,.1f} MiB"
        )
        second, after = self._soak_run(target, scale.soak_jobs, hold=False)
        self.results.soak = {
            **first,
            "workers": scale.soak_workers,
            "batch": scale.soak_batch,
            "window": scale.soak_window,
            "compare": scale.soak_compare,
            "limit": scale.soak_limit,
            "retain_done": retain_done,
            "held_runs": held,  # every run with the snapshot held; the record itself is the last
            "vacuum": "every jobq table is vacuumed (an explicit VACUUM, which has no cost delay)",
            "space_held": space,
            "space_vacuumed": vacuumed,
            "space_second": after,
            "second": second,
        }

    def _soak_run(self, target: Target, offset: int, *, hold: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """One soak run: scale.soak_jobs jobs (ids after offset) loaded, then drained by the Workers,
        sampled every scale.soak_window seconds; with hold, while a snapshot is held for the whole
        run.  Its record and the queue's space at its end (the snapshot still held)."""
        scale = self.scale
        with timer() as elapsed, psycopg.connect(target.dsn, autocommit=True) as conn:
            chunk = 100_000
            for start in range(offset, offset + scale.soak_jobs, chunk):
                _queued(conn, start + 1, min(offset + scale.soak_jobs, start + chunk))
            conn.execute("VACUUM (ANALYZE) jobq.jobs")
            conn.execute("CHECKPOINT")
        self.log(f"  loaded {scale.soak_jobs:,} jobs in {elapsed():.1f} s")
        samples: list[dict[str, Any]] = []
        holder = psycopg.connect(target.dsn, autocommit=True)
        monitor = psycopg.connect(target.dsn, autocommit=True)
        try:
            if hold:
                holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT count(*) FROM jobq.jobs WHERE id < 0")  # takes the snapshot
            next_sample = 0.0

            def sample(elapsed: float) -> None:
                samples.append(
                    {"t": elapsed, "processed": self.pool.processed, **_sizes(monitor), **_space(monitor)}
                )

            def tick(elapsed: float) -> None:
                nonlocal next_sample
                if elapsed >= next_sample:
                    sample(elapsed)
                    next_sample += scale.soak_window

            tasks: list[Task] = [WorkTask(PgjobqWorker, target, scale.soak_batch, 0.0)] * scale.soak_workers
            started = self.pool.start(tasks, goal=scale.soak_jobs)
            tick(0.0)
            try:
                measured = self.pool.wait(started, scale.soak_limit, tick)
            finally:
                errors = self.pool.finish()
            sample(measured.seconds)
            samples[-1]["processed"] = measured.processed
            space = _space(monitor)
            if hold:
                holder.execute("COMMIT")
        finally:
            holder.close()
            monitor.close()
        self.log(
            f"  {'snapshot held' if hold else 'no snapshot'}: {measured.processed:,} jobs in "
            f"{measured.seconds:.1f} s{' (capped)' if measured.capped else ''}; {len(samples)} samples; "
            f"queue {space['queue_bytes'] / 2**20:,.1f} MiB"
        )
        record = {
            "jobs": scale.soak_jobs,
            "held": hold,
            "processed": measured.processed,
            "seconds": measured.seconds,
            "capped": measured.capped,
            "error": measured.error or (errors[0] if errors else None),
            "samples": samples,
        }
        return record, space


# The tables of the jobq schema (those of the extension's current version, whatever it has).
JOBQ_TABLES = """
SELECT c.relname FROM pg_class AS c
 WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = ANY (ARRAY['r', 'p'])
 ORDER BY c.relname
"""

# The space the queue uses: every table of the jobq schema with its indexes and TOAST
# (pg_total_relation_size), in all and per relation (the tables, and each index apart), in bytes.
SPACE = """
SELECT sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relkind = ANY (ARRAY['r', 'p']))::bigint
           AS queue_bytes,
       json_object_agg(c.relname,
                       CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid)
                            ELSE pg_table_size(c.oid) END) AS relation_bytes
  FROM pg_class AS c
 WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = ANY (ARRAY['r', 'p', 'i'])
"""


def _space(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The queue's space now (SPACE): queue_bytes and relation_bytes."""
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute(SPACE).fetchone()
    return dict(row) if row else {"queue_bytes": 0, "relation_bytes": {}}


def _soak_retention(target: Target, seconds: float) -> float | None:
    """Have QUEUE keep its done jobs this many seconds (jobq.configure_queue's retain_done) where the
    extension has retention; the seconds set, or None (an extension without retain_done)."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_proc AS p WHERE p.oid = 'jobq.configure_queue'::regproc"
            " AND 'retain_done' = ANY (p.proargnames)"
        ).fetchone()
    if found is None:
        return None
    _configure(target, {"retain_done": timedelta(seconds=seconds)})
    return seconds


SIZES = """
SELECT pg_relation_size('jobq.jobs') AS table_bytes,
       (SELECT json_object_agg(c.relname, pg_relation_size(c.oid))
          FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
         WHERE i.indrelid = 'jobq.jobs'::regclass) AS index_bytes,
       s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
       s.autovacuum_count AS autovacuums, s.autoanalyze_count AS autoanalyzes
  FROM pg_stat_user_tables AS s
 WHERE s.relid = 'jobq.jobs'::regclass
"""


def _configure(target: Target, settings: dict[str, Any]) -> None:
    """jobq.configure_queue(QUEUE, <name> => <value>, ...) in the target's database."""
    arguments = sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in settings
    )
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SELECT jobq.configure_queue(%(queue)s, {})").format(arguments),
            {"queue": QUEUE, **settings},
        )


def _reset_limited(target: Target) -> None:
    """Every job gone, with the state a queue with limits keeps (its keys, its gate); its settings kept."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT array_agg(t) FILTER (WHERE to_regclass(t) IS NOT NULL) FROM unnest(%s::text[]) AS t",
            (["jobq.jobs", *LIMIT_TABLES],),
        ).fetchone()
        present = list(row[0]) if row and row[0] else ["jobq.jobs"]
        tables = sql.SQL(", ").join(sql.Identifier(*name.split(".")) for name in present)
        conn.execute(sql.SQL("TRUNCATE {}").format(tables))


def _enqueue_keyed(conn: psycopg.Connection[Any], first: int, last: int, key: str) -> None:
    """Jobs first..last of QUEUE through jobq.enqueue_many, LOAD_CHUNK per call, each with the
    concurrency key the SQL expression key gives (of g, the job's number)."""
    statement = sql.SQL(KEYED_ENQUEUE_SQL.format(key=key))  # the expression is the workload's own
    for start in range(first, last + 1, LOAD_CHUNK):
        conn.execute(statement, {"queue": QUEUE, "first": start, "last": min(last, start + LOAD_CHUNK - 1)})


def _gated_calls(target: Target) -> int:
    """The calls of jobq._claim_gated in the database since pg_stat_reset(), once the sessions that
    made them have flushed their counters (at their end, which may come a little after the Workers
    return): read until two reads 0.3 s apart agree, for 3 s at most."""
    calls = -1
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 3.0
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(GATED_CALLS_SQL).fetchone()
            seen = int(row[0]) if row else 0
            if (seen == calls and seen > 0) or time.monotonic() > deadline:
                return seen
            calls = seen
            time.sleep(0.3)


def _extension_version(target: Target) -> str:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'").fetchone()
    return str(row[0]) if row else "?"


def _has(target: Target, call: str | None) -> bool:
    """Whether the target's database can make this function call (planned by EXPLAIN, not run)."""
    if call is None:
        return True
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        try:
            conn.execute(f"EXPLAIN SELECT * FROM {call}")
        except psycopg.errors.UndefinedFunction:
            return False
    return True


# The checkpoints the server has made, by cause: requested (by WAL volume, max_wal_size, or a CHECKPOINT)
# and timed (checkpoint_timeout); PostgreSQL 17 moved them from pg_stat_bgwriter to pg_stat_checkpointer.
CHECKPOINTS = {
    True: "SELECT num_requested AS checkpoints_requested, num_timed AS checkpoints_timed"
    " FROM pg_stat_checkpointer",
    False: "SELECT checkpoints_req AS checkpoints_requested, checkpoints_timed FROM pg_stat_bgwriter",
}


def _sizes(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The soak's sample of jobq.jobs (SIZES) and of the server's checkpoints so far (CHECKPOINTS)."""
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute(SIZES).fetchone()
        checkpoints = cur.execute(CHECKPOINTS[conn.info.server_version >= 170000]).fetchone()
    return {**(row or {}), **(checkpoints or {})}
