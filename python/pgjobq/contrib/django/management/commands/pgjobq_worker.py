"""manage.py pgjobq_worker MODULE:FUNCTION: a pgjobq Worker on the Django project's database.

The options are those of ``pgjobq worker``, with the same environment
variables (PGJOBQ_QUEUE, PGJOBQ_CONCURRENCY, ...); the connection comes from
DATABASES[--database] instead of --dsn.  The handler may use the ORM: the
Django connections of its thread are closed before and after each job when
stale (close_old_connections), as around a request.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from pgjobq import Error, Worker, WorkerSettings
from pgjobq.contrib.django import close_old_connections_around, conninfo

__all__ = ["Command"]

# flag: (WorkerSettings field, type, help); each has the PGJOBQ_<FIELD> variable as its default
_NUMBERS: dict[str, tuple[str, type, str]] = {
    "--batch": ("batch", int, "Jobs claimed per round trip."),
    "--concurrency": ("concurrency", int, "Handlers running at once (threads)."),
    "--poll-interval": ("poll_interval", float, "Seconds between polls when no notification arrives."),
    "--lease-timeout": ("lease_timeout", float, "Seconds a job's lease lasts [the queue's, else 60]."),
    "--heartbeat-interval": ("heartbeat_interval", float, "Seconds between heartbeats of jobs in hand."),
    "--reap-interval": ("reap_interval", float, "Seconds between runs of jobq.reap and jobq.tick."),
    "--reconnect-delay-max": ("reconnect_delay_max", float, "Longest wait between reconnect attempts."),
}
_FLAGS: dict[str, tuple[str, str]] = {
    "--burst": ("burst", "Exit once the queue has no runnable job."),
    "--listen": ("listen", "Wake on NOTIFY (polling always runs underneath)."),
    "--prepared-statements": ("prepared_statements", "Let psycopg prepare statements it runs often."),
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


class Command(BaseCommand):
    help = (
        "Run MODULE:FUNCTION on each job of one queue or several until SIGTERM/SIGINT (or --burst), "
        "connected with the settings of DATABASES[--database]."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("handler", metavar="MODULE:FUNCTION", help="The function run on each Job.")
        parser.add_argument(
            "--queue",
            action="append",
            dest="queue",
            help="Queue to claim from (repeatable) [env PGJOBQ_QUEUE, names separated by spaces; "
            "default: default].",
        )
        parser.add_argument(
            "--database", help="The DATABASES alias to connect with [env PGJOBQ_DATABASE; default: default]."
        )
        for flag, (field, kind, text) in _NUMBERS.items():
            parser.add_argument(flag, dest=field, type=kind, help=f"{text} [env PGJOBQ_{field.upper()}]")
        for flag, (field, text) in _FLAGS.items():
            parser.add_argument(
                flag,
                dest=field,
                action=argparse.BooleanOptionalAction,
                help=f"{text} [env PGJOBQ_{field.upper()}]",
            )
        parser.add_argument(
            "--name", help="Worker name recorded in locked_by [env PGJOBQ_WORKER_NAME; default: host:pid]."
        )
        parser.add_argument(
            "--log-level",
            choices=_LEVELS,
            type=str.upper,
            help="[env PGJOBQ_LOG_LEVEL; default: INFO]",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        given = _with_environment(options)
        logging.basicConfig(
            level=given.pop("log_level", "INFO"),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        queues = given.pop("queue", None) or ["default"]
        database = given.pop("database", DEFAULT_DB_ALIAS)
        handler = close_old_connections_around(_load(given.pop("handler")))
        try:
            worker = Worker(
                conninfo(database),
                handler,
                WorkerSettings(queue=queues[0] if len(queues) == 1 else queues, **given),
            )
            worker.run()
        except Error as exc:
            raise CommandError(str(exc)) from exc
        if worker.abandoned:
            # A second signal: handler threads cannot be interrupted and would keep
            # the interpreter alive at exit; the reaper recovers their jobs.
            logging.shutdown()
            os._exit(1)


def _with_environment(options: dict[str, Any]) -> dict[str, Any]:
    """The handler and the options given, each missing one from its PGJOBQ_ variable when set;
    CommandError naming the variable for a value that does not parse."""
    given: dict[str, Any] = {"handler": options["handler"]}
    names = {"name": "worker_name", "queue": "queue", "database": "database", "log_level": "log_level"}
    names.update({field: field for field, *_ in _NUMBERS.values()})
    names.update({field: field for field, _ in _FLAGS.values()})
    kinds: dict[str, Any] = {field: _number(kind) for field, kind, _ in _NUMBERS.values()}
    kinds.update({field: _boolean for field, _ in _FLAGS.values()})
    kinds.update(queue=str.split, log_level=_level)
    for option, variable in names.items():
        if options.get(option) is not None:
            given[option] = options[option]
            continue
        raw = os.environ.get(f"PGJOBQ_{variable.upper()}", "")
        if raw.strip():
            try:
                given[option] = kinds.get(option, str)(raw)
            except ValueError as exc:
                raise CommandError(f"PGJOBQ_{variable.upper()}: {exc}") from exc
    return given


def _number(kind: type[int] | type[float]) -> Any:
    def parse(raw: str) -> int | float:
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"expected {'an integer' if kind is int else 'a number'}, got {raw!r}") from None

    return parse


def _boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ValueError(f"expected true or false, got {raw!r}")
    return value in _TRUE


def _level(raw: str) -> str:
    if raw.strip().upper() not in _LEVELS:
        raise ValueError(f"expected one of {', '.join(_LEVELS)}, got {raw!r}")
    return raw.strip().upper()


def _load(spec: str) -> Any:
    """MODULE:FUNCTION -> the function; CommandError (one line) otherwise."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(f"expected MODULE:FUNCTION, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise CommandError(f"{module_name!r} has no callable {attribute!r}")
    return function
