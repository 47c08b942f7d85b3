"""Fixtures of the dashboard's tests: the app under Starlette's TestClient, a real uvicorn server, and a
database at the extension version before tasks."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from psycopg import sql
from starlette.testclient import TestClient
from throwaway_pg import ThrowawayPostgres

from pgjobq.dashboard import create_app

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Db

ORIGIN = "http://127.0.0.1"
BEFORE_TASKS = "0.8.0"  # the last extension version whose jobs have no task

MakeClient = Callable[..., TestClient]
ServeDashboard = Callable[..., str]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium (Debian's /usr/bin/chromium)")


@pytest.fixture
def make_client(dsn: str) -> Iterator[MakeClient]:
    """TestClient(create_app(dsn, **options)), its lifespan started; closed after the test."""
    opened: list[TestClient] = []

    def make(*, dsn: str = dsn, **options: Any) -> TestClient:
        options.setdefault("sample_seconds", 3600.0)  # samples only when a test asks
        client = TestClient(create_app(dsn, **options), base_url=ORIGIN, follow_redirects=False)
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


class RunningServer:
    """uvicorn serving the dashboard on a thread, on a socket bound beforehand (no port race)."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        deadline = 300  # 30 s in 0.1 s steps
        while not self.server.started and self.thread.is_alive() and deadline:
            threading.Event().wait(0.1)
            deadline -= 1
        if not self.server.started:
            raise RuntimeError("the dashboard did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def serve_dashboard(dsn: str) -> Iterator[ServeDashboard]:
    """Serves create_app(dsn, **options) with uvicorn on 127.0.0.1; returns its base URL."""
    running: list[RunningServer] = []

    def serve(*, dsn: str = dsn, **options: Any) -> str:
        server = RunningServer(create_app(dsn, **options))
        server.start()
        running.append(server)
        return server.url

    yield serve
    for server in running:
        server.stop()


@pytest.fixture
def db_before_tasks(db: Db, pg_server: ThrowawayPostgres) -> Iterator[Db]:
    """A database of its own with the pgjobq extension 0.8.0 (its jobs have no task), connected; dropped
    after the test."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(BEFORE_TASKS)))
        yield conn


@pytest.fixture
def dsn_before_tasks(db_before_tasks: Db, pg_server: ThrowawayPostgres) -> str:
    """The connection string of db_before_tasks' database."""
    return pg_server.dsn(db_before_tasks.info.dbname)
