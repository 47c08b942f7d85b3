"""pgjobq's web dashboard (the ``web`` extra): queues, jobs, schedules, and optional actions.

An ASGI app on Starlette with Jinja2 templates, served by uvicorn::

    from pgjobq.dashboard import serve
    serve("dbname=app", host="127.0.0.1", port=8080, allow_actions=False, user=None, password=None,
          no_auth=False)

or ``pgjobq dashboard --dsn DSN``.  Read-only unless started with
``allow_actions`` and connected as a role with pgjobq's admin level; bound to
127.0.0.1 by default, and refusing any other address without a user and
password (Basic auth) unless ``no_auth``.  :func:`create_app` returns the app
itself, to mount in another ASGI application or to serve otherwise.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Sequence
from types import FrameType

from pgjobq.dashboard._app import create_app
from pgjobq.dashboard._security import check_bind

__all__ = ["create_app", "serve"]


def serve(
    dsn: str,
    host: str,
    port: int,
    allow_actions: bool,
    user: str | None,
    password: str | None,
    no_auth: bool,
    *,
    statement_timeout: float = 5.0,
    sample_seconds: float = 5.0,
    trusted_hosts: Sequence[str] = (),
    log_level: str = "info",
) -> None:
    """Serve the dashboard on host:port until SIGINT or SIGTERM, then return after a graceful shutdown.

    Raises pgjobq.ConfigurationError, before listening, for a host that is not a loopback address
    without user and password (unless no_auth), a user without a password or the other way round,
    or a port outside 1..65535.  statement_timeout: the seconds any of its queries may take;
    sample_seconds: how often the charts are sampled; trusted_hosts: Host names answered besides
    the loopback ones, when served on a loopback address behind a reverse proxy.
    """
    import uvicorn  # the web extra; imported here so that `import pgjobq.dashboard` stays light

    from pgjobq._errors import ConfigurationError, Error

    check_bind(host, user, password, no_auth)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigurationError(f"port must be between 1 and 65535, got {port!r}")
    _check_database(dsn)
    app = create_app(
        dsn,
        allow_actions=allow_actions,
        user=user,
        password=password,
        host=host,
        statement_timeout=statement_timeout,
        sample_seconds=sample_seconds,
        trusted_hosts=trusted_hosts,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    with _listen(host, port) as sock:
        if threading.current_thread() is not threading.main_thread():
            server.run(sockets=[sock])
            return
        # uvicorn shuts down gracefully on SIGINT and SIGTERM, then raises the signal again under the
        # handlers it found: with these, that second delivery is absorbed and serve() returns
        found = {sig: signal.signal(sig, _absorb) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run(sockets=[sock])
        finally:
            for sig, handler in found.items():
                signal.signal(sig, handler)
    if not server.started:
        raise Error(f"the dashboard could not start on {host}:{port} (see the log above)")


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (uvicorn listens on it); pgjobq.Error saying why when it cannot be."""
    from pgjobq._errors import Error

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise Error(f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise Error(f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def _check_database(dsn: str) -> None:
    """pgjobq.Error, with the reason in one line, unless dsn reaches a database with pgjobq."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pgjobq._errors import Error, IncompatibleExtension
    from pgjobq.dashboard._queries import query

    try:
        bounded = (
            dsn if "connect_timeout" in conninfo_to_dict(dsn) else make_conninfo(dsn, connect_timeout=10)
        )
        with psycopg.connect(bounded, autocommit=True) as conn:
            row = conn.execute(query("who")).fetchone()
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise Error(f"the dashboard cannot reach its database: {lines[0]}") from exc
    if row is None or row[1] is None:
        raise IncompatibleExtension(
            "the dashboard's database has no pgjobq extension (CREATE EXTENSION pgjobq)"
        )


def _absorb(signum: int, frame: FrameType | None) -> None:
    """A signal handler that does nothing (see serve)."""
