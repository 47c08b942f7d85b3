"""Chaos run of durable execution (0.11.0): steps, durable sleeps and signals while workers die.

    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_durable          # short: 400 jobs, about a minute
    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_durable --full   # full: 4,000 jobs (make chaos-durable)

A throwaway PostgreSQL of its own (it restarts it) runs the extension and the
evidence tables below, in schema chaos.  Four real ``pgjobq worker``
processes run chaos.chaos_durable_handlers:run (one with concurrency 1, its
handler on the worker's own thread; the others with a pool of six threads),
under leases of 2 s, reaping and ticking every second, polling every 0.5 s,
logging in with the worker level only (jobq.grant_worker).  Every job runs
three steps whose side effects the handler counts outside the job's
statements (chaos.effects), with random pauses inside and between them; half
of the jobs sleep durably (0.5 to 3 s) between steps a and b, half wait for
a signal of their own key (a timeout of 2 to 4 s) between steps b and c.
Meanwhile:

- a producer (chaos.py's Producer, with these payloads) enqueues the jobs
  steadily over the fault window and keeps every id acknowledged by a commit;
- a signaller sends the signal of most of the jobs that wait for one (80%),
  at a random moment (0 to 4 s) after it saw the job: before the job waits
  for it (the payload then comes at once), while it waits (the signal
  releases it), or after its timeout (the signal releases nothing).  A few
  it sends twice (the second changes nothing).  jobq.signal and the record
  of what it returned are one statement (chaos.signal_calls), so the record
  exists exactly when the signal committed;
- a chaos thread (chaos.py's Chaos, with this schedule) SIGKILLs a worker
  holding running jobs every 2 s (frozen first to see that it holds some) and
  starts a replacement, SIGSTOPs one holding jobs for two of its leases (its
  jobs are reaped and run elsewhere; when it goes on, its handlers are
  zombies whose next step is refused), and restarts PostgreSQL once with -m
  immediate, leaving it down for 3 s; the outage is recorded by the
  database's clock (its last clock_timestamp() before the stop, its first
  after the start).

Then the workers drain the queue (sleeps end, waits end by signal or by
timeout), get SIGTERM, and SQL over the evidence checks the invariants, printed
as a table; the exit status is 1 when one fails:

1. ``effects_once``: for every (job, step), at least one effect; exactly one
   effect made under the lease that recorded the step (the trigger on
   jobq.job_steps captures the job's lease when the row is inserted), and the
   recorded result is that effect's (its token); every other effect belongs
   to an earlier lease that ended without recording the step: reaped (its
   worker was killed or stopped), failed by an error (the database went
   away mid-step), or handed back (jobq.release: the worker presumed the
   lease lost while the server was down, and the handler then raised); not
   one that went to sleep or parked.  None under a later lease (a replay
   that ran its step again).  And every done job's result holds the
   recorded tokens (what the replays returned);
2. ``no_stale_checkpoint``: every step, sleep and wait outcome recorded while
   the job was running was recorded under its current lease and attempt:
   the step's result names the lease that made it, which must be the job's
   lease at insert time; the sleep's wake time was asked for by that lease's
   run; a wait's outcome written by jobq.signal or jobq.tick is recorded for
   the attempt to come.  Plus: every LeaseLost a handler met was of a lease
   that had ended before (no current lease refused), and some were met (a
   run without a zombie tests nothing of the fence);
3. ``sleep_wake``: no claim of a sleeping job before its wake time (the end
   jobq.sleep recorded), no run passing the sleep before it, and the first
   claim after it (by the database's clock: the transition log) no later
   than the poll interval plus SLACK.  An idle worker sleeps until the
   queue's next run_at or the poll interval, a busy one with a thread free
   claims at least every poll interval; SLACK (1 s) is what may come
   between that moment and the claim's row change: the step the worker's
   loop is in (an acknowledgement, heartbeats, reap and tick), the claim's
   round trip, and scheduling on two shared CPUs with the workers, the
   server and the harness busy.  A sleep whose wait overlapped the outage
   is judged from the moment the server was back instead, plus the
   workers' --reconnect-delay-max.  The worst lateness of each kind is
   reported, and that of the runs passing the sleep, not judged (it adds a
   claiming worker killed or stopped, and a job waiting in a worker's batch
   for a free thread);
4. ``signals_once``: every job that waited for a signal has one outcome:
   the payload of the key's first signal, or its timeout; a job parked
   (waiting) is released exactly once, by the transaction of a signal that
   counted it (jobq.signal's return), or, timed out, by jobq.tick with no
   signal counting it; jobq.signal's counts sum to the jobs it released, a
   second signal of a key releases nothing, and every run that got past the
   wait saw its recorded outcome, once per lease;
5. ``nothing_lost``: every acknowledged job is done (no job of this run
   fails for good: a timed-out wait goes on to step c, max_attempts is
   100), nothing is left queued, running or waiting, and every attempt that
   failed, and every run whose handler raised (but Suspended and LeaseLost),
   did so because the database went away (a connection error, by the
   failure's message and the handler's record);

plus ``clean_exit`` (every worker exits 0 on SIGTERM, none on its own) and
``faults`` (kills of workers holding jobs, the SIGSTOP, the restart, reaps).
tests/chaos/test_chaos_durable.py runs the short version and asserts each.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from rich.console import Console
from throwaway_pg import ThrowawayPostgres

from chaos.chaos import (
    QUEUE,
    WORKER_ROLE,
    Chaos,
    ChaosConfig,
    Fleet,
    Invariant,
    Judged,
    Producer,
    keep_evidence,
    print_tables,
    result_column,
    say,
)
from chaos.chaos_durable_handlers import STEPS, handler_grants, signal_key
from helpers.processes import wait_until
from helpers.sqlhelpers import Db
from helpers.working_tree import servers_run_the_working_tree

__all__ = [
    "INVARIANTS",
    "SCHEMA_DDL",
    "DurableConfig",
    "DurableReport",
    "DurableSeen",
    "evidence",
    "judge",
    "main",
    "render",
    "run_durable",
]

HANDLER = "chaos.chaos_durable_handlers:run"

# The keys of every invariant a durable run judges (judge()), in the order of its table.
# tests/chaos/test_chaos_durable.py asserts each of them, and that a run's report has exactly these.
INVARIANTS = (
    "effects_once", "no_stale_checkpoint", "sleep_wake", "signals_once", "nothing_lost", "clean_exit",
    "faults",
)  # fmt: skip

# A failed attempt's error (jobq.jobs.last_error: the exception's class name first) when the database
# went away under the handler: what psycopg raises then, from a durable call ("OperationalError: consuming
# input failed: server closed the connection unexpectedly" after the -m immediate restart) or a
# connection of the handler's own.  Any other failure is a bug.
CONNECTION_ERRORS = (
    r"^(OperationalError|InterfaceError|AdminShutdown|CrashShutdown|CannotConnectNow|ConnectionFailure|"
    r"ConnectionException)\y"
)


@dataclass(frozen=True)
class DurableConfig:
    """The load and the fleet (chaos.py's ChaosConfig: its producer, workers and kills), the durable
    jobs' shapes, the signaller's plan and the sleeps' slack.  Times in seconds."""

    load: ChaosConfig
    step_ms: tuple[int, int] = (10, 150)  # each pause: before and after a step's effect, and between steps
    sleep_share: float = 0.5  # of the jobs sleep between steps a and b
    sleep_seconds: tuple[float, float] = (0.5, 3.0)
    signal_share: float = 0.5  # of the jobs wait for a signal between steps b and c
    timeout_seconds: tuple[float, float] = (2.0, 4.0)
    send_share: float = 0.8  # of the waits get their signal; the others time out
    send_delay: tuple[float, float] = (0.0, 4.0)  # after the signaller saw the job
    twice_share: float = 0.15  # of the signals sent are sent again, 0.5 s later
    backoff_base: float = 0.2  # the queue's retry delays: short, so that retries do not stretch the drain
    backoff_max: float = 1.0
    reconnect_delay_max: float = 1.0  # the workers' (pgjobq worker --reconnect-delay-max)
    slack: float = 1.0  # sleep_wake: a claim's slack beyond the poll interval (the module docstring)
    restart_at: float = 0.6  # of produce_seconds
    stop_at: float = 0.3

    @classmethod
    def short(cls) -> DurableConfig:
        return cls(load=_load("short", jobs=400, produce_seconds=40, drain_timeout=60))

    @classmethod
    def full(cls) -> DurableConfig:
        return cls(load=_load("full", jobs=4_000, produce_seconds=300, drain_timeout=180))

    @property
    def poll_interval(self) -> float:
        return self.load.poll_interval

    @property
    def wake_bound(self) -> float:
        """The latest a sleep's first claim may come after its wake time (sleep_wake)."""
        return self.load.poll_interval + self.slack

    @property
    def outage_bound(self) -> float:
        """The latest it may come after the server was back, when its wait overlapped the outage."""
        return self.reconnect_delay_max + self.load.poll_interval + self.slack


def _load(name: str, jobs: int, produce_seconds: float, drain_timeout: float) -> ChaosConfig:
    return ChaosConfig(
        name=name, jobs=jobs, handler_ms=(5, 80), produce_seconds=produce_seconds, concurrency=6,
        drain_timeout=drain_timeout, workers=4, inline_slots=1, batch=6, leases=(2.0,), reap_interval=1.0,
        poll_interval=0.5, kill_every=2.0, terminate_every=math.inf, stop_leases=2.0, fail_every=1 << 30,
        max_attempts=100, down_for=3.0, seed=20261111,
    )  # fmt: skip


@dataclass
class DurableReport(Judged):
    config: DurableConfig
    invariants: list[Invariant]
    counts: dict[str, str]
    wall: float
    workdir: Path


# -- evidence tables ------------------------------------------------------------------

# What the handler writes (chaos_durable_handlers), what the signaller writes, the producer's ids and the
# outages (both filled after the run), and two logs written by triggers, which belong to the test: every
# change of a job's status or lease (chaos.transitions, with the transaction's id: a signal's release is
# told apart from a tick's), and every row inserted into jobq.job_steps with the job's row as the inserting
# statement left it (chaos.step_log: its status, lease and attempts then).
SCHEMA_DDL = """
CREATE SCHEMA chaos;

CREATE TABLE chaos.runs (
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
    token  uuid        PRIMARY KEY,
    job_id bigint      NOT NULL,
    step   text        NOT NULL,
    lease  bigint      NOT NULL,
    pid    integer     NOT NULL,
    worker text        NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE chaos.sleep_requests (
    token           uuid        PRIMARY KEY,
    job_id          bigint      NOT NULL,
    lease           bigint      NOT NULL,
    name            text        NOT NULL,
    seconds         float8      NOT NULL,
    requested_until timestamptz NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE chaos.resumes (
    token   uuid        PRIMARY KEY,
    job_id  bigint      NOT NULL,
    lease   bigint      NOT NULL,
    kind    text        NOT NULL,  -- sleep (passed it), signal (got the payload), timeout (SignalTimeout)
    name    text        NOT NULL,
    payload jsonb,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE chaos.refusals (
    token  uuid        PRIMARY KEY,
    job_id bigint      NOT NULL,
    lease  bigint      NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- one row per jobq.signal committed, written by its statement: what it returned
CREATE TABLE chaos.signal_calls (
    seq      bigserial   PRIMARY KEY,
    key      text        NOT NULL,
    payload  jsonb       NOT NULL,
    released integer     NOT NULL,
    xid      bigint      NOT NULL DEFAULT txid_current(),
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE chaos.acked (
    id bigint PRIMARY KEY
);

-- the server's outages, by its own clock: its last clock_timestamp() before the stop, its first after
CREATE TABLE chaos.outages (
    down_at timestamptz NOT NULL,
    up_at   timestamptz NOT NULL
);

CREATE TABLE chaos.transitions (
    seq          bigserial   PRIMARY KEY,
    job_id       bigint      NOT NULL,
    old_status   text        NOT NULL,
    new_status   text        NOT NULL,
    old_lease    bigint      NOT NULL,
    new_lease    bigint      NOT NULL,
    locked_by    text,
    old_attempts integer     NOT NULL,
    attempts     integer     NOT NULL,
    reaped       boolean     NOT NULL,
    errored      boolean     NOT NULL,  -- a new last_error: a failed attempt (or a reap)
    last_error   text,
    run_at       timestamptz NOT NULL,
    at           timestamptz NOT NULL,
    xid          bigint      NOT NULL
);

CREATE FUNCTION chaos.log_transition()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    -- jobq.reap appends 'reaped: lease <lease> of <worker> ...' to last_error
    INSERT INTO chaos.transitions
        (job_id, old_status, new_status, old_lease, new_lease, locked_by, old_attempts, attempts, reaped,
         errored, last_error, run_at, at, xid)
    VALUES
        (NEW.id, OLD.status, NEW.status, OLD.lease, NEW.lease, NEW.locked_by, OLD.attempts, NEW.attempts,
         OLD.status = 'running' AND NEW.status <> 'running'
             AND NEW.last_error IS DISTINCT FROM OLD.last_error
             AND NEW.last_error LIKE ('%reaped: lease ' || OLD.lease || ' of %'),
         NEW.last_error IS DISTINCT FROM OLD.last_error, NEW.last_error, NEW.run_at, clock_timestamp(),
         txid_current());
    RETURN NULL;
END
$body$;

CREATE TRIGGER chaos_transitions_trg
    AFTER UPDATE ON jobq.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease IS DISTINCT FROM NEW.lease)
    EXECUTE FUNCTION chaos.log_transition();

CREATE TABLE chaos.step_log (
    seq          bigserial   PRIMARY KEY,
    id           bigint      NOT NULL,
    name         text        NOT NULL,
    kind         text        NOT NULL,
    result       jsonb       NOT NULL,
    attempt      integer     NOT NULL,
    recorded_at  timestamptz NOT NULL,
    job_status   text,  -- the job's row when the step's row was inserted (NULL: no such job)
    job_lease    bigint,
    job_attempts integer,
    at           timestamptz NOT NULL,
    xid          bigint      NOT NULL
);

CREATE FUNCTION chaos.log_step()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    INSERT INTO chaos.step_log
        (id, name, kind, result, attempt, recorded_at, job_status, job_lease, job_attempts, at, xid)
    SELECT NEW.id, NEW.name, NEW.kind, NEW.result, NEW.attempt, NEW.recorded_at, j.status, j.lease,
           j.attempts, clock_timestamp(), txid_current()
      FROM (SELECT) AS one LEFT JOIN jobq.jobs AS j ON j.id = NEW.id;
    RETURN NULL;
END
$body$;

CREATE TRIGGER chaos_step_log_trg
    AFTER INSERT ON jobq.job_steps
    FOR EACH ROW
    EXECUTE FUNCTION chaos.log_step();
"""


# -- the fleet, the producer, the signaller, the faults ----------------------------------------------


class DurableFleet(Fleet):
    """chaos.py's Fleet, its workers running the durable handler and reconnecting within
    reconnect_delay_max."""

    def __init__(self, dsn: str, config: DurableConfig, log_dir: Path) -> None:
        super().__init__(dsn, config.load, log_dir)
        self.durable = config

    def command(self, slot: int, name: str) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command(slot, name)
        argv[argv.index("chaos.chaos_handlers:run")] = HANDLER
        argv += ["--reconnect-delay-max", f"{self.durable.reconnect_delay_max:g}"]
        return argv, env


class DurableProducer(Producer):
    """chaos.py's Producer, enqueueing durable jobs (none keyed, none failing on purpose): each payload
    says the pauses, whether the job sleeps (and how long) and whether it waits for a signal (and its
    timeout)."""

    def __init__(self, dsn: str, config: DurableConfig, id_log: Path) -> None:
        super().__init__(dsn, config.load, id_log)
        self.durable = config

    def _payload(self, n: int) -> dict[str, Any]:
        c, rng = self.durable, self._rng
        sleeps, waits = rng.random() < c.sleep_share, rng.random() < c.signal_share
        return {
            "n": n,
            "ms": list(c.step_ms),
            "fail": False,
            "sleep": round(rng.uniform(*c.sleep_seconds), 3) if sleeps else None,
            "signal": waits,
            "timeout": round(rng.uniform(*c.timeout_seconds), 3) if waits else None,
        }

    def _keyed(self, n: int) -> bool:
        return False


class Signaller(threading.Thread):
    """Sends the signals of the jobs that wait for one, as planned when it first sees each.

    Every 0.1 s it reads the new jobs of the queue (committed: acknowledged
    or in doubt) that wait for a signal, and plans for each, at random: no
    signal (1 - send_share: the wait times out), or one at send_delay after
    now, sent again 0.5 s later for twice_share of them.  Each signal and the
    record of what it returned are one statement (SIGNAL_AND_RECORD);
    connection errors (the restart) put the signal back to be sent again.
    It stops once the producer is done and every planned signal is sent.
    """

    def __init__(self, dsn: str, config: DurableConfig, producer: Producer) -> None:
        super().__init__(name="signaller", daemon=True)
        self.dsn = dsn
        self.config = config
        self.producer = producer
        self.rng = random.Random(config.load.seed + 3)
        self.seen = 0  # jobs waiting for a signal seen
        self.planned = 0  # of them, signals planned (repeats included)
        self.unsent = 0  # jobs left to time out
        self.sent = 0  # signals committed
        self.released = 0  # jobs they released, by what jobq.signal returned
        self.retried = 0  # signals whose statement failed (the outage): sent again
        self.error: BaseException | None = None
        self._plan: list[tuple[float, int, str, dict[str, Any]]] = []  # (when, n, key, payload)
        self._last_id = 0
        self._stopping = threading.Event()
        self._conn: Db | None = None

    def busy(self) -> bool:
        return self.is_alive() and (self.producer.is_alive() or bool(self._plan))

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._signal()
        except BaseException as exc:
            self.error = exc
        finally:
            if self._conn is not None:
                self._conn.close()

    def _db(self) -> Db:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, row_factory=dict_row, application_name="chaos signaller",
                connect_timeout=2,
            )  # fmt: skip
        return self._conn

    def _signal(self) -> None:
        while not self._stopping.wait(0.1):
            producing = self.producer.is_alive()
            try:
                self._read_new()
                self._send_due()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                continue
            if not producing and not self._plan:
                return

    def _read_new(self) -> None:
        c = self.config
        rows = self._db().execute(NEW_WAITS, (QUEUE, self._last_id)).fetchall()
        now = time.monotonic()
        for row in rows:
            job_id = int(row["id"])
            self._last_id = max(self._last_id, job_id)
            self.seen += 1
            if self.rng.random() >= c.send_share:
                self.unsent += 1
                continue
            key = signal_key(job_id)
            at = now + self.rng.uniform(*c.send_delay)
            payload = {"key": key, "nonce": self.rng.randrange(1 << 30)}
            heapq.heappush(self._plan, (at, job_id, key, payload))
            self.planned += 1
            if self.rng.random() < c.twice_share:
                again = {"key": key, "nonce": self.rng.randrange(1 << 30), "again": True}
                heapq.heappush(self._plan, (at + 0.5, job_id, key, again))
                self.planned += 1

    def _send_due(self) -> None:
        while self._plan and self._plan[0][0] <= time.monotonic():
            _, _, key, payload = self._plan[0]
            params = {"key": key, "payload": Jsonb(payload)}
            try:
                row = self._db().execute(SIGNAL_AND_RECORD, params).fetchone()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self.retried += 1
                raise  # left in the plan: sent again once the server is back
            heapq.heappop(self._plan)
            assert row is not None
            self.sent += 1
            self.released += int(row["released"])


# The jobs of the queue waiting for a signal after the last one seen
NEW_WAITS = (
    "SELECT id FROM jobq.jobs WHERE queue = %s AND id > %s AND (payload->>'signal')::boolean ORDER BY id"
)

# jobq.signal and the record of what it returned, in one statement (so one transaction, whose id the
# record keeps: the jobs it released are logged in chaos.transitions under the same one)
SIGNAL_AND_RECORD = """
WITH sent AS (
    SELECT jobq.signal(%(key)s, %(payload)s::jsonb) AS released
)
INSERT INTO chaos.signal_calls (key, payload, released)
SELECT %(key)s, %(payload)s::jsonb, s.released FROM sent AS s
RETURNING released
"""


class DurableChaos(Chaos):
    """chaos.py's Chaos (its kills, SIGSTOP and bookkeeping), on this run's schedule: kills every
    kill_every from the start, the SIGSTOP at stop_at of the production, one restart -m immediate at
    restart_at, kills until the producer and the signaller are done.  No connection is terminated."""

    def __init__(
        self, config: DurableConfig, server: ThrowawayPostgres, dsn: str, fleet: Fleet, producer: Producer,
        signaller: Signaller,
    ) -> None:  # fmt: skip
        super().__init__(config.load, server, dsn, fleet, producer)
        self.durable = config
        self.signaller = signaller
        self.outages: list[tuple[datetime, datetime]] = []  # (down_at, up_at) by the database's clock

    def _script(self) -> None:
        c, d = self.config, self.durable
        t0 = time.monotonic()
        self._next_kill = t0 + c.kill_every
        self._next_terminate = math.inf
        self._run_faults_until(t0 + d.stop_at * c.produce_seconds)
        self._stop_and_continue()
        self._run_faults_until(max(time.monotonic() + 2, t0 + d.restart_at * c.produce_seconds))
        self._restart_immediate()
        while self.producer.is_alive() or self.signaller.busy():
            self._run_faults_until(time.monotonic() + 0.5)
        say("faults over")

    def _clock(self) -> datetime:
        value: datetime = self._query("SELECT clock_timestamp() AS t")[0]["t"]
        return value

    def _restart_immediate(self) -> None:
        """Restart PostgreSQL -m immediate, down for down_for; the outage by the database's clock."""
        say("restart PostgreSQL -m immediate")
        down_at = self._clock()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.server.stop("immediate")
        time.sleep(self.config.down_for)
        self.server.start()
        up_at = self._clock()
        self.outages.append((down_at, up_at))
        say(f"PostgreSQL back: down {(up_at - down_at).total_seconds():.1f} s by its clock")
        self._resume_faults()


# -- checks ------------------------------------------------------------------------------------------

# (1) Effects: the (job, step) pairs of every done job, every step recorded and every effect.  For each:
# its effects, those made under the lease that recorded the step (the job's lease when its row was
# inserted) and whether the recorded token is theirs, and the others: each must be of an earlier lease
# that ended without going on: reaped, failed by an error, or handed back (jobq.release: a worker that
# presumed the lease lost while the server was down, and whose handler then raised, gives the job back
# with its attempt).  Not one that went to sleep or parked.  Plus done jobs whose result does not hold
# the recorded tokens.
EFFECTS = """
WITH recorded AS (
    SELECT l.id AS job_id, l.name AS step, l.result, l.job_lease AS lease
      FROM chaos.step_log AS l
     WHERE l.kind = 'step'
), pairs AS (
    SELECT j.id AS job_id, s.step
      FROM jobq.jobs AS j CROSS JOIN unnest(%(steps)s::text[]) AS s(step)
     WHERE j.queue = %(queue)s AND j.status = 'done'
    UNION
    SELECT r.job_id, r.step FROM recorded AS r
    UNION
    SELECT f.job_id, f.step FROM chaos.effects AS f
), ended AS (
    SELECT t.job_id, t.old_lease AS lease, bool_or(t.reaped) AS reaped
      FROM chaos.transitions AS t
     WHERE t.old_status = 'running' AND t.new_status <> 'running'
       AND (t.reaped OR t.errored
            -- handed back (jobq.release): queued again at once, its attempt given back, not asleep
            OR (t.new_status = 'queued' AND t.new_lease = t.old_lease AND t.attempts = t.old_attempts - 1
                AND t.run_at <= t.at
                AND NOT EXISTS (SELECT FROM chaos.step_log AS l
                                 WHERE l.id = t.job_id AND l.kind = 'sleep' AND l.job_lease = t.old_lease)))
     GROUP BY t.job_id, t.old_lease
), effects AS (
    SELECT p.job_id, p.step, r.lease AS recorder, r.result, f.token, f.lease,
           f.lease = r.lease AS by_recorder,
           e.lease IS NOT NULL AND (r.lease IS NULL OR f.lease < r.lease) AS explained,
           coalesce(e.reaped, false) AS by_reap
      FROM pairs AS p
      LEFT JOIN recorded AS r USING (job_id, step)
      LEFT JOIN chaos.effects AS f USING (job_id, step)
      LEFT JOIN ended AS e ON e.job_id = f.job_id AND e.lease = f.lease
), per_pair AS (
    SELECT job_id, step, bool_or(recorder IS NOT NULL) AS recorded,
           count(token) AS effects,
           count(token) FILTER (WHERE by_recorder) AS by_recorder,
           count(token) FILTER (WHERE by_recorder AND token::text = result->>'token') AS matching,
           count(token) FILTER (WHERE by_recorder IS NOT TRUE) AS extra,
           count(token) FILTER (WHERE by_recorder IS NOT TRUE AND explained AND by_reap) AS extra_reaped,
           count(token) FILTER (WHERE by_recorder IS NOT TRUE AND NOT explained) AS unexplained
      FROM effects
     GROUP BY job_id, step
), results AS (
    SELECT j.id, {result} AS result
      FROM jobq.jobs AS j
     WHERE j.queue = %(queue)s AND j.status = 'done'
)
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE recorded) AS recorded,
       coalesce(sum(effects), 0) AS effects,
       coalesce(sum(extra), 0) AS extra,
       coalesce(sum(extra_reaped), 0) AS extra_reaped,
       coalesce(sum(unexplained), 0) AS unexplained,
       count(*) FILTER (WHERE effects = 0) AS without_effect,
       count(*) FILTER (WHERE NOT recorded) AS unrecorded,
       count(*) FILTER (WHERE recorded AND by_recorder <> 1) AS recorder_not_once,
       count(*) FILTER (WHERE recorded AND matching <> 1) AS result_not_effect,
       count(*) FILTER (WHERE effects = 0 OR NOT recorded OR by_recorder <> 1 OR matching <> 1
                           OR unexplained > 0) AS wrong,
       (SELECT count(*) FROM results AS x
         WHERE EXISTS (SELECT FROM unnest(%(steps)s::text[]) AS s(step)
                        WHERE x.result->>s.step IS DISTINCT FROM
                              (SELECT r.result->>'token' FROM recorded AS r
                                WHERE r.job_id = x.id AND r.step = s.step))) AS results_wrong
  FROM per_pair
"""

# (2) Every row of jobq.job_steps recorded while its job was running (steps, sleeps, a wait's outcome
# when the signal had come) was recorded under the job's lease and attempt at insert time: a step's
# result names the lease that made it, a sleep's end was asked for by that lease's run (no earlier than
# it asked); a wait's outcome written by jobq.signal or jobq.tick (the job queued by the same
# statement) is for the attempt to come.  And every LeaseLost a handler met was of a lease that had
# ended before.
STALE = """
SELECT count(*) AS logged,
       count(*) FILTER (WHERE l.kind = 'step') AS steps,
       count(*) FILTER (WHERE l.kind = 'sleep') AS sleeps,
       count(*) FILTER (WHERE l.kind = 'signal') AS outcomes,
       count(*) FILTER (WHERE l.kind IN ('step', 'sleep')
                          AND (l.job_status IS DISTINCT FROM 'running'
                               OR l.attempt IS DISTINCT FROM l.job_attempts))
           AS not_running,
       count(*) FILTER (WHERE l.kind = 'step' AND (l.result->>'lease')::bigint IS DISTINCT FROM l.job_lease)
           AS other_lease,
       count(*) FILTER (WHERE l.kind = 'sleep'
                          AND NOT EXISTS (SELECT FROM chaos.sleep_requests AS q
                                           WHERE q.job_id = l.id AND q.lease = l.job_lease AND q.name = l.name
                                             AND q.requested_until <= (l.result->>'until')::timestamptz))
           AS sleep_unasked,
       count(*) FILTER (WHERE l.kind = 'signal'
                          AND NOT ((l.job_status = 'running' AND l.attempt = l.job_attempts)
                                   OR (l.job_status = 'queued' AND l.attempt = l.job_attempts + 1)))
           AS outcome_misplaced,
       count(*) FILTER (WHERE l.kind NOT IN ('step', 'sleep', 'signal')) AS other_kinds,
       (SELECT count(*) FROM chaos.refusals) AS refused,
       (SELECT count(*) FROM chaos.refusals AS r
         WHERE NOT EXISTS (SELECT FROM chaos.transitions AS t
                            WHERE t.job_id = r.job_id AND t.old_lease = r.lease AND t.old_status = 'running'
                              AND t.new_status <> 'running' AND t.at <= r.at)) AS refused_live
  FROM chaos.step_log AS l
"""

# (3) Sleeps: each recorded sleep's end (until), the first claim of its job after the sleep was
# recorded, the claims before until (early), the runs that passed the sleep before until (early), and
# the outage its wait overlapped if any (down_at <= claim and up_at >= until): lateness from until, or
# from the server's return.
SLEEPS = """
WITH slept AS (
    SELECT l.id AS job_id, (l.result->>'until')::timestamptz AS until, l.recorded_at,
           (SELECT min(t.at) FROM chaos.transitions AS t
             WHERE t.job_id = l.id AND t.new_lease <> t.old_lease AND t.at > l.recorded_at) AS claimed_at,
           (SELECT count(*) FROM chaos.transitions AS t
             WHERE t.job_id = l.id AND t.new_lease <> t.old_lease AND t.at > l.recorded_at
               AND t.at < (l.result->>'until')::timestamptz) AS early_claims,
           (SELECT count(*) FROM chaos.resumes AS r
             WHERE r.job_id = l.id AND r.kind = 'sleep' AND r.at < (l.result->>'until')::timestamptz)
               AS early_resumes,
           (SELECT min(r.at) FROM chaos.resumes AS r WHERE r.job_id = l.id AND r.kind = 'sleep') AS resumed_at
      FROM chaos.step_log AS l
     WHERE l.kind = 'sleep'
), judged AS (
    SELECT s.*, o.up_at,
           extract(epoch FROM s.claimed_at - s.until)::float8 AS late,
           extract(epoch FROM s.claimed_at - greatest(s.until, o.up_at))::float8 AS late_after_outage,
           extract(epoch FROM s.resumed_at - s.until)::float8 AS resume_late
      FROM slept AS s
      LEFT JOIN LATERAL (SELECT max(o.up_at) AS up_at FROM chaos.outages AS o
                          WHERE o.down_at <= s.claimed_at AND o.up_at >= s.until) AS o ON true
)
SELECT count(*) AS sleeps,
       count(*) FILTER (WHERE claimed_at IS NULL) AS never_claimed,
       coalesce(sum(early_claims), 0) AS early_claims,
       coalesce(sum(early_resumes), 0) AS early_resumes,
       count(*) FILTER (WHERE resumed_at IS NULL) AS never_resumed,
       count(*) FILTER (WHERE up_at IS NULL) AS clear,
       count(*) FILTER (WHERE up_at IS NOT NULL) AS across_outage,
       max(late) FILTER (WHERE up_at IS NULL) AS worst,
       max(late_after_outage) FILTER (WHERE up_at IS NOT NULL) AS worst_after_outage,
       count(*) FILTER (WHERE up_at IS NULL AND late > %(bound)s) AS late,
       count(*) FILTER (WHERE up_at IS NOT NULL AND late_after_outage > %(outage_bound)s)
           AS late_after_outage,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY late) FILTER (WHERE up_at IS NULL) AS median,
       max(resume_late) AS worst_resume
  FROM judged
"""

# (4) Signals: per job waiting for one, its outcomes (rows of kind signal), its parks (-> waiting) and
# releases (waiting -> queued), the releases made in the transaction of a signal of its key that
# counted one, what the key's signals returned, and what the runs past the wait saw.
SIGNALS = """
WITH awaiting AS (
    SELECT j.id AS job_id, 'sig-' || j.id AS key, {result} AS result
      FROM jobq.jobs AS j
     WHERE j.queue = %(queue)s AND (j.payload->>'signal')::boolean
), outcomes AS (
    SELECT l.id AS job_id, count(*) AS n, (array_agg(l.result ORDER BY l.seq))[1] AS result
      FROM chaos.step_log AS l
     WHERE l.kind = 'signal'
     GROUP BY l.id
), calls AS (
    SELECT c.key, count(*) AS calls, sum(c.released) AS released,
           (array_agg(c.payload ORDER BY c.seq))[1] AS first_payload,
           count(*) FILTER (WHERE c.released <> 0 AND c.seq > (SELECT min(f.seq) FROM chaos.signal_calls AS f
                                                               WHERE f.key = c.key)) AS later_released
      FROM chaos.signal_calls AS c
     GROUP BY c.key
), moves AS (
    SELECT a.job_id,
           count(t.seq) FILTER (WHERE t.new_status = 'waiting') AS parks,
           count(t.seq) FILTER (WHERE t.old_status = 'waiting' AND t.new_status = 'queued') AS releases,
           count(t.seq) FILTER (WHERE t.old_status = 'waiting' AND t.new_status = 'queued'
                                  AND EXISTS (SELECT FROM chaos.signal_calls AS c
                                               WHERE c.key = a.key AND c.xid = t.xid AND c.released > 0))
               AS by_signal
      FROM awaiting AS a LEFT JOIN chaos.transitions AS t ON t.job_id = a.job_id
     GROUP BY a.job_id
), seen AS (
    SELECT r.job_id, count(*) AS resumes, count(DISTINCT r.lease) AS leases,
           count(*) FILTER (WHERE r.kind NOT IN ('signal', 'timeout')) AS odd,
           array_agg(DISTINCT CASE WHEN r.kind = 'timeout' THEN '"timeout"'::jsonb ELSE r.payload END)
               AS outcomes_seen
      FROM chaos.resumes AS r
     WHERE r.kind IN ('signal', 'timeout')
     GROUP BY r.job_id
), judged AS (
    SELECT a.job_id, a.result AS job_result, o.n, o.result, m.parks, m.releases, m.by_signal,
           coalesce(c.calls, 0) AS calls, coalesce(c.released, 0) AS released, c.first_payload,
           coalesce(c.later_released, 0) AS later_released,
           coalesce(s.resumes, 0) AS resumes, coalesce(s.leases, 0) AS leases, coalesce(s.odd, 0) AS odd,
           s.outcomes_seen,
           CASE WHEN o.result ? 'payload' THEN o.result->'payload'
                WHEN o.result ? 'timed_out' THEN '"timeout"'::jsonb END AS outcome
      FROM awaiting AS a
      LEFT JOIN outcomes AS o USING (job_id)
      LEFT JOIN calls AS c ON c.key = a.key
      LEFT JOIN moves AS m USING (job_id)
      LEFT JOIN seen AS s USING (job_id)
)
SELECT count(*) AS awaiting,
       count(*) FILTER (WHERE result ? 'payload' AND parks = 0) AS at_once,
       count(*) FILTER (WHERE result ? 'payload' AND parks = 1) AS released_waiting,
       count(*) FILTER (WHERE result ? 'timed_out') AS timed_out,
       count(*) FILTER (WHERE calls > 0) AS signalled,
       count(*) FILTER (WHERE calls > 0 AND result ? 'timed_out') AS signalled_too_late,
       coalesce(sum(calls), 0) AS calls,
       coalesce(sum(released), 0) AS released,
       coalesce(sum(by_signal), 0) AS released_logged,
       count(*) FILTER (WHERE n IS DISTINCT FROM 1) AS outcomes_not_one,
       count(*) FILTER (WHERE parks > 1 OR releases <> parks) AS not_released_once,
       count(*) FILTER (WHERE result ? 'payload'
                          AND (outcome IS DISTINCT FROM first_payload
                               OR by_signal <> parks OR released <> parks)) AS payload_wrong,
       count(*) FILTER (WHERE result ? 'timed_out' AND (parks <> 1 OR by_signal <> 0 OR released <> 0))
           AS timeout_wrong,
       count(*) FILTER (WHERE later_released > 0) AS second_signal_released,
       count(*) FILTER (WHERE resumes = 0 OR leases <> resumes OR odd > 0
                           OR outcomes_seen IS DISTINCT FROM ARRAY[outcome]
                           OR job_result->'signal' IS DISTINCT FROM outcome) AS resumes_wrong,
       (SELECT count(*) FROM chaos.signal_calls AS c
         WHERE c.released <> (SELECT count(*) FROM chaos.transitions AS t
                               WHERE t.xid = c.xid AND t.old_status = 'waiting' AND t.new_status = 'queued'
                                 AND t.job_id = substr(c.key, 5)::bigint)) AS calls_miscounted
  FROM judged
"""

# (5) Every acknowledged job done; nothing of the queue left queued, running or waiting; jobs in the
# table that no commit acknowledged (in doubt); the failed attempts, and those whose error is not the
# database going away (CONNECTION_ERRORS); the runs whose handler raised (failed, handed back, or
# refused), and those that raised anything else.
LOST = """
SELECT count(*) AS acked,
       count(*) FILTER (WHERE j.id IS NULL) AS missing,
       count(*) FILTER (WHERE j.status = 'done') AS done,
       count(*) FILTER (WHERE j.status = 'failed') AS failed,
       count(*) FILTER (WHERE j.status IS DISTINCT FROM 'done') AS lost,
       (SELECT count(*) FROM jobq.jobs AS x WHERE x.status IN ('queued', 'running', 'waiting')) AS left_over,
       (SELECT count(*) FROM jobq.jobs AS x
         WHERE NOT EXISTS (SELECT FROM chaos.acked AS y WHERE y.id = x.id)) AS in_doubt,
       (SELECT count(*) FROM chaos.transitions AS t
         WHERE t.old_status = 'running' AND t.errored AND NOT t.reaped) AS failed_attempts,
       (SELECT count(*) FROM chaos.transitions AS t
         WHERE t.old_status = 'running' AND t.errored AND NOT t.reaped
           AND t.last_error !~ %(connection_errors)s) AS other_failures,
       (SELECT count(*) FROM chaos.runs AS r WHERE r.outcome LIKE 'error: %%') AS runs_raised,
       (SELECT count(*) FROM chaos.runs AS r
         WHERE r.outcome LIKE 'error: %%' AND substr(r.outcome, 8) !~ %(connection_errors)s)
           AS runs_other_errors,
       (SELECT coalesce(jsonb_object_agg(e.error, e.n), '{}')
          FROM (SELECT split_part(t.last_error, ':', 1) AS error, count(*) AS n
                  FROM chaos.transitions AS t
                 WHERE t.old_status = 'running' AND t.errored AND NOT t.reaped
                 GROUP BY 1) AS e) AS failures_by_error
  FROM chaos.acked AS a LEFT JOIN jobq.jobs AS j ON j.id = a.id
"""

UNFINISHED = "SELECT count(*) AS n FROM jobq.jobs WHERE status IN ('queued', 'running', 'waiting')"

COUNTS = """
SELECT (SELECT count(*) FROM chaos.runs) AS runs,
       (SELECT count(*) FROM chaos.runs WHERE outcome = 'suspended') AS suspended,
       (SELECT count(*) FROM chaos.runs WHERE outcome IS NULL) AS unfinished_runs,
       (SELECT count(*) FROM chaos.transitions WHERE reaped) AS reaps,
       (SELECT count(*) FROM chaos.transitions WHERE new_lease <> old_lease) AS claims,
       (SELECT count(*) FROM chaos.resumes WHERE kind = 'sleep') AS sleep_passes,
       (SELECT count(*) FROM chaos.sleep_requests) AS sleep_requests
"""


def _one(conn: Db, query: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def evidence(conn: Db, config: DurableConfig) -> dict[str, dict[str, Any]]:
    """What the evidence tables say: one row of numbers per query above, by name."""
    for ddl in (
        "CREATE INDEX IF NOT EXISTS transitions_job_idx ON chaos.transitions (job_id, seq)",
        "CREATE INDEX IF NOT EXISTS transitions_xid_idx ON chaos.transitions (xid)",
        "CREATE INDEX IF NOT EXISTS effects_job_idx ON chaos.effects (job_id, step)",
        "CREATE INDEX IF NOT EXISTS step_log_job_idx ON chaos.step_log (id, name)",
        "CREATE INDEX IF NOT EXISTS resumes_job_idx ON chaos.resumes (job_id)",
        "CREATE INDEX IF NOT EXISTS signal_calls_key_idx ON chaos.signal_calls (key)",
        "ANALYZE chaos.transitions, chaos.effects, chaos.step_log, chaos.resumes, chaos.signal_calls,"
        " chaos.sleep_requests, chaos.refusals, chaos.runs, chaos.acked",
    ):
        conn.execute(ddl)
    result = result_column(conn)
    params = {
        "queue": QUEUE, "steps": list(STEPS), "bound": config.wake_bound, "outage_bound": config.outage_bound,
        "connection_errors": CONNECTION_ERRORS,
    }  # fmt: skip
    queries = {
        "effects": EFFECTS.replace("{result}", result),
        "stale": STALE,
        "sleeps": SLEEPS,
        "signals": SIGNALS.replace("{result}", result),
        "lost": LOST,
        "counts": COUNTS,
    }
    return {name: _one(conn, query, params) for name, query in queries.items()}


@dataclass(frozen=True)
class DurableSeen:
    """What a durable run saw besides its evidence tables, as judge() weighs it."""

    acked: int  # ids the producer was given, each once
    exits: dict[str, int | None]  # every worker's exit status after SIGTERM (None: still running)
    unexpected_exits: list[tuple[str, int | None]]  # workers that exited on their own
    kills: int
    kills_holding: int  # of them, of a worker seen holding running jobs
    stopped: bool  # the SIGSTOP happened
    # the restarts: (down_at, up_at) by the server's clock
    outages: list[tuple[datetime, datetime]] = field(default_factory=list)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def judge(
    found: Mapping[str, Mapping[str, Any]], config: DurableConfig, seen: DurableSeen
) -> list[Invariant]:
    """Every invariant of a durable run (INVARIANTS), from its evidence() and what it saw besides."""
    effects, stale, sleeps, signals, lost, counts = (
        found[k] for k in ("effects", "stale", "sleeps", "signals", "lost", "counts")
    )
    stale_total = (
        stale["not_running"] + stale["other_lease"] + stale["sleep_unasked"] + stale["outcome_misplaced"]
        + stale["other_kinds"]
    )  # fmt: skip
    signals_wrong = (
        signals["outcomes_not_one"] + signals["not_released_once"] + signals["payload_wrong"]
        + signals["timeout_wrong"] + signals["second_signal_released"] + signals["resumes_wrong"]
        + signals["calls_miscounted"]
    )  # fmt: skip
    unclean = {name: status for name, status in seen.exits.items() if status != 0}
    return [
        Invariant(
            "effects_once",
            "(job, step) pairs without one effect per recording lease, its token recorded, every other effect"
            " of an earlier lease ended before its checkpoint; done jobs' results not the recorded tokens",
            f"{effects['wrong']} of {effects['pairs']:,} ({effects['without_effect']} without effect,"
            f" {effects['unrecorded']} unrecorded, {effects['recorder_not_once']} not once by the recorder,"
            f" {effects['result_not_effect']} result not its effect, {effects['unexplained']} unexplained of"
            f" {effects['extra']} re-run); {effects['results_wrong']}",
            "0 (re-runs > 0); 0",
            effects["wrong"] == 0 and effects["results_wrong"] == 0 and effects["pairs"] > 0
            and effects["extra"] > 0,
        ),
        Invariant(
            "no_stale_checkpoint",
            "steps, sleeps and outcomes not recorded under the job's current lease and attempt;"
            " LeaseLost of a live lease; stale leases refused",
            f"{stale_total} of {stale['logged']:,} ({stale['not_running']} not running,"
            f" {stale['other_lease']} another lease, {stale['sleep_unasked']} sleeps unasked,"
            f" {stale['outcome_misplaced']} outcomes misplaced); {stale['refused_live']}; {stale['refused']}",
            "0; 0; > 0",
            stale_total == 0 and stale["refused_live"] == 0 and stale["refused"] > 0 and stale["steps"] > 0,
        ),
        Invariant(
            "sleep_wake",
            "sleeps: claims and runs past the sleep before its end; first claims later than"
            f" {config.wake_bound:g} s after it (poll {config.poll_interval:g} s + slack {config.slack:g} s),"
            f" or, across the outage, {config.outage_bound:g} s after the server was back",
            f"{sleeps['early_claims']}, {sleeps['early_resumes']}; {sleeps['late']} of {sleeps['clear']}"
            f" (worst {_secs(sleeps['worst'])}), {sleeps['late_after_outage']} of {sleeps['across_outage']}"
            f" (worst {_secs(sleeps['worst_after_outage'])}); {sleeps['never_claimed']} never claimed",
            "0, 0; 0, 0; 0",
            sleeps["early_claims"] == 0 and sleeps["early_resumes"] == 0 and sleeps["late"] == 0
            and sleeps["late_after_outage"] == 0 and sleeps["never_claimed"] == 0
            and sleeps["never_resumed"] == 0 and sleeps["sleeps"] > 0,
        ),
        Invariant(
            "signals_once",
            "waits not released exactly once by what their signal counted, or timed out unreleased;"
            " payloads not the first signal's; second signals releasing; runs seeing another outcome",
            f"{signals_wrong} of {signals['awaiting']} ({signals['outcomes_not_one']} outcomes not one,"
            f" {signals['not_released_once']} not released once, {signals['payload_wrong']} payload,"
            f" {signals['timeout_wrong']} timeout, {signals['second_signal_released']} second signal,"
            f" {signals['resumes_wrong']} runs, {signals['calls_miscounted']} counts);"
            f" released {signals['released']} = {signals['released_logged']} logged",
            "0; all kinds",
            signals_wrong == 0 and signals["released"] == signals["released_logged"]
            and signals["at_once"] > 0 and signals["released_waiting"] > 0 and signals["timed_out"] > 0,
        ),
        Invariant(
            "nothing_lost",
            "acknowledged jobs not done; jobs left queued, running or waiting; attempts failed, and runs"
            " raising, but by the database going away",
            f"{lost['lost']} of {lost['acked']:,} ({lost['missing']} missing, {lost['failed']} failed);"
            f" {lost['left_over']}; {lost['other_failures']} of {lost['failed_attempts']} failed attempts,"
            f" {lost['runs_other_errors']} of {lost['runs_raised']} runs raising",
            f"0 of {seen.acked:,}; 0; 0, 0",
            lost["lost"] == 0 and lost["left_over"] == 0 and lost["other_failures"] == 0
            and lost["runs_other_errors"] == 0 and lost["acked"] == seen.acked > 0,
        ),
        Invariant(
            "clean_exit",
            "workers not exiting 0 within 30 s of SIGTERM; workers that exited on their own",
            f"{len(unclean)} of {len(seen.exits)}" + (f" {unclean}" if unclean else "")
            + f"; {len(seen.unexpected_exits)}",
            "0; 0",
            not unclean and not seen.unexpected_exits and len(seen.exits) > 0,
        ),
        Invariant(
            "faults",
            "faults: kills (of workers holding jobs), SIGSTOP, restarts -m immediate, reaps",
            f"{seen.kills} ({seen.kills_holding}), {int(seen.stopped)}, {len(seen.outages)},"
            f" {counts['reaps']}",
            "> 0, 1, 1, > 0",
            seen.kills_holding > 0 and seen.stopped and len(seen.outages) == 1 and counts["reaps"] > 0,
        ),
    ]  # fmt: skip


def check(
    conn: Db, config: DurableConfig, chaos: DurableChaos, fleet: Fleet, producer: Producer,
    signaller: Signaller, exits: dict[str, int | None],
) -> tuple[list[Invariant], dict[str, str]]:  # fmt: skip
    found = evidence(conn, config)
    seen = DurableSeen(
        acked=len(set(producer.acked)), exits=exits, unexpected_exits=list(fleet.unexpected_exits),
        kills=chaos.kills, kills_holding=chaos.kills_holding, stopped=chaos.stop is not None,
        outages=list(chaos.outages),
    )  # fmt: skip
    invariants = judge(found, config, seen)
    effects, stale, sleeps, signals, lost, counts = (
        found[k] for k in ("effects", "stale", "sleeps", "signals", "lost", "counts")
    )
    stop = chaos.stop
    summary = {
        "jobs acknowledged (in doubt)": f"{lost['acked']:,} ({lost['in_doubt']})",
        "done / failed": f"{lost['done']:,} / {lost['failed']:,}",
        "runs (suspended; never finished: killed)": f"{counts['runs']:,} ({counts['suspended']:,};"
        f" {counts['unfinished_runs']:,})",
        "claims; reaps": f"{counts['claims']:,}; {counts['reaps']:,}",
        "steps recorded; effects (re-run: after a reap / after an error or a hand-back)":
        f"{effects['recorded']:,};"
        f" {effects['effects']:,} ({effects['extra']:,}: {effects['extra_reaped']:,} /"
        f" {effects['extra'] - effects['extra_reaped'] - effects['unexplained']:,})",
        "attempts failed, by error": f"{lost['failed_attempts']}: "
        + (", ".join(f"{k} {v}" for k, v in sorted(lost["failures_by_error"].items())) or "none"),
        "LeaseLost met by handlers (stale leases refused)": f"{stale['refused']:,}",
        "sleeps (across the outage); passes of a sleep": f"{sleeps['sleeps']:,} ({sleeps['across_outage']});"
        f" {counts['sleep_passes']:,}",
        "sleep wake: median / worst lateness of the first claim": f"{_secs(sleeps['median'])} /"
        f" {_secs(sleeps['worst'])}; across the outage, after it: {_secs(sleeps['worst_after_outage'])}",
        "sleep wake: worst lateness of the run passing it (not judged: kills, SIGSTOP, batches)": _secs(
            sleeps["worst_resume"]
        ),
        "waits for a signal: at once / released waiting / timed out": f"{signals['awaiting']:,}:"
        f" {signals['at_once']} / {signals['released_waiting']} / {signals['timed_out']}",
        "signals committed (keys; released; sent too late)": f"{signals['calls']:,} ({signals['signalled']};"
        f" {signals['released']}; {signals['signalled_too_late']})",
        "signaller: sent / statements failed (sent again) / left to time out": f"{signaller.sent} /"
        f" {signaller.retried} / {signaller.unsent}",
        "workers SIGKILLed (holding running jobs; the jobs)": f"{chaos.kills} ({chaos.kills_holding};"
        f" {chaos.killed_held})",
        "worker SIGSTOPped": (
            f"{stop.worker}, {stop.stopped_for:.1f} s, holding {len(stop.held)}" if stop else "none"
        ),
        "PostgreSQL restarts -m immediate (down, by its clock)": ", ".join(
            f"{(up - down).total_seconds():.1f} s" for down, up in chaos.outages
        ) or "none",
        "worker processes started": str(len(fleet.every)),
    }  # fmt: skip
    return invariants, summary


# -- the run -------------------------------------------------------------------------------------------


def _prepare(dsn: str, config: DurableConfig) -> str:
    """Install the extension, the evidence tables and the queue's retry delays; the workers' DSN (a role
    with the worker level and the handler's tables only)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgjobq")
        conn.execute(SCHEMA_DDL)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(WORKER_ROLE)))
        conn.execute("SELECT jobq.grant_worker(%s::regrole)", (WORKER_ROLE,))
        conn.execute(handler_grants(WORKER_ROLE))
        conn.execute(
            "SELECT jobq.configure_queue(%s, backoff_base => make_interval(secs => %s),"
            " backoff_max => make_interval(secs => %s))",
            (QUEUE, config.backoff_base, config.backoff_max),
        )
    return make_conninfo(dsn, user=WORKER_ROLE)


def run_durable(config: DurableConfig, workdir: Path) -> DurableReport:
    """One durable chaos run; the workers' logs (and, on a failure, the evidence) go to workdir."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    load = config.load
    invariants: list[Invariant] = []
    counts: dict[str, str] = {}
    server = ThrowawayPostgres(fast=True, settings={"max_connections": str(load.max_connections)})
    with server:
        dsn = server.dsn()
        worker_dsn = _prepare(dsn, config)
        fleet = DurableFleet(worker_dsn, config, workdir)
        producer = DurableProducer(dsn, config, workdir / "acked-ids.txt")
        signaller = Signaller(dsn, config, producer)
        chaos = DurableChaos(config, server, dsn, fleet, producer, signaller)
        say(f"{load.name} durable chaos run: {load.jobs:,} jobs, {load.workers} workers; logs in {workdir}")
        try:
            fleet.start()
            wait_until(chaos.connected, timeout=60, interval=0.1)
            producer.start()
            signaller.start()
            chaos.start()
            chaos.join()
            if chaos.error is not None:
                producer.abort()
                signaller.stop()
            producer.join()
            signaller.join()
            for failed in (chaos, producer, signaller):
                if failed.error is not None:
                    raise RuntimeError(f"the {failed.name} thread failed") from failed.error
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:

                def drained() -> bool:
                    fleet.replace_dead()
                    row = _one(conn, UNFINISHED)
                    return bool(row["n"] == 0)

                say("draining")
                wait_until(drained, load.drain_timeout, interval=0.5)
                exits = fleet.terminate_all(timeout=30)
                with conn.cursor() as cur, cur.copy("COPY chaos.acked (id) FROM STDIN") as copy:
                    for job_id in sorted(set(producer.acked)):
                        copy.write_row((job_id,))
                for outage in chaos.outages:
                    conn.execute("INSERT INTO chaos.outages (down_at, up_at) VALUES (%s, %s)", outage)
                say("checking")
                invariants, counts = check(conn, config, chaos, fleet, producer, signaller, exits)
                if not all(inv.ok for inv in invariants):
                    say(f"invariants violated: the evidence tables are in {keep_evidence(conn, workdir)}")
        finally:
            producer.abort()
            signaller.stop()
            fleet.kill_all()
    wall = time.monotonic() - began
    counts["wall time"] = f"{wall:.0f} s"
    return DurableReport(config, invariants, counts, wall, workdir)


def render(report: DurableReport, console: Console | None = None) -> None:
    # wide enough for the table when written to a file or a pipe (a terminal keeps its own width)
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    c = report.config.load
    title = (
        f"pgjobq durable chaos run ({c.name}): {c.jobs:,} jobs of 3 steps, {c.workers} workers"
        f" ({c.inline_slots} x 1 thread, the others x {c.concurrency}), lease {c.leases[0]:g} s,"
        f" poll {c.poll_interval:g} s"
    )
    print_tables(console, title, report.invariants, report.counts)
    console.print("[green]all invariants hold[/]" if report.ok else "[red]invariants violated[/]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--full", action="store_true", help="the full run (4,000 jobs) instead of the short one"
    )
    parser.add_argument("--workdir", type=Path, help="folder for the logs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    config = DurableConfig.full() if args.full else DurableConfig.short()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"pgjobq-chaos-durable-{config.load.name}-"))
    report = run_durable(config, workdir)
    render(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    with servers_run_the_working_tree():  # its servers run the working tree's SQL, as the tests' do
        sys.exit(main())
