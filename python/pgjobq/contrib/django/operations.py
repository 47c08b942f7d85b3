"""A migration operation that installs pgjobq: ``CREATE EXTENSION pgjobq``, unless it is there.

The app's own migration (``pgjobq.0001_create_extension``) runs it; a
project's migration that needs the queue (a trigger calling jobq.enqueue, a
foreign key to jobq.jobs) depends on that migration::

    dependencies = [("pgjobq", "0001_create_extension")]

Unlike django.contrib.postgres's CreateExtension, it also counts a plain-SQL
install (``pgjobq sql install``, for a managed PostgreSQL without the
extension's files) as installed: it looks for the schema jobq as well as the
extension.  Reversed (``migrate pgjobq zero``), it drops the extension, and
with it every job.  Upgrades stay ``ALTER EXTENSION pgjobq UPDATE`` (or
``pgjobq sql upgrade``), run by whoever upgrades the package.
"""

from __future__ import annotations

from typing import Any

from django.db import router
from django.db.migrations.operations.base import Operation

from pgjobq._queries import statements

__all__ = ["CreateExtension"]


def _statement(name: str) -> str:
    """The statement called name in this package's queries.sql."""
    return statements(__package__, "queries.sql")[name]


class CreateExtension(Operation):
    """Install pgjobq (CREATE EXTENSION) in the migration's database, unless it is installed."""

    reversible = True

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no model state: the extension's tables are not Django models

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if self._applies(app_label, schema_editor) and not self._installed(schema_editor):
            schema_editor.execute(_statement("create_extension"))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if self._applies(app_label, schema_editor):
            schema_editor.execute(_statement("drop_extension"))

    def describe(self) -> str:
        return "Install the pgjobq extension"

    @property
    def migration_name_fragment(self) -> str:
        return "create_extension"

    @staticmethod
    def _applies(app_label: str, schema_editor: Any) -> bool:
        connection = schema_editor.connection
        return connection.vendor == "postgresql" and bool(router.allow_migrate(connection.alias, app_label))

    @staticmethod
    def _installed(schema_editor: Any) -> bool:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(_statement("installed"))
            row = cursor.fetchone()
        return bool(row[0])
