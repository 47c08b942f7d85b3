"""The queue commands: stats (and --watch), health, queues, configure-queue, pause, resume, reap, purge."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import psycopg

from pgjobq._cli.common import (
    SECONDS,
    F,
    connection,
    dsn_option,
    json_option,
    option,
    until_interrupted,
)
from pgjobq._cli.output import duration, echo_fields, echo_table, fields, json_value, table_text, yes_no
from pgjobq._client import sync as client

__all__ = ["configure_queue", "health", "pause", "purge", "queues", "reap", "resume", "stats"]

STATS_HEADER = ("queue", "queued", "runnable", "running", "done", "failed", "cancelled", "oldest wait")


@click.command()
@dsn_option
@json_option
@option(
    "--watch",
    "Redraw every --interval until Ctrl-C: a live table (drawn with rich when it is installed, "
    "the cli extra); with --json, one JSON array per line; not on a terminal, one table after another.",
    is_flag=True,
)
@option(
    "--interval",
    "Seconds between two readings with --watch.",
    env="WATCH_INTERVAL",
    type=click.FloatRange(min=0.1),
    default=2.0,
)
def stats(dsn: str, as_json: bool, watch: bool, interval: float) -> None:
    """Jobs per queue and status, and the wait of the oldest runnable job."""  # fmt: skip
    with connection(dsn) as conn:
        if not watch:
            rows = client.stats(conn)
            if as_json:
                click.echo(json.dumps([_stats_dict(row) for row in rows], indent=2))
            else:
                echo_table(STATS_HEADER, _stats_cells(rows))
            return
        with until_interrupted() as stop:
            _watch_stats(conn, as_json, interval, stop)


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
                           f"{table_text(STATS_HEADER, _stats_cells(rows))}\n")  # fmt: skip
            stop.wait(interval)
        return
    try:
        from rich.live import Live
        from rich.table import Table
    except ImportError:  # the cli extra is not installed: redraw the plain table
        while not stop.is_set():
            table = table_text(STATS_HEADER, _stats_cells(client.stats(conn)))
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


def _age(age: timedelta | None) -> str:
    return "-" if age is None else f"{age.total_seconds():.1f}s"


def _stats_dict(row: client.QueueStats) -> dict[str, object]:
    age = row.oldest_queued_age
    return {
        "queue": row.queue, "queued": row.queued, "runnable": row.runnable, "running": row.running,
        "done": row.done, "failed": row.failed, "cancelled": row.cancelled, "waiting": row.waiting,
        "oldest_queued_age_seconds": None if age is None else age.total_seconds(),
    }  # fmt: skip


@click.command()
@dsn_option
@json_option
def health(dsn: str, as_json: bool) -> None:
    """Queue depth, dead tuples, last vacuum and the oldest open transaction (jobq.health)."""  # fmt: skip
    with connection(dsn) as conn:
        report = client.health(conn)
    values = {name: getattr(report, name) for name in report.__slots__}
    if as_json:
        click.echo(json.dumps(values, indent=2, default=json_value))
        return
    for name, value in values.items():
        click.echo(f"{name.replace('_', ' ')}: {'-' if value is None else json_value(value)}")


@click.command()
@dsn_option
@json_option
def queues(dsn: str, as_json: bool) -> None:
    """Every configured queue and every queue with jobs in flight: its jobs queued, running and waiting
    (for parents), its settings, its limits and its retention (done/failed/cancelled; -: until
    purged)."""  # fmt: skip
    with connection(dsn) as conn:
        rows = client.queue_overview(conn)
    if as_json:
        click.echo(json.dumps([fields(row) for row in rows], indent=2, default=json_value))
        return
    # the columns of 0.6.0 first (scripts read them by position), then the counts, the limits and the
    # retention (done/failed/cancelled)
    header = ("queue", "paused", "max attempts", "backoff base", "backoff max", "jitter", "lease", "timeout",
              "configured", "queued", "running", "waiting", "concurrency", "per key", "key order",
              "rate", "retention")  # fmt: skip
    echo_table(
        header,
        [
            (
                r.queue,
                yes_no(r.paused),
                str(r.max_attempts),
                duration(r.backoff_base),
                duration(r.backoff_max),
                f"{r.backoff_jitter:g}",
                duration(r.lease_timeout),
                duration(r.timeout),
                yes_no(r.configured),
                str(r.queued),
                str(r.running),
                str(r.waiting),
                _limit(r.concurrency),
                _limit(r.key_concurrency),
                r.key_order,
                _rate(r.rate_limit, r.rate_interval),
                "/".join(_span(kept) for kept in (r.retain_done, r.retain_failed, r.retain_cancelled)),
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
    return f"{limit}/{duration(interval)}"


def _span(value: timedelta | None) -> str:
    """A retention in its largest whole unit ("1d", "36h", "90m", "0s"; else seconds); "-": until purged."""
    if value is None:
        return "-"
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:.0f}{unit}"
    return duration(value)


def _queue_setting(flag: str, help: str, **attributes: Any) -> Callable[[F], F]:
    """A setting of configure-queue, from PGJOBQ_QUEUE_<FLAG>; not given, it stays as it is."""
    return option(flag, help, prefix="QUEUE_", default=None, **attributes)


@click.command("configure-queue")
@click.argument("queue")
@dsn_option
@json_option
@_queue_setting(
    "--max-attempts",
    "Attempts before a job without its own max_attempts fails for good (default 3).",
    type=int,
)
@_queue_setting(
    "--backoff-base",
    "Seconds: a retry after attempt a waits backoff_base * 2^a, at most backoff_max (default 1).",
    type=SECONDS,
)
@_queue_setting("--backoff-max", "Seconds: the longest wait before a retry (default 300).", type=SECONDS)
@_queue_setting(
    "--backoff-jitter",
    "0 to 1: each retry's wait is shortened by up to this fraction, at random (default 0).",
    type=float,
)
@_queue_setting(
    "--lease-timeout", "Seconds a claim's lease lasts when the worker names none (default 60).", type=SECONDS
)
@_queue_setting(
    "--timeout",
    "Seconds a job may run once claimed: its lease is not extended past that (default: no limit).",
    type=SECONDS,
)
@_queue_setting(
    "--concurrency",
    "At most this many running jobs of the queue, over every worker (1 to 100000; default: no limit).",
    type=int,
)
@_queue_setting(
    "--key-concurrency",
    "At most this many running jobs per concurrency key (1 to 100000; default: no limit).",
    type=int,
)
@_queue_setting(
    "--key-order",
    "How claims pick among concurrency keys: by the jobs' priority, or keys taking turns (default priority).",
    type=click.Choice(["priority", "round_robin"]),
)
@_queue_setting(
    "--rate-limit",
    "At most this many claims per --rate-interval (1 to 10000; default: no limit).",
    type=int,
)
@_queue_setting(
    "--rate-interval",
    "Seconds over which --rate-limit counts claims (above 0, at most a day; default 1).",
    type=SECONDS,
)
@_queue_setting(
    "--retain-done",
    "Seconds a done job is kept after it finished; then the workers' tick deletes it (0 to 10 years; "
    "default 86400, a day).",
    type=SECONDS,
)
@_queue_setting(
    "--retain-failed",
    "Seconds a failed job (a dead letter) is kept after it failed (0 to 10 years; default 1209600, "
    "two weeks).",
    type=SECONDS,
)
@_queue_setting(
    "--retain-cancelled",
    "Seconds a cancelled job is kept after it was cancelled (0 to 10 years; default 604800, 7 days).",
    type=SECONDS,
)
@_queue_setting(
    "--keep-forever",
    "A final state whose jobs are kept until purged (repeatable; the variable takes states separated "
    "by spaces); replaces the queue's list.",
    type=click.Choice(["done", "failed", "cancelled"]),
    multiple=True,
)
@_queue_setting(
    "--unset",
    "Clear a setting back to its default (repeatable; the variable takes names separated by spaces).",
    type=click.Choice(client.QUEUE_SETTINGS),
    multiple=True,
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
    retain_done: timedelta | None,
    retain_failed: timedelta | None,
    retain_cancelled: timedelta | None,
    keep_forever: tuple[str, ...],
    unset: tuple[str, ...],
) -> None:
    """Change QUEUE's settings, limits and retention (those not given stay as they are); print them all.

    The retention options need the pgjobq extension 0.10.0."""  # fmt: skip
    with connection(dsn) as conn:
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
            retain_done=retain_done,
            retain_failed=retain_failed,
            retain_cancelled=retain_cancelled,
            keep_forever=keep_forever or None,  # none given: the list stays as it is
        )
    echo_fields(fields(settings), as_json)


@click.command()
@click.argument("queue")
@dsn_option
def pause(queue: str, dsn: str) -> None:
    """Stop workers claiming from QUEUE (until resume; running jobs go on)."""  # fmt: skip
    with connection(dsn) as conn:
        # jobq.pause says so (a NOTICE) when nothing knows the queue yet: a mistyped name, perhaps
        conn.add_notice_handler(lambda notice: click.echo(f"notice: {notice.message_primary}", err=True))
        client.pause(conn, queue)
    click.echo(f"queue {queue} paused")


@click.command()
@click.argument("queue")
@dsn_option
def resume(queue: str, dsn: str) -> None:
    """Let workers claim from QUEUE again, and wake them."""  # fmt: skip
    with connection(dsn) as conn:
        client.resume(conn, queue)
    click.echo(f"queue {queue} resumed")


@click.command()
@dsn_option
@option(
    "--stale",
    "Also require a job's lease to be older than this many seconds [default: each job's own "
    "lease expiry decides].",
    type=float,
    default=None,
)
def reap(dsn: str, stale: float | None) -> None:
    """Recover running jobs whose lease expired (normally the workers do this)."""  # fmt: skip
    if stale is not None and stale <= 0:
        raise click.BadParameter("must be positive", param_hint="--stale")
    with connection(dsn) as conn:
        reaped = client.reap(conn, None if stale is None else timedelta(seconds=stale))
    click.echo(f"{len(reaped)} job(s) recovered")


@click.command()
@dsn_option
@option(
    "--older-than",
    "Seconds since a job finished after which it is deleted.",
    type=click.FloatRange(min=0),
    default=7 * 24 * 3600.0,
)
@option(
    "--max-rows",
    "Delete at most this many jobs per call (run again for more).",
    type=click.IntRange(1, 1_000_000),
    default=100_000,
)
@option(
    "--include-failed",
    "Delete old failed jobs too (the dead-letter queue) [default: keep them].",
    is_flag=True,
)
def purge(dsn: str, older_than: float, max_rows: int, include_failed: bool) -> None:
    """Delete jobs finished more than --older-than ago, whatever their queue's retention.

    Done and cancelled jobs (failed ones too with --include-failed).  Not needed to keep the table
    small: the workers' tick already deletes the finished jobs whose queue's retention ended (see
    configure-queue)."""  # fmt: skip
    with connection(dsn) as conn:
        deleted = client.purge(
            conn, timedelta(seconds=older_than), max_rows=max_rows, include_failed=include_failed
        )
    click.echo(f"{deleted} job(s) deleted")
