"""pgjobq for SQLAlchemy 2: enqueue in a Session's transaction, on the ``postgresql+psycopg`` dialect.

The job commits or rolls back with the session's own writes::

    from pgjobq.contrib import sqlalchemy as jobs

    with Session(engine) as session, session.begin():
        session.add(order)
        session.flush()
        jobs.enqueue(session, "orders", {"order": order.id})

and with an AsyncSession (``create_async_engine("postgresql+psycopg://...")``)::

    async with AsyncSession(engine) as session, session.begin():
        session.add(order)
        await session.flush()
        await jobs.aenqueue(session, "orders", {"order": order.id})

Both run on the psycopg connection under the session's connection
(SQLAlchemy's driver connection), so every other pgjobq call works there
too: ``pgjobq.job(jobs.driver_connection(session), job_id)``, or
``await pgjobq.aio.job(await jobs.async_driver_connection(session), job_id)``.
Another driver (psycopg2, asyncpg) is refused (ConfigurationError): call the
SQL API through the session instead,
``session.execute(text("SELECT jobq.enqueue(:queue, CAST(:payload AS jsonb))"), ...)``.

AsyncSession needs greenlet (``pip install "sqlalchemy[asyncio]"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

import pgjobq
from pgjobq import ConfigurationError

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio needs greenlet: imported only by the async calls
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

__all__ = [
    "aenqueue",
    "aenqueue_many",
    "async_driver_connection",
    "driver_connection",
    "enqueue",
    "enqueue_many",
]


def driver_connection(session: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under session's connection (begun if it was not), in its transaction."""
    connection = session.connection() if isinstance(session, Session) else session
    raw = connection.connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigurationError(_not_psycopg(connection.dialect.name, connection.dialect.driver))
    return raw


async def async_driver_connection(session: AsyncSession | AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection under session's connection (begun if it was not), in its transaction."""
    from sqlalchemy.ext.asyncio import AsyncSession

    connection = await session.connection() if isinstance(session, AsyncSession) else session
    raw = (await connection.get_raw_connection()).driver_connection
    if not isinstance(raw, psycopg.AsyncConnection):
        raise ConfigurationError(_not_psycopg(connection.dialect.name, connection.dialect.driver))
    return raw


def enqueue(
    session: Session | Connection, queue: str, payload: Mapping[str, Any], **options: Any
) -> int | None:
    """pgjobq.enqueue in session's transaction (options: pgjobq.enqueue's, by name)."""
    job_id: int | None = pgjobq.enqueue(driver_connection(session), queue, payload, **options)
    return job_id


def enqueue_many(
    session: Session | Connection, queue: str, payloads: Iterable[Mapping[str, Any]], **options: Any
) -> list[int]:
    """pgjobq.enqueue_many in session's transaction (options: pgjobq.enqueue_many's, by name)."""
    return pgjobq.enqueue_many(driver_connection(session), queue, payloads, **options)


async def aenqueue(
    session: AsyncSession | AsyncConnection, queue: str, payload: Mapping[str, Any], **options: Any
) -> int | None:
    """pgjobq.aio.enqueue in session's transaction (options: pgjobq.enqueue's, by name)."""
    from pgjobq import aio

    job_id: int | None = await aio.enqueue(await async_driver_connection(session), queue, payload, **options)
    return job_id


async def aenqueue_many(
    session: AsyncSession | AsyncConnection,
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    **options: Any,
) -> list[int]:
    """pgjobq.aio.enqueue_many in session's transaction (options: pgjobq.enqueue_many's, by name)."""
    from pgjobq import aio

    ids: list[int] = await aio.enqueue_many(
        await async_driver_connection(session), queue, payloads, **options
    )
    return ids


def _not_psycopg(dialect: str, driver: str) -> str:
    return (
        f"pgjobq needs the postgresql+psycopg dialect (psycopg 3), got {dialect}+{driver}: "
        "call the SQL API through the session instead (SELECT jobq.enqueue(...))"
    )
