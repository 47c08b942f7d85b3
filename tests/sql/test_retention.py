"""Retention (0.10.0): finished jobs leave after their queue's retention for their final state, from the tick
every worker runs (jobq._retain is that tick at a given time), in bounded batches, on by default."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from helpers.sqlhelpers import Connect, Db, claim_one, enqueue, fill, scalar


def finish(db: Db, queue: str, status: str, **options: Any) -> int:
    """One job of queue, brought to status (done, failed or cancelled); its id."""
    job_id = enqueue(db, queue, max_attempts=1, **options)
    if status == "cancelled":
        db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))
        return job_id
    held = claim_one(db, queue)
    assert held["id"] == job_id
    if status == "done":
        db.execute("SELECT jobq.complete(%(id)s, %(lease)s)", held)
    else:
        db.execute("SELECT jobq.fail(%(id)s, 'boom', %(lease)s)", held)
    return job_id


def retain(db: Db, after: str, max_rows: int = 10000) -> int:
    """The tick's retention as if run `after` from now; how many jobs it deleted."""
    deleted = scalar(db, "SELECT jobq._retain(now() + %s::interval, %s)", (after, max_rows))
    assert isinstance(deleted, int)
    return deleted


def exists(db: Db, job_id: int) -> bool:
    return bool(scalar(db, "SELECT EXISTS (SELECT FROM jobq.jobs WHERE id = %s)", (job_id,)))


def retention(db: Db, queue: str) -> tuple[Any, Any, Any]:
    row = db.execute(
        "SELECT retain_done, retain_failed, retain_cancelled FROM jobq.queues WHERE queue = %s", (queue,)
    ).fetchone()
    assert row is not None
    return (row["retain_done"], row["retain_failed"], row["retain_cancelled"])


# -- the defaults, per state ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kept", "gone"),
    [("done", "23 hours", "25 hours"), ("failed", "13 days", "15 days"), ("cancelled", "6 days", "8 days")],
)
def test_a_queue_nobody_configured_keeps_each_final_state_for_its_default(
    db: Db, status: str, kept: str, gone: str
) -> None:
    job_id = finish(db, "emails", status)

    assert retain(db, kept) == 0 and exists(db, job_id)
    assert retain(db, gone) == 1 and not exists(db, job_id)


def test_the_defaults_show_in_jobq_queues(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', max_attempts => 5)")

    assert retention(db, "emails") == (timedelta(days=1), timedelta(days=14), timedelta(days=7))


def test_queued_running_and_waiting_jobs_are_never_touched(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0', retain_failed => '0')")
    queued = enqueue(db, "emails")
    parent = enqueue(db, "emails")
    waiting = enqueue(db, "emails", depends_on=[parent])
    running = claim_one(db, "emails")["id"]

    assert retain(db, "100 years") == 0
    assert all(exists(db, job_id) for job_id in (queued, parent, waiting, running))


# -- configured per queue and state --------------------------------------------------------------------------


def test_a_queue_s_retention_applies_to_its_jobs_only(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('reports', retain_done => '1 hour')")
    report = finish(db, "reports", "done")
    email = finish(db, "emails", "done")

    assert retain(db, "2 hours") == 1
    assert not exists(db, report) and exists(db, email)


def test_retention_zero_deletes_at_the_next_tick(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    job_id = finish(db, "emails", "done")

    db.execute("SELECT jobq.tick()")

    assert not exists(db, job_id)


def test_keep_forever_keeps_a_state_until_purged(db: Db) -> None:
    row = db.execute("SELECT * FROM jobq.configure_queue('audit', keep_forever => '{failed}')").fetchone()
    failed = finish(db, "audit", "failed")
    done = finish(db, "audit", "done")

    assert row is not None and row["retain_failed"] is None
    assert retain(db, "100 years") == 1
    assert exists(db, failed) and not exists(db, done)


def test_a_retention_given_later_takes_its_state_off_keep_forever(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('audit', keep_forever => '{done,failed}')")

    db.execute("SELECT jobq.configure_queue('audit', retain_failed => '30 days')")

    assert retention(db, "audit") == (None, timedelta(days=30), timedelta(days=7))


def test_unset_puts_a_retention_back_to_its_default(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('audit', retain_done => '1 hour', keep_forever => '{failed}')")

    db.execute("SELECT jobq.configure_queue('audit', unset => '{retain_done,keep_forever}')")

    assert retention(db, "audit") == (timedelta(days=1), timedelta(days=14), timedelta(days=7))


def test_a_shorter_retention_applies_to_jobs_finished_before_the_change(db: Db) -> None:
    job_id = finish(db, "emails", "done")

    db.execute("SELECT jobq.configure_queue('emails', retain_done => '1 minute')")

    assert retain(db, "2 minutes") == 1 and not exists(db, job_id)


# -- bounded batches -----------------------------------------------------------------------------------------


def test_one_tick_deletes_at_most_max_rows_oldest_first(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " SELECT 'emails', '{}', 'done', timestamptz '2026-01-01 00:00Z' + make_interval(secs => i)"
        "   FROM generate_series(1, 30) AS i"
    )

    assert retain(db, "1 second", max_rows=10) == 10
    assert scalar(
        db, "SELECT min(finished_at) - timestamptz '2026-01-01 00:00Z' FROM jobq.jobs"
    ) == timedelta(seconds=11)


def test_a_tick_deletes_up_to_100000_jobs_so_that_a_worker_s_ticks_keep_up_with_it(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " SELECT 'emails', '{}', 'done', now() - interval '1 hour' FROM generate_series(1, 100005)"
    )

    db.execute("SELECT jobq.tick()")

    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 5


def test_queues_take_turns_so_that_a_busy_one_starves_no_other(db: Db) -> None:
    for queue in ("a_busy", "b_quiet"):
        db.execute("SELECT jobq.configure_queue(%s, retain_done => '0')", (queue,))
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " SELECT 'a_busy', '{}'::jsonb, 'done', now() FROM generate_series(1, 2500)"
        " UNION ALL SELECT 'b_quiet', '{}'::jsonb, 'done', now() FROM generate_series(1, 5)"
    )

    assert retain(db, "1 second", max_rows=1500) == 1500
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'b_quiet'") == 0


def test_a_job_another_transaction_holds_is_skipped_not_waited_for(db: Db, connect: Connect) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    held, free = finish(db, "emails", "done"), finish(db, "emails", "done")
    with connect() as other, other.transaction():
        other.execute("SELECT FROM jobq.jobs WHERE id = %s FOR UPDATE", (held,))

        assert retain(db, "1 second") == 1

    assert exists(db, held) and not exists(db, free)


def test_a_tick_holding_its_deletions_open_never_blocks_a_claim(db: Db, connect: Connect) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    fill(db, 1, "emails")
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " SELECT 'emails', '{}', 'done', now() FROM generate_series(1, 3)"
    )
    with connect() as ticking, ticking.transaction():
        ticking.execute("SELECT jobq._retain(now() + interval '1 second', 10000)")
        with connect() as worker:
            worker.execute("SET lock_timeout = '5s'")

            claimed = worker.execute("SELECT id FROM jobq.claim('emails', 10, 'w1')").fetchall()

    assert len(claimed) == 1


def test_a_failing_retention_warns_and_leaves_the_schedules_jobs_enqueued(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    kept = finish(db, "emails", "done")
    db.execute(
        "CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'jobs are kept here'; END $$"
    )
    db.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON jobq.jobs FOR EACH ROW EXECUTE FUNCTION public.refuse()"
    )
    db.execute("SELECT jobq.schedule('pulse', 'reports', '{}', every => '10 seconds')")
    warnings: list[str] = []
    db.add_notice_handler(lambda notice: warnings.append(notice.message_primary or ""))

    enqueued = scalar(db, "SELECT jobq.tick()")

    assert enqueued > 0 and exists(db, kept)
    assert any("retention failed" in w and "jobs are kept here" in w for w in warnings), warnings


def test_a_job_a_user_s_row_references_is_kept_and_the_others_leave(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    referenced, *others = (finish(db, "emails", "done") for _ in range(4))
    db.execute("CREATE TABLE public.receipts (job_id bigint REFERENCES jobq.jobs (id))")
    db.execute("INSERT INTO public.receipts VALUES (%s)", (referenced,))

    assert retain(db, "1 second") == 3
    assert exists(db, referenced) and not any(exists(db, job_id) for job_id in others)


# -- what a job's end of retention means ---------------------------------------------------------------------


def test_a_deleted_job_is_no_such_job_and_its_result_is_gone(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    job_id = enqueue(db, "emails")
    held = claim_one(db, "emails")
    db.execute("SELECT jobq.complete(%(id)s, %(lease)s, '{\"sent\": true}')", held)

    retain(db, "1 second")

    with pytest.raises(psycopg.Error) as gone:
        db.execute("SELECT jobq.job(%s)", (job_id,))
    assert gone.value.sqlstate == "JQ002"
    assert scalar(db, "SELECT count(*) FROM jobq.results WHERE id = %s", (job_id,)) == 0


def test_an_until_done_key_is_free_again_once_its_job_s_retention_ends(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '1 hour')")
    first = finish(db, "emails", "done", unique_key="welcome:42", unique_scope="until_done")
    assert enqueue(db, "emails", unique_key="welcome:42", unique_scope="until_done") == first

    retain(db, "2 hours")

    second = enqueue(db, "emails", unique_key="welcome:42", unique_scope="until_done")
    assert second != first and exists(db, second)


def test_a_schedule_s_deleted_occurrence_is_not_enqueued_again(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('reports', retain_done => '0')")
    db.execute("SELECT jobq.schedule('nightly', 'reports', '{}', every => '1 hour')")
    due = scalar(db, "SELECT next_at FROM jobq.schedules WHERE name = 'nightly'")
    db.execute("SELECT jobq._tick(%s)", (due,))
    occurrence = scalar(db, "SELECT id FROM jobq.jobs WHERE queue = 'reports'")
    db.execute("UPDATE jobq.jobs SET run_at = now() WHERE id = %s", (occurrence,))
    db.execute("SELECT jobq.complete(%(id)s, %(lease)s)", claim_one(db, "reports"))

    retain(db, "1 second")
    db.execute("SELECT jobq._tick(%s)", (due,))

    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'reports'") == 0


def test_a_child_of_a_deleted_parent_is_refused_as_one_of_an_unknown_parent(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '0')")
    parent = finish(db, "emails", "done")
    retain(db, "1 second")

    with pytest.raises(psycopg.Error) as deleted:
        enqueue(db, "emails", depends_on=[parent])
    with pytest.raises(psycopg.Error) as unknown:
        enqueue(db, "emails", depends_on=[parent + 1000])

    assert deleted.value.sqlstate == unknown.value.sqlstate


# -- growth is visible ---------------------------------------------------------------------------------------


def test_metrics_count_the_jobs_past_retention_and_the_oldest_finished(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '1 hour')")
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " VALUES ('emails', '{}', 'done', now() - interval '3 hours'),"
        "        ('emails', '{}', 'done', now() - interval '2 hours'),"
        "        ('emails', '{}', 'done', now() - interval '10 minutes')"
    )

    rows = {
        row["metric"]: row["value"]
        for row in db.execute("SELECT * FROM jobq.metrics() WHERE queue = 'emails' OR queue IS NULL")
    }

    assert rows["jobs_past_retention"] == 2
    assert 3 * 3600 <= rows["oldest_finished_age_seconds"] < 3 * 3600 + 60
    assert 0 < rows["index_bytes"] < rows["table_bytes"]
