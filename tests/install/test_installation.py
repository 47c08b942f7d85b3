"""Installing and upgrading: by a database owner; fresh equals upgraded; never taking over or adding roles.

Every released version (the first full script in sql/updates and the start of every step there) is
installed and upgraded with ALTER EXTENSION pgjobq UPDATE, and the result compared with a fresh install of
the current version, catalog entry by catalog entry.  These tests run on every supported PostgreSQL major.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, fresh_database, login_role
from helpers.fixtures import RELEASED
from helpers.sqlhelpers import Db, record_notices, scalar

OLDEST_VERSION = RELEASED[0]


def install_at(conn: psycopg.Connection[Any], version: str) -> None:
    conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(version)))


# Everything a user or a client can depend on, as text, free of oids.
CATALOG = {
    "functions": """
        SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS definition,
               p.proacl::text AS acl, obj_description(p.oid, 'pg_proc') AS comment
          FROM pg_proc AS p WHERE p.pronamespace = 'jobq'::regnamespace
    """,
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relacl::text AS acl, c.reloptions::text AS options,
               obj_description(c.oid, 'pg_class') AS comment,
               CASE WHEN c.relkind = 'i' THEN pg_get_indexdef(c.oid)
                    WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END AS definition
          FROM pg_class AS c WHERE c.relnamespace = 'jobq'::regnamespace
    """,
    "columns": """
        SELECT a.attrelid::regclass::text AS relation, a.attnum, a.attname,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid) AS default, a.attacl::text AS acl,
               col_description(a.attrelid, a.attnum) AS comment
          FROM pg_attribute AS a
          JOIN pg_class AS c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'jobq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    """,
    "constraints": """
        SELECT c.conrelid::regclass::text AS relation, c.conname, pg_get_constraintdef(c.oid) AS definition
          FROM pg_constraint AS c WHERE c.connamespace = 'jobq'::regnamespace
    """,
    "triggers": """
        SELECT t.tgrelid::regclass::text AS relation, t.tgname, pg_get_triggerdef(t.oid) AS definition,
               obj_description(t.oid, 'pg_trigger') AS comment
          FROM pg_trigger AS t
          JOIN pg_class AS c ON c.oid = t.tgrelid
         WHERE c.relnamespace = 'jobq'::regnamespace AND NOT t.tgisinternal
    """,
    "schema": """
        SELECT n.nspacl::text AS acl, obj_description(n.oid, 'pg_namespace') AS comment
          FROM pg_namespace AS n WHERE n.nspname = 'jobq'
    """,
    "extension": """
        SELECT e.extversion, e.extrelocatable,
               (SELECT array_agg(c::regclass::text ORDER BY c::regclass::text)
                  FROM unnest(e.extconfig) AS c) AS config_tables,
               (SELECT count(*) FROM pg_depend AS d
                 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid
                   AND d.deptype = 'e') AS members
          FROM pg_extension AS e WHERE e.extname = 'pgjobq'
    """,
    "initial privileges": """
        SELECT i.classoid::regclass::text AS catalog, pg_describe_object(i.classoid, i.objoid, i.objsubid),
               i.privtype, i.initprivs::text
          FROM pg_init_privs AS i
         WHERE pg_describe_object(i.classoid, i.objoid, i.objsubid) LIKE '%jobq%'
    """,
}


def catalog(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    """What CATALOG selects, each part sorted."""
    return {part: sorted(conn.execute(query).fetchall(), key=repr) for part, query in CATALOG.items()}


def latest_version(db: Db) -> str:
    return str(scalar(db, "SELECT default_version FROM pg_available_extensions WHERE name = 'pgjobq'"))


def test_a_database_owner_without_superuser_installs_and_uses_the_extension(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with (
        login_role(db) as role,
        fresh_database(db, owner=role) as dbname,
        connect_as(pg_server, dbname, role) as owner,
    ):
        assert scalar(owner, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False

        owner.execute("CREATE EXTENSION pgjobq")
        to_fail = scalar(owner, "SELECT jobq.enqueue('emails', '{\"to\": \"ada\"}', max_attempts => 1)")
        to_finish, *to_finish_together = scalar(
            owner, "SELECT jobq.enqueue_many('emails', ARRAY['{}', '{}', '{}']::jsonb[])"
        )
        leases = {
            row["id"]: row["lease"] for row in owner.execute("SELECT * FROM jobq.claim('emails', 4, 'w1')")
        }
        owner.execute("SELECT jobq.heartbeat(%s, %s)", (to_fail, leases[to_fail]))
        owner.execute("SELECT jobq.fail(%s, 'boom', %s)", (to_fail, leases[to_fail]))
        owner.execute("SELECT jobq.complete(%s, %s)", (to_finish, leases[to_finish]))
        owner.execute(
            "SELECT jobq.complete_many(%s, %s)",
            (to_finish_together, [leases[job_id] for job_id in to_finish_together]),
        )
        owner.execute("SELECT * FROM jobq.reap()")
        scalar(owner, "SELECT jobq.enqueue('emails', '{}')")
        owner.execute("SELECT jobq.release(id, lease) FROM jobq.claim('emails', 1, 'w2')")
        redriven = [row["id"] for row in owner.execute("SELECT jobq.retry_failed('emails') AS id")]
        stats = owner.execute("SELECT queue, queued, done, failed FROM jobq.stats()").fetchall()
        channel = scalar(owner, "SELECT jobq.channel('emails')")
        owner.execute("DROP EXTENSION pgjobq")

    assert len(leases) == 4
    assert redriven == [to_fail]
    assert stats == [{"queue": "emails", "queued": 2, "done": 3, "failed": 0}]
    assert channel == "jobq_emails"


@pytest.mark.parametrize("version", RELEASED)
@pytest.mark.edge_releases_elsewhere
def test_a_fresh_install_equals_an_upgrade_from_every_released_version(
    db: Db, pg_server: ThrowawayPostgres, version: str
) -> None:
    with login_role(db) as owner, fresh_database(db, owner) as fresh, fresh_database(db, owner) as upgraded:
        with connect_as(pg_server, fresh, owner) as conn:
            conn.execute("CREATE EXTENSION pgjobq")
            installed = catalog(conn)
        with connect_as(pg_server, upgraded, owner) as conn:
            install_at(conn, version)
            conn.execute("ALTER EXTENSION pgjobq UPDATE")
            updated = catalog(conn)

    assert installed["extension"][0]["extversion"] == latest_version(db)
    assert version != latest_version(db)
    assert [part for part in CATALOG if not installed[part]] == []  # equal, but not for want of rows
    for part in CATALOG:
        assert updated[part] == installed[part], part


def test_the_released_versions_are_the_history_in_sql_updates() -> None:
    assert RELEASED[:3] == ["0.1.0", "0.2.0", "0.3.0"]


def test_jobq_version_names_the_version_installed(db: Db, pg_server: ThrowawayPostgres) -> None:
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        install_at(conn, OLDEST_VERSION)
        conn.execute("ALTER EXTENSION pgjobq UPDATE")
        version = scalar(conn, "SELECT jobq.version()")

    assert version == latest_version(db)


def test_jobs_of_every_state_survive_an_upgrade_and_keep_working(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        install_at(conn, OLDEST_VERSION)
        conn.execute(
            """
            SELECT jobq.enqueue_many('emails', array_fill('{"n": 1}'::jsonb, ARRAY[4]), max_attempts => 1);
            SELECT jobq.complete(c.id, c.lease) FROM jobq.claim('emails', 1, 'old') AS c;
            SELECT jobq.fail(c.id, 'boom', c.lease) FROM jobq.claim('emails', 1, 'old') AS c;
            SELECT * FROM jobq.claim('emails', 1, 'old');
            """
        )
        before = conn.execute("SELECT id, status, lease, payload FROM jobq.jobs ORDER BY id").fetchall()

        conn.execute("ALTER EXTENSION pgjobq UPDATE")

        after = conn.execute("SELECT id, status, lease, payload FROM jobq.jobs ORDER BY id").fetchall()
        running = conn.execute(
            "SELECT id, lease, lease_expires_at = locked_at + interval '60 seconds' AS sixty_seconds"
            " FROM jobq.jobs WHERE status = 'running'"
        ).fetchone()
        assert running is not None
        assert running.pop("sixty_seconds") is True  # a lease of 0.4.0's default length
        conn.execute("SELECT jobq.complete(%(id)s, %(lease)s)", running)
        (queued,) = conn.execute("SELECT * FROM jobq.claim('emails', 1, 'new')").fetchall()
        conn.execute("SELECT jobq.complete(%(id)s, %(lease)s)", queued)
        statuses = conn.execute(
            "SELECT status, count(*) AS n FROM jobq.jobs GROUP BY status ORDER BY status"
        ).fetchall()

    assert after == before
    assert statuses == [{"status": "done", "n": 3}, {"status": "failed", "n": 1}]


def test_installing_into_an_existing_jobq_schema_of_someone_else_fails(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with (
        login_role(db) as squatter,
        login_role(db) as owner,
        fresh_database(db, owner) as dbname,
        connect_as(pg_server, dbname) as superuser,
        connect_as(pg_server, dbname, owner) as conn,
    ):
        superuser.execute(f'CREATE SCHEMA jobq AUTHORIZATION "{squatter}"')
        with pytest.raises(psycopg.errors.DuplicateSchema, match='schema "jobq" already exists'):
            conn.execute("CREATE EXTENSION pgjobq")
        installed = scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgjobq'")
        schema_owner = scalar(conn, "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'jobq'")
        superuser.execute("DROP SCHEMA jobq")

    assert installed == 0
    assert schema_owner == squatter


def test_installing_creates_no_roles(db: Db, pg_server: ThrowawayPostgres) -> None:
    roles_before = db.execute("SELECT rolname FROM pg_roles ORDER BY rolname").fetchall()

    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq")
        roles_after = conn.execute("SELECT rolname FROM pg_roles ORDER BY rolname").fetchall()

    assert roles_after == roles_before


def test_roles_given_a_level_before_the_upgrade_keep_it_with_the_new_functions(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with (
        login_role(db) as owner,
        login_role(db) as producer,
        login_role(db) as worker,
        fresh_database(db, owner) as dbname,
    ):
        with connect_as(pg_server, dbname, owner) as conn:
            install_at(conn, "0.3.0")
            conn.execute("SELECT jobq.grant_producer(%s), jobq.grant_worker(%s)", (producer, worker))
            warnings = record_notices(conn)
            conn.execute("ALTER EXTENSION pgjobq UPDATE")
        with connect_as(pg_server, dbname, producer) as conn:
            job_id = scalar(conn, "SELECT jobq.enqueue('emails', '{}')")
            producer_sees = scalar(conn, "SELECT jobq.version()")
            held = scalar(conn, "SELECT jobq.enqueue('approvals', '{}', hold => true)")
            released = scalar(conn, "SELECT jobq.unhold(ARRAY[%s]::bigint[])", (held,))
            signalled = scalar(conn, "SELECT jobq.signal('approve', '\"yes\"')")
        with connect_as(pg_server, dbname, worker) as conn:
            (claimed,) = conn.execute(
                "SELECT id, lease, lease_expires_at - locked_at AS length"
                " FROM jobq.claim('emails', 1, 'w1', lease_timeout => '5 minutes')"
            ).fetchall()
            conn.execute("SELECT jobq.heartbeat(%(id)s, %(lease)s)", claimed)
            reaped = conn.execute("SELECT * FROM jobq.reap()").fetchall()
            done = conn.execute(
                "SELECT id FROM jobq.complete_and_claim(%s, %s, 'emails', 1, 'w1', '1 minute')",
                ([claimed["id"]], [claimed["lease"]]),
            ).fetchall()
            worker_sees = scalar(conn, "SELECT jobq.version()")
            registered = scalar(
                conn, "SELECT registered FROM jobq.register_waiter('emails', 'w1', '1 second')"
            )
            (step,) = conn.execute("SELECT id, lease FROM jobq.claim('approvals', 1, 'w1') AS c").fetchall()
            recorded = scalar(conn, "SELECT jobq.checkpoint(%(id)s, %(lease)s, 'charge', '1')", step)

    assert (claimed["id"], claimed["length"]) == (job_id, timedelta(minutes=5))
    assert (reaped, done) == ([], [{"id": job_id}])
    assert producer_sees == worker_sees == latest_version(db)
    assert registered is True  # 0.5.0's jobq.wait, under its 0.10.0 name, granted by the upgrade
    assert (released, signalled, recorded) == (1, 0, 1)  # 0.11.0's functions, granted by the upgrade
    # granted by an upgrade not run by a superuser: a dump would leave these grants out, and says so
    # (the step to 0.4.0 for both roles, the step to 0.5.0 for the worker's jobq.wait, the step to
    # 0.6.0 for both: their replaced functions and jobq.job; the step to 0.7.0 for both: the producer's
    # new jobq.enqueue and enqueue_flow, the worker's claim_any; the step to 0.8.0 for the worker's
    # jobq.metrics; the step to 0.9.0 for both: the producer's jobq.enqueue and the worker's jobq.fail,
    # which gained task and retry; the step to 0.10.0 for the worker's jobq.register_waiter; the step to
    # 0.11.0 for both: the producer's jobq.enqueue, signal and unhold, the worker's durable calls)
    to_040, to_050, to_060, to_070, to_080, to_090, to_0100, to_0110 = [
        message for message in warnings if "granted" in message
    ]
    assert producer in to_040 and worker in to_040
    assert worker in to_050 and producer not in to_050 and "jobq.wait" in to_050
    assert producer in to_060 and worker in to_060 and "jobq.enqueue" in to_060
    assert producer in to_070 and worker in to_070 and "enqueue_flow" in to_070
    assert worker in to_080 and producer not in to_080 and "jobq.metrics" in to_080
    assert producer in to_090 and worker in to_090 and "fail" in to_090
    assert worker in to_0100 and producer not in to_0100 and "jobq.register_waiter" in to_0100
    assert producer in to_0110 and worker in to_0110 and "durable execution" in to_0110


@pytest.mark.main_targets  # the comparison is under test here, not the major
def test_the_comparison_sees_how_the_first_release_differs_from_the_current_one(
    db: Db, pg_server: ThrowawayPostgres
) -> None:
    with login_role(db) as owner, fresh_database(db, owner) as fresh, fresh_database(db, owner) as first:
        with connect_as(pg_server, fresh, owner) as conn:
            conn.execute("CREATE EXTENSION pgjobq")
            installed = catalog(conn)
        with connect_as(pg_server, first, owner) as conn:
            install_at(conn, OLDEST_VERSION)
            oldest = catalog(conn)

    # every part but the schema's (its grants and comment are still 0.1.0's)
    assert [part for part in CATALOG if oldest[part] != installed[part]] == [
        part for part in CATALOG if part != "schema"
    ]


@pytest.mark.main_targets  # the comparison is under test here, not the major
@pytest.mark.parametrize(
    ("change", "part"),
    [
        ("COMMENT ON FUNCTION jobq.version() IS 'changed'", "functions"),
        ("ALTER FUNCTION jobq.version() SET work_mem = '1MB'", "functions"),
        ("GRANT EXECUTE ON FUNCTION jobq.metrics() TO PUBLIC", "functions"),
        ("ALTER TABLE jobq.jobs SET (autovacuum_vacuum_threshold = 5000)", "relations"),
        ("ALTER TABLE jobq.jobs ALTER COLUMN priority SET DEFAULT 1", "columns"),
        ("ALTER TABLE jobq.jobs ADD CONSTRAINT jobs_priority_bound CHECK (priority > -1000)", "constraints"),
        ("COMMENT ON TRIGGER queue_settings_changed_trg ON jobq.queue_settings IS 'changed'", "triggers"),
        ("COMMENT ON SCHEMA jobq IS 'changed'", "schema"),
    ],
    ids=["comment", "setting", "grant", "reloption", "default", "constraint", "trigger", "schema"],
)
def test_the_comparison_sees_one_change_an_upgrade_step_could_forget(
    db: Db, pg_server: ThrowawayPostgres, change: str, part: str
) -> None:
    with (
        login_role(db) as owner,
        fresh_database(db, owner) as dbname,
        connect_as(pg_server, dbname, owner) as conn,
    ):
        conn.execute("CREATE EXTENSION pgjobq")
        installed = catalog(conn)
        conn.execute(change)
        changed = catalog(conn)

    assert [differing for differing in CATALOG if changed[differing] != installed[differing]] == [part]
