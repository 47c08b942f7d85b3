"""pgjobq.fail(..., retry=False) and pgjobq.aio.fail: a failure for good ends a job with attempts left at once
(extension 0.9.0's jobq.fail(retry => false)); retry=True, the default, retries it as before.

On extension 0.8.0, whose jobq.fail takes no retry, retry=False raises IncompatibleExtension saying failing
for good needs 0.9.0, and leaves the job running; retry=True keeps working there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import psycopg
import pytest
from throwaway_pg import ThrowawayPostgres

import pgjobq
import pgjobq.aio
from pgjobq import IncompatibleExtension

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Db

T = TypeVar("T")

NEEDS_0_9_0 = r"failing a job for good \(retry=False\) needs the pgjobq extension 0\.9\.0 or later"


@pytest.fixture
def old_db(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database of its own at extension 0.8.0, whose jobq.fail takes no retry; dropped after the test."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.8.0'")
        yield conn


class Held(NamedTuple):
    id: int
    lease: int


def running(db: Db) -> Held:
    """A new job of queue "emails" with 5 attempts, claimed: running, 4 attempts left.  Claimed in SQL, which
    0.8.0 (no longer accepted by pgjobq.claim, whose rows have a task) answers too."""
    pgjobq.enqueue(db, "emails", {}, max_attempts=5)
    (claimed,) = db.execute("SELECT id, lease FROM jobq.claim('emails', 1, 'w1')").fetchall()
    return Held(claimed["id"], claimed["lease"])


def run_async(dsn: str, body: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
    """body(conn) on a fresh autocommit AsyncConnection to dsn, in a new event loop."""

    async def main() -> T:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await body(conn)

    return asyncio.run(main())


def state(db: Db, job_id: int) -> tuple[str, int, str | None, bool]:
    """The job's status, attempts, last error and whether it is finished."""
    job = pgjobq.job(db, job_id)
    return job.status, job.attempts, job.last_error, job.finished


# -- extension 0.9.0 ---------------------------------------------------------------------------


def test_retry_false_fails_a_job_with_attempts_left_for_good(db: Db) -> None:
    claimed = running(db)

    status, _ = pgjobq.fail(db, claimed.id, "boom", claimed.lease, retry=False)

    assert status == "failed"
    assert state(db, claimed.id) == ("failed", 1, "boom", True)


def test_fail_retries_a_job_with_attempts_left_by_default(db: Db) -> None:
    claimed = running(db)

    status, _ = pgjobq.fail(db, claimed.id, "boom", claimed.lease)

    assert status == "queued"
    assert state(db, claimed.id) == ("queued", 1, "boom", False)


def test_aio_fail_with_retry_false_fails_a_job_with_attempts_left_for_good(db: Db, dsn: str) -> None:
    claimed = running(db)

    async def body(conn: psycopg.AsyncConnection[Any]) -> str:
        status, _ = await pgjobq.aio.fail(conn, claimed.id, "boom", claimed.lease, retry=False)
        return status

    assert run_async(dsn, body) == "failed"
    assert state(db, claimed.id) == ("failed", 1, "boom", True)


def test_aio_fail_retries_a_job_with_attempts_left_by_default(db: Db, dsn: str) -> None:
    claimed = running(db)

    async def body(conn: psycopg.AsyncConnection[Any]) -> str:
        status, _ = await pgjobq.aio.fail(conn, claimed.id, "boom", claimed.lease)
        return status

    assert run_async(dsn, body) == "queued"
    assert state(db, claimed.id) == ("queued", 1, "boom", False)


# -- extension 0.8.0 ---------------------------------------------------------------------------


def test_retry_false_on_0_8_0_says_failing_for_good_needs_0_9_0_and_leaves_the_job_running(
    old_db: Db,
) -> None:
    claimed = running(old_db)

    with pytest.raises(IncompatibleExtension, match=NEEDS_0_9_0):
        pgjobq.fail(old_db, claimed.id, "boom", claimed.lease, retry=False)

    assert state(old_db, claimed.id) == ("running", 1, None, False)


def test_aio_retry_false_on_0_8_0_says_failing_for_good_needs_0_9_0_and_leaves_the_job_running(
    old_db: Db, pg_server: ThrowawayPostgres
) -> None:
    claimed = running(old_db)

    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        await pgjobq.aio.fail(conn, claimed.id, "boom", claimed.lease, retry=False)

    with pytest.raises(IncompatibleExtension, match=NEEDS_0_9_0):
        run_async(pg_server.dsn(old_db.info.dbname), body)

    assert state(old_db, claimed.id) == ("running", 1, None, False)


def test_a_transaction_refused_retry_false_on_0_8_0_rolls_back_and_can_fail_the_job_to_retry(
    old_db: Db, pg_server: ThrowawayPostgres
) -> None:
    claimed = running(old_db)
    with psycopg.connect(pg_server.dsn(old_db.info.dbname)) as conn:
        with pytest.raises(IncompatibleExtension, match=NEEDS_0_9_0):
            pgjobq.fail(conn, claimed.id, "boom", claimed.lease, retry=False)
        conn.rollback()

        status, _ = pgjobq.fail(conn, claimed.id, "boom", claimed.lease)
        conn.commit()

    assert status == "queued"
    assert state(old_db, claimed.id) == ("queued", 1, "boom", False)


def test_fail_retrying_still_works_on_0_8_0(old_db: Db) -> None:
    claimed = running(old_db)

    status, _ = pgjobq.fail(old_db, claimed.id, "boom", claimed.lease)

    assert status == "queued"
    assert state(old_db, claimed.id) == ("queued", 1, "boom", False)
