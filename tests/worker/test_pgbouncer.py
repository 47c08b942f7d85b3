"""The worker behind PgBouncer in transaction pooling mode, where LISTEN cannot work.

Each transaction may run on a different server connection, so a LISTEN is
left behind on a server connection the listening client never sees again.
The worker must find that out by itself (a probe notification that never
arrives), say so, and poll; with prepared statements off (PgBouncer 1.18
cannot keep them across transactions) it must then run every job exactly
once.  A direct connection must still be found to deliver notifications.
Several workers may share one server connection: nothing one of them runs
may leave session state there (0.3.0's forward mode left the setting
jobq.claim_hint) for the others.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres
from throwaway_pgbouncer import ThrowawayPgBouncer

import pgjobq
from pgjobq import Worker, WorkerSettings

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import WorkerProcess, wait_until
from helpers.sqlhelpers import Connect, Db, fill, scalar

FALLBACK = "notifications do not reach this worker's listening connection"


def transaction_pooling(pg_server: ThrowawayPostgres, pool_size: int) -> ThrowawayPgBouncer:
    """PgBouncer in transaction pooling mode before the test server, pool_size server connections per
    database and user."""
    return ThrowawayPgBouncer(pg_server.host, pg_server.port, pool_mode="transaction", pool_size=pool_size)


@pytest.fixture(scope="module")
def bouncer(pg_server: ThrowawayPostgres) -> Iterator[ThrowawayPgBouncer]:
    """Two server connections per database."""
    with transaction_pooling(pg_server, pool_size=2) as pgbouncer:
        yield pgbouncer


@pytest.fixture(scope="module")
def one_connection_bouncer(pg_server: ThrowawayPostgres) -> Iterator[ThrowawayPgBouncer]:
    """A single server connection per database and user, which every client shares."""
    with transaction_pooling(pg_server, pool_size=1) as pgbouncer:
        yield pgbouncer


def connect_through(bouncer_dsn: str) -> psycopg.Connection[Any]:
    """A connection through PgBouncer that prepares nothing (1.18 cannot keep prepared statements)."""
    return psycopg.connect(bouncer_dsn, autocommit=True, prepare_threshold=None)


def done_once(db: Db, ids: list[int]) -> int:
    """How many of the jobs ids are done, claimed once (attempt 1, lease 1)."""
    return int(
        scalar(
            db,
            "SELECT count(*) FROM jobq.jobs WHERE id = ANY (%s) AND status = 'done' AND attempts = 1"
            " AND lease = 1",
            (ids,),
        )
    )


def counts(db: Db) -> dict[str, Any]:
    row = db.execute(
        "SELECT (SELECT count(*) FROM jobq.jobs WHERE status = 'done') AS done,"
        "       (SELECT count(*) FROM jobq.jobs WHERE status <> 'done') AS not_done,"
        "       (SELECT count(*) FROM executions) AS runs,"
        "       (SELECT count(DISTINCT job_id) FROM executions) AS jobs_run,"
        "       (SELECT bool_and(attempts = 1 AND lease = 1) FROM jobq.jobs) AS each_claimed_once"
    ).fetchone()
    assert row is not None
    return row


def test_worker_behind_transaction_pooling_polls_and_runs_every_job_exactly_once(
    db: Db, bouncer: ThrowawayPgBouncer, tmp_path: Path
) -> None:
    db.execute(EXECUTIONS_DDL)
    through_bouncer = bouncer.dsn(db.info.dbname)
    with psycopg.connect(through_bouncer, autocommit=True, prepare_threshold=None) as producer:
        pgjobq.enqueue_many(producer, "default", [{"n": n} for n in range(10)])
        worker = WorkerProcess(
            through_bouncer,
            "record_without_prepared_statements",
            "--no-prepared-statements",
            "--poll-interval", "0.2",
            "--batch", "3",
            "--concurrency", "2",
            log=tmp_path / "worker.log",
        )  # fmt: skip
        try:
            assert wait_until(lambda: FALLBACK in worker.log(), timeout=30), worker.log()
            # while it only polls: jobs through PgBouncer, one statement each, and directly
            for n in range(10, 30):
                pgjobq.enqueue(producer, "default", {"n": n})
            pgjobq.enqueue_many(db, "default", [{"n": n} for n in range(30, 40)])

            assert wait_until(lambda: counts(db)["done"] == 40, timeout=60), worker.log()
            assert counts(db) == {
                "done": 40,
                "not_done": 0,
                "runs": 40,
                "jobs_run": 40,
                "each_claimed_once": True,
            }
            assert worker.log().count(FALLBACK) == 1
            assert worker.process.poll() is None, worker.log()
        finally:
            worker.kill()


def test_worker_on_a_direct_connection_finds_that_listen_works(
    db: Db, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgjobq.worker")
    done = threading.Event()
    # Polling every two minutes: only a notification explains a prompt job.
    worker = Worker(dsn, lambda job: done.set(), WorkerSettings(poll_interval=120))
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert wait_until(lambda: "the probe notification arrived" in caplog.text, timeout=30), caplog.text
        pgjobq.enqueue(db, "default", {})
        assert done.wait(30), caplog.text
    finally:
        worker.stop()
        thread.join(30)

    assert FALLBACK not in caplog.text


def test_several_workers_on_one_pooled_server_connection_run_every_job_once_and_leave_no_session_setting(
    db: Db, connect: Connect, one_connection_bouncer: ThrowawayPgBouncer, tmp_path: Path
) -> None:
    db.execute(EXECUTIONS_DDL)
    # 2,000 dead entries at the start of the claim index, which a snapshot held open keeps
    # vacuum (and index scans) from clearing: the workers' claims will go into forward mode.
    holder = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM jobq.jobs").fetchone()
    fill(db, 2_000)
    for _ in range(2):
        db.execute(
            "SELECT count(*) FROM jobq.complete_many("
            " ARRAY(SELECT id FROM jobq.claim('default', 1000, 'bloat')), array_fill(1::bigint, ARRAY[1000]))"
        )
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE status = 'done'") == 2_000
    # no forward position yet (the queue's row there, if any, only caches its settings)
    assert scalar(db, "SELECT count(*) FROM jobq._claim_hints WHERE until IS NOT NULL") == 0
    through_bouncer = one_connection_bouncer.dsn(db.info.dbname)
    observer = connect_through(through_bouncer)
    server_pid = scalar(observer, "SELECT pg_backend_pid()")
    workers = [
        WorkerProcess(
            through_bouncer,
            "record_without_prepared_statements",
            *("--no-prepared-statements", "--batch", "5", "--poll-interval", "0.1", "--log-level", "INFO"),
            log=tmp_path / f"worker-{n}.log",
        )
        for n in range(4)
    ]
    try:
        # each has connected, found LISTEN useless behind the pooler, and polls
        assert wait_until(lambda: all(FALLBACK in w.log() for w in workers), timeout=30), [
            w.log() for w in workers
        ]
        ids = fill(db, 300)
        assert wait_until(lambda: done_once(db, ids) == len(ids), timeout=60), [w.log() for w in workers]
        for worker in workers:
            worker.process.send_signal(signal.SIGTERM)
        exit_codes = [worker.wait(timeout=30) for worker in workers]
        pid_after = scalar(observer, "SELECT pg_backend_pid()")
        # pg_settings leaves out placeholder settings such as jobq.claim_hint: ask for it by name
        claim_hint = scalar(observer, "SELECT current_setting('jobq.claim_hint', true)")
    finally:
        for worker in workers:
            worker.kill()
        holder.rollback()
        observer.close()

    assert exit_codes == [0] * len(workers), [w.log()[-2000:] for w in workers]
    assert pid_after == server_pid  # one server connection served every worker
    # forward mode ran: a worker's claim put the queue's position in its table...
    assert scalar(db, "SELECT id FROM jobq._claim_hints WHERE queue = 'default'") in ids
    # ...and left nothing in the session of the server connection they all used (0.3.0 left it there)
    assert claim_hint is None
    runs = db.execute(
        "SELECT count(*) AS runs, count(DISTINCT job_id) AS jobs, count(DISTINCT pid) > 1 AS shared"
        " FROM executions"
    ).fetchone()
    assert runs == {"runs": 300, "jobs": 300, "shared": True}
    assert done_once(db, ids) == 300
