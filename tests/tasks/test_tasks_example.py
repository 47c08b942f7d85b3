"""The example application's own tests (examples/tasks_app/test_tasks.py, which docs/howto/tasks.md
quotes) pass: run as a user runs them, by pytest in a process of its own, against a test database named by
DATABASE_URL."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.fixtures import REPO_ROOT


def test_the_example_apps_tests_pass_against_a_test_database(dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PGJOBQ_"))}
    env["DATABASE_URL"] = dsn

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/tasks_app", "-q", "-p", "no:xdist"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
