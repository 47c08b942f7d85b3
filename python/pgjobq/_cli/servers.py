"""The servers of the optional extras: pgjobq metrics (Prometheus) and pgjobq dashboard (the web pages)."""

from __future__ import annotations

import contextlib

import click

from pgjobq._cli.common import dsn_option, extra, needs_extra, one_line_errors, option, until_interrupted

__all__ = ["dashboard", "metrics"]


@click.command()
@dsn_option
@option(
    "--port", "Port of the /metrics endpoint.", prefix="METRICS_", type=click.IntRange(1, 65535), default=9464
)
@option("--host", "Address to listen on.", prefix="METRICS_", default="127.0.0.1")
def metrics(dsn: str, port: int, host: str) -> None:
    """Serve the queues' state (jobq.metrics) as Prometheus metrics until SIGINT/SIGTERM.

    Needs the metrics extra.  Each worker started with --metrics-port serves its own
    counters (and, with its database, the same queue state).
    """  # fmt: skip
    prometheus = extra("pgjobq.prometheus", "metrics", "pgjobq metrics")
    # no check of the database first: an exporter starts anyway, and says pgjobq_database_up 0
    with one_line_errors(), until_interrupted() as stop:
        prometheus.serve_database_metrics(dsn, port, host, stop=stop)


@click.command()
@dsn_option
@option(
    "--host",
    "Address to listen on; any but a loopback one needs --user and --password (or --no-auth).",
    prefix="DASHBOARD_",
    default="127.0.0.1",
)
@option("--port", "Port to listen on.", prefix="DASHBOARD_", type=click.IntRange(1, 65535), default=8080)
@option(
    "--allow-actions",
    "Offer retry, cancel, pause, resume and purge (the role needs pgjobq's admin level) "
    "[default: read-only].",
    prefix="DASHBOARD_",
    is_flag=True,
)
@option(
    "--user",
    "User name for HTTP Basic authentication (with --password).",
    prefix="DASHBOARD_",
    default=None,
)
@option(
    "--password",
    "Password for HTTP Basic authentication (better given in the variable than on the command line).",
    prefix="DASHBOARD_",
    default=None,
)
@option(
    "--no-auth",
    "Serve a non-loopback address without authentication (behind a proxy that authenticates).",
    prefix="DASHBOARD_",
    is_flag=True,
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
    web = extra("pgjobq.dashboard", "web", "pgjobq dashboard")
    with (
        needs_extra("web", "pgjobq dashboard"),  # uvicorn is imported when serving starts
        one_line_errors(),
        contextlib.suppress(KeyboardInterrupt),
    ):
        web.serve(dsn, host, port, allow_actions, user, password, no_auth)
