"""Bad arguments to every function of the SQL API: the SQLSTATE, a message naming the argument, no change.

The cases only read the jobs table, so they share one database cloned from the session's template for this
module (a clone per case would cost more than all the cases together); each case still proves that jobq.jobs
is the same after it as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from sqlhelpers import Db, table_fingerprint
from throwaway_pg import ThrowawayPostgres

OVER_1_MIB = Jsonb({"data": "x" * (1024 * 1024 + 1)})

# Subqueries naming the seeded jobs, so no case depends on a literal id.
RUNNING = "(SELECT id FROM jobq.jobs WHERE status = 'running')"
RUNNING_LEASE = "(SELECT lease FROM jobq.jobs WHERE status = 'running')"


class Case(NamedTuple):
    id: str
    query: str
    params: tuple[Any, ...]
    sqlstate: str
    argument: str


def case(case_id: str, query: str, sqlstate: str, argument: str, *params: Any) -> Any:
    return pytest.param(Case(case_id, query, params, sqlstate, argument), id=case_id)


CASES = [
    # -- enqueue: queue
    case("enqueue-null-queue", "SELECT jobq.enqueue(NULL, '{}')", "22004", "queue"),
    case("enqueue-empty-queue", "SELECT jobq.enqueue('', '{}')", "22023", "queue"),
    case("enqueue-upper-case-queue", "SELECT jobq.enqueue('Emails', '{}')", "22023", "queue"),
    case("enqueue-queue-with-space", "SELECT jobq.enqueue('my queue', '{}')", "22023", "queue"),
    case("enqueue-queue-with-dash", "SELECT jobq.enqueue('my-queue', '{}')", "22023", "queue"),
    case("enqueue-queue-with-quote", "SELECT jobq.enqueue(%s, '{}')", "22023", "queue", "o'clock"),
    case("enqueue-queue-with-semicolon", "SELECT jobq.enqueue('a;b', '{}')", "22023", "queue"),
    case("enqueue-non-ascii-queue", "SELECT jobq.enqueue('café', '{}')", "22023", "queue"),
    case(
        "enqueue-queue-injection",
        "SELECT jobq.enqueue(%s, '{}')",
        "22023",
        "queue",
        "x'; DROP TABLE jobq.jobs; --",
    ),
    case("enqueue-59-character-queue", "SELECT jobq.enqueue(%s, '{}')", "22023", "queue", "q" * 59),
    # -- enqueue: payload
    case("enqueue-null-payload", "SELECT jobq.enqueue('default', NULL)", "22004", "payload"),
    case("enqueue-array-payload", "SELECT jobq.enqueue('default', '[1, 2]')", "22023", "payload"),
    case("enqueue-string-payload", "SELECT jobq.enqueue('default', '\"text\"')", "22023", "payload"),
    case("enqueue-number-payload", "SELECT jobq.enqueue('default', '42')", "22023", "payload"),
    case("enqueue-json-null-payload", "SELECT jobq.enqueue('default', 'null')", "22023", "payload"),
    case("enqueue-payload-over-1-mib", "SELECT jobq.enqueue('default', %s)", "54000", "payload", OVER_1_MIB),
    # -- enqueue: options
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
        "SELECT jobq.enqueue('default', '{}', run_at => now() + interval '11 years')",
        "22023",
        "run_at",
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
        "enqueue-null-max-attempts",
        "SELECT jobq.enqueue('default', '{}', max_attempts => NULL)",
        "22004",
        "max_attempts",
    ),
    # -- enqueue_many
    case("enqueue-many-null-queue", "SELECT jobq.enqueue_many(NULL, ARRAY['{}']::jsonb[])", "22004", "queue"),
    case("enqueue-many-bad-queue", "SELECT jobq.enqueue_many('No', ARRAY['{}']::jsonb[])", "22023", "queue"),
    case("enqueue-many-null-payloads", "SELECT jobq.enqueue_many('default', NULL)", "22004", "payloads"),
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
        "enqueue-many-names-first-bad-element",
        "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}', '1', NULL]::jsonb[])",
        "22023",
        "payloads[3]",
    ),
    case(
        "enqueue-many-two-dimensional",
        "SELECT jobq.enqueue_many('default', ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[])",
        "22023",
        "payloads",
    ),
    case(
        "enqueue-many-priority-40000",
        "SELECT jobq.enqueue_many('default', ARRAY['{}']::jsonb[], priority => 40000)",
        "22023",
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
    # -- claim
    case("claim-null-queue", "SELECT * FROM jobq.claim(NULL, 1, 'w1')", "22004", "queue"),
    case("claim-bad-queue", "SELECT * FROM jobq.claim('Default', 1, 'w1')", "22023", "queue"),
    case("claim-n-0", "SELECT * FROM jobq.claim('default', 0, 'w1')", "22023", "n"),
    case("claim-n-minus-5", "SELECT * FROM jobq.claim('default', -5, 'w1')", "22023", "n"),
    case("claim-n-1001", "SELECT * FROM jobq.claim('default', 1001, 'w1')", "22023", "n"),
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
    # -- complete, fail, heartbeat
    case("complete-null-id", f"SELECT jobq.complete(NULL, {RUNNING_LEASE})", "22004", "id"),
    case("complete-null-lease", f"SELECT jobq.complete({RUNNING}, NULL)", "22004", "lease"),
    case("fail-null-id", f"SELECT jobq.fail(NULL, 'boom', {RUNNING_LEASE})", "22004", "id"),
    case("fail-null-lease", f"SELECT jobq.fail({RUNNING}, 'boom', NULL)", "22004", "lease"),
    case("fail-null-error", f"SELECT jobq.fail({RUNNING}, NULL, {RUNNING_LEASE})", "22004", "error"),
    case("heartbeat-null-id", f"SELECT jobq.heartbeat(NULL, {RUNNING_LEASE})", "22004", "id"),
    case("heartbeat-null-lease", f"SELECT jobq.heartbeat({RUNNING}, NULL)", "22004", "lease"),
    # -- complete_many
    case(
        "complete-many-null-ids", f"SELECT jobq.complete_many(NULL, ARRAY[{RUNNING_LEASE}])", "22004", "ids"
    ),
    case(
        "complete-many-null-leases", f"SELECT jobq.complete_many(ARRAY[{RUNNING}], NULL)", "22004", "leases"
    ),
    case(
        "complete-many-lengths-differ",
        f"SELECT jobq.complete_many(ARRAY[{RUNNING}], ARRAY[{RUNNING_LEASE}, 1])",
        "22023",
        "leases",
    ),
    case(
        "complete-many-null-element",
        f"SELECT jobq.complete_many(ARRAY[{RUNNING}, NULL], ARRAY[{RUNNING_LEASE}, 1])",
        "22023",
        "ids",
    ),
    # -- reap, retry_failed, channel
    case("reap-null-stale", "SELECT * FROM jobq.reap(NULL)", "22004", "stale"),
    case("reap-zero-stale", "SELECT * FROM jobq.reap('0 s')", "22023", "stale"),
    case("reap-negative-stale", "SELECT * FROM jobq.reap('-1 min')", "22023", "stale"),
    case("retry-failed-bad-queue", "SELECT jobq.retry_failed('Not a queue')", "22023", "queue"),
    case("channel-null-queue", "SELECT jobq.channel(NULL)", "22004", "queue"),
    case("channel-bad-queue", "SELECT jobq.channel('jobs; NOTIFY x')", "22023", "queue"),
]


@pytest.fixture(scope="module")
def shared_db(
    pg_server: ThrowawayPostgres, jobq_template: NoopExecutor
) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """One database for the module, cloned from the template, with a queued, a running and a failed job.

    The running job's lease is stale, so that a reap that did run would change the table.
    """
    dbname = "pgjobq_bad_input"
    janitor = DatabaseJanitor(
        user=pg_server.user,
        host=pg_server.host,
        port=pg_server.port,
        dbname=dbname,
        template_dbname=jobq_template.template_dbname,
    )
    with janitor, psycopg.connect(pg_server.dsn(dbname), autocommit=True, row_factory=dict_row) as conn:
        conn.execute(
            """
            SELECT jobq.enqueue('default', '{"n": 1}', max_attempts => 1),
                   jobq.enqueue('default', '{"n": 2}'),
                   jobq.enqueue('default', '{"n": 3}');
            SELECT jobq.fail(c.id, 'boom', c.lease) FROM jobq.claim('default', 1, 'seed') AS c;
            SELECT * FROM jobq.claim('default', 1, 'seed');
            UPDATE jobq.jobs SET locked_at = now() - interval '1 day' WHERE status = 'running';
            """
        )
        statuses = [row["status"] for row in conn.execute("SELECT status FROM jobq.jobs ORDER BY id")]
        assert statuses == ["failed", "running", "queued"]
        yield conn


def names(message: str, argument: str) -> bool:
    """Whether message names argument as a word of its own ('id' is not named by 'ids')."""
    return re.search(rf"(?<![\w\[]){re.escape(argument)}(?![\w\[])", message) is not None


@pytest.mark.parametrize("bad", CASES)
def test_a_bad_argument_is_refused_by_name_and_changes_nothing(shared_db: Db, bad: Case) -> None:
    before = table_fingerprint(shared_db)

    with pytest.raises(psycopg.Error) as raised:
        shared_db.execute(bad.query, bad.params or None)

    message = raised.value.diag.message_primary or ""
    assert (raised.value.sqlstate, names(message, bad.argument)) == (bad.sqlstate, True), message
    assert table_fingerprint(shared_db) == before


def test_the_argument_matcher_tells_an_argument_from_a_longer_word() -> None:
    assert names("id must not be NULL", "id")
    assert not names("ids must not be NULL", "id")
    assert names("payloads[2] must not be NULL", "payloads[2]")
    assert not names("payloads[2] must not be NULL", "payloads")
