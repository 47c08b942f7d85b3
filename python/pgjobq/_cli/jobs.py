"""The job commands: enqueue, wait, cancel, retry-failed, signal, jobs list, jobs show and its alias job,
jobs unhold; and the options of the jobs that enqueue and schedule make, defined once (job_options)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgjobq._cli.common import (
    SECONDS,
    F,
    connection,
    dsn_option,
    json_object,
    json_option,
    option,
)
from pgjobq._cli.output import echo_fields, echo_table, fields, json_value
from pgjobq._client import sync as client
from pgjobq._client.proto import DURABLE_VERSION
from pgjobq._queries import query

__all__ = [
    "DURABLE_SINCE",
    "TASKS_SINCE",
    "cancel",
    "enqueue",
    "job",
    "job_options",
    "jobs",
    "jobs_show",
    "jobs_unhold",
    "retry_failed",
    "signal",
    "wait",
]

# The extension version whose jobs have a task (jobq.jobs.task).
TASKS_SINCE = "0.9.0"
# The extension version of durable execution: held jobs, signals, steps, progress.
DURABLE_SINCE = DURABLE_VERSION

JOB_STATUSES = ("waiting", "queued", "running", "done", "failed", "cancelled")


def job_options(command: F) -> F:
    """--priority, --max-attempts, --headers and --task: the options of a job, for the commands that make
    jobs (enqueue, and schedule for each of its occurrences)."""
    for decorate in (
        option("--task", "The job's task: the name a worker run with --tasks runs it by (extension "
               f"{TASKS_SINCE}) [default: none, a plain job].", default=None, metavar="NAME"),
        option("--headers", "A JSON object handed to the worker with the job.", default=None, metavar="JSON"),
        option("--max-attempts", "Attempts before the job is failed for good [default: the queue's "
               "setting, else 3].", type=int, default=None),
        option("--priority", "Higher runs first.", type=int, default=0),
    ):  # fmt: skip
        command = decorate(command)  # the last one applied comes first in --help
    return command


@click.command()
@click.argument("queue")
@click.argument("payload", metavar="JSON")
@dsn_option
@job_options
@option("--delay", "Seconds before the job may run.", type=float, default=0.0)
@option(
    "--unique-key",
    "While a job of the queue with this key is queued or running, enqueue nothing "
    "(--on-conflict says what instead).",
    default=None,
)
@option(
    "--unique-scope",
    "until_done: a done job keeps holding its key too.",
    type=click.Choice(["active", "until_done"]),
    default="active",
)
@option(
    "--on-conflict",
    "When the key is held: print the holder's id (return), print nothing (skip), fail (raise), "
    "or give a queued holder this job's payload and options (replace).",
    type=click.Choice(["return", "skip", "raise", "replace"]),
    default="return",
)
@option(
    "--concurrency-key",
    "The job counts against its queue's --key-concurrency with the running jobs of this key.",
    default=None,
)
@option(
    "--depends-on",
    "A parent job's id (repeatable; the variable takes ids separated by spaces): the job waits "
    "until every parent is done.",
    type=int,
    multiple=True,
    metavar="ID",
)
@option(
    "--on-parent-failure",
    "When a parent fails or is cancelled: cancel the job, or run it anyway.",
    type=click.Choice(["cancel", "run"]),
    default="cancel",
)
@option(
    "--hold",
    "Enqueue the job held: it waits, never claimed, until pgjobq jobs unhold releases it (extension "
    f"{DURABLE_SINCE}; not with --unique-key, --concurrency-key or --depends-on).",
    is_flag=True,
)
def enqueue(
    queue: str,
    payload: str,
    dsn: str,
    priority: int,
    max_attempts: int | None,
    headers: str | None,
    task: str | None,
    delay: float,
    unique_key: str | None,
    unique_scope: str,
    on_conflict: str,
    concurrency_key: str | None,
    depends_on: tuple[int, ...],
    on_parent_failure: client.OnParentFailure,
    hold: bool,
) -> None:
    """Enqueue one job with a JSON object as payload; print its id (nothing when skipped).

    How long it may run once claimed is its queue's to say (see configure-queue).
    """
    document = json_object(payload, "JSON")
    assert document is not None
    header_document = json_object(headers, "--headers")
    run_at = datetime.now(timezone.utc) + timedelta(seconds=delay) if delay else None
    with connection(dsn) as conn:
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
            task=task,  # None: a plain job, and the call extension 0.8.0 knows
            hold=hold,  # False: the call extension 0.10.0 knows
        )
    if job_id is None:
        click.echo(f"skipped: unique key {unique_key!r} is held by another job of queue {queue!r}", err=True)
    else:
        click.echo(job_id)


class _StillRunning(click.ClickException):
    """wait gave up at its timeout: exit 3, told apart from a job that failed (1)."""

    exit_code = 3


@click.command()
@click.argument("job_id", metavar="ID", type=int)
@dsn_option
@option("--timeout", "Seconds to wait for the job to finish.", env="WAIT_TIMEOUT", type=SECONDS, default="10")
def wait(job_id: int, dsn: str, timeout: timedelta) -> None:
    """Wait for a job to finish; print its result (JSON) if it has one.

    Exits 0 when the job is done, 1 when it failed or was cancelled, 3 when it
    is still unfinished at the timeout.
    """  # fmt: skip
    if timeout < timedelta(0):
        raise click.BadParameter("must not be negative", param_hint="--timeout")
    with connection(dsn) as conn:
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


@click.command()
@click.argument("ids", metavar="ID...", nargs=-1, required=True, type=int)
@dsn_option
@option(
    "--force",
    "Cancel running jobs at once (their workers' leases are refused from then on) "
    "[default: ask their workers to stop].",
    is_flag=True,
)
def cancel(ids: tuple[int, ...], dsn: str, force: bool) -> None:
    """Cancel jobs; print each one's status now (cancelled, cancel_requested, done or failed)."""  # fmt: skip
    with connection(dsn) as conn:
        outcomes = client.cancel(conn, ids, force=force)
    for outcome in outcomes:
        click.echo(f"{outcome.id} {outcome.status}")
    unknown = sorted(set(ids) - {outcome.id for outcome in outcomes})
    if unknown:
        raise click.ClickException(f"no job with id {', '.join(str(i) for i in unknown)}")


@click.command("retry-failed")
@dsn_option
@option("--queue", "Only this queue [default: every queue].", prefix="RETRY_FAILED_", default=None)
@option(
    "--id",
    "Only this job id (repeatable; the variable takes ids separated by spaces).",
    name="ids",
    env="IDS",
    type=int,
    multiple=True,
)
def retry_failed(dsn: str, queue: str | None, ids: tuple[int, ...]) -> None:
    """Put failed jobs (the dead letters) back in their queue with attempts reset."""  # fmt: skip
    with connection(dsn) as conn:
        redriven = client.retry_failed(conn, queue, list(ids) if ids else None)
    click.echo(f"{len(redriven)} job(s) back in the queue")


@click.command()
@click.argument("key")
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False)
@dsn_option
@option(
    "--keep",
    "Seconds the signal is kept for the jobs that await KEY later (0 to 10 years).",
    prefix="SIGNAL_",
    type=SECONDS,
    default="604800",
)
def signal(key: str, payload: str | None, dsn: str, keep: timedelta) -> None:
    """Send the signal KEY, with PAYLOAD_JSON (any JSON value; default null): every job waiting for it
    becomes queued; print how many it released.

    The first signal of a key wins, and is kept for --keep for the jobs that await it later; sending it
    again releases nothing.  Needs the pgjobq extension 0.11.0."""  # fmt: skip
    value = _json_value(payload, "PAYLOAD_JSON")
    with connection(dsn) as conn:
        released = client.signal(conn, key, value, keep=keep)
    click.echo(f"{released} job(s) released")


def _json_value(text: str | None, param_hint: str) -> Any:
    """text parsed as any JSON value (None stays None: JSON null); bad usage otherwise."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=param_hint) from exc


@click.group()
def jobs() -> None:
    """List jobs, show one with its payload, headers, result, error and steps, or release held ones."""


@jobs.command("list")
@dsn_option
@json_option
@option("--queue", "Only this queue [default: every queue].", prefix="JOBS_LIST_", default=None)
@option(
    "--status",
    "Only jobs with this status (repeatable; the variable takes names separated by spaces) "
    "[default: every status].",
    name="statuses",
    type=click.Choice(JOB_STATUSES),
    multiple=True,
)
@option(
    "--task",
    f"Only jobs of this task (extension {TASKS_SINCE}) [default: every job].",
    prefix="JOBS_LIST_",
    default=None,
    metavar="NAME",
)
@option("--limit", "At most this many jobs, newest first.", type=click.IntRange(1, 10_000), default=50)
@option(
    "--before",
    "Only jobs with a smaller id: the next page, as the previous page's last line says.",
    type=click.IntRange(min=1),
    default=None,
    metavar="ID",
)
def jobs_list(
    dsn: str,
    as_json: bool,
    queue: str | None,
    statuses: tuple[str, ...],
    task: str | None,
    limit: int,
    before: int | None,
) -> None:
    """Jobs, newest first: id, queue, status, attempts, when they run or finished, their task (extension
    0.9.0), their last error.

    At most --limit of them; when there may be more, a last line on stderr gives the
    --before that shows the next page.  --json prints a JSON array of objects.
    """  # fmt: skip
    params = {"queue": queue, "statuses": list(statuses) or None, "before": before, "limit": limit}
    with connection(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query("list_jobs"), {**params, "task": task}).fetchall()
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=json_value, ensure_ascii=False))
    else:
        header = ("id", "queue", "status", "attempts", "priority", "run at / finished", "worker", "task",
                  "last error")  # fmt: skip
        echo_table(
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
                    r["task"] or "-",
                    _one_line(r["last_error"]),
                )
                for r in rows
            ],
            left=(1, 2, *range(5, len(header))),  # the numbers right-aligned
        )
    if len(rows) == limit:
        click.echo(f"more may follow: add --before {rows[-1]['id']}", err=True)


@jobs.command("show")
@click.argument("job_id", metavar="ID", type=int)
@dsn_option
@json_option
def jobs_show(job_id: int, dsn: str, as_json: bool) -> None:
    """One job whole: status, priority, attempts, task (extension 0.9.0), payload, headers, result, last
    error, parents, times, the worker holding it, and its steps, progress and what it waits for (extension
    0.11.0); exit 1 when there is none.

    A role that may look jobs up (jobq.job) but not read the table jobq.jobs (pgjobq's observer
    level) gets what jobq.job tells, without the priority, payload, headers and lease, and a
    line on stderr saying so.  pgjobq job ID is an alias of this command.
    """  # fmt: skip
    with connection(dsn) as conn:
        try:
            with conn.cursor(row_factory=dict_row) as cur:
                row = cur.execute(query("show_job"), {"id": job_id}).fetchone()
            partial = False
        except psycopg.errors.InsufficientPrivilege:  # no SELECT on jobq.jobs; jobq.job may still answer
            state = fields(client.job(conn, job_id))
            row = {name: state[name] for name in _STATE_FIELDS}
            partial = True
    if row is None:  # jobq.job found it, then it was purged
        raise click.ClickException(f"id {job_id}: no such job")
    echo_fields(row, as_json)
    if partial:
        click.echo(
            "priority, payload, headers and lease not shown: this role may not read jobq.jobs "
            "(pgjobq's monitor and admin levels may)",
            err=True,
        )


# What jobq.job tells of a job, in the order jobs show prints the whole job (queries.sql, show_job).
_STATE_FIELDS = ("id", "queue", "task", "status", "attempts", "max_attempts", "result", "last_error",
                 "depends_on", "cancel_requested", "run_at", "created_at", "finished_at", "steps",
                 "progress", "waiting_for")  # fmt: skip


@jobs.command("unhold")
@click.argument("ids", metavar="ID...", nargs=-1, required=True, type=int)
@dsn_option
def jobs_unhold(ids: tuple[int, ...], dsn: str) -> None:
    """Release held jobs (enqueue --hold): each becomes queued; print how many it released.

    The ids of jobs that are not held (unknown, released already, cancelled) are left alone.  Needs the
    pgjobq extension 0.11.0."""  # fmt: skip
    with connection(dsn) as conn:
        released = client.unhold(conn, ids)
    click.echo(f"{released} job(s) released")


# pgjobq job ID: jobs show under its older, shorter name, run by the same code with the same options.
job = click.Command(
    "job",
    callback=jobs_show.callback,
    params=jobs_show.params,
    help="Alias of pgjobq jobs show: one job whole, with the same options and output.",
)


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _one_line(text: str | None, width: int = 60) -> str:
    """The first line of text, cut to width characters ("-": none)."""
    if not text:
        return "-"
    line = text.splitlines()[0]
    return line if len(line) <= width else line[: width - 1] + "…"
