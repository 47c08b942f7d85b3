"""The worker behind PgBouncer in transaction pooling mode, where LISTEN cannot work.

Each transaction may run on a different server connection, so a LISTEN is
left behind on a server connection the listening client never sees again.
The worker must find that out by itself (a probe notification that never
arrives), say so, and poll; with prepared statements off (PgBouncer 1.18
cannot keep them across transactions) it must then run every job exactly
once.  A direct connection must still be found to deliver notifications.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgjobq
from pgjobq import Worker, WorkerSettings

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import WorkerProcess, wait_until
from helpers.sqlhelpers import Db
from throwaway_pg import ThrowawayPostgres
from throwaway_pgbouncer import ThrowawayPgBouncer

FALLBACK = "notifications do not reach this worker's listening connection"


@pytest.fixture(scope="module")
def bouncer(pg_server: ThrowawayPostgres) -> Iterator[ThrowawayPgBouncer]:
    """PgBouncer in transaction pooling mode before the test server, two server connections per database."""
    with ThrowawayPgBouncer(
        pg_server.host, pg_server.port, pool_mode="transaction", pool_size=2
    ) as pgbouncer:
        yield pgbouncer


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
