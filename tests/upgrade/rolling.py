"""A rolling upgrade under load, with real worker processes of two releases (test_rolling_upgrade.py).

``run_rolling_upgrade`` makes a database of its own at the previous release's extension version, with a
producer thread enqueuing small jobs steadily (a batch of BATCH every PRODUCE_EVERY seconds) for the whole
run, and workers running ``upgrade.handlers:record``.  In one of two orders:

- ``previous_first``: two workers of the previous release (its own venv's ``pgjobq worker``); then
  ``ALTER EXTENSION pgjobq UPDATE`` while they work; then each replaced by a worker of this release, one
  at a time (SIGTERM, its exit awaited, the new one started and seen working);
- ``this_first``: two workers of this release; then the update; then one job enqueued with a task.

Each phase waits until every running worker has finished WARM_UP more runs (the jobs claimed after the
update counting only if enqueued after it), or a phase's timeout, and goes on either way: what was seen is
recorded, not asserted, so each test of the module asserts one thing over the same run.  At the end the
producer stops, the workers drain the queue, get SIGTERM, and SQL over the handler's ``runs`` table and
``jobq.jobs`` gives the evidence: every id the producer was given done once, run once, by whom.

A job is "enqueued after the update" when its payload says so (``"after": true``): the producer reads
a flag set only once ``ALTER EXTENSION`` has committed, before each batch.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import psycopg
from psycopg import sql
from throwaway_pg import ThrowawayPostgres
from upgrade.handlers import RUNS_DDL
from upgrade.releases import ReleaseVenv

from helpers.databases import connect_as, fresh_database
from helpers.processes import pgjobq_command, process_env, wait_until
from helpers.sqlhelpers import Db, scalar

__all__ = [
    "QUEUE",
    "TASK",
    "Order",
    "Producer",
    "UpgradeRun",
    "UpgradeWorker",
    "run_rolling_upgrade",
]

Order = Literal["previous_first", "this_first"]

QUEUE = "upgrade"
TASK = "upgrade.tasked"  # the task of the job enqueued after the update (this_first)
HANDLER = "upgrade.handlers:record"
WORK_MS = 20  # each job's handler sleeps this long
BATCH = 2  # jobs per enqueue
PRODUCE_EVERY = 0.05  # seconds between enqueues: about 40 jobs a second
WARM_UP = 20  # finished runs each worker shows per phase before the run goes on
PHASE_TIMEOUT = 20.0  # seconds a phase waits for them
DRAIN_TIMEOUT = 45.0
STOP_TIMEOUT = 30.0  # seconds a worker has to exit after SIGTERM
WORKERS = 2
WORKER_OPTIONS = (
    "--queue", QUEUE, "--concurrency", "2", "--batch", "4", "--poll-interval", "0.5", "--log-level", "INFO",
)  # fmt: skip


@dataclass
class UpgradeWorker:
    """One `pgjobq worker upgrade.handlers:record` process of either release, its log in a file."""

    name: str
    release: Literal["previous", "this"]
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    signalled: bool = False  # SIGTERM sent by the run (an exit before it is unasked)
    exit_status: int | None = None  # after our SIGTERM (None: still running after STOP_TIMEOUT, then killed)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_bytes().decode(errors="replace")

    def started(self) -> bool:
        return "started on queue" in self.log_text()

    def terminate(self) -> None:
        """SIGTERM it and wait for its exit (its status kept); killed if it outlasts STOP_TIMEOUT."""
        self.signalled = True
        self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_status = self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()
        self.log.close()


class Producer(threading.Thread):
    """Enqueues BATCH jobs every PRODUCE_EVERY seconds until stopped; keeps every id it was given.

    Each payload carries ``ms`` (the handler's work) and ``after``: whether ``upgraded`` was set when its
    batch began, that is whether the update had committed.  A failed enqueue is kept in ``errors`` and
    the producer goes on with a new connection.
    """

    def __init__(self, dsn: str) -> None:
        super().__init__(name="upgrade producer", daemon=True)
        self.dsn = dsn
        self.upgraded = threading.Event()
        self.ids: list[int] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stopping.wait(PRODUCE_EVERY):
            after = self.upgraded.is_set()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, application_name="upgrade producer")
                ids = scalar(
                    conn,
                    "SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('ms', %s, 'after', %s)))"
                    " FROM generate_series(1, %s)",
                    (QUEUE, WORK_MS, after, BATCH),
                )
                self.ids.extend(ids)
            except psycopg.Error as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}".strip())
                if conn is not None:
                    conn.close()
        if conn is not None:
            conn.close()


@dataclass
class UpgradeRun:
    """What one rolling upgrade did and what the database says of it (see the module docstring)."""

    order: Order
    versions: tuple[str, str]  # the extension's version before and after the update
    enqueued: int  # ids the producer was given (and the task's job, if any)
    producer_errors: list[str]
    lost: list[int]  # ids given to the producer and not done
    statuses: dict[str, int]  # the jobs by status
    unknown: list[int]  # jobs in the table that no enqueue returned
    run_twice: list[int]  # jobs whose handler started more than once
    not_run_once: list[int]  # jobs not started and finished exactly once (never, unfinished, twice)
    retried: list[int]  # done jobs whose attempts is not 1
    finished_by: dict[str, int]  # worker -> finished runs
    after_update_by: dict[str, int]  # worker running at the update -> finished runs of jobs enqueued after it
    exit_statuses: dict[str, int | None]  # worker -> exit status after our SIGTERM
    exited_unasked: dict[str, int | None]  # worker -> status, of those found exited before our SIGTERM
    task_seen: list[str | None] = field(default_factory=list)  # the task the handler saw (this_first)
    timings: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    logs: dict[str, str] = field(default_factory=dict)  # worker -> its log's last lines

    def log_tails(self) -> str:
        """The workers' last log lines, for an assertion's message."""
        return "\n".join(f"--- {name}\n{tail}" for name, tail in self.logs.items())


class _Fleet:
    """The run's workers: started by release, each name once; all killed at the end."""

    def __init__(self, dsn: str, previous: ReleaseVenv | None, log_dir: Path) -> None:
        self.dsn = dsn
        self.previous = previous
        self.log_dir = log_dir
        self.every: list[UpgradeWorker] = []
        self.unasked: dict[str, int | None] = {}

    def start(self, release: Literal["previous", "this"]) -> UpgradeWorker:
        name = f"{release}-{sum(w.release == release for w in self.every) + 1}"
        if release == "previous":
            assert self.previous is not None, "the previous release's venv is needed for its workers"
            argv = [str(self.previous.pgjobq), "worker", HANDLER, *WORKER_OPTIONS]
        else:
            argv = pgjobq_command("worker", HANDLER, *WORKER_OPTIONS)
        log_path = self.log_dir / f"worker-{name}.log"
        log = log_path.open("wb")
        env = process_env(self.dsn, PGJOBQ_WORKER_NAME=name)
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = UpgradeWorker(name, release, process, log_path, log)
        self.every.append(worker)
        return worker

    def running(self) -> list[UpgradeWorker]:
        """The workers not yet signalled, noting any that exited on its own."""
        for worker in self.every:
            if not worker.signalled and not worker.alive():
                self.unasked.setdefault(worker.name, worker.process.returncode)
        return [w for w in self.every if not w.signalled and w.alive()]

    def terminate(self, worker: UpgradeWorker) -> None:
        self.running()  # an exit before our signal is noted as unasked
        if worker.alive():
            worker.terminate()

    def kill_all(self) -> None:
        for worker in self.every:
            worker.kill()


def _finished(db: Db, worker: str, *, after_only: bool = False) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM runs AS r JOIN jobq.jobs AS j ON j.id = r.job_id"
            " WHERE r.finished AND r.worker = %s AND (NOT %s OR (j.payload->>'after')::boolean)",
            (worker, after_only),
        )
    )


def _settle(db: Db, workers: list[UpgradeWorker], *, after_only: bool = False) -> None:
    """Wait until each worker has started and finished WARM_UP more runs (of jobs enqueued after the
    update, if after_only) than now, until one of them exits, or for PHASE_TIMEOUT."""
    base = {w.name: _finished(db, w.name, after_only=after_only) for w in workers}

    def settled() -> bool:
        if not all(w.alive() for w in workers):
            return True  # one exited: waiting longer shows nothing more
        return all(
            w.started() and _finished(db, w.name, after_only=after_only) >= base[w.name] + WARM_UP
            for w in workers
        )

    wait_until(settled, PHASE_TIMEOUT, interval=0.2)


@contextmanager
def _database(server: ThrowawayPostgres, version: str) -> Iterator[tuple[Db, str]]:
    """A new database with pgjobq installed at version and the handler's table; an admin connection to it
    and its DSN."""
    with (
        connect_as(server, "postgres") as admin,
        fresh_database(admin) as dbname,
        connect_as(server, dbname) as db,
    ):
        db.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(version)))
        db.execute(RUNS_DDL)
        yield db, server.dsn(dbname)


def _timed(timings: dict[str, float], phase: str) -> Callable[[], None]:
    start = time.monotonic()
    return lambda: timings.__setitem__(phase, round(time.monotonic() - start, 1))


def run_rolling_upgrade(
    server: ThrowawayPostgres,
    order: Order,
    from_version: str,
    log_dir: Path,
    previous: ReleaseVenv | None = None,
) -> UpgradeRun:
    """One rolling upgrade in order (see the module docstring), on a database of server installed at
    from_version; previous is the previous release's venv (needed for previous_first)."""
    timings: dict[str, float] = {}
    done_total = _timed(timings, "total")
    with _database(server, from_version) as (db, dsn):
        producer = Producer(dsn)
        fleet = _Fleet(dsn, previous, log_dir)
        tasked: list[int] = []
        try:
            producer.start()
            first: Literal["previous", "this"] = "previous" if order == "previous_first" else "this"
            at_update = [fleet.start(first) for _ in range(WORKERS)]
            done = _timed(timings, f"{first} workers warm")
            _settle(db, at_update)
            done()

            done = _timed(timings, "ALTER EXTENSION pgjobq UPDATE")
            db.execute("ALTER EXTENSION pgjobq UPDATE")
            producer.upgraded.set()
            done()
            upgraded_to = str(scalar(db, "SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'"))

            done = _timed(timings, f"{first} workers after the update")
            _settle(db, at_update, after_only=True)
            done()

            if order == "previous_first":
                for k, old in enumerate(at_update, start=1):
                    done = _timed(timings, f"replace previous-{k}")
                    fleet.terminate(old)
                    _settle(db, [fleet.start("this")])
                    done()
            else:
                done = _timed(timings, "the task's job")
                # a running worker reads the version at each reap (every reap_interval): from then on
                # its claims carry the task (a tasked job claimed before would reach it without one)
                wait_until(
                    lambda: (
                        all("went from 0.8.0 to" in w.log_text() for w in at_update) or not fleet.running()
                    ),
                    PHASE_TIMEOUT,
                    interval=0.2,
                )
                tasked.append(int(scalar(db, "SELECT jobq.enqueue(%s, '{}', task => %s)", (QUEUE, TASK))))
                wait_until(
                    lambda: _finished_job(db, tasked[0]) or not fleet.running(), PHASE_TIMEOUT, interval=0.2
                )
                done()

            producer.stop()
            done = _timed(timings, "drain")
            given = [*producer.ids, *tasked]
            wait_until(
                lambda: _done(db, given) == len(given) or not fleet.running(), DRAIN_TIMEOUT, interval=0.2
            )
            done()
            for worker in fleet.running():
                fleet.terminate(worker)
            fleet.running()
        finally:
            producer.stop()
            fleet.kill_all()
        done_total()
        versions = (from_version, upgraded_to)
        return _evidence(db, order, versions, producer, given, tasked, fleet, at_update, timings)


def _finished_job(db: Db, job_id: int) -> bool:
    return bool(scalar(db, "SELECT count(*) > 0 FROM runs WHERE finished AND job_id = %s", (job_id,)))


def _done(db: Db, ids: list[int]) -> int:
    return int(scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'done' AND id = ANY(%s)", (ids,)))


LOST = """
    SELECT g.id FROM unnest(%(ids)s::bigint[]) AS g (id)
     WHERE NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = g.id AND j.status = 'done')
"""
TASKS_SEEN = "SELECT task FROM runs WHERE finished AND job_id = ANY(%(ids)s)"


def _ids(db: Db, query: str, ids: list[int]) -> list[int]:
    return sorted(int(row["id"]) for row in db.execute(query, {"ids": ids}))


def _evidence(
    db: Db,
    order: Order,
    versions: tuple[str, str],
    producer: Producer,
    given: list[int],
    tasked: list[int],
    fleet: _Fleet,
    at_update: list[UpgradeWorker],
    timings: dict[str, float],
) -> UpgradeRun:
    per_job = """
        SELECT j.id,
               count(r.*) FILTER (WHERE NOT r.finished) AS started,
               count(r.*) FILTER (WHERE r.finished) AS finished
          FROM jobq.jobs AS j LEFT JOIN runs AS r ON r.job_id = j.id
         WHERE j.id = ANY(%(ids)s)
         GROUP BY j.id
    """
    statuses = {
        str(row["status"]): int(row["n"])
        for row in db.execute("SELECT status::text, count(*) AS n FROM jobq.jobs GROUP BY status")
    }
    workers = [w.name for w in fleet.every]
    return UpgradeRun(
        order=order,
        versions=versions,
        enqueued=len(given),
        producer_errors=producer.errors,
        lost=_ids(db, LOST, given),
        statuses=statuses,
        unknown=_ids(db, "SELECT id FROM jobq.jobs WHERE NOT id = ANY(%(ids)s)", given),
        run_twice=_ids(db, f"SELECT id FROM ({per_job}) AS p WHERE started > 1", given),
        not_run_once=_ids(db, f"SELECT id FROM ({per_job}) AS p WHERE started <> 1 OR finished <> 1", given),
        retried=_ids(db, "SELECT id FROM jobq.jobs WHERE attempts <> 1 AND id = ANY(%(ids)s)", given),
        finished_by={name: _finished(db, name) for name in workers},
        after_update_by={w.name: _finished(db, w.name, after_only=True) for w in at_update},
        exit_statuses={w.name: w.exit_status for w in fleet.every if w.signalled},
        exited_unasked=dict(fleet.unasked),
        task_seen=[row["task"] for row in db.execute(TASKS_SEEN, {"ids": tasked})],
        timings=timings,
        logs={w.name: "\n".join(w.log_text().splitlines()[-15:]) for w in fleet.every},
    )
