"""pgjobq worker --log-format: text lines (the default), or one JSON object per line on stderr, whose lines
about a job carry the job; run as real processes."""

from __future__ import annotations

import json
from typing import Any

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import run_cli
from helpers.sqlhelpers import Db, scalar

FAIL = "cli.logging_handlers:log_then_fail"


def objects(stderr: str) -> list[dict[str, Any]]:
    """Every line of stderr, parsed as JSON (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in stderr.splitlines()]


def test_json_logs_are_one_object_per_line_with_time_level_logger_and_message(dsn: str, db: Db) -> None:
    scalar(db, "SELECT jobq.enqueue('reports', '{}', max_attempts => 1)")

    result = run_cli(dsn, "worker", FAIL, "--queue", "reports", "--burst", "--log-format", "json")

    assert result.returncode == 0, result.stderr
    lines = objects(result.stderr)
    assert lines and all(isinstance(line, dict) for line in lines)
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    assert all(line["time"].endswith("+00:00") for line in lines)  # ISO 8601, in UTC
    assert any(line["message"].endswith("burst done") for line in lines)


def test_json_log_lines_about_a_job_carry_its_id_queue_and_attempt(dsn: str, db: Db) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('reports', '{\"say\": \"hello\"}', max_attempts => 1)")

    result = run_cli(dsn, "worker", FAIL, "--queue", "reports", "--burst", PGJOBQ_LOG_FORMAT="json")

    assert result.returncode == 0, result.stderr
    about = [line for line in objects(result.stderr) if line.get("job_id") == job_id]
    handler = [line for line in about if line["logger"] == "cli.logging_handlers"]
    worker = [line for line in about if line["logger"] == "pgjobq.worker" and line["level"] == "ERROR"]
    assert len(handler) == 1 and len(worker) == 1, about
    assert handler[0]["message"] == "about to fail: hello"
    assert "RuntimeError: the handler failed on purpose" in handler[0]["exc_info"]
    assert "the handler failed on purpose" in worker[0]["message"]
    for line in handler + worker:
        assert (line["queue"], line["attempt"]) == ("reports", 1)
        assert "task" not in line  # a plain job


def test_text_logs_stay_lines_of_text(dsn: str, db: Db) -> None:
    scalar(db, "SELECT jobq.enqueue('reports', '{}', max_attempts => 1)")

    result = run_cli(dsn, "worker", FAIL, "--queue", "reports", "--burst")

    assert result.returncode == 0, result.stderr
    assert " INFO pgjobq.worker: " in result.stderr
    assert not result.stderr.startswith("{")


def test_a_job_done_is_logged_at_debug_not_at_the_default_info(dsn: str, db: Db) -> None:
    db.execute(EXECUTIONS_DDL)
    job_id = scalar(db, "SELECT jobq.enqueue('reports', '{}')")
    worker = ("worker", "helpers.handlers:record", "--queue", "reports", "--burst")

    quiet = run_cli(dsn, *worker)
    db.execute("SELECT jobq.enqueue('reports', '{}')")
    verbose = run_cli(dsn, *worker, "--log-level", "DEBUG")

    assert quiet.returncode == 0 and verbose.returncode == 0, quiet.stderr + verbose.stderr
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "done"
    assert f"job {job_id} done" not in quiet.stderr and "burst done" in quiet.stderr
    assert f" DEBUG pgjobq.worker: job {job_id + 1} done (attempt 1)" in verbose.stderr
