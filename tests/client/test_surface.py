"""pgjobq.aio and pgjobq offer the same calls: a test fails as soon as the two surfaces drift apart."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import pgjobq
import pgjobq.aio


def connection_calls() -> list[str]:
    """pgjobq's public functions that take a connection first (check_extension aside: not a job call)."""
    names = []
    for name in pgjobq.__all__:
        value = getattr(pgjobq, name)
        if inspect.isfunction(value) and next(iter(inspect.signature(value).parameters), None) == "conn":
            names.append(name)
    return sorted(names)


def comparable(function: Callable[..., Any]) -> tuple[object, ...]:
    """Every parameter's name, kind, default and annotation but the connection's, and the return's."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    return (
        [(p.name, p.kind, p.default, p.annotation) for p in parameters[1:]],
        signature.return_annotation,
    )


def test_the_calls_compared_are_the_clients_calls() -> None:
    assert {"enqueue", "claim", "wait", "watch", "tick"} <= set(connection_calls())


def test_aio_offers_every_connection_call_of_pgjobq_and_no_other() -> None:
    assert sorted(pgjobq.aio.__all__) == connection_calls()


@pytest.mark.parametrize("name", connection_calls())
def test_each_aio_call_is_a_coroutine_function_with_the_sync_calls_signature(name: str) -> None:
    sync, asynchronous = getattr(pgjobq, name), getattr(pgjobq.aio, name)

    assert inspect.iscoroutinefunction(asynchronous)
    assert comparable(asynchronous) == comparable(sync)


@pytest.mark.parametrize("name", connection_calls())
def test_each_calls_connection_is_sync_for_pgjobq_and_async_for_aio(name: str) -> None:
    sync = inspect.signature(getattr(pgjobq, name)).parameters["conn"].annotation
    asynchronous = inspect.signature(getattr(pgjobq.aio, name)).parameters["conn"].annotation

    assert "Async" not in sync
    assert "Async" in asynchronous
