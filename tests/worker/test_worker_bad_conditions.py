"""The worker under bad conditions, as real processes.

The worker processes meet: no database at start (calm, capped retries, then
work), handlers raising SystemExit and KeyboardInterrupt, a handler that
outlives its lease while another process reaps, and a role refused jobq.reap.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from throwaway_pg import ThrowawayPostgres, free_port

import pgjobq

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, WorkerProcess, cpu_seconds, wait_until
from helpers.sqlhelpers import Db, statuses


def stop(worker: WorkerProcess) -> int:
    worker.process.send_signal(signal.SIGTERM)
    return worker.wait(timeout=30)


def test_worker_started_before_its_database_retries_calmly_then_runs_the_jobs(
    start_worker: StartWorker,
) -> None:
    port = free_port()
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=jobs"
    worker = start_worker("record", "--reconnect-delay-max", "2", "--poll-interval", "0.2", dsn=dsn)
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
    worker = start_worker("raise_base_exception", "--poll-interval", "0.2", "--batch", "1")

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
dsn, seconds = sys.argv[1], float(sys.argv[2])
reaped = 0
with psycopg.connect(dsn, autocommit=True) as conn:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reaped += len(conn.execute("SELECT id FROM jobq.reap()").fetchall())
        time.sleep(0.05)
print(reaped)
"""


def test_handler_outliving_its_lease_keeps_it_against_a_concurrent_reaper(
    db: Db, dsn: str, start_worker: StartWorker
) -> None:
    db.execute(EXECUTIONS_DDL)
    pgjobq.enqueue(db, "default", {"sleep": 7})  # more than twice the lease
    lease = ("--lease-timeout", "3", "--heartbeat-interval", "0.5", "--reap-interval", "0.2")
    worker = start_worker("sleep_then_record", *lease)
    assert wait_until(lambda: statuses(db) == {"running": 1}), worker.log()
    reaper = subprocess.Popen([sys.executable, "-c", REAPER, dsn, "8"], stdout=subprocess.PIPE, text=True)

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
def role_without_reap(db: Db) -> Iterator[str]:
    """A login role given the worker level (jobq.grant_worker) less jobq.reap, plus INSERT on the handlers'
    table."""
    role = f"jobq_worker_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT jobq.grant_worker(%s)", (role,))
    db.execute(
        sql.SQL("REVOKE EXECUTE ON FUNCTION jobq.reap(interval, interval) FROM {}").format(
            sql.Identifier(role)
        )
    )
    db.execute(EXECUTIONS_DDL)
    db.execute(sql.SQL("GRANT INSERT ON executions TO {}").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_worker_whose_role_may_not_reap_warns_once_stops_trying_and_keeps_working(
    db: Db,
    dsn: str,
    pg_server: ThrowawayPostgres,
    role_without_reap: str,
    start_worker: StartWorker,
) -> None:
    server_log_start = pg_server.log_file.stat().st_size
    pgjobq.enqueue_many(db, "default", [{"n": n} for n in range(3)])
    as_worker = f"{dsn} user={role_without_reap}"
    worker = start_worker("record", "--reap-interval", "0.1", "--poll-interval", "0.1", dsn=as_worker)

    assert wait_until(lambda: statuses(db) == {"done": 3}, timeout=30), worker.log()
    time.sleep(1)  # ten more reap intervals
    pgjobq.enqueue(db, "default", {"n": 3})
    assert wait_until(lambda: statuses(db) == {"done": 4}, timeout=30), worker.log()
    assert stop(worker) == 0, worker.log()

    warnings = [line for line in worker.log().splitlines() if "not reaping" in line]
    assert len(warnings) == 1, worker.log()
    assert "other workers" in warnings[0] and "SELECT jobq.reap()" in warnings[0]
    # the server saw one refused call, not one per reap interval
    with pg_server.log_file.open(errors="replace") as server_log:
        server_log.seek(server_log_start)
        refusals = server_log.read().count("permission denied for function reap")
    assert refusals == 1
