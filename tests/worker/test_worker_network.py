"""The workers when the database cannot be reached, or cannot be written: in this process, on a real server.

A read-only server (a standby, here a database whose sessions are read-only:
``default_transaction_read_only``) is never worked on: with the worker's
``target_session_attrs=read-write`` libpq refuses the session, and with a
conninfo asking for ``any`` the first write fails with 25006; either way the
worker waits with backoff, and runs the jobs once the server can be written.

A worker that cannot reach its database for longer than a lease (its role
refused logins and its connections terminated, the way a partition looks
from the worker: every statement and every connection attempt fails) asks
the handlers of the jobs whose lease has run out by its own clock to stop;
the database still decides: once reconnected, its late report is refused,
since another worker's reap took the job back meanwhile.

The network itself (packets dropped, half-open connections, latency, loss)
is faulted in tests/chaos/test_chaos_net.py, on network namespaces.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg import sql

import pgjobq
from pgjobq import AsyncWorker, Job, Worker, WorkerSettings

from helpers.databases import login_role
from helpers.processes import wait_until
from helpers.sqlhelpers import Db, fill, scalar, statuses

FAST: dict[str, Any] = {"poll_interval": 0.1, "reap_interval": 3600, "reconnect_delay_max": 1.0}

# A worker in this process: "sync" (handlers on the worker's thread), "threads" (a pool), "async".
KINDS = ["sync", "threads", "async"]


class Workers:
    """Workers of a kind ("sync", "threads" or "async") on threads of this process."""

    def __init__(self) -> None:
        self.started: list[tuple[Worker | AsyncWorker, threading.Thread]] = []

    def start(self, kind: str, conninfo: str, handler: Callable[[Job], Any], **settings: Any) -> None:
        options = WorkerSettings(**{**FAST, **settings, "concurrency": 4 if kind == "threads" else 1})
        worker: Worker | AsyncWorker
        if kind == "async":
            worker = AsyncWorker(conninfo, handler, options)
            thread = threading.Thread(target=asyncio.run, args=(worker.run(install_signal_handlers=False),))
        else:
            worker = Worker(conninfo, handler, options)
            thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        self.started.append((worker, thread))

    def stop_all(self) -> None:
        started, self.started = self.started, []
        for worker, _ in started:
            worker.stop()
        for _, thread in started:
            thread.join(30)
            assert not thread.is_alive()


@pytest.fixture
def workers() -> Iterator[Workers]:
    """Starts workers on threads; stops them after the test."""
    running = Workers()
    yield running
    running.stop_all()


def read_only(db: Db, on: bool) -> None:
    """New sessions of the test's database start read-only (on) or not: a standby, as a client sees it."""
    name = sql.Identifier(db.info.dbname)
    if on:
        db.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(name))
    else:
        db.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(name))


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_skips_a_read_only_server_and_works_once_it_can_write(
    db: Db, dsn: str, workers: Workers, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    fill(db, 3)
    read_only(db, True)
    try:
        workers.start(kind, dsn, lambda job: None)
        # libpq refuses the session (target_session_attrs=read-write, the worker's default)
        assert wait_until(lambda: "session is read-only" in caplog.text, timeout=15), caplog.text
        assert statuses(db) == {"queued": 3}
    finally:
        read_only(db, False)

    assert wait_until(lambda: statuses(db) == {"done": 3}, timeout=20), caplog.text
    assert "database unavailable" in caplog.text


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_told_to_take_any_server_meets_read_only_writes_waits_and_retries(
    db: Db, dsn: str, workers: Workers, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    fill(db, 3)
    read_only(db, True)
    try:
        workers.start(kind, f"{dsn} target_session_attrs=any", lambda job: None)
        assert wait_until(lambda: caplog.text.count("database is read-only") >= 2, timeout=15), caplog.text
        assert "in a read-only transaction" in caplog.text  # SQLSTATE 25006, named in the warning
        assert statuses(db) == {"queued": 3}
    finally:
        read_only(db, False)

    assert wait_until(lambda: statuses(db) == {"done": 3}, timeout=20), caplog.text


def cut_off_past_the_lease(
    db: Db, dsn: str, workers: Workers, kind: str, log: pytest.LogCaptureFixture, *, reaped: bool
) -> tuple[int, list[tuple[int, float | None]]]:
    """A job whose worker cannot reach the database (its role refused logins, its connections terminated)
    for longer than the job's 2 s lease, reaped by another worker meanwhile or not; then the worker may log
    in again.  The job's id, and its runs: (lease, seconds until cancel_requested, None: not asked)."""
    # max_attempts 1 unless reaped: a reap of an expired lease counts the attempt
    job_id = pgjobq.enqueue(db, "default", {}, max_attempts=3 if reaped else 1)
    runs: list[tuple[int, float | None]] = []
    started = threading.Event()

    def handler(job: Job) -> None:
        began = time.monotonic()
        if job.lease == 1:
            started.set()
            heard = job.cancel_requested.wait(30)
            runs.append((job.lease, time.monotonic() - began if heard else None))
            raise RuntimeError("stopped: lease presumed lost")
        runs.append((job.lease, None))

    with login_role(db) as role:
        db.execute(sql.SQL("SELECT jobq.grant_worker({}::regrole)").format(sql.Literal(role)))
        workers.start(kind, f"{dsn} user={role}", handler, lease_timeout=2.0)
        assert started.wait(15), log.text
        db.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))

        assert wait_until(lambda: bool(runs), timeout=20), log.text
        lease, heard_after = runs[0]
        assert lease == 1 and heard_after is not None, log.text
        # not before the lease (2 s) ran out by the worker's clock; noticed at a reconnect attempt or a
        # keeper's round (each at most 1 s apart), with slack for a busy machine
        assert 1.5 <= heard_after <= 2.0 + 1.0 + 5.0, log.text
        assert f"job {job_id}: lease 1 presumed lost" in log.text
        if reaped:  # another worker (here: the test) takes the job back meanwhile
            assert wait_until(lambda: scalar(db, "SELECT count(*) FROM jobq.reap()") == 1, timeout=10)
        db.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))

        assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=20), log.text
        workers.stop_all()  # before its role is dropped
    return job_id, runs


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_cut_off_past_a_lease_asks_its_handler_to_stop_and_its_late_report_is_refused(
    db: Db, dsn: str, workers: Workers, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgjobq.worker")

    job_id, runs = cut_off_past_the_lease(db, dsn, workers, kind, caplog, reaped=True)

    # the handler stopped: the worker hands the job back, and the database refuses (it was reaped)
    assert f"job {job_id}: lease 1 gone, as presumed; stopped (RuntimeError: stopped:" in caplog.text
    assert [lease for lease, _ in runs] == [1, 2]
    row = db.execute("SELECT lease, attempts FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"lease": 2, "attempts": 2}


@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_stopped_on_a_presumed_lost_lease_hands_its_job_back_without_spending_the_attempt(
    db: Db, dsn: str, workers: Workers, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nobody reaped meanwhile (the whole fleet was cut off, as in a failover): the lease still holds
    # when the worker is back.  The attempt was cut short by the worker, not by the job: with
    # max_attempts 1, a failure would end the job failed for good.
    caplog.set_level(logging.INFO, logger="pgjobq.worker")

    job_id, runs = cut_off_past_the_lease(db, dsn, workers, kind, caplog, reaped=False)

    assert f"job {job_id} handed back, attempt 1 given back: its lease was presumed lost" in caplog.text
    assert [lease for lease, _ in runs] == [1, 2]
    row = db.execute("SELECT lease, attempts FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"lease": 2, "attempts": 1}


def test_a_lease_still_valid_when_the_database_comes_back_is_not_presumed_lost(
    db: Db, dsn: str, workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgjobq.worker")
    job_id = pgjobq.enqueue(db, "default", {})
    release = threading.Event()
    asked: list[bool] = []

    def handler(job: Job) -> None:
        release.wait(30)
        asked.append(job.cancel_requested.is_set())

    workers.start("threads", dsn, handler, lease_timeout=30.0)
    assert wait_until(lambda: statuses(db) == {"running": 1}, timeout=15)
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'pgjobq %'"
    )
    assert wait_until(lambda: "database unavailable" in caplog.text, timeout=15), caplog.text
    release.set()

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=20), caplog.text
    assert asked == [False]
    # the worker logs the job done once the commit it sent has returned, after the database shows it
    assert wait_until(lambda: f"job {job_id} done" in caplog.text, timeout=10), caplog.text
    assert "presumed lost" not in caplog.text
