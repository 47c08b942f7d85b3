"""Chaos run: real `pgjobq worker` processes against a real PostgreSQL while faults are injected.

    PYTHONPATH=tests .venv/bin/python -m chaos.chaos          # short: 5,000 jobs of 1-20 ms
    PYTHONPATH=tests .venv/bin/python -m chaos.chaos --full   # full: 200,000 jobs of 10-500 ms (make chaos)

A throwaway PostgreSQL of its own (it restarts it) runs the extension and the
evidence tables of chaos_handlers.py: a trigger logs every status or lease
change of a job, the handler records every execution and, for half of the
jobs ("effects" mode), writes one effect row in the same transaction as
jobq.complete.  Eight workers run chaos.chaos_handlers:run, their slots
alternating leases of 5 s and 12 s (--lease-timeout; heartbeats at the
default quarter of it) and every one reaping every second.  Two of them (and
their replacements), one of each lease length, run concurrency 1 (handlers
on the worker's own thread, a keeper thread acknowledging and heartbeating
meanwhile), the others a pool of handler threads.  No admin touches the
jobs: the workers (and so their handlers) log in as a role with only the
worker level (jobq.grant_worker) and the handler's rights on two evidence
tables, so the jobs of killed and stopped workers come back only through the
workers' own jobq.reap() calls; only the producer and the evidence queries
run as the superuser.  Meanwhile:

- a producer thread enqueues the jobs steadily over the fault window and
  logs every id it was given, once its transaction committed.  A fifth of
  them carry a unique key from a small key space (scope active or
  until_done, on_conflict return or replace, drawn per batch, run_at up to
  1.5 s ahead), so that keys conflict: an enqueue is given the holder's id,
  replaces a queued holder's payload, or makes a running holder give up its
  key.  A third of the handlers return a result ({"echo": n}) and a tenth
  snooze (pgjobq.Snooze) at their first one or two claims;
- a canceller thread, logging in as an admin-level role, cancels with plain
  SQL (jobq.cancel) a random running job and a recent one every 0.5 s
  (0.25 s in the full run), half the time with force, and records what
  each cancel returned in the same statement; a handler hearing a cancel
  request stops (the job ends cancelled).  It also samples the unique keys
  held twice;
- a chaos thread, until the producer is done and the workers have caught
  up, SIGKILLs a random worker every 2 s and starts a replacement,
  terminates a random worker connection every second
  (pg_terminate_backend), SIGSTOPs one worker holding jobs, one of the
  longest lease (so the workers of shorter leases must wait for its own),
  for three of its lease lengths and then SIGCONTs it, and restarts
  PostgreSQL twice (-m fast, then -m immediate, neither during the
  SIGSTOP), each time leaving it down for 3 s.  Around each restart it
  measures how soon every worker claims again, and the CPU time and log
  lines each spent while the server was down.

Then the workers drain the queue, get SIGTERM, and SQL over the evidence
checks the invariants, printed as a table; the exit status is 1 when one
fails.  Besides no job lost (a cancelled one is accounted for, when it was
cancelled), no overlapping leases and the rest, they prove the leases:
every claim and heartbeat under its worker's own length, every reap after
the lease it took had expired, every change of a job made by the
worker-level role (or a cancel's by the canceller, a key given up by the
producer).  And job control: never two holders of a unique key at once
(from the transition log, at the end and sampled), no force-cancelled job
ever done, every result what its handler returned, cancelled absorbing (no
claim after it), jobs asked to stop done or cancelled and never rerun,
snoozes giving their attempt back and no claim before run_at.
tests/chaos/test_chaos.py runs the short version and asserts each.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table
from throwaway_pg import ThrowawayPostgres

import pgjobq

from chaos.chaos_handlers import SCHEMA_DDL, canceller_grants, handler_grants, result_of
from helpers.processes import cpu_seconds, pgjobq_command, process_env, wait_until
from helpers.sqlhelpers import Db
from helpers.working_tree import servers_run_the_working_tree

__all__ = [
    "CORE_INVARIANTS",
    "INVARIANTS",
    "ChaosConfig",
    "Fleet",
    "Invariant",
    "Judged",
    "Producer",
    "Report",
    "RestartRecord",
    "Seen",
    "StopRecord",
    "core_invariants",
    "evidence",
    "judge",
    "main",
    "prepare",
    "print_tables",
    "privileges",
    "render",
    "run_chaos",
]

QUEUE = "chaos"
WORKER_ROLE = "chaos_worker"  # the workers' login role: the worker level and the handler's tables
CANCELLER_ROLE = "chaos_admin"  # the canceller's login role: the admin level and chaos.cancels

# The keys of core_invariants(), which chaos-net and failover judge too.
CORE_INVARIANTS = (
    "lost", "double_claims", "stale_completions", "second_completions", "duplicates_explained",
    "reaped_valid_lease", "effects_exactly_once",
)  # fmt: skip
# The keys of every invariant a chaos run judges (judge()), in the order of its table.
# tests/chaos/test_chaos.py asserts each of them, and that a run's report has exactly these.
INVARIANTS = (
    "lost", "double_claims", "stale_completions", "second_completions", "duplicates_explained",
    "reaped_valid_lease", "lease_lengths", "worker_level_only", "effects_exactly_once", "unique_keys",
    "replace_kept", "cancel_errors", "forced_never_done", "results", "cancelled_absorbing", "cancel_requests",
    "snoozes", "job_control_load", "drained", "clean_exit", "no_crashes", "reconnect", "quiet_cpu",
    "quiet_log", "late_complete_refused", "faults",
)  # fmt: skip


@dataclass(frozen=True)
class ChaosConfig:
    """The load, the workers' settings and the fault schedule of one run.  Times are in seconds."""

    name: str
    jobs: int
    handler_ms: tuple[int, int]
    produce_seconds: float  # the producer spreads the jobs over this long; faults run meanwhile
    concurrency: int  # handler threads per worker (but the first inline_slots workers)
    drain_timeout: float
    workers: int = 8
    inline_slots: int = 2  # the workers of these slots run concurrency 1: handlers on their own thread
    batch: int = 10
    leases: tuple[float, ...] = (5.0, 12.0)  # --lease-timeout of slot k: leases[k % len(leases)]
    reap_interval: float = 1.0
    poll_interval: float = 1.0
    kill_every: float = 2.0
    terminate_every: float = 1.0
    stop_leases: float = 3.0  # SIGSTOP lasts this many lease lengths of the stopped worker
    fail_every: int = 50  # job n with n % fail_every == 7 fails on purpose (max_attempts 1)
    max_attempts: int = 100  # for the others: chaos alone never exhausts them
    # job control (0.6.0).  Job n is enqueued with a unique key when n % key_every is 5 or 6 (so
    # plain and effects mode), from a small key space so that keys conflict: "a<k>" (scope active)
    # or "u<k>" (until_done), on_conflict return or replace, each chosen per producer batch, and
    # run_at up to keyed_delay s ahead (a scheduled holder holds its key).  Its handler returns
    # a result when n % result_every == 0, and snoozes (snooze_ms, for one or two claims) when
    # n % snooze_every is 4 or 5.  A canceller cancels a running job and a recent one every
    # cancel_every, a share force_share of them with force, and samples the unique holders every
    # sample_every.
    key_every: int = 10
    active_keys: int = 6
    until_done_keys: int = 40
    keyed_delay: float = 1.5
    result_every: int = 3
    snooze_every: int = 20
    snooze_ms: tuple[int, int] = (100, 800)
    cancel_every: float = 0.5
    cancel_recent: int = 40  # the recent ids: among the last this many acknowledged to the producer
    force_share: float = 0.5
    sample_every: float = 3.0
    down_for: float = 3.0  # a restart keeps the server down this long, so backoff and quiet show
    reconnect_limit: float = 15.0
    seed: int = 20240601

    @classmethod
    def short(cls) -> ChaosConfig:
        # 80 s of production: the SIGSTOP of a 12 s worker lasts 36 s from 35% in,
        # and the second restart must still meet workers with jobs to claim
        return cls(
            name="short", jobs=5_000, handler_ms=(1, 20), produce_seconds=80, concurrency=4, drain_timeout=45
        )

    @classmethod
    def full(cls) -> ChaosConfig:
        return cls(
            name="full",
            jobs=200_000,
            handler_ms=(10, 500),
            produce_seconds=360,
            concurrency=20,
            drain_timeout=600,
            active_keys=20,
            until_done_keys=400,
            cancel_every=0.25,
            cancel_recent=400,
        )

    def lease_of(self, slot: int) -> float:
        """The lease length (--lease-timeout) of the workers of slot."""
        return self.leases[slot % len(self.leases)]

    @property
    def max_connections(self) -> int:
        # worker + listen + one per handler thread, twice over for killed
        # workers' backends still exiting, and the harness's own
        return 2 * self.workers * (self.concurrency + 2) + 50


@dataclass
class Invariant:
    key: str
    name: str
    observed: str
    expected: str
    ok: bool


@dataclass
class RestartRecord:
    mode: str
    outage: float  # from the end of pg_ctl stop to the first accepted connection
    reconnect: dict[str, float | None]  # worker -> seconds from accepting connections to its next claim
    cpu: dict[str, float]  # worker -> CPU seconds spent while the server was down (till pg_ctl start)
    log_lines: dict[str, int]  # worker -> log lines written while the server was down (till pg_ctl start)


@dataclass
class StopRecord:
    worker: str
    lease: float  # the stopped worker's lease length
    held: list[tuple[int, int]]  # (job id, lease) running under the worker while it was stopped
    stopped_for: float
    log_offset: int  # the worker's log size at SIGCONT
    log_path: Path


class Judged:
    """What every run's report gives (chaos, chaos-limits, chaos-net, failover): its invariants, whether
    all hold, one by key, and the assertion each test of a run makes."""

    invariants: list[Invariant]

    @property
    def ok(self) -> bool:
        return all(inv.ok for inv in self.invariants)

    def keys(self) -> list[str]:
        """The keys of the invariants judged, in the order of the table."""
        return [inv.key for inv in self.invariants]

    def invariant(self, key: str) -> Invariant:
        return next(inv for inv in self.invariants if inv.key == key)

    def assert_holds(self, key: str) -> None:
        invariant = self.invariant(key)
        assert invariant.ok, f"{invariant.name}: {invariant.observed} (expected {invariant.expected})"


@dataclass
class Report(Judged):
    config: ChaosConfig
    invariants: list[Invariant]
    counts: dict[str, str]
    restarts: list[RestartRecord]
    wall: float
    workdir: Path


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


# -- worker processes ------------------------------------------------------


@dataclass
class WorkerProc:
    name: str
    lease: float  # its --lease-timeout
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    expected_exit: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_size(self) -> int:
        self.log.flush()
        return self.log_path.stat().st_size

    def log_text(self, start: int = 0) -> str:
        with self.log_path.open("rb") as handle:
            handle.seek(start)
            return handle.read().decode(errors="replace")

    def lines_between(self, start: int, end: int) -> int:
        with self.log_path.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start).count(b"\n")


class Fleet:
    """The worker processes: one per slot, each replaced when killed.  They connect with dsn (WORKER_ROLE)."""

    def __init__(self, dsn: str, config: ChaosConfig, log_dir: Path) -> None:
        self.dsn = dsn
        self.config = config
        self.log_dir = log_dir
        self.slots: dict[int, WorkerProc] = {}
        self.every: list[WorkerProc] = []
        self.unexpected_exits: list[tuple[str, int | None]] = []

    def command(self, slot: int, name: str) -> tuple[list[str], dict[str, str]]:
        """The argv and the environment of the worker name, started in slot (a subclass may wrap them)."""
        c = self.config
        argv = pgjobq_command(
            "worker", "chaos.chaos_handlers:run",
            "--queue", QUEUE,
            "--concurrency", str(1 if slot < c.inline_slots else c.concurrency),
            "--batch", str(c.batch),
            "--lease-timeout", str(c.lease_of(slot)),
            "--reap-interval", str(c.reap_interval),
            "--poll-interval", str(c.poll_interval),
            "--log-level", "INFO",
        )  # fmt: skip
        return argv, process_env(self.dsn, PGJOBQ_WORKER_NAME=name)

    def spawn(self, slot: int) -> WorkerProc:
        name = f"w{len(self.every) + 1:03d}"
        log_path = self.log_dir / f"worker-{name}.log"
        log = log_path.open("wb")
        lease = self.config.lease_of(slot)
        argv, env = self.command(slot, name)
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProc(name, lease, process, log_path, log)
        self.slots[slot] = worker
        self.every.append(worker)
        return worker

    def start(self) -> None:
        for slot in range(self.config.workers):
            self.spawn(slot)

    def live(self) -> list[WorkerProc]:
        return [w for w in self.slots.values() if w.alive()]

    def leases(self) -> dict[str, float]:
        """The lease length of every worker started, by name."""
        return {w.name: w.lease for w in self.every}

    def replace_dead(self) -> None:
        """Start a replacement for any worker that exited without being told to (and note it)."""
        for slot, worker in list(self.slots.items()):
            if not worker.alive() and not worker.expected_exit:
                self.unexpected_exits.append((worker.name, worker.process.returncode))
                say(f"worker {worker.name} exited on its own (status {worker.process.returncode})")
                self.spawn(slot)

    def kill(self, worker: WorkerProc) -> WorkerProc:
        """SIGKILL worker and start its replacement."""
        worker.expected_exit = True
        os.kill(worker.pid, signal.SIGKILL)
        worker.process.wait()
        slot = next(s for s, w in self.slots.items() if w is worker)
        return self.spawn(slot)

    def terminate_all(self, timeout: float) -> dict[str, int | None]:
        """SIGTERM every live worker; their exit statuses (None: still running after timeout, then killed).

        A replacement started moments ago may still be importing: it is given
        until it has said it started (its signal handlers are in place by
        then), so that SIGTERM meets a worker, not an interpreter booting.
        """
        workers = list(self.slots.values())

        def started() -> bool:
            return all("started on queue" in w.log_text() for w in workers if w.alive())

        wait_until(started, timeout, interval=0.5)
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
                worker.process.kill()
                worker.process.wait()
            worker.log.close()


# -- producer --------------------------------------------------------------


class Producer(threading.Thread):
    """Enqueues the jobs steadily over produce_seconds; keeps every id acknowledged by a commit.

    Each batch is one transaction of up to three jobq.enqueue_many: the
    ordinary jobs, the jobs failing on purpose (max_attempts 1), and the
    keyed jobs (unique_keys), whose scope and on_conflict are drawn per
    batch.  A keyed enqueue may be given the id of the job already holding
    its key (a conflict): acked then holds that id again.
    """

    def __init__(self, dsn: str, config: ChaosConfig, id_log: Path) -> None:
        super().__init__(name="producer", daemon=True)
        self.dsn = dsn
        self.config = config
        self.id_log = id_log
        self.acked: list[int] = []  # in the order given, an id again for each conflict it won
        self.failed_batches = 0  # transactions that raised (their jobs may or may not exist)
        self.keyed = 0  # keyed enqueues committed
        self.conflicts = 0  # of which were given a job that held the key already
        self.variants: dict[tuple[str, str], int] = {}  # keyed enqueues by (unique_scope, on_conflict)
        self._newest = 0  # the highest id acknowledged so far
        # (payload number, id given) of each committed replace of an active-scope key: the job given must
        # run that payload or a later one (a later replace's, whose number is higher)
        self.replaced: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._abort = threading.Event()
        self._rng = random.Random(config.seed)

    def abort(self) -> None:
        self._abort.set()

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:
            self.error = exc

    def _payload(self, n: int) -> dict[str, Any]:
        c = self.config
        low, high = c.handler_ms
        payload: dict[str, Any] = {
            "n": n,
            "ms": self._rng.randint(low, high),
            "mode": "effects" if n % 2 == 0 else "plain",
            "fail": n % c.fail_every == 7,
        }
        if n % c.result_every == 0:
            payload["result"] = True
        if n % c.snooze_every in (4, 5):
            payload["snooze"] = 1 + (n // c.snooze_every) % 2  # snoozes at its first one or two claims
            payload["snooze_ms"] = self._rng.randint(*c.snooze_ms)
        return payload

    def _keyed(self, n: int) -> bool:
        return n % self.config.key_every in (5, 6)  # never a job failing on purpose (n % 50 == 7)

    def _enqueue_keyed(
        self, conn: psycopg.Connection[Any], payloads: list[dict[str, Any]]
    ) -> tuple[list[int], tuple[str, str]]:
        """Enqueue payloads with unique keys in one enqueue_many; their ids and (scope, on_conflict)."""
        c = self.config
        scope = self._rng.choice(["active", "until_done"])
        on_conflict = self._rng.choice(["return", "replace"])
        space = c.active_keys if scope == "active" else c.until_done_keys
        keys = [f"{scope[0]}{self._rng.randrange(space)}" for _ in payloads]
        for payload, key in zip(payloads, keys, strict=True):
            payload["key"] = key
        run_at = datetime.now(timezone.utc) + timedelta(seconds=self._rng.uniform(0, c.keyed_delay))
        ids = pgjobq.enqueue_many(
            conn, QUEUE, payloads, max_attempts=c.max_attempts, run_at=run_at,
            unique_keys=keys, unique_scope=scope, on_conflict=on_conflict,
        )  # fmt: skip
        assert None not in ids, "neither return nor replace skips"
        return [i for i in ids if i is not None], (scope, on_conflict)

    def _note_replaces(
        self, payloads: list[dict[str, Any]], ids: list[int], variant: tuple[str, str]
    ) -> None:
        if variant == ("active", "replace"):
            self.replaced.extend((int(p["n"]), job_id) for p, job_id in zip(payloads, ids, strict=True))

    def _produce(self) -> None:
        c = self.config
        conn: psycopg.Connection[Any] | None = None
        numbered = 0  # payload numbers used, including those of failed transactions
        start = time.monotonic()
        with self.id_log.open("w") as id_log:
            while len(self.acked) < c.jobs and not self._abort.is_set():
                elapsed = time.monotonic() - start
                target = min(c.jobs, math.ceil(c.jobs * elapsed / c.produce_seconds))
                size = min(500, target - len(self.acked))
                if size <= 0:
                    time.sleep(0.02)
                    continue
                payloads = [self._payload(numbered + k) for k in range(size)]
                keyed = [p for p in payloads if self._keyed(p["n"])]
                numbered += size
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self.dsn, application_name="chaos producer")
                    with conn.transaction():
                        ids = pgjobq.enqueue_many(
                            conn,
                            QUEUE,
                            [p for p in payloads if not p["fail"] and not self._keyed(p["n"])],
                            max_attempts=c.max_attempts,
                        )
                        ids += pgjobq.enqueue_many(
                            conn, QUEUE, [p for p in payloads if p["fail"]], max_attempts=1
                        )
                        keyed_ids, variant = self._enqueue_keyed(conn, keyed) if keyed else ([], None)
                # 40001 (a unique enqueue that could not settle) and 40P01 are OperationalErrors too
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    self.failed_batches += 1
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.2)
                    continue
                # a conflict: given a job older than this transaction (ids come from one sequence,
                # and only this thread enqueues), or one this call was given already
                fresh: set[int] = set()
                for job_id in keyed_ids:
                    if job_id <= self._newest or job_id in fresh:
                        self.conflicts += 1
                    fresh.add(job_id)
                self._newest = max([self._newest, *ids, *keyed_ids])
                if variant is not None:
                    self._note_replaces(keyed, keyed_ids, variant)
                    self.keyed += len(keyed_ids)
                    self.variants[variant] = self.variants.get(variant, 0) + len(keyed_ids)
                ids += keyed_ids
                self.acked.extend(ids)  # committed: these ids are promised
                id_log.write("".join(f"{i}\n" for i in ids))
                id_log.flush()
        if conn is not None:
            conn.close()


# -- canceller ---------------------------------------------------------------

# jobq.cancel and the record of what it returned, in one statement (so one
# transaction): the record exists exactly when the cancel committed, also
# when the connection breaks before the reply.
CANCEL_AND_RECORD = """
WITH cancelled AS (
    SELECT c.id, c.status FROM jobq.cancel(%(ids)s::bigint[], %(force)s) AS c
)
INSERT INTO chaos.cancels (job_id, force, status)
SELECT c.id, %(force)s, c.status FROM cancelled AS c
RETURNING job_id, status
"""

# More than one job of a queue holding the same unique key now: a job that
# became a key's holder (chaos.holders, the last time) counts while queued or
# running, or done when it took the key until_done, unless it gave the key
# up to a replacement (chaos.gave_up_key).  Sampled during the run, checked at
# the end.
SHARED_KEYS = """
WITH latest AS (
    SELECT DISTINCT ON (h.job_id) h.job_id, h.queue, h.unique_key, h.until_done
      FROM chaos.holders AS h
     ORDER BY h.job_id, h.seq DESC
), counting AS (
    SELECT l.* FROM latest AS l JOIN jobq.jobs AS j ON j.id = l.job_id
     WHERE j.status IN ('queued', 'running') OR (j.status = 'done' AND l.until_done)
), crowded AS (
    SELECT c.queue, c.unique_key FROM counting AS c GROUP BY c.queue, c.unique_key HAVING count(*) > 1
)
SELECT count(*) AS shared
  FROM (SELECT FROM counting AS c JOIN crowded USING (queue, unique_key)
         WHERE NOT EXISTS (SELECT FROM chaos.gave_up_key AS g
                            WHERE g.job_id = c.job_id AND g.queue = c.queue AND g.unique_key = c.unique_key)
         GROUP BY c.queue, c.unique_key
        HAVING count(*) > 1) AS d
"""


class Canceller(threading.Thread):
    """Cancels jobs with plain SQL, as the admin-level role CANCELLER_ROLE, until stopped.

    Every cancel_every it cancels, in one jobq.cancel, a random running job
    (of a live worker: one whose lease was taken or extended in the last 2 s)
    and a random one among the ids the producer was given last (most of
    them queued or scheduled; some running or finished already), with force
    a share force_share of the time; what jobq.cancel returned is recorded in
    chaos.cancels by the same statement (CANCEL_AND_RECORD).  Every
    sample_every it counts the unique keys held by more than one job
    (SHARED_KEYS).  Connection errors (restarts, deadlocks) skip a round.
    """

    def __init__(self, dsn: str, config: ChaosConfig, producer: Producer) -> None:
        super().__init__(name="canceller", daemon=True)
        self.dsn = dsn
        self.config = config
        self.producer = producer
        self.rng = random.Random(config.seed + 2)
        self.calls = 0  # jobq.cancel calls committed
        self.failed_calls = 0  # that raised (their cancels may or may not have committed)
        self.deadlocks = 0  # of which were deadlocks (40P01)
        self.refused: dict[str, int] = {}  # other errors (a broken jobq.cancel): first line -> how many
        self.returned: dict[tuple[bool, str], int] = {}  # (force, status returned) -> jobs
        self.samples = 0
        self.shared_seen = 0  # unique keys seen held twice, summed over the samples
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._conn: Db | None = None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._cancel_until_stopped()
        except BaseException as exc:
            self.error = exc
        finally:
            if self._conn is not None:
                self._conn.close()

    def _db(self) -> Db:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, row_factory=dict_row, application_name="chaos canceller",
                connect_timeout=2,
            )  # fmt: skip
        return self._conn

    def _cancel_until_stopped(self) -> None:
        c = self.config
        next_sample = time.monotonic() + c.sample_every
        while not self._stopping.wait(c.cancel_every):
            self._guarded(self._cancel_some)
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + c.sample_every
                self._guarded(self._sample)

    def _guarded(self, action: Callable[[], None]) -> None:
        """Run action; a connection error (or deadlock) skips it, another error is counted in refused."""
        try:
            action()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if isinstance(exc, psycopg.errors.DeadlockDetected):
                self.deadlocks += 1
            self.failed_calls += 1
            if self._conn is not None:
                self._conn.close()
            self._conn = None
        except psycopg.Error as exc:  # counted, and the run goes on: the invariant table says it
            message = f"{exc.sqlstate}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            self.refused[message] = self.refused.get(message, 0) + 1

    def _sample(self) -> None:
        self.shared_seen += int(self._db().execute(SHARED_KEYS).fetchall()[0]["shared"])
        self.samples += 1

    def _cancel_some(self) -> None:
        c = self.config
        conn = self._db()
        # running under a lease taken or extended in the last 2 s: the jobs of a killed or stopped
        # worker are left to the reapers (the reap invariants need them)
        running = conn.execute(
            "SELECT id FROM jobq.jobs WHERE queue = %s AND status = 'running'"
            " AND locked_at > statement_timestamp() - interval '2 seconds'",
            (QUEUE,),
        ).fetchall()
        ids = [self.rng.choice(running)["id"]] if running else []
        recent = self.producer.acked[-c.cancel_recent :]
        if recent:
            ids.append(self.rng.choice(recent))
        if not ids:
            return
        force = self.rng.random() < c.force_share
        rows = conn.execute(CANCEL_AND_RECORD, {"ids": sorted(set(ids)), "force": force}).fetchall()
        self.calls += 1
        for row in rows:
            key = (force, str(row["status"]))
            self.returned[key] = self.returned.get(key, 0) + 1


# -- chaos -----------------------------------------------------------------


class Chaos(threading.Thread):
    """Injects the faults on a schedule while the producer runs."""

    def __init__(
        self, config: ChaosConfig, server: ThrowawayPostgres, dsn: str, fleet: Fleet, producer: Producer
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.config = config
        self.server = server
        self.dsn = dsn
        self.fleet = fleet
        self.producer = producer
        self.rng = random.Random(config.seed + 1)
        self.kills = 0
        self.kills_holding = 0  # of them, of a worker seen holding running jobs
        self.killed_held = 0  # the running jobs those held
        self.terminated: dict[str, int] = {"worker": 0, "listen": 0}
        self.restarts: list[RestartRecord] = []
        self.stop: StopRecord | None = None
        self.error: BaseException | None = None
        self._conn: Db | None = None
        self._protected: WorkerProc | None = None
        self._protected_until = math.inf
        self._next_kill = 0.0
        self._next_terminate = 0.0

    def run(self) -> None:
        try:
            self._script()
        except BaseException as exc:
            self.error = exc
        finally:
            if self._conn is not None:
                self._conn.close()

    def _db(self) -> Db:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, row_factory=dict_row, application_name="chaos harness"
            )
        return self._conn

    def _query(self, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Run a query on the harness's connection, retrying through connection errors."""
        for attempt in range(100):
            try:
                return self._db().execute(query, params).fetchall()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                time.sleep(min(1.0, 0.05 * 2**attempt))
        raise RuntimeError("the harness lost the database for good")

    # -- the schedule --------------------------------------------------------

    def _script(self) -> None:
        c = self.config
        t0 = time.monotonic()
        self._next_kill = t0 + c.kill_every
        self._next_terminate = t0 + c.terminate_every / 2
        self._run_faults_until(t0 + 0.10 * c.produce_seconds)
        self._restart("fast")
        self._run_faults_until(max(time.monotonic() + 2, t0 + 0.35 * c.produce_seconds))
        self._stop_and_continue()
        self._run_faults_until(max(time.monotonic() + 2, t0 + 0.75 * c.produce_seconds))
        self._restart("immediate")
        # kills and terminations go on until the producer is done and the
        # backlog is down to what the workers can hold at once
        while self.producer.is_alive():
            self._run_faults_until(time.monotonic() + 0.5)
        deadline = time.monotonic() + c.drain_timeout
        while self._unfinished() > c.workers * c.concurrency and time.monotonic() < deadline:
            self._run_faults_until(time.monotonic() + 1)
        say("faults over")

    def _unfinished(self) -> int:
        rows = self._query("SELECT count(*) AS n FROM jobq.jobs WHERE status IN ('queued', 'running')")
        return int(rows[0]["n"])

    def _run_faults_until(self, deadline: float) -> None:
        """Kill a worker every kill_every and terminate a connection every terminate_every until deadline."""
        while (now := time.monotonic()) < deadline:
            self.fleet.replace_dead()
            if now >= self._next_kill:
                self._kill_one()
                self._next_kill = now + self.config.kill_every
            if now >= self._next_terminate:
                self._terminate_one()
                self._next_terminate = now + self.config.terminate_every
            time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))

    def _resume_faults(self) -> None:
        now = time.monotonic()
        self._next_kill = now + self.config.kill_every
        self._next_terminate = now + self.config.terminate_every

    def _killable(self) -> list[WorkerProc]:
        if self._protected is not None and self.stop is not None and late_refusals(self.stop):
            self._protected_until = min(self._protected_until, time.monotonic())  # it has spoken
        protected = self._protected if time.monotonic() < self._protected_until else None
        return [w for w in self.fleet.live() if w is not protected]

    # -- faults ------------------------------------------------------------

    def _kill_one(self) -> None:
        """SIGKILL a worker, one that holds running jobs when one can be found.

        Jobs of 1-20 ms leave most workers idle at any instant, and the kill
        of an idle worker leaves nothing to reap: a run of such kills once
        left the reap invariants without a single reap to judge.  So up to
        four workers, those holding jobs a moment ago first, are frozen
        (SIGSTOP) one at a time until one is seen holding a running job once
        its statements in flight have finished, and that one is killed; the
        others go on (SIGCONT).  When none holds one, the last is killed
        anyway.
        """
        candidates = self._killable()
        if not candidates:
            return
        holding = {
            r["locked_by"]
            for r in self._query(
                "SELECT DISTINCT locked_by FROM jobq.jobs WHERE status = 'running' AND queue = %s",
                (QUEUE,),
            )
        }
        self.rng.shuffle(candidates)
        candidates.sort(key=lambda w: w.name not in holding)
        tries = candidates[:4]
        for victim in tries:
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                time.sleep(0.1)  # statements in flight when it froze finish
                held = self._query(
                    "SELECT count(*) AS n FROM jobq.jobs WHERE status = 'running' AND locked_by = %s",
                    (victim.name,),
                )
                if held[0]["n"] > 0 or victim is tries[-1]:
                    self.fleet.kill(victim)
                    self.kills += 1
                    self.kills_holding += held[0]["n"] > 0
                    self.killed_held += held[0]["n"]
                    return
            finally:
                if victim.alive():
                    os.kill(victim.pid, signal.SIGCONT)

    def _terminate_one(self) -> None:
        rows = self._query(
            "SELECT pid, split_part(application_name, ' ', 2) AS kind FROM pg_stat_activity"
            " WHERE application_name LIKE 'pgjobq %%' AND datname = current_database()"
        )
        if rows:
            row = self.rng.choice(rows)
            done = self._query("SELECT pg_terminate_backend(%s) AS ok", (row["pid"],))
            if done[0]["ok"]:
                self.terminated[row["kind"]] = self.terminated.get(row["kind"], 0) + 1

    def _stop_and_continue(self) -> None:
        """SIGSTOP a worker that holds running jobs for stop_leases of its lease lengths, then SIGCONT it.

        The worker is one of the longest lease, so that the workers of
        shorter leases, reaping every second, must leave its jobs alone until
        its own lease has expired (the first half of the attempts insist on
        it; then any worker holding jobs will do).
        """
        c = self.config
        longest = max(c.leases)
        for attempt in range(200):
            holders = self._query(
                "SELECT locked_by FROM jobq.jobs WHERE status = 'running' AND queue = %s"
                " GROUP BY locked_by ORDER BY count(*) DESC",
                (QUEUE,),
            )
            live = {w.name: w for w in self._killable() if attempt >= 100 or w.lease == longest}
            victim = next((live[r["locked_by"]] for r in holders if r["locked_by"] in live), None)
            if victim is None:
                self._run_faults_until(time.monotonic() + 0.05)
                continue
            os.kill(victim.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            time.sleep(0.3)  # statements in flight when it froze finish
            held = self._query(
                "SELECT id, lease FROM jobq.jobs WHERE status = 'running' AND locked_by = %s",
                (victim.name,),
            )
            if not held:  # it finished its jobs just before freezing: let it go, pick again
                os.kill(victim.pid, signal.SIGCONT)
                continue
            say(f"SIGSTOP {victim.name} (lease {victim.lease:g} s) holding {len(held)} job(s)")
            self._protected, self._protected_until = victim, math.inf
            self._run_faults_until(stopped_at + c.stop_leases * victim.lease)
            os.kill(victim.pid, signal.SIGCONT)
            stopped_for = time.monotonic() - stopped_at
            say(f"SIGCONT {victim.name} after {stopped_for:.1f} s")
            self.stop = StopRecord(
                worker=victim.name,
                lease=victim.lease,
                held=[(r["id"], r["lease"]) for r in held],
                stopped_for=stopped_for,
                log_offset=victim.log_size(),
                log_path=victim.log_path,
            )
            # spared until it has reported a late result (or for a minute)
            self._protected_until = time.monotonic() + 60
            return
        raise RuntimeError("no worker held a running job to be stopped")

    def connected(self) -> bool:
        """True when every live worker has its connection open (replacements take a while to start)."""
        names = [f"pgjobq worker {w.name}" for w in self.fleet.live()]
        rows = self._query(
            "SELECT count(DISTINCT application_name) AS n FROM pg_stat_activity"
            " WHERE application_name = ANY(%s)",
            (names,),
        )
        return bool(rows[0]["n"] == len(names))

    def _restart(self, mode: str) -> None:
        """Restart PostgreSQL with pg_ctl -m mode; measure the workers while it is down and after.

        Measured are the workers running at the time, once each has connected:
        a replacement still starting up would measure its own start.
        """
        deadline = time.monotonic() + 60
        while not self.connected() and time.monotonic() < deadline:
            self.fleet.replace_dead()
            time.sleep(0.1)
        measured = self.fleet.live()
        if self._conn is not None:
            self._conn.close()
        say(f"restart PostgreSQL -m {mode}")
        self.server.stop(mode)
        # down from here until pg_ctl start: what the workers spend meanwhile is
        # measured.  Not until `up` below: the server accepts connections a
        # moment before pg_ctl start returns and the harness gets in, and a
        # worker back by then logs its work (acknowledgements, reaps).
        down = time.time()
        cpu_before = {w.name: cpu_seconds(w.pid) for w in measured}
        log_before = {w.name: w.log_size() for w in measured}
        time.sleep(self.config.down_for)
        cpu = {w.name: cpu_seconds(w.pid) - cpu_before[w.name] for w in measured}
        log_lines = {w.name: w.lines_between(log_before[w.name], w.log_size()) for w in measured}
        self.server.start()
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                time.sleep(0.01)
        up = time.time()
        reconnect = self._wait_for_claims(measured, down, up)
        record = RestartRecord(mode, up - down, reconnect, cpu, log_lines)
        self.restarts.append(record)
        back = [s for s in reconnect.values() if s is not None]
        say(
            f"PostgreSQL down {record.outage:.1f} s; {len(back)}/{len(measured)} workers back,"
            f" slowest after {max(back, default=math.nan):.1f} s"
        )
        self._resume_faults()

    def _wait_for_claims(self, workers: list[WorkerProc], down: float, up: float) -> dict[str, float | None]:
        """Seconds from `up` to each worker's first claim (or its first statement on a new connection).

        Looked for since the server went `down`: a worker may reconnect in
        the moment between the server's accepting connections and `up` (the
        harness's own connection), and when the queue is empty then, its
        connection is all there is to see.  Such a worker counts 0 s.
        """
        since = datetime.fromtimestamp(down, timezone.utc)
        names = [w.name for w in workers]
        found: dict[str, float | None] = dict.fromkeys(names)
        deadline = up + self.config.reconnect_limit + 15  # watch past the limit to report how late
        while time.time() < deadline and any(found[n] is None for n in names):
            rows = self._query(
                "SELECT locked_by AS name, extract(epoch FROM min(at)) AS at FROM chaos.transitions"
                " WHERE at > %s AND new_status = 'running' AND new_lease <> old_lease"
                "   AND locked_by = ANY(%s) GROUP BY locked_by"
                " UNION ALL"
                " SELECT substr(application_name, length('pgjobq worker ') + 1),"
                "        extract(epoch FROM backend_start)"
                "   FROM pg_stat_activity"
                "  WHERE application_name = ANY(%s) AND backend_start > %s AND state = 'idle'"
                "    AND query LIKE '%%jobq.claim%%'",
                (since, names, [f"pgjobq worker {n}" for n in names], since),
            )
            for row in rows:
                seconds = max(0.0, float(row["at"]) - up)
                current = found.get(row["name"])
                if row["name"] in found and (current is None or seconds < current):
                    found[row["name"]] = seconds
            time.sleep(0.2)
        return found


# -- checks ----------------------------------------------------------------

# An acknowledged job is accounted for when it is done (failed, for a job
# failing on purpose), or cancelled after a cancel that returned cancelled
# or cancel_requested for it, or failed after giving up its retries to a
# replacement (on_conflict replace met it running: a lost attempt then ends
# it).  And no job, acknowledged or not, is cancelled that was not cancelled.
# acked: the ids judged (chaos.acked), which must be every id the producer
# was given: an empty chaos.acked would judge nothing.
LOST = """
WITH judged AS (
    SELECT j.id, j.status,
           j.id IS NOT NULL AND CASE j.status
               WHEN 'done' THEN (j.payload->>'fail')::boolean IS NOT TRUE
               WHEN 'failed' THEN (j.payload->>'fail')::boolean IS TRUE
                                  OR EXISTS (SELECT FROM chaos.gave_up_key AS g WHERE g.job_id = j.id)
               WHEN 'cancelled' THEN EXISTS (SELECT FROM chaos.cancels AS c
                                              WHERE c.job_id = j.id
                                                AND c.status IN ('cancelled', 'cancel_requested'))
                                     OR EXISTS (SELECT FROM chaos.gave_up_key AS g WHERE g.job_id = j.id)
               ELSE false END AS accounted
      FROM chaos.acked AS a LEFT JOIN jobq.jobs AS j ON j.id = a.id
)
SELECT count(*) AS acked,
       count(*) FILTER (WHERE NOT accounted) AS lost,
       count(*) FILTER (WHERE id IS NULL) AS missing,
       count(*) FILTER (WHERE accounted AND status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE accounted AND status = 'failed') AS failed,
       (SELECT count(*) FROM jobq.jobs AS x
         WHERE x.status = 'cancelled'
           AND NOT EXISTS (SELECT FROM chaos.cancels AS c
                            WHERE c.job_id = x.id AND c.status IN ('cancelled', 'cancel_requested'))
           AND NOT EXISTS (SELECT FROM chaos.gave_up_key AS g WHERE g.job_id = x.id)) AS spurious
  FROM judged
"""

DOUBLE_CLAIMS = """
WITH claims AS (
    SELECT job_id, new_lease AS lease, seq, old_status, new_status, old_lease
      FROM chaos.transitions
     WHERE new_lease <> old_lease
), ends AS (
    SELECT job_id, old_lease AS lease, min(seq) AS seq
      FROM chaos.transitions
     WHERE old_status = 'running' AND new_status <> 'running'
     GROUP BY job_id, old_lease
), spans AS (
    SELECT c.job_id, c.lease, c.seq AS began, e.seq AS ended
      FROM claims AS c LEFT JOIN ends AS e USING (job_id, lease)
)
SELECT
    (SELECT count(*) FROM spans AS a JOIN spans AS b
        ON a.job_id = b.job_id AND a.lease < b.lease
       AND b.began < coalesce(a.ended, 9223372036854775807)) AS overlaps,
    (SELECT count(*) FROM claims
      WHERE NOT (old_status = 'queued' AND new_status = 'running' AND lease = old_lease + 1)) AS bad_claims,
    (SELECT count(*) FROM chaos.transitions
      WHERE new_status = 'running' AND old_status <> 'running' AND new_lease = old_lease) AS unleased_claims,
    (SELECT count(*) FROM jobq.jobs AS j
       LEFT JOIN (SELECT job_id, count(*) AS n FROM claims GROUP BY job_id) AS c ON c.job_id = j.id
      WHERE j.lease <> coalesce(c.n, 0)) AS log_gaps
"""

STALE_COMPLETIONS = """
SELECT count(*) FILTER (
           WHERE old_status <> 'running' OR old_lease <> new_lease
              OR NOT EXISTS (SELECT FROM chaos.executions AS e
                              WHERE e.job_id = t.job_id AND e.lease = t.old_lease AND e.finished_at <= t.at)
       ) AS stale,
       count(*) - count(DISTINCT job_id) AS second_completions
  FROM chaos.transitions AS t
 WHERE new_status = 'done'
"""

DUPLICATES = """
WITH per_lease AS (
    SELECT job_id, lease, count(*) AS n, lease < max(lease) OVER (PARTITION BY job_id) AS superseded
      FROM chaos.executions
     GROUP BY job_id, lease
), given_up AS (
    -- the lease was reaped, or its handler snoozed and jobq.snooze queued the job again
    SELECT job_id, old_lease AS lease FROM chaos.transitions WHERE reaped
    UNION
    SELECT t.job_id, t.old_lease
      FROM chaos.transitions AS t
      JOIN chaos.executions AS e ON e.job_id = t.job_id AND e.lease = t.old_lease AND e.outcome = 'snoozed'
     WHERE t.old_status = 'running' AND t.new_status = 'queued' AND NOT t.reaped
)
SELECT (SELECT count(*) FROM chaos.executions) AS executions,
       (SELECT count(*) - count(DISTINCT job_id) FROM chaos.executions) AS duplicates,
       (SELECT count(*) FROM per_lease WHERE n > 1) AS same_lease,
       (SELECT count(*) FROM per_lease AS p LEFT JOIN given_up AS g USING (job_id, lease)
         WHERE p.superseded AND g.job_id IS NULL) AS unexplained
"""

EFFECTS = """
WITH per_job AS (
    SELECT j.id, j.status, count(f.token) AS effects,
           count(f.token) FILTER (WHERE f.lease = j.lease) AS current
      FROM jobq.jobs AS j LEFT JOIN chaos.effects AS f ON f.job_id = j.id
     WHERE j.payload->>'mode' = 'effects'
     GROUP BY j.id, j.status
)
SELECT count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'done' AND NOT (effects = 1 AND current = 1))
     + count(*) FILTER (WHERE status <> 'done' AND effects > 0) AS wrong
  FROM per_job
"""

COUNTS = """
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE status IN ('queued', 'running')) AS unfinished,
       count(*) FILTER (WHERE payload->>'mode' = 'effects') AS effects_mode,
       (SELECT count(*) FROM chaos.transitions WHERE reaped) AS reaps,
       (SELECT count(*) FROM chaos.acked) AS acked
  FROM jobq.jobs
"""

# A reap takes a lease only once it has expired: jobq.reap compares the
# expiry with its statement's clock, the trigger logs the change later still.
EARLY_REAPS = """
SELECT count(*) AS reaps,
       count(*) FILTER (WHERE (at > old_lease_expires_at) IS NOT TRUE) AS early,
       extract(epoch FROM min(at - old_lease_expires_at))::float8 AS least_margin
  FROM chaos.transitions
 WHERE reaped
"""

# Every claim and every heartbeat (running -> running, same lease, a new
# expiry: not a cancel request, nor a key given up) leaves the job under a
# lease of its worker's own length: leases[i] seconds for the worker
# names[i] (a name not among them counts as wrong).
LEASE_LENGTHS = """
WITH fleet AS (
    SELECT f.worker, make_interval(secs => f.seconds) AS length
      FROM unnest(%(names)s::text[], %(seconds)s::float8[]) AS f(worker, seconds)
), leased AS (
    SELECT t.new_lease <> t.old_lease AS claim, t.new_lease_expires_at - t.locked_at AS length,
           f.length AS expected
      FROM chaos.transitions AS t LEFT JOIN fleet AS f ON f.worker = t.locked_by
     WHERE t.new_status = 'running'
       AND (t.new_lease <> t.old_lease OR t.new_lease_expires_at IS DISTINCT FROM t.old_lease_expires_at)
)
SELECT count(*) FILTER (WHERE claim) AS claims,
       count(*) FILTER (WHERE NOT claim) AS heartbeats,
       count(*) FILTER (WHERE length IS DISTINCT FROM expected) AS wrong,
       (SELECT coalesce(jsonb_object_agg(seconds, n), '{}')
          FROM (SELECT extract(epoch FROM length)::float8 AS seconds, count(*) AS n
                  FROM leased WHERE claim GROUP BY 1) AS per_length) AS claims_by_length
  FROM leased
"""

# Who changed the jobs: the login role of the session (session_user), whose
# SECURITY DEFINER calls of the extension's functions run as their owner.
# Besides the workers' role, only two may, and only so: the canceller
# (cancelling a queued or running job, or asking a running one to stop,
# lease untouched) and the producer (a running holder giving up its key to
# a replacement).  NULL names no role.
ROLES = """
SELECT count(*) AS changes,
       count(*) FILTER (WHERE (
           by_role = %(role)s
           OR (by_role = %(canceller)s AND old_lease = new_lease
               AND old_lease_expires_at IS NOT DISTINCT FROM new_lease_expires_at
               AND ((old_status IN ('queued', 'running') AND new_status = 'cancelled')
                    OR (old_status = 'running' AND new_status = 'running'
                        AND new_cancel_requested AND NOT old_cancel_requested)))
           OR (by_role = %(producer)s AND old_status = 'running' AND new_status = 'running'
               AND old_lease = new_lease
               AND (new_max_attempts < old_max_attempts
                    OR (new_cancel_requested AND NOT old_cancel_requested))
               AND old_lease_expires_at IS NOT DISTINCT FROM new_lease_expires_at)
       ) IS NOT TRUE) AS foreign,
       count(*) FILTER (WHERE by_role = %(canceller)s) AS by_canceller,
       count(*) FILTER (WHERE by_role = %(producer)s) AS by_producer,
       count(*) FILTER (WHERE reaped AND by_role = %(role)s) AS reaps_by_role
  FROM chaos.transitions
"""

# (1) Unique keys: no two jobs of a queue hold one key at once.  Each time
# a job becomes a key's holder (chaos.holders: its insert with the key, or
# its taking over the key's row, at that statement's clock), the holder
# before it must have left the scope first: failed, cancelled, done (unless
# it took the key until_done), or given the key up to a replacement (while
# running: by losing its retries, or by a cancel request, in the transaction
# that gave the key to the next holder: chaos.gave_up_key).  Its leaving is
# logged before it commits, and the taker, which judges it committed, logs
# after: so a sound history never shows a taker before the leaving.  Plus:
# keyed jobs (a key in their payload) that never held their key.
# (SHARED_KEYS counts the holders now.)
UNIQUE = """
WITH chain AS (
    SELECT h.*, lead(h.job_id) OVER w AS next_job, lead(h.at) OVER w AS next_at,
           lead(h.xid) OVER w AS next_xid
      FROM chaos.holders AS h
    WINDOW w AS (PARTITION BY h.queue, h.unique_key ORDER BY h.seq)
)
SELECT count(*) AS holders,
       count(DISTINCT c.unique_key) AS keys,
       count(*) FILTER (WHERE c.until_done) AS until_done,
       count(*) FILTER (
           WHERE c.next_job IS NOT NULL AND c.next_job <> c.job_id
             AND NOT EXISTS (SELECT FROM chaos.transitions AS t
                              WHERE t.job_id = c.job_id AND t.at < c.next_at
                                AND (t.new_status IN ('failed', 'cancelled')
                                     OR (t.new_status = 'done' AND NOT c.until_done)))
             AND NOT EXISTS (SELECT FROM chaos.given_up AS g
                              WHERE g.job_id = c.job_id AND g.xid = c.next_xid AND g.at <= c.next_at)
       ) AS overlaps,
       (SELECT count(*) FROM chaos.gave_up_key) AS given_up,
       (SELECT count(*) FROM jobq.jobs AS j
         WHERE j.payload ? 'key' AND NOT EXISTS (SELECT FROM chaos.holders AS x WHERE x.job_id = j.id))
           AS unlogged
  FROM chain AS c
"""

# A replace (on_conflict => 'replace', scope active) never drops its
# payload: the job it was given runs it (a job inserted with it, or a queued
# holder that took it), or a later replace's (a higher number).  Not a done
# holder's old payload: that one no longer held the key.
REPLACES = """
SELECT count(*) AS replaces,
       count(*) FILTER (WHERE j.id IS NULL OR (j.payload->>'n')::bigint < r.n) AS dropped,
       count(*) FILTER (WHERE (j.payload->>'n')::bigint = r.n) AS own,
       count(*) FILTER (WHERE j.id IS NULL OR (j.payload->>'n')::bigint < r.n AND j.status = 'done')
           AS dropped_done
  FROM chaos.replaced AS r LEFT JOIN jobq.jobs AS j ON j.id = r.job_id
"""

# (2) A job whose cancel with force returned 'cancelled' never becomes done,
# then or later (it was queued, scheduled, running or cancelled already, so
# never done before either).  while_running: those the canceller's own
# change took from running to cancelled.
FORCED = """
SELECT count(*) AS forced,
       count(*) FILTER (WHERE EXISTS (SELECT FROM chaos.transitions AS t
                                       WHERE t.job_id = f.job_id AND t.old_status = 'running'
                                         AND t.new_status = 'cancelled' AND t.by_role = %(canceller)s))
           AS while_running,
       count(*) FILTER (WHERE j.status IS DISTINCT FROM 'cancelled') AS not_cancelled,
       count(*) FILTER (WHERE j.status = 'done'
                           OR EXISTS (SELECT FROM chaos.transitions AS t
                                       WHERE t.job_id = f.job_id AND t.new_status = 'done')) AS done
  FROM (SELECT DISTINCT c.job_id FROM chaos.cancels AS c WHERE c.force AND c.status = 'cancelled') AS f
  LEFT JOIN jobq.jobs AS j ON j.id = f.job_id
"""

# (3) Results: a done job holds what its handler returned for its payload
# (chaos.chaos_handlers.result_of: {"echo": n} or nothing); no other job
# holds one.  {result}: the job's result, wherever the extension keeps it.
RESULTS = """
SELECT count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'done' AND result IS NOT NULL) AS with_result,
       count(*) FILTER (WHERE status = 'done'
                          AND result IS DISTINCT FROM CASE WHEN (payload->>'result')::boolean
                                                           THEN jsonb_build_object('echo', payload->'n') END)
     + count(*) FILTER (WHERE status <> 'done' AND result IS NOT NULL) AS wrong
  FROM (SELECT j.status, j.payload, {result} AS result FROM jobq.jobs AS j) AS j
"""


def result_column(conn: Db) -> str:
    """The SQL for the result of the job j: a column of jobq.jobs, or a row of jobq.results (0.6.0 keeps
    it in one or the other)."""
    row = _one(conn, "SELECT to_regclass('jobq.results') IS NOT NULL AS separate")
    return "(SELECT r.result FROM jobq.results AS r WHERE r.id = j.id)" if row["separate"] else "j.result"


# (4) Cancelled is absorbing: from a job's first transition to cancelled on,
# no transition of it (so no claim), no execution under a later lease, and
# it ends cancelled.  Plus jobs cancelled without a logged transition.
ABSORBING = """
WITH first AS (
    SELECT DISTINCT ON (job_id) job_id, seq, new_lease AS lease, old_status
      FROM chaos.transitions
     WHERE new_status = 'cancelled'
     ORDER BY job_id, seq
)
SELECT count(*) AS cancelled,
       count(*) FILTER (WHERE f.old_status = 'running') AS from_running,
       count(*) FILTER (WHERE j.status IS DISTINCT FROM 'cancelled') AS not_cancelled,
       (SELECT count(*) FROM chaos.transitions AS t JOIN first AS x USING (job_id) WHERE t.seq > x.seq)
           AS changed_after,
       (SELECT count(*) FROM chaos.executions AS e JOIN first AS x USING (job_id) WHERE e.lease > x.lease)
           AS claimed_after,
       (SELECT count(*) FROM jobq.jobs AS y
         WHERE y.status = 'cancelled' AND NOT EXISTS (SELECT FROM first AS x WHERE x.job_id = y.id))
           AS unlogged
  FROM first AS f LEFT JOIN jobq.jobs AS j ON j.id = f.job_id
"""

# A running job asked to stop (a cancel without force) ends done (its handler
# finished) or cancelled (it stopped, or its lease ended), and is never
# claimed again.
CANCEL_REQUESTS = """
WITH asked AS (
    SELECT DISTINCT ON (job_id) job_id, new_lease AS lease
      FROM chaos.transitions
     WHERE old_status = 'running' AND new_status = 'running'
       AND new_cancel_requested AND NOT old_cancel_requested
     ORDER BY job_id, seq
)
SELECT count(*) AS asked,
       count(*) FILTER (WHERE j.status = 'done') AS done,
       count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE j.status IS NULL OR j.status NOT IN ('done', 'cancelled')) AS wrong_end,
       (SELECT count(*) FROM chaos.executions AS e JOIN asked AS a USING (job_id) WHERE e.lease > a.lease)
           AS rerun
  FROM asked AS a LEFT JOIN jobq.jobs AS j ON j.id = a.job_id
"""

# Snoozes give the attempt back (attempts one less than at the claim), and no
# job is claimed before its run_at (snoozed, retried, or scheduled by a keyed
# enqueue): a claim's clock is after its statement's, which must be at or
# after run_at.
SNOOZES = """
SELECT (SELECT count(*) FROM chaos.executions WHERE outcome = 'snoozed') AS snoozed,
       count(*) FILTER (WHERE s.snooze) AS snoozes,
       count(*) FILTER (WHERE s.snooze AND s.attempts <> s.old_attempts - 1) AS counted,
       (SELECT count(*) FROM chaos.transitions AS c WHERE c.new_lease <> c.old_lease AND c.at < c.run_at)
           AS early_claims,
       (SELECT count(*) FROM chaos.transitions AS c WHERE c.new_lease <> c.old_lease) AS claims
  FROM (SELECT t.attempts, t.old_attempts,
               EXISTS (SELECT FROM chaos.executions AS e
                        WHERE e.job_id = t.job_id AND e.lease = t.old_lease AND e.outcome = 'snoozed')
                   AS snooze
          FROM chaos.transitions AS t
         WHERE t.old_status = 'running' AND t.new_status = 'queued' AND NOT t.reaped) AS s
"""

# What role may do beyond the worker level: attributes, memberships, any
# privilege on the jobs table or its sequence, and jobq functions besides
# the worker level's.
PRIVILEGES = """
SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls AS attributes,
       (SELECT count(*) FROM pg_auth_members AS m WHERE m.member = r.oid) AS memberships,
       has_table_privilege(r.oid, 'jobq.jobs',
                           'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
           OR has_sequence_privilege(r.oid, 'jobq.jobs_id_seq', 'USAGE, SELECT, UPDATE') AS table_access,
       ARRAY(SELECT p.oid::regprocedure::text
               FROM pg_proc AS p
              WHERE p.pronamespace = 'jobq'::regnamespace
                AND has_function_privilege(r.oid, p.oid, 'EXECUTE')
                AND p.oid <> ALL (jobq._level_functions('worker'))
              ORDER BY 1) AS other_functions
  FROM pg_roles AS r
 WHERE r.rolname = %(role)s
"""

# The worker's word for a late report refused (lost: a warning; void: the job's cancel had been
# heard, so most likely cancelled by force meanwhile; gone, as presumed: the worker had presumed the
# lease lost while it could not reach the database, and a hand-back of a stopped handler's job is
# refused as a late failure would be)
REFUSED = re.compile(
    r"job (\d+): lease (\d+) (?:lost|void \(cancelled meanwhile\?\)|gone, as presumed); "
    r"(?:(?:result|failure|snooze) discarded|stopped \(|not started)"
)


def late_refusals(stop: StopRecord) -> int:
    """How many of the jobs it held the stopped worker has since logged as refused (lease lost)."""
    late_text = stop.log_path.read_bytes()[stop.log_offset :].decode(errors="replace")
    held = set(stop.held)
    return sum((int(job), int(lease)) in held for job, lease in REFUSED.findall(late_text))


def _one(conn: Db, query: str, params: tuple[Any, ...] | Mapping[str, Any] | None = None) -> dict[str, Any]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def evidence(
    conn: Db,
    leases: Mapping[str, float],
    worker_role: str,
    canceller_role: str | None = None,
    producer_role: str | None = None,
) -> dict[str, dict[str, Any]]:
    """What the evidence tables say: one row of numbers per query above, by name.

    leases: every worker's lease length in seconds, by name; worker_role:
    the login role that alone should have worked the jobs; canceller_role
    and producer_role: the roles that may also cancel them, and make a
    running holder give up its key (None: no role may).
    """
    for ddl in (
        "CREATE INDEX IF NOT EXISTS transitions_job_idx ON chaos.transitions (job_id, seq)",
        "CREATE INDEX IF NOT EXISTS executions_job_idx ON chaos.executions (job_id, lease)",
        "CREATE INDEX IF NOT EXISTS effects_job_idx ON chaos.effects (job_id)",
        "CREATE INDEX IF NOT EXISTS cancels_job_idx ON chaos.cancels (job_id)",
        "CREATE INDEX IF NOT EXISTS holders_job_idx ON chaos.holders (job_id)",
        "ANALYZE chaos.transitions, chaos.executions, chaos.effects, chaos.acked, chaos.holders,"
        " chaos.given_up, chaos.cancels, chaos.replaced",
    ):
        conn.execute(ddl)
    roles = {"role": worker_role, "canceller": canceller_role, "producer": producer_role}
    queries: dict[str, tuple[str, dict[str, Any] | None]] = {
        "lost": (LOST, None),
        "claims": (DOUBLE_CLAIMS, None),
        "stale": (STALE_COMPLETIONS, None),
        "dups": (DUPLICATES, None),
        "effects": (EFFECTS, None),
        "counts": (COUNTS, None),
        "reaps": (EARLY_REAPS, None),
        "leases": (LEASE_LENGTHS, {"names": list(leases), "seconds": list(leases.values())}),
        "roles": (ROLES, roles),
        "unique": (UNIQUE, None),
        "shared": (SHARED_KEYS, None),
        "replaces": (REPLACES, None),
        "forced": (FORCED, {"canceller": canceller_role}),
        "results": (RESULTS.replace("{result}", result_column(conn)), None),
        "absorbing": (ABSORBING, None),
        "requests": (CANCEL_REQUESTS, None),
        "snoozes": (SNOOZES, None),
    }
    return {name: _one(conn, query, params) for name, (query, params) in queries.items()}


def read_back(conn: Db, sample: int, seed: int) -> tuple[int, list[int]]:
    """Read the results of up to sample done jobs back through pgjobq.job; (how many read, the wrong ones).

    Each must equal what the handler returns for the job's payload
    (result_of); the jobs are drawn at random among the done ones, half of
    them with a result.
    """
    result = result_column(conn)
    rows = conn.execute(
        f"(SELECT id, payload FROM jobq.jobs AS j WHERE status = 'done' AND {result} IS NOT NULL"
        "  ORDER BY hashint8(id # %(seed)s) LIMIT %(half)s)"
        " UNION ALL "
        f"(SELECT id, payload FROM jobq.jobs AS j WHERE status = 'done' AND {result} IS NULL"
        "  ORDER BY hashint8(id # %(seed)s) LIMIT %(half)s)",
        {"seed": seed, "half": sample // 2},
    ).fetchall()
    wrong = []
    for row in rows:
        state = pgjobq.job(conn, row["id"])
        if state.status != "done" or state.result != result_of(row["payload"]):
            wrong.append(int(row["id"]))
    return len(rows), wrong


def privileges(conn: Db, role: str) -> dict[str, Any]:
    """What role may do beyond the worker level (PRIVILEGES); raises if there is no such role."""
    return _one(conn, PRIVILEGES, {"role": role})


def core_invariants(found: Mapping[str, Mapping[str, Any]], acked: int) -> dict[str, Invariant]:
    """The invariants every chaos run checks, by key (CORE_INVARIANTS), from its evidence(): nothing lost
    of the acked ids the producer was given (each once; chaos.acked must hold as many), no overlapping
    leases, no stale or second completion, every duplicate execution explained, no early reap, one effect
    per done job."""
    lost, claims, stale, dups, effects, reaps = (
        found[k] for k in ("lost", "claims", "stale", "dups", "effects", "reaps")
    )
    double = claims["overlaps"] + claims["bad_claims"] + claims["unleased_claims"]
    unexplained = dups["same_lease"] + dups["unexplained"]
    margin = "" if reaps["least_margin"] is None else f"; closest {reaps['least_margin']:.3f} s after expiry"
    invariants = [
        Invariant(
            "lost", "lost jobs (acknowledged id not ended by its rules; cancelled unasked)",
            f"{lost['lost']} of {lost['acked']:,} judged ({lost['missing']} missing; {lost['spurious']}"
            f" cancelled unasked; accounted for: {lost['cancelled']} cancelled, {lost['failed']} failed)",
            f"0 of {acked:,}", lost["lost"] == 0 and lost["spurious"] == 0 and lost["acked"] == acked > 0,
        ),
        Invariant(
            "double_claims", "double claims (overlapping or out-of-order leases)",
            f"{double} ({claims['overlaps']} overlaps, {claims['bad_claims']} bad claims,"
            f" {claims['unleased_claims']} unleased; {claims['log_gaps']} log gaps)",
            "0", double == 0 and claims["log_gaps"] == 0,
        ),
        Invariant(
            "stale_completions", "stale completions accepted",
            str(stale["stale"]), "0", stale["stale"] == 0,
        ),
        Invariant(
            "second_completions", "second running -> done transitions",
            str(stale["second_completions"]), "0", stale["second_completions"] == 0,
        ),
        Invariant(
            "duplicates_explained", "duplicate executions not explained by a reap",
            f"{unexplained} of {dups['duplicates']} ({dups['same_lease']} under one lease)",
            "0", unexplained == 0,
        ),
        Invariant(
            "reaped_valid_lease", "reaps of a lease that had not expired (at <= its lease_expires_at)",
            f"{reaps['early']} of {reaps['reaps']} reaps{margin}", "0",
            reaps["early"] == 0 and reaps["reaps"] > 0,
        ),
        Invariant(
            "effects_exactly_once", "effects-mode jobs without exactly one effect per done job",
            f"{effects['wrong']} of {effects['done']} done", "0",
            effects["wrong"] == 0 and effects["done"] > 0,
        ),
    ]  # fmt: skip
    return {invariant.key: invariant for invariant in invariants}


@dataclass(frozen=True)
class Seen:
    """What a chaos run saw besides its evidence tables, as judge() weighs it: the producer's, the
    canceller's and the chaos thread's tallies, what the workers' logs and exit statuses say, and what
    was read back through the client."""

    acked: int  # ids the producer was given, each once (chaos.acked must hold as many)
    conflicts: int  # keyed enqueues given a job that held the key already
    variants: int  # kinds of keyed enqueue used, of the four (unique_scope, on_conflict)
    cancel_calls: int  # jobq.cancel calls committed
    cancel_refused: dict[str, int]  # jobq.cancel calls refused with an error (not a connection's): by message
    samples: int  # the canceller's samples of the unique keys held twice
    shared_seen: int  # unique keys seen held twice, summed over the samples
    read: int  # done jobs whose result was read back through pgjobq.job (read_back)
    misread: list[int]  # of them, those whose result was not the handler's
    beyond: list[str]  # what WORKER_ROLE may do beyond the worker level (privileges), in words
    not_reaping: int  # the workers' log lines 'not reaping:' (jobq.reap refused)
    kills: int
    terminated: int  # worker connections terminated
    stop: StopRecord | None  # the SIGSTOP
    late_refused: int  # the SIGSTOPped worker's late completes refused, by its log (late_refusals)
    restarts: list[RestartRecord]
    exits: dict[str, int | None]  # every worker's exit status after SIGTERM (None: still running)
    unexpected_exits: list[tuple[str, int | None]]  # workers that exited on their own


def judge(found: Mapping[str, Mapping[str, Any]], config: ChaosConfig, seen: Seen) -> list[Invariant]:
    """Every invariant of a chaos run (INVARIANTS), from its evidence() and what it saw besides."""
    core = core_invariants(found, seen.acked)
    counts, leases, roles = (found[k] for k in ("counts", "leases", "roles"))
    unique, forced, results, absorbing, requests, snoozes, replaces = (
        found[k] for k in ("unique", "forced", "results", "absorbing", "requests", "snoozes", "replaces")
    )
    shared_now = found["shared"]["shared"]
    by_length = {float(k): int(n) for k, n in leases["claims_by_length"].items()}
    unused = [lease for lease in config.leases if not by_length.get(lease)]
    restarts, stop = seen.restarts, seen.stop
    modes = sorted(r.mode for r in restarts)
    slowest = [max((s if s is not None else math.inf) for s in r.reconnect.values()) for r in restarts]
    cpu_limit = [0.25 * r.outage + 0.2 for r in restarts]
    cpu_worst = [max(r.cpu.values(), default=0.0) for r in restarts]
    lines_worst = [max(r.log_lines.values(), default=0) for r in restarts]
    unclean = {name: status for name, status in seen.exits.items() if status != 0}

    def secs(values: list[float]) -> str:
        return ", ".join("never" if math.isinf(v) else f"{v:.1f} s" for v in values) or "-"

    return [
        core["lost"],
        core["double_claims"],
        core["stale_completions"],
        core["second_completions"],
        core["duplicates_explained"],
        core["reaped_valid_lease"],
        Invariant(
            "lease_lengths", "claims and heartbeats not under their worker's --lease-timeout",
            f"{leases['wrong']} of {leases['claims']} claims + {leases['heartbeats']} heartbeats ("
            + ", ".join(f"{n} claims under {k:g} s" for k, n in sorted(by_length.items())) + ")",
            "0", leases["wrong"] == 0 and not unused,
        ),
        Invariant(
            "worker_level_only", f"job changes not made by the worker-level role {WORKER_ROLE}",
            f"{roles['foreign']} of {roles['changes']} ({roles['reaps_by_role']} reaps by it;"
            f" beyond the worker level: {', '.join(seen.beyond) or 'nothing'})"
            + (f"; {seen.not_reaping} worker(s) refused jobq.reap" if seen.not_reaping else ""),
            "0",
            roles["foreign"] == 0 and not seen.beyond and roles["reaps_by_role"] > 0
            and seen.not_reaping == 0,
        ),
        core["effects_exactly_once"],
        Invariant(
            "unique_keys", "two jobs holding one unique key at once (transition log; now; sampled)",
            f"{unique['overlaps']}; {shared_now}; {seen.shared_seen} in {seen.samples}"
            f" samples ({unique['holders']} holders on {unique['keys']} keys,"
            f" {unique['given_up']} given up running; {unique['unlogged']} unlogged)",
            "0; 0; 0",
            unique["overlaps"] == 0 and shared_now == 0 and seen.shared_seen == 0
            and seen.samples > 0 and unique["holders"] > 0 and unique["unlogged"] == 0,
        ),
        Invariant(
            "replace_kept", "replaces (scope active) whose payload was dropped",
            f"{replaces['dropped']} of {replaces['replaces']} ({replaces['dropped_done']} given a done job;"
            f" {replaces['own']} ran their own)",
            "0", replaces["dropped"] == 0 and replaces["replaces"] > 0,
        ),
        Invariant(
            "cancel_errors", "jobq.cancel calls refused with an error (not a connection's)",
            f"{sum(seen.cancel_refused.values())} of {seen.cancel_calls + sum(seen.cancel_refused.values())}"
            + "".join(f"; {n} x {message}" for message, n in sorted(seen.cancel_refused.items())),
            "0", not seen.cancel_refused and seen.cancel_calls > 0,
        ),
        Invariant(
            "forced_never_done", "jobs force-cancelled ('cancelled' returned) done then or later",
            f"{forced['done']} of {forced['forced']} ({forced['while_running']} while running;"
            f" {forced['not_cancelled']} not cancelled)",
            "0", forced["done"] == 0 and forced["not_cancelled"] == 0 and forced["while_running"] > 0,
        ),
        Invariant(
            "results", "results not what the handler returned for the payload (SQL; read back by pgjobq.job)",
            f"{results['wrong']} of {results['done']} done ({results['with_result']} with a result);"
            f" {len(seen.misread)} of {seen.read}",
            "0; 0",
            results["wrong"] == 0 and not seen.misread and results["with_result"] > 0 and seen.read > 0,
        ),
        Invariant(
            "cancelled_absorbing", "cancelled jobs changed, claimed again or not cancelled at the end",
            f"{absorbing['changed_after']}, {absorbing['claimed_after']}, {absorbing['not_cancelled']}"
            f" of {absorbing['cancelled']} ({absorbing['from_running']} from running;"
            f" {absorbing['unlogged']} unlogged)",
            "0, 0, 0",
            absorbing["changed_after"] == 0 and absorbing["claimed_after"] == 0
            and absorbing["not_cancelled"] == 0 and absorbing["unlogged"] == 0 and absorbing["cancelled"] > 0,
        ),
        Invariant(
            "cancel_requests", "jobs asked to stop that ran again or ended neither done nor cancelled",
            f"{requests['rerun']}, {requests['wrong_end']} of {requests['asked']}"
            f" ({requests['done']} done, {requests['cancelled']} cancelled)",
            "0, 0", requests["rerun"] == 0 and requests["wrong_end"] == 0 and requests["asked"] > 0,
        ),
        Invariant(
            "snoozes", "snoozes that spent the attempt; claims before run_at",
            f"{snoozes['counted']} of {snoozes['snoozes']}; {snoozes['early_claims']} of {snoozes['claims']}",
            "0; 0", snoozes["counted"] == 0 and snoozes["early_claims"] == 0 and snoozes["snoozes"] > 0,
        ),
        Invariant(
            "job_control_load", "job control mixed in: unique conflicts, variants, cancels, snoozes, results",
            f"{seen.conflicts}, {seen.variants}/4, {seen.cancel_calls}, {snoozes['snoozed']},"
            f" {results['with_result']}",
            "all > 0, 4/4",
            seen.conflicts > 0 and seen.variants == 4 and seen.cancel_calls > 0
            and snoozes["snoozed"] > 0 and results["with_result"] > 0,
        ),
        Invariant(
            "drained", "jobs left queued or running after the drain",
            str(counts["unfinished"]), "0", counts["unfinished"] == 0,
        ),
        Invariant(
            "clean_exit", "workers not exiting 0 within 30 s of SIGTERM",
            f"{len(unclean)} of {len(seen.exits)}" + (f" {unclean}" if unclean else ""), "0",
            not unclean and len(seen.exits) > 0,
        ),
        Invariant(
            "no_crashes", "workers that exited on their own",
            str(len(seen.unexpected_exits)), "0", not seen.unexpected_exits,
        ),
        Invariant(
            "reconnect", "slowest reconnect after each restart",
            secs(slowest), f"<= {config.reconnect_limit:.0f} s",
            len(restarts) == 2 and all(s <= config.reconnect_limit for s in slowest),
        ),
        Invariant(
            "quiet_cpu", "most CPU a worker spent while the server was down",
            secs(cpu_worst), "<= " + secs(cpu_limit),
            len(restarts) == 2 and all(w <= lim for w, lim in zip(cpu_worst, cpu_limit, strict=True)),
        ),
        Invariant(
            "quiet_log", "most log lines a worker wrote while the server was down",
            ", ".join(map(str, lines_worst)), "<= 20",
            len(restarts) == 2 and all(n <= 20 for n in lines_worst),
        ),
        Invariant(
            "late_complete_refused", "late completes of the SIGSTOPped worker refused",
            f"{seen.late_refused} of {len(stop.held) if stop else 0} held job(s)", ">= 1",
            seen.late_refused >= 1,
        ),
        Invariant(
            "faults", "faults injected: kills, stops, terminated connections, restarts",
            f"{seen.kills}, {1 if stop else 0}, {seen.terminated}, {'+'.join(modes)}",
            "all kinds",
            seen.kills > 0 and stop is not None and seen.terminated > 0 and modes == ["fast", "immediate"],
        ),
    ]  # fmt: skip


def check(
    conn: Db,
    config: ChaosConfig,
    chaos: Chaos,
    fleet: Fleet,
    exits: dict[str, int | None],
    canceller: Canceller,
) -> tuple[list[Invariant], dict[str, str]]:
    """The invariants and the counts, from the evidence tables and the workers' logs."""
    found = evidence(conn, fleet.leases(), WORKER_ROLE, CANCELLER_ROLE, conn.info.user)
    dups, counts, leases, roles = (found[k] for k in ("dups", "counts", "leases", "roles"))
    unique, forced, results, absorbing, requests, snoozes = (
        found[k] for k in ("unique", "forced", "results", "absorbing", "requests", "snoozes")
    )
    read, misread = read_back(conn, 200, config.seed)
    producer = chaos.producer
    deadlocked = sum(w.log_text().count("deadlock detected") for w in fleet.every)
    allowed = privileges(conn, WORKER_ROLE)
    beyond = (
        (["role attributes"] if allowed["attributes"] else [])
        + (["role memberships"] if allowed["memberships"] else [])
        + (["jobq.jobs"] if allowed["table_access"] else [])
        + list(allowed["other_functions"])
    )
    by_length = {float(k): int(n) for k, n in leases["claims_by_length"].items()}
    refused_all = sum(len(REFUSED.findall(w.log_text())) for w in fleet.every)
    stop = chaos.stop
    late_refused = late_refusals(stop) if stop is not None else 0
    restarts = chaos.restarts
    seen = Seen(
        acked=len(set(producer.acked)),
        conflicts=producer.conflicts,
        variants=len(producer.variants),
        cancel_calls=canceller.calls,
        cancel_refused=dict(canceller.refused),
        samples=canceller.samples,
        shared_seen=canceller.shared_seen,
        read=read,
        misread=misread,
        beyond=beyond,
        not_reaping=sum(w.log_text().count("not reaping:") for w in fleet.every),
        kills=chaos.kills,
        terminated=sum(chaos.terminated.values()),
        stop=stop,
        late_refused=late_refused,
        restarts=restarts,
        exits=exits,
        unexpected_exits=list(fleet.unexpected_exits),
    )
    invariants = judge(found, config, seen)

    summary = {
        "jobs acknowledged to the producer": f"{counts['acked']:,}",
        "jobs in the table": f"{counts['jobs']:,} ({counts['jobs'] - counts['acked']} from in-doubt commits)",
        "done / failed / cancelled": f"{counts['done']:,} / {counts['failed']:,} / {counts['cancelled']:,}",
        "keyed enqueues (conflicts)": f"{producer.keyed:,} ({producer.conflicts:,}); "
        + ", ".join(f"{scope}/{how}: {n:,}" for (scope, how), n in sorted(producer.variants.items())),
        "key holders (until_done; keys given up running)": f"{unique['holders']:,}"
        f" ({unique['until_done']:,}; {unique['given_up']:,})",
        "cancel calls (failed; deadlocked)": f"{canceller.calls:,}"
        f" ({canceller.failed_calls}; {canceller.deadlocks})",
        "cancels returned": ", ".join(
            f"{'force ' if force else ''}{status}: {n:,}"
            for (force, status), n in sorted(canceller.returned.items())
        ),
        "cancelled: from running (forced while running)": f"{absorbing['cancelled']:,}:"
        f" {absorbing['from_running']:,} ({forced['while_running']:,})",
        "cancel requests: done / cancelled": f"{requests['asked']:,}:"
        f" {requests['done']:,} / {requests['cancelled']:,}",
        "snoozed executions (snoozes)": f"{snoozes['snoozed']:,} ({snoozes['snoozes']:,})",
        "done with a result (read back)": f"{results['with_result']:,} ({read})",
        "worker log lines 'deadlock detected'": str(deadlocked),
        "effects-mode jobs": f"{counts['effects_mode']:,}",
        "executions": f"{dups['executions']:,}",
        "duplicate executions": f"{dups['duplicates']:,}",
        "reaps": f"{counts['reaps']:,} (by {WORKER_ROLE}: {roles['reaps_by_role']:,})",
        "claims by lease length": ", ".join(f"{k:g} s: {n:,}" for k, n in sorted(by_length.items())),
        "heartbeats": f"{leases['heartbeats']:,}",
        "workers SIGKILLed (holding running jobs; the jobs)": (
            f"{chaos.kills} ({chaos.kills_holding}; {chaos.killed_held})"
        ),
        "workers SIGSTOPped": (
            f"1 ({stop.worker}, lease {stop.lease:g} s, stopped {stop.stopped_for:.1f} s,"
            f" holding {len(stop.held)})"
            if stop
            else "0"
        ),
        "connections terminated": ", ".join(f"{n} {kind}" for kind, n in sorted(chaos.terminated.items())),
        "PostgreSQL restarts": ", ".join(f"-m {r.mode} (down {r.outage:.1f} s)" for r in restarts),
        "late completes refused": f"{late_refused} by the stopped worker, {refused_all} in all",
        "producer transactions failed by faults (retried)": str(chaos.producer.failed_batches),
        "worker processes started": str(len(fleet.every)),
    }
    return invariants, summary


# -- the run -----------------------------------------------------------------


@contextmanager
def _server(config: ChaosConfig) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(fast=True, settings={"max_connections": str(config.max_connections)})
    with server:
        yield server


def prepare(dsn: str) -> tuple[str, str]:
    """Install the extension and the evidence tables; the DSNs of the workers (WORKER_ROLE, the worker
    level only) and of the canceller (CANCELLER_ROLE, the admin level)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")
        conn.execute(SCHEMA_DDL)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(WORKER_ROLE)))
        conn.execute("SELECT jobq.grant_worker(%s::regrole)", (WORKER_ROLE,))
        conn.execute(handler_grants(WORKER_ROLE))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(CANCELLER_ROLE)))
        conn.execute("SELECT jobq.grant_admin(%s::regrole)", (CANCELLER_ROLE,))
        conn.execute(canceller_grants(CANCELLER_ROLE))
    return make_conninfo(dsn, user=WORKER_ROLE), make_conninfo(dsn, user=CANCELLER_ROLE)


def run_chaos(config: ChaosConfig, workdir: Path) -> Report:
    """One chaos run; the workers' logs and the producer's id log go to workdir."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    with _server(config) as server:
        dsn = server.dsn()  # the superuser's: the producer's and the harness's
        worker_dsn, canceller_dsn = prepare(dsn)
        fleet = Fleet(worker_dsn, config, workdir)
        producer = Producer(dsn, config, workdir / "acked-ids.txt")
        chaos = Chaos(config, server, dsn, fleet, producer)
        canceller = Canceller(canceller_dsn, config, producer)
        say(f"{config.name} chaos run: {config.jobs:,} jobs, {config.workers} workers; logs in {workdir}")
        try:
            fleet.start()
            wait_until(chaos.connected, timeout=60, interval=0.1)  # the clock starts once all are up
            producer.start()
            chaos.start()
            canceller.start()
            chaos.join()
            canceller.stop()  # cancels go on while the faults do: till the backlog is down
            if chaos.error is not None:
                producer.abort()
            producer.join()
            canceller.join()
            for failed in (chaos, producer, canceller):
                if failed.error is not None:
                    raise RuntimeError(f"the {failed.name} thread failed") from failed.error
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:

                def drained() -> bool:
                    fleet.replace_dead()
                    row = _one(
                        conn, "SELECT count(*) AS n FROM jobq.jobs WHERE status IN ('queued', 'running')"
                    )
                    return bool(row["n"] == 0)

                say("draining")
                wait_until(drained, config.drain_timeout, interval=0.5)
                exits = fleet.terminate_all(timeout=30)
                with conn.cursor() as cur, cur.copy("COPY chaos.acked (id) FROM STDIN") as copy:
                    for job_id in sorted(set(producer.acked)):  # an id given again on a conflict counts once
                        copy.write_row((job_id,))
                with conn.cursor() as cur, cur.copy("COPY chaos.replaced (n, job_id) FROM STDIN") as copy:
                    for row in producer.replaced:
                        copy.write_row(row)
                say("checking")
                invariants, counts = check(conn, config, chaos, fleet, exits, canceller)
                if not all(invariant.ok for invariant in invariants):
                    say(f"invariants violated: the evidence tables are in {keep_evidence(conn, workdir)}")
        finally:
            producer.abort()
            canceller.stop()
            fleet.kill_all()
    wall = time.monotonic() - began
    counts["wall time"] = f"{wall:.0f} s"
    return Report(config, invariants, counts, chaos.restarts, wall, workdir)


def keep_evidence(conn: Db, workdir: Path) -> Path:
    """Copy the chaos schema's tables, jobq.jobs and jobq.unique_keys to CSV files in workdir/evidence."""
    folder = workdir / "evidence"
    folder.mkdir(exist_ok=True)
    tables = [
        row["name"]
        for row in conn.execute(
            "SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables"
            " WHERE schemaname = 'chaos' OR (schemaname = 'jobq' AND tablename IN ('jobs', 'unique_keys'))"
            " ORDER BY 1"
        )
    ]
    for table in tables:
        query = sql.SQL("COPY {} TO STDOUT (FORMAT csv, HEADER)").format(sql.SQL(table))
        with (folder / f"{table}.csv").open("wb") as out, conn.cursor() as cur, cur.copy(query) as copy:
            for chunk in copy:
                out.write(chunk)
    return folder


def print_tables(
    console: Console, title: str, invariants: list[Invariant], counts: Mapping[str, str]
) -> None:
    """Print the invariant table (title above it: what was run) and the counts table of a chaos run."""
    table = Table(title=title)
    table.add_column("invariant")
    table.add_column("observed", justify="right")
    table.add_column("expected", justify="right")
    table.add_column("")
    for inv in invariants:
        table.add_row(inv.name, inv.observed, inv.expected, "[green]ok[/]" if inv.ok else "[red]FAIL[/]")
    console.print(table)
    counted = Table(title="counts", show_header=False)
    counted.add_column("what")
    counted.add_column("how many", justify="right")
    for what, value in counts.items():
        counted.add_row(what, value)
    console.print(counted)


def render(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    c = report.config
    title = (
        f"pgjobq chaos run ({c.name}): {c.jobs:,} jobs of {c.handler_ms[0]}-{c.handler_ms[1]} ms,"
        f" {c.workers} workers ({c.inline_slots} x 1 thread, the others x {c.concurrency}),"
        f" leases {' and '.join(f'{lease:g}' for lease in c.leases)} s"
    )
    print_tables(console, title, report.invariants, report.counts)
    restarts = Table(title="restarts: per worker, while the server was down and after")
    for column in ("mode", "down", "workers", "reconnect (max)", "CPU (max)", "log lines (max)"):
        restarts.add_column(column, justify="right")
    for r in report.restarts:
        back = [s for s in r.reconnect.values() if s is not None]
        restarts.add_row(
            r.mode,
            f"{r.outage:.1f} s",
            f"{len(back)}/{len(r.reconnect)} back",
            f"{max(back, default=math.nan):.1f} s",
            f"{max(r.cpu.values(), default=0.0):.2f} s",
            str(max(r.log_lines.values(), default=0)),
        )
    console.print(restarts)
    console.print("[green]all invariants hold[/]" if report.ok else "[red]invariants violated[/]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--full", action="store_true", help="the full run (200,000 jobs) instead of the short one"
    )
    parser.add_argument("--workdir", type=Path, help="folder for the logs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    config = ChaosConfig.full() if args.full else ChaosConfig.short()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"pgjobq-chaos-{config.name}-"))
    report = run_chaos(config, workdir)
    render(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    with servers_run_the_working_tree():  # its servers run the working tree's SQL, as the tests' do
        sys.exit(main())
