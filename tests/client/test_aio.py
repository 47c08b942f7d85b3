"""pgjobq.aio: the client's calls on psycopg's AsyncConnection, against a real database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pgjobq
import pgjobq.aio

from helpers.sqlhelpers import Db

T = TypeVar("T")


def run(dsn: str, body: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], **options: Any) -> T:
    """body(conn) on a fresh AsyncConnection to dsn, in a new event loop."""

    async def main() -> T:
        options.setdefault("autocommit", True)
        async with await psycopg.AsyncConnection.connect(dsn, **options) as conn:
            return await body(conn)

    return asyncio.run(main())


def test_enqueue_commits_with_the_callers_transaction(db: Db, dsn: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> int:
        async with conn.transaction():
            job_id = await pgjobq.aio.enqueue(conn, "emails", {"order": 1}, headers={"h": 1})
            assert db.execute("SELECT count(*) AS n FROM jobq.jobs").fetchone() == {"n": 0}
        return job_id

    job_id = run(dsn, body, autocommit=False)

    row = db.execute("SELECT queue, payload, headers FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"queue": "emails", "payload": {"order": 1}, "headers": {"h": 1}}


def test_claim_then_complete_stores_the_result_job_reads(dsn: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> tuple[list[pgjobq.Job], pgjobq.JobState]:
        ids = await pgjobq.aio.enqueue_many(conn, "q", [{"n": 1}, {"n": 2}])
        claimed = await pgjobq.aio.claim(conn, "q", 5, "w")
        for job in claimed:
            await pgjobq.aio.complete(conn, job.id, job.lease, result={"twice": job.payload["n"] * 2})
        return claimed, await pgjobq.aio.job(conn, ids[1])

    claimed, state = run(dsn, body)

    assert [job.payload for job in claimed] == [{"n": 1}, {"n": 2}]
    assert (state.status, state.result) == ("done", {"twice": 4})


def test_wait_returns_once_another_connection_completes_the_job(db: Db, dsn: str) -> None:
    job_id = pgjobq.enqueue(db, "q", {})
    [job] = pgjobq.claim(db, "q", 1, "w")

    async def body(conn: psycopg.AsyncConnection[Any]) -> pgjobq.JobState | None:
        async def complete_soon() -> None:
            await asyncio.sleep(0.1)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
                await pgjobq.aio.complete(other, job.id, job.lease, result="ok")

        waiting = asyncio.ensure_future(pgjobq.aio.wait(conn, job_id, timedelta(seconds=10)))
        await complete_soon()
        return await waiting

    state = run(dsn, body)

    assert state is not None
    assert (state.status, state.result) == ("done", "ok")


def test_wait_gives_none_at_its_timeout(db: Db, dsn: str) -> None:
    job_id = pgjobq.enqueue(db, "q", {})

    assert run(dsn, lambda conn: pgjobq.aio.wait(conn, job_id, timedelta(seconds=0.2))) is None


def test_bad_arguments_are_refused_before_any_sql(dsn: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str | None, TransactionStatus]]:
        refused = []
        with pytest.raises(pgjobq.InvalidArgument, match="priority must be an integer") as raised:
            await pgjobq.aio.enqueue(conn, "q", {}, priority="high")  # type: ignore[call-overload]
        refused.append((raised.value.sqlstate, conn.info.transaction_status))
        async with conn.transaction():
            with pytest.raises(
                pgjobq.InvalidArgument, match="wait needs a connection outside a transaction"
            ) as raised:
                await pgjobq.aio.wait(conn, 1, timedelta(seconds=1))
            refused.append((raised.value.sqlstate, conn.info.transaction_status))
        return refused

    refused = run(dsn, body, autocommit=False)

    # no SQLSTATE: refused here, not by the database; and no statement reached the server: the first
    # refusal left no transaction open, the second left its transaction usable (not failed)
    assert refused == [(None, TransactionStatus.IDLE), (None, TransactionStatus.INTRANS)]


def test_the_extensions_errors_come_back_as_pgjobq_exceptions(dsn: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        with pytest.raises(pgjobq.JobNotFound):
            await pgjobq.aio.job(conn, 123456)

    run(dsn, body)


def test_check_extension_answers_the_installed_version(dsn: str) -> None:
    assert run(dsn, pgjobq.aio.check_extension) in pgjobq.SUPPORTED_EXTENSION_VERSIONS
