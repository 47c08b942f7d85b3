"""Durable execution on the command line (extension 0.11.0), run as real processes: enqueue --hold, jobs
unhold, signal (--keep), and the steps, progress and waiting_for of jobs show.  Each option has its PGJOBQ_
variable; a refused value prints one line and exits 1, bad usage exits 2; on extension 0.10.0 the new
commands exit 1 saying they need 0.11.0, and jobs show keeps working there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from throwaway_pg import ThrowawayPostgres

from helpers.databases import connect_as, fresh_database
from helpers.processes import run_cli
from helpers.sqlhelpers import Db, claim_one, enqueue, scalar


def error_line(stderr: str) -> str:
    """The one line an error prints (and there must be exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


def status(db: Db, job_id: int) -> str:
    return str(scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)))


def parked_on_signal(db: Db, key: str) -> int:
    """A job waiting (jobq.await_signal) for the signal key; its id."""
    enqueue(db)
    claimed = claim_one(db)
    db.execute("SELECT jobq.await_signal(%s, %s, %s)", (claimed["id"], claimed["lease"], key))
    return int(claimed["id"])


def outcome(db: Db, job_id: int, key: str) -> object:
    """What the job's wait for key recorded (jobq.job_steps)."""
    return scalar(db, "SELECT result FROM jobq.job_steps WHERE id = %s AND name = %s", (job_id, key))


@pytest.fixture
def old_dsn(db: Db, pg_server: ThrowawayPostgres) -> Iterator[str]:
    """The DSN of a database of its own at extension 0.10.0, which has no durable execution."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.10.0'")
        yield pg_server.dsn(dbname)


# -- enqueue --hold and jobs unhold ---------------------------------------------------------------


def test_enqueue_hold_prints_the_id_of_a_job_held_waiting(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", "--hold")

    assert result.returncode == 0, result.stderr
    assert status(db, int(result.stdout)) == "waiting"


def test_enqueue_takes_hold_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", PGJOBQ_HOLD="1")

    assert result.returncode == 0, result.stderr
    assert status(db, int(result.stdout)) == "waiting"


def test_enqueue_hold_with_a_unique_key_prints_one_line_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", "--hold", "--unique-key", "k")

    assert result.returncode == 1
    assert "hold cannot be combined with unique_key" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_jobs_unhold_queues_the_held_jobs_and_prints_how_many(dsn: str, db: Db) -> None:
    held = [enqueue(db, hold=True) for _ in range(2)]
    plain = enqueue(db)

    result = run_cli(dsn, "jobs", "unhold", *map(str, (*held, plain)))

    assert result.returncode == 0, result.stderr
    assert result.stdout == "2 job(s) released\n"
    assert [status(db, job_id) for job_id in held] == ["queued", "queued"]


@pytest.mark.parametrize("ids", [(), ("seven",)], ids=["none", "not-a-number"])
def test_jobs_unhold_without_a_job_id_is_bad_usage(dsn: str, ids: tuple[str, ...]) -> None:
    result = run_cli(dsn, "jobs", "unhold", *ids)

    assert result.returncode == 2
    assert "ID..." in result.stderr and "Traceback" not in result.stderr


# -- signal ----------------------------------------------------------------------------------------


def test_signal_queues_the_jobs_waiting_for_its_key_and_prints_how_many(dsn: str, db: Db) -> None:
    waiting = parked_on_signal(db, "approved:7")

    result = run_cli(dsn, "signal", "approved:7", '{"by": "ada"}')

    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 job(s) released\n"
    assert status(db, waiting) == "queued"
    assert outcome(db, waiting, "approved:7") == {"payload": {"by": "ada"}}


def test_signal_without_a_payload_sends_json_null(dsn: str, db: Db) -> None:
    waiting = parked_on_signal(db, "go")

    result = run_cli(dsn, "signal", "go")

    assert result.returncode == 0, result.stderr
    assert outcome(db, waiting, "go") == {"payload": None}


def test_signal_takes_any_json_value_as_payload(dsn: str, db: Db) -> None:
    waiting = parked_on_signal(db, "go")

    result = run_cli(dsn, "signal", "go", "[1, 2]")

    assert result.returncode == 0, result.stderr
    assert outcome(db, waiting, "go") == {"payload": [1, 2]}


def test_signal_sent_again_releases_nothing(dsn: str, db: Db) -> None:
    first = run_cli(dsn, "signal", "go")
    parked_on_signal(db, "other")

    again = run_cli(dsn, "signal", "go")

    assert (first.returncode, again.returncode) == (0, 0), (first.stderr, again.stderr)
    assert again.stdout == "0 job(s) released\n"


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_signal_keeps_the_signal_for_keep_seconds(dsn: str, db: Db, how: str) -> None:
    if how == "flag":
        result = run_cli(dsn, "signal", "go", "--keep", "7200")
    else:
        result = run_cli(dsn, "signal", "go", PGJOBQ_SIGNAL_KEEP="7200")

    assert result.returncode == 0, result.stderr
    kept = scalar(db, "SELECT expires_at - signalled_at FROM jobq.signals WHERE key = 'go'")
    assert kept == timedelta(hours=2)


def test_signal_keeps_the_signal_seven_days_by_default(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "signal", "go")

    assert result.returncode == 0, result.stderr
    kept = scalar(db, "SELECT expires_at - signalled_at FROM jobq.signals WHERE key = 'go'")
    assert kept == timedelta(days=7)


def test_signal_with_a_payload_that_is_not_json_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "signal", "go", "{not json")

    assert result.returncode == 2
    assert "not valid JSON" in result.stderr and "Traceback" not in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.signals") == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("signal", ""), "key must be 1 to 200 characters, got 0"),
        (("signal", "go", "--keep", "-1"), "keep must be an interval between 0 and 10 years"),
        (("signal", "go", "NaN"), "payload is not serialisable as JSON"),
    ],
    ids=["empty-key", "negative-keep", "nan-payload"],
)
def test_a_refused_signal_prints_one_line_and_exits_1(
    dsn: str, db: Db, args: tuple[str, ...], message: str
) -> None:
    result = run_cli(dsn, *args)

    assert result.returncode == 1
    assert message in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.signals") == 0


# -- jobs show ----------------------------------------------------------------------------------


@pytest.fixture
def durable_job(db: Db) -> int:
    """A job that recorded a step, reported progress, and waits for the signal "go"; its id."""
    enqueue(db)
    claimed = claim_one(db)
    held = (claimed["id"], claimed["lease"])
    db.execute("SELECT jobq.checkpoint(%s, %s, 'fetch', '{\"rows\": 3}')", held)
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 1}')", held)
    db.execute("SELECT jobq.await_signal(%s, %s, 'go')", held)
    return int(claimed["id"])


def test_jobs_show_prints_the_steps_progress_and_what_the_job_waits_for(dsn: str, durable_job: int) -> None:
    result = run_cli(dsn, "jobs", "show", str(durable_job))

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3:] == [
        'steps: {"fetch": {"rows": 3}}',
        'progress: {"done": 1}',
        'waiting for: {"signal": "go", "timeout_at": null}',
    ]


def test_jobs_show_json_has_the_steps_progress_and_waiting_for(dsn: str, durable_job: int) -> None:
    result = run_cli(dsn, "jobs", "show", str(durable_job), "--json")

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert {key: shown[key] for key in ("status", "steps", "progress", "waiting_for")} == {
        "status": "waiting",
        "steps": {"fetch": {"rows": 3}},
        "progress": {"done": 1},
        "waiting_for": {"signal": "go", "timeout_at": None},
    }


def test_jobs_show_says_a_held_job_waits_for_unhold(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "jobs", "show", str(enqueue(db, hold=True)), "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["waiting_for"] == {"hold": True}


# -- extension 0.10.0 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (("signal", "go"), "signals need"),
        (("jobs", "unhold", "1"), "held jobs need"),
        (("enqueue", "emails", "{}", "--hold"), "held jobs need"),
    ],
    ids=["signal", "unhold", "enqueue-hold"],
)
def test_a_durable_command_on_0_10_0_prints_that_it_needs_0_11_0_and_exits_1(
    old_dsn: str, args: tuple[str, ...], what: str
) -> None:
    result = run_cli(old_dsn, *args)

    assert result.returncode == 1
    assert f"{what} the pgjobq extension 0.11.0 or later" in error_line(result.stderr)
    assert result.stdout == ""


def test_jobs_show_on_0_10_0_shows_no_steps_progress_or_wait(old_dsn: str) -> None:
    enqueued = run_cli(old_dsn, "enqueue", "emails", "{}")

    result = run_cli(old_dsn, "jobs", "show", enqueued.stdout.strip(), "--json")

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["status"], shown["steps"], shown["progress"], shown["waiting_for"]) == (
        "queued", None, None, None,
    )  # fmt: skip
