"""Failover run: real `pgjobq worker` processes while the primary is killed and its standby promoted.

    PYTHONPATH=tests .venv/bin/python -m chaos.failover --mode sync         # short: 2,000 jobs of 1-20 ms
    PYTHONPATH=tests .venv/bin/python -m chaos.failover --mode async --full # full: 40,000 jobs of 10-200 ms
    PYTHONPATH=tests .venv/bin/python -m chaos.failover --mode both --full  # each (make chaos-failover)

The exit status is 1 when an invariant of either run failed.

Two throwaway PostgreSQL servers on 127.0.0.1: a primary with the extension
and chaos_handlers.py's evidence tables, and a streaming standby made from
it by pg_basebackup (tools/throwaway_pg.py).  With ``--mode sync`` the
primary names the standby in ``synchronous_standby_names`` (and
synchronous_commit stays on): a commit returns once the standby has the WAL.
With ``--mode async`` the standby follows through a TCP relay run by this
harness, which, for ``hold`` seconds before the kill, stops passing the
WAL stream on (it reads what the primary sends and keeps it, as a link that
has stalled would): everything committed meanwhile is on the primary alone.

Workers (chaos.py's Fleet: worker-level role, leases of 5 and 12 s, some
with their handlers on their own thread) and a producer (chaos.py's, less
the unique keys; one job in 25, in the full run one in 100, runs 1-3 s, so
that handlers are always in the middle of jobs when the primary dies)
connect with one multi-host DSN naming both servers,
``target_session_attrs=read-write``.  The handler is chaos_handlers.run
(executions, effects in the same transaction as jobq.complete, results,
snoozes, failures on purpose), behind ``run`` below, which first logs each
execution (job, lease, attempt) to the worker's log: evidence kept outside
the database, which the failover cannot roll back.  The producer logs each
id and its payload number once its commit has returned.

Under load, at ``kill_at`` of the production, the primary is killed
(``pg_ctl stop -m immediate``) and the standby promoted ``promote_after``
(6 s) later: the time a failover manager takes to decide, longer than the
5 s leases, so that leases taken before the kill run out and are taken
again after the promotion, and the standby answers read-only meanwhile.  The
workers reconnect through the DSN; the producer goes on; the workers drain
the queue and get SIGTERM.  Then the new primary's rows, its transition log
and the out-of-database evidence (the producer's id log, the workers' logs)
are compared:

- synchronous: every enqueue whose commit returned survives with its
  payload; every acknowledgement that returned (``job N done`` logged)
  holds, and the job never runs again; no (job, lease) is executed twice
  (workers' logs) nor two leases valid at once (transition log); every job
  ends by its rules; workers claim again within 15 s of the promotion and
  exit 0 on SIGTERM.
- asynchronous: the same are measured and reported, not asserted: the
  enqueues lost or whose id was handed out again, the acknowledgements
  undone (the job ran again), the (job, lease) tokens issued twice, and how
  far behind the standby was (WAL bytes and commits on the dead primary
  after the promoted standby's switch point, read with pg_waldump).  What
  holds on any timeline is still asserted: the new primary's log never
  shows two valid leases at once, every job finishes, the workers come
  back within 15 s and exit 0; and that the run did lose commits (else it
  measured nothing).

The evidence trigger replicates with the jobs, so the new primary's
transition log holds exactly the history that was committed and reached
the standby: what the old primary did alone is in no table, only in the
logs outside the database.  tests/chaos/test_failover.py runs the short
synchronous run and asserts each invariant.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq import Job

from chaos import chaos_handlers
from chaos.chaos import (
    DUPLICATES,
    QUEUE,
    REFUSED,
    WORKER_ROLE,
    ChaosConfig,
    Fleet,
    Invariant,
    Judged,
    Producer,
    core_invariants,
    evidence,
    prepare,
    print_tables,
    say,
)
from helpers.processes import wait_until
from helpers.sqlhelpers import Db
from helpers.working_tree import servers_run_the_working_tree

__all__ = [
    "ALWAYS",
    "STANDBY",
    "SYNC_ONLY",
    "Enqueues",
    "FailoverConfig",
    "FailoverReport",
    "Outside",
    "Pair",
    "Relay",
    "WalTail",
    "WorkerLog",
    "invariant_keys",
    "judge_enqueues",
    "judge_outside",
    "logged_at",
    "main",
    "multi_host",
    "outside_invariants",
    "read_log",
    "render",
    "replicated",
    "run",
    "run_failover",
    "sleep",
    "wal_after",
]

Mode = Literal["sync", "async"]

STANDBY = "standby"  # the standby's application_name, named by synchronous_standby_names
HANDLER = "chaos.failover:run"

# The keys of the invariants a failover run judges (check()), in the order of its table: on any
# timeline, and besides with a synchronous standby.  tests/chaos/test_failover.py asserts each of a
# synchronous run's, and that its report has exactly these.
ALWAYS = ("failover", "double_claims", "drained", "reconnect", "clean_exit", "no_crashes")
SYNC_ONLY = (
    "enqueues_survive", "acks_hold", "leases_once", "lost", "stale_completions", "second_completions",
    "duplicates_explained", "effects_exactly_once",
)  # fmt: skip


def invariant_keys(mode: Mode) -> tuple[str, ...]:
    """The keys of the invariants a failover run of mode judges."""
    return ALWAYS + SYNC_ONLY if mode == "sync" else ALWAYS


# The worker's log lines read as evidence (the CLI's format: "<asctime> <level> <logger>: <message>")
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
EXECUTION = re.compile(r"execution of job (\d+) \(payload (\d+)\) under lease (\d+) \(attempt (\d+)\)")
DONE = re.compile(r"job (\d+) done \(attempt (\d+)\)")
UNAVAILABLE = re.compile(r"database (?:unavailable|is read-only)")

handler_log = logging.getLogger("failover.handler")


def run(job: Job) -> dict[str, Any] | None:
    """The failover run's handler: log the execution (outside the database), then chaos_handlers.run.

    The payload's number is logged with the id: after an asynchronous
    failover the promoted server can hand an id out again, to another job.
    """
    handler_log.info(
        "execution of job %d (payload %s) under lease %d (attempt %d)",
        job.id, job.payload.get("n"), job.lease, job.attempts,
    )  # fmt: skip
    return chaos_handlers.run(job)


def sleep(job: Job) -> None:
    """Log the execution, sleep payload["ms"] milliseconds and return: a handler with no connection of its
    own, so that the worker's are the only ones (tests/chaos/test_failover.py)."""
    handler_log.info(
        "execution of job %d (payload %s) under lease %d (attempt %d)",
        job.id, job.payload.get("n"), job.lease, job.attempts,
    )  # fmt: skip
    time.sleep(float(job.payload.get("ms", 0)) / 1000)


# -- configuration -----------------------------------------------------------


@dataclass(frozen=True)
class FailoverConfig:
    """The load, the workers and the failover of one run.  Times are in seconds."""

    name: str
    mode: Mode
    jobs: int
    handler_ms: tuple[int, int]
    produce_seconds: float  # the producer spreads the jobs over this long
    concurrency: int  # handler threads per worker (but the first inline_slots workers)
    drain_timeout: float
    workers: int = 4
    inline_slots: int = 1
    leases: tuple[float, ...] = (5.0, 12.0)
    kill_at: float = 0.4  # the primary is killed this far into the production
    # and the standby promoted this long after (the failover's detection): longer than the 5 s
    # lease, so that leases taken before the kill expire and are taken again after the promotion
    promote_after: float = 6.0
    hold: float = 2.0  # async: the relay holds the WAL stream back this long before the kill
    reconnect_limit: float = 15.0
    # job n with n % long_every == 3 runs long_ms: some handlers are always in the middle of a job
    # when the primary dies, so that acknowledgements are owed across the failover
    long_every: int = 25
    long_ms: tuple[int, int] = (1_000, 3_000)
    seed: int = 20240614

    @classmethod
    def short(cls, mode: Mode) -> FailoverConfig:
        return cls(
            name="short", mode=mode, jobs=2_000, handler_ms=(1, 20), produce_seconds=20, concurrency=4,
            drain_timeout=60, hold=1.5,
        )  # fmt: skip

    @classmethod
    def full(cls, mode: Mode) -> FailoverConfig:
        return cls(
            name="full", mode=mode, jobs=40_000, handler_ms=(10, 200), produce_seconds=120, concurrency=10,
            drain_timeout=300, workers=8, inline_slots=2, hold=3.0, long_every=100,
        )  # fmt: skip

    def chaos(self) -> ChaosConfig:
        """The ChaosConfig that chaos.py's Fleet and Producer read (the fields they use)."""
        return ChaosConfig(
            name=self.name, jobs=self.jobs, handler_ms=self.handler_ms, produce_seconds=self.produce_seconds,
            concurrency=self.concurrency, drain_timeout=self.drain_timeout, workers=self.workers,
            inline_slots=self.inline_slots, leases=self.leases, seed=self.seed,
        )  # fmt: skip


# -- the servers -------------------------------------------------------------


class Relay(threading.Thread):
    """A TCP relay on 127.0.0.1 to the primary's port, for the standby's WAL stream.

    Each connection made to it is passed on to the primary, both ways, until
    hold(): from then on what the primary sends is read and kept, not passed
    on (the standby's replies still go through), as a stalled link would
    keep it; when the primary goes away the connection is closed and what
    was kept is dropped.
    """

    def __init__(self, upstream_port: int) -> None:
        super().__init__(name="relay", daemon=True)
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._held = threading.Event()
        self._closed = threading.Event()
        self.held_bytes = 0  # read from the primary and never passed on
        self.held_since: float | None = None

    def hold(self) -> None:
        self.held_since = time.monotonic()
        self._held.set()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def run(self) -> None:
        while not self._closed.is_set():
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(down,), name="relay pump", daemon=True).start()

    def _pump(self, down: socket.socket) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            down.close()
            return
        with down, up, selectors.DefaultSelector() as selector:
            selector.register(up, selectors.EVENT_READ)
            selector.register(down, selectors.EVENT_READ)
            while not self._closed.is_set():
                for key, _ in selector.select(timeout=0.5):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:
                        return
                    if key.fileobj is up and self._held.is_set():
                        self.held_bytes += len(data)
                    else:
                        (down if key.fileobj is up else up).sendall(data)


@dataclass
class Pair:
    """A primary, its streaming standby and, for an asynchronous standby made so, the relay between them."""

    primary: ThrowawayPostgres
    standby: ThrowawayPostgres
    sync: bool
    relay: Relay | None = None

    def dsn(self, **params: str) -> str:
        """A multi-host DSN naming the primary, then the standby (multi_host), with params."""
        return multi_host(self.primary, self.standby, **params)

    def kill_primary(self) -> None:
        """Kill the primary: pg_ctl stop -m immediate (its processes quit at once, nothing is flushed)."""
        self.primary.stop("immediate")

    def timeline(self) -> int:
        """The timeline of the standby (2 once promoted): from the name of its current WAL file."""
        ((name,),) = self.standby.query(
            "SELECT pg_walfile_name(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
            " ELSE pg_current_wal_lsn() END)"
        )
        return int(str(name)[:8], 16)

    def switch_point(self) -> str:
        """Where the promoted standby's timeline left timeline 1: the LSN in its timeline history file."""
        history = (self.standby.data_dir / "pg_wal" / f"{self.timeline():08X}.history").read_text()
        return history.split()[1]


def multi_host(primary: ThrowawayPostgres, standby: ThrowawayPostgres, **params: str) -> str:
    """host=127.0.0.1,127.0.0.1 port=P,S with params (user, dbname, target_session_attrs, ...)."""
    return make_conninfo(
        "", host=f"{primary.host},{standby.host}", port=f"{primary.port},{standby.port}", **params
    )


@contextmanager
def replicated(
    sync: bool,
    *,
    relay: bool = False,
    settings: Mapping[str, str] | None = None,
    setup: Callable[[str], object] | None = None,
) -> Iterator[Pair]:
    """A primary and its standby, streaming (synchronously when sync), both removed afterwards.

    setup, when given, runs on the primary (given its superuser DSN)
    before the base backup: what it creates is on the standby from the
    start.  relay puts a Relay between them (for an asynchronous standby).
    """
    primary = ThrowawayPostgres(fast=True, settings=settings)
    standby: ThrowawayPostgres | None = None
    between: Relay | None = None
    try:
        primary.start()
        if setup is not None:
            setup(primary.dsn())
        if relay:
            between = Relay(primary.port)
            between.start()
        standby = primary.standby(name=STANDBY, upstream_port=between.port if between else None)
        standby.start()
        primary.wait_for_standby(STANDBY)
        if sync:
            primary.alter_system("synchronous_standby_names", STANDBY)
            primary.wait_for_standby(STANDBY, sync=True)
        yield Pair(primary, standby, sync, between)
    finally:
        if between is not None:
            between.close()
        if standby is not None:
            standby.remove()
        primary.remove()


@dataclass(frozen=True)
class WalTail:
    """The WAL a dead primary wrote after a point: records, commits, bytes, and where it ends."""

    records: int
    commits: int
    bytes: int
    end: str


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def wal_after(server: ThrowawayPostgres, lsn: str, timeline: int = 1) -> WalTail:
    """What server's WAL of timeline holds after lsn (pg_waldump over its pg_wal; server stopped)."""
    result = server.run(
        str(server.bindir / "pg_waldump"), "-p", str(server.data_dir / "pg_wal"), "-t", str(timeline),
        "-s", lsn, check=False,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("rmgr:")]
    commits = sum(1 for line in lines if line.startswith("rmgr: Transaction") and "desc: COMMIT" in line)
    end = re.search(r"invalid record length at ([0-9A-F]+/[0-9A-F]+)", result.stderr)
    if not lines:  # nothing after lsn ("could not find a valid record after ...")
        return WalTail(0, 0, 0, lsn)
    if end is None:
        raise RuntimeError(f"cannot find the end of the WAL in pg_waldump's output: {result.stderr}")
    return WalTail(len(lines), commits, max(0, _lsn(end.group(1)) - _lsn(lsn)), end.group(1))


# -- the load ----------------------------------------------------------------


class FailoverProducer(Producer):
    """chaos.py's Producer without unique keys, logging each id with its payload number once committed.

    Every long_every-th job runs long_ms (FailoverConfig).

    Each batch is one transaction of two jobq.enqueue_many (the ordinary
    jobs, then those failing on purpose).  ``given`` holds, in order, every
    id given by a commit that returned with its payload number (after an
    asynchronous failover an id can be given twice, to two jobs); the id log
    holds the same, one ``id number`` line each.
    """

    def __init__(self, dsn: str, config: FailoverConfig, id_log: Path) -> None:
        super().__init__(dsn, config.chaos(), id_log)
        self.failover = config
        self.given: list[tuple[int, int]] = []  # (id, payload number), aligned with acked

    def _payload(self, n: int) -> dict[str, Any]:
        payload = super()._payload(n)
        if n % self.failover.long_every == 3:
            payload["ms"] = self._rng.randint(*self.failover.long_ms)
        return payload

    def _produce(self) -> None:
        c = self.config
        conn: psycopg.Connection[Any] | None = None
        numbered = 0
        start = time.monotonic()
        with self.id_log.open("w") as id_log:
            while len(self.acked) < c.jobs and not self._abort.is_set():
                target = min(c.jobs, math.ceil(c.jobs * (time.monotonic() - start) / c.produce_seconds))
                size = min(200, target - len(self.acked))
                if size <= 0:
                    time.sleep(0.02)
                    continue
                payloads = [self._payload(numbered + k) for k in range(size)]
                numbered += size
                ordinary = [p for p in payloads if not p["fail"]]
                failing = [p for p in payloads if p["fail"]]
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self.dsn, application_name="failover producer")
                    with conn.transaction():
                        ids = pgjobq.enqueue_many(conn, QUEUE, ordinary, max_attempts=c.max_attempts)
                        ids += pgjobq.enqueue_many(conn, QUEUE, failing, max_attempts=1)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    self.failed_batches += 1  # in doubt: these ids are not promised
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.2)
                    continue
                numbers = [int(p["n"]) for p in ordinary + failing]
                self.acked.extend(ids)  # committed: these ids are promised
                self.given.extend(zip(ids, numbers, strict=True))
                id_log.write("".join(f"{i} {n}\n" for i, n in zip(ids, numbers, strict=True)))
                id_log.flush()
        if conn is not None:
            conn.close()


class FailoverFleet(Fleet):
    """chaos.py's Fleet running this module's handler (which logs each execution first)."""

    def command(self, slot: int, name: str) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command(slot, name)
        argv = [HANDLER if arg == "chaos.chaos_handlers:run" else arg for arg in argv]
        # the 'job N done' lines read as evidence are DEBUG lines
        level = argv.index("--log-level") + 1
        return [*argv[:level], "DEBUG", *argv[level + 1 :]], env


# -- evidence outside the database ------------------------------------------------


Run = tuple[int, int]  # a job as the workers knew it: (id, payload number)


@dataclass
class WorkerLog:
    """What one worker's log says: executions ((id, number), lease, at), accepted acknowledgements
    ((id, number), at; the number of its latest execution of the id), refused ones (id, lease, at), and
    when it found the database unavailable."""

    worker: str
    executions: list[tuple[Run, int, float]] = field(default_factory=list)
    done: list[tuple[Run, float]] = field(default_factory=list)
    refused: list[tuple[int, int, float]] = field(default_factory=list)
    unavailable: list[float] = field(default_factory=list)


def logged_at(line: str) -> float | None:
    """When a worker logged line (the CLI's format), as Unix time; None for a line of no record."""
    parsed = LOG_LINE.match(line)
    return None if parsed is None else datetime.strptime(parsed.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read_log(worker: str, text: str) -> WorkerLog:
    """Parse a worker's log (the CLI's format) into a WorkerLog; times as Unix time."""
    found = WorkerLog(worker)
    latest: dict[int, int] = {}  # id -> the payload number of this worker's latest execution of it
    for line in text.splitlines():
        parsed = LOG_LINE.match(line)
        at = logged_at(line)
        if parsed is None or at is None:
            continue
        message = parsed.group(4)
        if (m := EXECUTION.match(message)) is not None:
            job, number = int(m.group(1)), int(m.group(2))
            latest[job] = number
            found.executions.append(((job, number), int(m.group(3)), at))
        elif (m := DONE.match(message)) is not None:
            job = int(m.group(1))
            found.done.append(((job, latest.get(job, -1)), at))
        elif (m := REFUSED.match(message)) is not None:
            found.refused.append((int(m.group(1)), int(m.group(2)), at))
        elif UNAVAILABLE.match(message) is not None:
            found.unavailable.append(at)
    return found


@dataclass(frozen=True)
class Outside:
    """The out-of-database evidence judged against the new primary."""

    executions: int
    acks: int  # 'job N done' lines
    undone: list[Run]  # acknowledged, then run again, or not done at the end
    gone: list[Run]  # acknowledged, and the job is not on the new primary (its id missing or another's)
    reissued_leases: list[tuple[Run, int]]  # (job, lease) executed more than once
    reissued_ids: list[int]  # ids executed for two different payloads
    owed_sent: int  # acknowledgements accepted after the promotion for executions begun before the kill
    owed_held: int  # of which held (done at the end, never run again)
    refused_after: int  # late acknowledgements refused after the promotion (the old lease fenced out)


def judge_outside(
    logs: list[WorkerLog], final: Mapping[int, tuple[str, int]], killed: float, promoted: float
) -> Outside:
    """Compare the workers' logs with the new primary's jobs (final: id -> (status, payload number))."""
    executions: dict[tuple[Run, int], int] = defaultdict(int)
    started: dict[Run, list[float]] = defaultdict(list)
    numbers: dict[int, set[int]] = defaultdict(set)
    for log in logs:
        for run_, lease, at in log.executions:
            executions[(run_, lease)] += 1
            started[run_].append(at)
            numbers[run_[0]].add(run_[1])
    undone: set[Run] = set()
    gone: set[Run] = set()
    acks = owed_sent = owed_held = 0
    for log in logs:
        own: dict[Run, list[float]] = defaultdict(list)  # this worker's executions of each job
        for run_, _, at in log.executions:
            own[run_].append(at)
        for run_, at in log.done:
            acks += 1
            now = final.get(run_[0])
            if now is None or now[1] != run_[1]:
                gone.add(run_)
            again = any(t > at for t in started[run_]) or now != ("done", run_[1])
            if again and run_ not in gone:
                undone.add(run_)
            before = [t for t in own[run_] if t <= at]
            if at > promoted and before and max(before) < killed:
                owed_sent += 1
                owed_held += not again
    return Outside(
        executions=sum(executions.values()),
        acks=acks,
        undone=sorted(undone),
        gone=sorted(gone),
        reissued_leases=sorted(key for key, n in executions.items() if n > 1),
        reissued_ids=sorted(job for job, seen in numbers.items() if len(seen) > 1),
        owed_sent=owed_sent,
        owed_held=owed_held,
        refused_after=sum(1 for log in logs for _, _, at in log.refused if at > promoted),
    )


@dataclass(frozen=True)
class Enqueues:
    """The producer's enqueues whose commit returned, judged against the new primary's jobs."""

    before: int  # returned before the kill
    missing: list[int]  # of them, ids not on the new primary
    other: list[int]  # of them, ids that are another job's now (another payload number)
    after: int  # returned after the promotion
    after_lost: list[int]  # of them, missing or another job's


def judge_enqueues(
    given: list[tuple[int, int]], before_kill: int, final: Mapping[int, tuple[str, int]]
) -> Enqueues:
    """given: (id, payload number) of every enqueue whose commit returned, in order, the first before_kill
    of them before the kill; final: the new primary's jobs, id -> (status, payload number)."""
    before, after = given[:before_kill], given[before_kill:]
    return Enqueues(
        before=len(before),
        missing=[i for i, _ in before if i not in final],
        other=[i for i, n in before if i in final and final[i][1] != n],
        after=len(after),
        after_lost=[i for i, n in after if final.get(i, ("", -1))[1] != n],
    )


def outside_invariants(enqueues: Enqueues, outside: Outside) -> list[Invariant]:
    """The invariants of a synchronous failover judged on the evidence outside the database (the
    producer's log, the workers'): enqueues_survive, acks_hold, leases_once.  Each requires its evidence
    to hold something: no enqueue returned, no acknowledgement logged (or none owed across the kill), no
    execution logged, is a run that proved nothing."""
    return [
        Invariant(
            "enqueues_survive", "enqueues whose commit returned before the kill: missing; another payload",
            f"{len(enqueues.missing)}; {len(enqueues.other)} of {enqueues.before:,}"
            f" ({len(enqueues.after_lost)} missing or changed of {enqueues.after:,} after)",
            "0; 0",
            not enqueues.missing and not enqueues.other and not enqueues.after_lost and enqueues.before > 0,
        ),
        Invariant(
            "acks_hold", "acknowledgements that returned ('job N done') undone: job run again or not done;"
            " job gone",
            f"{len(outside.undone)}; {len(outside.gone)} of {outside.acks:,} ({outside.owed_held} of"
            f" {outside.owed_sent} owed at the kill, sent after reconnecting, held)",
            "0; 0", not outside.undone and not outside.gone and outside.acks > 0 and outside.owed_sent > 0,
        ),
        Invariant(
            "leases_once", "(job, lease) executed twice; ids executed for two payloads (workers' logs)",
            f"{len(outside.reissued_leases)}; {len(outside.reissued_ids)}"
            f" of {outside.executions:,} executions"
            f" ({outside.refused_after} late acknowledgements refused after the promotion)",
            "0; 0",
            not outside.reissued_leases and not outside.reissued_ids and outside.executions > 0,
        ),
    ]  # fmt: skip


# -- the run -----------------------------------------------------------------


@dataclass
class Failover:
    """What happened around the kill, measured by the harness (Unix times)."""

    kill_began: float = 0.0
    killed: float = 0.0  # pg_ctl stop -m immediate returned
    promote_began: float = 0.0  # promote_after past the kill
    promoted: float = 0.0  # pg_ctl promote -w returned
    running_at_kill: int = 0  # jobs running on the primary just before the kill
    lag_bytes_seen: int = 0  # pg_current_wal_lsn - the standby's replay_lsn, just before the kill
    held_bytes: int = 0  # async: what the relay kept from the standby
    held_for: float = 0.0
    switch_point: str = ""
    timeline: int = 0
    wal_lost: WalTail | None = None  # the dead primary's WAL after the switch point
    reconnect: dict[str, float | None] = field(default_factory=dict)  # worker -> s from promotion to a claim
    acked_before_kill: int = 0


@dataclass
class FailoverReport(Judged):
    config: FailoverConfig
    invariants: list[Invariant]
    measured: dict[
        str, str
    ]  # what async replication lost (numbers, not judged); sync: the same, for contrast
    counts: dict[str, str]
    failover: Failover
    wall: float
    workdir: Path


def _connected(conn: Db, fleet: Fleet) -> bool:
    names = [f"pgjobq worker {w.name}" for w in fleet.live()]
    row = conn.execute(
        "SELECT count(DISTINCT application_name) AS n FROM pg_stat_activity WHERE application_name = ANY(%s)",
        (names,),
    ).fetchone()
    return row is not None and row["n"] == len(names)


def _fail_over(config: FailoverConfig, pair: Pair, fleet: Fleet, producer: FailoverProducer) -> Failover:
    """Wait for kill_at of the production, kill the primary, promote the standby; measure around it."""
    record = Failover()
    began = time.monotonic()
    kill_at = began + config.kill_at * config.produce_seconds
    with psycopg.connect(pair.primary.dsn(), autocommit=True, row_factory=dict_row) as conn:
        if pair.relay is not None:
            wait_until(lambda: time.monotonic() >= kill_at - config.hold, timeout=config.produce_seconds)
            say(f"relay holds the WAL stream back for {config.hold:g} s")
            pair.relay.hold()
        wait_until(lambda: time.monotonic() >= kill_at, timeout=config.produce_seconds)
        row = conn.execute(
            "SELECT (SELECT count(*) FROM jobq.jobs WHERE status = 'running') AS running,"
            " (SELECT pg_current_wal_lsn() - replay_lsn FROM pg_stat_replication"
            "   WHERE application_name = %s) AS lag",
            (STANDBY,),
        ).fetchone()
        assert row is not None
        record.running_at_kill, record.lag_bytes_seen = int(row["running"]), int(row["lag"] or 0)
    say(f"kill the primary (-m immediate) with {record.running_at_kill} jobs running")
    record.kill_began = time.time()
    pair.kill_primary()
    record.killed = time.time()
    record.acked_before_kill = len(producer.acked)  # nothing commits from the kill to the promotion
    if pair.relay is not None:
        record.held_bytes = pair.relay.held_bytes
        record.held_for = time.monotonic() - (pair.relay.held_since or time.monotonic())
    time.sleep(max(0.0, record.killed + config.promote_after - time.time()))
    record.promote_began = time.time()
    pair.standby.promote()
    record.promoted = time.time()
    record.timeline = pair.timeline()
    record.switch_point = pair.switch_point()
    record.wal_lost = wal_after(pair.primary, record.switch_point)
    say(
        f"standby promoted {record.promoted - record.killed:.1f} s after the kill (timeline"
        f" {record.timeline}, switch point {record.switch_point}); the dead primary's WAL after it:"
        f" {record.wal_lost.commits} commits, {record.wal_lost.bytes:,} bytes"
    )
    return record


def _wait_for_claims(conn: Db, fleet: Fleet, record: Failover, limit: float) -> None:
    """Seconds from the promotion to each worker's first claim on the new primary (None: none seen).

    Or to its first statement on a connection to the new primary, for a
    worker back once the queue was empty (chaos.py's restarts measure it
    so too).  Any claim or connection after the kill is one after the
    promotion: nothing was writable in between.
    """
    names = [w.name for w in fleet.live()]
    killed = datetime.fromtimestamp(record.killed, timezone.utc)
    found: dict[str, float | None] = dict.fromkeys(names)
    deadline = record.promoted + limit + 15  # watch past the limit to report how late
    while time.time() < deadline and any(v is None for v in found.values()):
        rows = conn.execute(
            "SELECT locked_by AS name, extract(epoch FROM min(at))::float8 AS at FROM chaos.transitions"
            " WHERE at > %s AND new_status = 'running' AND new_lease <> old_lease AND locked_by = ANY(%s)"
            " GROUP BY locked_by"
            " UNION ALL"
            " SELECT substr(application_name, length('pgjobq worker ') + 1),"
            "        extract(epoch FROM backend_start)::float8"
            "   FROM pg_stat_activity"
            "  WHERE application_name = ANY(%s) AND backend_start > %s AND state = 'idle'"
            "    AND query LIKE '%%jobq.claim%%'",
            (killed, names, [f"pgjobq worker {n}" for n in names], killed),
        ).fetchall()
        for row in rows:
            seconds = max(0.0, row["at"] - record.promoted)
            current = found.get(row["name"])
            if row["name"] in found and (current is None or seconds < current):
                found[row["name"]] = seconds
        time.sleep(0.2)
    record.reconnect = found


def run_failover(config: FailoverConfig, workdir: Path) -> FailoverReport:
    """One failover run; the workers' logs and the producer's id log go to workdir."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    chaos_config = config.chaos()
    settings = {"max_connections": str(chaos_config.max_connections)}
    say(
        f"{config.name} failover run ({config.mode}): {config.jobs:,} jobs, {config.workers} workers;"
        f" logs in {workdir}"
    )
    with replicated(
        config.mode == "sync", relay=config.mode == "async", settings=settings, setup=prepare
    ) as pair:
        dsn = pair.dsn(user="postgres", dbname="postgres", target_session_attrs="read-write")
        worker_dsn = pair.dsn(user=WORKER_ROLE, dbname="postgres", target_session_attrs="read-write")
        fleet = FailoverFleet(worker_dsn, chaos_config, workdir)
        producer = FailoverProducer(dsn, config, workdir / "acked-ids.txt")
        try:
            fleet.start()
            with psycopg.connect(pair.primary.dsn(), autocommit=True, row_factory=dict_row) as conn:
                wait_until(lambda: _connected(conn, fleet), timeout=60, interval=0.1)
            producer.start()
            record = _fail_over(config, pair, fleet, producer)
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                _wait_for_claims(conn, fleet, record, config.reconnect_limit)
                producer.join()
                if producer.error is not None:
                    raise RuntimeError("the producer failed") from producer.error

                def drained() -> bool:
                    fleet.replace_dead()
                    row = conn.execute(
                        "SELECT count(*) AS n FROM jobq.jobs WHERE status IN ('queued', 'running')"
                    ).fetchone()
                    return row is not None and row["n"] == 0

                say("draining")
                wait_until(drained, config.drain_timeout, interval=0.5)
                exits = fleet.terminate_all(timeout=30)
                with conn.cursor() as cur, cur.copy("COPY chaos.acked (id) FROM STDIN") as copy:
                    for job_id in sorted(set(producer.acked)):
                        copy.write_row((job_id,))
                say("checking")
                invariants, measured, counts = check(conn, config, pair, fleet, producer, record, exits)
        finally:
            producer.abort()
            fleet.kill_all()
    wall = time.monotonic() - began
    counts["wall time"] = f"{wall:.0f} s"
    return FailoverReport(config, invariants, measured, counts, record, wall, workdir)


# -- checks ------------------------------------------------------------------


def stopped_duplicates() -> str:
    """chaos.py's DUPLICATES with one more explanation of a job run again: its handler stopped (it heard
    job.cancel_requested, which nothing but the worker sets here: a lease it presumed lost while it
    could not reach the database) and the worker handed the job back (jobq.release: running -> queued,
    not a reap), the lease being still current, so the job ran again."""
    query = DUPLICATES.replace("e.outcome = 'snoozed'", "e.outcome IN ('snoozed', 'stopped')")
    if query == DUPLICATES:
        raise RuntimeError("chaos.py's DUPLICATES no longer explains snoozes as failover.py expects")
    return query


def check(
    conn: Db,
    config: FailoverConfig,
    pair: Pair,
    fleet: Fleet,
    producer: FailoverProducer,
    record: Failover,
    exits: dict[str, int | None],
) -> tuple[list[Invariant], dict[str, str], dict[str, str]]:
    """The invariants, the measurements of what was lost, and the counts."""
    found = evidence(conn, fleet.leases(), WORKER_ROLE, None, conn.info.user)
    core = core_invariants(found, len(set(producer.acked)))
    stale, dups, counts = found["stale"], found["dups"], found["counts"]
    rows = conn.execute("SELECT id, status, (payload->>'n')::bigint AS n FROM jobq.jobs").fetchall()
    final = {int(r["id"]): (str(r["status"]), int(r["n"])) for r in rows}
    enqueues = judge_enqueues(producer.given, record.acked_before_kill, final)
    logs = [read_log(w.name, w.log_text()) for w in fleet.every]
    outside = judge_outside(logs, final, record.killed, record.promoted)
    wal = record.wal_lost or WalTail(0, 0, 0, record.switch_point)

    unexplained = dups["same_lease"] + dups["unexplained"]
    stopped = conn.execute(stopped_duplicates()).fetchone()
    assert stopped is not None
    after_stop = unexplained - (stopped["same_lease"] + stopped["unexplained"])
    duplicates = Invariant(
        "duplicates_explained", "duplicate executions not explained by a reap, a snooze, or a hand-back",
        f"{unexplained - after_stop} of {dups['duplicates']:,} ({dups['same_lease']} under one lease;"
        f" {after_stop} run again after its worker handed it back, having stopped the handler"
        " of a lease it presumed lost)",
        "0", unexplained - after_stop == 0,
    )  # fmt: skip
    back = [v for v in record.reconnect.values() if v is not None]
    slowest = max((math.inf if v is None else v for v in record.reconnect.values()), default=math.inf)
    unclean = {name: code for name, code in exits.items() if code != 0}
    sync = config.mode == "sync"

    always = [
        Invariant(
            "failover", "primary killed under load; standby promoted (timeline)",
            f"{record.running_at_kill} jobs running; timeline {record.timeline}"
            + ("" if sync else f"; {wal.commits} commits lost with it"),
            "> 0 running; 2" + ("" if sync else "; > 0 lost"),
            record.running_at_kill > 0 and record.timeline == 2 and (sync or wal.commits > 0),
        ),
        core["double_claims"],
        Invariant(
            "drained", "jobs left queued or running after the drain", str(counts["unfinished"]), "0",
            counts["unfinished"] == 0,
        ),
        Invariant(
            "reconnect", "slowest worker: promotion to its first claim",
            "never" if math.isinf(slowest) else f"{slowest:.1f} s ({len(back)}/{len(record.reconnect)} back)",
            f"<= {config.reconnect_limit:.0f} s", slowest <= config.reconnect_limit,
        ),
        Invariant(
            "clean_exit", "workers not exiting 0 within 30 s of SIGTERM",
            f"{len(unclean)} of {len(exits)}" + (f" {unclean}" if unclean else ""), "0", not unclean,
        ),
        Invariant(
            "no_crashes", "workers that exited on their own", str(len(fleet.unexpected_exits)), "0",
            not fleet.unexpected_exits,
        ),
    ]  # fmt: skip
    judged = [
        *outside_invariants(enqueues, outside),
        *(core[k] for k in ("lost", "stale_completions", "second_completions")),
        duplicates,
        core["effects_exactly_once"],
    ]  # fmt: skip
    invariants = always + judged if sync else always

    measured = {
        "enqueues returned, then lost (missing)": f"{len(enqueues.missing):,} of {enqueues.before:,}",
        "ids handed out again (acknowledged id now another job's; run for two payloads)": (
            f"{len(enqueues.other):,}; {len(outside.reissued_ids):,}"
        ),
        "acknowledgements returned, then undone: job ran again; job gone with its enqueue": (
            f"{len(outside.undone):,}; {len(outside.gone):,} of {outside.acks:,}"
        ),
        "(job, lease) tokens issued twice (one job executed twice under one lease)": (
            f"{len(outside.reissued_leases):,}"
        ),
        "stale completions accepted (new primary's log)": str(stale["stale"]),
        "effects-mode jobs without exactly one effect per done job (new primary)": (
            f"{found['effects']['wrong']:,} of {found['effects']['done']:,}"
        ),
        "duplicate executions unexplained (new primary's log)": f"{unexplained} of {dups['duplicates']:,}",
        "the dead primary's WAL after the switch point": f"{wal.bytes:,} bytes, {wal.records:,} records,"
        f" {wal.commits:,} commits",
        "standby behind just before the kill (pg_stat_replication)": f"{record.lag_bytes_seen:,} bytes",
    }
    if pair.relay is not None:
        measured["held back by the relay"] = f"{record.held_bytes:,} bytes over {record.held_for:.1f} s"

    unavailable_lines = sum(len(log.unavailable) for log in logs)
    summary = {
        "jobs acknowledged to the producer (before the kill)": f"{len(producer.acked):,}"
        f" ({record.acked_before_kill:,})",
        "jobs in the table": f"{counts['jobs']:,} ({len(set(final) - set(producer.acked)):,}"
        " from in-doubt commits)",
        "done / failed / cancelled": f"{counts['done']:,} / {counts['failed']:,} / {counts['cancelled']:,}",
        "executions (workers' logs; new primary)": f"{outside.executions:,}; {dups['executions']:,}",
        "reaps (new primary)": f"{counts['reaps']:,}",
        "kill: pg_ctl stop -m immediate": f"{record.killed - record.kill_began:.2f} s",
        "kill to promotion (the harness waits promote_after; pg_ctl promote -w)": (
            f"{record.promoted - record.killed:.2f} s ({config.promote_after:g} s;"
            f" {record.promoted - record.promote_began:.2f} s)"
        ),
        "promotion to every worker claiming again": "never"
        if math.isinf(slowest)
        else f"{slowest:.1f} s (median {statistics.median(back):.1f} s)",
        "worker log lines 'database unavailable/read-only'": str(unavailable_lines),
        "producer transactions failed by the failover (retried)": str(producer.failed_batches),
        "worker processes started": str(len(fleet.every)),
    }
    return invariants, measured, summary


def render(report: FailoverReport, console: Console | None = None) -> None:
    console = console or Console()
    c = report.config
    title = (
        f"pgjobq failover run ({c.name}, {c.mode}hronous standby): {c.jobs:,} jobs of"
        f" {c.handler_ms[0]}-{c.handler_ms[1]} ms (one in {c.long_every}:"
        f" {c.long_ms[0] / 1000:g}-{c.long_ms[1] / 1000:g} s), {c.workers} workers"
        f" ({c.inline_slots} x 1 thread, the others x {c.concurrency}),"
        f" leases {' and '.join(f'{lease:g}' for lease in c.leases)} s"
    )
    print_tables(console, title, report.invariants, report.counts)
    heading = "lost or run again (measured, not judged)" if c.mode == "async" else "the same, measured"
    measured = Table(title=f"{c.mode}hronous replication: {heading}", show_header=False)
    measured.add_column("what")
    measured.add_column("how many", justify="right")
    for what, value in report.measured.items():
        measured.add_row(what, value)
    console.print(measured)
    console.print("[green]all invariants hold[/]" if report.ok else "[red]invariants violated[/]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mode", choices=["sync", "async", "both"], default=os.environ.get("PGJOBQ_FAILOVER_MODE", "sync"),
        help="synchronous standby, asynchronous, or one run of each [env PGJOBQ_FAILOVER_MODE; default sync]",
    )  # fmt: skip
    parser.add_argument(
        "--full", action="store_true", default=os.environ.get("PGJOBQ_FAILOVER_FULL", "") not in ("", "0"),
        help="the full run (40,000 jobs) instead of the short one [env PGJOBQ_FAILOVER_FULL=1]",
    )  # fmt: skip
    parser.add_argument(
        "--workdir", type=Path, default=os.environ.get("PGJOBQ_FAILOVER_WORKDIR") or None,
        help="folder for the logs (default: a new temporary folder) [env PGJOBQ_FAILOVER_WORKDIR]",
    )  # fmt: skip
    args = parser.parse_args(argv)
    modes: list[Mode] = ["sync", "async"] if args.mode == "both" else [args.mode]
    ok = True
    for mode in modes:
        config = FailoverConfig.full(mode) if args.full else FailoverConfig.short(mode)
        workdir = (
            args.workdir / mode
            if args.workdir is not None
            else Path(tempfile.mkdtemp(prefix=f"pgjobq-failover-{config.name}-{mode}-"))
        )
        report = run_failover(config, workdir)
        render(report)
        ok = ok and report.ok
    return 0 if ok else 1


if __name__ == "__main__":
    with servers_run_the_working_tree():  # its servers run the working tree's SQL, as the tests' do
        sys.exit(main())
