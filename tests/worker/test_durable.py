"""Durable execution as a handler sees it (extension 0.11.0): job.step, job.sleep, job.await_signal,
job.progress, on the Worker, the AsyncWorker and a real `pgjobq worker` process killed between steps.

Each step's side effect is counted outside the database (a list of this
process, or the table effects for a worker process), against what the
database recorded.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import pgjobq
from pgjobq import AsyncWorker, Job, WorkerSettings

from helpers.fixtures import RunWorker
from helpers.handlers import EFFECTS_DDL
from helpers.processes import StartWorker, wait_until
from helpers.sqlhelpers import Db, enqueue, scalar, statuses

FAST = WorkerSettings(poll_interval=0.1, reap_interval=0.5)


def counted(effects: list[Any], mark: Any, value: Any) -> Any:
    """A step's side effect, counted outside the database: mark appended to effects; returns value."""
    effects.append(mark)
    return value


def state(db: Db, job_id: int) -> dict[str, Any]:
    row = db.execute(
        "SELECT status, attempts, result, last_error, steps, step_attempts, progress, waiting_for"
        "  FROM jobq.job(%s)",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def test_a_step_runs_once_and_its_recorded_result_is_returned_when_the_job_runs_again(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {})
    effects: list[int] = []

    def handler(job: Job) -> object:
        charged = job.step(
            "charge", counted, effects, job.attempts, {"charge": "ch_1", "n": len(effects) + 1}
        )
        if job.attempts == 1:
            raise RuntimeError("the receipt service is down")
        return charged

    run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    assert effects == [1]
    row = state(db, job_id)
    assert row["result"] == {"charge": "ch_1", "n": 1}
    assert row["attempts"] == 2
    assert row["steps"] == {"charge": {"charge": "ch_1", "n": 1}}
    assert row["step_attempts"] == {"charge": 1}


def test_a_result_json_cannot_hold_fails_the_attempt_before_anything_is_recorded(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {}, max_attempts=1)

    def handler(job: Job) -> object:
        return job.step("charge", lambda: {"when": datetime.now(timezone.utc)})

    run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["status"] == "failed", timeout=30)
    row = state(db, job_id)
    assert row["last_error"].startswith("InvalidArgument: result is not serialisable as JSON")
    assert row["steps"] is None
    assert scalar(db, "SELECT count(*) FROM jobq.job_steps WHERE id = %s", (job_id,)) == 0


def test_a_sleep_gives_the_job_back_and_it_goes_on_after_the_sleep_on_the_same_attempt(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {})
    runs: list[datetime] = []

    def handler(job: Job) -> object:
        runs.append(datetime.now(timezone.utc))
        job.step("before", lambda: "one")
        job.sleep(timedelta(seconds=1.5))
        return job.step("after", lambda: "two")

    run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["waiting_for"] is not None, timeout=30)
    asleep = state(db, job_id)
    assert asleep["status"] == "queued"
    assert asleep["attempts"] == 0
    assert set(asleep["waiting_for"]) == {"sleep", "until"}
    assert asleep["waiting_for"]["sleep"] == "sleep:1"
    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    row = state(db, job_id)
    assert row["attempts"] == 1
    assert row["result"] == "two"
    assert len(runs) == 2
    assert runs[1] - runs[0] >= timedelta(seconds=1.5)


def test_a_job_awaiting_a_signal_holds_no_worker_and_resumes_with_its_payload(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {})
    charged: list[int] = []

    def handler(job: Job) -> object:
        job.step("charge", counted, charged, job.id, "ch")
        approval = job.await_signal(f"approve:{job.id}", timeout=3600)
        return {"approved": approval}

    worker = run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["status"] == "waiting", timeout=30)
    assert state(db, job_id)["waiting_for"]["signal"] == f"approve:{job_id}"
    assert wait_until(lambda: worker.processed == 1, timeout=30)  # the run ended: no worker is held
    assert scalar(db, 'SELECT jobq.signal(%s, \'{"by": "ann"}\')', (f"approve:{job_id}",)) == 1
    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    assert state(db, job_id)["result"] == {"approved": {"by": "ann"}}
    assert charged == [job_id]


def test_a_signal_that_does_not_arrive_in_time_raises_signal_timeout_in_the_run_after_it(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {})

    def handler(job: Job) -> object:
        try:
            job.await_signal("never", timeout=0.5)
        except pgjobq.SignalTimeout as exc:
            return f"timed out: {exc}"
        return "signalled"

    run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    assert state(db, job_id)["result"].startswith("timed out: signal 'never' did not arrive in time")
    assert state(db, job_id)["steps"] == {"never": {"timed_out": True}}


def test_progress_is_stored_and_shown_while_the_job_runs(db: Db, dsn: str, run_worker: RunWorker) -> None:
    job_id = enqueue(db, "default", {})
    go_on = threading.Event()

    def handler(job: Job) -> object:
        job.progress({"done": 1, "of": 2})
        go_on.wait(30)
        job.progress({"done": 2, "of": 2})
        return None

    run_worker(dsn, handler, FAST)

    assert wait_until(lambda: state(db, job_id)["progress"] == {"done": 1, "of": 2}, timeout=30)
    assert state(db, job_id)["status"] == "running"
    go_on.set()
    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    assert state(db, job_id)["progress"] == {"done": 2, "of": 2}


def test_a_worker_whose_lease_was_reaped_cannot_record_a_step(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {})
    reaped = threading.Event()
    refused: list[BaseException] = []

    def handler(job: Job) -> object:
        if job.attempts == 1:
            reaped.wait(30)  # meanwhile the lease is reaped, and another claim takes the job
            try:
                job.step("charge", lambda: "zombie's charge")
            except pgjobq.LeaseLost as exc:
                refused.append(exc)
                raise
        return None

    run_worker(dsn, handler, WorkerSettings(poll_interval=30))

    assert wait_until(lambda: state(db, job_id)["status"] == "running", timeout=30)
    db.execute("UPDATE jobq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (job_id,))
    assert scalar(db, "SELECT count(*) FROM jobq.reap()") == 1
    db.execute("UPDATE jobq.jobs SET run_at = now() WHERE id = %s", (job_id,))  # no backoff to wait out
    lease = scalar(db, "SELECT lease FROM jobq.claim('default', 1, 'another worker')")
    reaped.set()
    assert wait_until(lambda: len(refused) == 1, timeout=30)
    assert scalar(db, "SELECT count(*) FROM jobq.job_steps WHERE id = %s", (job_id,)) == 0
    assert scalar(
        db, "SELECT jobq.checkpoint(%s, %s, 'charge', '\"the holder''s charge\"')", (job_id, lease)
    ) == ("the holder's charge")


def test_a_coroutine_handler_awaits_its_steps_sleeps_and_signals(db: Db, dsn: str) -> None:
    job_id = enqueue(db, "default", {})
    effects: list[str] = []

    async def charge(order: int) -> str:
        await asyncio.sleep(0)
        effects.append("charge")
        return f"ch_{order}"

    async def handler(job: Job) -> object:
        charged = await job.step("charge", charge, 7)
        await job.progress({"charged": charged})
        approval = await job.await_signal(f"approve:{job.id}", timeout=60)
        await job.sleep(0.3)
        return [charged, approval]

    async def main() -> None:
        worker = AsyncWorker(dsn, handler, FAST)
        running = asyncio.ensure_future(worker.run(install_signal_handlers=False))
        try:
            for _ in range(300):
                if state(db, job_id)["status"] == "waiting":
                    break
                await asyncio.sleep(0.1)
            assert scalar(db, "SELECT jobq.signal(%s, '\"yes\"')", (f"approve:{job_id}",)) == 1
            for _ in range(300):
                if state(db, job_id)["status"] == "done":
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await running

    asyncio.run(main())

    row = state(db, job_id)
    assert row["status"] == "done"
    assert row["result"] == ["ch_7", "yes"]
    assert row["progress"] == {"charged": "ch_7"}
    assert effects == ["charge"]


def test_a_task_receives_its_job_and_records_its_steps(db: Db, dsn: str, run_worker: RunWorker) -> None:
    tasks = pgjobq.Tasks()
    charged: list[int] = []

    @tasks.task
    def send_receipt(order: int, job: Job) -> str:
        charge = job.step("charge", counted, charged, order, f"ch_{order}")
        if job.attempts == 1:
            raise RuntimeError("mail server down")
        return f"receipt for {charge}"

    job_id = send_receipt.enqueue(db, order=42)
    worker = pgjobq.Worker(dsn, tasks=tasks, settings=FAST)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    assert state(db, job_id)["result"] == "receipt for ch_42"
    assert charged == [42]


@pytest.mark.slow
def test_a_worker_killed_between_steps_leaves_the_recorded_step_to_the_next_worker(
    db: Db, start_worker: StartWorker
) -> None:
    db.execute(EFFECTS_DDL)
    job_id = enqueue(db, "default", {"pause": 60})
    first = start_worker("two_steps", "--lease-timeout", "2", "--poll-interval", "0.2")
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM effects") == 1, timeout=60)
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM jobq.job_steps WHERE id = %s", (job_id,)) == 1)
    first.process.send_signal(signal.SIGKILL)  # inside step two's pause: after step one, before two's effect
    first.wait()

    start_worker("two_steps", "--lease-timeout", "2", "--poll-interval", "0.2", "--reap-interval", "0.5")

    assert wait_until(lambda: state(db, job_id)["status"] == "done", timeout=60)
    effects = db.execute("SELECT step, count(*) AS n FROM effects GROUP BY step ORDER BY step").fetchall()
    assert [(e["step"], e["n"]) for e in effects] == [("one", 1), ("two", 1)]
    row = state(db, job_id)
    assert row["result"] == [f"one of {job_id}", f"two of {job_id}"]
    assert row["step_attempts"] == {"one": 1, "two": 2}


def test_a_fan_out_runs_its_continuation_once_every_child_ended_with_their_results_in_order(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    tasks = pgjobq.Tasks()
    split_runs: list[int] = []

    @tasks.task
    def split(numbers: list[int], job: Job) -> object:
        split_runs.append(job.attempts)
        ids = job.fan_out(
            [{"payload": {"n": n}, "task": "square"} for n in numbers],
            {"payload": {}, "task": "total"},
        )
        if job.attempts == 1:
            raise RuntimeError("crashed after the fan-out")  # run again: the same ids, nothing enqueued twice
        return ids

    @tasks.task
    def square(n: int) -> int:
        if n == 3:
            raise pgjobq.Discard("three is refused")
        return n * n

    @tasks.task
    def total(job: Job) -> object:
        parents = job.parent_results()
        return [[p.status, p.result] for p in parents]

    parent = split.enqueue(db, numbers=[1, 2, 3, 4])
    worker = pgjobq.Worker(dsn, tasks=tasks, settings=FAST)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        # the split's retry comes after its backoff, the continuation may run before it
        assert wait_until(lambda: statuses(db) == {"done": 5, "failed": 1}, timeout=60)
    finally:
        worker.stop()
        thread.join(30)
    assert split_runs == [1, 2]
    ids = state(db, parent)["result"]
    assert len(ids) == 5
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 6
    assert state(db, ids[-1])["result"] == [["done", 1], ["done", 4], ["failed", None], ["done", 16]]
