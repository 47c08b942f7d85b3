"""jobq.metrics(): the queue's state for a scraper, per queue and for the table, from partial indexes only."""

from __future__ import annotations

from typing import Any

from helpers.sqlhelpers import Db, claim_one, enqueue, fill, scalar


def metrics(db: Db) -> dict[tuple[str, str | None], float]:
    return {(row["metric"], row["queue"]): row["value"] for row in db.execute("SELECT * FROM jobq.metrics()")}


def per_queue(db: Db, queue: str) -> dict[str, float]:
    return {metric: value for (metric, of), value in metrics(db).items() if of == queue}


def test_each_queue_counts_its_jobs_by_state(db: Db) -> None:
    fill(db, 3, "emails")
    enqueue(db, "emails", run_at=scalar(db, "SELECT now() + interval '1 hour'"))
    claim_one(db, "emails")
    enqueue(db, "emails", max_attempts=1)
    doomed = db.execute("SELECT id, lease FROM jobq.claim('emails', 5, 'w1') WHERE payload = '{}'").fetchall()
    db.execute("SELECT jobq.fail(%(id)s, 'boom', %(lease)s)", doomed[-1])
    parent = enqueue(db, "emails")
    enqueue(db, "emails", depends_on=[parent])

    counted = per_queue(db, "emails")

    truth = {
        status: scalar(db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'emails' AND status = %s", (status,))
        for status in ("running", "waiting", "failed")
    }
    assert counted["jobs_runnable"] == scalar(
        db, "SELECT count(*) FROM jobq.jobs WHERE queue = 'emails' AND status = 'queued' AND run_at <= now()"
    )
    assert counted["jobs_scheduled"] == 1
    assert (counted["jobs_running"], counted["jobs_waiting"], counted["jobs_failed"]) == (
        truth["running"],
        truth["waiting"],
        truth["failed"],
    )
    assert (truth["waiting"], truth["failed"]) == (1, 1)


def test_a_drained_queue_with_settings_reads_zero_instead_of_vanishing(db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('idle', max_attempts => 2)")
    db.execute("SELECT jobq.pause('idle')")

    counted = per_queue(db, "idle")

    assert counted == {
        "jobs_runnable": 0,
        "jobs_scheduled": 0,
        "jobs_running": 0,
        "jobs_waiting": 0,
        "jobs_failed": 0,
        "oldest_runnable_age_seconds": 0,
        "paused": 1,
        "jobs_past_retention": 0,
        "oldest_finished_age_seconds": 0,
    }


def test_the_oldest_runnable_age_is_that_of_the_oldest_runnable_job(db: Db) -> None:
    enqueue(db, "emails", run_at=scalar(db, "SELECT now() - interval '90 seconds'"))
    enqueue(db, "emails")

    assert 90 <= per_queue(db, "emails")["oldest_runnable_age_seconds"] < 120


def test_done_jobs_count_in_no_gauge_of_jobs(db: Db) -> None:
    enqueue(db, "emails")
    held = claim_one(db, "emails")
    db.execute("SELECT jobq.complete(%(id)s, %(lease)s)", held)

    counted = per_queue(db, "emails")

    assert sum(value for metric, value in counted.items() if metric.startswith("jobs_")) == 0
    assert counted["oldest_finished_age_seconds"] >= 0


def test_the_table_rows_have_no_queue(db: Db) -> None:
    table = {metric for (metric, queue) in metrics(db) if queue is None}

    assert {
        "live_tuples",
        "dead_tuples",
        "table_bytes",
        "oldest_transaction_age_seconds",
        "oldest_xmin_age",
    } <= table


def test_metrics_never_walks_the_finished_jobs(db: Db) -> None:
    db.execute(
        "INSERT INTO jobq.jobs (queue, payload, status, finished_at)"
        " SELECT 'emails', '{}', 'done', now() FROM generate_series(1, 20000)"
    )
    fill(db, 2, "emails")
    db.execute("ANALYZE jobq.jobs")
    db.execute("LOAD 'auto_explain'")
    db.execute("SET auto_explain.log_min_duration = 0")
    db.execute("SET auto_explain.log_nested_statements = on")
    db.execute("SET auto_explain.log_level = notice")
    notices: list[Any] = []
    db.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))

    db.execute("SELECT * FROM jobq.metrics()").fetchall()

    plans = "\n".join(notice for notice in notices if "Query Text" in notice or "Scan" in notice)
    assert "Seq Scan on jobs" not in plans and "jobs_claim_idx" in plans, plans
