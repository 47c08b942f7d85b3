"""Helpers for tests that run pgjobq as real processes (the CLI and workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["TESTS", "pgjobq_command", "process_env", "run_cli"]

TESTS = Path(__file__).resolve().parent


def pgjobq_command(*args: str) -> list[str]:
    """The argv of the pgjobq CLI, run by this interpreter (so the venv's package is used)."""
    return [sys.executable, "-m", "pgjobq", *args]


def process_env(dsn: str, **extra: str) -> dict[str, str]:
    """Environment for worker and CLI processes: handlers importable from tests/."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGJOBQ_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]), PGJOBQ_DSN=dsn)
    env.update(extra)
    return env


def run_cli(dsn: str, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the pgjobq CLI to completion and return what it did."""
    return subprocess.run(
        pgjobq_command(*args),
        env=process_env(dsn, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
