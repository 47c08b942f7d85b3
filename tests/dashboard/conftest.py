"""Fixtures of the dashboard's tests: the app under Starlette's TestClient, and a real uvicorn server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

from pgjobq.dashboard import create_app

ORIGIN = "http://127.0.0.1"

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
