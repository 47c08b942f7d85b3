"""The job-control commands of the pgjobq command line (0.6.0), run as real processes: cancel, pause,
resume, job, wait, configure-queue, queues, and enqueue's unique keys and headers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

from helpers.processes import run_cli
from helpers.sqlhelpers import Db, claim_one, enqueue, scalar


def later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def status(db: Db, job_id: int) -> str:
    return str(scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)))


def error_line(stderr: str) -> str:
    """The one line an error prints (and there must be exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


# -- cancel ---------------------------------------------------------------------------------------


def test_cancel_prints_each_jobs_status(dsn: str, db: Db) -> None:
    queued = enqueue(db, priority=-1)  # claimed last: stays queued
    enqueue(db)
    running = claim_one(db)["id"]

    result = run_cli(dsn, "cancel", str(running), str(queued))

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{queued} cancelled", f"{running} cancel_requested"]


def test_cancel_with_force_cancels_a_running_job_at_once(dsn: str, db: Db) -> None:
    enqueue(db)
    running = claim_one(db)["id"]

    result = run_cli(dsn, "cancel", str(running), "--force")

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{running} cancelled\n"
    assert status(db, running) == "cancelled"


def test_cancel_takes_force_from_the_environment(dsn: str, db: Db) -> None:
    enqueue(db)
    running = claim_one(db)["id"]

    result = run_cli(dsn, "cancel", str(running), PGJOBQ_FORCE="1")

    assert result.returncode == 0, result.stderr
    assert status(db, running) == "cancelled"


def test_cancel_of_an_unknown_id_names_it_and_exits_1_after_cancelling_the_others(dsn: str, db: Db) -> None:
    queued = enqueue(db)

    result = run_cli(dsn, "cancel", str(queued), "424242")

    assert result.returncode == 1
    assert result.stdout == f"{queued} cancelled\n"
    assert "424242" in error_line(result.stderr)
    assert status(db, queued) == "cancelled"


def test_cancel_without_ids_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "cancel")

    assert result.returncode == 2
    assert "ID..." in result.stderr


# -- pause and resume ------------------------------------------------------------------------------


def test_pause_stops_claims_and_resume_lets_them_run_again(dsn: str, db: Db) -> None:
    enqueue(db, "emails")

    paused = run_cli(dsn, "pause", "emails")
    claimed_while_paused = scalar(db, "SELECT count(*) FROM jobq.claim('emails', 1, 'w')")
    resumed = run_cli(dsn, "resume", "emails")

    assert (paused.returncode, paused.stdout) == (0, "queue emails paused\n"), paused.stderr
    assert claimed_while_paused == 0
    assert (resumed.returncode, resumed.stdout) == (0, "queue emails resumed\n"), resumed.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.claim('emails', 1, 'w')") == 1


def test_pause_of_a_queue_nothing_knows_pauses_it_and_says_so_on_stderr(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "pause", "emials")

    assert (result.returncode, result.stdout) == (0, "queue emials paused\n"), result.stderr
    assert result.stderr.startswith("notice: ") and "emials" in result.stderr
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emials'") is True


def test_pause_of_a_known_queue_says_nothing_more(dsn: str, db: Db) -> None:
    enqueue(db, "emails")

    result = run_cli(dsn, "pause", "emails")

    assert (result.returncode, result.stderr) == (0, "")


def test_pause_of_a_bad_queue_name_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "pause", "Bad Queue")

    assert result.returncode == 1
    assert "queue must be" in error_line(result.stderr)


# -- job -------------------------------------------------------------------------------------------


def test_job_json_shows_the_jobs_state_and_result(dsn: str, db: Db) -> None:
    enqueue(db, "emails")
    claimed = claim_one(db, "emails")
    db.execute("SELECT jobq.complete(%s, %s, result => '{\"sent\": 2}')", (claimed["id"], claimed["lease"]))

    result = run_cli(dsn, "job", str(claimed["id"]), "--json")

    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert {k: state[k] for k in ("id", "queue", "status", "attempts", "result", "cancel_requested")} == {
        "id": claimed["id"], "queue": "emails", "status": "done", "attempts": 1, "result": {"sent": 2},
        "cancel_requested": False,
    }  # fmt: skip
    assert state["finished_at"] is not None


def test_job_prints_one_line_per_field(dsn: str, db: Db) -> None:
    job_id = enqueue(db, "emails")

    result = run_cli(dsn, "job", str(job_id))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [f"id: {job_id}", "queue: emails", "task: -", "status: queued"]
    assert "result: -" in lines and "cancel requested: no" in lines


def test_job_of_an_unknown_id_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "job", "424242")

    assert result.returncode == 1
    assert "424242" in error_line(result.stderr)


# -- wait ------------------------------------------------------------------------------------------


def test_wait_prints_the_result_and_exits_0_once_the_job_is_done(dsn: str, db: Db) -> None:
    enqueue(db)
    claimed = claim_one(db)
    finisher = later(
        1.0,
        lambda: db.execute(
            "SELECT jobq.complete(%s, %s, result => '[1, \"two\"]')", (claimed["id"], claimed["lease"])
        ),
    )

    result = run_cli(dsn, "wait", str(claimed["id"]), "--timeout", "60")

    finisher.join()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [1, "two"]


def test_wait_for_a_done_job_without_a_result_prints_nothing(dsn: str, db: Db) -> None:
    enqueue(db)
    claimed = claim_one(db)
    db.execute("SELECT jobq.complete(%s, %s)", (claimed["id"], claimed["lease"]))

    result = run_cli(dsn, "wait", str(claimed["id"]))

    assert (result.returncode, result.stdout) == (0, ""), result.stderr


def test_wait_for_a_failed_job_prints_its_error_and_exits_1(dsn: str, db: Db) -> None:
    enqueue(db, max_attempts=1)
    claimed = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'SMTP timeout', %s)", (claimed["id"], claimed["lease"]))

    result = run_cli(dsn, "wait", str(claimed["id"]))

    assert result.returncode == 1
    line = error_line(result.stderr)
    assert "failed" in line and "SMTP timeout" in line


def test_wait_for_a_cancelled_job_exits_1(dsn: str, db: Db) -> None:
    job_id = enqueue(db)
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (job_id,))

    result = run_cli(dsn, "wait", str(job_id))

    assert result.returncode == 1
    assert "cancelled" in error_line(result.stderr)


def test_wait_at_its_timeout_says_where_the_job_is_and_exits_3(dsn: str, db: Db) -> None:
    job_id = enqueue(db)

    result = run_cli(dsn, "wait", str(job_id), PGJOBQ_WAIT_TIMEOUT="0.2")

    assert result.returncode == 3
    assert "still queued" in error_line(result.stderr)


def test_wait_for_an_unknown_id_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "wait", "424242", "--timeout", "1")

    assert result.returncode == 1
    assert "424242" in error_line(result.stderr)


@pytest.mark.parametrize("seconds", ["nan", "inf", "soon"])
def test_wait_with_a_timeout_that_is_no_number_of_seconds_is_bad_usage(dsn: str, seconds: str) -> None:
    result = run_cli(dsn, "wait", "1", "--timeout", seconds)

    assert result.returncode == 2
    assert "not a finite number of seconds" in result.stderr


# -- configure-queue and queues --------------------------------------------------------------------


def test_configure_queue_sets_what_it_is_given_and_prints_every_setting(dsn: str) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails", "--max-attempts", "5", "--backoff-base", "2", "--timeout", "600",
        "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "queue": "emails", "paused": False, "max_attempts": 5, "backoff_base": 2.0, "backoff_max": 300.0,
        "backoff_jitter": 0.0, "lease_timeout": 60.0, "timeout": 600.0, "configured": True,
        "concurrency": None, "key_concurrency": None, "key_order": "priority", "rate_limit": None,
        "rate_interval": None, "retain_done": 86400.0, "retain_failed": 1209600.0,
        "retain_cancelled": 604800.0,
    }  # fmt: skip


def test_configure_queue_takes_its_settings_from_the_environment(dsn: str) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails", "--json", PGJOBQ_QUEUE_LEASE_TIMEOUT="30",
        PGJOBQ_QUEUE_BACKOFF_JITTER="0.25",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)
    assert (settings["lease_timeout"], settings["backoff_jitter"]) == (30.0, 0.25)


def test_configure_queue_unset_clears_a_setting(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', timeout => '1 minute', max_attempts => 4)")

    result = run_cli(dsn, "configure-queue", "emails", "--unset", "timeout")

    assert result.returncode == 0, result.stderr
    assert "timeout: -" in result.stdout.splitlines()
    assert "max attempts: 4" in result.stdout.splitlines()


def test_configure_queue_unset_of_an_unknown_setting_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--unset", "colour")

    assert result.returncode == 2
    assert "colour" in result.stderr


def test_configure_queue_out_of_range_prints_the_databases_reason_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--backoff-jitter", "2")

    assert result.returncode == 1
    assert "backoff_jitter must be between 0 and 1" in error_line(result.stderr)


def test_queues_json_lists_each_queue_with_its_settings(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.pause('emails')")
    enqueue(db, "pdfs")

    result = run_cli(dsn, "queues", "--json")

    assert result.returncode == 0, result.stderr
    listed = {q["queue"]: q for q in json.loads(result.stdout)}
    assert set(listed) == {"emails", "pdfs"}
    assert (listed["emails"]["paused"], listed["pdfs"]["paused"]) == (True, False)
    assert listed["pdfs"]["lease_timeout"] == 60.0


def test_queues_table_has_a_row_per_queue(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', max_attempts => 9)")
    enqueue(db, "pdfs")

    result = run_cli(dsn, "queues")

    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:2] == ["queue", "paused"]
    assert [row.split()[:3] for row in rows] == [["emails", "no", "9"], ["pdfs", "no", "3"]]


# -- enqueue's new options -------------------------------------------------------------------------


def test_enqueue_with_a_unique_key_in_use_prints_the_holders_id(dsn: str) -> None:
    first = run_cli(dsn, "enqueue", "emails", "{}", "--unique-key", "order-1")
    second = run_cli(dsn, "enqueue", "emails", "{}", PGJOBQ_UNIQUE_KEY="order-1")

    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    assert first.stdout == second.stdout != ""


def test_enqueue_skipped_for_a_held_key_prints_no_id(dsn: str, db: Db) -> None:
    enqueue(db, "emails", unique_key="order-1")

    result = run_cli(dsn, "enqueue", "emails", "{}", "--unique-key", "order-1", "--on-conflict", "skip")

    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert "skipped" in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 1


def test_enqueue_raising_for_a_held_key_names_the_holder_and_exits_1(dsn: str, db: Db) -> None:
    holder = enqueue(db, "emails", unique_key="order-1")

    result = run_cli(dsn, "enqueue", "emails", "{}", "--unique-key", "order-1", "--on-conflict", "raise")

    assert result.returncode == 1
    assert f"is held by job {holder}" in error_line(result.stderr)


def test_enqueue_stores_headers(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", "--headers", '{"trace": "t1"}')

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT headers FROM jobq.jobs WHERE id = %s", (int(result.stdout),)) == {"trace": "t1"}


def test_enqueue_has_no_timeout_option_a_timeout_is_the_queues(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", "--timeout", "90")

    assert result.returncode == 2
    assert "--timeout" in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0
    usage = run_cli(dsn, "enqueue", "--help")
    assert usage.returncode == 0, usage.stderr
    assert "--timeout" not in usage.stdout and "PGJOBQ_JOB_TIMEOUT" not in usage.stdout


def test_enqueue_without_max_attempts_leaves_it_to_the_queue(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT max_attempts FROM jobq.jobs WHERE id = %s", (int(result.stdout),)) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--headers", "[1]"), "must be a JSON object"),
        (("--headers", "{nope"), "not valid JSON"),
        (("--on-conflict", "ignore"), "ignore"),
    ],
    ids=["headers-not-an-object", "headers-not-json", "unknown-on-conflict"],
)
def test_enqueue_with_bad_new_options_is_bad_usage(
    dsn: str, db: Db, args: tuple[str, ...], message: str
) -> None:
    result = run_cli(dsn, "enqueue", "emails", "{}", *args)

    assert result.returncode == 2
    assert message in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_configure_queue_with_a_timeout_the_database_refuses_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--timeout", "0")

    assert result.returncode == 1
    assert "timeout" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.queue_settings") == 0


def test_stats_table_counts_cancelled_jobs(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.cancel(ARRAY[%s]::bigint[])", (enqueue(db, "emails"),))

    result = run_cli(dsn, "stats", "--json")

    assert result.returncode == 0, result.stderr
    (emails,) = json.loads(result.stdout)
    assert (emails["queued"], emails["cancelled"]) == (0, 1)
