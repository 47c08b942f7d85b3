"""Payloads, headers and results are decoded by the client whatever the connection's adapters.

Django's psycopg backend registers a loader that reads jsonb as text on its
connections (``conn.adapters.register_loader("jsonb", TextLoader)``); these
tests do the same on plain psycopg connections, sync and async.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.types.string import TextLoader

import pgjobq
import pgjobq.aio

from helpers.sqlhelpers import Connect, Db


def loads_jsonb_as_text(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """What Django's backend does to its connections."""
    conn.adapters.register_loader("jsonb", TextLoader)


def test_claim_gives_dict_payloads_and_headers_on_a_connection_loading_jsonb_as_text(
    connect: Connect,
) -> None:
    conn = connect()
    loads_jsonb_as_text(conn)
    assert conn.execute("SELECT '{\"a\": 1}'::jsonb").fetchone() == ('{"a": 1}',)  # as Django's do
    pgjobq.enqueue(conn, "q", {"order": 42}, headers={"h": "x"})

    [job] = pgjobq.claim(conn, "q", 1, "w")

    assert (job.payload, job.headers) == ({"order": 42}, {"h": "x"})
    # and the connection's own adapters are left as they were
    assert conn.execute("SELECT payload FROM jobq.jobs").fetchone() == ('{"order": 42}',)


def test_a_string_result_stays_a_string_on_a_connection_loading_jsonb_as_text(connect: Connect) -> None:
    conn = connect()
    loads_jsonb_as_text(conn)
    job_id = pgjobq.enqueue(conn, "q", {})
    [job] = pgjobq.claim(conn, "q", 1, "w")
    pgjobq.complete(conn, job.id, job.lease, result="ok")

    assert pgjobq.job(conn, job_id).result == "ok"


def test_schedules_give_dict_payloads_on_a_connection_loading_jsonb_as_text(connect: Connect) -> None:
    conn = connect()
    loads_jsonb_as_text(conn)
    pgjobq.schedule(conn, "nightly", "q", {"report": True}, cron="0 3 * * *")

    [schedule] = pgjobq.schedules(conn)

    assert schedule.payload == {"report": True}


def test_aio_claim_gives_dict_payloads_on_an_async_connection_loading_jsonb_as_text(db: Db, dsn: str) -> None:
    pgjobq.enqueue(db, "q", {"order": 42}, headers={"h": "x"})

    async def main() -> pgjobq.Job:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            loads_jsonb_as_text(conn)
            [job] = await pgjobq.aio.claim(conn, "q", 1, "w")
            return job

    job = asyncio.run(main())

    assert (job.payload, job.headers) == ({"order": 42}, {"h": "x"})
