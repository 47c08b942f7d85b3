"""jobq.version(): the installed version of the extension, for clients that check what they talk to."""

from __future__ import annotations

from helpers.sqlhelpers import Db, scalar


def test_version_is_the_extversion_recorded_in_pg_extension(db: Db) -> None:
    version = scalar(db, "SELECT jobq.version()")

    assert version == scalar(db, "SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'")


def test_version_is_the_default_version_of_the_installed_extension_files(db: Db) -> None:
    version = scalar(db, "SELECT jobq.version()")

    assert version == scalar(db, "SELECT default_version FROM pg_available_extensions WHERE name = 'pgjobq'")
