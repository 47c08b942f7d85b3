"""pgjobq version: the versions of this client, of pgjobq in a database, and of its PostgreSQL server."""

from __future__ import annotations

import json
from typing import Any

import click
import psycopg

from pgjobq._cli.common import dsn_option, json_option
from pgjobq._errors import first_line
from pgjobq._install.check import NO_PGJOBQ, advice
from pgjobq._install.plain import Installed, installed_version
from pgjobq._version import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS

__all__ = ["version"]

# How each kind of install is named on the extension's line.
_MODES = {"extension": "CREATE EXTENSION", "plain": "plain-SQL install"}
_NONE = f"none in this database ({NO_PGJOBQ})"


@click.command()
@dsn_option
@json_option
def version(dsn: str, as_json: bool) -> None:
    """Print the versions of this client, of pgjobq in the database, and of the PostgreSQL server.

    One line each: the client (pgjobq-py) and the extension versions it supports; pgjobq in
    the database, installed by CREATE EXTENSION or as plain SQL (pgjobq sql install), or
    none, and whether this client supports it; the server (server_version and
    server_version_num).  With --json, one object with the keys client, extension (null:
    none installed) and server.  When the database cannot be reached or read, only the
    client is printed, then one line on stderr naming what failed (exit 1).  pgjobq --version
    prints the client's version alone, without a database.
    """  # fmt: skip
    report: dict[str, Any] = {
        "client": {
            "name": "pgjobq-py",
            "version": PACKAGE_VERSION,
            "supported_extension_versions": list(SUPPORTED_EXTENSION_VERSIONS),
        }
    }
    failure: str | None = None
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            try:
                report["extension"] = _extension(installed_version(conn))
                report["server"] = {
                    "version": conn.info.parameter_status("server_version") or "unknown",
                    "version_num": conn.info.server_version,
                }
            except psycopg.Error as exc:
                failure = f"cannot read the versions in the database: {first_line(exc)}"
    except psycopg.Error as exc:
        failure = f"cannot connect to the database: {first_line(exc)}"
    if failure is not None:
        report = {"client": report["client"]}  # only what was read whole
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        click.echo("\n".join(_lines(report)))
    if failure is not None:
        raise click.ClickException(failure)


def _extension(installed: Installed | None) -> dict[str, Any] | None:
    """What the database has (None: no pgjobq), and whether this client supports it."""
    if installed is None:
        return None
    return {
        "version": installed.version,
        "mode": installed.mode,
        "supported": installed.version in SUPPORTED_EXTENSION_VERSIONS,
    }


def _lines(report: dict[str, Any]) -> list[str]:
    """The report as text: one "name: ..." line per part read."""
    client = report["client"]
    supported = " or ".join(client["supported_extension_versions"])
    lines = [f"client: pgjobq-py {client['version']} (supports the pgjobq extension {supported})"]
    if "extension" in report:
        lines.append(f"extension: {_extension_text(report['extension'])}")
    if "server" in report:
        server = report["server"]
        lines.append(f"server: PostgreSQL {server['version']}, server_version_num {server['version_num']}")
    return lines


def _extension_text(extension: dict[str, Any] | None) -> str:
    if extension is None:
        return _NONE
    found = f"pgjobq {extension['version']} ({_MODES[extension['mode']]})"
    if extension["supported"]:
        return f"{found}, supported by this client"
    what_to_do = advice(Installed(extension["version"], extension["mode"]))
    return f"{found}, not supported by this client: {what_to_do}"
