"""Helpers for tests that run pgjobq as real processes (the CLI and workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = [
    "TESTS",
    "StartWorker",
    "WorkerProcess",
    "cpu_seconds",
    "pgjobq_command",
    "process_env",
    "run_cli",
    "wait_until",
]

TESTS = Path(__file__).resolve().parents[1]  # on the processes' path: helpers.handlers:NAME imports


def pgjobq_command(*args: str) -> list[str]:
    """The argv of the pgjobq CLI, run by this interpreter (so the venv's package is used)."""
    return [sys.executable, "-m", "pgjobq", *args]


def process_env(dsn: str, **extra: str) -> dict[str, str]:
    """Environment for worker and CLI processes: the helpers package importable from tests/."""
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(condition: Callable[[], bool], timeout: float = 30, interval: float = 0.05) -> bool:
    """Poll condition until it holds (True) or timeout passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


class WorkerProcess:
    """A real `pgjobq worker helpers.handlers:HANDLER` process whose log goes to a file."""

    def __init__(self, dsn: str, handler: str, *args: str, log: Path, **env: str) -> None:
        self.log_path = log
        self._log: IO[str] = log.open("w")
        self.process = subprocess.Popen(
            pgjobq_command("worker", f"helpers.handlers:{handler}", "--log-level", "DEBUG", *args),
            env=process_env(dsn, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait()


StartWorker = Callable[..., WorkerProcess]
"""The start_worker fixture: start_worker(handler, *args, dsn=..., name=...) -> a running WorkerProcess."""
