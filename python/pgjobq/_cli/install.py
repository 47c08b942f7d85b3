"""pgjobq sql install, upgrade and pgtle: SQL that installs pgjobq without the extension's files."""

from __future__ import annotations

import click
import psycopg

from pgjobq._cli.common import dsn_option, one_line_errors, option
from pgjobq._install import plain

__all__ = ["sql_group"]


@click.group("sql")
def sql_group() -> None:
    """Print SQL that installs or upgrades pgjobq without the extension's files (managed PostgreSQL).

    Only SQL goes to stdout, the same for the same pgjobq-py: pipe it to
    `psql -v ON_ERROR_STOP=1` run by the database's owner, or keep it in a migration.
    """


_owner_option = option(
    "--owner",
    "Run as this role (SET LOCAL ROLE; the role running psql must be a member), so that it "
    "owns every object [default: the role running psql].",
    prefix="SQL_",
    default=None,
    metavar="ROLE",
)


@sql_group.command("install")
@option(
    "--to",
    "The version to install [default: the newest this pgjobq-py has].",
    name="to_",
    prefix="SQL_",
    default=None,
    metavar="VERSION",
)
@_owner_option
def sql_install(to_: str | None, owner: str | None) -> None:
    """A plain-SQL install of pgjobq in one transaction, recording its version for jobq.version()."""
    with one_line_errors():
        click.echo(plain.install_script(to_, owner=owner), nl=False)


@sql_group.command("upgrade")
@dsn_option
@option(
    "--from",
    "The installed version [default: read it from the database at --dsn].",
    name="from_",  # "from" is Python's
    prefix="SQL_",
    default=None,
    metavar="VERSION",
)
@option(
    "--to",
    "The version to upgrade to [default: the newest this pgjobq-py has].",
    name="to_",
    prefix="SQL_",
    default=None,
    metavar="VERSION",
)
@_owner_option
def sql_upgrade(dsn: str, from_: str | None, to_: str | None, owner: str | None) -> None:
    """The steps from the installed version of a plain-SQL install to --to, in one transaction.

    Prints nothing (and says so on stderr) when the database is already there;
    refuses an install made with CREATE EXTENSION (ALTER EXTENSION pgjobq UPDATE
    upgrades that one).
    """  # fmt: skip
    with one_line_errors():
        target = to_ or plain.current_version()
        source = from_
        if source is None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                installed = plain.installed_version(conn)
            if installed is None:
                raise click.ClickException(
                    "this database has no pgjobq: pgjobq sql install | psql installs it"
                )
            if installed.mode == "extension":
                raise click.ClickException(
                    f"pgjobq {installed.version} is installed here as an extension: "
                    "upgrade it with ALTER EXTENSION pgjobq UPDATE"
                )
            source = installed.version
        if source == target:
            click.echo(f"pgjobq is at {target} already: nothing to upgrade", err=True)
            return
        click.echo(plain.upgrade_script(source, target, owner=owner), nl=False)


@sql_group.command("pgtle")
def sql_pgtle() -> None:
    """A pg_tle registration of pgjobq (every version and step); then CREATE EXTENSION pgjobq.

    Run it as a member of pgtle_admin, in a database with pg_tle.
    """  # fmt: skip
    with one_line_errors():
        click.echo(plain.pgtle_script(), nl=False)
