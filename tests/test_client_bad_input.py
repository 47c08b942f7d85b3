"""Bad input on the client side (issue 3, part 2): refused cleanly, named, and changing nothing.

Three tables, then the worker under bad conditions, as real processes:

- calls of the client API with a bad argument: each raises its pgjobq
  exception with a message naming the argument, and leaves jobq.jobs as it
  was without a notification.  Arguments Python can judge (types, payloads
  jsonb cannot store) are refused before any SQL: the connection, not in
  autocommit, has not even opened a transaction;
- nonsense worker settings: ConfigurationError at construction;
- the same nonsense given to ``pgjobq worker``: one line, exit 1, and no
  attempt to reach the (unreachable) database.

The worker processes meet: no database at start (calm, capped retries, then
work), handlers raising SystemExit and KeyboardInterrupt, a handler that
outlives its lease while another process reaps, and a role refused jobq.reap.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

import pgjobq
from pgjobq import WorkerSettings

from handlers import EXECUTIONS_DDL
from support import WorkerProcess, run_cli, wait_until
from throwaway_pg import ThrowawayPostgres, free_port

Db = psycopg.Connection[dict[str, Any]]
Conn = psycopg.Connection[Any]
Connect = Callable[..., Conn]
StartWorker = Callable[..., WorkerProcess]

MIB = 1024 * 1024


# -- the client API -----------------------------------------------------------


@pytest.fixture(scope="module")
def shared_dsn(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """One database with pgjobq for every case of the table.

    Sharing is sound here because every case asserts that it changed nothing;
    cloning a database per case would cost a second each.
    """
    dbname = f"jobq_bad_input_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        try:
            with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pgjobq")
            yield pg_server.dsn(dbname)
        finally:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


@pytest.fixture
def shared(shared_dsn: str) -> Iterator[Connect]:
    """Opens connections to the shared database; closes them afterwards."""
    opened: list[Conn] = []

    def connect(**kwargs: Any) -> Conn:
        kwargs.setdefault("autocommit", True)
        opened.append(psycopg.connect(shared_dsn, **kwargs))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()


@dataclass(frozen=True)
class Jobs:
    """The jobs every case starts with: one queued, one running under a second lease, one done."""

    queued: int
    running: int  # lease 2: lease 1 went stale and was reaped
    done: int  # lease 1


@pytest.fixture
def jobs(shared: Connect) -> Jobs:
    db = shared()
    db.execute("TRUNCATE jobq.jobs")
    queued = pgjobq.enqueue(db, "default", {"n": 1}, priority=-1)  # claimed last: stays queued
    running, done = pgjobq.enqueue_many(db, "default", [{"n": 2}, {"n": 3}])
    assert {job.id for job in pgjobq.claim(db, "default", 2, "w1")} == {running, done}
    pgjobq.complete(db, done, 1)
    db.execute("UPDATE jobq.jobs SET locked_at = now() - interval '1 hour' WHERE id = %s", (running,))
    pgjobq.reap(db, timedelta(seconds=60))
    db.execute("UPDATE jobq.jobs SET run_at = now() WHERE id = %s", (running,))
    (again,) = pgjobq.claim(db, "default", 1, "w2")
    assert (again.id, again.lease) == (running, 2)
    return Jobs(queued, running, done)


Call = Callable[[Conn, Jobs], object]


@dataclass(frozen=True)
class Case:
    call: Call
    error: type[pgjobq.Error]
    names: str  # the message must contain this: the bad argument's name
    before_sql: bool  # refused by Python: no statement at all


def local(call: Call, names: str, error: type[pgjobq.Error] = pgjobq.InvalidArgument) -> Case:
    return Case(call, error, names, before_sql=True)


def remote(call: Call, names: str, error: type[pgjobq.Error] = pgjobq.InvalidArgument) -> Case:
    return Case(call, error, names, before_sql=False)


class Opaque:
    """An object json knows nothing about."""


def circular() -> dict[str, Any]:
    payload: dict[str, Any] = {}
    payload["self"] = payload
    return payload


def enqueue(payload: Any, **options: Any) -> Call:
    return lambda conn, _: pgjobq.enqueue(conn, "default", payload, **options)


def enqueue_to(queue: str) -> Call:
    return lambda conn, _: pgjobq.enqueue(conn, queue, {})


def bad(value: object) -> Any:
    """value, typed Any: these calls pass the wrong type on purpose."""
    return value


NAIVE = datetime(2030, 1, 1, 12, 0)
AWARE = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)

CASES: dict[str, Case] = {
    # payloads json cannot encode, or jsonb cannot store unchanged
    "datetime": local(enqueue({"when": AWARE}), "payload is not serialisable"),
    "bytes": local(enqueue({"blob": b"\x00\x01"}), "payload is not serialisable"),
    "custom-object": local(enqueue({"thing": Opaque()}), "payload is not serialisable"),
    "set": local(enqueue({"tags": {"a", "b"}}), "payload is not serialisable"),
    "nan": local(enqueue({"ratio": math.nan}), "payload is not serialisable"),
    "infinity": local(enqueue({"ratio": -math.inf}), "payload is not serialisable"),
    "nested-nan": local(enqueue({"a": [1, {"b": math.inf}]}), "payload is not serialisable"),
    "circular": local(enqueue(circular()), "payload is not serialisable"),
    # json would turn 1 into "1" (and may then hold "1" twice): refused, not coerced
    "int-key": local(enqueue({1: "one"}), "payload has a key"),
    "nested-none-key": local(enqueue({"a": [{None: 1}]}), "payload['a'][0]"),
    "nul-in-value": local(enqueue({"text": "a\u0000b"}), "payload['text']"),
    "nul-in-key": local(enqueue({"a\u0000": 1}), "a key of payload"),
    "lone-surrogate": local(enqueue({"text": "\ud800"}), "payload['text']"),
    "list-payload": local(enqueue(["not", "an", "object"]), "payload must be a mapping"),
    "string-payload": local(enqueue('{"looks": "like json"}'), "payload must be a mapping"),
    "none-payload": local(enqueue(None), "payload must be a mapping"),
    # arguments of a type no jobq function takes
    "queue-not-a-string": local(lambda c, _: pgjobq.enqueue(c, bad(7), {}), "queue must be"),
    "queue-none": local(lambda c, _: pgjobq.enqueue(c, bad(None), {}), "queue must be"),
    "priority-float": local(enqueue({}, priority=1.5), "priority must be"),
    "priority-bool": local(enqueue({}, priority=True), "priority must be"),
    "priority-beyond-32-bits": local(enqueue({}, priority=2**40), "priority must be"),
    "max-attempts-string": local(enqueue({}, max_attempts="3"), "max_attempts must be"),
    "run-at-naive": local(enqueue({}, run_at=NAIVE), "run_at must be"),
    "run-at-string": local(enqueue({}, run_at="tomorrow"), "run_at must be"),
    "enqueue-many-one-bad": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{"n": 1}, {"when": AWARE}, {"n": 3}]), "payloads[2]"
    ),
    "enqueue-many-one-nul": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{"n": 1}, {"n": 2}, {"s": "\u0000"}]), "payloads[3]"
    ),
    "enqueue-many-a-mapping": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", bad({"n": 1})), "payloads must be"
    ),
    "claim-n-float": local(lambda c, _: pgjobq.claim(c, "default", bad(2.5), "w"), "n must be"),
    "complete-id-string": local(lambda c, j: pgjobq.complete(c, bad(str(j.running)), 2), "id must be"),
    "heartbeat-lease-none": local(lambda c, j: pgjobq.heartbeat(c, j.running, bad(None)), "lease must be"),
    "fail-error-none": local(lambda c, j: pgjobq.fail(c, j.running, bad(None), 2), "error must be"),
    "reap-zero": local(lambda c, _: pgjobq.reap(c, timedelta(0)), "stale must be"),
    "reap-negative": local(lambda c, _: pgjobq.reap(c, timedelta(seconds=-5)), "stale must be"),
    # values only the database judges
    "queue-empty": remote(enqueue_to(""), "queue must be"),
    "queue-upper-case": remote(enqueue_to("Emails"), "queue must be"),
    "queue-too-long": remote(enqueue_to("q" * 59), "queue must be"),
    "queue-injection": remote(enqueue_to("x'; DROP TABLE jobq.jobs; --"), "queue must be"),
    "payload-too-large": remote(
        enqueue({"blob": "x" * (2 * MIB)}), "payload must be at most 1 MiB", pgjobq.PayloadTooLarge
    ),
    "enqueue-many-one-too-large": remote(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}, {"blob": "x" * (2 * MIB)}]),
        "payloads[2]",
        pgjobq.PayloadTooLarge,
    ),
    "max-attempts-zero": remote(enqueue({}, max_attempts=0), "max_attempts must be"),
    "claim-n-zero": remote(lambda c, _: pgjobq.claim(c, "default", 0, "w"), "n must be"),
    # leases: unknown jobs, stale leases, never-claimed and finished jobs
    "complete-unknown-id": remote(
        lambda c, _: pgjobq.complete(c, 424242, 1), "id 424242", pgjobq.JobNotFound
    ),
    "fail-unknown-id": remote(
        lambda c, _: pgjobq.fail(c, 424242, "boom", 1), "id 424242", pgjobq.JobNotFound
    ),
    "heartbeat-unknown-id": remote(
        lambda c, _: pgjobq.heartbeat(c, 424242, 1), "id 424242", pgjobq.JobNotFound
    ),
    "complete-stale-lease": remote(
        lambda c, j: pgjobq.complete(c, j.running, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "fail-stale-lease": remote(
        lambda c, j: pgjobq.fail(c, j.running, "boom", 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "heartbeat-stale-lease": remote(
        lambda c, j: pgjobq.heartbeat(c, j.running, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "complete-never-claimed": remote(
        lambda c, j: pgjobq.complete(c, j.queued, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "fail-after-complete": remote(
        lambda c, j: pgjobq.fail(c, j.done, "late", 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "heartbeat-after-complete": remote(
        lambda c, j: pgjobq.heartbeat(c, j.done, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
}


def snapshot(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT * FROM jobq.jobs ORDER BY id").fetchall()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_client_call_is_refused_with_its_exception_and_changes_nothing(
    shared: Connect, jobs: Jobs, case: Case
) -> None:
    observer = shared()
    observer.execute("LISTEN jobq_default")
    before = snapshot(observer)
    conn = shared(autocommit=not case.before_sql)

    with pytest.raises(pgjobq.Error) as raised:
        case.call(conn, jobs)

    assert type(raised.value) is case.error
    assert case.names in str(raised.value)
    if case.before_sql:
        # any statement would have opened a transaction
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert raised.value.sqlstate is None
    else:
        assert raised.value.sqlstate is not None
        assert isinstance(raised.value.__cause__, psycopg.Error)
    assert snapshot(observer) == before
    assert list(observer.notifies(timeout=0.2)) == []


# -- worker settings ----------------------------------------------------------

SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "concurrency-0": ({"concurrency": 0}, "concurrency must be between 1 and 1000"),
    "concurrency-fractional": ({"concurrency": 1.5}, "concurrency must be an integer"),
    "batch-0": ({"batch": 0}, "batch must be between 1 and 1000"),
    "batch-huge": ({"batch": 10**6}, "batch must be between 1 and 1000"),
    "poll-negative": ({"poll_interval": -1}, "poll_interval must be positive"),
    "poll-nan": ({"poll_interval": math.nan}, "poll_interval must be positive"),
    "poll-infinite": ({"poll_interval": math.inf}, "poll_interval must be positive"),
    "lease-0": ({"lease_timeout": 0}, "lease_timeout must be positive"),
    "heartbeat-equal-to-lease": ({"lease_timeout": 10, "heartbeat_interval": 10}, "heartbeat_interval (10)"),
    "heartbeat-longer-than-lease": (
        {"lease_timeout": 10, "heartbeat_interval": 20},
        "heartbeat_interval (20)",
    ),
    "heartbeat-0": ({"heartbeat_interval": 0}, "heartbeat_interval must be positive"),
    "reap-0": ({"reap_interval": 0}, "reap_interval must be positive"),
    "reconnect-delay-negative": ({"reconnect_delay_max": -1}, "reconnect_delay_max must be positive"),
    "ack-negative": ({"ack_interval": -0.1}, "ack_interval must be at least 0"),
    "name-empty": ({"name": ""}, "name must be 1 to 200 characters"),
    "name-too-long": ({"name": "w" * 201}, "name must be 1 to 200 characters"),
    "queue-not-a-string": ({"queue": 7}, "queue must be a string"),
}


@pytest.mark.parametrize(("settings", "message"), SETTINGS.values(), ids=SETTINGS.keys())
def test_nonsense_worker_setting_is_refused_at_construction(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(pgjobq.ConfigurationError) as raised:
        WorkerSettings(**settings)

    assert message in str(raised.value)


UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=2"

CLI_SETTINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "concurrency-0": (("--concurrency", "0"), "concurrency must be between 1 and 1000"),
    "batch-0": (("--batch", "0"), "batch must be between 1 and 1000"),
    "poll-negative": (("--poll-interval", "-1"), "poll_interval must be positive"),
    "heartbeat-not-shorter-than-lease": (
        ("--lease-timeout", "10", "--heartbeat-interval", "10"),
        "heartbeat_interval (10.0) must be shorter than lease_timeout (10.0)",
    ),
    "reap-0": (("--reap-interval", "0"), "reap_interval must be positive"),
    "reconnect-delay-0": (("--reconnect-delay-max", "0"), "reconnect_delay_max must be positive"),
}


@pytest.mark.parametrize(("args", "message"), CLI_SETTINGS.values(), ids=CLI_SETTINGS.keys())
def test_worker_command_with_nonsense_setting_prints_one_line_and_exits_1(
    args: tuple[str, ...], message: str
) -> None:
    # The database is unreachable: a worker that got as far as connecting
    # would retry for ever instead of exiting.
    result = run_cli(UNREACHABLE, "worker", "handlers:record", *args, timeout=30)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.stderr


# -- the worker under bad conditions (real processes) -------------------------


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[StartWorker]:
    """Starts `pgjobq worker handlers:HANDLER ARGS...` on a DSN; kills leftovers at the end."""
    started: list[WorkerProcess] = []

    def start(dsn: str, handler: str, *args: str) -> WorkerProcess:
        worker = WorkerProcess(dsn, handler, *args, log=tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def statuses(db: Db) -> dict[str, int]:
    rows = db.execute("SELECT status, count(*) AS n FROM jobq.jobs GROUP BY status").fetchall()
    return {row["status"]: row["n"] for row in rows}


def stop(worker: WorkerProcess) -> int:
    worker.process.send_signal(signal.SIGTERM)
    return worker.wait(timeout=30)


def test_worker_started_before_its_database_retries_calmly_then_runs_the_jobs(
    start_worker: StartWorker,
) -> None:
    port = free_port()
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=jobs"
    worker = start_worker(dsn, "record", "--reconnect-delay-max", "2", "--poll-interval", "0.2")
    assert wait_until(lambda: "database unavailable" in worker.log()), worker.log()

    cpu_before = cpu_seconds(worker.pid)
    time.sleep(4)
    cpu_spent = cpu_seconds(worker.pid) - cpu_before

    assert worker.process.poll() is None, worker.log()
    assert cpu_spent < 1.0, f"{cpu_spent:.2f} s of CPU in 4 s while waiting for the database"
    attempts = worker.log().count("database unavailable")
    assert 2 <= attempts <= 15, worker.log()  # retrying, with backoff: a handful of lines, not hundreds

    with ThrowawayPostgres(port=port, fast=True) as server:
        # Build the database under another name and rename it: the worker
        # never sees it without the extension.
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE staging")
            with psycopg.connect(server.dsn("staging"), autocommit=True) as staging:
                staging.execute("CREATE EXTENSION pgjobq")
                staging.execute(EXECUTIONS_DDL)
                pgjobq.enqueue_many(staging, "default", [{"n": n} for n in range(5)])
            admin.execute("ALTER DATABASE staging RENAME TO jobs")
        with psycopg.connect(server.dsn("jobs"), autocommit=True, row_factory=dict_row) as db:
            assert wait_until(lambda: statuses(db) == {"done": 5}, timeout=60), worker.log()
            runs = db.execute("SELECT count(*) AS runs, count(DISTINCT job_id) AS jobs FROM executions")
            assert runs.fetchone() == {"runs": 5, "jobs": 5}
        assert stop(worker) == 0, worker.log()


def test_handler_raising_system_exit_or_keyboard_interrupt_fails_its_job_and_the_worker_goes_on(
    db: Db, dsn: str, start_worker: StartWorker
) -> None:
    db.execute(EXECUTIONS_DDL)
    payloads: list[dict[str, Any]] = [
        {"n": 1, "raise": "SystemExit"},
        {"n": 2},
        {"n": 3, "raise": "KeyboardInterrupt"},
        {"n": 4},
    ]
    pgjobq.enqueue_many(db, "default", payloads, max_attempts=1)
    worker = start_worker(dsn, "raise_base_exception", "--poll-interval", "0.2", "--batch", "1")

    assert wait_until(lambda: statuses(db) == {"done": 2, "failed": 2}, timeout=30), worker.log()
    pgjobq.enqueue(db, "default", {"n": 5})  # a job after both: the worker is still there to run it
    assert wait_until(lambda: statuses(db) == {"done": 3, "failed": 2}, timeout=30), worker.log()

    rows = db.execute(
        "SELECT payload->'n' AS n, status, attempts, last_error FROM jobq.jobs ORDER BY payload->'n'"
    ).fetchall()
    assert rows == [
        {"n": 1, "status": "failed", "attempts": 1, "last_error": "SystemExit: job 1 asked to exit"},
        {"n": 2, "status": "done", "attempts": 1, "last_error": None},
        {"n": 3, "status": "failed", "attempts": 1, "last_error": "KeyboardInterrupt: job 3 interrupted"},
        {"n": 4, "status": "done", "attempts": 1, "last_error": None},
        {"n": 5, "status": "done", "attempts": 1, "last_error": None},
    ]
    assert worker.process.poll() is None, worker.log()
    assert stop(worker) == 0, worker.log()


REAPER = """
import sys, time, psycopg
dsn, stale, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
reaped = 0
with psycopg.connect(dsn, autocommit=True) as conn:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reaped += len(conn.execute("SELECT id FROM jobq.reap(%s::interval)", (stale,)).fetchall())
        time.sleep(0.05)
print(reaped)
"""


def test_handler_outliving_its_lease_keeps_it_against_a_concurrent_reaper(
    db: Db, dsn: str, start_worker: StartWorker
) -> None:
    db.execute(EXECUTIONS_DDL)
    pgjobq.enqueue(db, "default", {"sleep": 7})  # more than twice the lease
    lease = ("--lease-timeout", "3", "--heartbeat-interval", "0.5", "--reap-interval", "0.2")
    worker = start_worker(dsn, "sleep_then_record", *lease)
    assert wait_until(lambda: statuses(db) == {"running": 1}), worker.log()
    reaper = subprocess.Popen(
        [sys.executable, "-c", REAPER, dsn, "3 seconds", "8"], stdout=subprocess.PIPE, text=True
    )

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=40), worker.log()
    reaper_output, _ = reaper.communicate(timeout=30)

    assert reaper.returncode == 0
    assert reaper_output.strip() == "0"  # the reaper never took the job
    job = db.execute("SELECT attempts, lease, last_error FROM jobq.jobs").fetchone()
    assert job == {"attempts": 1, "lease": 1, "last_error": None}
    runs = db.execute("SELECT lease, finished FROM executions ORDER BY finished").fetchall()
    assert runs == [{"lease": 1, "finished": False}, {"lease": 1, "finished": True}]
    assert "reaped" not in worker.log()


@pytest.fixture
def worker_role(db: Db) -> Iterator[str]:
    """A login role given the worker level (jobq.grant_worker), plus INSERT on the handlers' table."""
    role = f"jobq_worker_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT jobq.grant_worker(%s)", (role,))
    db.execute(EXECUTIONS_DDL)
    db.execute(sql.SQL("GRANT INSERT ON executions TO {}").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_worker_refused_reap_warns_once_stops_trying_and_keeps_working(
    db: Db,
    dsn: str,
    pg_server: ThrowawayPostgres,
    worker_role: str,
    start_worker: StartWorker,
) -> None:
    server_log_start = pg_server.log_file.stat().st_size
    pgjobq.enqueue_many(db, "default", [{"n": n} for n in range(3)])
    as_worker = f"{dsn} user={worker_role}"
    worker = start_worker(as_worker, "record", "--reap-interval", "0.1", "--poll-interval", "0.1")

    assert wait_until(lambda: statuses(db) == {"done": 3}, timeout=30), worker.log()
    time.sleep(1)  # ten more reap intervals
    pgjobq.enqueue(db, "default", {"n": 3})
    assert wait_until(lambda: statuses(db) == {"done": 4}, timeout=30), worker.log()
    assert stop(worker) == 0, worker.log()

    warnings = [line for line in worker.log().splitlines() if "not reaping" in line]
    assert len(warnings) == 1, worker.log()
    assert "admin-level role" in warnings[0] and "SELECT jobq.reap()" in warnings[0]
    # the server saw one refused call, not one per reap interval
    with pg_server.log_file.open(errors="replace") as server_log:
        server_log.seek(server_log_start)
        refusals = server_log.read().count("permission denied for function reap")
    assert refusals == 1
