"""Least privilege: nothing for PUBLIC; producer, worker and admin levels handed out by jobq.grant_*."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgjobq

from helpers.sqlhelpers import Db, scalar

LoginRole = Callable[..., tuple[str, psycopg.Connection[Any]]]

# Every way into jobq a role might try, each run in a transaction that is rolled back, so one attempt never
# changes what the next one sees.  {held_id} and {held_lease} name a running job, {own_id} a queued one,
# {other_role} a role to grant to.
ATTEMPTS: dict[str, str] = {
    "enqueue": "SELECT jobq.enqueue('emails', '{{}}')",
    "enqueue with job options": (
        "SELECT jobq.enqueue('emails', '{{}}', unique_key => 'k', unique_scope => 'until_done',"
        " on_conflict => 'skip', headers => '{{}}')"
    ),
    "enqueue_many": "SELECT jobq.enqueue_many('emails', ARRAY['{{}}']::jsonb[])",
    "enqueue_many with unique keys": (
        "SELECT jobq.enqueue_many('emails', ARRAY['{{}}']::jsonb[], unique_keys => ARRAY['k'])"
    ),
    "enqueue with a task": "SELECT jobq.enqueue('emails', '{{}}', task => 'send_welcome')",
    "enqueue_many with a task": "SELECT jobq.enqueue_many('emails', ARRAY['{{}}']::jsonb[], task => 'send')",
    "claim": "SELECT * FROM jobq.claim('emails', 1, 'w1')",
    "complete": "SELECT jobq.complete({held_id}, {held_lease}, '\"result\"')",
    "complete_many": (
        "SELECT jobq.complete_many(ARRAY[{held_id}]::bigint[], ARRAY[{held_lease}]::bigint[],"
        " ARRAY['1']::jsonb[])"
    ),
    "fail": "SELECT jobq.fail({held_id}, 'boom', {held_lease}, retry_in => '1 s')",
    "fail for good": "SELECT jobq.fail({held_id}, 'boom', {held_lease}, retry => false)",
    "snooze": "SELECT jobq.snooze({held_id}, {held_lease}, '1 minute')",
    "heartbeat": "SELECT jobq.heartbeat({held_id}, {held_lease})",
    "heartbeat_many": "SELECT jobq.heartbeat_many(ARRAY[{held_id}]::bigint[], ARRAY[{held_lease}]::bigint[])",
    "heartbeat_status": (
        "SELECT * FROM jobq.heartbeat_status(ARRAY[{held_id}]::bigint[], ARRAY[{held_lease}]::bigint[])"
    ),
    "release": "SELECT jobq.release({held_id}, {held_lease})",
    "complete_and_claim": (
        "SELECT * FROM jobq.complete_and_claim(ARRAY[{held_id}]::bigint[], ARRAY[{held_lease}]::bigint[],"
        " 'emails', 1, 'w1', results => ARRAY['1']::jsonb[])"
    ),
    "wait for work": "SELECT * FROM jobq.register_waiter('emails', 'w1', '1 s')",
    "job": "SELECT * FROM jobq.job({own_id})",
    "wait for a job": "SELECT * FROM jobq.wait({own_id}, '0 s')",
    "watch": "SELECT * FROM jobq.watch({own_id})",
    "channel": "SELECT jobq.channel('emails')",
    "version": "SELECT jobq.version()",
    "reap": "SELECT * FROM jobq.reap()",
    "retry_failed": "SELECT * FROM jobq.retry_failed()",
    "stats": "SELECT * FROM jobq.stats()",
    "purge": "SELECT jobq.purge('1 day')",
    "cancel": "SELECT * FROM jobq.cancel(ARRAY[{held_id}, {own_id}]::bigint[])",
    "pause": "SELECT jobq.pause('emails')",
    "resume": "SELECT jobq.resume('emails')",
    "configure_queue": (
        "SELECT * FROM jobq.configure_queue('emails', max_attempts => 5, unset => ARRAY['timeout'])"
    ),
    "health": "SELECT * FROM jobq.health",
    "queues": "SELECT * FROM jobq.queues",
    "schedules": "SELECT * FROM jobq.schedules",
    "schedule with a task": (
        "SELECT * FROM jobq.schedule('nightly', 'emails', every => '1 hour', task => 'send_report')"
    ),
    "metrics": "SELECT * FROM jobq.metrics()",
    "grant_producer": "SELECT jobq.grant_producer({other_role})",
    "grant_worker": "SELECT jobq.grant_worker({other_role})",
    "grant_admin": "SELECT jobq.grant_admin({other_role})",
    "grant_monitor": "SELECT jobq.grant_monitor({other_role})",
    "revoke_all": "SELECT jobq.revoke_all({other_role})",
    "internal function": "SELECT jobq._retry_delay('emails', 1)",
    "internal function of no level": (
        "SELECT * FROM jobq._acknowledge('{{}}'::bigint[], '{{}}'::bigint[], NULL)"
    ),
    "table SELECT": "SELECT count(*) FROM jobq.jobs",
    "table INSERT": "INSERT INTO jobq.jobs (queue, payload) VALUES ('emails', '{{}}')",
    "table UPDATE": "UPDATE jobq.jobs SET priority = 1",
    "table DELETE": "DELETE FROM jobq.jobs",
    "sequence": "SELECT nextval('jobq.jobs_id_seq')",
    "settings SELECT": "SELECT count(*) FROM jobq.queue_settings",
    "settings INSERT": "INSERT INTO jobq.queue_settings (queue, paused) VALUES ('other', true)",
    "settings UPDATE": "UPDATE jobq.queue_settings SET paused = true",
    "settings DELETE": "DELETE FROM jobq.queue_settings",
    "unique keys SELECT": "SELECT count(*) FROM jobq.unique_keys",
    "unique keys DELETE": "DELETE FROM jobq.unique_keys",
    "results SELECT": "SELECT count(*) FROM jobq.results",
    "results DELETE": "DELETE FROM jobq.results",
    "deadlines SELECT": "SELECT count(*) FROM jobq.deadlines",
    # 0.11.0: durable execution
    "enqueue held": "SELECT jobq.enqueue('emails', '{{}}', hold => true)",
    "unhold": "SELECT jobq.unhold(ARRAY[{own_id}]::bigint[])",
    "signal": "SELECT jobq.signal('approval', '{{\"approved\": true}}')",
    "checkpoint": "SELECT jobq.checkpoint({held_id}, {held_lease}, 'charge', '\"ch_1\"')",
    "sleep": "SELECT jobq.sleep({held_id}, {held_lease}, 'nap', now() + interval '1 hour')",
    "await_signal": "SELECT jobq.await_signal({held_id}, {held_lease}, 'approval', '1 hour')",
    "progress": "SELECT jobq.progress({held_id}, {held_lease}, '{{\"done\": 1}}')",
    "steps": "SELECT * FROM jobq.steps({held_id})",
    "fan_out": (
        "SELECT jobq.fan_out({held_id}, {held_lease}, 'split', '[{{\"payload\": {{}}}}]',"
        " '{{\"payload\": {{}}}}')"
    ),
    "parent_results": "SELECT * FROM jobq.parent_results({own_id})",
    "job steps SELECT": "SELECT count(*) FROM jobq.job_steps",
    "job steps DELETE": "DELETE FROM jobq.job_steps",
    "signals SELECT": "SELECT count(*) FROM jobq.signals",
    "signal waits SELECT": "SELECT count(*) FROM jobq.signal_waits",
    "job progress SELECT": "SELECT count(*) FROM jobq.job_progress",
}

LOOKUP = {"job", "steps", "parent_results", "wait for a job", "watch", "channel", "version"}
PRODUCER = {
    "enqueue",
    "enqueue with job options",
    "enqueue_many",
    "enqueue_many with unique keys",
    "enqueue with a task",
    "enqueue_many with a task",
    "channel",
    "version",
    # 0.11.0: the program that holds jobs or awaits an approval releases them
    *("enqueue held", "unhold", "signal"),
}
WORKER = {
    *("claim", "complete", "complete_many", "complete_and_claim", "fail", "fail for good", "snooze"),
    *("heartbeat", "heartbeat_many", "heartbeat_status", "release", "wait for work", "reap"),
    "metrics",
    # 0.11.0: the durable calls of a running job, fenced by its lease, and a signal to others
    *("checkpoint", "sleep", "await_signal", "progress", "fan_out", "signal"),
    *LOOKUP,
}
# read-only: what a dashboard or an exporter reads, nothing it could change
MONITOR = {
    *LOOKUP,
    *("metrics", "stats", "health", "queues", "schedules"),
    *("table SELECT", "settings SELECT", "unique keys SELECT", "results SELECT", "deadlines SELECT"),
    *("job steps SELECT", "signals SELECT", "signal waits SELECT", "job progress SELECT"),
}
ADMIN = set(ATTEMPTS) - {
    *("grant_producer", "grant_worker", "grant_admin", "grant_monitor", "revoke_all"),
    "internal function of no level",
}

LEVELS: dict[str, set[str]] = {
    "none": set(),
    "producer": PRODUCER,
    "observing producer": PRODUCER | LOOKUP,  # grant_producer(role, see_jobs => true)
    "worker": WORKER,
    "monitor": MONITOR,
    "admin": ADMIN,
}


@pytest.fixture
def login_role(db: Db, dsn: str) -> Iterator[LoginRole]:
    """Creates login roles (optionally given a level) and connects as them; drops them afterwards."""
    created: list[str] = []
    opened: list[psycopg.Connection[Any]] = []

    def create(level: str | None = None, *, autocommit: bool = True) -> tuple[str, psycopg.Connection[Any]]:
        role = f"jobq_{(level or 'role').replace(' ', '_')}_{uuid.uuid4().hex[:8]}"
        db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        created.append(role)
        if level == "observing producer":
            db.execute("SELECT jobq.grant_producer(%s, see_jobs => true)", (role,))
        elif level is not None and level != "none":
            db.execute(sql.SQL("SELECT jobq.{}(%s)").format(sql.Identifier(f"grant_{level}")), (role,))
        conn = psycopg.connect(dsn, user=role, autocommit=autocommit)
        opened.append(conn)
        return role, conn

    yield create
    for conn in opened:
        conn.close()
    for role in created:
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def outcomes(conn: psycopg.Connection[Any], values: dict[str, Any]) -> dict[str, str]:
    """Tries every entry of ATTEMPTS as conn's role: 'allowed', or 'denied' on SQLSTATE 42501."""
    seen = {}
    for name, template in ATTEMPTS.items():
        try:
            conn.execute(template.format(**values))
            seen[name] = "allowed"
        except psycopg.errors.InsufficientPrivilege:
            seen[name] = "denied"
        finally:
            conn.rollback()
    return seen


def test_no_function_is_executable_by_public(db: Db) -> None:
    rows = db.execute(
        """
        SELECT p.oid::regprocedure::text AS function,
               p.proacl IS NULL  -- NULL means the default: EXECUTE for PUBLIC
               OR has_function_privilege('public', p.oid, 'EXECUTE')
               OR EXISTS (SELECT FROM aclexplode(p.proacl) AS a WHERE a.grantee = 0) AS public_can_execute
          FROM pg_proc AS p WHERE p.pronamespace = 'jobq'::regnamespace
        """
    ).fetchall()

    assert len(rows) > 10
    assert [row["function"] for row in rows if row["public_can_execute"]] == []


def test_public_has_no_privilege_on_the_schema_the_table_or_the_sequence(db: Db) -> None:
    row = db.execute(
        """
        SELECT has_schema_privilege('public', 'jobq', 'USAGE, CREATE') AS schema,
               has_table_privilege('public', 'jobq.jobs',
                                   'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') AS table,
               has_sequence_privilege('public', 'jobq.jobs_id_seq', 'USAGE, SELECT, UPDATE') AS sequence
        """
    ).fetchone()

    assert row == {"schema": False, "table": False, "sequence": False}


def test_public_has_no_privilege_on_the_queue_settings_or_the_queues_view(db: Db) -> None:
    row = db.execute(
        """
        SELECT has_table_privilege('public', 'jobq.queue_settings',
                                   'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                   AS settings,
               has_table_privilege('public', 'jobq.queues', 'SELECT, INSERT, UPDATE, DELETE') AS view
        """
    ).fetchone()

    assert row == {"settings": False, "view": False}


def test_public_has_no_privilege_on_any_table_view_or_sequence_of_jobq(db: Db) -> None:
    rows = db.execute(
        """
        SELECT c.oid::regclass::text AS relation
          FROM pg_class AS c
         WHERE c.relnamespace = 'jobq'::regnamespace
           AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('public', c.oid, 'USAGE, SELECT, UPDATE')
                    WHEN c.relkind = ANY (ARRAY['r', 'v', 'm', 'p'])
                    THEN has_table_privilege('public', c.oid,
                                             'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                    ELSE false END
        """
    ).fetchall()
    relations = scalar(db, "SELECT count(*) FROM pg_class WHERE relnamespace = 'jobq'::regnamespace")

    assert relations > 5
    assert [row["relation"] for row in rows] == []


@pytest.mark.parametrize("level", list(LEVELS))
def test_each_level_reaches_exactly_its_functions_and_tables(
    level: str, db: Db, login_role: LoginRole
) -> None:
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[3]))")
    held = db.execute("SELECT id, lease FROM jobq.claim('emails', 1, 'setup')").fetchone()
    assert held is not None
    db.execute("SELECT jobq.configure_queue('emails', timeout => '1 hour')")
    # jobs that make the admin's calls take their every path: a failed job with a unique key (retry_failed
    # gives it its key back), a done one finished long ago (purge frees its key), watched jobs (cancel
    # notifies "jobq.done")
    for key, settle in (("failed-key", "jobq.fail(%s, 'boom', %s)"), ("done-key", "jobq.complete(%s, %s)")):
        db.execute("SELECT jobq.enqueue('setup', '{}', max_attempts => 1, unique_key => %s)", (key,))
        settled = db.execute("SELECT id, lease FROM jobq.claim('setup', 1, 'setup')").fetchone()
        assert settled is not None
        db.execute(f"SELECT {settle}", (settled["id"], settled["lease"]))
    db.execute("UPDATE jobq.jobs SET finished_at = now() - interval '2 days' WHERE status = 'done'")
    other_role, _ = login_role()
    _, conn = login_role(level, autocommit=False)
    own_id = scalar(db, "SELECT jobq.enqueue('emails', '{}')")
    db.execute("SELECT jobq.watch(%s), jobq.watch(%s)", (held["id"], own_id))

    seen = outcomes(
        conn,
        {
            "held_id": held["id"],
            "held_lease": held["lease"],
            "own_id": own_id,
            "other_role": f"'{other_role}'",
        },
    )

    expected = {name: "allowed" if name in LEVELS[level] else "denied" for name in ATTEMPTS}
    assert seen == expected


def test_levels_combine_a_role_can_produce_and_work(db: Db, login_role: LoginRole) -> None:
    role, conn = login_role("producer")
    db.execute("SELECT jobq.grant_worker(%s)", (role,))

    job_id = pgjobq.enqueue(conn, "emails", {"to": "ada"})
    (job,) = pgjobq.claim(conn, "emails", 1, "w1")
    pgjobq.complete(conn, job.id, job.lease)

    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "done"


def test_revoke_all_takes_every_level_back(db: Db, login_role: LoginRole) -> None:
    role, conn = login_role("admin")
    db.execute("SELECT jobq.grant_producer(%s), jobq.grant_worker(%s)", (role, role))

    db.execute("SELECT jobq.revoke_all(%s)", (role,))

    acl_entries = scalar(
        db,
        """
        SELECT count(*) FROM (
            SELECT (aclexplode(proacl)).grantee FROM pg_proc WHERE pronamespace = 'jobq'::regnamespace
            UNION ALL
            SELECT (aclexplode(relacl)).grantee FROM pg_class WHERE relnamespace = 'jobq'::regnamespace
            UNION ALL
            SELECT (aclexplode(nspacl)).grantee FROM pg_namespace WHERE nspname = 'jobq'
        ) AS acl WHERE grantee = %s::regrole
        """,
        (role,),
    )
    assert acl_entries == 0
    with pytest.raises(pgjobq.PermissionDenied):
        pgjobq.enqueue(conn, "emails", {})


def test_the_python_client_maps_a_missing_level_to_permission_denied(login_role: LoginRole) -> None:
    _, producer = login_role("producer")

    with pytest.raises(pgjobq.PermissionDenied):
        pgjobq.claim(producer, "emails", 1, "sneaky")


def test_granting_to_an_unknown_role_or_to_public_is_refused(db: Db) -> None:
    for role in ("no_such_role_anywhere", "public"):
        with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
            db.execute("SELECT jobq.grant_producer(%s)", (role,))


def test_granting_to_null_is_refused_naming_the_role(db: Db) -> None:
    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="role must not be NULL"):
        db.execute("SELECT jobq.grant_worker(NULL)")


def test_a_role_holding_execute_on_a_helper_still_cannot_hand_out_levels(
    db: Db, login_role: LoginRole
) -> None:
    role, conn = login_role("admin")
    other_role, _ = login_role()
    db.execute(
        sql.SQL(
            "GRANT EXECUTE ON FUNCTION jobq.grant_admin(regrole),"
            " jobq._grant_level(regrole, text), jobq._grantee(regrole) TO {}"
        ).format(sql.Identifier(role))
    )

    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="grant or revoke pgjobq privileges"):
        conn.execute("SELECT jobq.grant_admin(%s)", (other_role,))
