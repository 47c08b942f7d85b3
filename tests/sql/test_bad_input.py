"""Bad arguments to every function of the SQL API: the SQLSTATE, a message naming the argument, no change.

The cases run against one database per module, cloned from the session's template and seeded with jobs in
every state: queued, delayed, waiting for a retry, running under a live lease (and watched), running under a
day-old lease that took over from an earlier one, done and failed, and one configured queue.  So "nothing
changed" means something: after each refused call every column of every row of jobq.jobs and of
jobq.queue_settings, and the id sequence, are as before, and a connection listening on the channels of the
queues involved, and on "jobq.done", heard nothing.  Each call runs in autocommit, its own
transaction, because a notification is only delivered at commit.

The same table runs again under a hostile search_path, against a second database whose public schema holds
look-alikes of the functions and operators that jobq's checks use: on the machine's own major, fresh and
upgraded (every function pins its search_path, whatever the major; the table itself runs on every major).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from throwaway_pg import ThrowawayPostgres

from helpers.sqlhelpers import (
    Connect,
    Db,
    JobsSnapshot,
    claim_one,
    enqueue,
    jobs_snapshot,
    listen_to_queues,
    make_runnable,
    make_stale,
    notifications_before_marker,
    queued_rows_unlocked,
    record_notices,
)

# ---------------------------------------------------------------------------------------------------------
# The seeded jobs, and references to them that a case resolves when it runs (no case depends on an id)
# ---------------------------------------------------------------------------------------------------------


class Ref(NamedTuple):
    """The id or lease (plus offset) of the seeded job whose payload is {"seed": seed}."""

    seed: str
    column: str
    offset: int = 0


def id_of(seed: str) -> Ref:
    return Ref(seed, "id")


def lease_of(seed: str, offset: int = 0) -> Ref:
    return Ref(seed, "lease", offset)


def resolve(conn: Db, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """params with every Ref replaced by its value; None for no parameters."""
    resolved = []
    for param in params:
        if isinstance(param, Ref):
            row = conn.execute(
                "SELECT id, lease FROM jobq.jobs WHERE payload ->> 'seed' = %s", (param.seed,)
            ).fetchone()
            assert row is not None, f"no seeded job {param.seed!r}"
            param = row[param.column] + param.offset
        resolved.append(param)
    return tuple(resolved) or None


def seed_jobs(conn: Db) -> None:
    """Jobs in every state, each tagged {"seed": <name>}; each claimed job is claimed as soon as enqueued."""

    def claim_new(name: str, **options: Any) -> dict[str, Any]:
        job_id = enqueue(conn, "default", {"seed": name}, **options)
        claimed = claim_one(conn, "default", "seed-worker")
        assert claimed["id"] == job_id
        return claimed

    done = claim_new("done")
    conn.execute("SELECT jobq.complete(%s, %s)", (done["id"], done["lease"]))
    failed = claim_new("failed", max_attempts=1)
    conn.execute("SELECT jobq.fail(%s, 'boom', %s)", (failed["id"], failed["lease"]))
    # running under its second lease, the first lost to a failure; the second one a day old
    taken_over = claim_new("running_stale")
    conn.execute("SELECT jobq.fail(%s, 'first attempt', %s)", (taken_over["id"], taken_over["lease"]))
    make_runnable(conn, taken_over["id"])
    assert claim_one(conn, "default", "seed-worker")["id"] == taken_over["id"]
    make_stale(conn, taken_over["id"], "1 day")
    # queued again after a failure, its retry an hour away
    retrying = claim_new("retrying")
    conn.execute("SELECT jobq.fail(%s, 'try again', %s)", (retrying["id"], retrying["lease"]))
    conn.execute("UPDATE jobq.jobs SET run_at = now() + interval '1 hour' WHERE id = %s", (retrying["id"],))
    running = claim_new("running")
    conn.execute("SELECT jobq.watch(%s)", (running["id"],))  # finishing it would notify "jobq.done"
    for n in (1, 2, 3):
        enqueue(conn, "default", {"seed": f"queued_{n}"})
    enqueue(conn, "default", {"seed": "urgent"}, priority=10)
    enqueue(conn, "default", {"seed": "delayed"}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    enqueue(conn, "emails", {"seed": "emails_1"})
    enqueue(conn, "emails", {"seed": "emails_2"})

    conn.execute("SELECT jobq.configure_queue('emails', max_attempts => 5, lease_timeout => '2 minutes')")

    states = conn.execute("SELECT payload ->> 'seed', status, lease FROM jobq.jobs ORDER BY id").fetchall()
    assert [tuple(state.values()) for state in states] == [
        ("done", "done", 1),
        ("failed", "failed", 1),
        ("running_stale", "running", 2),
        ("retrying", "queued", 1),
        ("running", "running", 1),
        ("queued_1", "queued", 0),
        ("queued_2", "queued", 0),
        ("queued_3", "queued", 0),
        ("urgent", "queued", 0),
        ("delayed", "queued", 0),
        ("emails_1", "queued", 0),
        ("emails_2", "queued", 0),
    ]


# ---------------------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------------------


class Case(NamedTuple):
    query: str
    params: tuple[Any, ...]
    sqlstate: str
    argument: str


def case(case_id: str, query: str, sqlstate: str, argument: str, *params: Any) -> Any:
    return pytest.param(Case(query, params, sqlstate, argument), id=case_id)


UNKNOWN_ID = 2**62
OVER_1_MIB = Jsonb({"data": "x" * (1024 * 1024 + 1)})
IN_11_YEARS = datetime.now(timezone.utc) + timedelta(days=11 * 366)
AGO_11_YEARS = datetime.now(timezone.utc) - timedelta(days=11 * 366)

BAD_QUEUE_NAMES = {
    "empty": "",
    "upper-case": "Emails",
    "59-character": "q" * 59,
    "space": "my queue",
    "leading-space": " default",
    "trailing-newline": "default\n",
    "dash": "my-queue",
    "dot": "my.queue",
    "non-ascii": "café",
    "quote": "o'clock",
    "semicolon": "a;b",
    "quote-injection": "x'; DROP TABLE jobq.jobs; --",
    "double-quote": 'a"b',
    "notify-injection": "default; NOTIFY jobq_default",
}
# Where a bad call could notify: the seeded queues and every name tried.
QUEUES_HEARD = ["default", "emails", *BAD_QUEUE_NAMES.values()]

ENQUEUE_CASES = [
    # -- queue
    case("enqueue-null-queue", "SELECT jobq.enqueue(NULL, '{}')", "22004", "queue"),
    *[
        case(f"enqueue-{name}-queue", "SELECT jobq.enqueue(%s, '{}')", "22023", "queue", queue)
        for name, queue in BAD_QUEUE_NAMES.items()
    ],
    # -- payload (un-storable payloads: test_a_payload_postgresql_cannot_parse_...)
    case("enqueue-null-payload", "SELECT jobq.enqueue('default', NULL)", "22004", "payload"),
    case("enqueue-array-payload", "SELECT jobq.enqueue('default', '[1, 2]')", "22023", "payload"),
    case("enqueue-string-payload", "SELECT jobq.enqueue('default', '\"text\"')", "22023", "payload"),
    case("enqueue-number-payload", "SELECT jobq.enqueue('default', '42')", "22023", "payload"),
    case("enqueue-boolean-payload", "SELECT jobq.enqueue('default', 'true')", "22023", "payload"),
    case("enqueue-json-null-payload", "SELECT jobq.enqueue('default', 'null')", "22023", "payload"),
    case("enqueue-payload-over-1-mib", "SELECT jobq.enqueue('default', %s)", "54000", "payload", OVER_1_MIB),
    # -- priority, run_at, max_attempts
    case(
        "enqueue-priority-32768",
        "SELECT jobq.enqueue('default', '{}', priority => 32768)",
        "22023",
        "priority",
    ),
    case(
        "enqueue-priority-minus-32769",
        "SELECT jobq.enqueue('default', '{}', priority => -32769)",
        "22023",
        "priority",
    ),
    case(
        "enqueue-priority-40000",
        "SELECT jobq.enqueue('default', '{}', priority => 40000)",
        "22023",
        "priority",
    ),
    case(
        "enqueue-priority-minus-40000",
        "SELECT jobq.enqueue('default', '{}', priority => -40000)",
        "22023",
        "priority",
    ),
    case(
        "enqueue-null-priority", "SELECT jobq.enqueue('default', '{}', priority => NULL)", "22004", "priority"
    ),
    case(
        "enqueue-run-at-infinity",
        "SELECT jobq.enqueue('default', '{}', run_at => 'infinity')",
        "22023",
        "run_at",
    ),
    case(
        "enqueue-run-at-minus-infinity",
        "SELECT jobq.enqueue('default', '{}', run_at => '-infinity')",
        "22023",
        "run_at",
    ),
    case(
        "enqueue-run-at-in-11-years",
        "SELECT jobq.enqueue('default', '{}', run_at => %s)",
        "22023",
        "run_at",
        IN_11_YEARS,
    ),
    case(
        "enqueue-run-at-11-years-ago",
        "SELECT jobq.enqueue('default', '{}', run_at => %s)",
        "22023",
        "run_at",
        AGO_11_YEARS,
    ),
    case("enqueue-null-run-at", "SELECT jobq.enqueue('default', '{}', run_at => NULL)", "22004", "run_at"),
    case(
        "enqueue-max-attempts-0",
        "SELECT jobq.enqueue('default', '{}', max_attempts => 0)",
        "22023",
        "max_attempts",
    ),
    case(
        "enqueue-max-attempts-minus-1",
        "SELECT jobq.enqueue('default', '{}', max_attempts => -1)",
        "22023",
        "max_attempts",
    ),
    case(
        "enqueue-max-attempts-1001",
        "SELECT jobq.enqueue('default', '{}', max_attempts => 1001)",
        "22023",
        "max_attempts",
    ),
    case(
        "enqueue-max-attempts-2147483647",
        "SELECT jobq.enqueue('default', '{}', max_attempts => 2147483647)",
        "22023",
        "max_attempts",
    ),
]

ENQUEUE_MANY_CASES = [
    case("enqueue-many-null-queue", "SELECT jobq.enqueue_many(NULL, ARRAY['{}']::jsonb[])", "22004", "queue"),
    case(
        "enqueue-many-upper-case-queue",
        "SELECT jobq.enqueue_many('No', ARRAY['{}']::jsonb[])",
        "22023",
        "queue",
    ),
    case(
        "enqueue-many-quote-injection-queue",
        "SELECT jobq.enqueue_many(%s, ARRAY['{}']::jsonb[])",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["quote-injection"],
    ),
    case("enqueue-many-null-payloads", "SELECT jobq.enqueue_many('default', NULL)", "22004", "payloads"),
    case(
        "enqueue-many-two-dimensional-payloads",
        "SELECT jobq.enqueue_many('default', ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[])",
        "22023",
        "payloads",
    ),
    case(
        "enqueue-many-null-at-2",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', NULL, '{}']::jsonb[])",
        "22004",
        "payloads[2]",
    ),
    case(
        "enqueue-many-array-at-2",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '[1]', '{}']::jsonb[])",
        "22023",
        "payloads[2]",
    ),
    case(
        "enqueue-many-over-1-mib-at-2",
        "SELECT jobq.enqueue_many('default', %s)",
        "54000",
        "payloads[2]",
        [Jsonb({}), OVER_1_MIB, Jsonb({})],
    ),
    case(
        "enqueue-many-names-the-first-of-two-bad-elements",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}', '1', NULL]::jsonb[])",
        "22023",
        "payloads[3]",
    ),
    case(
        "enqueue-many-bad-element-of-an-array-indexed-from-0",
        'SELECT jobq.enqueue_many(\'default\', \'[0:2]={"{}","[1]","{}"}\'::jsonb[])',
        "22023",
        "payloads[1]",
    ),
    case(
        "enqueue-many-priority-40000",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], priority => 40000)",
        "22023",
        "priority",
    ),
    case(
        "enqueue-many-null-priority",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], priority => NULL)",
        "22004",
        "priority",
    ),
    case(
        "enqueue-many-run-at-infinity",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], run_at => 'infinity')",
        "22023",
        "run_at",
    ),
    case(
        "enqueue-many-max-attempts-0",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], max_attempts => 0)",
        "22023",
        "max_attempts",
    ),
]

CLAIM_CASES = [
    case("claim-null-queue", "SELECT * FROM jobq.claim(NULL, 1, 'w1')", "22004", "queue"),
    case("claim-empty-queue", "SELECT * FROM jobq.claim('', 1, 'w1')", "22023", "queue"),
    case("claim-upper-case-queue", "SELECT * FROM jobq.claim('Default', 1, 'w1')", "22023", "queue"),
    case(
        "claim-quote-injection-queue",
        "SELECT * FROM jobq.claim(%s, 1, 'w1')",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["quote-injection"],
    ),
    case("claim-n-0", "SELECT * FROM jobq.claim('default', 0, 'w1')", "22023", "n"),
    case("claim-n-minus-5", "SELECT * FROM jobq.claim('default', -5, 'w1')", "22023", "n"),
    case("claim-n-1001-over-the-cap", "SELECT * FROM jobq.claim('default', 1001, 'w1')", "22023", "n"),
    case("claim-n-2147483647", "SELECT * FROM jobq.claim('default', 2147483647, 'w1')", "22023", "n"),
    case("claim-null-n", "SELECT * FROM jobq.claim('default', NULL, 'w1')", "22004", "n"),
    case("claim-null-worker", "SELECT * FROM jobq.claim('default', 1, NULL)", "22004", "worker"),
    case("claim-empty-worker", "SELECT * FROM jobq.claim('default', 1, '')", "22023", "worker"),
    case(
        "claim-201-character-worker",
        "SELECT * FROM jobq.claim('default', 1, %s)",
        "22023",
        "worker",
        "w" * 201,
    ),
    case(
        "claim-100000-character-worker",
        "SELECT * FROM jobq.claim('default', 1, %s)",
        "22023",
        "worker",
        "w" * 100_000,
    ),
    case(
        "claim-zero-lease-timeout",
        "SELECT * FROM jobq.claim('default', 1, 'w1', '0 s')",
        "22023",
        "lease_timeout",
    ),
    case(
        "claim-negative-lease-timeout",
        "SELECT * FROM jobq.claim('default', 1, 'w1', '-30 s')",
        "22023",
        "lease_timeout",
    ),
    case(
        "claim-lease-timeout-over-a-day",
        "SELECT * FROM jobq.claim('default', 1, 'w1', '1 day 1 s')",
        "22023",
        "lease_timeout",
    ),
    case(
        "claim-lease-timeout-month-minus-30-days",
        "SELECT * FROM jobq.claim('default', 1, 'w1', '1 month -30 days')",
        "22023",
        "lease_timeout",
    ),
]

WAIT_CASES = [
    case(
        "register-waiter-null-queue",
        "SELECT * FROM jobq.register_waiter(NULL, 'w1', '1 s')",
        "22004",
        "queue",
    ),
    case(
        "register-waiter-bad-queue",
        "SELECT * FROM jobq.register_waiter('Default', 'w1', '1 s')",
        "22023",
        "queue",
    ),
    case(
        "register-waiter-null-worker",
        "SELECT * FROM jobq.register_waiter('default', NULL, '1 s')",
        "22004",
        "worker",
    ),
    case(
        "register-waiter-empty-worker",
        "SELECT * FROM jobq.register_waiter('default', '', '1 s')",
        "22023",
        "worker",
    ),
    case(
        "register-waiter-201-character-worker",
        "SELECT * FROM jobq.register_waiter('default', %s, '1 s')",
        "22023",
        "worker",
        "w" * 201,
    ),
    case(
        "register-waiter-null-up-to",
        "SELECT * FROM jobq.register_waiter('default', 'w1', NULL)",
        "22004",
        "up_to",
    ),
    case(
        "register-waiter-zero-up-to",
        "SELECT * FROM jobq.register_waiter('default', 'w1', '0 s')",
        "22023",
        "up_to",
    ),
    case(
        "register-waiter-up-to-over-a-day",
        "SELECT * FROM jobq.register_waiter('default', 'w1', '1 day 1 s')",
        "22023",
        "up_to",
    ),
]

# complete, heartbeat, release, fail and snooze take (id, lease) and refuse alike; so do the calls of a
# running durable job (0.11.0): checkpoint, sleep, await_signal, progress and fan_out.
LEASE_CALLS = {
    "complete": "SELECT jobq.complete(%s, %s)",
    "heartbeat": "SELECT jobq.heartbeat(%s, %s)",
    "release": "SELECT jobq.release(%s, %s)",
    "fail": "SELECT jobq.fail(%s, 'boom', %s)",
    "snooze": "SELECT jobq.snooze(%s, %s, '1 minute')",
    "checkpoint": "SELECT jobq.checkpoint(%s, %s, 'charge', '{\"charge_id\": 1}')",
    "sleep": "SELECT jobq.sleep(%s, %s, 'nap', 'tomorrow')",
    "await-signal": "SELECT jobq.await_signal(%s, %s, 'approval', '1 hour')",
    "progress": "SELECT jobq.progress(%s, %s, '{\"done\": 1}')",
    "fan-out": "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}]', '{\"payload\": {}}')",
}

LEASE_CASES = [
    *[
        c
        for call, query in LEASE_CALLS.items()
        for c in (
            case(f"{call}-null-id", query, "22004", "id", None, lease_of("running")),
            case(f"{call}-null-lease", query, "22004", "lease", id_of("running"), None),
            case(f"{call}-unknown-id", query, "JQ002", "id", UNKNOWN_ID, lease_of("running")),
            case(f"{call}-never-claimed-job", query, "JQ001", "lease", id_of("queued_1"), 0),
            case(
                f"{call}-stale-lease",
                query,
                "JQ001",
                "lease",
                id_of("running_stale"),
                lease_of("running_stale", -1),
            ),
        )
    ],
    *[
        case(f"{call}-after-complete", LEASE_CALLS[call], "JQ001", "lease", id_of("done"), lease_of("done"))
        for call in (
            "heartbeat",
            "release",
            "fail",
            "snooze",
            "checkpoint",
            "sleep",
            "await-signal",
            "progress",
            "fan-out",
        )
    ],
    case("complete-negative-id", LEASE_CALLS["complete"], "JQ002", "id", -1, 1),
    case(
        "complete-after-fail", LEASE_CALLS["complete"], "JQ001", "lease", id_of("failed"), lease_of("failed")
    ),
    case(
        "complete-with-a-lease-not-yet-issued",
        LEASE_CALLS["complete"],
        "JQ001",
        "lease",
        id_of("running"),
        lease_of("running", +1),
    ),
    case(
        "fail-twice-on-the-last-attempt",
        LEASE_CALLS["fail"],
        "JQ001",
        "lease",
        id_of("failed"),
        lease_of("failed"),
    ),
    case(
        "fail-twice-with-attempts-left",
        LEASE_CALLS["fail"],
        "JQ001",
        "lease",
        id_of("retrying"),
        lease_of("retrying"),
    ),
    case(
        "fail-null-error",
        "SELECT jobq.fail(%s, NULL, %s)",
        "22004",
        "error",
        id_of("running"),
        lease_of("running"),
    ),
]

COMPLETE_MANY_CASES = [
    case(
        "complete-many-null-ids",
        "SELECT jobq.complete_many(NULL, ARRAY[%s]::bigint[])",
        "22004",
        "ids",
        lease_of("running"),
    ),
    case(
        "complete-many-null-leases",
        "SELECT jobq.complete_many(ARRAY[%s]::bigint[], NULL)",
        "22004",
        "leases",
        id_of("running"),
    ),
    case(
        "complete-many-lengths-differ",
        "SELECT jobq.complete_many(ARRAY[%s]::bigint[], ARRAY[%s, 1]::bigint[])",
        "22023",
        "leases",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "complete-many-null-in-ids",
        "SELECT jobq.complete_many(ARRAY[%s, NULL]::bigint[], ARRAY[%s, 1]::bigint[])",
        "22023",
        "ids",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "complete-many-null-in-leases",
        "SELECT jobq.complete_many(ARRAY[%s, %s]::bigint[], ARRAY[%s, NULL]::bigint[])",
        "22023",
        "leases",
        id_of("running"),
        id_of("running_stale"),
        lease_of("running"),
    ),
    case(
        "complete-many-two-dimensional-arrays",
        "SELECT jobq.complete_many(ARRAY[[%s, %s]]::bigint[], ARRAY[[%s, %s]]::bigint[])",
        "22023",
        "ids",
        id_of("running"),
        id_of("running_stale"),
        lease_of("running"),
        lease_of("running_stale"),
    ),
]

OPERATING_CASES = [
    case("reap-zero-stale", "SELECT * FROM jobq.reap('0 s')", "22023", "stale"),
    case("reap-negative-stale", "SELECT * FROM jobq.reap('-1 min')", "22023", "stale"),
    case("reap-month-minus-30-days-stale", "SELECT * FROM jobq.reap('1 month -30 days')", "22023", "stale"),
    case(
        "reap-10000-year-stale",
        "SELECT * FROM jobq.reap('10000 years')",
        "22023",
        "stale",
    ),
    case(
        "reap-zero-at-most-every",
        "SELECT * FROM jobq.reap(NULL, at_most_every => '0 s')",
        "22023",
        "at_most_every",
    ),
    case(
        "reap-2-day-at-most-every",
        "SELECT * FROM jobq.reap(NULL, at_most_every => '2 days')",
        "22023",
        "at_most_every",
    ),
    *[
        case(
            f"retry-failed-{name}-queue",
            "SELECT jobq.retry_failed(%s)",
            "22023",
            "queue",
            BAD_QUEUE_NAMES[name],
        )
        for name in ("empty", "upper-case", "59-character", "quote-injection")
    ],
    case("retry-failed-sentence-as-queue", "SELECT jobq.retry_failed('Not a queue')", "22023", "queue"),
    case("channel-null-queue", "SELECT jobq.channel(NULL)", "22004", "queue"),
    case(
        "channel-double-quote-queue",
        "SELECT jobq.channel(%s)",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["double-quote"],
    ),
    case(
        "channel-notify-injection-queue",
        "SELECT jobq.channel(%s)",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["notify-injection"],
    ),
]

# 0.6.0's options of enqueue and enqueue_many: unique keys and headers (timeout is the queue's alone)
JOB_OPTION_CASES = [
    case(
        "enqueue-empty-unique-key",
        "SELECT jobq.enqueue('default', '{}', unique_key => '')",
        "22023",
        "unique_key",
    ),
    case(
        "enqueue-513-character-unique-key",
        "SELECT jobq.enqueue('default', '{}', unique_key => %s)",
        "22023",
        "unique_key",
        "k" * 513,
    ),
    case(
        "enqueue-null-unique-scope",
        "SELECT jobq.enqueue('default', '{}', unique_key => 'k', unique_scope => NULL)",
        "22004",
        "unique_scope",
    ),
    case(
        "enqueue-unknown-unique-scope",
        "SELECT jobq.enqueue('default', '{}', unique_key => 'k', unique_scope => 'forever')",
        "22023",
        "unique_scope",
    ),
    case(
        "enqueue-null-on-conflict",
        "SELECT jobq.enqueue('default', '{}', unique_key => 'k', on_conflict => NULL)",
        "22004",
        "on_conflict",
    ),
    case(
        "enqueue-unknown-on-conflict",
        "SELECT jobq.enqueue('default', '{}', unique_key => 'k', on_conflict => 'ignore')",
        "22023",
        "on_conflict",
    ),
    case(
        "enqueue-unknown-on-conflict-without-a-key",
        "SELECT jobq.enqueue('default', '{}', on_conflict => 'overwrite')",
        "22023",
        "on_conflict",
    ),
    # 0.10.0: what to do with a key's holder, given without a key
    case(
        "enqueue-on-conflict-without-a-unique-key",
        "SELECT jobq.enqueue('default', '{}', on_conflict => 'skip')",
        "22023",
        "on_conflict",
    ),
    case(
        "enqueue-unique-scope-without-a-unique-key",
        "SELECT jobq.enqueue('default', '{}', unique_scope => 'until_done')",
        "22023",
        "unique_scope",
    ),
    case(
        "enqueue-with-a-concurrency-key-on-conflict-without-a-unique-key",
        "SELECT jobq.enqueue('default', '{}', concurrency_key => 'k', on_conflict => 'replace')",
        "22023",
        "on_conflict",
    ),
    case(
        "enqueue-array-headers", "SELECT jobq.enqueue('default', '{}', headers => '[1]')", "22023", "headers"
    ),
    case(
        "enqueue-string-headers",
        "SELECT jobq.enqueue('default', '{}', headers => '\"h\"')",
        "22023",
        "headers",
    ),
    case(
        "enqueue-json-null-headers",
        "SELECT jobq.enqueue('default', '{}', headers => 'null')",
        "22023",
        "headers",
    ),
    case(
        "enqueue-headers-over-1-mib",
        "SELECT jobq.enqueue('default', '{}', headers => %s)",
        "54000",
        "headers",
        OVER_1_MIB,
    ),
    case(
        "enqueue-keyed-with-a-bad-payload",
        "SELECT jobq.enqueue('default', '[1]', unique_key => 'k')",
        "22023",
        "payload",
    ),
    # -- enqueue_many
    case(
        "enqueue-many-two-dimensional-unique-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[], unique_keys => ARRAY[['a', 'b']])",
        "22023",
        "unique_keys",
    ),
    case(
        "enqueue-many-fewer-unique-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[], unique_keys => ARRAY['a'])",
        "22023",
        "unique_keys",
    ),
    case(
        "enqueue-many-more-unique-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_keys => ARRAY['a', 'b'])",
        "22023",
        "unique_keys",
    ),
    case(
        "enqueue-many-empty-unique-key-at-2",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}', '{}']::jsonb[],"
        " unique_keys => ARRAY['a', '', 'c'])",
        "22023",
        "unique_keys[2]",
    ),
    case(
        "enqueue-many-513-character-unique-key-at-1",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_keys => ARRAY[%s])",
        "22023",
        "unique_keys[1]",
        "k" * 513,
    ),
    case(
        "enqueue-many-bad-unique-key-of-an-array-indexed-from-0",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[],"
        " unique_keys => '[0:1]={a,\"\"}'::text[])",
        "22023",
        "unique_keys[1]",
    ),
    case(
        "enqueue-many-null-unique-scope",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_keys => ARRAY['a'],"
        " unique_scope => NULL)",
        "22004",
        "unique_scope",
    ),
    case(
        "enqueue-many-unknown-unique-scope",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_scope => 'always')",
        "22023",
        "unique_scope",
    ),
    case(
        "enqueue-many-null-on-conflict",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], on_conflict => NULL)",
        "22004",
        "on_conflict",
    ),
    case(
        "enqueue-many-unknown-on-conflict",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_keys => ARRAY['a'],"
        " on_conflict => 'x')",
        "22023",
        "on_conflict",
    ),
    case(
        "enqueue-many-on-conflict-without-unique-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], on_conflict => 'raise')",
        "22023",
        "on_conflict",
    ),
    case(
        "enqueue-many-unique-scope-without-unique-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_scope => 'until_done')",
        "22023",
        "unique_scope",
    ),
    case(
        "enqueue-many-array-headers",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], headers => '[]')",
        "22023",
        "headers",
    ),
    case(
        "enqueue-many-headers-over-1-mib",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], headers => %s)",
        "54000",
        "headers",
        OVER_1_MIB,
    ),
]

# 0.6.0's arguments of the worker's calls: results, retry_in, delay
SETTLE_CASES = [
    case(
        "complete-result-over-1-mib",
        "SELECT jobq.complete(%s, %s, %s)",
        "54000",
        "result",
        id_of("running"),
        lease_of("running"),
        OVER_1_MIB,
    ),
    *[
        c
        for call, query in {
            "complete-many": (
                "SELECT jobq.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], %s::jsonb[])"
            ),
            "complete-and-claim": (
                "SELECT * FROM jobq.complete_and_claim(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],"
                " 'default', 1, 'w1', results => %s::jsonb[])"
            ),
        }.items()
        for c in (
            case(
                f"{call}-fewer-results",
                query,
                "22023",
                "results",
                id_of("running"),
                lease_of("running"),
                [],
            ),
            case(
                f"{call}-more-results",
                query,
                "22023",
                "results",
                id_of("running"),
                lease_of("running"),
                [Jsonb(1), Jsonb(2)],
            ),
            case(
                f"{call}-two-dimensional-results",
                query,
                "22023",
                "results",
                id_of("running"),
                lease_of("running"),
                [[Jsonb(1)]],
            ),
            case(
                f"{call}-result-over-1-mib-at-1",
                query,
                "54000",
                "results[1]",
                id_of("running"),
                lease_of("running"),
                [OVER_1_MIB],
            ),
        )
    ],
    case(
        "fail-negative-retry-in",
        "SELECT jobq.fail(%s, 'boom', %s, retry_in => '-1 s')",
        "22023",
        "retry_in",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fail-retry-in-over-10-years",
        "SELECT jobq.fail(%s, 'boom', %s, retry_in => '10 years 1 day')",
        "22023",
        "retry_in",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fail-null-retry",
        "SELECT jobq.fail(%s, 'boom', %s, retry => NULL)",
        "22004",
        "retry",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "snooze-null-delay",
        "SELECT jobq.snooze(%s, %s, NULL)",
        "22004",
        "delay",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "snooze-negative-delay",
        "SELECT jobq.snooze(%s, %s, '-1 s')",
        "22023",
        "delay",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "snooze-delay-over-10-years",
        "SELECT jobq.snooze(%s, %s, '11 years')",
        "22023",
        "delay",
        id_of("running"),
        lease_of("running"),
    ),
]

HEARTBEAT_STATUS_CASES = [
    case(
        "heartbeat-status-null-ids",
        "SELECT * FROM jobq.heartbeat_status(NULL, ARRAY[%s]::bigint[])",
        "22004",
        "ids",
        lease_of("running"),
    ),
    case(
        "heartbeat-status-null-leases",
        "SELECT * FROM jobq.heartbeat_status(ARRAY[%s]::bigint[], NULL)",
        "22004",
        "leases",
        id_of("running"),
    ),
    case(
        "heartbeat-status-lengths-differ",
        "SELECT * FROM jobq.heartbeat_status(ARRAY[%s]::bigint[], ARRAY[%s, 1]::bigint[])",
        "22023",
        "leases",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "heartbeat-status-null-in-ids",
        "SELECT * FROM jobq.heartbeat_status(ARRAY[%s, NULL]::bigint[], ARRAY[%s, 1]::bigint[])",
        "22023",
        "ids",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "heartbeat-status-two-dimensional-arrays",
        "SELECT * FROM jobq.heartbeat_status(ARRAY[[%s]]::bigint[], ARRAY[[%s]]::bigint[])",
        "22023",
        "ids",
        id_of("running"),
        lease_of("running"),
    ),
]

# jobq.cancel, pause and resume
CONTROL_CASES = [
    case("cancel-null-ids", "SELECT * FROM jobq.cancel(NULL)", "22004", "ids"),
    case(
        "cancel-null-in-ids",
        "SELECT * FROM jobq.cancel(ARRAY[%s, NULL, %s]::bigint[])",
        "22023",
        "ids",
        id_of("queued_1"),
        id_of("running"),
    ),
    case(
        "cancel-two-dimensional-ids",
        "SELECT * FROM jobq.cancel(ARRAY[[%s], [%s]]::bigint[])",
        "22023",
        "ids",
        id_of("queued_1"),
        id_of("running"),
    ),
    case(
        "cancel-null-force",
        "SELECT * FROM jobq.cancel(ARRAY[%s, %s]::bigint[], force => NULL)",
        "22004",
        "force",
        id_of("queued_1"),
        id_of("running"),
    ),
    *[
        c
        for call in ("pause", "resume")
        for c in (
            case(f"{call}-null-queue", f"SELECT jobq.{call}(NULL)", "22004", "queue"),
            case(f"{call}-upper-case-queue", f"SELECT jobq.{call}('Default')", "22023", "queue"),
            case(
                f"{call}-notify-injection-queue",
                f"SELECT jobq.{call}(%s)",
                "22023",
                "queue",
                BAD_QUEUE_NAMES["notify-injection"],
            ),
        )
    ],
]

# jobq.configure_queue: every setting out of its range, and unset; the seeded queue emails is configured
CONFIGURE_BAD_VALUES: dict[str, list[Any]] = {
    "max_attempts": [0, -1, 1001],
    "backoff_base": ["0 s", "-1 s", "1 day 1 s"],
    "backoff_max": ["0 s", "-1 s", "10 years 1 day"],
    "backoff_jitter": [-0.1, 1.5, float("nan"), float("inf")],
    "lease_timeout": ["0 s", "-1 s", "1 day 1 s", "1 month -30 days"],
    "timeout": ["0 s", "-1 s", "30 days 1 s"],
    "concurrency": [0, -1, 100001],
    "key_concurrency": [0, 100001],
    "key_order": ["fifo", "", "PRIORITY"],
    "rate_limit": [0, -5, 10001],
    "rate_interval": ["0 s", "-1 s", "1 day 1 s"],
}
CONFIGURE_CASES = [
    case(
        "configure-null-queue",
        "SELECT * FROM jobq.configure_queue(NULL, max_attempts => 2)",
        "22004",
        "queue",
    ),
    case(
        "configure-quote-injection-queue",
        "SELECT * FROM jobq.configure_queue(%s, max_attempts => 2)",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["quote-injection"],
    ),
    *[
        case(
            f"configure-{setting.replace('_', '-')}-{value}".replace(" ", "-"),
            f"SELECT * FROM jobq.configure_queue('emails', {setting} => %s)",
            "22023",
            setting,
            value,
        )
        for setting, values in CONFIGURE_BAD_VALUES.items()
        for value in values
    ],
    # 0.10.0: a backoff_base above the backoff_max the queue would have (given, else kept, else 300 s)
    case(
        "configure-backoff-base-above-the-default-max",
        "SELECT * FROM jobq.configure_queue('emails', backoff_base => '10 minutes')",
        "22023",
        "backoff_base",
    ),
    case(
        "configure-backoff-base-above-the-max-given-with-it",
        "SELECT * FROM jobq.configure_queue('emails', backoff_base => '2 s', backoff_max => '1 s')",
        "22023",
        "backoff_base",
    ),
    case(
        "configure-backoff-max-below-the-default-base",
        "SELECT * FROM jobq.configure_queue('emails', backoff_max => '0.5 s')",
        "22023",
        "backoff_max",
    ),
    case(
        "configure-backoff-base-above-the-default-max-of-a-new-queue",
        "SELECT * FROM jobq.configure_queue('reports', backoff_base => '1 hour')",
        "22023",
        "backoff_base",
    ),
    case(
        "configure-null-unset",
        "SELECT * FROM jobq.configure_queue('emails', unset => NULL)",
        "22004",
        "unset",
    ),
    case(
        "configure-two-dimensional-unset",
        "SELECT * FROM jobq.configure_queue('emails', unset => ARRAY[['timeout']])",
        "22023",
        "unset",
    ),
    case(
        "configure-unset-of-an-unknown-setting",
        "SELECT * FROM jobq.configure_queue('emails', unset => ARRAY['timeout', 'paused'])",
        "22023",
        "unset[2]",
    ),
    case(
        "configure-unset-holding-null",
        "SELECT * FROM jobq.configure_queue('emails', unset => ARRAY[NULL, 'timeout'])",
        "22023",
        "unset[1]",
    ),
    case(
        "configure-unset-of-a-setting-also-given",
        "SELECT * FROM jobq.configure_queue('emails', max_attempts => 4, unset => ARRAY['max_attempts'])",
        "22023",
        "unset",
    ),
]

# 0.7.0: concurrency keys, dependencies, flows, several queues at once, a rate window without a limit
FLOW_CONTROL_CASES = [
    case(
        "configure-rate-interval-without-rate-limit",
        "SELECT * FROM jobq.configure_queue('emails', rate_interval => '1 hour')",
        "22023",
        "rate_interval",
    ),
    case(
        "enqueue-empty-concurrency-key",
        "SELECT jobq.enqueue('default', '{}', concurrency_key => '')",
        "22023",
        "concurrency_key",
    ),
    case(
        "enqueue-513-character-concurrency-key",
        "SELECT jobq.enqueue('default', '{}', concurrency_key => %s)",
        "22023",
        "concurrency_key",
        "k" * 513,
    ),
    case(
        "enqueue-two-dimensional-depends-on",
        "SELECT jobq.enqueue('default', '{}', depends_on => ARRAY[[1, 2]])",
        "22023",
        "depends_on",
    ),
    case(
        "enqueue-depends-on-holding-null",
        "SELECT jobq.enqueue('default', '{}', depends_on => ARRAY[%s, NULL])",
        "22023",
        "depends_on[2]",
        id_of("done"),
    ),
    case(
        "enqueue-depends-on-an-unknown-job",
        "SELECT jobq.enqueue('default', '{}', depends_on => ARRAY[%s, %s])",
        "JQ002",
        "depends_on",
        id_of("queued_1"),
        UNKNOWN_ID,
    ),
    case(
        "enqueue-depends-on-1001-jobs",
        "SELECT jobq.enqueue('default', '{}', depends_on => array_fill(%s::bigint, ARRAY[1001]))",
        "22023",
        "depends_on",
        id_of("done"),
    ),
    case(
        "enqueue-depends-on-with-a-unique-key",
        "SELECT jobq.enqueue('default', '{}', depends_on => ARRAY[%s], unique_key => 'k')",
        "22023",
        "depends_on",
        id_of("queued_1"),
    ),
    case(
        "enqueue-null-on-parent-failure",
        "SELECT jobq.enqueue('default', '{}', depends_on => ARRAY[%s], on_parent_failure => NULL)",
        "22004",
        "on_parent_failure",
        id_of("queued_1"),
    ),
    case(
        "enqueue-unknown-on-parent-failure",
        "SELECT jobq.enqueue('default', '{}', on_parent_failure => 'ignore')",
        "22023",
        "on_parent_failure",
    ),
    case(
        "enqueue-many-two-dimensional-concurrency-keys",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[],"
        " concurrency_keys => ARRAY[['a', 'b']])",
        "22023",
        "concurrency_keys",
    ),
    case(
        "enqueue-many-concurrency-keys-of-another-length",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[], concurrency_keys => ARRAY['a'])",
        "22023",
        "concurrency_keys",
    ),
    case(
        "enqueue-many-empty-concurrency-key",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[], concurrency_keys => ARRAY['a', ''])",
        "22023",
        "concurrency_keys[2]",
    ),
    case("flow-null-queue", "SELECT jobq.enqueue_flow(NULL, '[{\"payload\": {}}]')", "22004", "queue"),
    case(
        "flow-quote-injection-queue",
        "SELECT jobq.enqueue_flow(%s, '[{\"payload\": {}}]')",
        "22023",
        "queue",
        BAD_QUEUE_NAMES["quote-injection"],
    ),
    case("flow-null-steps", "SELECT jobq.enqueue_flow('default', NULL)", "22004", "steps"),
    case(
        "flow-steps-an-object", "SELECT jobq.enqueue_flow('default', '{\"payload\": {}}')", "22023", "steps"
    ),
    case("flow-no-steps", "SELECT jobq.enqueue_flow('default', '[]')", "22023", "steps"),
    case("flow-a-step-not-an-object", "SELECT jobq.enqueue_flow('default', '[1]')", "22023", "steps[0]"),
    case(
        "flow-a-step-with-an-unknown-key",
        "SELECT jobq.enqueue_flow('default', '[{\"payload\": {}, \"retries\": 3}]')",
        "22023",
        "steps[0]",
    ),
    case(
        "flow-a-step-without-payload",
        "SELECT jobq.enqueue_flow('default', '[{\"name\": \"a\"}]')",
        "22004",
        "steps[0]",
    ),
    case(
        "flow-a-priority-of-the-wrong-type",
        'SELECT jobq.enqueue_flow(\'default\', \'[{"payload": {}, "priority": "high"}]\')',
        "22023",
        "steps[0].priority",
    ),
    case(
        "flow-a-priority-out-of-range",
        'SELECT jobq.enqueue_flow(\'default\', \'[{"payload": {}}, {"payload": {}, "priority": 99999}]\')',
        "22023",
        "steps[1]",
    ),
    case(
        "flow-a-repeated-name",
        "SELECT jobq.enqueue_flow('default',"
        ' \'[{"name": "a", "payload": {}}, {"name": "a", "payload": {}}]\')',
        "22023",
        "steps[1].name",
    ),
    case(
        "flow-a-dependency-on-a-later-step",
        "SELECT jobq.enqueue_flow('default',"
        ' \'[{"payload": {}, "depends_on": ["b"]}, {"name": "b", "payload": {}}]\')',
        "22023",
        "steps[0].depends_on",
    ),
    case(
        "flow-a-dependency-on-an-unknown-job",
        "SELECT jobq.enqueue_flow('default',"
        ' format(\'[{"payload": {}, "depends_on": [%%s]}]\', %s::bigint)::jsonb)',
        "JQ002",
        "steps[0]",
        UNKNOWN_ID,
    ),
    case("claim-any-null-queues", "SELECT * FROM jobq.claim_any(NULL, 1, 'w1')", "22004", "queues"),
    case("claim-any-no-queues", "SELECT * FROM jobq.claim_any('{}', 1, 'w1')", "22023", "queues"),
    case(
        "claim-any-two-dimensional-queues",
        "SELECT * FROM jobq.claim_any(ARRAY[['default', 'emails']], 1, 'w1')",
        "22023",
        "queues",
    ),
    case(
        "claim-any-a-bad-queue-name",
        "SELECT * FROM jobq.claim_any(ARRAY['default', %s], 1, 'w1')",
        "22023",
        "queues[2]",
        BAD_QUEUE_NAMES["notify-injection"],
    ),
    case(
        "claim-any-a-null-queue",
        "SELECT * FROM jobq.claim_any(ARRAY[NULL, 'default'], 1, 'w1')",
        "22023",
        "queues[1]",
    ),
    case("claim-any-n-0", "SELECT * FROM jobq.claim_any(ARRAY['default', 'emails'], 0, 'w1')", "22023", "n"),
    case(
        "claim-any-null-worker",
        "SELECT * FROM jobq.claim_any(ARRAY['default', 'emails'], 1, NULL)",
        "22004",
        "worker",
    ),
]

# jobq.job, wait (for a job) and watch
LOOKUP_CASES = [
    case("job-null-id", "SELECT * FROM jobq.job(NULL)", "22004", "id"),
    case("job-unknown-id", "SELECT * FROM jobq.job(%s)", "JQ002", "id", UNKNOWN_ID),
    case("wait-for-a-null-id", "SELECT * FROM jobq.wait(NULL::bigint, '0 s')", "22004", "id"),
    case("wait-for-an-unknown-id", "SELECT * FROM jobq.wait(%s, '0 s')", "JQ002", "id", UNKNOWN_ID),
    case("wait-null-timeout", "SELECT * FROM jobq.wait(%s, NULL)", "22004", "timeout", id_of("running")),
    case(
        "wait-negative-timeout", "SELECT * FROM jobq.wait(%s, '-1 s')", "22023", "timeout", id_of("running")
    ),
    case(
        "wait-timeout-over-60-s", "SELECT * FROM jobq.wait(%s, '61 s')", "22023", "timeout", id_of("running")
    ),
    case("wait-timeout-of-a-day", "SELECT * FROM jobq.wait(%s, '1 day')", "22023", "timeout", id_of("done")),
    case("watch-null-id", "SELECT * FROM jobq.watch(NULL)", "22004", "id"),
    case("watch-unknown-id", "SELECT * FROM jobq.watch(%s)", "JQ002", "id", UNKNOWN_ID),
]

# 0.11.0: durable execution (steps, sleeps, signals, held jobs, progress); the (id, lease) of the calls of a
# running job are in LEASE_CALLS.  A signal's key, like a step's name, is 1 to 200 characters.
BAD_KEYS = [("null", None, "22004"), ("empty", "", "22023"), ("201-character", "k" * 201, "22023")]
DURABLE_CASES = [
    *[
        c
        for call, query in (
            ("checkpoint", "SELECT jobq.checkpoint(%s, %s, %s, 'null')"),
            ("sleep", "SELECT jobq.sleep(%s, %s, %s, 'tomorrow')"),
            ("fan-out", "SELECT jobq.fan_out(%s, %s, %s, '[{\"payload\": {}}]')"),
        )
        for c in (
            case(f"{call}-null-step", query, "22004", "step", id_of("running"), lease_of("running"), None),
            case(f"{call}-empty-step", query, "22023", "step", id_of("running"), lease_of("running"), ""),
            case(
                f"{call}-201-character-step",
                query,
                "22023",
                "step",
                id_of("running"),
                lease_of("running"),
                "s" * 201,
            ),
        )
    ],
    case(
        "checkpoint-null-result",
        "SELECT jobq.checkpoint(%s, %s, 'charge', NULL)",
        "22004",
        "result",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "checkpoint-result-over-1-mib",
        "SELECT jobq.checkpoint(%s, %s, 'charge', %s)",
        "54000",
        "result",
        id_of("running"),
        lease_of("running"),
        OVER_1_MIB,
    ),
    case("steps-null-id", "SELECT * FROM jobq.steps(NULL)", "22004", "id"),
    case("steps-unknown-id", "SELECT * FROM jobq.steps(%s)", "JQ002", "id", UNKNOWN_ID),
    case(
        "sleep-null-until",
        "SELECT jobq.sleep(%s, %s, 'nap', NULL)",
        "22004",
        "until",
        id_of("running"),
        lease_of("running"),
    ),
    *[
        case(
            f"sleep-until-{name}",
            "SELECT jobq.sleep(%s, %s, 'nap', %s::timestamptz)",
            "22023",
            "until",
            id_of("running"),
            lease_of("running"),
            until,
        )
        for name, until in (
            ("infinity", "infinity"),
            ("minus-infinity", "-infinity"),
            ("in-11-years", IN_11_YEARS),
        )
    ],
    *[
        case(
            f"await-signal-{name}-key",
            "SELECT jobq.await_signal(%s, %s, %s, '1 hour')",
            sqlstate,
            "key",
            id_of("running"),
            lease_of("running"),
            key,
        )
        for name, key, sqlstate in BAD_KEYS
    ],
    *[
        case(
            f"await-signal-{name}-timeout",
            "SELECT jobq.await_signal(%s, %s, 'approval', %s::interval)",
            "22023",
            "timeout",
            id_of("running"),
            lease_of("running"),
            timeout,
        )
        for name, timeout in (("zero", "0 s"), ("negative", "-1 s"), ("11-year", "11 years"))
    ],
    *[
        case(f"signal-{name}-key", "SELECT jobq.signal(%s, '1')", sqlstate, "key", key)
        for name, key, sqlstate in BAD_KEYS
    ],
    case("signal-null-payload", "SELECT jobq.signal('approval', NULL)", "22004", "payload"),
    case("signal-payload-over-1-mib", "SELECT jobq.signal('approval', %s)", "54000", "payload", OVER_1_MIB),
    case("signal-null-keep", "SELECT jobq.signal('approval', '1', NULL)", "22004", "keep"),
    case("signal-negative-keep", "SELECT jobq.signal('approval', '1', '-1 s')", "22023", "keep"),
    case("signal-11-year-keep", "SELECT jobq.signal('approval', '1', '11 years')", "22023", "keep"),
    case("unhold-null-ids", "SELECT jobq.unhold(NULL)", "22004", "ids"),
    case(
        "unhold-null-in-ids",
        "SELECT jobq.unhold(ARRAY[%s, NULL]::bigint[])",
        "22023",
        "ids",
        id_of("queued_1"),
    ),
    case(
        "unhold-two-dimensional-ids",
        "SELECT jobq.unhold(ARRAY[[%s], [%s]]::bigint[])",
        "22023",
        "ids",
        id_of("queued_1"),
        id_of("queued_2"),
    ),
    case(
        "progress-null-progress",
        "SELECT jobq.progress(%s, %s, NULL)",
        "22004",
        "progress",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "progress-over-1-mib",
        "SELECT jobq.progress(%s, %s, %s)",
        "54000",
        "progress",
        id_of("running"),
        lease_of("running"),
        OVER_1_MIB,
    ),
    # fan_out: children as jobq.enqueue_flow's steps (children[i] is its steps[i], the continuation the
    # last), each check before the job's row is locked or an id taken
    case(
        "fan-out-null-children",
        "SELECT jobq.fan_out(%s, %s, 'split', NULL)",
        "22004",
        "children",
        id_of("running"),
        lease_of("running"),
    ),
    *[
        case(
            f"fan-out-{name}-children",
            "SELECT jobq.fan_out(%s, %s, 'split', %s)",
            "22023",
            "children",
            id_of("running"),
            lease_of("running"),
            Jsonb(children),
        )
        for name, children in (
            ("object", {"payload": {}}),
            ("string", "[]"),
            ("number", 1),
            ("json-null", None),
            ("empty", []),
            ("1000", [{"payload": {}}] * 1000),
        )
    ],
    case(
        "fan-out-a-child-with-a-name",
        'SELECT jobq.fan_out(%s, %s, \'split\', \'[{"payload": {}}, {"payload": {}, "name": "b"}]\')',
        "22023",
        "children[1]",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fan-out-a-child-depending-on-a-name",
        "SELECT jobq.fan_out(%s, %s, 'split', "
        '\'[{"payload": {}}, {"payload": {}, "depends_on": ["#1"]}]\')',
        "22023",
        "children[1]",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fan-out-a-continuation-with-a-name",
        'SELECT jobq.fan_out(%s, %s, \'split\', \'[{"payload": {}}]\', \'{"payload": {}, "name": "#1"}\')',
        "22023",
        "continuation must have no name",
        id_of("running"),
        lease_of("running"),
    ),
    *[
        case(
            f"fan-out-{name}-continuation",
            "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}]', %s)",
            "22023",
            "continuation",
            id_of("running"),
            lease_of("running"),
            Jsonb(continuation),
        )
        for name, continuation in (
            ("array", [{"payload": {}}]),
            ("string", "{}"),
            ("json-null", None),
        )
    ],
    case(
        "fan-out-continuation-depends-on-not-an-array",
        "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}]', %s)",
        "22023",
        "continuation.depends_on",
        id_of("running"),
        lease_of("running"),
        Jsonb({"payload": {}, "depends_on": 5}),
    ),
    case(
        "fan-out-a-child-not-an-object",
        "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}, 1]')",
        "22023",
        "steps[1]",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fan-out-a-child-of-a-bad-queue",
        'SELECT jobq.fan_out(%s, %s, \'split\', \'[{"payload": {}, "queue": "Emails"}]\')',
        "22023",
        "steps[0]",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fan-out-a-continuation-without-a-payload",
        "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}, {\"payload\": {}}]', '{}')",
        "22004",
        "steps[2]",
        id_of("running"),
        lease_of("running"),
    ),
    case(
        "fan-out-a-continuation-depending-on-an-unknown-job",
        "SELECT jobq.fan_out(%s, %s, 'split', '[{\"payload\": {}}]',"
        " jsonb_build_object('payload', '{}'::jsonb, 'depends_on', jsonb_build_array(%s::bigint)))",
        "JQ002",
        "steps[1]",
        id_of("running"),
        lease_of("running"),
        UNKNOWN_ID,
    ),
    case("parent-results-null-id", "SELECT * FROM jobq.parent_results(NULL)", "22004", "id"),
    case("parent-results-unknown-id", "SELECT * FROM jobq.parent_results(%s)", "JQ002", "id", UNKNOWN_ID),
    case("enqueue-null-hold", "SELECT jobq.enqueue('default', '{}', hold => NULL)", "22004", "hold"),
    case(
        "enqueue-hold-with-a-unique-key",
        "SELECT jobq.enqueue('default', '{}', hold => true, unique_key => 'k')",
        "22023",
        "hold",
    ),
    case(
        "enqueue-hold-with-a-concurrency-key",
        "SELECT jobq.enqueue('default', '{}', hold => true, concurrency_key => 'k')",
        "22023",
        "hold",
    ),
    case(
        "enqueue-hold-with-parents",
        "SELECT jobq.enqueue('default', '{}', hold => true, depends_on => ARRAY[%s]::bigint[])",
        "22023",
        "hold",
        id_of("queued_1"),
    ),
]

# 0.8.0: the trace context a session hands to the jobs it enqueues from SQL (SET LOCAL pgjobq.traceparent)
TRACED = (
    "SELECT set_config('pgjobq.traceparent', %s, true), set_config('pgjobq.tracestate', %s, true), {call}"
)
GOOD_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_CASES = [
    *[
        case(
            f"{call_name}-{parent_name}-traceparent",
            TRACED.format(call=call),
            "22023",
            "pgjobq.traceparent",
            parent,
            "",
        )
        for call_name, call in (
            ("enqueue", "jobq.enqueue('default', '{}')"),
            ("enqueue-many", "jobq.enqueue_many('default', ARRAY['{}']::jsonb[])"),
            ("enqueue-flow", "jobq.enqueue_flow('default', '[{\"payload\": {}}]')"),
        )
        for parent_name, parent in (
            ("garbage", "not a trace"),
            ("upper-case", GOOD_PARENT.upper()),
            ("all-zero-trace-id", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"),
            ("all-zero-span-id", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01"),
            ("version-ff", "ff" + GOOD_PARENT[2:]),
        )
    ],
    case(
        "enqueue-tracestate-over-512-characters",
        TRACED.format(call="jobq.enqueue('default', '{}')"),
        "22023",
        "pgjobq.tracestate",
        GOOD_PARENT,
        "k=" + "v" * 511,
    ),
]

# 0.9.0: a task names a job type: 1 to 200 characters matching ^[A-Za-z_][A-Za-z0-9_.:-]*$
BAD_TASKS = {
    "empty": "",
    "leading-digit": "1st_task",
    "leading-dot": ".send",
    "leading-dash": "-send",
    "space": "send welcome",
    "slash": "emails/send",
    "non-ascii": "envoyé",
    "trailing-newline": "send\n",
    "quote-injection": "x'); DROP TABLE jobq.jobs; --",
    "201-character": "t" * 201,
}
TASK_CASES = [
    *[
        case(f"{call_name}-{task_name}-task", query, "22023", "task", task)
        for call_name, query in (
            ("enqueue", "SELECT jobq.enqueue('default', '{}', task => %s)"),
            (
                "enqueue-with-job-options",
                "SELECT jobq.enqueue('default', '{}', unique_key => 'k', task => %s)",
            ),
            ("enqueue-many", "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], task => %s)"),
            (
                "enqueue-flow",
                "SELECT jobq.enqueue_flow('default',"
                " jsonb_build_array(jsonb_build_object('payload', '{}'::jsonb, 'task', %s::text)))",
            ),
            ("schedule", "SELECT * FROM jobq.schedule('nightly', 'default', every => '1 hour', task => %s)"),
        )
        for task_name, task in BAD_TASKS.items()
    ],
    case(
        "enqueue-flow-number-task",
        "SELECT jobq.enqueue_flow('default', '[{\"payload\": {}, \"task\": 7}]')",
        "22023",
        "steps[0].task",
    ),
]

CASES = [
    *ENQUEUE_CASES,
    *TRACE_CASES,
    *TASK_CASES,
    *JOB_OPTION_CASES,
    *ENQUEUE_MANY_CASES,
    *CLAIM_CASES,
    *WAIT_CASES,
    *LEASE_CASES,
    *COMPLETE_MANY_CASES,
    *OPERATING_CASES,
    *SETTLE_CASES,
    *HEARTBEAT_STATUS_CASES,
    *CONTROL_CASES,
    *CONFIGURE_CASES,
    *FLOW_CONTROL_CASES,
    *LOOKUP_CASES,
    *DURABLE_CASES,
]


# ---------------------------------------------------------------------------------------------------------
# The databases
# ---------------------------------------------------------------------------------------------------------


class Seeded(NamedTuple):
    dsn: str
    caller: Db  # makes the bad calls
    observer: Db  # snapshots, markers, lookups; search_path pg_catalog, pg_temp
    listener: psycopg.Connection[Any]  # LISTENs on QUEUES_HEARD
    notices: list[str]  # every notice the caller received


# Look-alikes of what jobq's checks call, each answering so that a bad argument would pass, and each
# announcing itself with a notice (a notice is sent at once: the rollback of the failed call keeps it).
LOOKALIKES = """
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: now()'; RETURN 'epoch'; END $$;
CREATE FUNCTION public.statement_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: statement_timestamp()'; RETURN 'epoch'; END $$;
CREATE FUNCTION public.isfinite(timestamptz) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: isfinite()'; RETURN true; END $$;
CREATE FUNCTION public.jsonb_typeof(jsonb) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: jsonb_typeof()'; RETURN 'object'; END $$;
-- a closer match than pg_catalog.pg_column_size("any"), wherever public is on the path
CREATE FUNCTION public.pg_column_size(jsonb) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: pg_column_size()'; RETURN 1; END $$;
CREATE FUNCTION public.length(text) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: length()'; RETURN 5; END $$;
CREATE FUNCTION public.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: cardinality()'; RETURN 1; END $$;
CREATE FUNCTION public.array_ndims(anyarray) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: array_ndims()'; RETURN 1; END $$;
CREATE FUNCTION public.array_position(anyarray, anyelement) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: array_position()'; RETURN NULL; END $$;
CREATE FUNCTION public.quote_literal(text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: quote_literal()'; RETURN 'hijacked'; END $$;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: pg_notify()'; END $$;

CREATE FUNCTION public.lookalike_text_not_match(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: text !~ text'; RETURN false; END $$;
CREATE OPERATOR public.!~ (LEFTARG = text, RIGHTARG = text, FUNCTION = public.lookalike_text_not_match);
CREATE FUNCTION public.lookalike_text_ne(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: text <> text'; RETURN false; END $$;
CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.lookalike_text_ne);
CREATE FUNCTION public.lookalike_text_eq(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: text = text'; RETURN true; END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.lookalike_text_eq);
CREATE FUNCTION public.lookalike_int_lt(integer, integer) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: integer < integer'; RETURN false; END $$;
CREATE OPERATOR public.< (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.lookalike_int_lt);
CREATE FUNCTION public.lookalike_int_gt(integer, integer) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: integer > integer'; RETURN false; END $$;
CREATE OPERATOR public.> (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.lookalike_int_gt);
CREATE FUNCTION public.lookalike_int_ne(integer, integer) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: integer <> integer'; RETURN false; END $$;
CREATE OPERATOR public.<> (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.lookalike_int_ne);
CREATE FUNCTION public.lookalike_bigint_eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: bigint = bigint'; RETURN true; END $$;
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.lookalike_bigint_eq);
CREATE FUNCTION public.lookalike_interval_le(interval, interval) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: interval <= interval'; RETURN false; END $$;
CREATE OPERATOR public.<= (LEFTARG = interval, RIGHTARG = interval, FUNCTION = public.lookalike_interval_le);
CREATE FUNCTION public.lookalike_timestamptz_gt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: timestamptz > timestamptz'; RETURN false; END $$;
CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                          FUNCTION = public.lookalike_timestamptz_gt);
CREATE FUNCTION public.lookalike_timestamptz_lt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE NOTICE 'hijacked: timestamptz < timestamptz'; RETURN false; END $$;
CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                          FUNCTION = public.lookalike_timestamptz_lt);
"""

# pg_catalog named after public: left off the path, it would be searched first and mask the look-alikes.
HOSTILE_SEARCH_PATH = "SET search_path = public, pg_catalog, pg_temp"


@contextmanager
def seeded_database(
    server: ThrowawayPostgres, template: NoopExecutor, dbname: str, *, hostile: bool
) -> Iterator[Seeded]:
    janitor = DatabaseJanitor(
        user=server.user,
        host=server.host,
        port=server.port,
        dbname=dbname,
        template_dbname=template.template_dbname,
    )
    dsn = server.dsn(dbname)
    with (
        janitor,
        psycopg.connect(
            dsn, autocommit=True, row_factory=dict_row, options="-c search_path=pg_catalog,pg_temp"
        ) as observer,
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as caller,
        psycopg.connect(dsn, autocommit=True) as listener,
    ):
        seed_jobs(observer)
        if hostile:
            observer.execute(LOOKALIKES)
            caller.execute(HOSTILE_SEARCH_PATH)
        listen_to_queues(listener, QUEUES_HEARD)
        listener.execute('LISTEN "jobq.done"')
        yield Seeded(dsn, caller, observer, listener, record_notices(caller))


@pytest.fixture(scope="module")
def seeded(pg_server: ThrowawayPostgres, jobq_template: NoopExecutor) -> Iterator[Seeded]:
    """One database for the module, with jobs in every state."""
    with seeded_database(pg_server, jobq_template, "pgjobq_bad_input", hostile=False) as database:
        yield database


@pytest.fixture(scope="module")
def hostile(pg_server: ThrowawayPostgres, jobq_template: NoopExecutor) -> Iterator[Seeded]:
    """Like seeded, with look-alikes in public and a caller whose search_path puts public first."""
    with seeded_database(pg_server, jobq_template, "pgjobq_bad_input_hostile", hostile=True) as database:
        yield database


# ---------------------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------------------


class Refusal(NamedTuple):
    sqlstate: str | None
    message: str


def refusal(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] | None) -> Refusal:
    """The SQLSTATE and primary message of the error query raises; fails the test if it succeeds."""
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(query, params)
    return Refusal(raised.value.sqlstate, raised.value.diag.message_primary or "")


DURABLE_ROWS = """
SELECT 'jobq.job_steps' AS table_name, to_jsonb(s)::text AS row_value FROM jobq.job_steps AS s
UNION ALL SELECT 'jobq.signals', to_jsonb(g)::text FROM jobq.signals AS g
UNION ALL SELECT 'jobq.signal_waits', to_jsonb(w)::text FROM jobq.signal_waits AS w
UNION ALL SELECT 'jobq.job_progress', to_jsonb(p)::text FROM jobq.job_progress AS p
ORDER BY 1, 2
"""


def snapshot(conn: Db) -> tuple[JobsSnapshot, list[dict[str, Any]], list[dict[str, Any]]]:
    """Every job and the id sequence (jobs_snapshot), every row of jobq.queue_settings, and (0.11.0) every
    row of the tables of durable execution (steps, signals, waits for a signal, progress)."""
    settings = conn.execute("SELECT s.* FROM jobq.queue_settings AS s ORDER BY s.queue").fetchall()
    return jobs_snapshot(conn), settings, conn.execute(DURABLE_ROWS).fetchall()


def names(message: str, argument: str) -> bool:
    """Whether message names argument as a word of its own ('id' is not named by 'ids')."""
    return re.search(rf"(?<![\w\[]){re.escape(argument)}(?![\w\[])", message) is not None


# ---------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", CASES)
def test_a_bad_argument_is_refused_by_name_and_changes_nothing(seeded: Seeded, bad: Case) -> None:
    params = resolve(seeded.observer, bad.params)
    before = snapshot(seeded.observer)
    notifications_before_marker(seeded.listener, seeded.observer)

    refused = refusal(seeded.caller, bad.query, params)

    assert (refused.sqlstate, names(refused.message, bad.argument)) == (bad.sqlstate, True), refused.message
    assert snapshot(seeded.observer) == before
    assert notifications_before_marker(seeded.listener, seeded.observer) == []


@pytest.mark.parametrize("bad", CASES)
@pytest.mark.main_targets  # the table itself runs on every major; this pass adds the hostile search_path
def test_under_a_hostile_search_path_a_bad_argument_is_refused_the_same_way(
    hostile: Seeded, bad: Case
) -> None:
    """search_path = public, pg_catalog, pg_temp, with look-alikes in public: the refusal is the one a clean
    search_path gets, no look-alike runs, and nothing changes."""
    params = resolve(hostile.observer, bad.params)
    before = snapshot(hostile.observer)
    notifications_before_marker(hostile.listener, hostile.observer)
    hostile.notices.clear()

    clean = refusal(hostile.observer, bad.query, params)
    hijacked = refusal(hostile.caller, bad.query, params)

    assert hijacked == clean
    assert (clean.sqlstate, names(clean.message, bad.argument)) == (bad.sqlstate, True), clean.message
    assert hostile.notices == []
    assert snapshot(hostile.observer) == before
    assert notifications_before_marker(hostile.listener, hostile.observer) == []


def test_the_look_alikes_do_run_for_a_caller_on_the_hostile_search_path(hostile: Seeded) -> None:
    hostile.notices.clear()

    row = hostile.caller.execute(
        "SELECT now() = 'epoch' AS clock_faked, 'Emails'::text !~ '^[a-z]+$'::text AS match_faked,"
        " jsonb_typeof('[1]'::jsonb) AS typeof_faked"
    ).fetchone()

    assert row == {"clock_faked": True, "match_faked": False, "typeof_faked": "object"}
    assert sorted(hostile.notices) == [
        "hijacked: jsonb_typeof()",
        "hijacked: now()",
        "hijacked: text !~ text",
    ]


@pytest.mark.parametrize("bad", CLAIM_CASES)
def test_a_refused_claim_leaves_every_queued_job_unlocked_while_its_transaction_is_open(
    seeded: Seeded, bad: Case
) -> None:
    queued, unlocked = queued_rows_unlocked(seeded.observer)
    assert queued == unlocked > 0

    with psycopg.connect(seeded.dsn) as claimer:
        refused = refusal(claimer, bad.query, resolve(seeded.observer, bad.params))
        assert (refused.sqlstate, claimer.info.transaction_status) == (
            bad.sqlstate,
            TransactionStatus.INERROR,
        )

        assert queued_rows_unlocked(seeded.observer) == (queued, queued)
        claimer.rollback()


def test_the_lock_check_sees_the_job_an_open_claim_holds(seeded: Seeded) -> None:
    before = snapshot(seeded.observer)
    queued, _ = queued_rows_unlocked(seeded.observer)

    with psycopg.connect(seeded.dsn) as claimer:
        claimed = claimer.execute("SELECT id FROM jobq.claim('default', 1, 'probe')").fetchall()

        assert (len(claimed), queued_rows_unlocked(seeded.observer)) == (1, (queued, queued - 1))
        claimer.rollback()
    assert snapshot(seeded.observer) == before


def test_the_notification_check_hears_a_committed_enqueue(db: Db, connect: Connect) -> None:
    listener = connect()
    listen_to_queues(listener, ["default"])

    enqueue(db)

    assert notifications_before_marker(listener, db) == [("jobq_default", "")]


def test_a_repeated_complete_with_the_same_lease_is_accepted_and_changes_nothing(seeded: Seeded) -> None:
    params = resolve(seeded.observer, (id_of("done"), lease_of("done")))
    before = snapshot(seeded.observer)
    notifications_before_marker(seeded.listener, seeded.observer)

    seeded.caller.execute("SELECT jobq.complete(%s, %s)", params)

    assert snapshot(seeded.observer) == before
    assert notifications_before_marker(seeded.listener, seeded.observer) == []


@pytest.mark.parametrize(
    ("query", "payload", "sqlstate", "message", "detail"),
    [
        pytest.param(
            "SELECT jobq.enqueue('default', %s)",
            Jsonb({"text": "a\x00b"}),
            "22P05",
            "unsupported Unicode escape sequence",
            "\\u0000 cannot be converted to text.",
            id="enqueue-payload-with-a-nul-character",
        ),
        pytest.param(
            "SELECT jobq.enqueue('default', %s)",
            Jsonb({"ratio": float("nan")}),
            "22P02",
            "invalid input syntax for type json",
            'Token "NaN" is invalid.',
            id="enqueue-payload-with-nan",
        ),
        pytest.param(
            "SELECT jobq.enqueue('default', %s)",
            Jsonb({"ratio": float("inf")}),
            "22P02",
            "invalid input syntax for type json",
            'Token "Infinity" is invalid.',
            id="enqueue-payload-with-infinity",
        ),
        pytest.param(
            "SELECT jobq.enqueue_many('default', %s)",
            [Jsonb({}), Jsonb({"text": "\x00"})],
            "22P05",
            "unsupported Unicode escape sequence",
            "\\u0000 cannot be converted to text.",
            id="enqueue-many-payload-with-a-nul-character",
        ),
    ],
)
def test_a_payload_postgresql_cannot_parse_as_jsonb_is_refused_by_postgresql_and_changes_nothing(
    seeded: Seeded, query: str, payload: Any, sqlstate: str, message: str, detail: str
) -> None:
    """\\u0000 and NaN (or Infinity) have no jsonb form: PostgreSQL refuses the parameter while parsing it,
    before jobq's function runs.  So the SQLSTATE and message are PostgreSQL's own (22P05, 22P02), and the
    message cannot name jobq's argument; nothing changes all the same."""
    before = snapshot(seeded.observer)
    notifications_before_marker(seeded.listener, seeded.observer)

    with pytest.raises(psycopg.Error) as raised:
        seeded.caller.execute(query, (payload,))

    diag = raised.value.diag
    assert (raised.value.sqlstate, diag.message_primary, diag.message_detail) == (sqlstate, message, detail)
    assert snapshot(seeded.observer) == before
    assert notifications_before_marker(seeded.listener, seeded.observer) == []


@pytest.mark.parametrize(
    ("error", "max_attempts", "status"),
    [
        pytest.param("x" * 10_000_000, 3, "queued", id="ascii-with-attempts-left"),
        pytest.param("é" * 5_000_000, 1, "failed", id="two-byte-characters-on-the-last-attempt"),
    ],
)
def test_a_10_mb_error_is_accepted_stored_cut_to_2000_characters_and_the_job_leaves_running(
    db: Db, error: str, max_attempts: int, status: str
) -> None:
    assert len(error.encode()) == 10_000_000
    job_id = enqueue(db, max_attempts=max_attempts)
    lease = claim_one(db)["lease"]

    db.execute("SELECT jobq.fail(%s, %s, %s)", (job_id, error, lease))

    row = db.execute(
        "SELECT status, length(last_error) AS characters, last_error = %s AS starts_the_error"
        " FROM jobq.jobs WHERE id = %s",
        (error[:2000], job_id),
    ).fetchone()
    assert row == {"status": status, "characters": 2000, "starts_the_error": True}


def test_the_argument_matcher_tells_an_argument_from_a_longer_word() -> None:
    assert names("id must not be NULL", "id")
    assert not names("ids must not be NULL", "id")
    assert names("payloads[2] must not be NULL", "payloads[2]")
    assert not names("payloads[2] must not be NULL", "payloads")


def test_the_snapshot_sees_a_change_of_the_queue_settings(seeded: Seeded) -> None:
    before = snapshot(seeded.observer)

    with seeded.observer.transaction(force_rollback=True):
        seeded.observer.execute("SELECT jobq.configure_queue('emails', backoff_jitter => 0.5)")
        assert snapshot(seeded.observer) != before

    assert snapshot(seeded.observer) == before


def test_the_snapshot_sees_a_row_of_durable_execution(seeded: Seeded) -> None:
    before = snapshot(seeded.observer)

    with seeded.observer.transaction(force_rollback=True):
        seeded.observer.execute("SELECT jobq.signal('approval')")
        assert snapshot(seeded.observer) != before

    assert snapshot(seeded.observer) == before


def test_the_notification_check_hears_a_watched_job_finishing(db: Db, connect: Connect) -> None:
    listener = connect()
    listen_to_queues(listener, [])
    listener.execute('LISTEN "jobq.done"')
    job_id = enqueue(db)
    db.execute("SELECT jobq.watch(%s)", (job_id,))

    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    assert notifications_before_marker(listener, db) == [("jobq.done", str(job_id))]


# What a call leaves in the jobs, in the columns its options can set: every job in id order, without ids
# and moments (a lease as its length, run_at as its delay).
JOBS_LEFT = """
SELECT j.queue, j.payload, j.status, j.priority, j.run_at - j.created_at AS delay, j.attempts,
       j.max_attempts, j.lease, j.locked_by, j.lease_expires_at - j.locked_at AS lease_length,
       j.finished_at IS NOT NULL AS finished, j.headers, j.control, r.result,
       (SELECT count(*) FROM jobq.unique_keys AS u WHERE u.job_id = j.id) AS unique_keys
  FROM jobq.jobs AS j
  LEFT JOIN jobq.results AS r ON r.id = j.id
 ORDER BY j.id
"""


def left_by(db: Db, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """JOBS_LEFT after query, read in query's transaction, which is then rolled back."""
    with db.transaction(force_rollback=True):
        db.execute(query, params)
        return db.execute(JOBS_LEFT).fetchall()


@pytest.mark.parametrize(
    ("with_null", "without"),
    [
        (
            "SELECT jobq.enqueue('default', '{}', max_attempts => NULL)",
            "SELECT jobq.enqueue('default', '{}')",
        ),
        (
            "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], max_attempts => NULL)",
            "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[])",
        ),
        (
            "SELECT jobq.enqueue('default', '{}', unique_key => NULL, headers => NULL)",
            "SELECT jobq.enqueue('default', '{}')",
        ),
        (
            "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], unique_keys => NULL, headers => NULL)",
            "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[])",
        ),
        (
            "SELECT * FROM jobq.claim('default', 1, 'w1', lease_timeout => NULL)",
            "SELECT * FROM jobq.claim('default', 1, 'w1')",
        ),
        (
            "SELECT * FROM jobq.complete_and_claim(%(ids)s, %(leases)s, 'default', 1, 'w1',"
            " lease_timeout => NULL)",
            "SELECT * FROM jobq.complete_and_claim(%(ids)s, %(leases)s, 'default', 1, 'w1')",
        ),
        (
            "SELECT * FROM jobq.complete_and_claim(%(ids)s, %(leases)s, 'default', 1, 'w1', results => NULL)",
            "SELECT * FROM jobq.complete_and_claim(%(ids)s, %(leases)s, 'default', 1, 'w1')",
        ),
        (
            "SELECT * FROM jobq.complete_many(%(ids)s, %(leases)s, results => NULL)",
            "SELECT * FROM jobq.complete_many(%(ids)s, %(leases)s)",
        ),
    ],
    ids=[
        "enqueue-max-attempts",
        "enqueue-many-max-attempts",
        "enqueue-job-options",
        "enqueue-many-job-options",
        "claim-lease-timeout",
        "complete-and-claim-lease-timeout",
        "complete-and-claim-results",
        "complete-many-results",
    ],
)
def test_a_null_option_is_accepted_and_means_the_default(db: Db, with_null: str, without: str) -> None:
    """0.6.0 made these NULLs valid: the queue's setting, else the default (and NULL refused them before)."""
    running = enqueue(db, "default", {"job": "running"})
    lease = claim_one(db)["lease"]
    enqueue(db, "default", {"job": "queued"})
    params = {"ids": [running], "leases": [lease]}
    before = db.execute(JOBS_LEFT).fetchall()

    left = left_by(db, with_null, params)

    assert left != before  # JOBS_LEFT sees what the call did
    assert left == left_by(db, without, params)


def test_a_queue_configured_with_every_setting_null_keeps_the_defaults(db: Db) -> None:
    enqueue(db)  # the queue shows in jobq.queues, on the defaults
    unconfigured = db.execute("SELECT * FROM jobq.queues").fetchall()

    configured = db.execute(
        """
        SELECT * FROM jobq.configure_queue('default', max_attempts => NULL, backoff_base => NULL,
                                           backoff_max => NULL, backoff_jitter => NULL,
                                           lease_timeout => NULL, timeout => NULL, concurrency => NULL,
                                           key_concurrency => NULL, key_order => NULL, rate_limit => NULL,
                                           rate_interval => NULL)
        """
    ).fetchall()

    assert [row.pop("configured") for row in unconfigured + configured] == [False, True]
    assert configured == unconfigured
