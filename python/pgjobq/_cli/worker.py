"""pgjobq worker: runs a handler (MODULE:FUNCTION), or a registry of tasks (--tasks), on the jobs of its
queues."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from pgjobq._cli.common import F, dsn_option, extra, one_line_errors, option
from pgjobq._cli.logs import LOG_FORMATS, configure_logging
from pgjobq._errors import ConfigurationError
from pgjobq._tasks import Tasks, load_tasks
from pgjobq._worker.aio import AsyncWorker, is_coroutine_function
from pgjobq._worker.settings import DEFAULT_QUEUE
from pgjobq._worker.sync import Handler, Worker, WorkerSettings

__all__ = ["load_handler", "worker"]

_SETTINGS = {field.name: field for field in dataclasses.fields(WorkerSettings)}


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


def _load_tasks(spec: str) -> Tasks:
    """MODULE or MODULE:ATTRIBUTE -> its Tasks (pgjobq._tasks.load_tasks, which makes the current
    directory importable); a registry that cannot be loaded is bad usage naming --tasks."""
    try:
        return load_tasks(spec)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--tasks") from exc
    except ImportError as exc:  # a module that the tasks' module imports
        raise click.BadParameter(f"cannot import {spec!r}: {exc}", param_hint="--tasks") from exc


def _setting(flag: str, help: str, **attributes: Any) -> Callable[[F], F]:
    """A worker option for the WorkerSettings field it names, with that field's default: one source.

    ``--poll-interval`` sets ``poll_interval``, from PGJOBQ_POLL_INTERVAL (option's rule).
    """
    setting = flag.split("/")[0].removeprefix("--").replace("-", "_")
    default = _SETTINGS[setting].default
    if default is dataclasses.MISSING:  # a default_factory (name): the help text says what it is
        default = None
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        attributes.setdefault("type", type(default))
    return option(flag, help, name=setting, default=default, **attributes)


@click.command()
@click.argument("handler", metavar="[MODULE:FUNCTION]", required=False)
@dsn_option
@option(
    "--tasks",
    "Run the tasks of this pgjobq.Tasks registry instead of a handler: a module holding one, or "
    "module:attribute.  With an async task among them, an AsyncWorker runs them (the others on threads).",
    name="tasks_spec",
    default=None,
    metavar="MODULE[:ATTRIBUTE]",
)
@option(
    "--queue",
    "Queue to claim from (repeatable: one claim over all of them; the variable takes names separated "
    "by spaces) [default: default; with --tasks, every queue its tasks use].",
    multiple=True,
    default=(DEFAULT_QUEUE,),
    show_default=False,
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
@_setting("--name", "Worker name recorded in locked_by [default: host:pid].", env="WORKER_NAME")
@option(
    "--log-level",
    "The least severe log lines written to stderr.",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
)
@option(
    "--log-format",
    "text: one line of text per log line; json: one JSON object per line (time, level, logger, "
    "message, and job_id, task, queue, attempt on the lines about a job).",
    type=click.Choice(LOG_FORMATS),
    default="text",
)
@option(
    "--metrics-port",
    "Serve Prometheus metrics on this port (/metrics): this worker's jobs, and the queues' state "
    "(the metrics extra) [default: none].",
    type=click.IntRange(1, 65535),
    default=None,
)
@option("--metrics-host", "Address the metrics are served on.", default="127.0.0.1")
def worker(
    handler: str | None,
    tasks_spec: str | None,
    dsn: str,
    queue: tuple[str, ...],
    log_level: str,
    log_format: str,
    name: str | None,
    metrics_port: int | None,
    metrics_host: str,
    **settings: Any,
) -> None:
    """Run MODULE:FUNCTION, or the tasks of --tasks, on each job of one queue or several until
    SIGTERM/SIGINT (or --burst).

    The function gets one Job (id, queue, payload, attempts, max_attempts);
    returning completes the job, raising fails it with the exception's message.
    A coroutine function (async def) runs under pgjobq.AsyncWorker, its jobs
    as asyncio tasks (--concurrency of them at once).  --tasks runs each job's
    task with the payload as its keyword arguments, claiming from every queue
    its tasks use unless --queue says which.  Every reap interval the worker
    also runs jobq.tick, so schedules advance.
    """  # fmt: skip
    if handler is None and tasks_spec is None:
        raise click.UsageError("give a handler (MODULE:FUNCTION) or --tasks MODULE[:ATTRIBUTE]")
    if handler is not None and tasks_spec is not None:
        raise click.UsageError(
            f"give a handler (MODULE:FUNCTION) or --tasks, not both: got {handler} and --tasks {tasks_spec}"
        )
    configure_logging(log_level, log_format)
    function = None if handler is None else load_handler(handler)
    tasks = None if tasks_spec is None else _load_tasks(tasks_spec)
    if not queue:  # PGJOBQ_QUEUE set to nothing but spaces
        raise click.BadParameter("must name at least one queue", param_hint="--queue")
    given = click.get_current_context().get_parameter_source("queue") is not ParameterSource.DEFAULT
    if tasks is not None and not given:
        queue = tuple(tasks.queues)
        if not queue:
            raise click.BadParameter(f"{tasks_spec} has no task", param_hint="--tasks")
    settings["queue"] = queue[0] if len(queue) == 1 else list(queue)
    if name:  # else WorkerSettings' own default, host:pid
        settings["name"] = name
    if metrics_port is not None:
        prometheus = extra("pgjobq.prometheus", "metrics", "pgjobq worker --metrics-port")
        with one_line_errors():
            settings["observers"] = [prometheus.start_worker_metrics(metrics_port, metrics_host, dsn)]
    with one_line_errors():
        runner = _runner(dsn, function, tasks, WorkerSettings(**settings))
        if isinstance(runner, AsyncWorker):
            asyncio.run(runner.run())
        else:
            runner.run()
    if runner.abandoned:
        # A second signal: handler threads cannot be interrupted and would keep
        # the interpreter alive at exit; the reaper recovers their jobs.
        logging.shutdown()
        os._exit(1)


def _runner(
    dsn: str, handler: Handler | None, tasks: Tasks | None, settings: WorkerSettings
) -> Worker | AsyncWorker:
    """The worker for handler, or else for tasks: an AsyncWorker for a coroutine function (its jobs as
    asyncio tasks), or for a registry with an async task among its tasks (the sync ones on threads);
    a Worker otherwise."""
    if tasks is not None:
        if tasks.is_async:
            return AsyncWorker(dsn, tasks=tasks, settings=settings)
        return Worker(dsn, tasks=tasks, settings=settings)
    assert handler is not None
    if is_coroutine_function(handler):
        return AsyncWorker(dsn, handler, settings)
    return Worker(dsn, handler, settings)
