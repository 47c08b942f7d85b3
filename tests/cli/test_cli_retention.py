"""Retention on the command line (extension 0.10.0), run as real processes: configure-queue's
--retain-done, --retain-failed, --retain-cancelled and --keep-forever, each with its PGJOBQ_QUEUE_
variable, and the retention column of queues.  A refused value prints one line and exits 1, bad usage
exits 2.  (pgjobq-py 1.3.0 supports the extension from 0.10.0 on, which has retention: the tests of the
refusal on 0.9.0 went with its support.)"""

from __future__ import annotations

import json

import pytest

from helpers.processes import run_cli
from helpers.sqlhelpers import Db, enqueue, scalar

KEPT = """
SELECT extract(epoch FROM retain_done)::float8 AS done, extract(epoch FROM retain_failed)::float8 AS failed,
       extract(epoch FROM retain_cancelled)::float8 AS cancelled
  FROM jobq.queues WHERE queue = %s
"""


def error_line(stderr: str) -> str:
    """The one line an error prints (and there must be exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


def kept(db: Db, queue: str) -> dict[str, float | None]:
    """The queue's retention in seconds, by final state, as jobq.queues shows it (None: until purged)."""
    row = db.execute(KEPT, (queue,)).fetchone()
    assert row is not None, f"queue {queue} is not listed"
    return row


def test_configure_queue_sets_each_states_retention_and_prints_it_as_json(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails", "--json", "--retain-done", "0", "--retain-failed", "2592000",
        "--retain-cancelled", "3600",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert [printed[f"retain_{state}"] for state in ("done", "failed", "cancelled")] == [0, 2592000, 3600]
    assert kept(db, "emails") == {"done": 0, "failed": 2592000, "cancelled": 3600}


def test_configure_queue_takes_the_retention_from_the_environment(dsn: str, db: Db) -> None:
    result = run_cli(
        dsn, "configure-queue", "emails",
        PGJOBQ_QUEUE_RETAIN_DONE="60", PGJOBQ_QUEUE_RETAIN_CANCELLED="120",
        PGJOBQ_QUEUE_KEEP_FOREVER="failed",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert kept(db, "emails") == {"done": 60, "failed": None, "cancelled": 120}


def test_keep_forever_is_repeatable_and_its_variable_takes_states_separated_by_spaces(
    dsn: str, db: Db
) -> None:
    flags = run_cli(dsn, "configure-queue", "flags", "--keep-forever", "done", "--keep-forever", "cancelled")
    variable = run_cli(dsn, "configure-queue", "variable", PGJOBQ_QUEUE_KEEP_FOREVER="done cancelled")

    assert (flags.returncode, variable.returncode) == (0, 0), (flags.stderr, variable.stderr)
    assert kept(db, "flags") == kept(db, "variable") == {"done": None, "failed": 1209600, "cancelled": None}


def test_configure_queue_prints_a_state_kept_until_purged_as_a_dash(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "invoices", "--keep-forever", "done")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"retain done: -", "retain failed: 1209600s", "retain cancelled: 604800s"} <= set(lines)


def test_configure_queue_without_keep_forever_leaves_the_list_as_it_was(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('invoices', keep_forever => '{done}')")

    result = run_cli(dsn, "configure-queue", "invoices", "--max-attempts", "5")

    assert result.returncode == 0, result.stderr
    assert kept(db, "invoices")["done"] is None


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("retain_failed", {"done": None, "failed": 1209600, "cancelled": 60}),
        ("keep_forever", {"done": 86400, "failed": 172800, "cancelled": 60}),
    ],
)
def test_unset_puts_a_retention_setting_back_to_its_default(
    dsn: str, db: Db, setting: str, expected: dict[str, float]
) -> None:
    db.execute(
        "SELECT jobq.configure_queue('emails', retain_failed => '2 days', retain_cancelled => '1 minute',"
        " keep_forever => '{done}')"
    )

    result = run_cli(dsn, "configure-queue", "emails", "--unset", setting)

    assert result.returncode == 0, result.stderr
    assert kept(db, "emails") == expected


def test_a_retention_out_of_range_prints_one_line_naming_it_and_exits_1(dsn: str, db: Db) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--retain-done", "-1")

    assert result.returncode == 1
    assert "retain_done must be an interval from 0 to 10 years" in error_line(result.stderr)
    assert scalar(db, "SELECT count(*) FROM jobq.queue_settings") == 0


def test_keep_forever_with_the_retention_of_the_same_state_prints_one_line_and_exits_1(dsn: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", "--keep-forever", "done", "--retain-done", "60")

    assert result.returncode == 1
    assert "keep_forever must not name a state whose retention is also given" in error_line(result.stderr)


@pytest.mark.parametrize(
    ("words", "named"),
    [
        (["--keep-forever", "later"], "'later' is not one of 'done', 'failed', 'cancelled'"),
        (["--retain-failed", "a fortnight"], "'a fortnight' is not a finite number of seconds"),
        (["--unset", "retain_everything"], "retain_everything"),
    ],
)
def test_a_retention_option_with_a_bad_value_is_bad_usage(dsn: str, words: list[str], named: str) -> None:
    result = run_cli(dsn, "configure-queue", "emails", *words)

    assert result.returncode == 2
    assert named in result.stderr


def test_queues_table_shows_each_queues_retention_last(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_done => '90 min', keep_forever => '{failed}')")
    enqueue(db, "pdfs")

    result = run_cli(dsn, "queues")

    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[-1] == "retention"
    assert [row.split()[-1] for row in rows] == ["90m/-/7d", "1d/14d/7d"]


def test_queues_json_has_each_queues_retention_in_seconds(dsn: str, db: Db) -> None:
    db.execute("SELECT jobq.configure_queue('emails', retain_cancelled => '36h', keep_forever => '{done}')")

    result = run_cli(dsn, "queues", "--json")

    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["retain_done"], row["retain_failed"], row["retain_cancelled"]) == (None, 1209600, 129600)
