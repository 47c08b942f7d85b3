"""The pgjobq command line: worker, enqueue, stats, retry-failed, reap, purge, health, job
control: cancel, pause, resume, job, wait, configure-queue, queues, jobs list and show, schedules:
schedule, unschedule, schedules; installs without the extension's files: sql install, upgrade and
pgtle; completion; and the optional extras' servers: metrics, dashboard.

Every option has an environment-variable twin (shown in --help).  Every
read command takes --json.  Errors print one line and exit non-zero (EXIT_CODES).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import click
import psycopg
from psycopg.rows import dict_row

from pgjobq._client import sync as client
from pgjobq._errors import Error, first_line, translate
from pgjobq._install import plain
from pgjobq._install.check import check_extension
from pgjobq._queries import query
from pgjobq._worker.aio import AsyncWorker, is_coroutine_function
from pgjobq._worker.sync import Handler, Worker, WorkerSettings

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _dsn_option(func: F) -> F:
    return click.option(
        "--dsn",
        envvar="PGJOBQ_DSN",
        show_envvar=True,
        default="",
        help="libpq connection string or URI; empty: the PG* environment (PGHOST, PGDATABASE, ...).",
    )(func)


def _json_option(func: F) -> F:
    return click.option(
        "--json",
        "as_json",
        envvar="PGJOBQ_JSON",
        show_envvar=True,
        is_flag=True,
        help="Print JSON instead of text.",
    )(func)


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """pgjobq and database errors become one-line CLI errors (exit 1)."""
    try:
        yield
    except Error as exc:
        raise click.ClickException(str(exc)) from exc
    except psycopg.Error as exc:
        known = translate(exc)  # the extension's own errors (no such job ...) read as the client's
        raise click.ClickException(str(known) if known else f"database error: {first_line(exc)}") from exc


@contextmanager
def _connection(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one CLI command, to a database whose pgjobq this package supports; one-line errors."""
    with _one_line_errors(), psycopg.connect(dsn, autocommit=True) as conn:
        check_extension(conn)
        yield conn


EXIT_CODES = """Exit codes:

\b
  0  done (the worker: stopped by SIGTERM or SIGINT, or --burst found no more work)
  1  refused or failed: an error from the database or pgjobq, an unreachable database, a
     missing optional extra (one line on stderr); wait: the job failed or was cancelled;
     the worker: a second signal, with jobs still in hand
  2  bad usage: an unknown option, a bad value (click's)
  3  wait: the job is still unfinished at --timeout
"""


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}, epilog=EXIT_CODES
)
@click.version_option(package_name="pgjobq-py", prog_name="pgjobq")
def main() -> None:
    """pgjobq: run and manage jobs of the PostgreSQL job queue (extension pgjobq)."""


def load_handler(spec: str) -> Handler:
    """MODULE:FUNCTION -> the function; the current directory is importable."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise click.BadParameter(f"expected MODULE:FUNCTION, got {spec!r}", param_hint="HANDLER")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="HANDLER") from exc
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise click.BadParameter(f"{module_name!r} has no callable {attribute!r}", param_hint="HANDLER")
    return handler  # type: ignore[no-any-return]


def _setting(flag: str, help: str, *, envvar: str | None = None, **options: Any) -> Callable[[F], F]:
    """A worker option for the WorkerSettings field it names, with that field's default: one source.

    ``--poll-interval`` sets ``poll_interval``, from PGJOBQ_POLL_INTERVAL
    unless ``envvar`` says otherwise.
    """
    setting = flag.split("/")[0].removeprefix("--").replace("-", "_")
    default = _SETTINGS[setting].default
    if default is dataclasses.MISSING:  # a default_factory (name): the help text says what it is
        default = None
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        options.setdefault("type", type(default))
    return click.option(
        flag,
        setting,
        envvar=envvar or f"PGJOBQ_{setting.upper()}",
        show_envvar=True,
        default=default,
        show_default=default is not None and not options.get("is_flag", False),
        help=help,
        **options,
    )


_SETTINGS = {field.name: field for field in dataclasses.fields(WorkerSettings)}


@main.command()
@click.argument("handler", metavar="MODULE:FUNCTION")
@_dsn_option
@click.option(
    "--queue",
    "queue",
    envvar="PGJOBQ_QUEUE",
    show_envvar=True,
    multiple=True,
    default=(_SETTINGS["queue"].default,),
    show_default=True,
    help="Queue to claim from (repeatable: one claim over all of them; the variable takes names "
    "separated by spaces).",
)
@_setting("--batch", "Jobs claimed per round trip.")
@_setting("--concurrency", "Handlers running at once (threads).")
@_setting("--burst", "Exit once the queue has no runnable job.", is_flag=True)
@_setting("--poll-interval", "Seconds between polls when no notification arrives.")
@_setting(
    "--lease-timeout",
    "Seconds a job's lease lasts: the database stores its expiry on the job, each heartbeat extends it "
    "by this much again, and any worker reaps the job once it has expired "
    "[default: the queue's lease_timeout, else 60].",
    type=float,
)
@_setting(
    "--heartbeat-interval",
    "Seconds between heartbeats of jobs in hand [default: a quarter of the shortest lease in hand].",
    type=float,
)
@_setting("--reap-interval", "Seconds between runs of jobq.reap (recovers jobs whose lease expired).")
@_setting(
    "--listen/--no-listen",
    "Wake on NOTIFY (polling always runs underneath; a probe at each connect checks that "
    "notifications arrive, and the worker falls back to polling when they do not).",
)
@_setting(
    "--prepared-statements/--no-prepared-statements",
    "Let psycopg prepare statements it runs often. Turn off behind PgBouncer in transaction "
    "pooling mode before 1.21, where prepared statements do not survive from one transaction to the next.",
)
@_setting(
    "--reconnect-delay-max",
    "Longest wait, in seconds, between attempts to reach the database (the wait doubles from 0.5 s).",
)
@_setting(
    "--network-timeout",
    "Seconds of network silence after which the worker gives a connection up and reconnects "
    "(TCP keepalives, tcp_user_timeout and connect_timeout, unless the DSN sets them; 2 to 3600).",
)
@_setting("--name", "Worker name recorded in locked_by [default: host:pid].", envvar="PGJOBQ_WORKER_NAME")
@click.option(
    "--log-level",
    envvar="PGJOBQ_LOG_LEVEL",
    show_envvar=True,
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--metrics-port",
    envvar="PGJOBQ_METRICS_PORT",
    show_envvar=True,
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (/metrics): this worker's jobs, and the queues' state "
    "(the metrics extra) [default: none].",
)
@click.option(
    "--metrics-host",
    envvar="PGJOBQ_METRICS_HOST",
    show_envvar=True,
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics are served on.",
)
def worker(
    handler: str,
    dsn: str,
    queue: tuple[str, ...],
    log_level: str,
    name: str | None,
    metrics_port: int | None,
    metrics_host: str,
    **settings: Any,
) -> None:
    """Run MODULE:FUNCTION on each job of one queue or several until SIGTERM/SIGINT (or --burst).

    The function gets one Job (id, queue, payload, attempts, max_attempts);
    returning completes the job, raising fails it with the exception's message.
    A coroutine function (async def) runs under pgjobq.AsyncWorker, its jobs
    as asyncio tasks (--concurrency of them at once).  Every reap interval
    the worker also runs jobq.tick, so schedules advance.
    """  # fmt: skip
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    function = load_handler(handler)
    if not queue:  # PGJOBQ_QUEUE set to nothing but spaces
        raise click.BadParameter("must name at least one queue", param_hint="--queue")
    settings["queue"] = queue[0] if len(queue) == 1 else list(queue)
    if name:  # else WorkerSettings' own default, host:pid
        settings["name"] = name
    if metrics_port is not None:
        prometheus = _extra("pgjobq.prometheus", "metrics", "pgjobq worker --metrics-port")
        with _one_line_errors():
            settings["observers"] = [prometheus.start_worker_metrics(metrics_port, metrics_host, dsn)]
    with _one_line_errors():
        runner: Worker | AsyncWorker
        if is_coroutine_function(function):  # an async def: AsyncWorker, its jobs as asyncio tasks
            runner = AsyncWorker(dsn, function, WorkerSettings(**settings))
            asyncio.run(runner.run())
        else:
            runner = Worker(dsn, function, WorkerSettings(**settings))
            runner.run()
    if runner.abandoned:
        # A second signal: handler threads cannot be interrupted and would keep
        # the interpreter alive at exit; the reaper recovers their jobs.
        logging.shutdown()
        os._exit(1)


class Seconds(click.ParamType[timedelta]):
    """A number of seconds, as a timedelta; refused unless finite (and not beyond timedelta's range)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            seconds = float(value)
            if not math.isfinite(seconds):
                raise ValueError
            return timedelta(seconds=seconds)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)


SECONDS = Seconds()


class _StillRunning(click.ClickException):
    """wait gave up at its timeout: exit 3, told apart from a job that failed (1)."""

    exit_code = 3


def _json_object(text: str | None, param_hint: str) -> dict[str, Any] | None:
    """text parsed as a JSON object (None stays None); bad usage otherwise."""
    if text is None:
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=param_hint) from exc
    if not isinstance(document, dict):
        raise click.BadParameter("must be a JSON object", param_hint=param_hint)
    return document


@main.command()
@click.argument("queue")
@click.argument("payload", metavar="JSON")
@_dsn_option
@click.option(
    "--priority",
    envvar="PGJOBQ_PRIORITY",
    show_envvar=True,
    type=int,
    default=0,
    show_default=True,
    help="Higher runs first.",
)
@click.option(
    "--delay",
    envvar="PGJOBQ_DELAY",
    show_envvar=True,
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds before the job may run.",
)
@click.option(
    "--max-attempts",
    envvar="PGJOBQ_MAX_ATTEMPTS",
    show_envvar=True,
    type=int,
    default=None,
    help="Attempts before the job is failed for good [default: the queue's setting, else 3].",
)
@click.option(
    "--unique-key",
    envvar="PGJOBQ_UNIQUE_KEY",
    show_envvar=True,
    default=None,
    help="While a job of the queue with this key is queued or running, enqueue nothing "
    "(--on-conflict says what instead).",
)
@click.option(
    "--unique-scope",
    envvar="PGJOBQ_UNIQUE_SCOPE",
    show_envvar=True,
    type=click.Choice(["active", "until_done"]),
    default="active",
    show_default=True,
    help="until_done: a done job keeps holding its key too.",
)
@click.option(
    "--on-conflict",
    envvar="PGJOBQ_ON_CONFLICT",
    show_envvar=True,
    type=click.Choice(["return", "skip", "raise", "replace"]),
    default="return",
    show_default=True,
    help="When the key is held: print the holder's id (return), print nothing (skip), fail (raise), "
    "or give a queued holder this job's payload and options (replace).",
)
@click.option(
    "--headers",
    envvar="PGJOBQ_HEADERS",
    show_envvar=True,
    default=None,
    metavar="JSON",
    help="A JSON object handed to the worker with the job.",
)
@click.option(
    "--concurrency-key",
    envvar="PGJOBQ_CONCURRENCY_KEY",
    show_envvar=True,
    default=None,
    help="The job counts against its queue's --key-concurrency with the running jobs of this key.",
)
@click.option(
    "--depends-on",
    envvar="PGJOBQ_DEPENDS_ON",
    show_envvar=True,
    type=int,
    multiple=True,
    metavar="ID",
    help="A parent job's id (repeatable; the variable takes ids separated by spaces): the job waits "
    "until every parent is done.",
)
@click.option(
    "--on-parent-failure",
    envvar="PGJOBQ_ON_PARENT_FAILURE",
    show_envvar=True,
    type=click.Choice(["cancel", "run"]),
    default="cancel",
    show_default=True,
    help="When a parent fails or is cancelled: cancel the job, or run it anyway.",
)
def enqueue(
    queue: str,
    payload: str,
    dsn: str,
    priority: int,
    delay: float,
    max_attempts: int | None,
    unique_key: str | None,
    unique_scope: str,
    on_conflict: str,
    headers: str | None,
    concurrency_key: str | None,
    depends_on: tuple[int, ...],
    on_parent_failure: client.OnParentFailure,
) -> None:
    """Enqueue one job with a JSON object as payload; print its id (nothing when skipped).

    How long it may run once claimed is its queue's to say (see configure-queue).
    """
    document = _json_object(payload, "JSON")
    assert document is not None
    header_document = _json_object(headers, "--headers")
    run_at = datetime.now(timezone.utc) + timedelta(seconds=delay) if delay else None
    with _connection(dsn) as conn:
        job_id = client.enqueue(
            conn,
            queue,
            document,
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=unique_key,
            unique_scope=unique_scope,
            on_conflict=on_conflict,
            headers=header_document,
            concurrency_key=concurrency_key,
            depends_on=list(depends_on) if depends_on else None,
            on_parent_failure=on_parent_failure,
        )
    if job_id is None:
        click.echo(f"skipped: unique key {unique_key!r} is held by another job of queue {queue!r}", err=True)
    else:
        click.echo(job_id)


STATS_HEADER = ("queue", "queued", "runnable", "running", "done", "failed", "cancelled", "oldest wait")


@main.command()
@_dsn_option
@_json_option
@click.option(
    "--watch",
    envvar="PGJOBQ_WATCH",
    show_envvar=True,
    is_flag=True,
    help="Redraw every --interval until Ctrl-C: a live table (drawn with rich when it is installed, "
    "the cli extra); with --json, one JSON array per line; not on a terminal, one table after another.",
)
@click.option(
    "--interval",
    envvar="PGJOBQ_WATCH_INTERVAL",
    show_envvar=True,
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between two readings with --watch.",
)
def stats(dsn: str, as_json: bool, watch: bool, interval: float) -> None:
    """Jobs per queue and status, and the wait of the oldest runnable job."""  # fmt: skip
    with _connection(dsn) as conn:
        if not watch:
            rows = client.stats(conn)
            if as_json:
                click.echo(json.dumps([_stats_dict(row) for row in rows], indent=2))
            else:
                _echo_table(STATS_HEADER, _stats_cells(rows))
            return
        with _until_interrupted() as stop:
            _watch_stats(conn, as_json, interval, stop)


@contextmanager
def _until_interrupted() -> Iterator[threading.Event]:
    """An event that the first SIGINT or SIGTERM sets (the handlers before are put back afterwards).

    The commands that run until Ctrl-C wait on it between their round trips to the database, rather
    than take a KeyboardInterrupt in the middle of one: psycopg, interrupted while it waits for a
    result, could be left waiting for good.
    """
    stop = threading.Event()
    previous = {
        number: signal.signal(number, lambda *_: stop.set()) for number in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _stats_cells(rows: list[client.QueueStats]) -> list[tuple[str, ...]]:
    return [
        (
            r.queue,
            *(str(v) for v in (r.queued, r.runnable, r.running, r.done, r.failed, r.cancelled)),
            _age(r.oldest_queued_age),
        )
        for r in rows
    ]


def _watch_stats(
    conn: psycopg.Connection[Any], as_json: bool, interval: float, stop: threading.Event
) -> None:
    """stats again and again, every interval seconds, until stop is set."""
    title = f"pgjobq stats every {interval:g}s (Ctrl-C to stop)"
    terminal = sys.stdout.isatty()
    if as_json or not terminal:
        while not stop.is_set():
            rows = client.stats(conn)
            if as_json:
                click.echo(json.dumps([_stats_dict(row) for row in rows]))
            else:
                click.echo(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\n"
                           f"{_table_text(STATS_HEADER, _stats_cells(rows))}\n")  # fmt: skip
            stop.wait(interval)
        return
    try:
        from rich.live import Live
        from rich.table import Table
    except ImportError:  # the cli extra is not installed: redraw the plain table
        while not stop.is_set():
            table = _table_text(STATS_HEADER, _stats_cells(client.stats(conn)))
            click.echo(f"\x1b[H\x1b[2J{title}\n\n{table}", nl=True)
            stop.wait(interval)
        return

    def draw() -> Table:
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(STATS_HEADER):
            table.add_column(name, justify="left" if i == 0 else "right")
        for cells in _stats_cells(client.stats(conn)):
            table.add_row(*cells)
        return table

    with Live(draw(), auto_refresh=False) as live:
        while not stop.wait(interval):
            live.update(draw(), refresh=True)


def _echo_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> None:
    """A table: the columns in left (the first one) left-aligned, the others right-aligned."""
    click.echo(_table_text(header, rows, left))


def _table_text(header: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> str:
    table = [header, *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ("  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in
                       enumerate(zip(line, widths, strict=True))).rstrip() for line in table)  # fmt: skip
    return "\n".join(lines)


def _age(age: timedelta | None) -> str:
    return "-" if age is None else f"{age.total_seconds():.1f}s"


def _stats_dict(row: client.QueueStats) -> dict[str, object]:
    age = row.oldest_queued_age
    return {
        "queue": row.queue, "queued": row.queued, "runnable": row.runnable, "running": row.running,
        "done": row.done, "failed": row.failed, "cancelled": row.cancelled, "waiting": row.waiting,
        "oldest_queued_age_seconds": None if age is None else age.total_seconds(),
    }  # fmt: skip


@main.command("retry-failed")
@_dsn_option
@click.option(
    "--queue",
    envvar="PGJOBQ_QUEUE",
    show_envvar=True,
    default=None,
    help="Only this queue [default: every queue].",
)
@click.option(
    "--id",
    "ids",
    envvar="PGJOBQ_IDS",
    show_envvar=True,
    type=int,
    multiple=True,
    help="Only this job id (repeatable; the variable takes ids separated by spaces).",
)
def retry_failed(dsn: str, queue: str | None, ids: tuple[int, ...]) -> None:
    """Put failed jobs (the dead letters) back in their queue with attempts reset."""  # fmt: skip
    with _connection(dsn) as conn:
        redriven = client.retry_failed(conn, queue, list(ids) if ids else None)
    click.echo(f"{len(redriven)} job(s) back in the queue")


@main.command()
@_dsn_option
@click.option(
    "--stale",
    envvar="PGJOBQ_STALE",
    show_envvar=True,
    type=float,
    default=None,
    help="Also require a job's lease to be older than this many seconds [default: each job's own "
    "lease expiry decides].",
)
def reap(dsn: str, stale: float | None) -> None:
    """Recover running jobs whose lease expired (normally the workers do this)."""  # fmt: skip
    if stale is not None and stale <= 0:
        raise click.BadParameter("must be positive", param_hint="--stale")
    with _connection(dsn) as conn:
        reaped = client.reap(conn, None if stale is None else timedelta(seconds=stale))
    click.echo(f"{len(reaped)} job(s) recovered")


@main.command()
@_dsn_option
@click.option(
    "--older-than",
    envvar="PGJOBQ_OLDER_THAN",
    show_envvar=True,
    type=click.FloatRange(min=0),
    default=7 * 24 * 3600.0,
    show_default=True,
    help="Seconds since a job finished after which it is deleted.",
)
@click.option(
    "--max-rows",
    envvar="PGJOBQ_MAX_ROWS",
    show_envvar=True,
    type=click.IntRange(1, 1_000_000),
    default=100_000,
    show_default=True,
    help="Delete at most this many jobs per call (run again for more).",
)
@click.option(
    "--include-failed",
    envvar="PGJOBQ_INCLUDE_FAILED",
    show_envvar=True,
    is_flag=True,
    help="Delete old failed jobs too (the dead-letter queue) [default: keep them].",
)
def purge(dsn: str, older_than: float, max_rows: int, include_failed: bool) -> None:
    """Delete finished jobs older than --older-than, so the hot table stays small."""  # fmt: skip
    with _connection(dsn) as conn:
        deleted = client.purge(
            conn, timedelta(seconds=older_than), max_rows=max_rows, include_failed=include_failed
        )
    click.echo(f"{deleted} job(s) deleted")


@main.command()
@_dsn_option
@_json_option
def health(dsn: str, as_json: bool) -> None:
    """Queue depth, dead tuples, last vacuum and the oldest open transaction (jobq.health)."""  # fmt: skip
    with _connection(dsn) as conn:
        report = client.health(conn)
    fields = {name: getattr(report, name) for name in report.__slots__}
    if as_json:
        click.echo(json.dumps(fields, indent=2, default=_json_value))
        return
    for name, value in fields.items():
        click.echo(f"{name.replace('_', ' ')}: {'-' if value is None else _json_value(value)}")


def _json_value(value: object) -> object:
    """Durations as seconds, moments as ISO 8601; everything else as it is."""
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


# -- job control ------------------------------------------------------------------


@main.command()
@click.argument("ids", metavar="ID...", nargs=-1, required=True, type=int)
@_dsn_option
@click.option(
    "--force",
    envvar="PGJOBQ_FORCE",
    show_envvar=True,
    is_flag=True,
    help="Cancel running jobs at once (their workers' leases are refused from then on) "
    "[default: ask their workers to stop].",
)
def cancel(ids: tuple[int, ...], dsn: str, force: bool) -> None:
    """Cancel jobs; print each one's status now (cancelled, cancel_requested, done or failed)."""  # fmt: skip
    with _connection(dsn) as conn:
        outcomes = client.cancel(conn, ids, force=force)
    for outcome in outcomes:
        click.echo(f"{outcome.id} {outcome.status}")
    unknown = sorted(set(ids) - {outcome.id for outcome in outcomes})
    if unknown:
        raise click.ClickException(f"no job with id {', '.join(str(i) for i in unknown)}")


@main.command()
@click.argument("queue")
@_dsn_option
def pause(queue: str, dsn: str) -> None:
    """Stop workers claiming from QUEUE (until resume; running jobs go on)."""  # fmt: skip
    with _connection(dsn) as conn:
        client.pause(conn, queue)
    click.echo(f"queue {queue} paused")


@main.command()
@click.argument("queue")
@_dsn_option
def resume(queue: str, dsn: str) -> None:
    """Let workers claim from QUEUE again, and wake them."""  # fmt: skip
    with _connection(dsn) as conn:
        client.resume(conn, queue)
    click.echo(f"queue {queue} resumed")


@main.command()
@click.argument("job_id", metavar="ID", type=int)
@_dsn_option
@_json_option
def job(job_id: int, dsn: str, as_json: bool) -> None:
    """One job's state: status, attempts, result, last error, times."""  # fmt: skip
    with _connection(dsn) as conn:
        state = client.job(conn, job_id)
    _echo_fields(_fields(state), as_json)


@main.command()
@click.argument("job_id", metavar="ID", type=int)
@_dsn_option
@click.option(
    "--timeout",
    envvar="PGJOBQ_WAIT_TIMEOUT",
    show_envvar=True,
    type=SECONDS,
    default="10",
    show_default=True,
    help="Seconds to wait for the job to finish.",
)
def wait(job_id: int, dsn: str, timeout: timedelta) -> None:
    """Wait for a job to finish; print its result (JSON) if it has one.

    Exits 0 when the job is done, 1 when it failed or was cancelled, 3 when it
    is still unfinished at the timeout.
    """  # fmt: skip
    if timeout < timedelta(0):
        raise click.BadParameter("must not be negative", param_hint="--timeout")
    with _connection(dsn) as conn:
        state = client.wait(conn, job_id, timeout)
        if state is None:
            now = client.job(conn, job_id)
            raise _StillRunning(f"job {job_id} is still {now.status} after {timeout.total_seconds():g}s")
    if state.status == "failed":
        raise click.ClickException(
            f"job {job_id} failed after {state.attempts} attempt(s): {state.last_error or '(no error text)'}"
        )
    if state.status == "cancelled":
        raise click.ClickException(f"job {job_id} was cancelled")
    if state.result is not None:
        click.echo(json.dumps(state.result, ensure_ascii=False))


@main.command("configure-queue")
@click.argument("queue")
@_dsn_option
@_json_option
@click.option(
    "--max-attempts",
    envvar="PGJOBQ_QUEUE_MAX_ATTEMPTS",
    show_envvar=True,
    type=int,
    default=None,
    help="Attempts before a job without its own max_attempts fails for good (default 3).",
)
@click.option(
    "--backoff-base",
    envvar="PGJOBQ_QUEUE_BACKOFF_BASE",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Seconds: a retry after attempt a waits backoff_base * 2^a, at most backoff_max (default 1).",
)
@click.option(
    "--backoff-max",
    envvar="PGJOBQ_QUEUE_BACKOFF_MAX",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Seconds: the longest wait before a retry (default 300).",
)
@click.option(
    "--backoff-jitter",
    envvar="PGJOBQ_QUEUE_BACKOFF_JITTER",
    show_envvar=True,
    type=float,
    default=None,
    help="0 to 1: each retry's wait is shortened by up to this fraction, at random (default 0).",
)
@click.option(
    "--lease-timeout",
    envvar="PGJOBQ_QUEUE_LEASE_TIMEOUT",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Seconds a claim's lease lasts when the worker names none (default 60).",
)
@click.option(
    "--timeout",
    envvar="PGJOBQ_QUEUE_TIMEOUT",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Seconds a job may run once claimed: its lease is not extended past that (default: no limit).",
)
@click.option(
    "--concurrency",
    envvar="PGJOBQ_QUEUE_CONCURRENCY",
    show_envvar=True,
    type=int,
    default=None,
    help="At most this many running jobs of the queue, over every worker (1 to 100000; default: no limit).",
)
@click.option(
    "--key-concurrency",
    envvar="PGJOBQ_QUEUE_KEY_CONCURRENCY",
    show_envvar=True,
    type=int,
    default=None,
    help="At most this many running jobs per concurrency key (1 to 100000; default: no limit).",
)
@click.option(
    "--key-order",
    envvar="PGJOBQ_QUEUE_KEY_ORDER",
    show_envvar=True,
    type=click.Choice(["priority", "round_robin"]),
    default=None,
    help="How claims pick among concurrency keys: by the jobs' priority, or keys taking turns "
    "(default priority).",
)
@click.option(
    "--rate-limit",
    envvar="PGJOBQ_QUEUE_RATE_LIMIT",
    show_envvar=True,
    type=int,
    default=None,
    help="At most this many claims per --rate-interval (1 to 10000; default: no limit).",
)
@click.option(
    "--rate-interval",
    envvar="PGJOBQ_QUEUE_RATE_INTERVAL",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Seconds over which --rate-limit counts claims (above 0, at most a day; default 1).",
)
@click.option(
    "--unset",
    envvar="PGJOBQ_QUEUE_UNSET",
    show_envvar=True,
    type=click.Choice(client.QUEUE_SETTINGS),
    multiple=True,
    help="Clear a setting back to its default (repeatable; the variable takes names separated by spaces).",
)
def configure_queue(
    queue: str,
    dsn: str,
    as_json: bool,
    max_attempts: int | None,
    backoff_base: timedelta | None,
    backoff_max: timedelta | None,
    backoff_jitter: float | None,
    lease_timeout: timedelta | None,
    timeout: timedelta | None,
    concurrency: int | None,
    key_concurrency: int | None,
    key_order: client.KeyOrder | None,
    rate_limit: int | None,
    rate_interval: timedelta | None,
    unset: tuple[str, ...],
) -> None:
    """Change QUEUE's settings and limits (those not given stay as they are); print them all."""  # fmt: skip
    with _connection(dsn) as conn:
        settings = client.configure_queue(
            conn,
            queue,
            max_attempts=max_attempts,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            backoff_jitter=backoff_jitter,
            lease_timeout=lease_timeout,
            timeout=timeout,
            unset=unset,
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            key_order=key_order,
            rate_limit=rate_limit,
            rate_interval=rate_interval,
        )
    _echo_fields(_fields(settings), as_json)


@main.command()
@_dsn_option
@_json_option
def queues(dsn: str, as_json: bool) -> None:
    """Every configured queue and every queue with jobs in flight: its jobs queued, running and waiting
    (for parents), its settings and its limits."""  # fmt: skip
    with _connection(dsn) as conn:
        rows = client.queue_overview(conn)
    if as_json:
        click.echo(json.dumps([_fields(row) for row in rows], indent=2, default=_json_value))
        return
    # the columns of 0.6.0 first (scripts read them by position), then the counts and the limits
    header = ("queue", "paused", "max attempts", "backoff base", "backoff max", "jitter", "lease", "timeout",
              "configured", "queued", "running", "waiting", "concurrency", "per key", "key order",
              "rate")  # fmt: skip
    _echo_table(
        header,
        [
            (
                r.queue,
                _yes_no(r.paused),
                str(r.max_attempts),
                _duration(r.backoff_base),
                _duration(r.backoff_max),
                f"{r.backoff_jitter:g}",
                _duration(r.lease_timeout),
                _duration(r.timeout),
                _yes_no(r.configured),
                str(r.queued),
                str(r.running),
                str(r.waiting),
                _limit(r.concurrency),
                _limit(r.key_concurrency),
                r.key_order,
                _rate(r.rate_limit, r.rate_interval),
            )
            for r in rows
        ],
    )


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _rate(limit: int | None, interval: timedelta | None) -> str:
    """A rate limit as "N/Ts" ("-": none)."""
    if limit is None:
        return "-"
    return f"{limit}/{_duration(interval)}"


def _fields(row: client.JobState | client.QueueSettings | client.Schedule) -> dict[str, Any]:
    """The row's fields by name, in order (its class's fields, then a subclass's)."""
    return {field.name: getattr(row, field.name) for field in dataclasses.fields(row)}


def _echo_fields(fields: dict[str, Any], as_json: bool) -> None:
    """One record: as a JSON object, or one "name: value" line per field."""
    if as_json:
        click.echo(json.dumps(fields, indent=2, default=_json_value, ensure_ascii=False))
        return
    for name, value in fields.items():
        if value is None:
            text = "-"
        elif isinstance(value, bool):
            text = _yes_no(value)
        elif isinstance(value, timedelta):
            text = _duration(value)
        elif isinstance(value, datetime):
            text = value.isoformat()
        elif isinstance(value, (dict, list)) or name == "result":
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = str(value)
        click.echo(f"{name.replace('_', ' ')}: {text}")


def _duration(value: timedelta | None) -> str:
    return "-" if value is None else f"{value.total_seconds():g}s"


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


# -- schedules -----------------------------------------------------------------------


@main.command()
@click.argument("name")
@_dsn_option
@_json_option
@click.option(
    "--queue",
    envvar="PGJOBQ_QUEUE",
    show_envvar=True,
    required=True,
    help="The queue each occurrence's job goes to.",
)
@click.option(
    "--payload",
    envvar="PGJOBQ_PAYLOAD",
    show_envvar=True,
    default=None,
    metavar="JSON",
    help="A JSON object: each job's payload [default: {}].",
)
@click.option(
    "--cron",
    envvar="PGJOBQ_CRON",
    show_envvar=True,
    default=None,
    metavar="EXPR",
    help='A cron expression, five fields ("*/5 * * * *"), read in --timezone (give it or --every).',
)
@click.option(
    "--timezone",
    envvar="PGJOBQ_TIMEZONE",
    show_envvar=True,
    default="UTC",
    show_default=True,
    help="The IANA time zone --cron is read in (Europe/Paris).",
)
@click.option(
    "--every",
    envvar="PGJOBQ_EVERY",
    show_envvar=True,
    type=SECONDS,
    default=None,
    help="Whole seconds between occurrences, at multiples of it since the Unix epoch (give it or --cron).",
)
@click.option(
    "--priority",
    envvar="PGJOBQ_PRIORITY",
    show_envvar=True,
    type=int,
    default=0,
    show_default=True,
    help="Each job's priority (higher runs first).",
)
@click.option(
    "--max-attempts",
    envvar="PGJOBQ_MAX_ATTEMPTS",
    show_envvar=True,
    type=int,
    default=None,
    help="Each job's attempts [default: the queue's setting, else 3].",
)
@click.option(
    "--headers",
    envvar="PGJOBQ_HEADERS",
    show_envvar=True,
    default=None,
    metavar="JSON",
    help="A JSON object handed to the worker with each job.",
)
@click.option(
    "--catch-up",
    envvar="PGJOBQ_CATCH_UP",
    show_envvar=True,
    type=click.Choice(["latest", "all", "skip"]),
    default="latest",
    show_default=True,
    help="What a tick does with occurrences missed while no tick ran: enqueue the latest, all, or none.",
)
def schedule(
    name: str,
    dsn: str,
    as_json: bool,
    queue: str,
    payload: str | None,
    cron: str | None,
    timezone: str,
    every: timedelta | None,
    priority: int,
    max_attempts: int | None,
    headers: str | None,
    catch_up: str,
) -> None:
    """Create the schedule NAME, or replace it: a job of --queue at each occurrence of --cron, or
    --every so many seconds; print it.

    Workers enqueue the occurrences (jobq.tick every reap interval): keep one running.
    """  # fmt: skip
    if (cron is None) == (every is None):
        raise click.UsageError("give --cron or --every, and only one of them")
    document = _json_object(payload, "--payload")
    header_document = _json_object(headers, "--headers")
    with _connection(dsn) as conn:
        row = client.schedule(
            conn,
            name,
            queue,
            document,
            cron=cron,
            timezone=timezone,
            every=every,
            priority=priority,
            max_attempts=max_attempts,
            headers=header_document,
            catch_up=catch_up,
        )
    _echo_fields(_fields(row), as_json)


@main.command()
@click.argument("name")
@_dsn_option
def unschedule(name: str, dsn: str) -> None:
    """Delete the schedule NAME and cancel its queued jobs; exit 1 when there is none."""  # fmt: skip
    with _connection(dsn) as conn:
        removed = client.unschedule(conn, name)
    if not removed:
        raise click.ClickException(f"no schedule named {name!r}")
    click.echo(f"schedule {name} removed")


@main.command()
@_dsn_option
@_json_option
def schedules(dsn: str, as_json: bool) -> None:
    """Every schedule: its queue, when it runs, and its next occurrence."""  # fmt: skip
    with _connection(dsn) as conn:
        rows = client.schedules(conn)
    if as_json:
        click.echo(
            json.dumps([_fields(row) for row in rows], indent=2, default=_json_value, ensure_ascii=False)
        )
        return
    header = ("name", "queue", "when", "priority", "catch up", "next run")
    _echo_table(
        header,
        [
            (
                r.name,
                r.queue,
                f"every {_duration(r.every)}" if r.cron is None else f"{r.cron} ({r.timezone})",
                str(r.priority),
                r.catch_up,
                "-" if r.next_run is None else r.next_run.isoformat(timespec="seconds"),
            )
            for r in rows
        ],
    )


# -- jobs -----------------------------------------------------------------------------

JOB_STATUSES = ("waiting", "queued", "running", "done", "failed", "cancelled")


@main.group()
def jobs() -> None:
    """List jobs, or show one with its payload, headers, result and error."""


@jobs.command("list")
@_dsn_option
@_json_option
@click.option(
    "--queue",
    envvar="PGJOBQ_QUEUE",
    show_envvar=True,
    default=None,
    help="Only this queue [default: every queue].",
)
@click.option(
    "--status",
    "statuses",
    envvar="PGJOBQ_STATUS",
    show_envvar=True,
    type=click.Choice(JOB_STATUSES),
    multiple=True,
    help="Only jobs with this status (repeatable; the variable takes names separated by spaces) "
    "[default: every status].",
)
@click.option(
    "--limit",
    envvar="PGJOBQ_LIMIT",
    show_envvar=True,
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="At most this many jobs, newest first.",
)
@click.option(
    "--before",
    envvar="PGJOBQ_BEFORE",
    show_envvar=True,
    type=click.IntRange(min=1),
    default=None,
    metavar="ID",
    help="Only jobs with a smaller id: the next page, as the previous page's last line says.",
)
def jobs_list(
    dsn: str, as_json: bool, queue: str | None, statuses: tuple[str, ...], limit: int, before: int | None
) -> None:
    """Jobs, newest first: id, queue, status, attempts, when they run or finished, their last error.

    At most --limit of them; when there may be more, a last line on stderr gives the
    --before that shows the next page.  --json prints a JSON array of objects.
    """  # fmt: skip
    with _connection(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        params = {"queue": queue, "statuses": list(statuses) or None, "before": before, "limit": limit}
        rows = cur.execute(query("list_jobs"), params).fetchall()
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=_json_value, ensure_ascii=False))
    else:
        header = (
            "id",
            "queue",
            "status",
            "attempts",
            "priority",
            "run at / finished",
            "worker",
            "last error",
        )
        _echo_table(
            header,
            [
                (
                    str(r["id"]),
                    r["queue"],
                    r["status"],
                    f"{r['attempts']}/{r['max_attempts']}",
                    str(r["priority"]),
                    _moment(r["finished_at"] or r["run_at"]),
                    r["locked_by"] or "-",
                    _one_line(r["last_error"]),
                )
                for r in rows
            ],
            left=(1, 2, 5, 6, 7),
        )
    if len(rows) == limit:
        click.echo(f"more may follow: add --before {rows[-1]['id']}", err=True)


@jobs.command("show")
@click.argument("job_id", metavar="ID", type=int)
@_dsn_option
@_json_option
def jobs_show(job_id: int, dsn: str, as_json: bool) -> None:
    """One job whole: status, priority, attempts, payload, headers, result, last error, parents,
    times and the worker holding it; exit 1 when there is none."""  # fmt: skip
    with _connection(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("show_job"), {"id": job_id}).fetchone()
    if row is None:  # jobq.job found it, then it was purged
        raise click.ClickException(f"id {job_id}: no such job")
    _echo_fields(row, as_json)


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _one_line(text: str | None, width: int = 60) -> str:
    """The first line of text, cut to width characters ("-": none)."""
    if not text:
        return "-"
    line = text.splitlines()[0]
    return line if len(line) <= width else line[: width - 1] + "…"


# -- plain-SQL and pg_tle installs -----------------------------------------------------------


@main.group("sql")
def sql_group() -> None:
    """Print SQL that installs or upgrades pgjobq without the extension's files (managed PostgreSQL).

    Only SQL goes to stdout, the same for the same pgjobq-py: pipe it to
    `psql -v ON_ERROR_STOP=1` run by the database's owner, or keep it in a migration.
    """


def _version_option(flag: str, envvar: str, help: str) -> Callable[[F], F]:
    name = flag.removeprefix("--") + "_"  # from_, to_: "from" is Python's
    return click.option(
        flag, name, envvar=envvar, show_envvar=True, default=None, metavar="VERSION", help=help
    )


def _owner_option(func: F) -> F:
    return click.option(
        "--owner",
        envvar="PGJOBQ_SQL_OWNER",
        show_envvar=True,
        default=None,
        metavar="ROLE",
        help="Run as this role (SET LOCAL ROLE; the role running psql must be a member), so that it "
        "owns every object [default: the role running psql].",
    )(func)


@sql_group.command("install")
@_version_option("--to", "PGJOBQ_SQL_TO", "The version to install [default: the newest this pgjobq-py has].")
@_owner_option
def sql_install(to_: str | None, owner: str | None) -> None:
    """A plain-SQL install of pgjobq in one transaction, recording its version for jobq.version()."""
    with _one_line_errors():
        click.echo(plain.install_script(to_, owner=owner), nl=False)


@sql_group.command("upgrade")
@_dsn_option
@_version_option(
    "--from",
    "PGJOBQ_SQL_FROM",
    "The installed version [default: read it from the database at --dsn].",
)
@_version_option(
    "--to", "PGJOBQ_SQL_TO", "The version to upgrade to [default: the newest this pgjobq-py has]."
)
@_owner_option
def sql_upgrade(dsn: str, from_: str | None, to_: str | None, owner: str | None) -> None:
    """The steps from the installed version of a plain-SQL install to --to, in one transaction.

    Prints nothing (and says so on stderr) when the database is already there;
    refuses an install made with CREATE EXTENSION (ALTER EXTENSION pgjobq UPDATE
    upgrades that one).
    """  # fmt: skip
    with _one_line_errors():
        target = to_ or plain.current_version()
        source = from_
        if source is None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                installed = plain.installed_version(conn)
            if installed is None:
                raise click.ClickException(
                    "this database has no pgjobq: pgjobq sql install | psql installs it"
                )
            if installed.mode == "extension":
                raise click.ClickException(
                    f"pgjobq {installed.version} is installed here as an extension: "
                    "upgrade it with ALTER EXTENSION pgjobq UPDATE"
                )
            source = installed.version
        if source == target:
            click.echo(f"pgjobq is at {target} already: nothing to upgrade", err=True)
            return
        click.echo(plain.upgrade_script(source, target, owner=owner), nl=False)


@sql_group.command("pgtle")
def sql_pgtle() -> None:
    """A pg_tle registration of pgjobq (every version and step); then CREATE EXTENSION pgjobq.

    Run it as a member of pgtle_admin, in a database with pg_tle.
    """  # fmt: skip
    with _one_line_errors():
        click.echo(plain.pgtle_script(), nl=False)


# -- shell completion ------------------------------------------------------------------


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (click's): for bash, add to ~/.bashrc

    \b
        eval "$(pgjobq completion bash)"
    \b
    zsh: the same in ~/.zshrc with zsh; fish:
        pgjobq completion fish > ~/.config/fish/completions/pgjobq.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # the three choices are click's own
    ctx = click.get_current_context()
    root = ctx.find_root().command
    click.echo(completer(root, {}, "pgjobq", "_PGJOBQ_COMPLETE").source())


# -- the optional extras: metrics and the dashboard ---------------------------------------


@contextmanager
def _needs_extra(extra: str, command: str) -> Iterator[None]:
    """A module of the optional extra missing, imported at once or later: one readable line (exit 1)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"{command} needs the {extra} extra ({exc.name} is not installed): "
            f"pip install 'pgjobq-py[{extra}]'"
        ) from exc


def _extra(module: str, extra: str, command: str) -> Any:
    """module, imported now: the command's optional extra; one readable line when it is not installed."""
    with _needs_extra(extra, command):
        return importlib.import_module(module)


def _port_option(envvar: str, default: int, help: str) -> Callable[[F], F]:
    return click.option(
        "--port",
        envvar=envvar,
        show_envvar=True,
        type=click.IntRange(1, 65535),
        default=default,
        show_default=True,
        help=help,
    )


def _host_option(envvar: str, help: str) -> Callable[[F], F]:
    return click.option(
        "--host", envvar=envvar, show_envvar=True, default="127.0.0.1", show_default=True, help=help
    )


@main.command()
@_dsn_option
@_port_option("PGJOBQ_METRICS_PORT", 9464, "Port of the /metrics endpoint.")
@_host_option("PGJOBQ_METRICS_HOST", "Address to listen on.")
def metrics(dsn: str, port: int, host: str) -> None:
    """Serve the queues' state (jobq.metrics) as Prometheus metrics until SIGINT/SIGTERM.

    Needs the metrics extra.  Each worker started with --metrics-port serves its own
    counters (and, with its database, the same queue state).
    """  # fmt: skip
    prometheus = _extra("pgjobq.prometheus", "metrics", "pgjobq metrics")
    # no check of the database first: an exporter starts anyway, and says pgjobq_database_up 0
    with _one_line_errors(), _until_interrupted() as stop:
        prometheus.serve_database_metrics(dsn, port, host, stop=stop)


@main.command()
@_dsn_option
@_host_option(
    "PGJOBQ_DASHBOARD_HOST",
    "Address to listen on; any but a loopback one needs --user and --password (or --no-auth).",
)
@_port_option("PGJOBQ_DASHBOARD_PORT", 8080, "Port to listen on.")
@click.option(
    "--allow-actions",
    envvar="PGJOBQ_DASHBOARD_ALLOW_ACTIONS",
    show_envvar=True,
    is_flag=True,
    help="Offer retry, cancel, pause, resume and purge (the role needs pgjobq's admin level) "
    "[default: read-only].",
)
@click.option(
    "--user",
    envvar="PGJOBQ_DASHBOARD_USER",
    show_envvar=True,
    default=None,
    help="User name for HTTP Basic authentication (with --password).",
)
@click.option(
    "--password",
    envvar="PGJOBQ_DASHBOARD_PASSWORD",
    show_envvar=True,
    default=None,
    help="Password for HTTP Basic authentication (better given in the variable than on the command line).",
)
@click.option(
    "--no-auth",
    envvar="PGJOBQ_DASHBOARD_NO_AUTH",
    show_envvar=True,
    is_flag=True,
    help="Serve a non-loopback address without authentication (behind a proxy that authenticates).",
)
def dashboard(
    dsn: str,
    host: str,
    port: int,
    allow_actions: bool,
    user: str | None,
    password: str | None,
    no_auth: bool,
) -> None:
    """Serve the web dashboard (queues, jobs, schedules) until SIGINT/SIGTERM (the web extra)."""
    web = _extra("pgjobq.dashboard", "web", "pgjobq dashboard")
    with (
        _needs_extra("web", "pgjobq dashboard"),  # uvicorn is imported when serving starts
        _one_line_errors(),
        contextlib.suppress(KeyboardInterrupt),
    ):
        web.serve(dsn, host, port, allow_actions, user, password, no_auth)
