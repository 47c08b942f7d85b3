"""The pgjobq command line: worker, enqueue, stats, retry-failed, reap, purge, health.

Every option has an environment-variable twin (shown in --help).  Errors
print one line and exit non-zero: 1 for a refused operation or an
unreachable database, 2 for bad usage.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import click
import psycopg

from pgjobq import _client
from pgjobq._errors import Error, first_line
from pgjobq._extension import check_extension
from pgjobq._worker import Handler, Worker, WorkerSettings

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
        raise click.ClickException(f"database error: {first_line(exc)}") from exc


@contextmanager
def _connection(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one CLI command, to a database whose pgjobq this package supports; one-line errors."""
    with _one_line_errors(), psycopg.connect(dsn, autocommit=True) as conn:
        check_extension(conn)
        yield conn


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
@_setting("--queue", "Queue name.")
@_setting("--batch", "Jobs claimed per round trip.")
@_setting("--concurrency", "Handlers running at once (threads).")
@_setting("--burst", "Exit once the queue has no runnable job.", is_flag=True)
@_setting("--poll-interval", "Seconds between polls when no notification arrives.")
@_setting(
    "--lease-timeout",
    "Seconds a job's lease lasts: the database stores its expiry on the job, each heartbeat extends it "
    "by this much again, and any worker reaps the job once it has expired.",
)
@_setting(
    "--heartbeat-interval",
    "Seconds between heartbeats of jobs in hand [default: lease timeout / 4].",
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
@_setting("--name", "Worker name recorded in locked_by [default: host:pid].", envvar="PGJOBQ_WORKER_NAME")
@click.option(
    "--log-level",
    envvar="PGJOBQ_LOG_LEVEL",
    show_envvar=True,
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def worker(
    handler: str,
    dsn: str,
    log_level: str,
    name: str | None,
    **settings: Any,
) -> None:
    """Run MODULE:FUNCTION on each job of a queue until SIGTERM/SIGINT (or --burst).

    The function gets one Job (id, queue, payload, attempts, max_attempts);
    returning completes the job, raising fails it with the exception's message.
    """  # fmt: skip
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    function = load_handler(handler)
    if name:  # else WorkerSettings' own default, host:pid
        settings["name"] = name
    with _one_line_errors():
        runner = Worker(dsn, function, WorkerSettings(**settings))
        runner.run()
    if runner.abandoned:
        # A second signal: handler threads cannot be interrupted and would keep
        # the interpreter alive at exit; the reaper recovers their jobs.
        logging.shutdown()
        os._exit(1)


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
    default=3,
    show_default=True,
    help="Attempts before the job is failed for good.",
)
def enqueue(queue: str, payload: str, dsn: str, priority: int, delay: float, max_attempts: int) -> None:
    """Enqueue one job with a JSON object as payload; print its id."""  # fmt: skip
    try:
        document = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="JSON") from exc
    if not isinstance(document, dict):
        raise click.BadParameter("the payload must be a JSON object", param_hint="JSON")
    run_at = datetime.now(timezone.utc) + timedelta(seconds=delay) if delay else None
    with _connection(dsn) as conn:
        job_id = _client.enqueue(
            conn, queue, document, priority=priority, run_at=run_at, max_attempts=max_attempts
        )
    click.echo(job_id)


@main.command()
@_dsn_option
@_json_option
def stats(dsn: str, as_json: bool) -> None:
    """Jobs per queue and status, and the wait of the oldest runnable job."""  # fmt: skip
    with _connection(dsn) as conn:
        rows = _client.stats(conn)
    if as_json:
        click.echo(json.dumps([_stats_dict(row) for row in rows], indent=2))
        return
    header = ("queue", "queued", "runnable", "running", "done", "failed", "oldest wait")
    table = [header] + [
        (
            r.queue,
            *(str(v) for v in (r.queued, r.runnable, r.running, r.done, r.failed)),
            _age(r.oldest_queued_age),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        click.echo("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                             enumerate(zip(line, widths, strict=True))).rstrip())  # fmt: skip


def _age(age: timedelta | None) -> str:
    return "-" if age is None else f"{age.total_seconds():.1f}s"


def _stats_dict(row: _client.QueueStats) -> dict[str, object]:
    age = row.oldest_queued_age
    return {
        "queue": row.queue, "queued": row.queued, "runnable": row.runnable, "running": row.running,
        "done": row.done, "failed": row.failed,
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
        redriven = _client.retry_failed(conn, queue, list(ids) if ids else None)
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
        reaped = _client.reap(conn, None if stale is None else timedelta(seconds=stale))
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
        deleted = _client.purge(
            conn, timedelta(seconds=older_than), max_rows=max_rows, include_failed=include_failed
        )
    click.echo(f"{deleted} job(s) deleted")


@main.command()
@_dsn_option
@_json_option
def health(dsn: str, as_json: bool) -> None:
    """Queue depth, dead tuples, last vacuum and the oldest open transaction (jobq.health)."""  # fmt: skip
    with _connection(dsn) as conn:
        report = _client.health(conn)
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
