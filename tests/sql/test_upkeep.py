"""Keeping the hot table small and watched: jobq.purge, jobq.health, autovacuum settings."""

from __future__ import annotations

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, scalar, statistic, statuses


def finish(db: Db, count: int, *, fail: bool = False) -> None:
    """count jobs, claimed and then done (or failed, with max_attempts 1)."""
    db.execute(
        "SELECT jobq.enqueue_many('default', array_fill('{}'::jsonb, ARRAY[%s]), max_attempts => 1)", (count,)
    )
    settle = "jobq.fail(c.id, 'boom', c.lease)" if fail else "jobq.complete(c.id, c.lease)"
    db.execute(f"SELECT {settle} FROM jobq.claim('default', %s, 'w1') AS c", (count,))


def age_finished(db: Db, by: str) -> None:
    db.execute(
        "UPDATE jobq.jobs SET finished_at = finished_at - %s::interval WHERE finished_at IS NOT NULL", (by,)
    )


def test_purge_deletes_done_jobs_older_than_the_age_given(db: Db) -> None:
    finish(db, 3)
    age_finished(db, "2 days")
    finish(db, 2)

    purged = scalar(db, "SELECT jobq.purge('1 day')")

    assert purged == 3
    assert statuses(db) == {"done": 2}


def test_purge_keeps_failed_jobs_queued_and_running_ones(db: Db) -> None:
    finish(db, 2, fail=True)
    db.execute("SELECT jobq.enqueue_many('default', array_fill('{}'::jsonb, ARRAY[2]))")
    db.execute("SELECT * FROM jobq.claim('default', 1, 'w1')")
    age_finished(db, "2 days")

    purged = scalar(db, "SELECT jobq.purge('0 seconds')")

    assert purged == 0
    assert statuses(db) == {"failed": 2, "queued": 1, "running": 1}


def test_purge_with_include_failed_empties_the_dead_letter_queue_too(db: Db) -> None:
    finish(db, 2, fail=True)
    finish(db, 1)
    age_finished(db, "1 hour")

    purged = scalar(db, "SELECT jobq.purge('1 minute', include_failed => true)")

    assert purged == 3
    assert statuses(db) == {}


def test_purge_deletes_at_most_max_rows(db: Db) -> None:
    finish(db, 5)
    age_finished(db, "1 hour")

    purged = scalar(db, "SELECT jobq.purge('1 minute', max_rows => 2)")

    assert purged == 2
    assert statuses(db) == {"done": 3}


def test_purge_skips_rows_another_session_has_locked(db: Db, connect: Connect) -> None:
    finish(db, 2)
    age_finished(db, "1 hour")
    holder = connect(autocommit=False)
    holder.execute("SELECT id FROM jobq.jobs ORDER BY id LIMIT 1 FOR UPDATE")

    purged = scalar(db, "SELECT jobq.purge('1 minute')")
    holder.rollback()

    assert purged == 1


@pytest.mark.parametrize(
    ("call", "sqlstate", "message"),
    [
        ("jobq.purge(NULL)", "22004", "older_than must not be NULL"),
        ("jobq.purge('-1 day')", "22023", "older_than must not be negative"),
        ("jobq.purge('1 day', max_rows => 0)", "22023", "max_rows must be between 1 and 1000000"),
        ("jobq.purge('1 day', max_rows => NULL)", "22004", "max_rows must not be NULL"),
        ("jobq.purge('1 day', include_failed => NULL)", "22004", "include_failed must not be NULL"),
    ],
    ids=["null age", "negative age", "zero rows", "null rows", "null include_failed"],
)
def test_purge_refuses_bad_arguments_and_deletes_nothing(
    db: Db, call: str, sqlstate: str, message: str
) -> None:
    finish(db, 1)
    age_finished(db, "2 days")

    with pytest.raises(psycopg.Error, match=message) as raised:
        db.execute(f"SELECT {call}")

    assert raised.value.sqlstate == sqlstate
    assert statuses(db) == {"done": 1}


def test_health_reports_depth_and_the_oldest_runnable_wait(db: Db) -> None:
    db.execute("SELECT jobq.enqueue_many('default', array_fill('{}'::jsonb, ARRAY[3]), max_attempts => 1)")
    db.execute("SELECT jobq.enqueue('default', '{}', run_at => now() + interval '1 hour')")
    db.execute("UPDATE jobq.jobs SET run_at = run_at - interval '10 minutes' WHERE run_at <= now()")
    db.execute("SELECT jobq.fail(c.id, 'boom', c.lease) FROM jobq.claim('default', 1, 'w1') AS c")
    db.execute("SELECT * FROM jobq.claim('default', 1, 'w1')")

    health = db.execute(
        "SELECT queued, runnable, running, failed, oldest_runnable_age > interval '9 minutes' AS waited"
        " FROM jobq.health"
    ).fetchall()

    assert health == [{"queued": 2, "runnable": 1, "running": 1, "failed": 1, "waited": True}]


def test_health_shows_the_oldest_open_transaction_of_another_session(db: Db, connect: Connect) -> None:
    idle = connect(autocommit=False)
    idle.execute("SELECT 1")
    db.execute("SELECT pg_sleep(0.05)")

    age = scalar(db, "SELECT oldest_transaction_age > interval '0' FROM jobq.health")
    idle.rollback()

    assert age is True


def test_health_reports_dead_tuples_until_vacuum_clears_them(db: Db) -> None:
    finish(db, 200)
    before = statistic(db, "SELECT dead_tuples FROM jobq.health", lambda dead: dead > 0)

    db.execute("VACUUM jobq.jobs")
    statistic(db, "SELECT last_vacuum IS NOT NULL FROM jobq.health", bool)  # the vacuum's report has come
    after = scalar(db, "SELECT dead_tuples FROM jobq.health")

    assert before > 0
    assert after == 0


def test_the_jobs_table_carries_queue_autovacuum_settings_at_the_server_s_cost_delay(db: Db) -> None:
    options = scalar(db, "SELECT reloptions FROM pg_class WHERE oid = 'jobq.jobs'::regclass")

    assert "autovacuum_vacuum_scale_factor=0.01" in options
    assert not [option for option in options if option.startswith("autovacuum_vacuum_cost_delay=")]
