"""The schedule commands: schedule, unschedule, schedules."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from pgjobq._cli.common import SECONDS, connection, dsn_option, json_object, json_option, option
from pgjobq._cli.jobs import job_options
from pgjobq._cli.output import duration, echo_fields, echo_table, fields, json_value
from pgjobq._client import sync as client

__all__ = ["schedule", "schedules", "unschedule"]


@click.command()
@click.argument("name")
@dsn_option
@json_option
@option("--queue", "The queue each occurrence's job goes to.", prefix="SCHEDULE_", required=True)
@option("--payload", "A JSON object: each job's payload [default: {}].", default=None, metavar="JSON")
@option(
    "--cron",
    'A cron expression, five fields ("*/5 * * * *"), read in --timezone (give it or --every).',
    default=None,
    metavar="EXPR",
)
@option("--timezone", "The IANA time zone --cron is read in (Europe/Paris).", default="UTC")
@option(
    "--every",
    "Whole seconds between occurrences, at multiples of it since the Unix epoch (give it or --cron).",
    type=SECONDS,
    default=None,
)
@job_options
@option(
    "--catch-up",
    "What a tick does with occurrences missed while no tick ran: enqueue the latest, all, or none.",
    type=click.Choice(["latest", "all", "skip"]),
    default="latest",
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
    task: str | None,
    catch_up: str,
) -> None:
    """Create the schedule NAME, or replace it: a job of --queue at each occurrence of --cron, or
    --every so many seconds; print it.

    Workers enqueue the occurrences (jobq.tick every reap interval): keep one running.
    """  # fmt: skip
    if (cron is None) == (every is None):
        raise click.UsageError("give --cron or --every, and only one of them")
    document = json_object(payload, "--payload")
    header_document = json_object(headers, "--headers")
    with connection(dsn) as conn:
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
            task=task,  # None: plain jobs, and the call extension 0.8.0 knows
        )
    echo_fields(fields(row), as_json)


@click.command()
@click.argument("name")
@dsn_option
def unschedule(name: str, dsn: str) -> None:
    """Delete the schedule NAME and cancel its queued jobs; exit 1 when there is none."""  # fmt: skip
    with connection(dsn) as conn:
        removed = client.unschedule(conn, name)
    if not removed:
        raise click.ClickException(f"no schedule named {name!r}")
    click.echo(f"schedule {name} removed")


@click.command()
@dsn_option
@json_option
def schedules(dsn: str, as_json: bool) -> None:
    """Every schedule: its queue, when it runs, and its next occurrence."""  # fmt: skip
    with connection(dsn) as conn:
        rows = client.schedules(conn)
    if as_json:
        click.echo(
            json.dumps([fields(row) for row in rows], indent=2, default=json_value, ensure_ascii=False)
        )
        return
    header = ("name", "queue", "when", "priority", "catch up", "next run")
    echo_table(
        header,
        [
            (
                r.name,
                r.queue,
                f"every {duration(r.every)}" if r.cron is None else f"{r.cron} ({r.timezone})",
                str(r.priority),
                r.catch_up,
                "-" if r.next_run is None else r.next_run.isoformat(timespec="seconds"),
            )
            for r in rows
        ],
    )
