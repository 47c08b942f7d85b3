"""Settings of the test project; the database is the one DJANGOAPP_DSN names (a libpq string)."""

from __future__ import annotations

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict

__all__ = ["DATABASES", "settings_for"]


def databases(dsn: str) -> dict[str, dict[str, Any]]:
    """DATABASES for the libpq connection string dsn."""
    params = conninfo_to_dict(dsn)
    return {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": params.get("dbname", ""),
            "USER": params.get("user", ""),
            "HOST": params.get("host", ""),
            "PORT": str(params.get("port", "")),
        }
    }


SECRET_KEY = "pgjobq tests only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["pgjobq.contrib.django", "frameworks.djangoapp.shop"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "frameworks.djangoapp.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = databases(os.environ.get("DJANGOAPP_DSN", ""))
LOGGING_CONFIG = None  # the worker's own logging.basicConfig stays in charge


def settings_for(dsn: str) -> dict[str, Any]:
    """This module's settings, with DATABASES for dsn: for django.conf.settings.configure()."""
    values = {name: value for name, value in globals().items() if name.isupper()}
    return {**values, "DATABASES": databases(dsn)}
