"""pgjobq for Django: enqueue on Django's own connection, run workers from manage.py.

Add the app to INSTALLED_APPS; its migration installs the extension
(``CREATE EXTENSION pgjobq``, see :mod:`pgjobq.contrib.django.operations`)::

    INSTALLED_APPS = [..., "pgjobq.contrib.django"]

Enqueue in the same transaction as the application's writes: a job
enqueued inside ``transaction.atomic()`` commits with the rows written
there, and a rollback drops it::

    from django.db import transaction
    from pgjobq.contrib import django as jobs

    with transaction.atomic():
        order = Order.objects.create(item="book")
        jobs.enqueue("orders", {"order": order.pk})

Not ``transaction.on_commit``: that enqueues after the commit, in another
transaction, so a crash in between loses the job.  (Keep on_commit for a
queue that lives in another database than the rows.)  Outside an atomic
block Django runs in autocommit, and the enqueue commits at once.

Run handlers with ``manage.py pgjobq_worker MODULE:FUNCTION --queue orders``:
the worker connects with the database settings of ``--database`` (default
"default") on connections of its own (Django's cannot LISTEN for it), and
closes the handler's stale Django connections before and after each job,
as Django does around a request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import psycopg
from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from psycopg.pq import Conninfo

import pgjobq
from pgjobq import ConfigurationError, Job

__all__ = [
    "aenqueue",
    "close_old_connections_around",
    "connection",
    "conninfo",
    "enqueue",
    "enqueue_many",
]

R = TypeVar("R")


def connection(using: str = DEFAULT_DB_ALIAS) -> psycopg.Connection[Any]:
    """The psycopg connection under Django's connection ``using``, in its current transaction.

    Any pgjobq call takes it: ``pgjobq.job(connection(), job_id)``.  Django
    connects first if it has not yet.  ConfigurationError unless the alias
    is a PostgreSQL database on psycopg 3 (Django's psycopg2 backend cannot
    be used: pgjobq speaks psycopg 3).
    """
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(f"database {using!r} is not PostgreSQL (its vendor is {wrapper.vendor!r})")
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigurationError(
            f"database {using!r} runs on {type(raw).__module__}, not psycopg 3: install psycopg "
            "(Django uses it in preference to psycopg2)"
        )
    return raw


def enqueue(
    queue: str, payload: Mapping[str, Any], *, using: str = DEFAULT_DB_ALIAS, **options: Any
) -> int | None:
    """pgjobq.enqueue on Django's connection ``using``: inside ``transaction.atomic()`` the job
    commits or rolls back with the block; options are pgjobq.enqueue's (priority, run_at,
    unique_key, ...).

    A pgjobq error inside an atomic block leaves its transaction aborted,
    as a database error of the ORM does: to carry on after one, wrap the
    enqueue in an inner ``atomic()`` (a savepoint).
    """
    job_id: int | None = pgjobq.enqueue(connection(using), queue, payload, **options)
    return job_id


def enqueue_many(
    queue: str, payloads: Iterable[Mapping[str, Any]], *, using: str = DEFAULT_DB_ALIAS, **options: Any
) -> list[int]:
    """pgjobq.enqueue_many on Django's connection ``using`` (see enqueue)."""
    return pgjobq.enqueue_many(connection(using), queue, payloads, **options)


async def aenqueue(
    queue: str, payload: Mapping[str, Any], *, using: str = DEFAULT_DB_ALIAS, **options: Any
) -> int | None:
    """enqueue from async code, through asgiref's sync_to_async as Django's own async ORM calls go.

    It runs on its own in autocommit: an async view that writes rows and
    enqueues atomically puts both, with the atomic block, in one sync
    function and calls that through ``sync_to_async``.
    """
    job_id: int | None = await sync_to_async(enqueue)(queue, payload, using=using, **options)
    return job_id


def conninfo(using: str = DEFAULT_DB_ALIAS) -> str:
    """A libpq connection string for Django's database ``using``, from its settings (NAME, USER,
    PASSWORD, HOST, PORT and the libpq keywords among OPTIONS): for the worker, which opens
    connections of its own."""
    params = connections[using].get_connection_params()
    keywords = {option.keyword.decode() for option in Conninfo.get_defaults()}
    return psycopg.conninfo.make_conninfo(
        "", **{key: value for key, value in params.items() if key in keywords and value is not None}
    )


def close_old_connections_around(handler: Callable[[Job], R]) -> Callable[[Job], R]:
    """handler, closing the Django connections that are stale (CONN_MAX_AGE passed, or broken)
    before and after each job, as Django does around each request; manage.py pgjobq_worker
    wraps its handler so."""

    @functools.wraps(handler)
    def run(job: Job) -> R:
        close_old_connections()
        try:
            return handler(job)
        finally:
            close_old_connections()

    return run
