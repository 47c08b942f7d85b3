"""pgjobq for FastAPI: a connection pool opened by the app's lifespan, and a dependency that hands
each endpoint a connection in the request's transaction.

The recipe, whole::

    from datetime import timedelta
    from fastapi import FastAPI
    import pgjobq.aio
    from pgjobq.contrib import fastapi as jobs

    app = FastAPI(lifespan=jobs.lifespan("dbname=shop", max_size=20))

    @app.post("/orders", status_code=201)
    async def place_order(item: str, conn: jobs.Connection) -> dict[str, int]:
        cur = await conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", [item])
        (order,) = await cur.fetchone()
        job = await pgjobq.aio.enqueue(conn, "orders", {"order": order})
        return {"order": order, "job": job}     # committed, both, before the response is sent

    @app.get("/jobs/{job_id}")
    async def job_result(job_id: int, conn: jobs.Connection) -> dict[str, object]:
        state = await pgjobq.aio.wait(conn, job_id, timedelta(seconds=10))
        ...

``Connection`` is ``Annotated[AsyncConnection, Depends(connection, scope="function")]``:
a connection of the pool, its transaction committed when the endpoint
returns and rolled back when it raises (an HTTPException too), **before**
the response goes out: a client that reads a job id from the response finds
the job committed.  (FastAPI's default scope for a dependency with yield ends
it after the response was sent: a commit that fails then could no longer
turn the answer into an error.)  An endpoint that has not written anything
holds an idle connection, as ``pgjobq.aio.wait`` needs; each waiting request
holds one of the pool's connections for as long as it waits, so size
``max_size`` for the waits as well.

Run the handlers elsewhere: ``pgjobq worker`` (or AsyncWorker in a process
of its own).  Needs psycopg-pool (the async extra) and FastAPI 0.121 or
later (dependency scopes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, Request
from psycopg_pool import AsyncConnectionPool

__all__ = ["Connection", "connection", "lifespan", "open_pool", "pool"]

_STATE = "pgjobq_pool"  # the attribute of app.state that holds the pool


@asynccontextmanager
async def open_pool(app: FastAPI, conninfo: str, **options: Any) -> AsyncIterator[AsyncConnectionPool]:
    """Open an AsyncConnectionPool (options: psycopg_pool's, min_size, max_size, timeout ...) for
    app's requests, waiting until its first connections are up; close it at the end.  For an app
    with a lifespan of its own: ``async with open_pool(app, conninfo): yield``."""
    async with AsyncConnectionPool(conninfo, open=False, **options) as opened:
        await opened.open(wait=True)
        setattr(app.state, _STATE, opened)
        try:
            yield opened
        finally:
            delattr(app.state, _STATE)


def lifespan(conninfo: str, **options: Any) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan for ``FastAPI(lifespan=...)`` that opens the pool (see open_pool) and closes it."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        async with open_pool(app, conninfo, **options):
            yield

    return run


def pool(app: FastAPI) -> AsyncConnectionPool:
    """app's pool, opened by open_pool (or lifespan); RuntimeError when it is not open."""
    opened = getattr(app.state, _STATE, None)
    if not isinstance(opened, AsyncConnectionPool):
        raise RuntimeError(
            "the app has no pgjobq pool open: give FastAPI lifespan=pgjobq.contrib.fastapi.lifespan(...)"
        )
    return opened


async def connection(request: Request) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The dependency: a connection of the app's pool for this request; its transaction is committed
    when the endpoint returns, rolled back when it raises.  Use it with scope="function"
    (``Connection`` does) so that the commit happens before the response is sent."""
    async with pool(request.app).connection() as conn:
        yield conn


Connection = Annotated[psycopg.AsyncConnection[Any], Depends(connection, scope="function")]
