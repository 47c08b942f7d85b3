"""Chaos run of the flow control of 0.7.0: queue limits and a 1-second schedule, under faults.

    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_limits --workdir D         # short: 4,000 jobs, < 60 s
    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_limits --full --workdir D  # 50,000 (make chaos-limits)

A throwaway PostgreSQL of its own (it restarts it; chaos.py's ThrowawayPostgres)
runs the extension and the evidence tables below, in schema chaos.  Three
queues:

- ``limited``: ``jobq.configure_queue('limited', concurrency => 50,
  key_concurrency => 2)`` (claim order 'priority'), its jobs enqueued with
  ``concurrency_key => 'k0'..'k99'``; four keys are hot: a backlog of theirs
  (300 each in the full run) is enqueued first, and they take 6% of the
  stream after.  Not more: a claim in priority order walks past the queued
  jobs of the keys at their limit, holding the queue's gate meanwhile, so a
  backlog of 11,000 such jobs made each claim take a second and the queue
  crawl (30 jobs/s; an earlier version of this run);
- ``fair``: ``concurrency => 30, key_concurrency => 1, key_order =>
  'round_robin'``, keys 'f0'..'f39' (5% of its jobs with no key): more
  keys than its concurrency, so that its own limit binds, not only the
  keys'; five jobs of every key are in the backlog, so that the first
  claims meet more keys with work than the limit lets run; its four hot
  keys have the big backlogs (1,500 each, then 30% of its stream);
- ``ticks``: the jobs of ``jobq.schedule('tick', 'ticks', '{"ms": 2, ...}',
  every => interval '1 second', priority => 5, catch_up => 'all')``
  (the payload: the handler's sleep), enqueued by the workers' own
  ``jobq.tick()`` every reap interval (skipped, loudly, when the extension
  has no jobq.schedule).

Eight real ``pgjobq worker`` processes run chaos.chaos_handlers:run (each
execution recorded in chaos.executions, then a sleep of payload["ms"]), eight
handler threads each, so that together they could run more than the limits
let them: four work ``limited`` alone (jobq.complete_and_claim), two
``limited``, ``fair`` and ``ticks`` (jobq.claim_any), two ``fair`` and
``ticks``.  They log in with the worker level only (jobq.grant_worker) and
reap every second under leases of a few seconds.  Meanwhile a producer
enqueues the jobs steadily, and a fault thread SIGKILLs a worker holding
jobs every few seconds (started again at once), SIGSTOPs one for a moment
now and then, SIGSTOPs one holding jobs of ``limited`` for two of its lease
lengths (its jobs are reaped and run elsewhere while it sleeps; then
SIGCONT), and restarts PostgreSQL twice (-m fast, then -m immediate), each
time leaving it down a few seconds (the schedule's occurrences of the
outage come afterwards: catch_up 'all').

A trigger on jobq.jobs logs every change of status (chaos.status_log: the
clock, the job, its lease, old and new status, its concurrency key read from
jobq.concurrency_keys, and whether it was a reap).  Then the invariants,
from that log and the handlers' records:

1. ``limit_<queue>``, ``key_limit_<queue>``: sweeping the intervals from
   each change to running to the job's next change, at no instant more than
   the queue's concurrency run, nor more than key_concurrency of one key (a
   change is logged before its transaction commits, and a claim counts only
   committed ends, so the log never shows a sound history over its limits);
   and each limit was reached (a claim brought the queue to its concurrency,
   a key to its key_concurrency), or the run proved nothing of it;
2. ``overlaps``: every two executions of one job that overlapped in time
   (handler start to end) are explained by a reap of the earlier one's lease
   before the later one started;
3. ``lost``: every job the producer was given an id for ends done, or failed
   on purpose (with its error, or its one attempt reaped: its worker was
   killed), and none is done twice or done unexecuted;
4. ``schedule``: one occurrence job per second between the first and the
   last (none missing, none doubled), each done; its headers and unique key
   are the schedule's.

Each is printed as a table row (observed vs expected); when one fails the
evidence is copied to CSV (chaos.keep_evidence) and the exit status is 1.
tests/chaos/test_chaos_limits.py runs the short version.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table
from throwaway_pg import ThrowawayPostgres

import pgjobq

from chaos.chaos import Invariant, Judged, WorkerProc, keep_evidence, say
from helpers.processes import pgjobq_command, process_env, wait_until
from helpers.sqlhelpers import Db
from helpers.working_tree import servers_run_the_working_tree

__all__ = [
    "INVARIANTS",
    "SCHEMA_DDL",
    "LimitsConfig",
    "LimitsReport",
    "LimitsSeen",
    "evidence",
    "judge",
    "main",
    "render",
    "run_limits",
]

LIMITED = "limited"
FAIR = "fair"
TICKS = "ticks"
SCHEDULE = "tick"
WORKER_ROLE = "chaos_worker"
HANDLER = "chaos.chaos_handlers:run"

# The keys of every invariant a limits run judges (judge()), in the order of its table.
# tests/chaos/test_chaos_limits.py asserts each of them, and that a run's report has exactly these.
INVARIANTS = (
    f"limit_{LIMITED}", f"key_limit_{LIMITED}", f"limit_{FAIR}", f"key_limit_{FAIR}", "overlaps", "lost",
    "schedule", "clean_exit", "faults",
)  # fmt: skip


@dataclass(frozen=True)
class LimitsConfig:
    """The load, the limits, the workers and the faults of one run.  Times in seconds."""

    name: str
    jobs: int  # of limited and fair together (the ticks come on top)
    produce_seconds: float
    handler_ms: tuple[int, int]
    drain_timeout: float
    hot_backlog: int  # jobs of each hot key of limited enqueued before the stream starts
    fair_hot_backlog: int  # and of fair
    fair_share: float = 0.25  # of the jobs go to fair
    keys: int = 100  # limited: k0 .. k99
    # fair: f0 .. f39, more than its concurrency: at one job of a key at a time, 30 keys could never
    # run past it, and its limit would go untested
    fair_keys: int = 40
    fair_key_backlog: int = 5  # jobs of every key of fair in the backlog: its first claims reach its limit
    hot_keys: int = 4  # k0..k3 and f0..f3
    # of the stream of limited goes to its hot keys: modest, as its claims (priority order) walk the
    # full keys' backlog at every claim, holding the queue's gate meanwhile (52_limits.sql)
    hot_share: float = 0.06
    fair_hot_share: float = 0.3  # of fair's (round robin: a key's backlog costs its claims nothing)
    keyless_fair: float = 0.05  # of fair's jobs carry no key
    concurrency: int = 50  # limited
    key_concurrency: int = 2
    fair_concurrency: int = 30
    fair_key_concurrency: int = 1
    workers: int = 8
    threads: int = 8  # handler threads per worker: 64 in all, more than either limit
    batch: int = 10
    lease: float = 3.0
    reap_interval: float = 1.0
    poll_interval: float = 0.2  # a claim refused by a limit waits like one on an empty queue
    kill_every: float = 2.0
    pause_every: float = 5.0  # a short SIGSTOP/SIGCONT of a random worker
    pause_for: float = 0.5
    stop_leases: float = 2.0  # the long SIGSTOP lasts this many leases
    down_for: float = 2.0  # a restart keeps the server down this long
    fail_every: int = 97  # job n with n % fail_every == 13 fails on purpose (max_attempts 1)
    max_attempts: int = 100
    seed: int = 20261201

    @classmethod
    def short(cls) -> LimitsConfig:
        return cls(
            name="short", jobs=4_000, produce_seconds=22, handler_ms=(2, 25), drain_timeout=40,
            hot_backlog=100, fair_hot_backlog=150, pause_every=3.0,
        )  # fmt: skip

    @classmethod
    def full(cls) -> LimitsConfig:
        return cls(
            name="full", jobs=50_000, produce_seconds=200, handler_ms=(5, 50), drain_timeout=240,
            hot_backlog=300, fair_hot_backlog=1_500, kill_every=3.0, pause_every=6.0,
        )  # fmt: skip

    def queues_of(self, slot: int) -> tuple[str, ...]:
        """The queues the worker of slot works."""
        if slot < 4:
            return (LIMITED,)
        if slot < 6:
            return (LIMITED, FAIR, TICKS)
        return (FAIR, TICKS)

    @property
    def max_connections(self) -> int:
        return 2 * self.workers * (self.threads + 2) + 50


@dataclass
class LimitsReport(Judged):
    config: LimitsConfig
    invariants: list[Invariant]
    counts: dict[str, str]
    wall: float
    workdir: Path
    schedule_skipped: bool = False


# -- evidence tables ----------------------------------------------------------

# chaos.executions as chaos.chaos_handlers writes it; chaos.effects only because the handler's grants
# name it (every job here is "plain"); the producer's ids; and the status log.
SCHEMA_DDL = """
CREATE SCHEMA chaos;

CREATE TABLE chaos.executions (
    token       uuid        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    lease       bigint      NOT NULL,
    pid         integer     NOT NULL,
    worker      text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    outcome     text
);

CREATE TABLE chaos.effects (
    token      uuid        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    lease      bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE chaos.acked (
    id bigint PRIMARY KEY
);

-- one row per change of a job's status, at the clock of the statement's row
-- change (before its transaction commits)
CREATE TABLE chaos.status_log (
    seq             bigserial   PRIMARY KEY,
    job_id          bigint      NOT NULL,
    queue           text        NOT NULL,
    concurrency_key text,
    old_status      text        NOT NULL,
    new_status      text        NOT NULL,
    old_lease       bigint      NOT NULL,
    new_lease       bigint      NOT NULL,
    locked_by       text,
    reaped          boolean     NOT NULL,
    at              timestamptz NOT NULL
);

CREATE FUNCTION chaos.log_status()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    -- jobq.reap appends 'reaped: lease <lease> of <worker> ...' to last_error
    INSERT INTO chaos.status_log
        (job_id, queue, concurrency_key, old_status, new_status, old_lease, new_lease, locked_by,
         reaped, at)
    VALUES
        (NEW.id, NEW.queue,
         (SELECT k.concurrency_key FROM jobq.concurrency_keys AS k WHERE k.id = NEW.id),
         OLD.status, NEW.status, OLD.lease, NEW.lease, NEW.locked_by,
         OLD.status = 'running' AND NEW.status <> 'running'
             AND NEW.last_error IS DISTINCT FROM OLD.last_error
             AND NEW.last_error LIKE ('%reaped: lease ' || OLD.lease || ' of %'),
         clock_timestamp());
    RETURN NULL;
END
$body$;

CREATE TRIGGER chaos_status_log_trg
    AFTER UPDATE ON jobq.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION chaos.log_status();
"""

HANDLER_GRANTS = """
GRANT USAGE ON SCHEMA chaos TO {role};
GRANT SELECT, INSERT, UPDATE ON TABLE chaos.executions TO {role};
GRANT SELECT, INSERT ON TABLE chaos.effects TO {role};
"""


# -- worker processes -----------------------------------------------------------


class Fleet:
    """The worker processes, one per slot, each replaced when killed."""

    def __init__(self, dsn: str, config: LimitsConfig, log_dir: Path) -> None:
        self.dsn = dsn
        self.config = config
        self.log_dir = log_dir
        self.slots: dict[int, WorkerProc] = {}
        self.every: list[WorkerProc] = []
        self.queues: dict[str, tuple[str, ...]] = {}  # worker name -> its queues
        self.unexpected_exits: list[tuple[str, int | None]] = []
        self._lock = threading.Lock()

    def spawn(self, slot: int) -> WorkerProc:
        c = self.config
        name = f"w{len(self.every) + 1:03d}"
        log_path = self.log_dir / f"worker-{name}.log"
        log = log_path.open("wb")
        queues = c.queues_of(slot)
        argv = pgjobq_command(
            "worker", HANDLER,
            *[arg for queue in queues for arg in ("--queue", queue)],
            "--concurrency", str(c.threads),
            "--batch", str(c.batch),
            "--lease-timeout", str(c.lease),
            "--reap-interval", str(c.reap_interval),
            "--poll-interval", str(c.poll_interval),
            "--log-level", "INFO",
        )  # fmt: skip
        env = process_env(self.dsn, PGJOBQ_WORKER_NAME=name)
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProc(name, c.lease, process, log_path, log)
        self.slots[slot] = worker
        self.every.append(worker)
        self.queues[name] = queues
        return worker

    def start(self) -> None:
        for slot in range(self.config.workers):
            self.spawn(slot)

    def live(self) -> list[WorkerProc]:
        return [w for w in self.slots.values() if w.alive()]

    def replace_dead(self) -> None:
        with self._lock:
            for slot, worker in list(self.slots.items()):
                if not worker.alive() and not worker.expected_exit:
                    self.unexpected_exits.append((worker.name, worker.process.returncode))
                    say(f"worker {worker.name} exited on its own (status {worker.process.returncode})")
                    self.spawn(slot)

    def kill(self, worker: WorkerProc) -> WorkerProc:
        """SIGKILL worker and start its replacement."""
        with self._lock:
            worker.expected_exit = True
            os.kill(worker.pid, signal.SIGKILL)
            worker.process.wait()
            slot = next(s for s, w in self.slots.items() if w is worker)
            return self.spawn(slot)

    def terminate_all(self, timeout: float) -> dict[str, int | None]:
        """SIGTERM every live worker (once it has started); their exit statuses (None: killed at timeout)."""
        workers = list(self.slots.values())
        wait_until(
            lambda: all("started on queue" in w.log_text() for w in workers if w.alive()), timeout, 0.5
        )
        for worker in workers:
            worker.expected_exit = True
            if worker.alive():
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        statuses: dict[str, int | None] = {}
        for worker in workers:
            try:
                statuses[worker.name] = worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                statuses[worker.name] = None
        self.kill_all()
        return statuses

    def kill_all(self) -> None:
        for worker in self.every:
            worker.expected_exit = True
            if worker.alive():
                with_signal(worker, signal.SIGCONT)
                worker.process.kill()
                worker.process.wait()
            worker.log.close()


def with_signal(worker: WorkerProc, sig: signal.Signals) -> None:
    """Send sig to worker, unless it is gone."""
    with suppress(ProcessLookupError):
        os.kill(worker.pid, sig)


# -- producer -------------------------------------------------------------------


class Producer(threading.Thread):
    """Enqueues the hot keys' backlog first, then the jobs steadily over produce_seconds.

    Each batch is one transaction of jobq.enqueue_many calls (one per queue
    and max_attempts); every id it was given is kept once the transaction
    committed.  Priorities 0..2 are drawn per job (limited claims by
    priority, its full keys passed over).
    """

    def __init__(self, dsn: str, config: LimitsConfig) -> None:
        super().__init__(name="producer", daemon=True)
        self.dsn = dsn
        self.config = config
        self.acked: list[int] = []
        self.failed_batches = 0
        self.by_queue: dict[str, int] = {LIMITED: 0, FAIR: 0}
        self.error: BaseException | None = None
        self._abort = threading.Event()
        self._rng = random.Random(config.seed)
        self._numbered = 0

    def abort(self) -> None:
        self._abort.set()

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:
            self.error = exc

    def _job(
        self, hot: bool | None = None, queue: str | None = None, key: str | None = None
    ) -> tuple[str, str | None, dict[str, Any]]:
        """(queue, concurrency key, payload) of the next job (of key, when given)."""
        c = self.config
        rng = self._rng
        n = self._numbered
        self._numbered += 1
        if queue is None:
            queue = FAIR if rng.random() < c.fair_share else LIMITED
        if hot is None:
            hot = rng.random() < (c.hot_share if queue == LIMITED else c.fair_hot_share)
        prefix, keys = ("k", c.keys) if queue == LIMITED else ("f", c.fair_keys)
        if key is None and not (queue == FAIR and rng.random() < c.keyless_fair):
            key = f"{prefix}{rng.randrange(c.hot_keys) if hot else rng.randrange(c.hot_keys, keys)}"
        payload = {"n": n, "ms": rng.randint(*c.handler_ms), "mode": "plain", "fail": n % c.fail_every == 13}
        return queue, key, payload

    def _enqueue(
        self, conn: psycopg.Connection[Any], jobs: list[tuple[str, str | None, dict[str, Any]]]
    ) -> None:
        """Enqueue jobs in one transaction, by (queue, fails, priority); keep the ids once committed."""
        groups: dict[tuple[str, bool, int], list[tuple[str | None, dict[str, Any]]]] = {}
        for queue, key, payload in jobs:
            priority = int(payload["n"]) % 3
            groups.setdefault((queue, bool(payload["fail"]), priority), []).append((key, payload))
        ids: list[int] = []
        counted: dict[str, int] = {}
        with conn.transaction():
            for (queue, fails, priority), members in sorted(groups.items()):
                ids += pgjobq.enqueue_many(
                    conn, queue, [p for _, p in members], priority=priority,
                    max_attempts=1 if fails else self.config.max_attempts,
                    concurrency_keys=[k for k, _ in members],
                )  # fmt: skip
                counted[queue] = counted.get(queue, 0) + len(members)
        self.acked.extend(ids)
        for queue, n in counted.items():
            self.by_queue[queue] += n

    def _batch(self, conn: psycopg.Connection[Any] | None, jobs: list[Any]) -> psycopg.Connection[Any] | None:
        """Enqueue jobs, retrying through faults (a failed transaction's jobs are drawn afresh: its
        payloads may or may not exist, and are judged only if acknowledged)."""
        while not self._abort.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, application_name="chaos producer", connect_timeout=3)
                self._enqueue(conn, jobs)
                return conn
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self.failed_batches += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.2)
        return conn

    def _produce(self) -> None:
        c = self.config
        conn: psycopg.Connection[Any] | None = None
        backlog = [
            self._job(queue=FAIR, key=f"f{k}") for _ in range(c.fair_key_backlog) for k in range(c.fair_keys)
        ] + [
            self._job(hot=True, queue=queue)
            for queue, per_key in ((LIMITED, c.hot_backlog), (FAIR, c.fair_hot_backlog))
            for _ in range(c.hot_keys * per_key)
        ]
        for start in range(0, len(backlog), 500):
            conn = self._batch(conn, backlog[start : start + 500])
        stream = c.jobs - len(self.acked)
        begun = time.monotonic()
        while len(self.acked) < c.jobs and not self._abort.is_set():
            elapsed = time.monotonic() - begun
            target = len(backlog) + min(stream, math.ceil(stream * elapsed / c.produce_seconds))
            size = min(300, target - len(self.acked), c.jobs - len(self.acked))
            if size <= 0:
                time.sleep(0.02)
                continue
            conn = self._batch(conn, [self._job() for _ in range(size)])
        if conn is not None:
            conn.close()


# -- faults ---------------------------------------------------------------------


class Faults(threading.Thread):
    """Kills, pauses, one long SIGSTOP and two restarts of PostgreSQL while the producer runs."""

    def __init__(self, config: LimitsConfig, server: ThrowawayPostgres, dsn: str, fleet: Fleet,
                 producer: Producer) -> None:  # fmt: skip
        super().__init__(name="faults", daemon=True)
        self.config = config
        self.server = server
        self.dsn = dsn
        self.fleet = fleet
        self.producer = producer
        self.rng = random.Random(config.seed + 1)
        self.kills = 0
        self.kills_holding = 0
        self.killed_held = 0
        self.pauses = 0
        self.long_stop: str | None = None  # what the long SIGSTOP did
        self.restarts: list[str] = []
        self.error: BaseException | None = None
        self._conn: Db | None = None
        self._stopped: WorkerProc | None = None  # the long-stopped worker: neither killed nor paused
        self._next_kill = 0.0
        self._next_pause = 0.0

    def run(self) -> None:
        try:
            self._script()
        except BaseException as exc:
            self.error = exc
        finally:
            if self._conn is not None:
                self._conn.close()

    def _query(self, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        for attempt in range(200):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(
                        self.dsn, autocommit=True, row_factory=dict_row, application_name="chaos harness",
                        connect_timeout=3,
                    )  # fmt: skip
                return self._conn.execute(query, params).fetchall()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                time.sleep(min(1.0, 0.05 * 2**attempt))
        raise RuntimeError("the harness lost the database for good")

    def _script(self) -> None:
        c = self.config
        t0 = time.monotonic()
        self._next_kill = t0 + c.kill_every
        self._next_pause = t0 + c.pause_every
        self._faults_until(t0 + 0.2 * c.produce_seconds)
        self._restart("fast")
        self._faults_until(max(time.monotonic() + 1, t0 + 0.4 * c.produce_seconds))
        self._long_stop()
        self._faults_until(max(time.monotonic() + 1, t0 + 0.7 * c.produce_seconds))
        self._restart("immediate")
        while self.producer.is_alive():
            self._faults_until(time.monotonic() + 0.5)
        say("faults over")

    def _faults_until(self, deadline: float) -> None:
        c = self.config
        while (now := time.monotonic()) < deadline:
            self.fleet.replace_dead()
            if now >= self._next_kill:
                self._kill_one()
                self._next_kill = time.monotonic() + c.kill_every
            if now >= self._next_pause:
                self._pause_one()
                self._next_pause = time.monotonic() + c.pause_every
            time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))

    def _holding(self) -> dict[str, int]:
        """Running jobs by worker name."""
        rows = self._query(
            "SELECT locked_by, count(*) AS n FROM jobq.jobs WHERE status = 'running' GROUP BY locked_by"
        )
        return {str(r["locked_by"]): int(r["n"]) for r in rows}

    def _candidates(self) -> list[WorkerProc]:
        return [w for w in self.fleet.live() if w is not self._stopped]

    def _kill_one(self) -> None:
        """SIGKILL a worker holding running jobs (frozen first, up to four tried), else the last tried."""
        candidates = self._candidates()
        if not candidates:
            return
        holding = self._holding()
        self.rng.shuffle(candidates)
        candidates.sort(key=lambda w: -holding.get(w.name, 0))
        tries = candidates[:4]
        for victim in tries:
            with_signal(victim, signal.SIGSTOP)
            try:
                time.sleep(0.1)  # statements in flight when it froze finish
                held = self._holding().get(victim.name, 0)
                if held > 0 or victim is tries[-1]:
                    self.fleet.kill(victim)
                    self.kills += 1
                    self.kills_holding += held > 0
                    self.killed_held += held
                    return
            finally:
                if victim.alive():
                    with_signal(victim, signal.SIGCONT)

    def _pause_one(self) -> None:
        """SIGSTOP a random worker for pause_for (shorter than its lease), then SIGCONT it."""
        candidates = self._candidates()
        if not candidates:
            return
        victim = self.rng.choice(candidates)
        with_signal(victim, signal.SIGSTOP)
        time.sleep(self.config.pause_for)
        with_signal(victim, signal.SIGCONT)
        self.pauses += 1

    def _long_stop(self) -> None:
        """SIGSTOP a worker holding jobs of limited for stop_leases leases (they are reaped meanwhile)."""
        c = self.config
        for _ in range(400):
            rows = self._query(
                "SELECT locked_by, count(*) AS n FROM jobq.jobs WHERE status = 'running' AND queue = %s"
                " GROUP BY locked_by ORDER BY 2 DESC",
                (LIMITED,),
            )
            live = {w.name: w for w in self._candidates()}
            victim = next((live[r["locked_by"]] for r in rows if r["locked_by"] in live), None)
            if victim is None:
                self._faults_until(time.monotonic() + 0.05)
                continue
            with_signal(victim, signal.SIGSTOP)
            stopped_at = time.monotonic()
            time.sleep(0.2)
            held = self._holding().get(victim.name, 0)
            if not held:
                with_signal(victim, signal.SIGCONT)
                continue
            self._stopped = victim
            say(f"SIGSTOP {victim.name} holding {held} job(s)")
            self._faults_until(stopped_at + c.stop_leases * c.lease)
            with_signal(victim, signal.SIGCONT)
            stopped_for = time.monotonic() - stopped_at
            say(f"SIGCONT {victim.name} after {stopped_for:.1f} s")
            self.long_stop = f"{victim.name}, {stopped_for:.1f} s, holding {held}"
            self._stopped = None
            return
        say("no worker held a running job of limited to be stopped")

    def _restart(self, mode: str) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        say(f"restart PostgreSQL -m {mode}")
        began = time.monotonic()
        self.server.stop(mode)
        time.sleep(self.config.down_for)
        self.server.start()
        self.restarts.append(f"-m {mode} (down {time.monotonic() - began:.1f} s)")
        say(f"PostgreSQL back after {time.monotonic() - began:.1f} s")
        now = time.monotonic()
        self._next_kill = now + self.config.kill_every
        self._next_pause = now + self.config.pause_every


# -- checks ---------------------------------------------------------------------

# (1) The intervals each job spent running: from its change to running to its
# next change (NULL: still running, counted to the end).  Swept per queue and
# per (queue, key) in the order of the clock, an end before a start at the
# same instant.  peak: the most running at once; over: instants past the
# limit; at_limit: seconds spent at the queue's limit.
LIMIT_SWEEP = """
WITH limits AS (
    SELECT q.queue, q.concurrency, q.key_concurrency FROM jobq.queues AS q WHERE q.concurrency IS NOT NULL
), ordered AS (
    SELECT s.*, lead(s.at) OVER w AS next_at, lead(s.old_status) OVER w AS next_old
      FROM chaos.status_log AS s
    WINDOW w AS (PARTITION BY s.job_id ORDER BY s.seq)
), spans AS (
    SELECT job_id, queue, concurrency_key, at AS began, coalesce(next_at, 'infinity') AS ended,
           next_at IS NOT NULL AND next_old <> 'running' AS gap
      FROM ordered WHERE new_status = 'running'
), events AS (
    SELECT queue, concurrency_key, began AS at, 1 AS delta FROM spans
    UNION ALL
    SELECT queue, concurrency_key, ended, -1 FROM spans
), per_queue AS (
    SELECT queue, at, delta, sum(delta) OVER w AS running, lead(at) OVER w AS next_at
      FROM events
    WINDOW w AS (PARTITION BY queue ORDER BY at, delta ROWS UNBOUNDED PRECEDING)
), per_key AS (
    SELECT queue, concurrency_key,
           sum(delta) OVER (PARTITION BY queue, concurrency_key ORDER BY at, delta ROWS UNBOUNDED PRECEDING)
               AS running
      FROM events WHERE concurrency_key IS NOT NULL
), span_stats AS (
    SELECT queue, count(*) AS spans, count(*) FILTER (WHERE gap) AS gaps,
           count(*) FILTER (WHERE ended = 'infinity') AS open
      FROM spans GROUP BY queue
), queue_stats AS (
    SELECT p.queue, max(p.running) AS peak,
           count(*) FILTER (WHERE p.running > l.concurrency) AS over,
           extract(epoch FROM sum(p.next_at - p.at)
                                  FILTER (WHERE p.running = l.concurrency AND p.next_at < 'infinity'))::float8
               AS at_limit,
           count(*) FILTER (WHERE p.running = l.concurrency AND p.delta = 1) AS hits
      FROM per_queue AS p JOIN limits AS l USING (queue)
     GROUP BY p.queue
), key_stats AS (
    SELECT k.queue, max(k.running) AS key_peak,
           count(*) FILTER (WHERE k.running > l.key_concurrency) AS key_over,
           count(DISTINCT k.concurrency_key) FILTER (WHERE k.running = l.key_concurrency) AS keys_at_limit,
           count(DISTINCT k.concurrency_key) AS keys
      FROM per_key AS k JOIN limits AS l USING (queue)
     GROUP BY k.queue
)
SELECT l.queue, l.concurrency, l.key_concurrency,
       coalesce(s.spans, 0) AS spans, coalesce(s.gaps, 0) AS gaps, coalesce(s.open, 0) AS open,
       coalesce(q.peak, 0) AS peak, coalesce(q.over, 0) AS over, coalesce(q.at_limit, 0) AS at_limit,
       coalesce(q.hits, 0) AS hits,
       coalesce(k.key_peak, 0) AS key_peak, coalesce(k.key_over, 0) AS key_over,
       coalesce(k.keys_at_limit, 0) AS keys_at_limit, coalesce(k.keys, 0) AS keys
  FROM limits AS l
  LEFT JOIN span_stats AS s USING (queue)
  LEFT JOIN queue_stats AS q USING (queue)
  LEFT JOIN key_stats AS k USING (queue)
 ORDER BY l.queue
"""

# (2) Executions of one job that overlapped in time: b started before a had
# finished (a never finished: its worker was killed).  Explained when a's
# lease was reaped before b started; two executions under one lease never are.
OVERLAPS = """
WITH pairs AS (
    SELECT a.job_id, a.lease AS a_lease, b.lease AS b_lease, b.started_at AS b_start
      FROM chaos.executions AS a
      JOIN chaos.executions AS b
        ON b.job_id = a.job_id AND b.token <> a.token
       AND (a.lease < b.lease OR (a.lease = b.lease AND (a.started_at, a.token) < (b.started_at, b.token)))
       AND b.started_at < coalesce(a.finished_at, 'infinity')
)
SELECT (SELECT count(*) FROM chaos.executions) AS executions,
       (SELECT count(*) - count(DISTINCT job_id) FROM chaos.executions) AS reruns,
       count(*) AS overlaps,
       count(*) FILTER (WHERE p.a_lease = p.b_lease) AS same_lease,
       count(*) FILTER (
           WHERE p.a_lease = p.b_lease
              OR NOT EXISTS (SELECT FROM chaos.status_log AS t
                              WHERE t.job_id = p.job_id AND t.old_lease = p.a_lease AND t.reaped
                                AND t.at <= p.b_start)) AS unexplained
  FROM pairs AS p
"""

# (3) Every acknowledged job ends done (not meant to fail) or failed on
# purpose with its error; none done twice; none done without an execution
# that returned under the lease it was completed with.
LOST = """
WITH judged AS (
    SELECT a.id, j.status, j.payload, j.last_error, j.lease
      FROM chaos.acked AS a LEFT JOIN jobq.jobs AS j ON j.id = a.id
)
SELECT count(*) AS acked,
       count(*) FILTER (WHERE status IS NULL) AS missing,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       -- a job meant to fail (max_attempts 1) whose worker was killed: its one attempt ended by the reaper
       count(*) FILTER (WHERE status = 'failed' AND last_error NOT LIKE '%%IntentionalFailure%%')
           AS failed_by_reap,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE status NOT IN ('done', 'failed', 'cancelled')) AS unfinished,
       count(*) FILTER (WHERE status IS NULL OR NOT (
           (status = 'done' AND (payload->>'fail')::boolean IS NOT TRUE)
           OR (status = 'failed' AND (payload->>'fail')::boolean
               AND (last_error LIKE '%%IntentionalFailure%%' OR last_error LIKE '%%reaped: lease %%'))
       )) AS lost,
       count(*) FILTER (WHERE status = 'done' AND NOT EXISTS (
           SELECT FROM chaos.executions AS e
            WHERE e.job_id = judged.id AND e.lease = judged.lease AND e.outcome = 'returned')) AS unexecuted,
       (SELECT count(*) FROM (SELECT job_id FROM chaos.status_log WHERE new_status = 'done'
                               GROUP BY job_id HAVING count(*) > 1) AS d) AS done_twice,
       (SELECT count(*) FROM jobq.jobs AS x
         WHERE x.queue IN (%(limited)s, %(fair)s)
           AND NOT EXISTS (SELECT FROM chaos.acked AS y WHERE y.id = x.id)) AS in_doubt
  FROM judged
"""

# (4) The schedule's occurrence jobs (jobq.tick enqueues each up to a minute
# ahead, to run at its second; jobq.unschedule, at the end, cancels those
# still queued): one job per second from the first to the last (none
# missing, none doubled, all on the grid of whole seconds from the first),
# every one up to the last one done is done (and was executed), the ones
# after it were cancelled by the unschedule (none earlier than a few seconds
# before it), and each has the schedule's headers and its unique key
# 'cron:<name>:<epoch seconds>' (kept until done: jobq.unique_keys).
SCHEDULE_CHECK = """
WITH occ AS (
    SELECT j.id, j.status, j.headers, (j.headers->>'occurrence')::timestamptz AS at,
           (SELECT u.unique_key FROM jobq.unique_keys AS u WHERE u.job_id = j.id) AS unique_key
      FROM jobq.jobs AS j
     WHERE j.queue = %(queue)s
), bounds AS (
    SELECT min(at) AS first, max(at) AS last, max(at) FILTER (WHERE status = 'done') AS last_done FROM occ
)
SELECT count(*) AS jobs,
       count(DISTINCT o.at) AS distinct_seconds,
       count(*) - count(DISTINCT o.at) AS doubled,
       coalesce(round(extract(epoch FROM b.last - b.first))::bigint + 1, 0) AS expected,
       coalesce(round(extract(epoch FROM b.last - b.first))::bigint + 1, 0) - count(DISTINCT o.at) AS missing,
       count(*) FILTER (WHERE extract(epoch FROM o.at - b.first) <> round(extract(epoch FROM o.at - b.first)))
           AS off_grid,
       count(*) FILTER (WHERE o.status = 'done') AS done,
       count(*) FILTER (WHERE o.at <= b.last_done AND o.status <> 'done') AS not_done,
       count(*) FILTER (WHERE o.at > b.last_done) AS after_last_done,
       count(*) FILTER (WHERE o.at > b.last_done
                          AND (o.status <> 'cancelled'
                               OR o.at < %(unscheduled_at)s::timestamptz - interval '5 seconds'))
           AS tail_wrong,
       count(*) FILTER (WHERE o.status = 'done'
                          AND NOT EXISTS (SELECT FROM chaos.executions AS e WHERE e.job_id = o.id))
           AS unexecuted,
       count(*) FILTER (WHERE o.at IS NULL OR o.headers->>'schedule' IS DISTINCT FROM %(name)s
                           OR (o.status = 'done' AND o.unique_key IS DISTINCT FROM
                               'cron:' || %(name)s || ':' || extract(epoch FROM o.at)::bigint))
           AS wrong_marks,
       extract(epoch FROM b.last_done - b.first)::float8 AS span,
       b.first, b.last_done,
       (SELECT extract(epoch FROM max(t.at - o2.at))::float8
          FROM chaos.status_log AS t JOIN occ AS o2 ON o2.id = t.job_id
         WHERE t.new_status = 'running') AS latest_claim
  FROM occ AS o CROSS JOIN bounds AS b
 GROUP BY b.first, b.last, b.last_done
"""

DRAINED = """
SELECT count(*) AS n FROM jobq.jobs
 WHERE status = 'running' OR (status = 'queued' AND NOT (queue = %(ticks)s AND run_at > now()))
"""

COUNTS = """
SELECT (SELECT count(*) FROM chaos.status_log WHERE reaped) AS reaps,
       (SELECT count(*) FROM chaos.status_log WHERE reaped AND queue = %(limited)s) AS reaps_limited,
       (SELECT count(*) FROM chaos.status_log WHERE new_status = 'running') AS claims,
       (SELECT count(*) FROM chaos.status_log) AS transitions
"""


def _one(conn: Db, query: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def has_schedules(conn: Db) -> bool:
    row = _one(conn, "SELECT to_regprocedure('jobq.tick()') IS NOT NULL AND"
                     " EXISTS (SELECT FROM pg_proc WHERE proname = 'schedule'"
                     " AND pronamespace = 'jobq'::regnamespace) AS ok")  # fmt: skip
    return bool(row["ok"])


def evidence(conn: Db, unscheduled_at: datetime | None = None) -> dict[str, Any]:
    """What the evidence tables say (the queries above), by name."""
    for ddl in (
        "CREATE INDEX IF NOT EXISTS status_log_job_idx ON chaos.status_log (job_id, seq)",
        "CREATE INDEX IF NOT EXISTS executions_job_idx ON chaos.executions (job_id, lease)",
        "ANALYZE chaos.status_log, chaos.executions, chaos.acked",
    ):
        conn.execute(ddl)
    params = {
        "limited": LIMITED, "fair": FAIR, "queue": TICKS, "name": SCHEDULE, "unscheduled_at": unscheduled_at,
    }  # fmt: skip
    return {
        "sweep": conn.execute(LIMIT_SWEEP).fetchall(),
        "overlaps": _one(conn, OVERLAPS),
        "lost": _one(conn, LOST, params),
        "schedule": conn.execute(SCHEDULE_CHECK, params).fetchone(),
        "counts": _one(conn, COUNTS, params),
    }


@dataclass(frozen=True)
class LimitsSeen:
    """What a limits run saw besides its evidence tables, as judge() weighs it."""

    scheduled: bool  # the extension has jobq.schedule: the run made the 1-second schedule
    tick_granted: bool  # the workers' role may run jobq.tick (when there is no occurrence, to say why)
    wall_produce: float  # seconds from the producer's start to the unschedule
    exits: dict[str, int | None]  # every worker's exit status after SIGTERM (None: still running)
    unexpected_exits: list[tuple[str, int | None]]  # workers that exited on their own
    kills: int
    kills_holding: int  # of them, of a worker holding running jobs
    pauses: int
    long_stop: str | None  # what the long SIGSTOP did (None: none)
    restarts: list[str]


def limit_invariants(
    row: Mapping[str, Any] | None, queue: str, limit: int, key_limit: int
) -> list[Invariant]:
    """The two invariants of queue's limits (limit_<queue>, key_limit_<queue>) from its LIMIT_SWEEP row
    (None: the queue has no limits): never past either, the queue's configured as the run asked, and each
    reached (a run that never filled the queue, or a key, proves nothing of its limit)."""
    if row is None:
        return [
            Invariant(f"{kind}_{queue}", f"{queue}: limits configured", "none", "yes", False)
            for kind in ("limit", "key_limit")
        ]
    configured = row["concurrency"] == limit and row["key_concurrency"] == key_limit
    return [
        Invariant(
            f"limit_{queue}",
            f"{queue}: most running at once (concurrency {limit}); instants over; claims reaching it",
            f"{row['peak']}; {row['over']}; {row['hits']:,} ({row['spans']:,} runs, {row['gaps']} log gaps,"
            f" {row['open']} open)",
            f"<= {limit}; 0; > 0",
            configured and row["over"] == 0 and row["peak"] <= limit and row["gaps"] == 0
            and row["open"] == 0 and row["spans"] > 0 and row["hits"] > 0,
        ),
        Invariant(
            f"key_limit_{queue}",
            f"{queue}: most running of one key at once (key_concurrency {key_limit}); instants over;"
            " keys reaching it",
            f"{row['key_peak']}; {row['key_over']}; {row['keys_at_limit']} of {row['keys']} keys",
            f"<= {key_limit}; 0; > 0",
            configured and row["key_over"] == 0 and row["key_peak"] <= key_limit and row["keys"] > 0
            and row["keys_at_limit"] > 0,
        ),
    ]  # fmt: skip


def judge(found: Mapping[str, Any], config: LimitsConfig, seen: LimitsSeen) -> list[Invariant]:
    """Every invariant of a limits run (INVARIANTS), from its evidence() and what it saw besides."""
    sweep: list[dict[str, Any]] = found["sweep"]
    overlaps, lost, sched, counts = found["overlaps"], found["lost"], found["schedule"], found["counts"]
    seen_queues = {row["queue"]: row for row in sweep}
    invariants = [
        *limit_invariants(seen_queues.get(LIMITED), LIMITED, config.concurrency, config.key_concurrency),
        *limit_invariants(seen_queues.get(FAIR), FAIR, config.fair_concurrency, config.fair_key_concurrency),
    ]
    invariants.append(Invariant(
        "overlaps", "overlapping executions of one job not explained by a reap",
        f"{overlaps['unexplained']} of {overlaps['overlaps']} ({overlaps['same_lease']} under one lease)",
        "0", overlaps["unexplained"] == 0,
    ))  # fmt: skip
    invariants.append(Invariant(
        "lost", "jobs lost (not done, nor failed on purpose); done twice; done unexecuted",
        f"{lost['lost']} of {lost['acked']:,} ({lost['missing']} missing, {lost['unfinished']} not drained);"
        f" {lost['done_twice']}; {lost['unexecuted']}",
        f"0 of {config.jobs:,}; 0; 0",
        lost["lost"] == 0 and lost["done_twice"] == 0 and lost["unexecuted"] == 0
        and lost["acked"] == config.jobs,
    ))  # fmt: skip
    if not seen.scheduled:
        invariants.append(Invariant(
            "schedule", "1-second schedule: SKIPPED, the extension has no jobq.schedule",
            "skipped", "-", True,
        ))  # fmt: skip
    elif sched is None:
        invariants.append(Invariant(
            "schedule", "1-second schedule: occurrence jobs",
            "none" + ("" if seen.tick_granted else
                      f" (jobq.tick refused to {WORKER_ROLE}: not in the worker level)"),
            "> 0", False,
        ))  # fmt: skip
    else:
        invariants.append(Invariant(
            "schedule",
            "1-second schedule: seconds missing; doubled; off the grid; not done (or unexecuted) up to the"
            " last done; later ones not cancelled by the unschedule; wrong headers or key",
            f"{sched['missing']}; {sched['doubled']}; {sched['off_grid']}; {sched['not_done']}"
            f" ({sched['unexecuted']}); {sched['tail_wrong']} of {sched['after_last_done']};"
            f" {sched['wrong_marks']} ({sched['done']} done over {sched['span'] or 0:.0f} s)",
            "0; 0; 0; 0 (0); 0; 0",
            sched["missing"] == 0 and sched["doubled"] == 0 and sched["off_grid"] == 0
            and sched["not_done"] == 0 and sched["unexecuted"] == 0 and sched["tail_wrong"] == 0
            and sched["wrong_marks"] == 0 and (sched["span"] or 0) >= 0.8 * seen.wall_produce,
        ))  # fmt: skip
    unclean = {name: status for name, status in seen.exits.items() if status != 0}
    invariants.append(Invariant(
        "clean_exit", "workers not exiting 0 within 30 s of SIGTERM; workers that exited on their own",
        f"{len(unclean)} of {len(seen.exits)}; {len(seen.unexpected_exits)}", "0; 0",
        not unclean and not seen.unexpected_exits and len(seen.exits) > 0,
    ))  # fmt: skip
    invariants.append(Invariant(
        "faults", "faults: kills (of workers holding jobs), pauses, long SIGSTOP, restarts",
        f"{seen.kills} ({seen.kills_holding}), {seen.pauses}, {'1' if seen.long_stop else '0'},"
        f" {len(seen.restarts)}",
        "> 0, > 0, 1, 2",
        seen.kills_holding > 0 and seen.pauses > 0 and seen.long_stop is not None
        and len(seen.restarts) == 2 and counts["reaps"] > 0,
    ))  # fmt: skip
    return invariants


def check(
    conn: Db, config: LimitsConfig, faults: Faults, fleet: Fleet, exits: dict[str, int | None],
    scheduled: bool, unscheduled_at: datetime | None, wall_produce: float,
) -> tuple[list[Invariant], dict[str, str]]:  # fmt: skip
    found = evidence(conn, unscheduled_at)
    overlaps, lost, sched, counts = found["overlaps"], found["lost"], found["schedule"], found["counts"]
    granted = "SELECT has_function_privilege(%(role)s, 'jobq.tick()', 'EXECUTE') AS ok"
    tick_granted = scheduled and bool(_one(conn, granted, {"role": WORKER_ROLE})["ok"])
    seen = LimitsSeen(
        scheduled=scheduled, tick_granted=tick_granted, wall_produce=wall_produce, exits=exits,
        unexpected_exits=list(fleet.unexpected_exits), kills=faults.kills, kills_holding=faults.kills_holding,
        pauses=faults.pauses, long_stop=faults.long_stop, restarts=list(faults.restarts),
    )  # fmt: skip
    invariants = judge(found, config, seen)
    seen_queues = {row["queue"]: row for row in found["sweep"]}

    summary: dict[str, str] = {
        "jobs acknowledged (limited / fair)": f"{lost['acked']:,} ({faults.producer.by_queue[LIMITED]:,} /"
        f" {faults.producer.by_queue[FAIR]:,}); {lost['in_doubt']} more from in-doubt commits",
        "done / failed on purpose (by a reap) / cancelled": f"{lost['done']:,} / {lost['failed']:,}"
        f" ({lost['failed_by_reap']}) / {lost['cancelled']:,}",
        "claims (status -> running)": f"{counts['claims']:,}",
        "executions (reruns; overlapping pairs)": f"{overlaps['executions']:,} ({overlaps['reruns']:,};"
        f" {overlaps['overlaps']:,})",
        "reaps (of limited)": f"{counts['reaps']:,} ({counts['reaps_limited']:,})",
    }
    for queue in (LIMITED, FAIR):
        row = seen_queues.get(queue)
        if row is not None:
            summary[f"{queue}: max running (limit); claims reaching it; time at it"] = (
                f"{row['peak']} ({row['concurrency']}); {row['hits']:,}; {row['at_limit']:.1f} s"
            )
            summary[f"{queue}: max running per key (limit); keys at it"] = (
                f"{row['key_peak']} ({row['key_concurrency']}); {row['keys_at_limit']} of {row['keys']}"
            )
    if scheduled and sched is not None:
        summary["schedule occurrences: done (first .. last done); cancelled at the end; latest claim"] = (
            f"{sched['done']} ({sched['first']:%H:%M:%S} .. {sched['last_done']:%H:%M:%S});"
            f" {sched['after_last_done']}; {sched['latest_claim'] or 0:.1f} s after its second"
        )
    summary.update({
        "workers SIGKILLed (holding jobs; the jobs)": f"{faults.kills} ({faults.kills_holding};"
        f" {faults.killed_held})",
        "short SIGSTOP/SIGCONT": f"{faults.pauses} x {config.pause_for:g} s",
        "long SIGSTOP": faults.long_stop or "none",
        "PostgreSQL restarts": ", ".join(faults.restarts) or "none",
        "producer transactions failed by faults (retried)": str(faults.producer.failed_batches),
        "worker processes started": str(len(fleet.every)),
        "status changes logged": f"{counts['transitions']:,}",
    })  # fmt: skip
    return invariants, summary


# -- the run --------------------------------------------------------------------


@contextmanager
def _server(config: LimitsConfig) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(fast=True, settings={"max_connections": str(config.max_connections)})
    with server:
        yield server


def _prepare(dsn: str, config: LimitsConfig) -> tuple[str, bool]:
    """Install the extension, the evidence tables, the limits and the schedule; the workers' DSN, and
    whether the schedule exists (False: the extension has no jobq.schedule)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE EXTENSION pgjobq")
        conn.execute(SCHEMA_DDL)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(WORKER_ROLE)))
        conn.execute("SELECT jobq.grant_worker(%s::regrole)", (WORKER_ROLE,))
        conn.execute(sql.SQL(HANDLER_GRANTS).format(role=sql.Identifier(WORKER_ROLE)))
        conn.execute(
            "SELECT jobq.configure_queue(%s, concurrency => %s, key_concurrency => %s)",
            (LIMITED, config.concurrency, config.key_concurrency),
        )
        conn.execute(
            "SELECT jobq.configure_queue(%s, concurrency => %s, key_concurrency => %s,"
            " key_order => 'round_robin')",
            (FAIR, config.fair_concurrency, config.fair_key_concurrency),
        )
        scheduled = has_schedules(conn)
        if scheduled:
            # the handler sleeps payload["ms"]: a tick's job takes 2 ms.  Priority 5: the workers that
            # also work limited and fair (priorities 0..2) claim across the queues by priority
            conn.execute(
                "SELECT jobq.schedule(%s, %s, %s, every => interval '1 second', priority => 5,"
                " catch_up => 'all')",
                (SCHEDULE, TICKS, Jsonb({"ms": 2, "mode": "plain"})),
            )
        else:
            say(
                "!" * 20
                + " jobq.schedule does not exist: the schedule part of this run is SKIPPED "
                + "!" * 20
            )
    return make_conninfo(dsn, user=WORKER_ROLE), scheduled


def run_limits(config: LimitsConfig, workdir: Path) -> LimitsReport:
    """One run; the workers' logs (and, on a failure, the evidence) go to workdir."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, str] = {}
    invariants: list[Invariant] = []
    scheduled = False
    with _server(config) as server:
        dsn = server.dsn()
        worker_dsn, scheduled = _prepare(dsn, config)
        fleet = Fleet(worker_dsn, config, workdir)
        producer = Producer(dsn, config)
        faults = Faults(config, server, dsn, fleet, producer)
        say(
            f"{config.name} limits chaos run: {config.jobs:,} jobs, {config.workers} workers;"
            f" logs in {workdir}"
        )
        try:
            fleet.start()
            produce_began = time.monotonic()
            producer.start()
            faults.start()
            faults.join()
            producer.join()
            for failed in (faults, producer):
                if failed.error is not None:
                    raise RuntimeError(f"the {failed.name} thread failed") from failed.error
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:

                def drained() -> bool:
                    """Nothing queued or running, but the schedule's occurrences of seconds to come."""
                    fleet.replace_dead()
                    row = _one(conn, DRAINED, {"ticks": TICKS})
                    return bool(row["n"] == 0)

                say("draining")
                wait_until(drained, config.drain_timeout, interval=0.5)
                unscheduled_at = None
                if scheduled:
                    # cancels the occurrences still queued (those of seconds to come, a moment's due ones)
                    unscheduled_at = _one(
                        conn,
                        "SELECT jobq.unschedule(%(name)s) AS ok, clock_timestamp() AS at",
                        {"name": SCHEDULE},
                    )["at"]
                    wait_until(drained, 30, interval=0.5)
                wall_produce = time.monotonic() - produce_began
                exits = fleet.terminate_all(timeout=30)
                with conn.cursor() as cur, cur.copy("COPY chaos.acked (id) FROM STDIN") as copy:
                    for job_id in sorted(set(producer.acked)):
                        copy.write_row((job_id,))
                say("checking")
                invariants, counts = check(
                    conn, config, faults, fleet, exits, scheduled, unscheduled_at, wall_produce
                )
                counts["run (produce + drain)"] = f"{wall_produce:.0f} s"
                if not all(inv.ok for inv in invariants):
                    say(f"invariants violated: the evidence tables are in {keep_evidence(conn, workdir)}")
        finally:
            producer.abort()
            fleet.kill_all()
    wall = time.monotonic() - began
    counts["wall time"] = f"{wall:.0f} s"
    return LimitsReport(config, invariants, counts, wall, workdir, schedule_skipped=not scheduled)


def render(report: LimitsReport, console: Console | None = None) -> None:
    # wide enough for the table when written to a file or a pipe (a terminal keeps its own width)
    console = console or (Console() if sys.stdout.isatty() else Console(width=150))
    c = report.config
    title = (
        f"pgjobq limits chaos run ({c.name}): {c.jobs:,} jobs of {c.handler_ms[0]}-{c.handler_ms[1]} ms,"
        f" {c.workers} workers x {c.threads} threads, lease {c.lease:g} s"
    )
    table = Table(title=title)
    table.add_column("invariant")
    table.add_column("observed", justify="right")
    table.add_column("expected", justify="right")
    table.add_column("")
    for inv in report.invariants:
        mark = (
            "[yellow]SKIPPED[/]"
            if inv.observed == "skipped"
            else "[green]ok[/]"
            if inv.ok
            else "[red]FAIL[/]"
        )
        table.add_row(inv.name, inv.observed, inv.expected, mark)
    console.print(table)
    counts = Table(title="counts", show_header=False)
    counts.add_column("what")
    counts.add_column("how many", justify="right")
    for what, value in report.counts.items():
        counts.add_row(what, value)
    console.print(counts)
    if report.schedule_skipped:
        console.print("[yellow bold]the schedule part was SKIPPED: the extension has no jobq.schedule[/]")
    console.print("[green]all invariants hold[/]" if report.ok else "[red]invariants violated[/]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--full", action="store_true", help="the full run (50,000 jobs) instead of the short one"
    )
    parser.add_argument("--workdir", type=Path, help="folder for the logs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    config = LimitsConfig.full() if args.full else LimitsConfig.short()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"pgjobq-chaos-limits-{config.name}-"))
    report = run_limits(config, workdir)
    render(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    with servers_run_the_working_tree():  # its servers run the working tree's SQL, as the tests' do
        sys.exit(main())
