"""The Python client: enqueue on the caller's transaction, error mapping, the in-process Worker."""

from __future__ import annotations

import math
import re
import threading
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pgjobq
from pgjobq import Job, Worker, WorkerSettings

from helpers.sqlhelpers import Connect, Db, make_stale


def job_count(db: Db) -> int:
    row = db.execute("SELECT count(*) AS n FROM jobq.jobs").fetchone()
    assert row is not None
    return int(row["n"])


def test_every_named_statement_is_named_once() -> None:
    text = resources.files("pgjobq").joinpath("queries.sql").read_text(encoding="utf-8")
    names = re.findall(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)

    assert sorted(name for name in set(names) if names.count(name) > 1) == []


def test_enqueue_commits_with_the_callers_transaction(db: Db, connect: Connect) -> None:
    conn = connect(autocommit=False)
    conn.execute("CREATE TABLE orders (id int)")
    conn.execute("INSERT INTO orders VALUES (1)")
    job_id = pgjobq.enqueue(conn, "emails", {"order": 1})
    assert job_count(db) == 0  # not visible before the caller commits

    conn.commit()

    row = db.execute("SELECT queue, payload FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"queue": "emails", "payload": {"order": 1}}


def test_enqueue_rolled_back_with_the_callers_transaction_never_existed(db: Db, connect: Connect) -> None:
    conn = connect(autocommit=False)
    pgjobq.enqueue(conn, "emails", {"order": 1})
    pgjobq.enqueue_many(conn, "emails", [{"order": 2}, {"order": 3}])

    conn.rollback()

    assert job_count(db) == 0


def test_enqueue_options_are_stored(db: Db) -> None:
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    job_id = pgjobq.enqueue(db, "emails", {}, priority=7, run_at=run_at, max_attempts=5)

    row = db.execute(
        "SELECT priority, run_at, max_attempts FROM jobq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == {"priority": 7, "run_at": run_at, "max_attempts": 5}


def test_enqueue_many_returns_ids_in_payload_order(db: Db) -> None:
    payloads = [{"n": n} for n in (3, 1, 2)]

    ids = pgjobq.enqueue_many(db, "default", payloads)

    stored = [
        db.execute("SELECT payload FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone() for job_id in ids
    ]
    assert stored == [{"payload": p} for p in payloads]


@pytest.mark.parametrize(
    "payload",
    [
        {"when": datetime(2026, 1, 1)},
        {"blob": b"bytes"},
        {"thing": object()},
        {"ratio": math.nan},
        {"ratio": math.inf},
        ["not", "an", "object"],
    ],
    ids=["datetime", "bytes", "custom-object", "nan", "infinity", "list"],
)
def test_unserialisable_payload_is_refused_before_any_sql(db: Db, connect: Connect, payload: Any) -> None:
    conn = connect(autocommit=False)

    with pytest.raises(pgjobq.InvalidArgument, match="payload"):
        pgjobq.enqueue(conn, "default", payload)

    # no statement reached the server: the transaction was never even opened
    assert conn.info.transaction_status == TransactionStatus.IDLE
    assert job_count(db) == 0


def test_bad_queue_name_raises_invalid_argument_with_its_sqlstate(db: Db) -> None:
    with pytest.raises(pgjobq.InvalidArgument, match="queue must be") as raised:
        pgjobq.enqueue(db, "Emails!", {})

    assert raised.value.sqlstate == "22023"
    assert isinstance(raised.value.__cause__, psycopg.Error)


def test_oversized_payload_raises_payload_too_large(db: Db) -> None:
    with pytest.raises(pgjobq.PayloadTooLarge, match="1 MiB"):
        pgjobq.enqueue(db, "default", {"blob": "x" * (2 * 1024 * 1024)})


def test_stale_lease_raises_lease_lost(db: Db) -> None:
    pgjobq.enqueue(db, "default", {})
    (job,) = pgjobq.claim(db, "default", 1, "w1")
    make_stale(db, job.id, "1 hour")
    pgjobq.reap(db)
    db.execute("UPDATE jobq.jobs SET run_at = now()")
    (again,) = pgjobq.claim(db, "default", 1, "w2")

    with pytest.raises(pgjobq.LeaseLost) as raised:
        pgjobq.complete(db, job.id, job.lease)

    assert raised.value.sqlstate == "JQ001"
    pgjobq.complete(db, again.id, again.lease)


def test_unknown_job_raises_job_not_found(db: Db) -> None:
    with pytest.raises(pgjobq.JobNotFound):
        pgjobq.heartbeat(db, 424242, 1)


def test_claim_returns_jobs_with_their_lease(db: Db) -> None:
    pgjobq.enqueue(db, "default", {"n": 1}, max_attempts=4)

    (job,) = pgjobq.claim(db, "default", 5, "w1")

    assert (job.queue, job.payload, job.attempts, job.max_attempts, job.lease) == (
        "default",
        {"n": 1},
        1,
        4,
        1,
    )


def test_claim_claim_any_and_complete_and_claim_return_each_jobs_task(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}], task="send_welcome")
    pgjobq.enqueue(db, "default", {})
    (first,) = pgjobq.claim(db, "default", 1, "w1")
    (second,) = pgjobq.claim_any(db, ["default"], 1, "w1")

    _, (third,) = pgjobq.complete_and_claim(db, [(first.id, first.lease)], "default", 1, "w1")

    assert [job.task for job in (first, second, third)] == ["send_welcome", "send_welcome", None]


def test_complete_many_leaves_out_stale_leases(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    first, second = pgjobq.claim(db, "default", 2, "w1")

    accepted = pgjobq.complete_many(db, [(first.id, first.lease), (second.id, second.lease + 1)])

    assert accepted == {first.id}


def test_complete_and_claim_acknowledges_and_claims_in_one_call(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{"n": 1}, {"n": 2}, {"n": 3}])
    (first,) = pgjobq.claim(db, "default", 1, "w1")

    acknowledged, claimed = pgjobq.complete_and_claim(db, [(first.id, first.lease)], "default", 5, "w1")

    assert acknowledged == {first.id}
    assert [job.payload for job in claimed] == [{"n": 2}, {"n": 3}]
    assert {job.lease for job in claimed} == {1}


def test_complete_and_claim_leaves_out_a_stale_lease(db: Db) -> None:
    pgjobq.enqueue(db, "default", {})
    (job,) = pgjobq.claim(db, "default", 1, "w1")

    acknowledged, claimed = pgjobq.complete_and_claim(db, [(job.id, job.lease + 1)], "default", 1, "w1")

    assert (acknowledged, claimed) == (set(), [])


def test_register_waiter_registers_so_that_an_enqueue_notifies_the_queue(db: Db, connect: Connect) -> None:
    worker = connect()
    worker.execute("LISTEN jobq_default")

    assert pgjobq.register_waiter(worker, "default", "w", timedelta(minutes=1)) == (True, None)
    pgjobq.enqueue(db, "default", {})

    assert [n.channel for n in worker.notifies(timeout=5, stop_after=1)] == ["jobq_default"]


def test_register_waiter_tells_the_earliest_future_run_at_of_the_queue(db: Db) -> None:
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    pgjobq.enqueue(db, "default", {}, run_at=soon + timedelta(hours=1))
    pgjobq.enqueue(db, "default", {}, run_at=soon, priority=-5)
    pgjobq.enqueue(db, "other", {}, run_at=soon - timedelta(minutes=30))
    pgjobq.enqueue(db, "default", {})  # runnable now: not in the future

    assert pgjobq.register_waiter(db, "default", "w", timedelta(seconds=1)) == (True, soon)


def test_register_waiter_is_refused_for_the_moment_while_a_producer_of_the_queue_is_in_flight(
    db: Db, connect: Connect
) -> None:
    producer = connect(autocommit=False)
    pgjobq.enqueue(producer, "default", {})

    registered, _ = pgjobq.register_waiter(db, "default", "w", timedelta(seconds=1))
    producer.commit()

    assert registered is False
    assert pgjobq.register_waiter(db, "default", "w", timedelta(seconds=1))[0] is True


def test_purge_deletes_old_finished_jobs_and_returns_how_many(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    for job in pgjobq.claim(db, "default", 2, "w1"):
        pgjobq.complete(db, job.id, job.lease)

    kept = pgjobq.purge(db, timedelta(hours=1))
    deleted = pgjobq.purge(db, timedelta(0))

    assert (kept, deleted) == (0, 2)


def test_purge_refuses_a_negative_age_before_any_sql(connect: Connect) -> None:
    conn = connect(autocommit=False)

    with pytest.raises(pgjobq.InvalidArgument, match="older_than") as raised:
        pgjobq.purge(conn, timedelta(seconds=-1))

    assert raised.value.sqlstate is None  # refused here, not by the database
    # no statement reached the server: the transaction was never even opened
    assert conn.info.transaction_status == TransactionStatus.IDLE


def test_health_reports_the_queue_and_the_table(db: Db) -> None:
    pgjobq.enqueue_many(db, "default", [{}, {}])
    pgjobq.claim(db, "default", 1, "w1")

    report = pgjobq.health(db)

    assert (report.queued, report.runnable, report.running, report.failed) == (1, 1, 1, 0)
    assert report.total_bytes > 0


def test_stats_reports_each_queue(db: Db) -> None:
    pgjobq.enqueue_many(db, "emails", [{}, {}])
    pgjobq.claim(db, "emails", 1, "w1")

    (emails,) = pgjobq.stats(db)

    assert (emails.queue, emails.queued, emails.running, emails.done) == ("emails", 1, 1, 0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"batch": 0}, "batch"),
        ({"batch": 5000}, "batch"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"lease_timeout": 10, "heartbeat_interval": 20}, "heartbeat_interval"),
        ({"lease_timeout": -1}, "lease_timeout"),
        ({"name": ""}, "name"),
    ],
    ids=[
        "concurrency-0",
        "batch-0",
        "batch-huge",
        "poll-0",
        "heartbeat-longer-than-lease",
        "negative-lease",
        "no-name",
    ],
)
def test_nonsense_worker_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(pgjobq.ConfigurationError, match=message):
        WorkerSettings(**settings)


def run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    return thread


def test_worker_in_process_completes_jobs_and_stops_on_request(db: Db, dsn: str) -> None:
    pgjobq.enqueue_many(db, "default", [{"n": n} for n in range(20)])
    seen: list[int] = []
    all_seen = threading.Event()

    def handler(job: Job) -> None:
        seen.append(job.payload["n"])
        if len(seen) == 20:
            all_seen.set()

    worker = Worker(dsn, handler, WorkerSettings(batch=7, concurrency=3, poll_interval=0.1))
    thread = run_in_thread(worker)
    assert all_seen.wait(30)
    worker.stop()
    thread.join(30)

    assert not thread.is_alive()
    assert sorted(seen) == list(range(20))
    assert db.execute("SELECT count(*) AS n FROM jobq.jobs WHERE status = 'done'").fetchone() == {"n": 20}


def test_handler_raising_system_exit_fails_its_job_not_the_worker(db: Db, dsn: str) -> None:
    pgjobq.enqueue_many(db, "default", [{"exit": True}, {"exit": False}], max_attempts=1)

    def handler(job: Job) -> None:
        if job.payload["exit"]:
            raise SystemExit(3)

    worker = Worker(dsn, handler, WorkerSettings(burst=True, poll_interval=0.1))
    thread = run_in_thread(worker)
    thread.join(30)

    assert not thread.is_alive()
    rows = db.execute("SELECT payload, status, last_error FROM jobq.jobs ORDER BY id").fetchall()
    assert rows == [
        {"payload": {"exit": True}, "status": "failed", "last_error": "SystemExit: 3"},
        {"payload": {"exit": False}, "status": "done", "last_error": None},
    ]


def test_worker_hands_its_handler_each_payload_as_json_reads_it_back(db: Db, dsn: str) -> None:
    payloads: list[dict[str, Any]] = [
        {"beyond_64_bits": 2**70, "negative": -(2**63) - 1},  # orjson, when installed, refuses these
        {"float": 0.1, "tiny": 5e-324, "exponent": 1.5e300, "integral_float": 2.0},
        {"long_decimal": 123456789.12345678, "int64": 2**63 - 1, "digits_in_text": "1234567890123456789"},
        {"text": "Grüße, 日本, \U0001f600", "escapes": 'quote " backslash \\ tab \t'},
        {"nested": {"list": [1, [2, [3, {}]], None, True, False], "empty": []}},
        {},
    ]
    for payload in payloads:
        pgjobq.enqueue(db, "default", payload)
    received: list[dict[str, Any]] = []

    worker = Worker(dsn, lambda job: received.append(job.payload), WorkerSettings(burst=True, batch=10))
    run_in_thread(worker).join(30)

    # what jsonb stores, read back by the json module, whatever parser the worker uses
    stored = [row["payload"] for row in db.execute("SELECT payload FROM jobq.jobs ORDER BY id").fetchall()]
    assert received == stored
    assert received[0] == payloads[0] and received[3:5] == payloads[3:5]
