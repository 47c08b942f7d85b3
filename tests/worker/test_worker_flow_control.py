"""The worker's flow control (0.7.0): one worker over several queues, claims held back by a queue's
limits, and the schedules every worker advances (jobq.tick each reap interval).

Real worker processes (the pgjobq CLI) and Workers on threads of this process, against the test's
own database.  Where a test shows that something arrived "soon", polling is set far enough apart
that only the path under test explains it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pgjobq import ConfigurationError, Job, WorkerSettings

from helpers.fixtures import RunWorker
from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker, WorkerProcess, cpu_seconds, wait_until
from helpers.sqlhelpers import Db, claim_one, enqueue, fill, scalar, statuses


@pytest.fixture
def executions(db: Db) -> None:
    db.execute(EXECUTIONS_DDL)


def runs(db: Db) -> int:
    return int(scalar(db, "SELECT count(*) FROM executions WHERE finished"))


def done_per_queue(db: Db) -> dict[str, int]:
    rows = db.execute(
        "SELECT queue, count(*) AS n FROM jobq.jobs WHERE status = 'done' GROUP BY queue"
    ).fetchall()
    return {row["queue"]: row["n"] for row in rows}


def beats(db: Db) -> int:
    """How many jobs the schedule of queue beats has enqueued."""
    return int(scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'beats'"))


def waiting_on(db: Db, worker: str) -> set[str]:
    """The queues worker is registered as waiting on (jobq.wait), now."""
    rows = db.execute(
        "SELECT queue FROM jobq._waiters WHERE worker = %s AND until > now()", (worker,)
    ).fetchall()
    return {row["queue"] for row in rows}


# -- settings --------------------------------------------------------------------------------------


def test_worker_settings_take_a_list_of_queues() -> None:
    settings = WorkerSettings(queue=["emails", "reports"])

    assert (settings.queue, settings.queues) == (("emails", "reports"), ("emails", "reports"))


def test_worker_settings_with_one_queue_in_a_list_keep_it_as_a_string() -> None:
    settings = WorkerSettings(queue=["emails"])

    assert (settings.queue, settings.queues) == ("emails", ("emails",))


def test_worker_settings_of_one_queue_by_name_still_work() -> None:
    assert WorkerSettings(queue="emails").queues == ("emails",)


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ([], "queue must name at least one queue"),
        (["emails", "emails"], "queue names each queue once, got emails more than once"),
        (["emails", 7], "queue must be a string or a list of strings"),
        (7, "queue must be a string or a list of strings"),
    ],
)
def test_worker_settings_refuse_a_bad_list_of_queues(queue: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        WorkerSettings(queue=queue)  # type: ignore[arg-type]


# -- several queues --------------------------------------------------------------------------------


def test_a_worker_process_over_two_queues_processes_the_jobs_of_both(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    fill(db, 3, "emails")
    fill(db, 2, "reports")
    fill(db, 1, "other")  # not one of its queues

    worker = start_worker("record", "--queue", "emails", "--queue", "reports", "--poll-interval", "0.2")

    assert wait_until(lambda: done_per_queue(db) == {"emails": 3, "reports": 2}, timeout=30), worker.log()
    assert "started on queues emails, reports" in worker.log()
    time.sleep(0.5)
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE queue = 'other'") == "queued"


def test_a_worker_process_takes_its_queues_from_pgjobq_queue_separated_by_spaces(
    db: Db, dsn: str, executions: None, tmp_path: Path
) -> None:
    fill(db, 1, "emails")
    fill(db, 1, "reports")

    worker = WorkerProcess(
        dsn, "record", "--poll-interval", "0.2", log=tmp_path / "worker.log", PGJOBQ_QUEUE="emails reports"
    )
    try:
        assert wait_until(lambda: done_per_queue(db) == {"emails": 1, "reports": 1}, timeout=30), worker.log()
    finally:
        worker.kill()


def test_a_worker_over_two_queues_waits_on_both_and_wakes_on_a_notification_of_either(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    done = threading.Event()
    run_worker(dsn, lambda job: done.set(), WorkerSettings(queue=["emails", "reports"], poll_interval=30,
                                                             name="sleeper"))  # fmt: skip
    assert wait_until(lambda: waiting_on(db, "sleeper") == {"emails", "reports"}, timeout=30)

    enqueue(db, "reports")

    # polling would take 30 s: the enqueue's notification on the second queue woke the worker
    assert done.wait(10)


def test_a_worker_over_two_queues_runs_the_higher_priority_job_first_whatever_its_queue(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    low = enqueue(db, "emails", priority=0)
    high = enqueue(db, "reports", priority=5)
    order: list[int] = []

    run_worker(dsn, lambda job: order.append(job.id), WorkerSettings(queue=["emails", "reports"], batch=1,
                                                                    poll_interval=0.2))  # fmt: skip

    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=30)
    assert order == [high, low]


def test_a_worker_over_two_queues_stores_results_and_failures_of_both(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    ok = enqueue(db, "emails", {"n": 1})
    bad = enqueue(db, "reports", {"n": 2, "fail": True}, max_attempts=1)

    def handler(job: Job) -> object:
        if job.payload.get("fail"):
            raise RuntimeError("boom")
        return {"n": job.payload["n"]}

    run_worker(dsn, handler, WorkerSettings(queue=["emails", "reports"], poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 1, "failed": 1}, timeout=30)
    assert scalar(db, "SELECT result FROM jobq.job(%s)", (ok,)) == {"n": 1}
    assert scalar(db, "SELECT last_error FROM jobq.job(%s)", (bad,)) == "RuntimeError: boom"


# -- limits ----------------------------------------------------------------------------------------


def test_a_worker_process_waits_without_spinning_while_its_queues_limit_is_reached_then_runs_the_jobs(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("SELECT jobq.configure_queue('default', concurrency => 1)")
    enqueue(db)
    held = claim_one(db)  # the one slot, taken by another worker
    fill(db, 3)
    worker = start_worker("record", "--poll-interval", "0.5", "--name", "limited")
    assert wait_until(lambda: waiting_on(db, "limited") == {"default"}, timeout=30), worker.log()

    cpu_before = cpu_seconds(worker.pid)
    time.sleep(3)
    cpu_spent = cpu_seconds(worker.pid) - cpu_before

    assert cpu_spent < 0.5, f"{cpu_spent:.2f} s of CPU in 3 s while the queue's limit was reached"
    assert runs(db) == 0
    db.execute("SELECT jobq.complete(%s, %s)", (held["id"], held["lease"]))
    assert wait_until(lambda: statuses(db) == {"done": 4}, timeout=30), worker.log()
    assert runs(db) == 3


def test_workers_never_run_more_jobs_of_a_queue_at_once_than_its_concurrency(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    db.execute("SELECT jobq.configure_queue('default', concurrency => 2)")
    fill(db, 8)
    lock = threading.Lock()
    running = 0
    most = 0

    def handler(job: Job) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.2)
        with lock:
            running -= 1

    for _ in range(2):
        run_worker(dsn, handler, WorkerSettings(concurrency=3, batch=3, poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 8}, timeout=60)
    assert most == 2


def test_a_worker_runs_one_job_of_a_key_at_a_time_under_a_key_limit_of_one(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    db.execute("SELECT jobq.configure_queue('default', key_concurrency => 1)")
    for key in ["a", "a", "a", "b", "b", "b"]:
        enqueue(db, payload={"key": key}, concurrency_key=key)
    lock = threading.Lock()
    running: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}

    def handler(job: Job) -> None:
        key = job.payload["key"]
        with lock:
            running[key] += 1
            most[key] = max(most[key], running[key])
        time.sleep(0.1)
        with lock:
            running[key] -= 1

    run_worker(dsn, handler, WorkerSettings(concurrency=4, batch=4, poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 6}, timeout=60)
    assert most == {"a": 1, "b": 1}


# -- schedules -------------------------------------------------------------------------------------


def test_a_worker_process_advances_a_one_second_schedule_and_runs_its_jobs(
    db: Db, executions: None, start_worker: StartWorker
) -> None:
    db.execute("SELECT jobq.schedule('pulse', 'default', every => '1 second')")

    worker = start_worker("record", "--reap-interval", "0.2", "--poll-interval", "0.2")

    assert wait_until(lambda: runs(db) >= 2, timeout=30), worker.log()
    assert "tick" not in "\n".join(line for line in worker.log().splitlines() if " INFO " in line)


def test_a_worker_on_other_queues_still_advances_the_schedules(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    db.execute("SELECT jobq.schedule('pulse', 'beats', every => '1 second')")

    run_worker(dsn, lambda job: None, WorkerSettings(queue="emails", reap_interval=0.2, poll_interval=0.2))

    assert wait_until(lambda: beats(db) >= 1, timeout=30)


def test_a_sleeping_worker_wakes_for_its_reap_interval_so_schedules_advance_despite_a_long_poll(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    db.execute("SELECT jobq.schedule('pulse', 'beats', every => '1 second')")
    # polls 60 s apart, and the schedule's queue is not the worker's: nothing wakes it but its reap
    # interval.  A tick enqueues the occurrences of the minute ahead: later ticks add one a second.
    run_worker(dsn, lambda job: None, WorkerSettings(queue="emails", reap_interval=0.5, poll_interval=60))
    assert wait_until(lambda: beats(db) > 0, timeout=30)
    first_tick = beats(db)

    assert wait_until(lambda: beats(db) >= first_tick + 3, timeout=15)
