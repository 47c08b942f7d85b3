"""The FastAPI recipe (pgjobq.contrib.fastapi, tests/frameworks/fastapi_app.py) on a real uvicorn
server, with a real Worker handling the jobs it enqueues."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pgjobq import Job, WorkerSettings

from helpers.fixtures import RunWorker
from helpers.processes import wait_until
from helpers.sqlhelpers import Db

pytest.importorskip("fastapi", reason="FastAPI is not installed (the test extra): the recipe is untested")
pytest.importorskip("psycopg_pool", reason="psycopg-pool is not installed (the async extra)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (the web extra)")

import httpx
import uvicorn

from frameworks.fastapi_app import create_app


@pytest.fixture
def server(dsn: str, db: Db) -> Iterator[httpx.Client]:
    """The recipe's app served by uvicorn on a free port of localhost; a client for it."""
    db.execute("CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item text NOT NULL)")
    config = uvicorn.Config(create_app(dsn), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    serving = uvicorn.Server(config)
    thread = threading.Thread(target=serving.run)
    thread.start()
    try:
        assert wait_until(lambda: serving.started or not thread.is_alive()), "uvicorn did not start"
        assert serving.started, "uvicorn stopped at start-up"
        (port,) = {socket.getsockname()[1] for server in serving.servers for socket in server.sockets}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        serving.should_exit = True
        thread.join(30)


def state(db: Db) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the orders, the jobs of the orders queue), as another connection sees them."""
    orders = db.execute("SELECT id, item FROM orders ORDER BY id").fetchall()
    queued = db.execute("SELECT id, payload FROM jobq.jobs WHERE queue = 'orders' ORDER BY id").fetchall()
    return orders, queued


def ship(job: Job) -> dict[str, Any]:
    return {"shipped": job.payload["order"]}


def test_an_order_and_its_job_are_committed_before_the_response(server: httpx.Client, db: Db) -> None:
    response = server.post("/orders", params={"item": "book"})

    assert response.status_code == 201
    placed = response.json()
    orders, queued = state(db)
    assert orders == [{"id": placed["order"], "item": "book"}]
    assert queued == [{"id": placed["job"], "payload": {"order": placed["order"]}}]


def test_an_endpoint_that_raises_rolls_back_the_order_and_its_job(server: httpx.Client, db: Db) -> None:
    response = server.post("/orders", params={"item": "unobtainium"})

    assert response.status_code == 409
    assert state(db) == ([], [])


def test_an_endpoint_waits_for_the_jobs_result(server: httpx.Client, dsn: str, run_worker: RunWorker) -> None:
    placed = server.post("/orders", params={"item": "book"}).json()
    run_worker(dsn, ship, WorkerSettings(queue="orders"))

    response = server.get(f"/jobs/{placed['job']}", params={"timeout": 30})

    assert response.status_code == 200
    assert response.json() == {"status": "done", "result": {"shipped": placed["order"]}, "error": None}


def test_waiting_for_an_unknown_job_is_not_found(server: httpx.Client) -> None:
    assert server.get("/jobs/12345", params={"timeout": 1}).status_code == 404
