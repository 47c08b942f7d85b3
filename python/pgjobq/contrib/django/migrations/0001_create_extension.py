"""Installs the pgjobq extension in the database (see pgjobq.contrib.django.operations)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations

from pgjobq.contrib.django.operations import CreateExtension


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [CreateExtension()]
