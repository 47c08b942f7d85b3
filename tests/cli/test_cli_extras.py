"""The commands of the optional extras, run as real processes: pgjobq metrics, pgjobq worker
--metrics-port and pgjobq dashboard, scraped or fetched over HTTP; and, without the extra, one line."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import pgjobq

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import pgjobq_command, process_env, run_cli, wait_until
from helpers.sqlhelpers import Db
from observability.scraping import Samples, free_port, scrape

Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def start(dsn: str) -> Iterator[Start]:
    """Starts `pgjobq ARGS...` in the background; kills what is left at the end."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            pgjobq_command(*args),
            env=process_env(dsn),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def scraped(port: int, until: Callable[[Samples], bool]) -> Samples:
    """The first scrape of port that satisfies until (the server may still be starting)."""
    seen: list[Samples] = []

    def ready() -> bool:
        try:
            seen.append(scrape(port))
        except httpx.TransportError:
            return False
        return until(seen[-1])

    assert wait_until(ready, timeout=30), seen[-1:] or "nothing answered"
    return seen[-1]


def test_pgjobq_metrics_serves_the_queue_state_until_ctrl_c(db: Db, start: Start) -> None:
    for _ in range(3):
        pgjobq.enqueue(db, "emails", {})
    port = free_port()
    server = start("metrics", "--port", str(port))

    samples = scraped(port, lambda s: s.value("pgjobq_jobs", queue="emails", status="runnable") is not None)

    assert samples.value("pgjobq_jobs", queue="emails", status="runnable") == 3
    server.send_signal(signal.SIGINT)
    assert server.wait(30) == 0


def test_pgjobq_worker_with_a_metrics_port_serves_its_jobs_and_the_queue_state(db: Db, start: Start) -> None:
    db.execute(EXECUTIONS_DDL)
    for _ in range(2):
        pgjobq.enqueue(db, "emails", {})
    pgjobq.enqueue(db, "reports", {})  # a queue this worker leaves alone
    port = free_port()
    worker = start("worker", "helpers.handlers:record", "--queue", "emails", "--poll-interval", "0.2",
                   "--metrics-port", str(port))  # fmt: skip

    samples = scraped(port, lambda s: s.total("pgjobq_worker_jobs_finished_total", queue="emails") == 2)

    assert samples.total("pgjobq_worker_jobs_finished_total", queue="emails", outcome="done") == 2
    assert samples.value("pgjobq_jobs", queue="reports", status="runnable") == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_pgjobq_dashboard_serves_its_pages_on_localhost(db: Db, start: Start) -> None:
    pgjobq.enqueue(db, "emails", {})
    port = free_port()
    server = start("dashboard", "--port", str(port))
    pages: list[httpx.Response] = []

    def answers() -> bool:
        try:
            pages.append(httpx.get(f"http://127.0.0.1:{port}/", timeout=10))
        except httpx.TransportError:
            return False
        return True

    assert wait_until(answers, timeout=30), server.stderr
    assert pages[-1].status_code == 200
    assert "emails" in pages[-1].text
    server.send_signal(signal.SIGINT)
    assert server.wait(30) == 0


def test_pgjobq_dashboard_refuses_another_address_without_authentication(dsn: str) -> None:
    result = run_cli(dsn, "dashboard", "--host", "0.0.0.0", "--port", str(free_port()))

    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("Error: ")


def without(module: str, folder: Path) -> str:
    """A PYTHONPATH on which module cannot be imported (as if its package were not installed)."""
    (folder / module).mkdir()
    (folder / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    return os.pathsep.join([str(folder), process_env("")["PYTHONPATH"]])


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (("metrics", "--port", "9"), "prometheus_client", "metrics"),
        (("worker", "helpers.handlers:record", "--metrics-port", "9"), "prometheus_client", "metrics"),
        (("dashboard", "--port", "9"), "uvicorn", "web"),
    ],
    ids=["metrics", "worker-metrics-port", "dashboard"],
)
def test_a_command_whose_extra_is_missing_says_which_in_one_line(
    dsn: str, tmp_path: Path, args: tuple[str, ...], module: str, extra: str
) -> None:
    result = run_cli(dsn, *args, PYTHONPATH=without(module, tmp_path))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: pgjobq {args[0]}{' --metrics-port' if args[0] == 'worker' else ''} needs the {extra} extra "
        f"({module} is not installed): pip install 'pgjobq-py[{extra}]'"
    ]
