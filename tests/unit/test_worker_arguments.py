"""What a worker is given, checked before it connects (pgjobq._worker.settings.check_worker_arguments),
without a database: a conninfo or a connect callable, a handler or a task registry, and the settings a
registry fills in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pgjobq import AsyncWorker, ConfigurationError, Job, Worker, WorkerSettings


class Registry:
    """A task registry as a worker sees one (pgjobq._worker.settings.TaskRegistry)."""

    def __init__(self, queues: tuple[str, ...] = ("emails", "reports"), lease_timeout: float | None = 30.0):
        self.queues = queues
        self.lease_timeout = lease_timeout

    def sync_handler(self) -> Callable[[Job], object]:
        return lambda job: None

    def async_handler(self) -> Callable[[Job], Awaitable[object]]:
        async def handle(job: Job) -> None:
            pass

        return handle


class AsyncOnly(Registry):
    def sync_handler(self) -> Callable[[Job], object]:
        raise ConfigurationError("task welcome is a coroutine function: run these tasks with AsyncWorker")


def handler(job: Job) -> None:
    pass


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({}, "exactly one of conninfo and connect, got neither"),
        ({"conninfo": "", "connect": lambda: None}, "exactly one of conninfo and connect, got both"),
        ({"conninfo": b"dbname=x"}, "conninfo must be a libpq connection string, got bytes"),
        ({"connect": "dbname=x"}, "connect must be a callable returning a new connection, got str"),
    ],
    ids=["neither", "both", "bytes", "not-callable"],
)
def test_a_worker_takes_exactly_one_conninfo_or_connect_callable(
    kind: type[Worker | AsyncWorker], given: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        kind(handler=handler, **given)


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_takes_exactly_one_handler_or_task_registry(kind: type[Worker | AsyncWorker]) -> None:
    with pytest.raises(ConfigurationError, match="exactly one of handler and tasks, got both"):
        kind("", handler, tasks=Registry())
    with pytest.raises(ConfigurationError, match="exactly one of handler and tasks, got neither"):
        kind("")


def test_a_handler_that_cannot_be_called_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="handler must be a callable taking a Job, got str"):
        Worker("", "module:function")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_with_tasks_claims_from_their_queues_under_their_lease_when_its_settings_name_neither(
    kind: type[Worker | AsyncWorker],
) -> None:
    worker = kind("", tasks=Registry())

    assert worker.settings.queues == ("emails", "reports")
    assert worker.settings.lease_timeout == 30.0


def test_settings_that_name_queues_and_a_lease_keep_them_with_tasks() -> None:
    worker = Worker("", tasks=Registry(), settings=WorkerSettings(queue="reports", lease_timeout=5))

    assert worker.settings.queues == ("reports",)
    assert worker.settings.lease_timeout == 5


def test_a_worker_without_tasks_or_queue_claims_from_the_default_queue() -> None:
    assert Worker("", handler).settings.queues == ("default",)


def test_a_registry_lease_is_checked_against_the_settings_as_any_lease() -> None:
    with pytest.raises(ConfigurationError, match="heartbeat_interval"):
        Worker("", tasks=Registry(lease_timeout=2.0), settings=WorkerSettings(heartbeat_interval=5))


def test_a_registry_without_queues_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="queue must name at least one queue"):
        Worker("", tasks=Registry(queues=()))


def test_a_sync_worker_refuses_a_registry_with_coroutine_tasks() -> None:
    with pytest.raises(ConfigurationError, match="AsyncWorker"):
        Worker("", tasks=AsyncOnly())


def test_an_async_worker_runs_a_registry_with_coroutine_tasks() -> None:
    assert AsyncWorker("", tasks=AsyncOnly()).settings.queues == ("emails", "reports")
