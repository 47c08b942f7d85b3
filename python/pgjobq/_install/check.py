"""The versions of the pgjobq extension this package works with, and the check of a database against them."""

from __future__ import annotations

from typing import Any

import psycopg

from pgjobq._errors import IncompatibleExtension
from pgjobq._install.plain import Installed, installed_version
from pgjobq._version import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS

__all__ = [
    "NO_PGJOBQ",
    "PACKAGE_VERSION",
    "SUPPORTED_EXTENSION_VERSIONS",
    "advice",
    "check_extension",
    "extension_version",
]

# How to put pgjobq into a database that has none.
NO_PGJOBQ = "CREATE EXTENSION pgjobq; without the extension's files: pgjobq sql install | psql"


def extension_version(conn: psycopg.Connection[Any]) -> str | None:
    """The version of pgjobq installed in conn's database (as the extension, or as plain SQL), or None."""
    installed = installed_version(conn)
    return None if installed is None else installed.version


def check_extension(conn: psycopg.Connection[Any]) -> str:
    """The installed extension version, if this package supports it; IncompatibleExtension otherwise."""
    return check_installed(installed_version(conn))


def check_installed(installed: Installed | None) -> str:
    """check_extension's verdict on what a database has (pgjobq.aio.check_extension shares it)."""
    found = None if installed is None else installed.version
    if found in SUPPORTED_EXTENSION_VERSIONS:
        assert found is not None
        return found
    supported = " or ".join(SUPPORTED_EXTENSION_VERSIONS)
    if installed is None:
        raise IncompatibleExtension(
            f"pgjobq-py {PACKAGE_VERSION} needs the pgjobq extension {supported}, but this database has none "
            f"({NO_PGJOBQ})"
        )
    raise IncompatibleExtension(
        f"pgjobq-py {PACKAGE_VERSION} supports the pgjobq extension {supported}, but this database has "
        f"{installed.version} ({advice(installed)})"
    )


def advice(installed: Installed) -> str:
    """What to do about a version of pgjobq this package does not support: upgrade it, when it is older than
    every supported one, else use a pgjobq-py that supports it."""
    if not _older(installed.version):
        return f"use a pgjobq-py that supports {installed.version}"
    return "ALTER EXTENSION pgjobq UPDATE" if installed.mode == "extension" else "pgjobq sql upgrade | psql"


def _older(version: str) -> bool:
    """Whether version comes before every supported one (an upgrade of the extension would help)."""

    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    try:
        return numbers(version) < min(numbers(v) for v in SUPPORTED_EXTENSION_VERSIONS)
    except ValueError:
        return False
