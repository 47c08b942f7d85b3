"""The worker as real processes: wake-up, polling, crash recovery, shutdown, scale."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, cpu_seconds, wait_until
from helpers.sqlhelpers import Connect, Db, statuses


@pytest.fixture
def executions(db: Db) -> None:
    db.execute(EXECUTIONS_DDL)


def scalar(db: Db, query: str, *params: object) -> Any:
    row = db.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def listening(db: Db, workers: int = 1) -> bool:
    """True once `workers` worker processes have run LISTEN on their own connection."""
    return bool(
        scalar(
            db,
            "SELECT count(*) >= %s FROM pg_stat_activity"
            " WHERE application_name LIKE 'pgjobq listen%%' AND query LIKE 'LISTEN%%'",
            workers,
        )
    )


def all_done(db: Db, total: int) -> Callable[[], bool]:
    return lambda: statuses(db).get("done", 0) == total


def test_notification_wakes_an_idle_worker_long_before_its_poll(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    worker = start_worker("record", "--poll-interval", "120")
    assert wait_until(lambda: listening(db)), worker.log()

    db.execute("SELECT jobq.enqueue('default', '{}')")

    # polling alone would take two minutes: only the notification explains this
    assert wait_until(all_done(db, 1), timeout=20), worker.log()


def test_worker_that_hears_no_notification_finishes_jobs_by_polling(
    db: Db, connect: Connect, executions: None, start_worker: StartWorker
) -> None:
    observer = connect()
    observer.execute("LISTEN jobq_default")
    # without LISTEN the worker never registers as waiting, so no enqueue notifies anyone
    worker = start_worker("record", "--no-listen", "--poll-interval", "0.3")
    assert wait_until(lambda: "started" in worker.log()), worker.log()

    db.execute("SELECT jobq.enqueue_many('default', array_fill('{}'::jsonb, ARRAY[5]))")

    assert wait_until(all_done(db, 5), timeout=30), worker.log()
    assert list(observer.notifies(timeout=0.5)) == []
    assert not listening(db), "the worker listened"


@pytest.mark.slow
def test_eight_workers_run_20000_jobs_exactly_once(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute(
        "SELECT jobq.enqueue_many('default', array_agg(jsonb_build_object('n', g)))"
        " FROM generate_series(1, 20000) AS g"
    )
    workers = [start_worker("record", "--batch", "50", "--burst", "--log-level", "WARNING") for _ in range(8)]

    exit_codes = [worker.wait(timeout=600) for worker in workers]

    assert exit_codes == [0] * 8, [w.log()[-2000:] for w in workers]
    assert statuses(db) == {"done": 20000}
    executions_summary = db.execute(
        "SELECT count(*) AS runs, count(DISTINCT job_id) AS jobs,"
        "       count(DISTINCT pid) > 1 AS spread,"
        "       (SELECT count(*) FROM (SELECT job_id FROM executions GROUP BY job_id"
        "                               HAVING count(*) > 1) AS twice) AS double_claims"
        "  FROM executions"
    ).fetchone()
    assert executions_summary == {"runs": 20000, "jobs": 20000, "spread": True, "double_claims": 0}
    assert scalar(db, "SELECT bool_and(attempts = 1 AND lease = 1) FROM jobq.jobs")


def test_job_of_a_killed_worker_is_reaped_and_finished_by_another(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    fast_recovery = ("--lease-timeout", "2", "--heartbeat-interval", "0.5", "--reap-interval", "0.3",
                     "--poll-interval", "0.2")  # fmt: skip
    job_id = scalar(db, """SELECT jobq.enqueue('default', '{"sleep": 120}')""")
    victim = start_worker("slow_first_attempt", *fast_recovery)
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM executions") == 1), victim.log()

    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert statuses(db) == {"running": 1}

    rescuer = start_worker("slow_first_attempt", *fast_recovery)
    assert wait_until(all_done(db, 1), timeout=30), rescuer.log()

    job = db.execute("SELECT attempts, lease, last_error FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert job is not None
    assert (job["attempts"], job["lease"]) == (2, 2)
    assert "reaped" in job["last_error"]
    runs = db.execute(
        "SELECT pid = %s AS by_victim, lease, finished FROM executions ORDER BY lease, finished",
        (victim.pid,),
    ).fetchall()
    assert runs == [
        {"by_victim": True, "lease": 1, "finished": False},
        {"by_victim": False, "lease": 2, "finished": False},
        {"by_victim": False, "lease": 2, "finished": True},
    ]


def test_sigterm_finishes_the_job_in_hand_and_hands_back_the_rest(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("""SELECT jobq.enqueue_many('default', array_fill('{"sleep": 1.5}'::jsonb, ARRAY[5]))""")
    worker = start_worker("sleep_then_record", "--batch", "5", "--concurrency", "1")
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM executions") == 1), worker.log()

    worker.process.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=30) == 0, worker.log()
    assert statuses(db) == {"done": 1, "queued": 4}
    assert scalar(db, "SELECT bool_and(attempts = 0) FROM jobq.jobs WHERE status = 'queued'")
    assert scalar(db, "SELECT count(*) FILTER (WHERE finished) FROM executions") == 1


def test_long_job_keeps_its_lease_by_heartbeats(db: Db, executions: None, start_worker: StartWorker) -> None:
    db.execute("""SELECT jobq.enqueue('default', '{"sleep": 4}')""")
    worker = start_worker(
        "sleep_then_record", "--lease-timeout", "1.5", "--heartbeat-interval", "0.3", "--reap-interval", "0.2"
    )

    assert wait_until(all_done(db, 1), timeout=30), worker.log()
    assert scalar(db, "SELECT attempts = 1 AND lease = 1 AND last_error IS NULL FROM jobq.jobs")


def test_worker_reconnects_after_its_connections_are_terminated(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    worker = start_worker("record", "--poll-interval", "0.2")
    assert wait_until(lambda: listening(db)), worker.log()

    terminated = scalar(
        db,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name LIKE 'pgjobq %%'",
    )
    assert terminated == 2
    db.execute("SELECT jobq.enqueue_many('default', array_fill('{}'::jsonb, ARRAY[3]))")

    assert wait_until(all_done(db, 3), timeout=30), worker.log()
    assert "database unavailable" in worker.log()
    assert worker.process.poll() is None


def test_worker_whose_connection_breaks_during_a_handler_waits_quietly_and_finishes_after(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("""SELECT jobq.enqueue('default', '{"sleep": 4}')""")
    worker = start_worker(  # concurrency 1: the keeper heartbeats while the handler runs
        "sleep_then_record", "--lease-timeout", "30", "--heartbeat-interval", "0.2"
    )
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM executions") == 1), worker.log()
    terminated = scalar(
        db,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name LIKE 'pgjobq worker %%'",
    )
    assert terminated == 1
    before = cpu_seconds(worker.pid)

    assert wait_until(lambda: scalar(db, "SELECT count(*) FILTER (WHERE finished) FROM executions") == 1)
    spent = cpu_seconds(worker.pid) - before
    assert spent < 1.0, f"{spent:.2f} s of CPU while the handler slept: the keeper thread spun"
    assert wait_until(all_done(db, 1), timeout=30), worker.log()


def test_failing_handler_retries_with_backoff_then_fails_for_good(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("""SELECT jobq.enqueue('default', '{"n": 7}'), jobq.enqueue('default', '{"n": 8}')""")
    worker = start_worker("fail_on_multiples_of_seven", "--poll-interval", "0.2")

    assert wait_until(lambda: statuses(db) == {"done": 1, "failed": 1}, timeout=30), worker.log()
    failed = db.execute("SELECT attempts, last_error FROM jobq.jobs WHERE status = 'failed'").fetchone()
    assert failed == {"attempts": 3, "last_error": "RuntimeError: n=7 is a multiple of 7"}
    assert scalar(db, "SELECT count(*) FROM executions") == 4  # n=7 three times, n=8 once


def test_second_sigterm_gives_up_the_job_in_hand_at_once(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("""SELECT jobq.enqueue('default', '{"sleep": 120}')""")
    worker = start_worker("sleep_then_record")
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM executions") == 1), worker.log()

    worker.process.send_signal(signal.SIGTERM)
    assert wait_until(lambda: "finishing jobs in hand" in worker.log()), worker.log()
    worker.process.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=30) == 1, worker.log()
    assert "abandoning 1 job(s)" in worker.log()
    assert statuses(db) == {"running": 1}  # left for the reaper
