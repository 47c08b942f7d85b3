"""The task of a job on the command line (extension 0.9.0), run as real processes: enqueue --task and
schedule --task make jobs of a task, jobs list shows each job's task and --task filters by it, jobs
show prints it; a database still at 0.8.0, which pgjobq-py 1.2.0 no longer supports, is told to
upgrade."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, fresh_database
from helpers.processes import run_cli
from helpers.sqlhelpers import Db, scalar

BEFORE_TASKS = "0.8.0"  # the last extension version whose jobs have no task


@pytest.fixture
def dsn_before_tasks(db: Db, pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A database of its own with the pgjobq extension 0.8.0 and two jobs of queue emails; dropped after."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(BEFORE_TASKS)))
        conn.execute("SELECT jobq.enqueue('emails', '{}'), jobq.enqueue('emails', '{}')")
        yield pg_server.dsn(dbname)


def error_line(stderr: str) -> str:
    """The one line an error prints (and there must be exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


def test_enqueue_with_a_task_makes_a_job_of_that_task(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", '{"user_id": 7}', "--task", "send_welcome")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT task FROM jobq.jobs WHERE id = %s", (int(result.stdout),)) == "send_welcome"


def test_enqueue_takes_the_task_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", PGJOBQ_TASK="send_welcome")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT task FROM jobq.jobs WHERE id = %s", (int(result.stdout),)) == "send_welcome"


def test_enqueue_without_a_task_makes_a_plain_job(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT task IS NULL FROM jobq.jobs WHERE id = %s", (int(result.stdout),))


def test_enqueue_with_a_bad_task_name_prints_one_line_naming_it_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", "--task", "9 lives")

    assert result.returncode == 1
    assert "task" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_schedule_with_a_task_gives_its_jobs_that_task(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "schedule", "digest", "--queue", "emails", "--every", "60", "--task", "send_digest", "--json"
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["task"] == "send_digest"
    assert scalar(db, "SELECT task FROM jobq.schedules WHERE name = 'digest'") == "send_digest"


def test_schedule_takes_the_task_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "schedule", "digest", "--queue", "emails", "--every", "60", PGJOBQ_TASK="send_digest"
    )

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT task FROM jobq.schedules WHERE name = 'digest'") == "send_digest"


def fill(db: Db) -> dict[str, int]:
    """Three jobs of queue emails: two of two tasks, one plain."""
    return {
        name: scalar(db, "SELECT jobq.enqueue('emails', '{}', task => %s)", (task,))
        for name, task in [("welcome", "send_welcome"), ("digest", "send_digest"), ("plain", None)]
    }


def test_jobs_list_shows_each_jobs_task_before_its_last_error(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "list")

    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split()[-4:] == ["worker", "task", "last", "error"]
    # id, queue, status, attempts, priority, run at, worker, task, last error
    assert [(cells[0], cells[7]) for cells in map(str.split, lines)] == [
        (str(ids["plain"]), "-"),
        (str(ids["digest"]), "send_digest"),
        (str(ids["welcome"]), "send_welcome"),
    ]


def test_jobs_list_filters_by_task(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "list", "--task", "send_welcome", "--json")

    assert result.returncode == 0, result.stderr
    assert [(row["id"], row["task"]) for row in json.loads(result.stdout)] == [
        (ids["welcome"], "send_welcome")
    ]


def test_jobs_list_takes_the_task_from_its_own_variable(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "list", "--json", PGJOBQ_JOBS_LIST_TASK="send_digest")

    assert result.returncode == 0, result.stderr
    assert [row["id"] for row in json.loads(result.stdout)] == [ids["digest"]]


def test_jobs_list_is_not_filtered_by_the_task_that_enqueue_and_schedule_read(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "list", "--json", PGJOBQ_TASK="send_digest")

    assert result.returncode == 0, result.stderr
    assert [row["id"] for row in json.loads(result.stdout)] == [ids["plain"], ids["digest"], ids["welcome"]]


def test_jobs_show_prints_the_jobs_task(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "show", str(ids["welcome"]))

    assert result.returncode == 0, result.stderr
    assert "task: send_welcome" in result.stdout.splitlines()


def test_jobs_list_on_extension_0_8_0_says_to_upgrade_it_and_exits_1(dsn_before_tasks: str) -> None:
    result = run_cli(dsn_before_tasks, "jobs", "list")

    assert result.returncode == 1
    line = error_line(result.stderr)
    assert f"this database has {BEFORE_TASKS}" in line and "ALTER EXTENSION pgjobq UPDATE" in line
    assert result.stdout == ""
