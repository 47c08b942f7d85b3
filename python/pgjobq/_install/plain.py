"""Plain-SQL and pg_tle installs of the pgjobq extension, made from the extension's own scripts.

Where only SQL can be run (a managed PostgreSQL: no extension files, no
superuser), ``pgjobq sql install | psql`` installs pgjobq as plain objects and
``pgjobq sql upgrade | psql`` upgrades them; ``pgjobq sql pgtle`` registers the
same scripts with pg_tle instead.  The scripts are those of the extension,
shipped in this package (``pgjobq/sql`` is a link to the repository's ``sql/``,
whose files a wheel copies): ``pgjobq--0.1.0.sql`` and every released step
``pgjobq--A--B.sql`` (``updates/``), and the current version's full script,
put together from ``src/`` by ``build`` as ``make build`` does (the current version
is the newest step's).
Each becomes a *part* the same way: its ``\\echo ... \\quit`` guard line goes,
``@extowner@`` becomes ``CURRENT_USER`` and each ``pg_extension_config_dump``
call runs only inside ``CREATE EXTENSION`` (pg_tle's).  A plain script is its
parts in one transaction, with checks first and the version recorded last in
``jobq.plain_install``, which ``jobq.version()`` reads when ``pg_extension``
has no pgjobq.  Nothing here talks to a database except ``installed_version``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.rows import tuple_row

from pgjobq._errors import InvalidArgument
from pgjobq._install import build
from pgjobq._queries import query
from pgjobq._version import PACKAGE_VERSION

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11's; annotations are not evaluated at run time
    from importlib.resources.abc import Traversable

__all__ = [
    "Installed",
    "Part",
    "current_version",
    "install_parts",
    "install_script",
    "installed_version",
    "parse_version",
    "pgtle_script",
    "released_versions",
    "upgrade_parts",
    "upgrade_script",
]

# The first version whose own scripts create jobq.plain_install; a plain install
# of an older one (a test of the upgrade path) gets it from the current script.
RECORDED_SINCE = "0.8.0"

_NAME = re.compile(r"^pgjobq--(\d+\.\d+\.\d+)(?:--(\d+\.\d+\.\d+))?\.sql$")
# the guard line, with the comment that explains it when there is one
_GUARD = re.compile(r"^(?:-- complain if script is sourced in psql.*\n)?\\echo .*$\n?", re.MULTILINE)
_CONFIG_DUMP = re.compile(
    r"^SELECT pg_catalog\.pg_extension_config_dump\(('[^']*', '[^']*')\);$", re.MULTILINE
)
# Between the lines of this string the generator writes pgjobq's parts into pg_tle's calls.
PGTLE_QUOTE = "$_pgtle_$"
_RECORD = re.compile(
    r"^CREATE TABLE jobq\.plain_install \(.*?^REVOKE ALL ON TABLE jobq\.plain_install FROM PUBLIC;$\n",
    re.MULTILINE | re.DOTALL,
)


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.8.0' -> (0, 8, 0); InvalidArgument for anything else."""
    found = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        raise InvalidArgument(f"a pgjobq version is three numbers such as 0.8.0, got {text!r}")
    major, minor, patch = (int(n) for n in found.groups())
    return major, minor, patch


@dataclass(frozen=True)
class Part:
    """One script of the extension as plain SQL: its file name, the versions it goes between, its text.

    ``source`` is None for a full install script (``pgjobq--0.8.0.sql``).
    """

    name: str
    source: str | None
    target: str
    sql: str


@dataclass(frozen=True)
class Installed:
    """What a database has: a pgjobq version, and how it was installed."""

    version: str
    mode: Literal["extension", "plain"]


def _scripts() -> Traversable:
    return resources.files("pgjobq").joinpath("sql")


@dataclass(frozen=True)
class _Script:
    """One script: a released file of updates/, or the current version's, built from src/."""

    name: str
    text: str


@functools.cache
def _files() -> dict[tuple[str | None, str], _Script]:
    """The shipped scripts by (from version or None, to version)."""
    found: dict[tuple[str | None, str], _Script] = {}
    for entry in _scripts().joinpath("updates").iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        first, second = match.groups()
        found[(None, first) if second is None else (first, second)] = _Script(
            entry.name, entry.read_text(encoding="utf-8")
        )
    if not found:
        raise InvalidArgument("this pgjobq-py has no SQL scripts (pgjobq/sql): reinstall it")
    current = max((target for _, target in found), key=parse_version)
    if (None, current) not in found:
        found[(None, current)] = _built(current)
    return found


def _built(version: str) -> _Script:
    """The current version's full script, built from src/ as make build builds it (build.script)."""
    try:
        sources = build.read_sources(_scripts().joinpath("src"))
    except FileNotFoundError:
        raise InvalidArgument("this pgjobq-py has no SQL sources (pgjobq/sql/src): reinstall it") from None
    return _Script(build.script_name(version), build.script(version, sources))


def current_version() -> str:
    """The version this package installs: that of its newest full install script."""
    return max((target for source, target in _files() if source is None), key=parse_version)


def released_versions() -> list[str]:
    """Every version a plain install can be made at or upgraded from, oldest first."""
    versions = {v for pair in _files() for v in pair if v is not None}
    return sorted(versions, key=parse_version)


def _steps(source: str, target: str) -> list[tuple[str, str]]:
    """The chain of steps from source to target (one step per version, as the extension has them)."""
    files = _files()
    steps: list[tuple[str, str]] = []
    version = source
    while version != target:
        following = [b for (a, b) in files if a == version and parse_version(b) <= parse_version(target)]
        if not following:
            raise InvalidArgument(
                f"no upgrade step of pgjobq from {version} towards {target} in this pgjobq-py "
                f"(it knows {', '.join(released_versions())})"
            )
        step = (version, max(following, key=parse_version))
        steps.append(step)
        version = step[1]
    return steps


def _part(source: str | None, target: str) -> Part:
    script = _files()[(source, target)]
    return Part(script.name, source, target, plain(script.text, script.name))


def plain(script: str, name: str) -> str:
    """An extension script as plain SQL: no psql guard line, the owner as CURRENT_USER, its
    pg_extension_config_dump calls made only when run by CREATE EXTENSION (pg_tle's)."""
    text, guards = _GUARD.subn("", script)
    text = text.replace("@extowner@", "CURRENT_USER")
    text, dumps = _CONFIG_DUMP.subn(
        lambda m: (
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgjobq') THEN "
            f"PERFORM pg_catalog.pg_extension_config_dump({m.group(1)}); END IF; END $$;"
        ),
        text,
    )
    leftovers = [
        problem
        for problem, present in (
            ("a psql guard line", guards != 1),
            ("an unguarded pg_extension_config_dump", text.count("pg_extension_config_dump(") != dumps),
            ("@extschema@", "@extschema" in text),
            (PGTLE_QUOTE, PGTLE_QUOTE in text),
            ("a psql meta-command", re.search(r"^\\", text, re.MULTILINE) is not None),
        )
        if present
    ]
    if leftovers:  # a script of this package that the generator cannot translate: a bug, said plainly
        raise InvalidArgument(f"{name} cannot be made plain SQL: {', '.join(leftovers)}")
    return text


def install_parts(version: str | None = None) -> list[Part]:
    """The parts of a fresh install at version (default: the current one), as CREATE EXTENSION runs them.

    The current version has its own full script; an older one is the first
    release's script followed by the steps up to it.
    """
    target = version or current_version()
    parse_version(target)
    files = _files()
    if (None, target) in files:
        return [_part(None, target)]
    first = min((t for s, t in files if s is None), key=parse_version)
    if parse_version(target) < parse_version(first) or target not in released_versions():
        raise InvalidArgument(
            f"unknown pgjobq version {target} (this pgjobq-py knows {', '.join(released_versions())})"
        )
    return [_part(None, first), *(_part(a, b) for a, b in _steps(first, target))]


def upgrade_parts(source: str, target: str | None = None) -> list[Part]:
    """The steps from source to target (default: the current version), as ALTER EXTENSION runs them."""
    goal = target or current_version()
    if parse_version(source) >= parse_version(goal):
        raise InvalidArgument(f"pgjobq {source} is already at or past {goal}: nothing to upgrade")
    return [_part(a, b) for a, b in _steps(source, goal)]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _header(what: str, owner: str | None) -> list[str]:
    return [
        f"-- {what}",
        f"-- Made by pgjobq-py {PACKAGE_VERSION} from the extension's own scripts.  Run it with psql as the",
        "-- database's owner (no superuser, no extension files needed), stopping at the first error:",
        '--   pgjobq sql ... | psql -v ON_ERROR_STOP=1 "$DSN"',
        "-- It runs in one transaction: it installs everything or nothing.",
        "",
        "BEGIN;",
        "-- as CREATE EXTENSION runs its scripts: function bodies are checked when called, not when",
        "-- made (a step may replace a function that another's body calls), notices are left out, and",
        "-- no other schema is searched while the objects are made",
        "SET LOCAL check_function_bodies = off;",
        "SET LOCAL client_min_messages = warning;",
        "SET LOCAL search_path = pg_catalog, pg_temp;",
        *([f"SET LOCAL ROLE {_identifier(owner)};"] if owner else []),
    ]


def _body(parts: list[Part]) -> list[str]:
    lines: list[str] = []
    for part in parts:
        lines += ["", f"-- {part.name}", "", part.sql.rstrip("\n")]
    return lines


def install_script(version: str | None = None, *, owner: str | None = None) -> str:
    """A plain-SQL install of version (default: the current one), for psql; records the version.

    owner: a role to install as (SET LOCAL ROLE; the running role must be a
    member of it), so that it owns every object; default: the running role.
    """
    target = version or current_version()
    parts = install_parts(target)
    lines = [
        *_header(f"pgjobq {target}: a plain-SQL install (pgjobq sql install)", owner),
        "DO $$",
        "BEGIN",
        "    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgjobq') THEN",
        "        RAISE EXCEPTION 'pgjobq is installed here as an extension'",
        "            USING HINT = 'Upgrade it with ALTER EXTENSION pgjobq UPDATE.';",
        "    END IF;",
        "    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = 'jobq') THEN",
        "        RAISE EXCEPTION 'schema jobq already exists: pgjobq is installed here, or another program'",
        "                        ' uses that schema'",
        "            USING HINT = 'Upgrade a plain-SQL install with: pgjobq sql upgrade --dsn DSN | psql.';",
        "    END IF;",
        "END",
        "$$;",
        *_body(parts),
    ]
    if parse_version(target) < parse_version(RECORDED_SINCE):
        lines += ["", "-- the record of the version (jobq.plain_install, as pgjobq 0.8.0 defines it)", "",
                  _record_definition().rstrip("\n")]  # fmt: skip
    lines += [
        "",
        "-- the version, for jobq.version() and the clients",
        f"INSERT INTO jobq.plain_install (version) VALUES ({_literal(target)});",
        "",
        "COMMIT;",
        "",
    ]
    return "\n".join(lines)


@functools.cache
def _record_definition() -> str:
    """jobq.plain_install's definition (table, comment, grants), from the current full script."""
    current = _part(None, current_version()).sql
    found = _RECORD.search(current)
    if found is None:
        raise InvalidArgument(f"pgjobq--{current_version()}.sql does not define jobq.plain_install")
    return found.group(0)


def upgrade_script(source: str, target: str | None = None, *, owner: str | None = None) -> str:
    """A plain-SQL upgrade from source to target (default: the current version), for psql.

    It refuses to run (and changes nothing) unless the database has a
    plain-SQL install of pgjobq at exactly source.
    """
    goal = target or current_version()
    parts = upgrade_parts(source, goal)
    lines = [
        *_header(f"pgjobq {source} to {goal}: a plain-SQL upgrade (pgjobq sql upgrade)", owner),
        "DO $$",
        "DECLARE",
        "    found text;",
        "BEGIN",
        "    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgjobq') THEN",
        "        RAISE EXCEPTION 'pgjobq is installed here as an extension, not as plain SQL'",
        "            USING HINT = 'Upgrade it with ALTER EXTENSION pgjobq UPDATE.';",
        "    END IF;",
        "    IF pg_catalog.to_regclass('jobq.plain_install') IS NULL THEN",
        "        RAISE EXCEPTION 'this database has no plain-SQL install of pgjobq'",
        "            USING HINT = 'Install it with: pgjobq sql install | psql.';",
        "    END IF;",
        "    -- locked: a second upgrade run at the same time waits, then finds the new version",
        "    SELECT i.version INTO found FROM jobq.plain_install AS i FOR UPDATE;",
        f"    IF found IS DISTINCT FROM {_literal(source)} THEN",
        f"        RAISE EXCEPTION 'this upgrade starts from pgjobq {source}, but the database has %',",
        "                        coalesce(found, 'no recorded version')",
        "            USING HINT = 'Make it for the installed version: pgjobq sql upgrade --dsn DSN.';",
        "    END IF;",
        "END",
        "$$;",
        *_body(parts),
        "",
        "-- the version, for jobq.version() and the clients",
        f"UPDATE jobq.plain_install SET version = {_literal(goal)};",
        "",
        "COMMIT;",
        "",
    ]
    return "\n".join(lines)


def pgtle_script(description: str | None = None) -> str:
    """A pg_tle registration of pgjobq: every version and step this package has, the current one the default.

    As the extension's files do: the first release's full script, the
    current version's full script, and one update path per step; then
    ``CREATE EXTENSION pgjobq`` works through pg_tle.  Re-running it (for a
    newer pgjobq-py) replaces the registration; an installed pgjobq stays,
    ready for ``ALTER EXTENSION pgjobq UPDATE``.  Needs the pgtle_admin role.
    """
    files = _files()
    current = current_version()
    first = min((t for s, t in files if s is None), key=parse_version)
    comment = description or (
        "Job queue in PostgreSQL: enqueue, claim with SKIP LOCKED, leases, retries, reaping, dead letters"
    )
    lines = [
        f"-- pgjobq {current}: a pg_tle registration (pgjobq sql pgtle)",
        "-- Run it with psql as a member of pgtle_admin, in the database that has pg_tle (CREATE EXTENSION",
        "-- pg_tle); then CREATE EXTENSION pgjobq (or ALTER EXTENSION pgjobq UPDATE).",
        "",
        "BEGIN;",
        "SELECT pgtle.uninstall_extension_if_exists('pgjobq');",
        "",
        f"SELECT pgtle.install_extension('pgjobq', {_literal(first)}, {_literal(comment)}, {PGTLE_QUOTE}",
        _part(None, first).sql.rstrip("\n"),
        f"{PGTLE_QUOTE});",
    ]
    if current != first:
        lines += [
            "",
            f"SELECT pgtle.install_extension_version_sql('pgjobq', {_literal(current)}, {PGTLE_QUOTE}",
            _part(None, current).sql.rstrip("\n"),
            f"{PGTLE_QUOTE});",
        ]
    for source, target in sorted((k for k in files if k[0] is not None), key=lambda k: parse_version(k[1])):
        assert source is not None
        lines += [
            "",
            f"SELECT pgtle.install_update_path('pgjobq', {_literal(source)}, {_literal(target)},"
            f" {PGTLE_QUOTE}",
            _part(source, target).sql.rstrip("\n"),
            f"{PGTLE_QUOTE});",
        ]
    lines += ["", f"SELECT pgtle.set_default_version('pgjobq', {_literal(current)});", "", "COMMIT;", ""]
    return "\n".join(lines)


def installed_version(conn: psycopg.Connection[Any]) -> Installed | None:
    """What pgjobq conn's database has: the extension's version, else a plain install's; None for none."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query("installed_version")).fetchone()
        assert row is not None
        extension, recorded = row
        if extension is not None:
            return Installed(str(extension), "extension")
        if not recorded:
            return None
        plain_row = cur.execute(query("plain_install_version")).fetchone()
    return None if plain_row is None else Installed(str(plain_row[0]), "plain")
