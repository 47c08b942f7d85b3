"""pgjobq demo (``make demo``): a throwaway PostgreSQL, 1,000 jobs, 4 worker processes, a live view.

Enqueues the jobs with one ``jobq.enqueue_many`` call, runs real ``pgjobq
worker`` processes on them (handlers.py: multiples of 7 fail twice, then
succeed; multiples of 49 always fail), stops the workers with SIGTERM once
every job is finished, and checks the outcome from the database.  The web
dashboard (pgjobq.dashboard, read-only) runs on 127.0.0.1 meanwhile; its
address is printed at the start, and --linger keeps it up after the summary.  Exit code
0 for a consistent run, 1 otherwise, 2 for bad usage, 130 when interrupted.
The server and every temporary file are removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

import pgjobq

DEMO_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(DEMO_DIR.parent / "tools"))

from throwaway_pg import ThrowawayPostgres  # noqa: E402

QUEUE = "demo"
POLL_SECONDS = 0.2
STALL_SECONDS = 30.0  # no change in the counts for this long: something is wrong
STOP_SECONDS = 30.0  # SIGTERM, then this long to exit, then SIGKILL
MAX_WORKERS = 50  # three connections each; the throwaway server allows 200
DASHBOARD_PORT = 8080  # or any free port when it is taken

CREATE_EXTENSION = "CREATE EXTENSION pgjobq"

CREATE_RUNS = """
CREATE TABLE demo_runs (
    job_id     bigint,
    lease      bigint,
    worker_pid int,
    attempt    int,
    ok         boolean,
    at         timestamptz DEFAULT clock_timestamp()
)
"""

SERVER_INFO = """
SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')
"""

CLOCK = "SELECT clock_timestamp()"

# Everything the summary reports, read from the database after the workers stopped.
SUMMARY = """
SELECT count(*) FILTER (WHERE j.status = 'done') AS done,
       count(*) FILTER (WHERE j.status = 'failed') AS failed,
       count(*) FILTER (WHERE j.status = 'queued' OR j.status = 'running') AS unfinished,
       count(*) FILTER (WHERE j.attempts > 1) AS retried,
       (SELECT count(*) FROM demo_runs) AS executions,
       (SELECT count(*)
          FROM (SELECT FROM demo_runs GROUP BY job_id, lease HAVING count(*) > 1) AS twice) AS double_claims,
       extract(epoch FROM max(j.finished_at) - %(started)s)::float8 AS elapsed,
       (SELECT extract(epoch FROM max(r.at) - %(started)s)::float8
          FROM demo_runs AS r WHERE r.attempt = 1) AS first_pass
  FROM jobq.jobs AS j
 WHERE j.queue = %(queue)s
"""

DEAD_LETTERS = """
SELECT id, payload ->> 'n', attempts, last_error
  FROM jobq.jobs
 WHERE queue = %(queue)s AND status = 'failed'
 ORDER BY id
 LIMIT %(limit)s
"""


class DemoFailed(Exception):
    """The demo could not run to the end; ``details`` (a worker's log, say) is shown before the message."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class Counts:
    """The demo queue's row of jobq.stats()."""

    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0

    @property
    def finished(self) -> int:
        return self.done + self.failed


@dataclass(frozen=True)
class Expected:
    """What handlers.py makes of jobs 1..N."""

    jobs: int

    @property
    def failed(self) -> int:
        return self.jobs // 49

    @property
    def done(self) -> int:
        return self.jobs - self.failed

    @property
    def retried(self) -> int:
        return self.jobs // 7

    @property
    def executions(self) -> int:
        return self.jobs + 2 * self.retried


@dataclass(frozen=True)
class Summary:
    done: int
    failed: int
    unfinished: int
    retried: int
    executions: int
    double_claims: int
    elapsed: float
    first_pass: float


@dataclass
class WorkerProcess:
    """One ``pgjobq worker`` process and the file its output goes to."""

    number: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# -- command line -------------------------------------------------------------


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number between low and high."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="demo.py",
        description="Run pgjobq on a throwaway PostgreSQL: enqueue jobs, work them with real worker "
        "processes, watch them live, check the outcome.",
    )
    parser.add_argument(
        "--jobs",
        type=bounded_int(1, 1_000_000),
        default=os.environ.get("PGJOBQ_DEMO_JOBS", "1000"),
        help="jobs to enqueue (env PGJOBQ_DEMO_JOBS; default 1000)",
    )
    parser.add_argument(
        "--workers",
        type=bounded_int(1, MAX_WORKERS),
        default=os.environ.get("PGJOBQ_DEMO_WORKERS", "4"),
        help="worker processes (env PGJOBQ_DEMO_WORKERS; default 4)",
    )
    parser.add_argument(
        "--dashboard-port",
        type=bounded_int(0, 65535),
        default=os.environ.get("PGJOBQ_DEMO_DASHBOARD_PORT", str(DASHBOARD_PORT)),
        help=f"the dashboard's port on 127.0.0.1 (env PGJOBQ_DEMO_DASHBOARD_PORT; default {DASHBOARD_PORT}, "
        "or any free port when it is taken; 0: no dashboard)",
    )
    parser.add_argument(
        "--linger",
        type=bounded_int(0, 86_400),
        default=os.environ.get("PGJOBQ_DEMO_LINGER", "0"),
        help="seconds to keep the server and the dashboard up after the summary; Ctrl-C ends them "
        "(env PGJOBQ_DEMO_LINGER; default 0)",
    )
    return parser.parse_args(argv)


# -- the dashboard ------------------------------------------------------------


class Dashboard:
    """pgjobq's web dashboard (read-only) served by uvicorn on a thread, for the duration of the demo."""

    def __init__(self, dsn: str, port: int) -> None:
        import uvicorn  # the web extra (installed with the venv's dev extras)

        from pgjobq.dashboard import create_app

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.bind(("127.0.0.1", port))
        except OSError:  # taken: any free port
            self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        app = create_app(dsn, sample_seconds=1.0)
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 15.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.server.started:
            raise DemoFailed("the dashboard did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def start_dashboard(dsn: str, port: int, console: Console) -> Dashboard | None:
    """The running dashboard, its address printed; None (said why) for port 0 or without the web extra."""
    if port == 0:
        return None
    try:
        dashboard = Dashboard(dsn, port)
    except ImportError as exc:
        console.print(f"[dim]No dashboard: {escape(str(exc))} (pip install 'pgjobq-py[web]').[/]")
        return None
    dashboard.start()
    console.print(f"Dashboard (read-only, until the demo ends): [bold]{dashboard.url}[/]")
    return dashboard


# -- workers ------------------------------------------------------------------


def start_workers(count: int, dsn: str, log_dir: Path) -> list[WorkerProcess]:
    """Start count ``pgjobq worker handlers:handle`` processes, their output going to log_dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PGJOBQ_")}
    env["PGJOBQ_DSN"] = dsn
    command = [sys.executable, "-m", "pgjobq", "worker", "handlers:handle",
               "--queue", QUEUE, "--batch", "10", "--log-level", "WARNING"]  # fmt: skip
    workers = []
    for number in range(1, count + 1):
        log_path = log_dir / f"worker-{number}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=DEMO_DIR, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        workers.append(WorkerProcess(number, process, log_path))
    return workers


def stop_workers(workers: Sequence[WorkerProcess], timeout: float = STOP_SECONDS) -> None:
    """SIGTERM the workers still running, wait up to timeout, SIGKILL what is left."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in workers:
        try:
            worker.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


# -- the live view ------------------------------------------------------------


def check_alive(workers: Sequence[WorkerProcess]) -> None:
    """DemoFailed, with the end of its log, when a worker exited before being asked to."""
    for worker in workers:
        if worker.process.poll() is not None:
            raise DemoFailed(
                f"worker {worker.number} (pid {worker.process.pid}) exited unexpectedly "
                f"with code {worker.process.returncode}",
                f"last lines of worker {worker.number}'s log:\n{worker.log_tail()}",
            )


def read_counts(conn: psycopg.Connection[Any]) -> Counts:
    for row in pgjobq.stats(conn):
        if row.queue == QUEUE:
            return Counts(row.queued, row.running, row.done, row.failed)
    return Counts()


def render(progress: Progress, counts: Counts, rate: float) -> Group:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 2))
    for header, style in (("queued", "cyan"), ("running", "yellow"), ("done", "green"),
                          ("failed", "red"), ("jobs/s", "bold")):  # fmt: skip
        table.add_column(header, justify="right", style=style)
    table.add_row(f"{counts.queued:,}", f"{counts.running:,}", f"{counts.done:,}", f"{counts.failed:,}",
                  f"{rate:,.0f}")  # fmt: skip
    note = Text(
        "multiples of 7 fail twice, then succeed; multiples of 49 always fail\n"
        "a failed job is retried after 2 s, then after 4 s (backoff: 2^attempts s)",
        "dim",
    )
    return Group(progress, table, note)


def watch(
    conn: psycopg.Connection[Any], workers: Sequence[WorkerProcess], jobs: int, console: Console
) -> None:
    """Show the queue live until no job is queued or running; DemoFailed if a worker dies or all stalls."""
    progress = Progress(
        TextColumn("finished"), BarColumn(bar_width=None), MofNCompleteColumn(), TaskProgressColumn(),
        TextColumn("{task.elapsed:5.1f} s"), console=console, auto_refresh=False, expand=True,
    )  # fmt: skip
    task = progress.add_task("finished", total=jobs)
    started = last_change = time.monotonic()
    previous = Counts()
    try:
        with Live(console=console, refresh_per_second=10) as live:
            while True:
                counts = read_counts(conn)
                now = time.monotonic()
                progress.update(task, completed=counts.finished)
                live.update(render(progress, counts, counts.finished / max(now - started, 1e-3)))
                if counts.queued == 0 and counts.running == 0:
                    return
                check_alive(workers)
                if counts != previous:
                    previous, last_change = counts, now
                elif now - last_change > STALL_SECONDS:
                    raise DemoFailed(f"no progress for {STALL_SECONDS:.0f} s: {counts}")
                time.sleep(POLL_SECONDS)
    finally:
        if not console.is_terminal:
            console.line()  # rich ends a live view with a newline only on a terminal


# -- the summary --------------------------------------------------------------


def read_summary(conn: psycopg.Connection[Any], started: datetime) -> Summary:
    row = conn.execute(SUMMARY, {"started": started, "queue": QUEUE}).fetchone()
    assert row is not None
    done, failed, unfinished, retried, executions, double_claims, elapsed, first_pass = row
    return Summary(done, failed, unfinished, retried, executions, double_claims, elapsed or 0.0,
                   first_pass or 0.0)  # fmt: skip


def show_summary(
    console: Console, summary: Summary, expected: Expected, workers: Sequence[WorkerProcess]
) -> None:
    table = Table(title="pgjobq demo: summary", box=box.ROUNDED, title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("expected", justify="right", style="dim")

    def count(label: str, value: int, wanted: int) -> None:
        style = "green" if value == wanted else "bold red"
        table.add_row(label, Text(f"{value:,}", style), f"{wanted:,}")

    finished = summary.done + summary.failed
    count("done", summary.done, expected.done)
    count("failed (dead letters)", summary.failed, expected.failed)
    count("retried (attempts > 1)", summary.retried, expected.retried)
    count("total executions (rows in demo_runs)", summary.executions, expected.executions)
    count("double claims ((job_id, lease) run twice)", summary.double_claims, 0)
    table.add_section()
    table.add_row("elapsed (workers start → all finished)", f"{summary.elapsed:.2f} s", "")
    rate = finished / max(summary.elapsed, 1e-3)
    table.add_row("throughput (finished jobs / elapsed)", f"{rate:,.0f} jobs/s", "")
    table.add_row(
        "first attempts of all jobs, done after",
        f"{summary.first_pass:.2f} s ({expected.jobs / max(summary.first_pass, 1e-3):,.0f} jobs/s)",
        "",
    )
    codes = ", ".join(str(w.process.returncode) for w in workers)
    table.add_row("worker exit codes (after SIGTERM)", codes, ", ".join("0" * len(workers)))
    console.print(table)


def show_dead_letters(console: Console, conn: psycopg.Connection[Any], total: int, limit: int = 3) -> None:
    rows = conn.execute(DEAD_LETTERS, {"queue": QUEUE, "limit": limit}).fetchall()
    if not rows:
        return
    table = Table(title=f"dead letters: {len(rows)} of {total:,}", box=box.ROUNDED, title_justify="left")
    for header in ("id", "n", "attempts", "last_error"):
        table.add_column(header, justify="left" if header == "last_error" else "right")
    for job_id, n, attempts, last_error in rows:
        table.add_row(str(job_id), str(n), str(attempts), escape(str(last_error)))
    console.print(table)


def problems(summary: Summary, expected: Expected, workers: Sequence[WorkerProcess]) -> list[str]:
    """What makes the run inconsistent; empty when all is well."""
    found = []
    if summary.unfinished or summary.done + summary.failed != expected.jobs:
        found.append(f"{expected.jobs - summary.done - summary.failed:,} job(s) neither done nor failed")
    if summary.failed != expected.failed:
        found.append(f"{summary.failed} failed job(s) instead of {expected.failed}")
    if summary.double_claims:
        found.append(f"{summary.double_claims} (job_id, lease) pair(s) executed more than once")
    found.extend(
        f"worker {w.number} exited with code {w.process.returncode}" for w in workers if w.process.returncode
    )
    return found


# -- main -----------------------------------------------------------------------


def prepare(conn: psycopg.Connection[Any], server: ThrowawayPostgres, jobs: int, console: Console) -> None:
    """Install the extension, create demo_runs and enqueue the jobs."""
    version, fsync, synchronous_commit = conn.execute(SERVER_INFO).fetchone() or ("?", "?", "?")
    console.print(
        f"PostgreSQL {version.split()[0]} on {server.host}:{server.port}; fsync = {fsync}, "
        f"synchronous_commit = {synchronous_commit}."
    )
    conn.execute(CREATE_EXTENSION)
    conn.execute(CREATE_RUNS)
    began = time.perf_counter()
    pgjobq.enqueue_many(conn, QUEUE, ({"n": n} for n in range(1, jobs + 1)))
    console.print(
        f"Enqueued {jobs:,} jobs on queue {QUEUE!r} with one jobq.enqueue_many call "
        f"in {(time.perf_counter() - began) * 1000:.0f} ms."
    )


def finish_workers(workers: Sequence[WorkerProcess], console: Console) -> None:
    """SIGTERM the workers, wait for them, show the log of any that did not exit 0."""
    began = time.monotonic()
    stop_workers(workers)
    console.print(f"Workers stopped in {time.monotonic() - began:.1f} s.")
    for worker in workers:
        if worker.process.returncode:
            console.print(f"[red]worker {worker.number} exited with code {worker.process.returncode}; "
                          f"last lines of its log:[/]")  # fmt: skip
            console.print(escape(worker.log_tail()), highlight=False)


def run(args: argparse.Namespace, console: Console) -> int:
    expected = Expected(args.jobs)
    with contextlib.ExitStack() as stack:
        temp_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgjobq-demo-")))
        # As root the server runs as another user (see throwaway_pg): it must be able to reach its folder.
        temp_dir.chmod(0o711)
        server = ThrowawayPostgres(temp_dir / "pg")
        stack.callback(server.remove)
        console.print(f"Starting PostgreSQL in {temp_dir} (removed at the end) ...")
        server.start()
        conn = stack.enter_context(psycopg.connect(server.dsn(), autocommit=True))
        prepare(conn, server, expected.jobs, console)
        dashboard = start_dashboard(server.dsn(), args.dashboard_port, console)
        if dashboard is not None:
            stack.callback(dashboard.stop)  # before the server is removed

        clock = conn.execute(CLOCK).fetchone()
        assert clock is not None
        started: datetime = clock[0]
        workers = start_workers(args.workers, server.dsn(), temp_dir)
        stack.callback(stop_workers, workers, 5.0)  # on any error below; a no-op once they have exited
        console.print(f"Started {len(workers)} worker processes: pgjobq worker handlers:handle --batch 10.")
        watch(conn, workers, expected.jobs, console)
        console.print(f"All {expected.jobs:,} jobs finished; stopping the workers with SIGTERM ...")
        finish_workers(workers, console)

        summary = read_summary(conn, started)
        console.print()
        show_summary(console, summary, expected, workers)
        show_dead_letters(console, conn, summary.failed)
        found = problems(summary, expected, workers)
        if dashboard is not None and args.linger:
            console.print(f"The dashboard stays up for {args.linger} s at {dashboard.url} (Ctrl-C ends it).")
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the wait, not the demo's verdict
                time.sleep(args.linger)

    if found:
        console.print(f"[bold red]INCONSISTENT:[/] {'; '.join(found)}.")
        return 1
    console.print(
        f"[bold green]OK:[/] {summary.done:,} done, {summary.failed} dead letters as expected, "
        f"{summary.double_claims} double claims, workers exited 0."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    # SIGTERM unwinds like Ctrl-C, so the workers, the server and the files are cleaned up either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run(args, console)
    except KeyboardInterrupt:
        console.print("[red]Interrupted[/]: workers stopped, server and temporary files removed.")
        return 130
    except DemoFailed as exc:
        if exc.details:
            console.print(escape(exc.details), highlight=False)
        console.print(f"[bold red]demo failed:[/] {escape(str(exc))}")
        return 1
    except subprocess.CalledProcessError as exc:  # initdb or pg_ctl refused
        console.print(escape(str(exc.stderr or "").strip()), highlight=False)
        console.print(f"[bold red]demo failed:[/] {escape(str(exc))}")
        return 1
    except (OSError, RuntimeError, psycopg.Error, pgjobq.Error) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        console.print(f"[bold red]demo failed:[/] {escape(first_line)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
