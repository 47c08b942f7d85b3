"""The FastAPI recipe as an app (tests/frameworks/test_fastapi.py serves it with uvicorn).

POST /orders?item=... writes an order and enqueues its shipping in the
request's transaction; GET /jobs/{id}?timeout=... waits for the job and
answers with its outcome.  The table: orders (id identity, item text).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import FastAPI, HTTPException

import pgjobq
import pgjobq.aio
from pgjobq.contrib import fastapi as jobs

__all__ = ["create_app"]


def create_app(conninfo: str) -> FastAPI:
    app = FastAPI(lifespan=jobs.lifespan(conninfo, min_size=1, max_size=4))

    @app.post("/orders", status_code=201)
    async def place_order(item: str, conn: jobs.Connection) -> dict[str, int | None]:
        cur = await conn.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", [item])
        row = await cur.fetchone()
        assert row is not None
        job = await pgjobq.aio.enqueue(conn, "orders", {"order": row[0]})
        if item == "unobtainium":  # raised after the writes: both roll back
            raise HTTPException(status_code=409, detail="out of stock")
        return {"order": row[0], "job": job}

    @app.get("/jobs/{job_id}")
    async def job_outcome(job_id: int, conn: jobs.Connection, timeout: float = 10) -> dict[str, Any]:
        try:
            state = await pgjobq.aio.wait(conn, job_id, timedelta(seconds=timeout))
        except pgjobq.JobNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc
        if state is None:
            raise HTTPException(status_code=504, detail=f"job {job_id} still unfinished after {timeout} s")
        return {"status": state.status, "result": state.result, "error": state.last_error}

    return app
