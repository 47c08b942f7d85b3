"""AsyncWorker in this process, on a real database: coroutine handlers as tasks, with Worker's policy.

Each test runs the worker's event loop on a thread of its own
(``asyncio.run(worker.run(install_signal_handlers=False))``) and watches
the database from the test's thread.  The tests with signals run real
processes (test_async_worker_processes.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

import pgjobq
from pgjobq import AsyncWorker, Job, Retry, Snooze, Worker, WorkerObserver, WorkerSettings

from helpers.processes import wait_until
from helpers.sqlhelpers import Db, fill, scalar, statuses

FAST = {"poll_interval": 0.05, "reap_interval": 0.2, "ack_interval": 0.0}

StartAsync = Callable[..., AsyncWorker]


@pytest.fixture
def start_async(dsn: str) -> Iterator[StartAsync]:
    """Starts AsyncWorkers on threads (each its own event loop); stops and joins them after the test."""
    started: list[tuple[AsyncWorker, threading.Thread]] = []

    def start(handler: Callable[[Job], Any], **settings: Any) -> AsyncWorker:
        worker = AsyncWorker(dsn, handler, WorkerSettings(**{**FAST, **settings}))
        thread = threading.Thread(target=asyncio.run, args=(worker.run(install_signal_handlers=False),))
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(30)
        assert not thread.is_alive()


def run_burst(dsn: str, handler: Callable[[Job], Any], **settings: Any) -> AsyncWorker:
    """An AsyncWorker in burst mode, run to its end on this thread."""
    worker = AsyncWorker(dsn, handler, WorkerSettings(burst=True, **{**FAST, **settings}))
    asyncio.run(worker.run(install_signal_handlers=False))
    return worker


def test_coroutine_handlers_run_as_concurrent_tasks_and_complete_their_jobs(db: Db, dsn: str) -> None:
    fill(db, 8)
    running: set[int] = set()
    most = 0

    async def handler(job: Job) -> None:
        nonlocal most
        running.add(job.id)
        most = max(most, len(running))
        await asyncio.sleep(0.1)
        running.discard(job.id)

    worker = run_burst(dsn, handler, concurrency=4, batch=8)

    assert statuses(db) == {"done": 8}
    assert worker.processed == 8
    assert most == 4  # never more tasks than concurrency, and that many at once


def test_outcomes_are_the_workers_results_failures_snoozes_and_retries(db: Db, dsn: str) -> None:
    ids = {
        kind: pgjobq.enqueue(db, "default", {"kind": kind}, max_attempts=1 if kind == "fail" else 3)
        for kind in ("result", "fail", "snooze", "retry")
    }

    async def handler(job: Job) -> object:
        kind = job.payload["kind"]
        if kind == "fail":
            raise ValueError("no")
        if kind == "snooze":
            raise Snooze(timedelta(hours=1))
        if kind == "retry":
            raise Retry(timedelta(hours=1))
        return {"answer": 42}

    run_burst(dsn, handler)

    states = {kind: pgjobq.job(db, job_id) for kind, job_id in ids.items()}
    assert (states["result"].status, states["result"].result) == ("done", {"answer": 42})
    assert (states["fail"].status, states["fail"].last_error) == ("failed", "ValueError: no")
    assert (states["snooze"].status, states["snooze"].attempts) == ("queued", 0)
    assert (states["retry"].status, states["retry"].attempts) == ("queued", 1)


def test_several_queues_are_claimed_from_in_one_claim_by_priority(db: Db, dsn: str) -> None:
    low = pgjobq.enqueue(db, "a", {}, priority=0)
    high = pgjobq.enqueue(db, "b", {}, priority=5)
    pgjobq.enqueue(db, "c", {})  # not one of the worker's queues
    order: list[int] = []

    async def handler(job: Job) -> None:
        order.append(job.id)

    run_burst(dsn, handler, queue=["a", "b"], batch=1)

    assert order == [high, low]
    assert statuses(db) == {"done": 2, "queued": 1}


def test_a_plain_function_handler_runs_on_a_thread_not_on_the_event_loop(db: Db, dsn: str) -> None:
    fill(db, 3)
    threads: set[str] = set()

    def handler(job: Job) -> None:
        threads.add(threading.current_thread().name)
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()  # no loop on this thread: the handler cannot block it

    run_burst(dsn, handler, concurrency=2)

    assert statuses(db) == {"done": 3}
    assert threads and all(name.startswith("pgjobq-handler") for name in threads)


def test_a_cancel_request_reaches_a_handler_awaiting_wait_for_cancel(
    db: Db, dsn: str, start_async: StartAsync
) -> None:
    [job_id] = fill(db, 1)
    heard = threading.Event()

    async def handler(job: Job) -> None:
        if await job.wait_for_cancel(20):
            heard.set()
            raise RuntimeError("stopped on request")

    start_async(handler)
    assert wait_until(lambda: scalar(db, "SELECT status FROM jobq.jobs") == "running", timeout=10)

    pgjobq.cancel(db, [job_id])

    assert heard.wait(10)
    assert wait_until(lambda: statuses(db) == {"cancelled": 1}, timeout=10)


def test_heartbeats_keep_a_long_handlers_short_lease_from_the_reaper(db: Db, dsn: str) -> None:
    [job_id] = fill(db, 1)

    async def handler(job: Job) -> None:
        for _ in range(6):
            await asyncio.sleep(0.25)
            pgjobq.reap(db)  # every other worker's reaper, meanwhile

    run_burst(dsn, handler, lease_timeout=0.6, heartbeat_interval=0.1)

    row = db.execute("SELECT status, attempts FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"status": "done", "attempts": 1}


def test_a_notification_wakes_the_waiting_worker_for_a_new_job(
    db: Db, dsn: str, start_async: StartAsync
) -> None:
    done = threading.Event()

    async def handler(job: Job) -> None:
        done.set()

    start_async(handler, poll_interval=30)  # only a notification can wake it in time
    assert wait_until(lambda: scalar(db, "SELECT count(*) FROM jobq._waiters") >= 1, timeout=10)

    pgjobq.enqueue(db, "default", {})

    assert done.wait(10)


def test_the_worker_reconnects_after_its_connections_are_killed(
    db: Db, dsn: str, start_async: StartAsync
) -> None:
    seen: list[int] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    recorder = Recorder()
    start_async(handler, reconnect_delay_max=0.5, observers=[recorder])
    first = pgjobq.enqueue(db, "default", {})
    assert wait_until(lambda: first in seen, timeout=10)

    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'pgjobq %'"
    )
    second = pgjobq.enqueue(db, "default", {})

    assert wait_until(lambda: second in seen, timeout=15)
    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=10)
    assert ("reconnected", None) in recorder.calls


class Recorder(WorkerObserver):
    """Records every observer call, as (hook, details)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def claimed(self, queues: Sequence[str], jobs: Sequence[Job], seconds: float) -> None:
        self.calls.append(("claimed", (tuple(queues), len(jobs))))

    def started(self, job: Job, waited: float | None) -> None:
        self.calls.append(("started", (job.id, waited is not None and waited >= 0)))

    def finished(self, job: Job, outcome: pgjobq.Outcome, seconds: float | None) -> None:
        self.calls.append(("finished", (job.id, outcome, seconds is not None)))

    def reconnected(self) -> None:
        self.calls.append(("reconnected", None))


class Raising(WorkerObserver):
    def started(self, job: Job, waited: float | None) -> None:
        raise RuntimeError("a broken observer")


async def async_handler(job: Job) -> None:
    if job.payload.get("fail"):
        raise ValueError("no")


def sync_handler(job: Job) -> None:
    if job.payload.get("fail"):
        raise ValueError("no")


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_both_workers_tell_their_observers_claims_starts_and_outcomes(db: Db, dsn: str, kind: str) -> None:
    ok = pgjobq.enqueue(db, "default", {})
    failed = pgjobq.enqueue(db, "default", {"fail": True}, max_attempts=1)
    recorder = Recorder()
    settings = WorkerSettings(burst=True, observers=[Raising(), recorder], **FAST)  # type: ignore[arg-type]

    if kind == "Worker":
        Worker(dsn, sync_handler, settings).run(install_signal_handlers=False)
    else:
        asyncio.run(AsyncWorker(dsn, async_handler, settings).run(install_signal_handlers=False))

    hooks = [hook for hook, _ in recorder.calls]
    assert ("claimed", (("default",), 2)) in recorder.calls
    assert hooks.count("started") == 2
    assert ("started", (ok, True)) in recorder.calls  # the waited time from the claim query
    assert ("finished", (ok, "done", True)) in recorder.calls
    assert ("finished", (failed, "failed", True)) in recorder.calls
    assert statuses(db) == {"done": 1, "failed": 1}
