"""Bad input on the client side: refused cleanly, named, and changing nothing.

Three tables:

- calls of the client API with a bad argument: each raises its pgjobq
  exception with a message naming the argument, and leaves jobq.jobs as it
  was without a notification.  Arguments Python can judge (types, payloads
  jsonb cannot store) are refused before any SQL: the connection, not in
  autocommit, has not even opened a transaction;
- nonsense worker settings: ConfigurationError at construction;
- the same nonsense given to ``pgjobq worker``: one line, exit 1, and no
  attempt to reach the (unreachable) database.

The worker processes under bad conditions are in tests/worker/test_worker_bad_conditions.py.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq import WorkerSettings

from helpers.processes import run_cli
from helpers.sqlhelpers import Connect, make_stale

Conn = psycopg.Connection[Any]

MIB = 1024 * 1024


# -- the client API -----------------------------------------------------------


@pytest.fixture(scope="module")
def shared_dsn(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """One database with pgjobq for every case of the table.

    Sharing is sound here because every case asserts that it changed nothing;
    cloning a database per case would cost a second each.
    """
    dbname = f"jobq_bad_input_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        try:
            with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pgjobq")
            yield pg_server.dsn(dbname)
        finally:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


@pytest.fixture
def shared(shared_dsn: str) -> Iterator[Connect]:
    """Opens connections to the shared database; closes them afterwards."""
    opened: list[Conn] = []

    def connect(**kwargs: Any) -> Conn:
        kwargs.setdefault("autocommit", True)
        opened.append(psycopg.connect(shared_dsn, **kwargs))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()


@dataclass(frozen=True)
class Jobs:
    """The jobs every case starts with: one queued, one running under a second lease, one done."""

    queued: int
    running: int  # lease 2: lease 1 went stale and was reaped
    done: int  # lease 1


@pytest.fixture
def jobs(shared: Connect) -> Jobs:
    db = shared()
    db.execute("TRUNCATE jobq.jobs")
    queued = pgjobq.enqueue(db, "default", {"n": 1}, priority=-1)  # claimed last: stays queued
    running, done = pgjobq.enqueue_many(db, "default", [{"n": 2}, {"n": 3}])
    assert {job.id for job in pgjobq.claim(db, "default", 2, "w1")} == {running, done}
    pgjobq.complete(db, done, 1)
    make_stale(db, running, "1 hour")
    pgjobq.reap(db)
    db.execute("UPDATE jobq.jobs SET run_at = now() WHERE id = %s", (running,))
    (again,) = pgjobq.claim(db, "default", 1, "w2")
    assert (again.id, again.lease) == (running, 2)
    return Jobs(queued, running, done)


Call = Callable[[Conn, Jobs], object]


@dataclass(frozen=True)
class Case:
    call: Call
    error: type[pgjobq.Error]
    names: str  # the message must contain this: the bad argument's name
    before_sql: bool  # refused by Python: no statement at all


def local(call: Call, names: str, error: type[pgjobq.Error] = pgjobq.InvalidArgument) -> Case:
    return Case(call, error, names, before_sql=True)


def remote(call: Call, names: str, error: type[pgjobq.Error] = pgjobq.InvalidArgument) -> Case:
    return Case(call, error, names, before_sql=False)


class Opaque:
    """An object json knows nothing about."""


def circular() -> dict[str, Any]:
    payload: dict[str, Any] = {}
    payload["self"] = payload
    return payload


def enqueue(payload: Any, **options: Any) -> Call:
    return lambda conn, _: pgjobq.enqueue(conn, "default", payload, **options)


def enqueue_to(queue: str) -> Call:
    return lambda conn, _: pgjobq.enqueue(conn, queue, {})


def bad(value: object) -> Any:
    """value, typed Any: these calls pass the wrong type on purpose."""
    return value


NAIVE = datetime(2030, 1, 1, 12, 0)
AWARE = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)

CASES: dict[str, Case] = {
    # payloads json cannot encode, or jsonb cannot store unchanged
    "datetime": local(enqueue({"when": AWARE}), "payload is not serialisable"),
    "bytes": local(enqueue({"blob": b"\x00\x01"}), "payload is not serialisable"),
    "custom-object": local(enqueue({"thing": Opaque()}), "payload is not serialisable"),
    "set": local(enqueue({"tags": {"a", "b"}}), "payload is not serialisable"),
    "nan": local(enqueue({"ratio": math.nan}), "payload is not serialisable"),
    "infinity": local(enqueue({"ratio": -math.inf}), "payload is not serialisable"),
    "nested-nan": local(enqueue({"a": [1, {"b": math.inf}]}), "payload is not serialisable"),
    "circular": local(enqueue(circular()), "payload is not serialisable"),
    # json would turn 1 into "1" (and may then hold "1" twice): refused, not coerced
    "int-key": local(enqueue({1: "one"}), "payload has a key"),
    "nested-none-key": local(enqueue({"a": [{None: 1}]}), "payload['a'][0]"),
    "nul-in-value": local(enqueue({"text": "a\u0000b"}), "payload['text']"),
    "nul-in-key": local(enqueue({"a\u0000": 1}), "a key of payload"),
    "lone-surrogate": local(enqueue({"text": "\ud800"}), "payload['text']"),
    "list-payload": local(enqueue(["not", "an", "object"]), "payload must be a mapping"),
    "string-payload": local(enqueue('{"looks": "like json"}'), "payload must be a mapping"),
    "none-payload": local(enqueue(None), "payload must be a mapping"),
    # arguments of a type no jobq function takes
    "queue-not-a-string": local(lambda c, _: pgjobq.enqueue(c, bad(7), {}), "queue must be"),
    "queue-none": local(lambda c, _: pgjobq.enqueue(c, bad(None), {}), "queue must be"),
    "priority-float": local(enqueue({}, priority=1.5), "priority must be"),
    "priority-bool": local(enqueue({}, priority=True), "priority must be"),
    "priority-beyond-32-bits": local(enqueue({}, priority=2**40), "priority must be"),
    "max-attempts-string": local(enqueue({}, max_attempts="3"), "max_attempts must be"),
    "run-at-naive": local(enqueue({}, run_at=NAIVE), "run_at must be"),
    "run-at-string": local(enqueue({}, run_at="tomorrow"), "run_at must be"),
    "enqueue-many-one-bad": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{"n": 1}, {"when": AWARE}, {"n": 3}]), "payloads[2]"
    ),
    "enqueue-many-one-nul": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{"n": 1}, {"n": 2}, {"s": "\u0000"}]), "payloads[3]"
    ),
    "enqueue-many-a-mapping": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", bad({"n": 1})), "payloads must be"
    ),
    "claim-n-float": local(lambda c, _: pgjobq.claim(c, "default", bad(2.5), "w"), "n must be"),
    "claim-lease-timeout-seconds": local(
        lambda c, _: pgjobq.claim(c, "default", 1, "w", lease_timeout=bad(60)), "lease_timeout must be"
    ),
    "complete-id-string": local(lambda c, j: pgjobq.complete(c, bad(str(j.running)), 2), "id must be"),
    "heartbeat-lease-none": local(lambda c, j: pgjobq.heartbeat(c, j.running, bad(None)), "lease must be"),
    "fail-error-none": local(lambda c, j: pgjobq.fail(c, j.running, bad(None), 2), "error must be"),
    "wait-up-to-seconds": local(
        lambda c, _: pgjobq.register_waiter(c, "default", "w", bad(1.0)), "up_to must be"
    ),
    "wait-worker-none": local(
        lambda c, _: pgjobq.register_waiter(c, "default", bad(None), timedelta(seconds=1)), "worker must be"
    ),
    "reap-zero": local(lambda c, _: pgjobq.reap(c, timedelta(0)), "stale must be"),
    # 0.6.0's arguments
    "unique-key-int": local(enqueue({}, unique_key=5), "unique_key must be"),
    "unique-scope-none": local(enqueue({}, unique_scope=None), "unique_scope must be"),
    "on-conflict-none": local(enqueue({}, on_conflict=None), "on_conflict must be"),
    "headers-list": local(enqueue({}, headers=["a"]), "headers must be a mapping"),
    "headers-datetime": local(enqueue({}, headers={"at": AWARE}), "headers is not serialisable"),
    "headers-nul": local(enqueue({}, headers={"a": "\u0000"}), "headers['a']"),
    "max-attempts-float": local(enqueue({}, max_attempts=2.0), "max_attempts must be"),
    "unique-keys-a-string": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}], unique_keys=bad("k")), "unique_keys must be"
    ),
    "unique-keys-an-int": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}], unique_keys=bad([1])), "unique_keys[] must be"
    ),
    "enqueue-many-headers-list": local(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}], headers=bad([])), "headers must be a mapping"
    ),
    "result-opaque": local(
        lambda c, j: pgjobq.complete(c, j.running, 2, result=Opaque()), "result is not serialisable"
    ),
    "result-nan": local(lambda c, j: pgjobq.complete(c, j.running, 2, result=math.nan), "result is not"),
    "results-one-bad": local(
        lambda c, j: pgjobq.complete_many(c, [(j.running, 2)], results=[{"at": AWARE}]), "results[1]"
    ),
    "results-a-string": local(
        lambda c, j: pgjobq.complete_many(c, [(j.running, 2)], results=bad("x")), "results must be"
    ),
    "retry-in-seconds": local(
        lambda c, j: pgjobq.fail(c, j.running, "boom", 2, retry_in=bad(5)), "retry_in must be"
    ),
    "snooze-delay-seconds": local(lambda c, j: pgjobq.snooze(c, j.running, 2, bad(5)), "delay must be"),
    "snooze-lease-string": local(
        lambda c, j: pgjobq.snooze(c, j.running, bad("2"), timedelta(0)), "lease must be"
    ),
    "cancel-ids-a-string": local(lambda c, _: pgjobq.cancel(c, bad("12")), "ids must be"),
    "cancel-ids-an-int": local(lambda c, j: pgjobq.cancel(c, bad(j.queued)), "ids must be"),
    "cancel-id-float": local(lambda c, _: pgjobq.cancel(c, bad([1.5])), "ids[] must be"),
    "cancel-force-string": local(
        lambda c, j: pgjobq.cancel(c, [j.queued], force=bad("yes")), "force must be"
    ),
    "pause-queue-none": local(lambda c, _: pgjobq.pause(c, bad(None)), "queue must be"),
    "resume-queue-int": local(lambda c, _: pgjobq.resume(c, bad(1)), "queue must be"),
    "configure-jitter-string": local(
        lambda c, _: pgjobq.configure_queue(c, "default", backoff_jitter=bad("0.5")), "backoff_jitter must be"
    ),
    "configure-timeout-seconds": local(
        lambda c, _: pgjobq.configure_queue(c, "default", timeout=bad(5)), "timeout must be"
    ),
    "configure-unset-a-string": local(
        lambda c, _: pgjobq.configure_queue(c, "default", unset=bad("timeout")), "unset must be"
    ),
    "configure-max-attempts-bool": local(
        lambda c, _: pgjobq.configure_queue(c, "default", max_attempts=bad(True)), "max_attempts must be"
    ),
    "job-id-string": local(lambda c, j: pgjobq.job(c, bad(str(j.queued))), "id must be"),
    "watch-id-none": local(lambda c, _: pgjobq.watch(c, bad(None)), "id must be"),
    "wait-id-string": local(lambda c, j: pgjobq.wait(c, bad(str(j.queued)), timedelta(0)), "id must be"),
    "wait-timeout-seconds": local(lambda c, j: pgjobq.wait(c, j.queued, bad(5)), "timeout must be"),
    "wait-timeout-negative": local(
        lambda c, j: pgjobq.wait(c, j.queued, timedelta(seconds=-1)), "timeout must not be negative"
    ),
    "reap-negative": local(lambda c, _: pgjobq.reap(c, timedelta(seconds=-5)), "stale must be"),
    # values only the database judges
    "queue-empty": remote(enqueue_to(""), "queue must be"),
    "queue-upper-case": remote(enqueue_to("Emails"), "queue must be"),
    "queue-too-long": remote(enqueue_to("q" * 59), "queue must be"),
    "queue-injection": remote(enqueue_to("x'; DROP TABLE jobq.jobs; --"), "queue must be"),
    "payload-too-large": remote(
        enqueue({"blob": "x" * (2 * MIB)}), "payload must be at most 1 MiB", pgjobq.PayloadTooLarge
    ),
    "enqueue-many-one-too-large": remote(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}, {"blob": "x" * (2 * MIB)}]),
        "payloads[2]",
        pgjobq.PayloadTooLarge,
    ),
    "max-attempts-zero": remote(enqueue({}, max_attempts=0), "max_attempts must be"),
    "claim-n-zero": remote(lambda c, _: pgjobq.claim(c, "default", 0, "w"), "n must be"),
    "wait-up-to-zero": remote(
        lambda c, _: pgjobq.register_waiter(c, "default", "w", timedelta(0)), "up_to must be"
    ),
    "wait-bad-queue": remote(
        lambda c, _: pgjobq.register_waiter(c, "Bad-Queue", "w", timedelta(seconds=1)), "queue must"
    ),
    "unique-scope-unknown": remote(enqueue({}, unique_key="k", unique_scope="forever"), "unique_scope"),
    "on-conflict-unknown": remote(enqueue({}, unique_key="k", on_conflict="ignore"), "on_conflict"),
    "on-conflict-without-a-unique-key": remote(
        enqueue({}, on_conflict="skip"), "on_conflict needs unique_key,"
    ),
    "unique-scope-without-unique-keys": remote(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}], unique_scope="until_done"),
        "unique_scope needs unique_keys",
    ),
    "configure-backoff-base-above-backoff-max": remote(
        lambda c, _: pgjobq.configure_queue(
            c, "default", backoff_base=timedelta(minutes=2), backoff_max=timedelta(minutes=1)
        ),
        "backoff_base must be at most backoff_max",
    ),
    "unique-key-empty": remote(enqueue({}, unique_key=""), "unique_key"),
    "unique-key-too-long": remote(enqueue({}, unique_key="k" * 513), "unique_key"),
    "configure-timeout-zero": remote(
        lambda c, _: pgjobq.configure_queue(c, "default", timeout=timedelta(0)), "timeout must be"
    ),
    "configure-timeout-over-30-days": remote(
        lambda c, _: pgjobq.configure_queue(c, "default", timeout=timedelta(days=31)), "timeout must be"
    ),
    "headers-too-large": remote(
        enqueue({}, headers={"blob": "x" * (2 * MIB)}), "headers", pgjobq.PayloadTooLarge
    ),
    "unique-keys-fewer-than-payloads": remote(
        lambda c, _: pgjobq.enqueue_many(c, "default", [{}, {}], unique_keys=["a"]), "unique_keys"
    ),
    "result-too-large": remote(
        lambda c, j: pgjobq.complete(c, j.running, 2, result="x" * (2 * MIB)),
        "result",
        pgjobq.PayloadTooLarge,
    ),
    "retry-in-negative": remote(
        lambda c, j: pgjobq.fail(c, j.running, "boom", 2, retry_in=timedelta(seconds=-1)), "retry_in"
    ),
    "snooze-delay-negative": remote(
        lambda c, j: pgjobq.snooze(c, j.running, 2, timedelta(seconds=-1)), "delay"
    ),
    "snooze-stale-lease": remote(
        lambda c, j: pgjobq.snooze(c, j.running, 1, timedelta(0)), "lease 1 of job", pgjobq.LeaseLost
    ),
    "snooze-unknown-id": remote(
        lambda c, _: pgjobq.snooze(c, 424242, 1, timedelta(0)), "424242", pgjobq.JobNotFound
    ),
    "configure-max-attempts-zero": remote(
        lambda c, _: pgjobq.configure_queue(c, "default", max_attempts=0), "max_attempts"
    ),
    "configure-backoff-base-negative": remote(
        lambda c, _: pgjobq.configure_queue(c, "default", backoff_base=timedelta(seconds=-1)), "backoff_base"
    ),
    "configure-unset-unknown": remote(
        lambda c, _: pgjobq.configure_queue(c, "default", unset=["colour"]), "unset"
    ),
    "configure-bad-queue": remote(lambda c, _: pgjobq.configure_queue(c, "Bad-Queue"), "queue must"),
    "pause-bad-queue": remote(lambda c, _: pgjobq.pause(c, "Bad-Queue"), "queue must"),
    "job-unknown-id": remote(lambda c, _: pgjobq.job(c, 424242), "424242", pgjobq.JobNotFound),
    "watch-unknown-id": remote(lambda c, _: pgjobq.watch(c, 424242), "424242", pgjobq.JobNotFound),
    "claim-lease-timeout-zero": remote(
        lambda c, _: pgjobq.claim(c, "default", 1, "w", lease_timeout=timedelta(0)), "lease_timeout must be"
    ),
    "complete-and-claim-lease-timeout-over-a-day": remote(
        lambda c, _: pgjobq.complete_and_claim(c, [], "default", 1, "w", lease_timeout=timedelta(days=2)),
        "lease_timeout must be",
    ),
    # leases: unknown jobs, stale leases, never-claimed and finished jobs
    "complete-unknown-id": remote(
        lambda c, _: pgjobq.complete(c, 424242, 1), "id 424242", pgjobq.JobNotFound
    ),
    "fail-unknown-id": remote(
        lambda c, _: pgjobq.fail(c, 424242, "boom", 1), "id 424242", pgjobq.JobNotFound
    ),
    "heartbeat-unknown-id": remote(
        lambda c, _: pgjobq.heartbeat(c, 424242, 1), "id 424242", pgjobq.JobNotFound
    ),
    "complete-stale-lease": remote(
        lambda c, j: pgjobq.complete(c, j.running, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "fail-stale-lease": remote(
        lambda c, j: pgjobq.fail(c, j.running, "boom", 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "heartbeat-stale-lease": remote(
        lambda c, j: pgjobq.heartbeat(c, j.running, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "complete-never-claimed": remote(
        lambda c, j: pgjobq.complete(c, j.queued, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "fail-after-complete": remote(
        lambda c, j: pgjobq.fail(c, j.done, "late", 1), "lease 1 of job", pgjobq.LeaseLost
    ),
    "heartbeat-after-complete": remote(
        lambda c, j: pgjobq.heartbeat(c, j.done, 1), "lease 1 of job", pgjobq.LeaseLost
    ),
}


def snapshot(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT * FROM jobq.jobs ORDER BY id").fetchall()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_client_call_is_refused_with_its_exception_and_changes_nothing(
    shared: Connect, jobs: Jobs, case: Case
) -> None:
    observer = shared()
    observer.execute("LISTEN jobq_default")
    before = snapshot(observer)
    conn = shared(autocommit=not case.before_sql)

    with pytest.raises(pgjobq.Error) as raised:
        case.call(conn, jobs)

    assert type(raised.value) is case.error
    assert case.names in str(raised.value)
    if case.before_sql:
        # any statement would have opened a transaction
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert raised.value.sqlstate is None
    else:
        assert raised.value.sqlstate is not None
        assert isinstance(raised.value.__cause__, psycopg.Error)
    assert snapshot(observer) == before
    assert list(observer.notifies(timeout=0.2)) == []


# -- worker settings ----------------------------------------------------------

SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "concurrency-0": ({"concurrency": 0}, "concurrency must be between 1 and 1000"),
    "concurrency-fractional": ({"concurrency": 1.5}, "concurrency must be an integer"),
    "batch-0": ({"batch": 0}, "batch must be between 1 and 1000"),
    "batch-huge": ({"batch": 10**6}, "batch must be between 1 and 1000"),
    "poll-negative": ({"poll_interval": -1}, "poll_interval must be positive"),
    "poll-nan": ({"poll_interval": math.nan}, "poll_interval must be positive"),
    "poll-infinite": ({"poll_interval": math.inf}, "poll_interval must be positive"),
    "lease-0": ({"lease_timeout": 0}, "lease_timeout must be positive"),
    "heartbeat-equal-to-lease": ({"lease_timeout": 10, "heartbeat_interval": 10}, "heartbeat_interval (10)"),
    "heartbeat-longer-than-lease": (
        {"lease_timeout": 10, "heartbeat_interval": 20},
        "heartbeat_interval (20)",
    ),
    "heartbeat-0": ({"heartbeat_interval": 0}, "heartbeat_interval must be positive"),
    "reap-0": ({"reap_interval": 0}, "reap_interval must be positive"),
    "reconnect-delay-negative": ({"reconnect_delay_max": -1}, "reconnect_delay_max must be positive"),
    "network-timeout-1": ({"network_timeout": 1}, "network_timeout must be between 2 and 3600 seconds"),
    "network-timeout-nan": ({"network_timeout": math.nan}, "network_timeout must be between 2 and 3600"),
    "network-timeout-bool": ({"network_timeout": True}, "network_timeout must be between 2 and 3600"),
    "network-timeout-day": ({"network_timeout": 86400}, "network_timeout must be between 2 and 3600"),
    "ack-negative": ({"ack_interval": -0.1}, "ack_interval must be at least 0"),
    "name-empty": ({"name": ""}, "name must be 1 to 200 characters"),
    "name-too-long": ({"name": "w" * 201}, "name must be 1 to 200 characters"),
    "queue-not-a-string": ({"queue": 7}, "queue must be a string"),
}


@pytest.mark.parametrize(("settings", "message"), SETTINGS.values(), ids=SETTINGS.keys())
def test_nonsense_worker_setting_is_refused_at_construction(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(pgjobq.ConfigurationError) as raised:
        WorkerSettings(**settings)

    assert message in str(raised.value)


UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=2"

CLI_SETTINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "concurrency-0": (("--concurrency", "0"), "concurrency must be between 1 and 1000"),
    "batch-0": (("--batch", "0"), "batch must be between 1 and 1000"),
    "poll-negative": (("--poll-interval", "-1"), "poll_interval must be positive"),
    "heartbeat-not-shorter-than-lease": (
        ("--lease-timeout", "10", "--heartbeat-interval", "10"),
        "heartbeat_interval (10.0) must be shorter than lease_timeout (10.0)",
    ),
    "reap-0": (("--reap-interval", "0"), "reap_interval must be positive"),
    "reconnect-delay-0": (("--reconnect-delay-max", "0"), "reconnect_delay_max must be positive"),
    "network-timeout-1": (("--network-timeout", "1"), "network_timeout must be between 2 and 3600 seconds"),
}


@pytest.mark.parametrize(("args", "message"), CLI_SETTINGS.values(), ids=CLI_SETTINGS.keys())
def test_worker_command_with_nonsense_setting_prints_one_line_and_exits_1(
    args: tuple[str, ...], message: str
) -> None:
    # The database is unreachable: a worker that got as far as connecting
    # would retry for ever instead of exiting.
    result = run_cli(UNREACHABLE, "worker", "helpers.handlers:record", *args, timeout=30)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.stderr
