"""The pgjobq command line, run as a real process."""

from __future__ import annotations

import json

import pytest

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import run_cli
from helpers.sqlhelpers import Db


def count(db: Db, where: str = "true") -> int:
    row = db.execute(f"SELECT count(*) AS n FROM jobq.jobs WHERE {where}").fetchone()
    assert row is not None
    return int(row["n"])


def test_enqueue_prints_the_new_jobs_id(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", '{"to": "a@example.com"}', "--priority", "5")

    assert result.returncode == 0, result.stderr
    job = db.execute("SELECT queue, payload, priority FROM jobq.jobs WHERE id = %s", (int(result.stdout),))
    assert job.fetchone() == {"queue": "emails", "payload": {"to": "a@example.com"}, "priority": 5}


def test_enqueue_with_delay_is_not_runnable_yet(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "default", "{}", "--delay", "60")

    assert result.returncode == 0, result.stderr
    assert count(db, "run_at > now() + interval '50 seconds'") == 1


def test_worker_burst_runs_every_job_then_exits_zero(dsn: str, db: Db) -> None:
    db.execute(EXECUTIONS_DDL)
    db.execute("SELECT jobq.enqueue_many('reports', array_fill('{}'::jsonb, ARRAY[25]))")

    result = run_cli(
        dsn, "worker", "helpers.handlers:record", "--queue", "reports", "--burst", "--concurrency", "4"
    )

    assert result.returncode == 0, result.stderr
    assert count(db, "status = 'done'") == 25
    assert "burst done" in result.stderr


def test_worker_takes_its_queue_from_the_environment(dsn: str, db: Db) -> None:
    db.execute(EXECUTIONS_DDL)
    db.execute("SELECT jobq.enqueue('pdfs', '{}'), jobq.enqueue('default', '{}')")

    result = run_cli(
        dsn, "worker", "helpers.handlers:record", "--burst", PGJOBQ_QUEUE="pdfs", PGJOBQ_BURST="1"
    )

    assert result.returncode == 0, result.stderr
    assert count(db, "queue = 'pdfs' AND status = 'done'") == 1
    assert count(db, "queue = 'default' AND status = 'queued'") == 1


def test_stats_counts_jobs_per_queue_and_status(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[3]))")
    db.execute("UPDATE jobq.jobs SET run_at = run_at - interval '1 hour'")  # runnable for an hour
    db.execute("SELECT jobq.claim('emails', 1, 'w')")

    result = run_cli(dsn, "stats", "--json")

    assert result.returncode == 0, result.stderr
    (emails,) = json.loads(result.stdout)
    assert {k: emails[k] for k in ("queue", "queued", "running", "done", "failed", "cancelled")} == {
        "queue": "emails", "queued": 2, "running": 1, "done": 0, "failed": 0, "cancelled": 0,
    }  # fmt: skip
    # the hour, and the moments since the enqueue (well under 100 seconds)
    assert 3600 <= emails["oldest_queued_age_seconds"] < 3700


def test_purge_deletes_old_done_jobs_and_says_how_many(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[2]))")
    db.execute("SELECT jobq.complete(id, lease) FROM jobq.claim('emails', 2, 'w')")

    result = run_cli(dsn, "purge", PGJOBQ_OLDER_THAN="0")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "2 job(s) deleted\n"
    assert count(db) == 0


def test_health_prints_the_health_view_as_json(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[3]))")
    db.execute("UPDATE jobq.jobs SET run_at = run_at - interval '1 hour'")  # runnable for an hour

    result = run_cli(dsn, "health", "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["queued"], report["running"], report["failed"]) == (3, 0, 0)
    # in seconds: the hour, and the moments since the enqueue (well under 100 seconds)
    assert 3600 <= report["oldest_runnable_age"] < 3700


def test_stats_table_has_a_row_per_queue(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}'), jobq.enqueue('pdfs', '{}')")

    result = run_cli(dsn, "stats")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "queue", "queued", "runnable", "running", "done", "failed", "cancelled", "oldest", "wait",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["emails", "pdfs"]


def test_retry_failed_redrives_dead_letters(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.enqueue('default', '{}', max_attempts => 1)")
    db.execute("SELECT jobq.fail(id, 'boom', lease) FROM jobq.claim('default', 1, 'w')")
    assert count(db, "status = 'failed'") == 1

    result = run_cli(dsn, "retry-failed")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 job(s) back in the queue"
    assert count(db, "status = 'queued' AND attempts = 0") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("enqueue", "default", "{not json"), "not valid JSON"),
        (("enqueue", "default", "[1, 2]"), "must be a JSON object"),
        (("worker", "no_colon_here"), "expected MODULE:FUNCTION"),
        (("worker", "no_such_module:run"), "cannot import"),
        (("worker", "helpers.handlers:no_such_function"), "has no callable"),
    ],
    ids=["invalid-json", "non-object-json", "handler-without-colon", "unknown-module", "unknown-function"],
)
def test_bad_usage_prints_one_line_and_exits_2(dsn: str, db: Db, args: tuple[str, ...], message: str) -> None:
    result = run_cli(dsn, *args)

    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert count(db) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("enqueue", "Bad Queue", "{}"), "queue must be 1 to 58 characters"),
        (("enqueue", "default", "{}", "--max-attempts", "0"), "max_attempts must be between 1 and 1000"),
        (("enqueue", "default", "{}", "--on-conflict", "skip"), "on_conflict needs unique_key,"),
        (
            ("worker", "helpers.handlers:record", "--concurrency", "0"),
            "concurrency must be between 1 and 1000",
        ),
        (
            ("worker", "helpers.handlers:record", "--queue", "UPPER", "--burst"),
            "queue must be 1 to 58 characters",
        ),
    ],
    ids=[
        "bad-queue-name",
        "zero-max-attempts",
        "on-conflict-without-a-key",
        "zero-concurrency",
        "worker-bad-queue",
    ],
)
def test_refused_operation_prints_one_line_and_exits_1(
    dsn: str, db: Db, args: tuple[str, ...], message: str
) -> None:
    result = run_cli(dsn, *args)

    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and message in error_lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert count(db) == 0


def test_unreachable_database_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli("host=127.0.0.1 port=1 connect_timeout=2", "stats")

    assert result.returncode == 1
    assert result.stderr.startswith("Error: database error:")
    assert len(result.stderr.strip().splitlines()) == 1
