"""Job control with real worker processes (the pgjobq CLI): results, cancel, the queue's lease."""

from __future__ import annotations

import pytest

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, wait_until
from helpers.sqlhelpers import Db, scalar, statuses


@pytest.fixture
def executions(db: Db) -> None:
    db.execute(EXECUTIONS_DDL)


def runs(db: Db) -> int:
    return int(scalar(db, "SELECT count(*) FROM executions"))


def test_a_worker_process_stores_what_its_handler_returns(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    job_id = scalar(db, """SELECT jobq.enqueue('default', '{"result": {"sent": 3}}')""")
    worker = start_worker("return_payload", "--poll-interval", "0.2")

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=30), worker.log()
    assert scalar(db, "SELECT result FROM jobq.job(%s)", (job_id,)) == {"sent": 3}


def test_a_worker_process_stops_a_running_job_when_it_is_cancelled(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('default', '{}')")
    # heartbeats and polls far apart: the notification carries the request
    worker = start_worker(
        "stop_when_cancelled", "--lease-timeout", "120", "--heartbeat-interval", "60", "--poll-interval", "60"
    )
    assert wait_until(lambda: runs(db) == 1, timeout=30), worker.log()

    assert scalar(db, "SELECT status FROM jobq.cancel(ARRAY[%s]::bigint[])", (job_id,)) == "cancel_requested"

    assert wait_until(lambda: statuses(db) == {"cancelled": 1}, timeout=20), worker.log()
    assert runs(db) == 2  # started and finished once: not retried
    assert f"job {job_id}: cancel requested (heard by notification)" in worker.log()
    assert worker.process.poll() is None


def test_a_worker_process_without_a_lease_timeout_keeps_the_queues_short_lease_by_heartbeats(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("SELECT jobq.configure_queue('default', lease_timeout => '1 second')")
    scalar(db, """SELECT jobq.enqueue('default', '{"sleep": 3}')""")
    worker = start_worker("sleep_then_record", "--reap-interval", "0.2", "--poll-interval", "0.2")
    other = start_worker("record", "--reap-interval", "0.2", "--poll-interval", "0.2")  # reaps too

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=30), worker.log()
    assert scalar(db, "SELECT attempts = 1 AND lease = 1 AND last_error IS NULL FROM jobq.jobs")
    assert not any("reaped" in w.log() for w in (worker, other))
