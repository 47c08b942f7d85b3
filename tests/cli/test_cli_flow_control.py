"""The flow-control commands of the pgjobq command line (0.7.0), run as real processes: the limits of
configure-queue, queues with its counts, enqueue's concurrency key and parents, and schedule,
unschedule and schedules.  Every flag has an environment-variable twin; a refused value prints one
line and exits 1, bad usage exits 2."""

from __future__ import annotations

import json

from helpers.processes import run_cli
from helpers.sqlhelpers import Db, claim_one, enqueue, scalar


def error_line(stderr: str) -> str:
    """The one line an error prints (and there must be exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


def settings(db: Db, queue: str) -> dict[str, object]:
    row = db.execute(
        "SELECT concurrency, key_concurrency, key_order, rate_limit,"
        "       extract(epoch FROM rate_interval)::float8 AS rate_interval"
        "  FROM jobq.queues WHERE queue = %s",
        (queue,),
    ).fetchone()
    assert row is not None, f"queue {queue} has no settings"
    return row


# -- configure-queue: the limits ------------------------------------------------------------------


def test_configure_queue_sets_every_limit_and_prints_them_as_json(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails", "--json", "--concurrency", "4", "--key-concurrency", "1",
        "--key-order", "round_robin", "--rate-limit", "50", "--rate-interval", "60",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    limits = ("concurrency", "key_concurrency", "key_order", "rate_limit", "rate_interval")
    assert {name: printed[name] for name in limits} == {
        "concurrency": 4, "key_concurrency": 1, "key_order": "round_robin", "rate_limit": 50,
        "rate_interval": 60,
    }  # fmt: skip
    assert settings(db, "emails") == {
        "concurrency": 4, "key_concurrency": 1, "key_order": "round_robin", "rate_limit": 50,
        "rate_interval": 60.0,
    }  # fmt: skip


def test_configure_queue_takes_the_limits_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails",
        PGJOBQ_QUEUE_CONCURRENCY="3", PGJOBQ_QUEUE_KEY_CONCURRENCY="2", PGJOBQ_QUEUE_KEY_ORDER="round_robin",
        PGJOBQ_QUEUE_RATE_LIMIT="7", PGJOBQ_QUEUE_RATE_INTERVAL="2.5",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert settings(db, "emails") == {
        "concurrency": 3, "key_concurrency": 2, "key_order": "round_robin", "rate_limit": 7,
        "rate_interval": 2.5,
    }  # fmt: skip


def test_configure_queue_prints_the_limits_as_text(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--concurrency", "4", "--rate-limit", "5")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"concurrency: 4", "key concurrency: -", "key order: priority", "rate limit: 5",
            "rate interval: 1s"} <= set(lines)  # fmt: skip


def test_configure_queue_unset_clears_a_limit(dsn: str, db: Db) -> None:
    run_cli(dsn, "configure-queue", "emails", "--concurrency", "4", "--key-concurrency", "2")

    result = run_cli(dsn, "configure-queue", "emails", "--unset", "concurrency")

    assert result.returncode == 0, result.stderr
    assert (settings(db, "emails")["concurrency"], settings(db, "emails")["key_concurrency"]) == (None, 2)


def test_configure_queue_with_a_limit_out_of_range_prints_one_line_naming_it_and_exits_1(
    dsn: str, db: Db
) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--concurrency", "0")

    assert result.returncode == 1
    assert "concurrency must be between 1 and 100000" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.queues") == 0


def test_configure_queue_with_an_unknown_key_order_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--key-order", "sideways")

    assert result.returncode == 2
    assert "--key-order" in result.stderr and "sideways" in result.stderr


def test_configure_queue_with_a_rate_interval_that_is_not_a_number_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--rate-limit", "5", "--rate-interval", "soon")

    assert result.returncode == 2
    assert "'soon' is not a finite number of seconds" in result.stderr


# -- queues ---------------------------------------------------------------------------------------


def test_queues_json_has_each_queues_counts_and_limits(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', concurrency => 3, rate_limit => 10)")
    for _ in range(3):
        enqueue(db, "emails")
    claim_one(db, "emails")

    result = run_cli(dsn, "queues", "--json")

    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    picked = {name: row[name] for name in ("queue", "queued", "running", "concurrency", "key_concurrency",
                                           "key_order", "rate_limit", "rate_interval", "paused")}  # fmt: skip
    assert picked == {
        "queue": "emails", "queued": 2, "running": 1, "concurrency": 3, "key_concurrency": None,
        "key_order": "priority", "rate_limit": 10, "rate_interval": 1, "paused": False,
    }  # fmt: skip


def test_queues_table_shows_the_counts_and_the_limits(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', concurrency => 3, rate_limit => 10)")
    enqueue(db, "emails")

    result = run_cli(dsn, "queues")

    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    # after the columns of 0.6.0 (configured): the counts, then the limits (and the retention, 0.10.0)
    assert header.split()[-11:-1] == [
        "configured", "queued", "running", "waiting", "concurrency", "per", "key", "key", "order", "rate",
    ]  # fmt: skip
    assert row.split()[-9:-1] == ["yes", "1", "0", "0", "3", "-", "priority", "10/1s"]


# -- enqueue: concurrency key and parents ---------------------------------------------------------


def test_enqueue_with_a_concurrency_key_is_held_back_by_the_key_limit(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('default', key_concurrency => 1)")
    enqueue(db, concurrency_key="a")
    claim_one(db)

    result = run_cli(dsn, "enqueue", "default", "{}", "--concurrency-key", "a")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.claim('default', 1, 'w')") == 0


def test_enqueue_takes_the_concurrency_key_from_the_environment(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('default', key_concurrency => 1)")
    enqueue(db, concurrency_key="a")
    claim_one(db)

    result = run_cli(dsn, "enqueue", "default", "{}", PGJOBQ_CONCURRENCY_KEY="a")

    assert result.returncode == 0, result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.claim('default', 1, 'w')") == 0


def test_enqueue_with_parents_makes_a_waiting_job_that_names_them(dsn: str, db: Db) -> None:
    first, second = enqueue(db), enqueue(db)

    result = run_cli(dsn, "enqueue", "default", "{}", "--depends-on", str(first), "--depends-on", str(second))

    assert result.returncode == 0, result.stderr
    child = int(result.stdout)
    state = db.execute("SELECT status, depends_on FROM jobq.job(%s)", (child,)).fetchone()
    assert state is not None
    assert (state["status"], sorted(state["depends_on"])) == ("waiting", [first, second])


def test_enqueue_takes_the_parents_from_the_environment_separated_by_spaces(dsn: str, db: Db) -> None:
    first, second = enqueue(db), enqueue(db)

    result = run_cli(dsn, "enqueue", "default", "{}", PGJOBQ_DEPENDS_ON=f"{first} {second}")

    assert result.returncode == 0, result.stderr
    parents = scalar(db, "SELECT depends_on FROM jobq.job(%s)", (int(result.stdout),))
    assert sorted(parents) == [first, second]


def test_enqueue_with_on_parent_failure_run_queues_the_child_when_its_parent_fails(dsn: str, db: Db) -> None:
    parent = enqueue(db, max_attempts=1)

    result = run_cli(
        dsn, "enqueue", "default", "{}", "--depends-on", str(parent), "--on-parent-failure", "run"
    )

    assert result.returncode == 0, result.stderr
    claimed = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (claimed["id"], claimed["lease"]))
    assert scalar(db, "SELECT status FROM jobq.job(%s)", (int(result.stdout),)) == "queued"


def test_enqueue_takes_on_parent_failure_from_the_environment(dsn: str, db: Db) -> None:
    parent = enqueue(db, max_attempts=1)

    result = run_cli(
        dsn, "enqueue", "default", "{}", "--depends-on", str(parent), PGJOBQ_ON_PARENT_FAILURE="run"
    )

    assert result.returncode == 0, result.stderr
    claimed = claim_one(db)
    db.execute("SELECT jobq.fail(%s, 'boom', %s)", (claimed["id"], claimed["lease"]))
    assert scalar(db, "SELECT status FROM jobq.job(%s)", (int(result.stdout),)) == "queued"


def test_enqueue_with_an_unknown_parent_prints_one_line_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "default", "{}", "--depends-on", "424242")

    assert result.returncode == 1
    assert "424242" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_enqueue_with_a_parent_that_is_not_an_id_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "enqueue", "default", "{}", "--depends-on", "first")

    assert result.returncode == 2
    assert "--depends-on" in result.stderr
    assert scalar(db, "SELECT count(*) FROM jobq.jobs") == 0


def test_enqueue_with_an_unknown_on_parent_failure_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "enqueue", "default", "{}", "--on-parent-failure", "ignore")

    assert result.returncode == 2
    assert "--on-parent-failure" in result.stderr


# -- schedule, unschedule, schedules --------------------------------------------------------------


def schedule_rows(db: Db) -> list[dict[str, object]]:
    return db.execute(
        "SELECT name, queue, payload, cron, timezone, extract(epoch FROM every)::float8 AS every, priority,"
        "       max_attempts, catch_up FROM jobq.schedules ORDER BY name"
    ).fetchall()


def test_schedule_every_creates_the_schedule_and_prints_it(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "schedule", "digest", "--queue", "emails", "--payload", '{"kind": "daily"}', "--every", "300",
        "--priority", "2", "--max-attempts", "4",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert "name: digest" in result.stdout.splitlines()
    assert schedule_rows(db) == [
        {"name": "digest", "queue": "emails", "payload": {"kind": "daily"}, "cron": None, "timezone": "UTC",
         "every": 300.0, "priority": 2, "max_attempts": 4, "catch_up": "latest"},
    ]  # fmt: skip


def test_schedule_cron_in_a_timezone_prints_it_as_json(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "schedule", "digest", "--queue", "emails", "--cron", "0 8 * * *", "--timezone", "Europe/Paris",
        "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert (printed["name"], printed["cron"], printed["timezone"], printed["every"]) == (
        "digest", "0 8 * * *", "Europe/Paris", None,
    )  # fmt: skip
    assert printed["next_run"] is not None


def test_schedule_takes_its_options_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "schedule", "digest",
        PGJOBQ_SCHEDULE_QUEUE="emails", PGJOBQ_EVERY="60", PGJOBQ_PAYLOAD='{"n": 1}', PGJOBQ_PRIORITY="5",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    (row,) = schedule_rows(db)
    assert (row["queue"], row["every"], row["payload"], row["priority"]) == ("emails", 60.0, {"n": 1}, 5)


def test_schedule_takes_cron_and_timezone_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn,
        "schedule",
        "digest",
        "--queue",
        "emails",
        PGJOBQ_CRON="*/5 * * * *",
        PGJOBQ_TIMEZONE="Asia/Tokyo",
    )

    assert result.returncode == 0, result.stderr
    (row,) = schedule_rows(db)
    assert (row["cron"], row["timezone"]) == ("*/5 * * * *", "Asia/Tokyo")


def test_schedule_takes_catch_up_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--every", "60", PGJOBQ_CATCH_UP="skip")

    assert result.returncode == 0, result.stderr
    assert [row["catch_up"] for row in schedule_rows(db)] == ["skip"]


def test_schedule_with_an_unknown_catch_up_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--every", "60", "--catch-up", "some")

    assert result.returncode == 2
    assert "--catch-up" in result.stderr
    assert schedule_rows(db) == []


def test_schedule_with_an_every_of_a_fraction_of_a_second_prints_one_line_and_exits_1(
    dsn: str, db: Db
) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--every", "0.5")

    assert result.returncode == 1
    assert "every must be" in error_line(result.stderr)
    assert schedule_rows(db) == []


def test_schedule_without_cron_or_every_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails")

    assert result.returncode == 2
    assert "--cron or --every" in result.stderr
    assert schedule_rows(db) == []


def test_schedule_with_both_cron_and_every_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--cron", "* * * * *", "--every", "60")

    assert result.returncode == 2
    assert "--cron or --every" in result.stderr
    assert schedule_rows(db) == []


def test_schedule_without_a_queue_is_bad_usage(dsn: str) -> None:
    result = run_cli(dsn, "schedule", "digest", "--every", "60")

    assert result.returncode == 2
    assert "--queue" in result.stderr


def test_schedule_with_a_bad_cron_expression_prints_one_line_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--cron", "every day at noon")

    assert result.returncode == 1
    assert "cron" in error_line(result.stderr)
    assert schedule_rows(db) == []


def test_schedule_with_a_payload_that_is_not_an_object_is_bad_usage(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "schedule", "digest", "--queue", "emails", "--every", "60", "--payload", "[1]")

    assert result.returncode == 2
    assert "--payload" in result.stderr and "must be a JSON object" in result.stderr
    assert schedule_rows(db) == []


def test_unschedule_removes_the_schedule(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 minute')")

    result = run_cli(dsn, "unschedule", "digest")

    assert (result.returncode, result.stdout) == (0, "schedule digest removed\n"), result.stderr
    assert schedule_rows(db) == []


def test_unschedule_of_an_unknown_schedule_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "unschedule", "digest")

    assert result.returncode == 1
    assert error_line(result.stderr) == "Error: no schedule named 'digest'"


def test_schedules_json_lists_every_schedule(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.schedule('b_digest', 'emails', every => '1 minute')")
    db.execute("SELECT jobq.schedule('a_report', 'reports', cron => '0 8 * * 1', timezone => 'Europe/Paris')")

    result = run_cli(dsn, "schedules", "--json")

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert [(s["name"], s["queue"], s["cron"], s["every"]) for s in printed] == [
        ("a_report", "reports", "0 8 * * 1", None),
        ("b_digest", "emails", None, 60),
    ]
    assert all(s["next_run"] is not None for s in printed)


def test_schedules_table_shows_when_each_one_runs(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 minute')")
    db.execute("SELECT jobq.schedule('report', 'reports', cron => '0 8 * * 1', timezone => 'Europe/Paris')")

    result = run_cli(dsn, "schedules")

    assert result.returncode == 0, result.stderr
    header, digest, report = result.stdout.splitlines()
    assert header.split()[:3] == ["name", "queue", "when"]
    assert digest.split()[:4] == ["digest", "emails", "every", "60s"]
    assert report.split()[:7] == ["report", "reports", "0", "8", "*", "*", "1"]
    assert "(Europe/Paris)" in report


def test_schedules_takes_json_from_the_environment(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 minute')")

    result = run_cli(dsn, "schedules", PGJOBQ_JSON="1")

    assert result.returncode == 0, result.stderr
    assert [s["name"] for s in json.loads(result.stdout)] == ["digest"]
