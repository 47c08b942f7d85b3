"""A session opened before ``ALTER EXTENSION pgjobq UPDATE`` keeps working after it.

A worker keeps its connections across an update: the previous release's workers for as long as they run,
this release's too.  PostgreSQL keeps per session the compiled PL/pgSQL functions and their statements'
plans, and does not always notice what an update changed: a statement that selects ``x.*`` from a function
returning ``jobq.jobs`` keeps the columns it had when it was planned, after the table gains one, until its
function is re-created (which makes every session compile it again).  So each of the previous release's
statements that a worker or a producer sends (its queries.sql, read from git history at that release) is
sent in one session WARM times at the previous release's extension version, then once after the update
from another session.  Each test is one statement; the rolling-upgrade tests
(test_rolling_upgrade.py) show what a failing one does to real workers.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres
from upgrade.releases import PreviousRelease

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Db

# executions before the update: past psycopg's prepare_threshold (5), and PL/pgSQL's switch of a
# statement to a generic plan (after 5 custom ones)
WARM = 6

Held = tuple[int, int]  # a running job's (id, lease)


def one(held: Callable[[], Held]) -> dict[str, Any]:
    job_id, lease = held()
    return {"id": job_id, "lease": lease}


def many(held: Callable[[], Held]) -> dict[str, Any]:
    job_id, lease = held()
    return {"ids": [job_id], "leases": [lease]}


# Each statement's parameters, as the previous release's client sends them by default; held() claims a
# job of queue "held" (from a session opened after the update) for the statements that settle one.
PARAMETERS: dict[str, Callable[[Callable[[], Held]], dict[str, Any]]] = {
    "enqueue": lambda held: {
        "queue": "q", "payload": "{}", "priority": 0, "run_at": None, "max_attempts": None,
        "unique_key": None, "unique_scope": "active", "on_conflict": "return", "headers": None,
        "concurrency_key": None, "depends_on": None, "on_parent_failure": "cancel",
    },
    "enqueue_many": lambda held: {
        "queue": "q", "payloads": "[{}, {}]", "priority": 0, "run_at": None, "max_attempts": None,
        "unique_keys": None, "unique_scope": "active", "on_conflict": "return", "headers": None,
        "concurrency_keys": None,
    },
    "claim": lambda held: {"queue": "q", "n": 2, "worker": "w", "lease_timeout": None},
    "claim_any": lambda held: {"queues": ["q", "r"], "n": 2, "worker": "w", "lease_timeout": None},
    "complete_and_claim": lambda held: {
        **many(held), "queue": "q", "n": 2, "worker": "w", "lease_timeout": None, "results": None,
    },
    "complete": lambda held: {**one(held), "result": None},
    "complete_many": lambda held: {**many(held), "results": None},
    "fail": lambda held: {**one(held), "error": "boom", "retry_in": None},
    "heartbeat": one,
    "heartbeat_many": many,
    "heartbeat_status": many,
    "release": one,
    "snooze": lambda held: {**one(held), "delay": "1 second"},
    "reap": lambda held: {"stale": "1 hour"},
    # not wait and wait_any: pgjobq-py 1.2.0's workers sent them to extension 0.9.0 only, and its low-level
    # pgjobq.register_waiter(conn, ...), which sent wait, fails on 0.11.0, where jobq.wait(queue, worker,
    # up_to) is gone as 0.10.0 announced (docs/howto/upgrading.md says so)
    "tick": lambda held: {},
    "channel": lambda held: {"queue": "q"},
    "stats": lambda held: {},
}  # fmt: skip

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@pytest.fixture(scope="session")
def previous_statements(previous: PreviousRelease) -> dict[str, str]:
    """The previous release's named statements (python/pgjobq/queries.sql at its commit)."""
    text = subprocess.run(
        ["git", "show", f"{previous.commit}:python/pgjobq/queries.sql"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def outcome(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> str:
    """ "ok", or the error the statement raised (its SQLSTATE, first line and detail)."""
    try:
        conn.execute(statement, params).fetchall()
    except psycopg.Error as exc:
        return f"{exc.sqlstate}: {str(exc).splitlines()[0]} ({exc.diag.message_detail})"
    return "ok"


def test_every_statement_tested_is_one_the_previous_release_sends(
    previous_statements: dict[str, str],
) -> None:
    assert sorted(set(PARAMETERS) - set(previous_statements)) == []


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_a_session_opened_before_the_update_runs_the_previous_release_statement_after_it(
    name: str,
    previous: PreviousRelease,
    previous_statements: dict[str, str],
    db: Db,
    pg_server: ThrowawayPostgres,
) -> None:
    statement = previous_statements[name]
    with fresh_database(db) as dbname:

        def claimer(conn: Db) -> Callable[[], Held]:
            def held() -> Held:
                row = conn.execute("SELECT id, lease FROM jobq.claim('held', 1, 'w')").fetchone()
                assert row is not None
                return int(row["id"]), int(row["lease"])

            return held

        with connect_as(pg_server, dbname) as admin, connect_as(pg_server, dbname) as session:
            admin.execute(
                sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(previous.extension_version))
            )
            for queue in ("q", "r", "held"):
                admin.execute("SELECT jobq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[50]))", (queue,))
            before = [outcome(session, statement, PARAMETERS[name](claimer(admin))) for _ in range(WARM)]
            admin.execute("ALTER EXTENSION pgjobq UPDATE")
            with connect_as(pg_server, dbname) as helper:
                after = outcome(session, statement, PARAMETERS[name](claimer(helper)))

    assert before == ["ok"] * WARM
    assert after == "ok"
