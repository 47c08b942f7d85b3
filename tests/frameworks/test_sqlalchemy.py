"""pgjobq.contrib.sqlalchemy with real engines (postgresql+psycopg, sync and async) on the test's database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import pgjobq
import pgjobq.aio  # the project's own module (it needs only psycopg): failing to import it is a failure

from helpers.sqlhelpers import Db

pytest.importorskip(
    "sqlalchemy", reason="SQLAlchemy is not installed (the sqlalchemy extra): contrib untested"
)

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Engine, String, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pgjobq import ConfigurationError
from pgjobq.contrib import sqlalchemy as jobs


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(100))


class Refused(Exception):
    """Raised inside a transaction to roll it back."""


def url(dsn: str, driver: str = "postgresql+psycopg") -> URL:
    params = conninfo_to_dict(dsn)
    return URL.create(
        driver,
        username=str(params["user"]),
        host=str(params["host"]),
        port=int(str(params["port"])),
        database=str(params["dbname"]),
    )


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    """A sync engine on this test's database, with the orders table."""
    engine = create_engine(url(dsn))
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def place_order(session: Session, item: str) -> tuple[int, int]:
    """Write an order and enqueue its shipping in session's transaction; (order id, job id)."""
    order = Order(item=item)
    session.add(order)
    session.flush()
    job_id = jobs.enqueue(session, "orders", {"order": order.id})
    assert job_id is not None
    return order.id, job_id


def state(db: Db) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the orders, the jobs of the orders queue), as another connection sees them."""
    orders = db.execute("SELECT id, item FROM orders ORDER BY id").fetchall()
    queued = db.execute("SELECT id, payload FROM jobq.jobs WHERE queue = 'orders' ORDER BY id").fetchall()
    return orders, queued


def test_a_committed_session_commits_the_order_and_its_job(engine: Engine, db: Db) -> None:
    with Session(engine) as session, session.begin():
        order, job = place_order(session, "book")

    assert state(db) == ([{"id": order, "item": "book"}], [{"id": job, "payload": {"order": order}}])


def test_a_rolled_back_session_drops_the_order_and_its_job(engine: Engine, db: Db) -> None:
    with pytest.raises(Refused), Session(engine) as session, session.begin():
        place_order(session, "book")
        raise Refused

    assert state(db) == ([], [])


def test_enqueue_many_joins_the_sessions_transaction(engine: Engine, db: Db) -> None:
    with Session(engine) as session:
        jobs.enqueue_many(session, "orders", [{"order": 1}, {"order": 2}])
        session.rollback()
        ids = jobs.enqueue_many(session.connection(), "orders", [{"order": 3}])
        session.commit()

    assert state(db) == ([], [{"id": ids[0], "payload": {"order": 3}}])


def test_a_job_claimed_through_a_session_has_a_dict_payload(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        jobs.enqueue(session, "orders", {"order": 7})
        (job,) = pgjobq.claim(jobs.driver_connection(session), "orders", 1, "test")

    assert job.payload == {"order": 7}


def test_a_session_on_another_driver_is_refused_by_name() -> None:
    engine = create_engine("sqlite://")
    with Session(engine) as session, pytest.raises(ConfigurationError, match=r"got sqlite\+pysqlite"):
        jobs.enqueue(session, "orders", {"order": 1})


def async_engine_session(dsn: str) -> Any:
    """(create_async_engine, AsyncSession), or a skip saying why they cannot run here."""
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio needs greenlet (sqlalchemy[asyncio])")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    return create_async_engine(url(dsn)), AsyncSession


def test_a_committed_async_session_commits_the_order_and_its_job(engine: Engine, dsn: str, db: Db) -> None:
    async_engine, AsyncSession = async_engine_session(dsn)

    async def place() -> tuple[int, int | None]:
        async with AsyncSession(async_engine) as session, session.begin():
            order = Order(item="book")
            session.add(order)
            await session.flush()
            order_id = order.id
            job = await jobs.aenqueue(session, "orders", {"order": order_id})
        await async_engine.dispose()
        return order_id, job

    order, job = asyncio.run(place())

    assert state(db) == ([{"id": order, "item": "book"}], [{"id": job, "payload": {"order": order}}])


def test_a_rolled_back_async_session_drops_the_order_and_its_job(engine: Engine, dsn: str, db: Db) -> None:
    async_engine, AsyncSession = async_engine_session(dsn)

    async def place() -> None:
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                session.add(Order(item="book"))
                await session.flush()
                await jobs.aenqueue_many(session, "orders", [{"order": 1}])
                raise Refused
        finally:
            await async_engine.dispose()

    with pytest.raises(Refused):
        asyncio.run(place())

    assert state(db) == ([], [])
