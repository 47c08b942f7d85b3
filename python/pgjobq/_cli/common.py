"""What the commands share: the root group, the one option helper that gives every flag its PGJOBQ_
environment twin, the options most commands take (--dsn, --json), a parameter type for seconds, the
database connection, and how errors become one line."""

from __future__ import annotations

import importlib
import json
import math
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import click
import psycopg

from pgjobq._errors import Error, first_line, translate
from pgjobq._install.check import check_extension

__all__ = [
    "EXIT_CODES",
    "SECONDS",
    "F",
    "Seconds",
    "completion",
    "connection",
    "dsn_option",
    "extra",
    "json_object",
    "json_option",
    "main",
    "needs_extra",
    "one_line_errors",
    "option",
    "until_interrupted",
    "versioned_connection",
]

F = TypeVar("F", bound=Callable[..., Any])

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


def option(
    flag: str,
    help: str,
    *,
    name: str | None = None,
    prefix: str = "",
    env: str | None = None,
    **attributes: Any,
) -> Callable[[F], F]:
    """A click option read from the command line or else from its environment variable, shown in --help.

    The variable is derived from the flag: PGJOBQ_, then prefix, then the flag's words in capitals
    (``--poll-interval``: PGJOBQ_POLL_INTERVAL; ``--max-attempts`` with prefix ``QUEUE_``:
    PGJOBQ_QUEUE_MAX_ATTEMPTS; ``--listen/--no-listen``: PGJOBQ_LISTEN).  env names what follows
    PGJOBQ_ instead, for the few flags whose variable says more than the flag (``--name``:
    PGJOBQ_WORKER_NAME).  name is the command's parameter when it is not the flag's (``as_json``).
    The default is shown in --help when there is one worth showing (not None, "" or a flag's off),
    unless show_default is given; the other attributes are click's.
    """
    words = flag.split("/")[0].removeprefix("--").replace("-", "_").upper()
    default = attributes.get("default")
    if "show_default" not in attributes and not attributes.get("is_flag") and default not in (None, ""):
        attributes["show_default"] = True
    declarations = (flag,) if name is None else (flag, name)
    return click.option(
        *declarations, envvar=f"PGJOBQ_{env or prefix + words}", show_envvar=True, help=help, **attributes
    )


dsn_option = option(
    "--dsn",
    "libpq connection string or URI; empty: the PG* environment (PGHOST, PGDATABASE, ...).",
    default="",
)
json_option = option("--json", "Print JSON instead of text.", name="as_json", is_flag=True)


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


def json_object(text: str | None, param_hint: str) -> dict[str, Any] | None:
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


@contextmanager
def one_line_errors() -> Iterator[None]:
    """pgjobq and database errors become one-line CLI errors (exit 1)."""
    try:
        yield
    except Error as exc:
        raise click.ClickException(str(exc)) from exc
    except psycopg.Error as exc:
        known = translate(exc)  # the extension's own errors (no such job ...) read as the client's
        raise click.ClickException(str(known) if known else f"database error: {first_line(exc)}") from exc


@contextmanager
def versioned_connection(dsn: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """A connection for one CLI command, to a database whose pgjobq this package supports, and the
    version of pgjobq installed there; one-line errors."""
    with one_line_errors(), psycopg.connect(dsn, autocommit=True) as conn:
        version = check_extension(conn)
        yield conn, version


@contextmanager
def connection(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one CLI command, to a database whose pgjobq this package supports; one-line errors."""
    with versioned_connection(dsn) as (conn, _version):
        yield conn


@contextmanager
def until_interrupted() -> Iterator[threading.Event]:
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


@contextmanager
def needs_extra(extra: str, command: str) -> Iterator[None]:
    """A module of the optional extra missing, imported at once or later: one readable line (exit 1)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"{command} needs the {extra} extra ({exc.name} is not installed): "
            f"pip install 'pgjobq-py[{extra}]'"
        ) from exc


def extra(module: str, extra: str, command: str) -> Any:
    """module, imported now: the command's optional extra; one readable line when it is not installed."""
    with needs_extra(extra, command):
        return importlib.import_module(module)


@click.command()
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
