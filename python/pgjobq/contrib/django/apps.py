"""The Django app "pgjobq": its migration installs the extension; it brings manage.py pgjobq_worker."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["PgjobqConfig"]


class PgjobqConfig(AppConfig):
    name = "pgjobq.contrib.django"
    label = "pgjobq"  # the module's last part, "django", would read as Django's own
    verbose_name = "pgjobq"
