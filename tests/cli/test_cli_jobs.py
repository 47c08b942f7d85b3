"""pgjobq jobs list and pgjobq jobs show (and its alias job), run as real processes."""

from __future__ import annotations

import json
import re

from psycopg.conninfo import make_conninfo

from helpers.databases import login_role
from helpers.processes import run_cli
from helpers.sqlhelpers import Db, scalar


def fill(db: Db) -> dict[str, int]:
    """Jobs of two queues: one done with a result, one failed, one queued with headers, one queued."""
    ids = {
        name: scalar(db, "SELECT jobq.enqueue(%s, %s, headers => %s)", (queue, payload, headers))
        for name, queue, payload, headers in [
            ("done", "emails", '{"to": "ada"}', None),
            ("failed", "emails", '{"to": "bob"}', None),
            ("queued", "emails", '{"to": "cy"}', '{"trace": "t1"}'),
            ("other", "reports", '{"n": 1}', None),
        ]
    }
    for name in ("done", "failed"):
        db.execute("UPDATE jobq.jobs SET run_at = now() - interval '1 hour' WHERE id = %s", (ids[name],))
    (first,) = db.execute("SELECT id, lease FROM jobq.claim('emails', 1, 'w1')").fetchall()
    db.execute("SELECT jobq.complete(%(id)s, %(lease)s, '{\"sent\": true}')", first)
    (second,) = db.execute("SELECT id, lease FROM jobq.claim('emails', 1, 'w1')").fetchall()
    db.execute("UPDATE jobq.jobs SET max_attempts = 1 WHERE id = %(id)s", second)
    db.execute("SELECT jobq.fail(%(id)s, E'smtp refused\\nline two', %(lease)s)", second)
    assert (first["id"], second["id"]) == (ids["done"], ids["failed"])
    return ids


def test_jobs_list_prints_the_newest_jobs_first_with_their_state(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(dsn, "jobs", "list")

    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split()[:4] == ["id", "queue", "status", "attempts"]
    assert [line.split()[:4] for line in lines] == [
        [str(ids["other"]), "reports", "queued", "0/3"],
        [str(ids["queued"]), "emails", "queued", "0/3"],
        [str(ids["failed"]), "emails", "failed", "1/1"],
        [str(ids["done"]), "emails", "done", "1/3"],
    ]
    assert lines[2].endswith("smtp refused")  # the first line of the error only
    assert result.stderr == ""


def test_jobs_list_filters_by_queue_and_status_and_prints_a_json_array(dsn: str, db: Db) -> None:
    ids = fill(db)

    result = run_cli(
        dsn, "jobs", "list", "--queue", "emails", "--status", "failed", "--status", "done", "--json"
    )

    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(row["id"], row["status"]) for row in rows] == [(ids["failed"], "failed"), (ids["done"], "done")]
    assert set(rows[0]) == {
        "id", "queue", "task", "status", "priority", "attempts", "max_attempts", "run_at", "created_at",
        "finished_at", "locked_by", "last_error",
    }  # fmt: skip
    assert rows[0]["last_error"] == "smtp refused\nline two"
    assert rows[0]["finished_at"].endswith("+00:00")  # ISO 8601, with its offset


def test_jobs_list_pages_by_id_and_says_where_the_next_page_starts(dsn: str, db: Db) -> None:
    ids = fill(db)

    first = run_cli(dsn, "jobs", "list", "--limit", "3", "--json")
    before = first.stderr.split("--before ")[1].strip()
    second = run_cli(dsn, "jobs", "list", "--json", PGJOBQ_LIMIT="3", PGJOBQ_BEFORE=before)

    assert first.returncode == second.returncode == 0
    assert [row["id"] for row in json.loads(first.stdout)] == [ids["other"], ids["queued"], ids["failed"]]
    assert before == str(ids["failed"])
    assert [row["id"] for row in json.loads(second.stdout)] == [ids["done"]]
    assert second.stderr == ""


def test_jobs_show_prints_the_whole_job(dsn: str, db: Db) -> None:
    ids = fill(db)

    done = run_cli(dsn, "jobs", "show", str(ids["done"]), "--json")
    queued = run_cli(dsn, "jobs", "show", str(ids["queued"]))

    assert done.returncode == queued.returncode == 0
    shown = json.loads(done.stdout)
    assert {
        key: shown[key] for key in ("queue", "status", "payload", "result", "locked_by", "depends_on")
    } == {
        "queue": "emails",
        "status": "done",
        "payload": {"to": "ada"},
        "result": {"sent": True},
        "locked_by": "w1",
        "depends_on": None,
    }
    assert 'payload: {"to": "cy"}' in queued.stdout.splitlines()
    assert 'headers: {"trace": "t1"}' in queued.stdout.splitlines()
    assert "status: queued" in queued.stdout.splitlines()


def test_jobs_show_of_an_unknown_id_prints_one_line_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "jobs", "show", "424242")

    assert result.returncode == 1
    assert result.stderr.strip() == "Error: id 424242: no such job"


def test_job_prints_what_jobs_show_prints_for_the_same_job(dsn: str, db: Db) -> None:
    ids = fill(db)

    for job_id in (str(ids["done"]), str(ids["queued"])):
        for options in ((), ("--json",)):
            alias = run_cli(dsn, "job", job_id, *options)
            command = run_cli(dsn, "jobs", "show", job_id, *options)

            assert alias.returncode == command.returncode == 0, alias.stderr
            assert alias.stdout == command.stdout


def test_job_says_in_its_help_that_it_is_an_alias_of_jobs_show(dsn: str) -> None:
    result = run_cli(dsn, "job", "--help")

    assert result.returncode == 0, result.stderr
    assert "Alias of pgjobq jobs show" in result.stdout
    assert re.search(r"^ +job +Alias of pgjobq jobs show", run_cli(dsn, "--help").stdout, re.MULTILINE)


def test_jobs_show_to_a_role_that_cannot_read_the_jobs_table_prints_what_jobq_job_tells(
    dsn: str, db: Db
) -> None:
    ids = fill(db)
    whole = json.loads(run_cli(dsn, "jobs", "show", str(ids["done"]), "--json").stdout)

    with login_role(db) as role:
        db.execute("SELECT jobq.grant_producer(%s, see_jobs => true)", (role,))
        result = run_cli(make_conninfo(dsn, user=role), "jobs", "show", str(ids["done"]), "--json")

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert list(shown) == [key for key in whole if key in shown]  # in the same order
    assert set(whole) - set(shown) == {"priority", "payload", "headers", "locked_by", "locked_at",
                                       "lease_expires_at"}  # fmt: skip
    assert shown == {key: whole[key] for key in shown}
    assert result.stderr == (
        "priority, payload, headers and lease not shown: this role may not read jobq.jobs "
        "(pgjobq's monitor and admin levels may)\n"
    )
