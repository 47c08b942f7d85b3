"""Job control as an in-process Worker sees it: results, cancel, snooze and retry, leases, timeouts, pause.

Each test runs real Workers on threads of this process against its own
database, and drives them with the extension's functions (jobq.cancel,
jobq.pause, jobq.configure_queue) on another connection.  Where a test shows
that something arrived "soon", the worker's own polling and heartbeats are
set far enough apart that only the path under test explains it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest
from psycopg.types.json import Jsonb

import pgjobq
from pgjobq import Job, WorkerSettings
from pgjobq._client import sync as client
from pgjobq._client.proto import Call

from helpers.fixtures import RunWorker
from helpers.processes import wait_until
from helpers.sqlhelpers import Db, enqueue, scalar, statuses


def job_row(db: Db, job_id: int) -> dict[str, Any]:
    """The job's state as jobq.job reports it, and its lease."""
    row = db.execute(
        "SELECT s.status, s.attempts, s.max_attempts, j.lease, s.result, s.last_error,"
        "       s.finished_at IS NOT NULL AS finished, s.cancel_requested"
        "  FROM jobq.job(%s) AS s JOIN jobq.jobs AS j ON j.id = s.id",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def enqueue_many(db: Db, payloads: list[dict[str, Any]]) -> list[int]:
    """jobq.enqueue_many of payloads on queue default; their ids."""
    ids = scalar(db, "SELECT jobq.enqueue_many('default', %s::jsonb[])", ([Jsonb(p) for p in payloads],))
    assert isinstance(ids, list)
    return ids


def cancel(db: Db, job_id: int, *, force: bool = False) -> str:
    """jobq.cancel of one job; its status after the call."""
    status = scalar(db, "SELECT status FROM jobq.cancel(ARRAY[%s]::bigint[], force => %s)", (job_id, force))
    assert isinstance(status, str)
    return status


# Heartbeats 30 s apart, polls 30 s apart: neither explains what happens within a few seconds.
QUIET = WorkerSettings(lease_timeout=120, heartbeat_interval=30, poll_interval=30)


# -- results --------------------------------------------------------------------


def test_what_a_handler_returns_is_stored_as_its_jobs_result(db: Db, dsn: str, run_worker: RunWorker) -> None:
    payloads: list[dict[str, Any]] = [{"n": 1}, {"n": 2, "none": True}, {"n": 3, "list": True}]
    ids = enqueue_many(db, payloads)

    def handler(job: Job) -> object:
        if job.payload.get("none"):
            return None
        if job.payload.get("list"):
            return [job.payload["n"], "three"]
        return {"double": job.payload["n"] * 2}

    run_worker(dsn, handler, WorkerSettings(batch=3, poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 3}, timeout=30)
    results = [scalar(db, "SELECT result FROM jobq.job(%s)", (job_id,)) for job_id in ids]
    assert results == [{"double": 2}, None, [3, "three"]]


def test_a_result_json_cannot_encode_fails_the_job_with_an_error_naming_its_type(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {}, max_attempts=1)
    run_worker(dsn, lambda job: {"when": datetime.now(timezone.utc)}, WorkerSettings(poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"failed": 1}, timeout=30)
    row = job_row(db, job_id)
    assert row["result"] is None
    assert row["last_error"].startswith("InvalidArgument: the handler's result (a dict) is not serialisable")
    assert "datetime" in row["last_error"]


def test_a_result_the_database_refuses_fails_its_own_job_and_the_rest_of_the_batch_completes(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    small, huge = enqueue_many(db, [{"size": 10}, {"size": 2_000_000}])
    db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %s", (huge,))
    # over the database's 1 MiB limit of a result: refused by the acknowledgement, not here
    run_worker(dsn, lambda job: "x" * job.payload["size"], WorkerSettings(batch=2, poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 1, "failed": 1}, timeout=30)
    assert job_row(db, small)["result"] == "x" * 10
    refused = job_row(db, huge)
    assert refused["status"] == "failed" and refused["result"] is None
    assert refused["last_error"].startswith("PayloadTooLarge: ")


# -- cancel -------------------------------------------------------------------


def stop_on_cancel(started: threading.Event, saw: list[bool]) -> Callable[[Job], object]:
    """A handler that says it started, waits for its cancel request (30 s at most), and raises."""

    def handler(job: Job) -> None:
        started.set()
        saw.append(job.cancel_requested.wait(30))
        raise RuntimeError("stopped: cancel requested")

    return handler


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_running_handler_hears_a_cancel_request_by_notification_soon(
    db: Db, dsn: str, run_worker: RunWorker, concurrency: int
) -> None:
    job_id = enqueue(db)
    started, saw = threading.Event(), list[bool]()
    run_worker(dsn, stop_on_cancel(started, saw), replace(QUIET, concurrency=concurrency))
    assert started.wait(30)

    assert cancel(db, job_id) == "cancel_requested"

    # the next heartbeat is 30 s away: the notification told the worker
    assert wait_until(lambda: bool(saw), timeout=10)
    assert saw == [True]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_worker_that_does_not_listen_learns_of_a_cancel_request_at_its_next_heartbeat(
    db: Db, dsn: str, run_worker: RunWorker, concurrency: int
) -> None:
    job_id = enqueue(db)
    started, saw = threading.Event(), list[bool]()
    settings = WorkerSettings(
        concurrency=concurrency, listen=False, lease_timeout=30, heartbeat_interval=0.3, poll_interval=30
    )
    run_worker(dsn, stop_on_cancel(started, saw), settings)
    assert started.wait(30)

    assert cancel(db, job_id) == "cancel_requested"

    assert wait_until(lambda: bool(saw), timeout=10)
    assert saw == [True]


def test_a_cancel_request_whose_notification_was_missed_arrives_with_the_next_heartbeat(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db)
    started, saw = threading.Event(), list[bool]()
    settings = WorkerSettings(lease_timeout=30, heartbeat_interval=0.3, poll_interval=30)
    run_worker(dsn, stop_on_cancel(started, saw), settings)
    assert started.wait(30)
    # the worker's listening connection goes (it reconnects once the handler is over)
    gone = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE %s"
    assert scalar(db, gone, ("pgjobq listen %",)) == 1

    assert cancel(db, job_id) == "cancel_requested"  # its notification reaches nobody

    assert wait_until(lambda: bool(saw), timeout=10)
    assert saw == [True]
    assert wait_until(lambda: job_row(db, job_id)["status"] == "cancelled", timeout=10)


def test_a_handler_that_stops_after_a_cancel_request_leaves_its_job_cancelled_not_retried(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db)
    started, saw = threading.Event(), list[bool]()
    run_worker(dsn, stop_on_cancel(started, saw), QUIET)
    assert started.wait(30)

    cancel(db, job_id)

    assert wait_until(lambda: job_row(db, job_id)["status"] != "running", timeout=10)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["max_attempts"], row["finished"]) == ("cancelled", 1, 3, True)
    assert row["last_error"] == "RuntimeError: stopped: cancel requested"


def test_a_handler_that_returns_after_a_cancel_request_completes_its_job(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db)
    started = threading.Event()

    def handler(job: Job) -> object:
        started.set()
        return {"finished anyway": job.cancel_requested.wait(30)}

    run_worker(dsn, handler, QUIET)
    assert started.wait(30)

    cancel(db, job_id)

    assert wait_until(lambda: job_row(db, job_id)["status"] == "done", timeout=10)
    assert job_row(db, job_id)["result"] == {"finished anyway": True}


def test_a_claimed_job_cancelled_before_its_handler_starts_is_never_run(
    db: Db, dsn: str, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgjobq.worker")
    first, second = enqueue_many(db, [{}, {}])
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def handler(job: Job) -> None:
        ran.append(job.id)
        started.set()
        release.wait(30)

    # concurrency 1, both jobs in one batch: the second waits in the worker's hands
    run_worker(dsn, handler, replace(QUIET, batch=2))
    assert started.wait(30)
    assert statuses(db) == {"running": 2}

    assert cancel(db, second) == "cancel_requested"
    # heard while the first handler runs
    assert wait_until(lambda: f"job {second}: cancel requested" in caplog.text, timeout=10), caplog.text
    release.set()

    assert wait_until(lambda: statuses(db) == {"done": 1, "cancelled": 1}, timeout=10)
    assert ran == [first]
    assert job_row(db, second)["status"] == "cancelled"


def test_a_force_cancelled_jobs_late_completion_is_refused_and_the_worker_carries_on(
    db: Db, dsn: str, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgjobq.worker")
    job_id = enqueue(db)
    started, release = threading.Event(), threading.Event()
    saw: list[bool] = []

    def handler(job: Job) -> object:
        if job.id == job_id:  # ignores its cancel until the test lets it finish
            started.set()
            release.wait(30)
            saw.append(job.cancel_requested.is_set())
        return "finished"

    run_worker(dsn, handler, QUIET)
    assert started.wait(30)

    assert cancel(db, job_id, force=True) == "cancelled"
    assert wait_until(lambda: "cancel requested" in caplog.text, timeout=10), caplog.text
    release.set()
    later = enqueue(db)

    assert wait_until(lambda: job_row(db, later)["status"] == "done", timeout=30), caplog.text
    assert saw == [True]
    row = job_row(db, job_id)
    assert (row["status"], row["result"]) == ("cancelled", None)
    assert f"job {job_id}: lease 1 void" in caplog.text


# -- snooze and retry -----------------------------------------------------------------


def test_a_snoozed_job_runs_again_later_without_spending_an_attempt(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db, "default", {}, max_attempts=1)
    runs: list[int] = []

    def handler(job: Job) -> None:
        runs.append(job.attempts)
        if len(runs) == 1:
            raise pgjobq.Snooze(0.3)

    run_worker(dsn, handler, WorkerSettings(poll_interval=0.1))

    assert wait_until(lambda: job_row(db, job_id)["status"] == "done", timeout=30)
    row = job_row(db, job_id)
    assert (row["attempts"], row["lease"], row["last_error"]) == (1, 2, None)
    assert runs == [1, 1]


def test_retry_fails_the_attempt_and_retries_after_the_time_it_names(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    job_id = enqueue(db)

    def handler(job: Job) -> None:
        try:
            raise ConnectionError("the mail server said 421")
        except ConnectionError as exc:
            raise pgjobq.Retry(after=3600) from exc

    run_worker(dsn, handler, WorkerSettings(poll_interval=0.2))

    assert wait_until(lambda: job_row(db, job_id)["attempts"] == 1, timeout=30)
    assert wait_until(lambda: job_row(db, job_id)["status"] == "queued", timeout=10)
    row = job_row(db, job_id)
    assert (row["attempts"], row["last_error"]) == (1, "ConnectionError: the mail server said 421")
    # the queue's backoff after one attempt is 2 s: this is the handler's hour
    assert scalar(db, "SELECT run_at > now() + interval '50 minutes' FROM jobq.jobs WHERE id = %s", (job_id,))


# -- leases, timeouts, pause ---------------------------------------------------------


def test_a_worker_without_a_lease_timeout_claims_under_the_queues_and_heartbeats_by_it(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    db.execute("SELECT jobq.configure_queue('default', lease_timeout => '2 seconds')")
    job_id = enqueue(db)
    leases: list[bool] = []

    def handler(job: Job) -> None:
        leases.append(
            scalar(
                db,
                "SELECT lease_expires_at - locked_at = '2 seconds' FROM jobq.jobs WHERE id = %s",
                (job_id,),
            )
        )
        # longer than the lease: only heartbeats at a quarter of the queue's 2 s keep it
        threading.Event().wait(3.5)

    reaper = WorkerSettings(queue="other", reap_interval=0.2, poll_interval=0.2, name="reaper")
    run_worker(dsn, lambda job: None, reaper)
    run_worker(dsn, handler, WorkerSettings(poll_interval=0.2))

    assert wait_until(lambda: job_row(db, job_id)["status"] == "done", timeout=30)
    assert leases == [True]
    row = job_row(db, job_id)
    assert (row["attempts"], row["lease"], row["last_error"]) == (1, 1, None)


def test_a_heartbeat_interval_too_long_for_the_queues_lease_is_said_once_and_the_lease_kept(
    db: Db, dsn: str, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    db.execute("SELECT jobq.configure_queue('default', lease_timeout => '1 second')")
    ids = enqueue_many(db, [{}, {}])

    reaper = WorkerSettings(queue="other", reap_interval=0.2, poll_interval=0.2, name="reaper")
    run_worker(dsn, lambda job: None, reaper)
    run_worker(
        dsn, lambda job: threading.Event().wait(1.5), WorkerSettings(heartbeat_interval=5, poll_interval=0.2)
    )

    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=30), caplog.text
    assert [job_row(db, job_id)["attempts"] for job_id in ids] == [1, 1]
    assert caplog.text.count("heartbeat_interval (5 s) is not shorter than the 1 s leases") == 1


def test_a_running_worker_claims_nothing_from_a_paused_queue_and_resume_wakes_it(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    done = threading.Event()
    run_worker(dsn, lambda job: done.set(), WorkerSettings(poll_interval=0.2))
    db.execute("SELECT jobq.pause('default')")
    enqueue(db)

    assert not done.wait(1.5)  # seven polls
    assert statuses(db) == {"queued": 1}

    db.execute("SELECT jobq.resume('default')")

    assert wait_until(lambda: statuses(db) == {"done": 1}, timeout=10)


def test_resume_wakes_a_worker_long_before_its_next_poll(db: Db, dsn: str, run_worker: RunWorker) -> None:
    db.execute("SELECT jobq.pause('default')")
    enqueue(db)
    done = threading.Event()
    run_worker(dsn, lambda job: done.set(), WorkerSettings(poll_interval=30, name="sleeper"))
    assert wait_until(
        lambda: bool(scalar(db, "SELECT count(*) > 0 FROM jobq._waiters WHERE worker = 'sleeper'")),
        timeout=30,
    )

    db.execute("SELECT jobq.resume('default')")

    # polling would take 30 s: the resume's notification woke the worker
    assert done.wait(10)


def test_a_hanging_handler_past_its_queues_timeout_is_no_longer_heartbeated_and_is_reaped(
    db: Db, dsn: str, run_worker: RunWorker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    db.execute("SELECT jobq.configure_queue('default', timeout => '2 seconds')")
    job_id = enqueue(db, "default", {}, max_attempts=1)
    started, release = threading.Event(), threading.Event()
    # the ids of every heartbeat the worker sends (it runs on threads of this process)
    heartbeats: list[list[int]] = []
    real_run = client._run

    def recording(conn: Any, call: Call[Any]) -> Any:
        if call.name == "heartbeat_status":
            assert call.params is not None
            heartbeats.append(list(call.params["ids"]))
        return real_run(conn, call)

    monkeypatch.setattr(client, "_run", recording)

    def handler(job: Job) -> None:
        started.set()
        release.wait(60)

    # a 1 s lease, heartbeated every 0.25 s (by the keeper: the handler holds the worker's thread, so this
    # worker does not reap meanwhile, and nothing else does until the test says so)
    run_worker(dsn, handler, WorkerSettings(lease_timeout=1, poll_interval=0.2))
    assert started.wait(30)

    try:
        # the worker learns from a heartbeat that the deadline passed (the claim told it nothing)
        overdue = f"job {job_id} is past its deadline"
        assert wait_until(lambda: overdue in caplog.text, timeout=30), caplog.text
        sent = sum(ids.count(job_id) for ids in heartbeats)
        assert sent >= 2  # extended within the timeout, then the one that found it overdue
        # its lease, no longer extended, has run out, while the handler still hangs
        assert scalar(
            db,
            "SELECT status = 'running' AND lease_expires_at <= now() FROM jobq.jobs WHERE id = %s",
            (job_id,),
        )
        threading.Event().wait(1.0)  # four heartbeat intervals
        assert sum(ids.count(job_id) for ids in heartbeats) == sent  # no heartbeat since

        # the reaper (a scheduled reap, another worker) recovers it while the handler hangs
        reaped = db.execute("SELECT id, status FROM jobq.reap()").fetchall()
        assert reaped == [{"id": job_id, "status": "failed"}]
    finally:
        release.set()

    row = job_row(db, job_id)
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert "timed out at its deadline" in row["last_error"]
    # not at the end of its first 1 s lease: the heartbeats kept it until its deadline
    assert scalar(
        db,
        "SELECT j.finished_at >= d.deadline FROM jobq.jobs AS j JOIN jobq.deadlines AS d USING (id, lease)"
        " WHERE j.id = %s",
        (job_id,),
    )
    # the handler returned: its result is refused (the lease is gone), and the warning came once
    assert wait_until(lambda: f"job {job_id}: lease 1 lost" in caplog.text, timeout=30), caplog.text
    assert caplog.text.count(overdue) == 1


def test_a_job_shows_its_headers_to_its_handler_and_an_empty_dict_when_it_has_none(
    db: Db, dsn: str, run_worker: RunWorker
) -> None:
    with_headers = enqueue(db, "default", {}, headers=Jsonb({"trace": "abc"}))
    plain = enqueue(db)
    seen: dict[int, dict[str, Any]] = {}

    def handler(job: Job) -> None:
        seen[job.id] = job.headers

    run_worker(dsn, handler, WorkerSettings(batch=2, poll_interval=0.2))

    assert wait_until(lambda: statuses(db) == {"done": 2}, timeout=30)
    assert seen == {with_headers: {"trace": "abc"}, plain: {}}


def test_heartbeats_keep_a_job_longer_than_its_lease_within_its_queues_timeout(
    db: Db, dsn: str, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobq.worker")
    db.execute("SELECT jobq.configure_queue('default', timeout => '1 hour')")
    job_id = enqueue(db)

    reaper = WorkerSettings(queue="other", reap_interval=0.2, poll_interval=0.2, name="reaper")
    run_worker(dsn, lambda job: None, reaper)
    # three times its 1 s lease: only heartbeats, extended by the database within the hour, keep it
    run_worker(dsn, lambda job: threading.Event().wait(3), WorkerSettings(lease_timeout=1, poll_interval=0.2))

    assert wait_until(lambda: job_row(db, job_id)["status"] == "done", timeout=30), caplog.text
    row = job_row(db, job_id)
    assert (row["attempts"], row["lease"], row["last_error"]) == (1, 1, None)
    assert "past its deadline" not in caplog.text
    # the claim stored the deadline for the database's heartbeats, not for the worker
    assert scalar(db, "SELECT count(*) FROM jobq.deadlines WHERE id = %s AND lease = 1", (job_id,)) == 1


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), 10**12, "5", True, None])
def test_snooze_and_retry_refuse_a_delay_the_database_would_not_take(delay: Any) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="delay must be"):
        pgjobq.Snooze(delay)
    with pytest.raises(pgjobq.InvalidArgument, match="after must be"):
        pgjobq.Retry(after=delay)
