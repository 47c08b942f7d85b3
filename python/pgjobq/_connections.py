"""The connections a worker opens for itself: their settings, shared by Worker and AsyncWorker.

Each worker opens two autocommit connections, the work connection and the
listening one, named ``pgjobq <role> <worker name>`` (application_name).
``prepared_statements=False`` stops psycopg from preparing statements
(PgBouncer in transaction mode before 1.21).  With orjson installed, JSON
columns are parsed by it where it reads them as json does.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads

from pgjobq._settings import WorkerSettings

__all__ = ["app_name", "configure", "ignore_notify", "json_loads"]

try:  # optional: parses the worker's payloads in a tenth of json's time
    import orjson
except ImportError:  # json then
    orjson = None  # type: ignore[assignment]

_LONG_NUMBER = re.compile(rb"[0-9][0-9.]{17}").search


def json_loads(data: str | bytes) -> Any:
    """A payload as json.loads reads it, by orjson (when installed) where it reads the same.

    orjson reads an integer beyond 64 bits as a float, where json keeps it
    exact.  jsonb prints every number in full (1e300 as 301 digits), so a
    payload with a run of 18 or more digits and dots goes to json.  A
    module-level function, not a closure: psycopg caches its loaders by it.
    """
    if isinstance(data, bytes) and _LONG_NUMBER(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def ignore_notify(notify: psycopg.Notify) -> None:
    """A notification handler that drops what it gets (behind a transaction-pooling PgBouncer a LISTEN
    left on a shared server connection can deliver notifications to the work connection)."""


def app_name(role: str, settings: WorkerSettings) -> str:
    return f"pgjobq {role} {settings.name}"[:63]


def configure(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], settings: WorkerSettings) -> None:
    """Set up a connection the worker just opened (sync or async)."""
    if not settings.prepared_statements:
        conn.prepare_threshold = None
    if orjson is not None:
        set_json_loads(json_loads, conn)
