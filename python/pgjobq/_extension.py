"""The versions of the pgjobq extension this package works with, and the check of a database against them."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgjobq._errors import IncompatibleExtension
from pgjobq._queries import query

__all__ = ["PACKAGE_VERSION", "SUPPORTED_EXTENSION_VERSIONS", "check_extension", "extension_version"]

# The extension versions whose SQL functions this package calls, as they are
# in those versions.  A new extension version is added here once the client
# has been tested against it.
SUPPORTED_EXTENSION_VERSIONS: tuple[str, ...] = ("0.7.0",)

try:
    PACKAGE_VERSION = metadata.version("pgjobq-py")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    PACKAGE_VERSION = "0+unknown"


def extension_version(conn: psycopg.Connection[Any]) -> str | None:
    """The version of pgjobq installed in conn's database, or None when it has none."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query("extension_version")).fetchone()
    return None if row is None else str(row[0])


def check_extension(conn: psycopg.Connection[Any]) -> str:
    """The installed extension version, if this package supports it; IncompatibleExtension otherwise."""
    found = extension_version(conn)
    if found in SUPPORTED_EXTENSION_VERSIONS:
        assert found is not None
        return found
    supported = " or ".join(SUPPORTED_EXTENSION_VERSIONS)
    if found is None:
        raise IncompatibleExtension(
            f"pgjobq-py {PACKAGE_VERSION} needs the pgjobq extension {supported}, but this database has none "
            "(CREATE EXTENSION pgjobq)"
        )
    advice = "ALTER EXTENSION pgjobq UPDATE" if _older(found) else f"use a pgjobq-py that supports {found}"
    raise IncompatibleExtension(
        f"pgjobq-py {PACKAGE_VERSION} supports the pgjobq extension {supported}, but this database has "
        f"{found} ({advice})"
    )


def _older(version: str) -> bool:
    """Whether version comes before every supported one (an upgrade of the extension would help)."""

    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    try:
        return numbers(version) < min(numbers(v) for v in SUPPORTED_EXTENSION_VERSIONS)
    except ValueError:
        return False
