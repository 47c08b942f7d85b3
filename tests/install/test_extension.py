"""The extension as installed: who can call it and how, comments, pinned search_path, dumps, plans."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.errors import Diagnostic
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, fresh_database, login_role
from helpers.sqlhelpers import Db, scalar

# -- calling the functions ----------------------------------------------------


def test_a_role_without_grants_can_neither_call_the_functions_nor_read_the_jobs(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    dbname = scalar(db, "SELECT current_database()")
    with login_role(db) as role, connect_as(pg_server, dbname, role) as stranger:
        refused = []
        for query in (
            "SELECT jobq.enqueue('default', '{}')",
            "SELECT * FROM jobq.claim('default', 1, 'w1')",
            "SELECT count(*) FROM jobq.jobs",
        ):
            with pytest.raises(psycopg.Error) as raised:
                stranger.execute(query)
            refused.append(raised.value.sqlstate)

    assert refused == ["42501", "42501", "42501"]


def test_the_functions_work_with_an_empty_search_path(db: Db) -> None:
    db.execute("SET search_path = ''")

    job_id = scalar(db, "SELECT jobq.enqueue('default', '{}', max_attempts => 1)")
    scalar(db, "SELECT jobq.enqueue_many('default', ARRAY['{}', '{}']::jsonb[])")
    leases = {row["id"]: row["lease"] for row in db.execute("SELECT * FROM jobq.claim('default', 3, 'w1')")}
    db.execute("SELECT jobq.heartbeat(%s, %s)", (job_id, leases[job_id]))
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, leases.pop(job_id)))
    done = db.execute("SELECT jobq.complete_many(%s, %s)", (list(leases), list(leases.values()))).fetchall()
    db.execute("SELECT * FROM jobq.reap()")
    redriven = db.execute("SELECT jobq.retry_failed('default')").fetchall()
    stats = db.execute("SELECT queued, done, failed FROM jobq.stats()").fetchall()

    assert (len(done), len(redriven)) == (2, 1)
    assert stats == [{"queued": 1, "done": 2, "failed": 0}]


# -- the catalog --------------------------------------------------------------

# The extension's members, plus the indexes and the trigger of jobq.jobs (which belong to the table).
EXTENSION_OBJECTS = """
    SELECT d.classid, d.objid
      FROM pg_depend AS d JOIN pg_extension AS e ON d.refobjid = e.oid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'pgjobq'
    UNION ALL
    SELECT 'pg_class'::regclass, i.indexrelid
      FROM pg_index AS i
     WHERE i.indrelid = 'jobq.jobs'::regclass
       AND NOT EXISTS (SELECT FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)
    UNION ALL
    SELECT 'pg_trigger'::regclass, t.oid
      FROM pg_trigger AS t
     WHERE t.tgrelid = 'jobq.jobs'::regclass AND NOT t.tgisinternal
"""


def test_every_object_of_the_extension_has_a_comment(db: Db) -> None:
    rows = db.execute(
        f"""
        SELECT pg_describe_object(o.classid, o.objid, 0) AS object,
               EXISTS (SELECT FROM pg_description AS d
                        WHERE d.classoid = o.classid AND d.objoid = o.objid AND d.objsubid = 0
                          AND d.description <> '') AS commented
          FROM ({EXTENSION_OBJECTS}) AS o
        """
    ).fetchall()

    objects = {row["object"] for row in rows}
    assert {
        "schema jobq",
        "table jobq.jobs",
        "sequence jobq.jobs_id_seq",
        "index jobq.jobs_claim_idx",
        "index jobq.jobs_status_idx",
        "table jobq._waiters",
        "function jobq.register_waiter(text,text,interval)",
        "function jobq.checkpoint(bigint,bigint,text,jsonb)",
        "table jobq.job_steps",
        "function jobq.claim(text,integer,text,interval)",
        "table jobq._claim_hints",
    } <= objects
    functions = scalar(db, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'jobq'::regnamespace")
    assert sum(name.startswith("function ") for name in objects) == functions
    assert sorted(row["object"] for row in rows if not row["commented"]) == []


def test_every_column_of_the_jobs_table_has_a_comment(db: Db) -> None:
    uncommented = db.execute(
        """
        SELECT a.attname FROM pg_attribute AS a
         WHERE a.attrelid = 'jobq.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
           AND col_description(a.attrelid, a.attnum) IS NULL
        """
    ).fetchall()

    assert uncommented == []


def test_every_function_pins_its_search_path(db: Db) -> None:
    rows = db.execute(
        """
        SELECT p.oid::regprocedure::text AS function,
               coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false) AS pinned
          FROM pg_proc AS p WHERE p.pronamespace = 'jobq'::regnamespace
        """
    ).fetchall()

    assert len(rows) > 10
    assert [row["function"] for row in rows if not row["pinned"]] == []


def test_the_data_tables_and_the_id_sequence_are_marked_for_pg_dump(db: Db) -> None:
    config = scalar(db, "SELECT extconfig::regclass[]::text[] FROM pg_extension WHERE extname = 'pgjobq'")

    assert sorted(config) == [
        "jobq.concurrency_keys",
        "jobq.deadlines",
        "jobq.job_deps",
        "jobq.job_progress",
        "jobq.job_steps",
        "jobq.job_waits",
        "jobq.jobs",
        "jobq.jobs_id_seq",
        "jobq.queue_settings",
        "jobq.results",
        "jobq.schedule_settings",
        "jobq.signal_waits",
        "jobq.signals",
        "jobq.unique_keys",
    ]


# -- pg_dump and pg_restore ---------------------------------------------------

JOBS_DIGEST = """
    SELECT count(*) AS jobs, md5(string_agg(j::text, E'\\n' ORDER BY j.id)) AS digest FROM jobq.jobs AS j
"""


def enqueue_jobs_of_every_kind(db: Db, connect_rollback: psycopg.Connection[Any]) -> None:
    """Queued (now and later), running, done and failed jobs; and some ids burnt by a rollback."""
    db.execute(
        """
        SELECT jobq.enqueue('emails', '{"to": "ada"}'),
               jobq.enqueue('emails', '{"to": "bob"}', priority => 5, max_attempts => 1),
               jobq.enqueue('reports', '{"day": "monday", "nested": {"a": [1, 2]}}',
                            run_at => now() + interval '1 day'),
               jobq.enqueue_many('bulk', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
        SELECT jobq.fail(c.id, 'it''s broken', c.lease) FROM jobq.claim('emails', 1, 'w1') AS c;
        SELECT jobq.complete(c.id, c.lease) FROM jobq.claim('bulk', 1, 'w1') AS c;
        SELECT * FROM jobq.claim('bulk', 1, 'w2');
        """
    )
    connect_rollback.execute("SELECT jobq.enqueue_many('bulk', ARRAY['{}', '{}', '{}']::jsonb[])")
    connect_rollback.rollback()  # the sequence moved on; the dump must keep its position, not max(id)


@contextmanager
def restored_copy(db: Db, dsn: str, pg_server: ThrowawayPostgres) -> Iterator[str]:
    """pg_dump of dsn's database restored into a new database (dropped afterwards); yields its name."""
    dump = subprocess.run(
        [str(pg_server.bindir / "pg_dump"), "--format=custom", "--dbname", dsn],
        capture_output=True,
        check=True,
        timeout=60,
    )
    with fresh_database(db) as restored_name:
        subprocess.run(
            [
                str(pg_server.bindir / "pg_restore"),
                *("--exit-on-error", "--dbname", pg_server.dsn(restored_name)),
            ],
            input=dump.stdout,
            capture_output=True,
            check=True,
            timeout=60,
        )
        yield restored_name


def test_pg_dump_and_restore_keep_every_job_and_the_id_sequence(
    db: Db, dsn: str, pg_server: ThrowawayPostgres
) -> None:
    with psycopg.connect(dsn, autocommit=False) as burner:
        enqueue_jobs_of_every_kind(db, burner)
    statuses = {row["status"] for row in db.execute("SELECT status FROM jobq.jobs")}
    assert statuses == {"queued", "running", "done", "failed"}
    original = db.execute(JOBS_DIGEST).fetchone()

    with (
        restored_copy(db, dsn, pg_server) as restored_name,
        connect_as(pg_server, restored_name) as restored,
    ):
        restored_jobs = restored.execute(JOBS_DIGEST).fetchone()
        restored_max = scalar(restored, "SELECT max(id) FROM jobq.jobs")
        restored_next = scalar(restored, "SELECT jobq.enqueue('emails', '{}')")
        member = scalar(
            restored,
            "SELECT pg_describe_object(classid, objid, 0) FROM pg_depend"
            " WHERE refclassid = 'pg_extension'::regclass AND objid = 'jobq.jobs'::regclass",
        )
    original_next = scalar(db, "SELECT jobq.enqueue('emails', '{}')")

    assert restored_jobs == original
    assert member == "table jobq.jobs"
    assert restored_next > restored_max
    assert restored_next == original_next


def test_pg_dump_and_restore_keep_the_levels_granted(db: Db, dsn: str, pg_server: ThrowawayPostgres) -> None:
    with login_role(db) as producer, login_role(db) as worker:
        db.execute("SELECT jobq.grant_producer(%s), jobq.grant_worker(%s)", (producer, worker))
        with (
            restored_copy(db, dsn, pg_server) as restored_name,
            connect_as(pg_server, restored_name) as restored,
        ):
            privileges = restored.execute(
                """
                SELECT r.rolname,
                       has_function_privilege(r.oid, 'jobq.enqueue_many(text, jsonb[], integer, timestamptz,'
                                              ' integer, text[], text, text, jsonb, text[], text)',
                                              'EXECUTE') AS enqueue,
                       has_function_privilege(r.oid, 'jobq.claim(text, integer, text, interval)',
                                              'EXECUTE') AS claim
                  FROM pg_roles AS r WHERE r.rolname IN (%s, %s) ORDER BY r.rolname = %s DESC
                """,
                (producer, worker, producer),
            ).fetchall()

    assert privileges == [
        {"rolname": producer, "enqueue": True, "claim": False},
        {"rolname": worker, "enqueue": False, "claim": True},
    ]


LEVEL_PRIVILEGES = """
    SELECT r.rolname,
           has_function_privilege(r.oid, 'jobq.enqueue(text, jsonb, integer, timestamptz, integer,'
                                         ' text, text, text, jsonb, text, bigint[], text, text, boolean)',
                                  'EXECUTE')
               AS enqueue,
           has_function_privilege(r.oid, 'jobq.signal(text, jsonb, interval)', 'EXECUTE') AS signal,
           has_function_privilege(r.oid, 'jobq.checkpoint(bigint, bigint, text, jsonb)', 'EXECUTE')
               AS checkpoint,
           has_function_privilege(r.oid, 'jobq.steps(bigint)', 'EXECUTE') AS steps,
           has_function_privilege(r.oid, 'jobq.enqueue_flow(text, jsonb)', 'EXECUTE') AS enqueue_flow,
           has_function_privilege(r.oid, 'jobq.claim_any(text[], integer, text, interval)', 'EXECUTE')
               AS claim_any,
           has_function_privilege(r.oid, 'jobq.job(bigint)', 'EXECUTE') AS job,
           has_function_privilege(r.oid, 'jobq.claim(text, integer, text, interval)', 'EXECUTE') AS claim,
           has_function_privilege(r.oid, 'jobq.complete_and_claim(bigint[], bigint[], text, integer, text,'
                                         ' interval, jsonb[])', 'EXECUTE') AS complete_and_claim,
           has_function_privilege(r.oid, 'jobq.snooze(bigint, bigint, interval)', 'EXECUTE') AS snooze,
           has_function_privilege(r.oid, 'jobq.fail(bigint, text, bigint, interval, boolean)', 'EXECUTE')
               AS fail,
           has_function_privilege(r.oid, 'jobq.reap(interval, interval)', 'EXECUTE') AS reap,
           has_function_privilege(r.oid, 'jobq.version()', 'EXECUTE') AS version
      FROM pg_roles AS r WHERE r.rolname IN (%s, %s) ORDER BY r.rolname = %s DESC
"""


def test_after_an_upgrade_by_a_superuser_pg_dump_and_restore_keep_the_levels_granted_before_it(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with login_role(db) as producer, login_role(db) as worker, fresh_database(db) as dbname:
        with connect_as(pg_server, dbname) as superuser:
            superuser.execute("CREATE EXTENSION pgjobq VERSION '0.3.0'")
            superuser.execute("SELECT jobq.grant_producer(%s), jobq.grant_worker(%s)", (producer, worker))
            superuser.execute("ALTER EXTENSION pgjobq UPDATE")
            upgraded = superuser.execute(LEVEL_PRIVILEGES, (producer, worker, producer)).fetchall()
        with (
            restored_copy(db, pg_server.dsn(dbname), pg_server) as restored_name,
            connect_as(pg_server, restored_name) as restored,
        ):
            privileges = restored.execute(LEVEL_PRIVILEGES, (producer, worker, producer)).fetchall()

    producing = {
        "enqueue": True,
        "signal": True,
        "checkpoint": False,
        "steps": False,
        "enqueue_flow": True,
        "claim_any": False,
        "job": False,  # looking jobs up by id: only with grant_producer(role, see_jobs => true)
        "claim": False,
        "complete_and_claim": False,
        "snooze": False,
        "fail": False,
        "reap": False,
        "version": True,
    }
    working = {
        "enqueue": False,
        "signal": True,
        "checkpoint": True,
        "steps": True,
        "enqueue_flow": False,
        "claim_any": True,
        "job": True,
        "claim": True,
        "complete_and_claim": True,
        "snooze": True,
        "fail": True,
        "reap": True,
        "version": True,
    }
    expected = [{"rolname": producer, **producing}, {"rolname": worker, **working}]
    assert upgraded == expected
    assert privileges == expected


# -- plans ----------------------------------------------------------------------


def test_the_claim_uses_the_partial_index_and_locks_rows(db: Db) -> None:
    for queue in ("default", "other"):
        db.execute(
            "SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('n', g)))"
            " FROM generate_series(1, 20000) AS g",
            (queue,),
        )
    db.execute("ANALYZE jobq.jobs")
    notices: list[str] = []

    def keep(diagnostic: Diagnostic) -> None:
        notices.append(diagnostic.message_primary or "")

    db.add_notice_handler(keep)
    db.execute(
        """
        LOAD 'auto_explain';
        SET auto_explain.log_min_duration = 0;
        SET auto_explain.log_nested_statements = on;
        SET auto_explain.log_level = 'notice';
        SET client_min_messages = notice;
        """
    )

    claimed = db.execute("SELECT id FROM jobq.claim('default', 10, 'w1')").fetchall()

    plans = [notice for notice in notices if "SKIP LOCKED" in notice]
    assert len(claimed) == 10
    assert len(plans) == 1, notices
    plan = plans[0]
    assert "jobs_claim_idx" in plan, plan
    assert "LockRows" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
