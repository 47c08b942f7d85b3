"""The connections a worker opens for itself: their settings, shared by Worker and AsyncWorker.

Each worker opens two autocommit connections, the work connection and the
listening one, named ``pgjobq <role> <worker name>`` (application_name).
``prepared_statements=False`` stops psycopg from preparing statements
(PgBouncer in transaction mode before 1.21).  With orjson installed, JSON
columns are parsed by it where it reads them as json does.

Every connection also gets, unless its conninfo (or libpq's environment,
for the two that have a variable) sets them, the parameters of
network_options: a worker must notice a network gone silent within
``network_timeout`` (WorkerSettings), and work only on a writable server.

- ``keepalives_idle``, ``keepalives_interval``, ``keepalives_count``: an
  idle connection (the listening one, always; the work connection while a
  statement runs) hears nothing when the path to the server drops its
  packets, or when the server side is gone and its FIN was lost (a
  half-open connection).  Keepalive probes find out: after a third of
  network_timeout without traffic, then 3 probes spread over the rest.
  libpq turns keepalives on by default, but with the system's timings,
  two hours and more on Linux.
- ``tcp_user_timeout`` (milliseconds): data sent and not acknowledged for
  network_timeout (a claim or an acknowledgement into a dead path) drops the
  connection, where TCP would retransmit for about fifteen minutes.  On
  Linux it also caps the keepalive probing.  A slow statement is not cut
  short: the server's kernel acknowledges the request and answers probes.
- ``connect_timeout``: a connection attempt to a host that drops packets
  gives up after network_timeout (and a multi-host conninfo goes on to the
  next host) instead of after TCP's two minutes of SYN retries.
- ``target_session_attrs=read-write``: with a multi-host conninfo
  (``host=a,b``), libpq skips a standby and connects to the primary, so
  after a failover the worker's reconnects find the promoted server.
  A worker cannot work on a standby: every call writes.

Unix-socket connections ignore the TCP settings.  A statement that meets a
read-only server all the same (a conninfo asking for
``target_session_attrs=any``, or a pooler in front of a standby) fails
with SQLSTATE 25006; the workers treat it as the database being unavailable
(UNAVAILABLE): they drop their connections and reconnect with backoff.  So
they do with a database whose pgjobq extension this package does not
support (RETRIED): an upgrade may be under way.

A worker given ``connect`` (a callable that returns a new connection: the
application's, for rotating credentials, say) opens every connection with
it instead of a conninfo; the callable chooses the connection's parameters
(network_options are its to pass), and adopt() then makes the connection
the worker's: autocommit, its application_name, and configure()'s settings.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads

from pgjobq._client.proto import json_loaders_needed, use_bigints_dumper, use_json_loaders
from pgjobq._errors import ConfigurationError, IncompatibleExtension, first_line
from pgjobq._queries import query
from pgjobq._worker.settings import WorkerSettings

__all__ = [
    "CHANGED_UNDER",
    "KEEPALIVE_PROBES",
    "RETRIED",
    "UNAVAILABLE",
    "adopt",
    "adopt_async",
    "app_name",
    "configure",
    "connect_failed",
    "ignore_notify",
    "json_loads",
    "network_options",
    "retrying",
    "unavailable",
]

# Keepalive probes sent before a silent connection is given up.
KEEPALIVE_PROBES = 3

# The libpq parameters that environment variables can also set: the conninfo's or the variable's win.
_FROM_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT", "target_session_attrs": "PGTARGETSESSIONATTRS"}

# The errors on which a worker gives its connections up and reconnects with backoff: the connection
# failed or is gone (OperationalError), or the server is read-only (25006: a standby).
UNAVAILABLE: tuple[type[psycopg.Error], ...] = (
    psycopg.OperationalError,
    psycopg.errors.ReadOnlySqlTransaction,
)
# The errors of a statement whose functions or tables changed under it: an ALTER EXTENSION pgjobq UPDATE
# committed while the statement waited on its lock (42804: "structure of query does not match function
# result type", its plan made for the old rows), or between two statements (0A000: "cached plan must not
# change result type"; 42883, 42703: a function or column of the old version gone).  The statement did
# nothing; the worker reconnects and sends it again, with what it still owes.
CHANGED_UNDER: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.DatatypeMismatch,
    psycopg.errors.FeatureNotSupported,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedColumn,
)
# The errors on which a worker drops its connections and tries again with backoff: UNAVAILABLE, a
# database whose extension version this package does not support (an upgrade may be under way), or that
# has none, and CHANGED_UNDER.
RETRIED: tuple[type[Exception], ...] = (*UNAVAILABLE, IncompatibleExtension, *CHANGED_UNDER)


def network_options(conninfo: str, settings: WorkerSettings) -> dict[str, Any]:
    """The parameters of the module docstring that neither conninfo nor libpq's environment sets.

    For the default network_timeout of 10 s: keepalives after 3 s idle, 3
    probes 2 s apart, tcp_user_timeout 10000 ms, connect_timeout 10 s.
    """
    given = conninfo_to_dict(conninfo)
    timeout = settings.network_timeout
    idle = max(1, int(timeout // 3))
    wanted = {
        "connect_timeout": str(math.ceil(timeout)),
        "keepalives": "1",
        "keepalives_idle": str(idle),
        "keepalives_interval": str(max(1, int((timeout - idle) // KEEPALIVE_PROBES))),
        "keepalives_count": str(KEEPALIVE_PROBES),
        "tcp_user_timeout": str(int(timeout * 1000)),
        "target_session_attrs": "read-write",
    }
    return {
        name: value
        for name, value in wanted.items()
        if name not in given and not (name in _FROM_ENVIRONMENT and os.environ.get(_FROM_ENVIRONMENT[name]))
    }


def unavailable(exc: BaseException) -> str:
    """What a worker logs of an UNAVAILABLE error, before the pause it then takes."""
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return (
            f"database is read-only ({first_line(exc)}): a worker needs the primary; connect with "
            "target_session_attrs=read-write (the worker's default)"
        )
    return f"database unavailable ({first_line(exc)})"


def connect_failed(exc: OSError) -> psycopg.OperationalError:
    """What a worker makes of an OSError its connect callable raised (a token service out of reach, say):
    the database is unavailable for now, and the worker tries again with backoff, as it does when the
    callable raises psycopg.OperationalError.  Any other error of the callable ends the worker's run()."""
    error = psycopg.OperationalError(f"the connect callable failed: {type(exc).__name__}: {first_line(exc)}")
    error.__cause__ = exc
    return error


def retrying(exc: BaseException, pause: float) -> str:
    """The line a worker logs when it gives its connections up on exc (RETRIED) and tries again pause
    seconds later."""
    if isinstance(exc, IncompatibleExtension):
        return f"{first_line(exc)}; retrying in {pause:.1f} s: an upgrade may be under way"
    if isinstance(exc, CHANGED_UNDER):
        return (
            f"the database's pgjobq changed under a statement ({first_line(exc)}); retrying in {pause:.1f} s:"
            " an upgrade may be under way"
        )
    return f"{unavailable(exc)}; retrying in {pause:.1f} s"


try:  # optional: parses the worker's payloads in a tenth of json's time
    import orjson
except ImportError:  # json then
    orjson = None  # type: ignore[assignment]

_LONG_NUMBER = re.compile(rb"[0-9][0-9.]{17}").search


def json_loads(data: str | bytes) -> Any:
    """A payload as json.loads reads it, by orjson (when installed) where it reads the same.

    orjson reads an integer beyond 64 bits as a float, where json keeps it
    exact.  jsonb prints every number in full (1e300 as 301 digits), so a
    payload with a run of 18 or more digits and dots goes to json.  A
    module-level function, not a closure: psycopg caches its loaders by it.
    """
    if isinstance(data, bytes) and _LONG_NUMBER(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def ignore_notify(notify: psycopg.Notify) -> None:
    """A notification handler that drops what it gets (behind a transaction-pooling PgBouncer a LISTEN
    left on a shared server connection can deliver notifications to the work connection)."""


def app_name(role: str, settings: WorkerSettings) -> str:
    return f"pgjobq {role} {settings.name}"[:63]


def configure(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], settings: WorkerSettings) -> None:
    """Set up a connection the worker just opened (sync or async).

    Its JSON columns are read by psycopg's JSON loaders (orjson's, when
    installed), whatever loaders a connect callable's connection had: the
    worker's statements then need no check of their own (proto.Call.json).
    """
    if not settings.prepared_statements:
        conn.prepare_threshold = None
    use_bigints_dumper(conn.adapters)
    if orjson is not None:
        set_json_loads(json_loads, conn)
    elif json_loaders_needed(conn.adapters):
        use_json_loaders(conn.adapters)


def _adoptable(conn: object, kind: type[Any], callable_kind: str) -> None:
    if not isinstance(conn, kind):
        raise ConfigurationError(
            f"connect must return a new psycopg.{kind.__name__} ({callable_kind}), got {type(conn).__name__}"
        )


def adopt(conn: psycopg.Connection[Any], role: str, settings: WorkerSettings) -> None:
    """Make a connection a connect callable returned the worker's (see the module docstring)."""
    _adoptable(conn, psycopg.Connection, "a plain callable")
    if not conn.autocommit:
        conn.rollback()  # nothing to undo in a new connection, unless the callable ran a statement
        conn.autocommit = True
    conn.execute(query("set_application_name"), {"name": app_name(role, settings)})
    configure(conn, settings)


async def adopt_async(conn: psycopg.AsyncConnection[Any], role: str, settings: WorkerSettings) -> None:
    """adopt, for an AsyncWorker's connect callable (an async one)."""
    _adoptable(conn, psycopg.AsyncConnection, "an async callable")
    if not conn.autocommit:
        await conn.rollback()
        await conn.set_autocommit(True)
    await conn.execute(query("set_application_name"), {"name": app_name(role, settings)})
    configure(conn, settings)
