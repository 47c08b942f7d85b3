"""Durable execution in a handler: ``job.step``, ``job.sleep``, ``job.await_signal``, ``job.progress``,
``job.fan_out`` and ``job.parent_results``.

A handler calls these from its own thread (the Worker's handler threads,
the AsyncWorker's executor) or from its coroutine (the AsyncWorker), while
the worker's loop goes on with its own connection.  So they run on
connections of their own, opened when a handler first needs one and kept
for the next (a :class:`Shelf`, one per worker), each call a statement of
its own in autocommit: a step is recorded when job.step returns.

The logic is written once, as generators that yield the Calls they need
(as the worker core's steps do, and driven by the same drive and adrive of
pgjobq._worker.steps): by :class:`Durable` on a thread, awaited by
:class:`AsyncDurable`, and by :class:`OnLoop`, the AsyncWorker's, which
picks one of the two by the thread it is called from.  The
recorded steps of a job whose claim says it has some (control bit 64) are
read once, at its first step, and kept on the job for the run; a job with
none pays nothing for them.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from pgjobq._client import proto
from pgjobq._client import sync as client
from pgjobq._client.proto import Call
from pgjobq._errors import IncompatibleExtension, InvalidArgument, Suspended, _delay
from pgjobq._job import Job, Seconds
from pgjobq._worker.steps import adrive, drive

__all__ = ["AsyncDurable", "AsyncShelf", "Durable", "OnLoop", "Shelf"]

R = TypeVar("R")
Flow = Generator[Call[Any], Any, R]


def _recorded(job: Job) -> Flow[dict[str, tuple[str, Any]]]:
    """The job's recorded steps: read once per run, and only when its claim said it has some."""
    recorded: dict[str, tuple[str, Any]] | None = job._recorded
    if recorded is None:
        recorded = (yield proto.steps(job.id)) if job._control and job._control & 64 else {}
        object.__setattr__(job, "_recorded", recorded)  # frozen: kept for the run
    assert recorded is not None
    return recorded


def _replayed(job: Job, name: str, kind: str) -> Flow[tuple[bool, Any]]:
    """Whether step name was recorded, and its result; InvalidArgument when a step of another kind has
    the name."""
    recorded = yield from _recorded(job)
    hit = recorded.get(name)
    if hit is None:
        return False, None
    if hit[0] != kind:
        raise InvalidArgument(
            f"{name!r} of job {job.id} is a {hit[0]}, not a {kind}: a job's steps, sleeps and waits for a "
            "signal share one namespace; give each its own name"
        )
    return True, hit[1]


def _record(job: Job, name: str, value: object) -> Flow[Any]:
    """Record step name's value (InvalidArgument before anything is recorded when JSON cannot hold it);
    the result recorded, as JSON gives it back (the same on every run)."""
    recorded = yield proto.checkpoint(job.id, job.lease, name, value)
    (yield from _recorded(job))[name] = ("step", recorded)
    return recorded


def _sleep(job: Job, delay: Seconds | None, until: datetime | None, name: str | None) -> Flow[None]:
    if name is None:
        count = job._sleeps + 1
        object.__setattr__(job, "_sleeps", count)
        name = f"sleep:{count}"
    if until is None:
        call = proto.sleep(job.id, job.lease, name, _delay("duration", delay))
    else:
        call = proto.sleep_until(job.id, job.lease, name, until)
    if not (yield call):
        object.__setattr__(job, "_suspended", True)  # its lease is spent: a heartbeat meanwhile says nothing
        raise Suspended(f"job {job.id} sleeps ({name}): given back until the sleep ends")


def _await_signal(job: Job, key: str, timeout: Seconds | None) -> Flow[Any]:
    wait = None if timeout is None else _delay("timeout", timeout)
    if wait is not None and wait <= timedelta(0):
        raise InvalidArgument(f"timeout must be positive, got {timeout!r}")
    parked, payload = yield proto.await_signal(job.id, job.lease, key, wait)
    if parked:
        object.__setattr__(job, "_suspended", True)
        raise Suspended(f"job {job.id} waits for the signal {key!r}")
    return payload


def _fan_out(job: Job, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None,
             name: str | None) -> Flow[list[int]]:  # fmt: skip
    if name is None:
        count = job._fan_outs + 1
        object.__setattr__(job, "_fan_outs", count)
        name = f"fan_out:{count}"
    ids: list[int] = yield proto.fan_out(job.id, job.lease, name, children, then)
    return ids


class Durable:
    """The durable calls of jobs whose handler runs on a thread: each call runs there, blocking."""

    def __init__(self, run: Callable[[Call[Any]], Any]) -> None:
        self._run = run

    def step(self, job: Job, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> Any:  # fmt: skip
        done, result = drive(_replayed(job, name, "step"), self._run)
        if done:
            return result
        return drive(_record(job, name, fn(*args, **kwargs)), self._run)

    def sleep(self, job: Job, delay: Seconds | None, until: datetime | None, name: str | None) -> Any:
        return drive(_sleep(job, delay, until, name), self._run)

    def await_signal(self, job: Job, key: str, timeout: Seconds | None) -> Any:
        return drive(_await_signal(job, key, timeout), self._run)

    def progress(self, job: Job, value: object) -> Any:
        self._run(proto.progress(job.id, job.lease, value))

    def fan_out(self, job: Job, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None,
                name: str | None) -> Any:  # fmt: skip
        return drive(_fan_out(job, children, then, name), self._run)

    def parent_results(self, job: Job) -> Any:
        return self._run(proto.parent_results(job.id))


class AsyncDurable:
    """The durable calls of jobs whose handler is a coroutine: each returns an awaitable."""

    def __init__(self, run: Callable[[Call[Any]], Awaitable[Any]]) -> None:
        self._run = run

    def step(self, job: Job, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> Any:  # fmt: skip
        return self._step(job, name, fn, args, kwargs)

    async def _step(self, job: Job, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: Mapping[str, Any]) -> Any:  # fmt: skip
        done, result = await adrive(_replayed(job, name, "step"), self._run)
        if done:
            return result
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return await adrive(_record(job, name, value), self._run)

    def sleep(self, job: Job, delay: Seconds | None, until: datetime | None, name: str | None) -> Any:
        return adrive(_sleep(job, delay, until, name), self._run)

    def await_signal(self, job: Job, key: str, timeout: Seconds | None) -> Any:
        return adrive(_await_signal(job, key, timeout), self._run)

    async def progress(self, job: Job, value: object) -> None:
        await self._run(proto.progress(job.id, job.lease, value))

    def fan_out(self, job: Job, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None,
                name: str | None) -> Any:  # fmt: skip
        return adrive(_fan_out(job, children, then, name), self._run)

    def parent_results(self, job: Job) -> Any:
        return self._run(proto.parent_results(job.id))


def _needs_0_11(call: Call[Any]) -> IncompatibleExtension:
    """The error of a durable call on a database whose extension predates them (0.10.0)."""
    what = {"checkpoint": "job.step", "job_steps": "job.step", "await_signal": "job.await_signal",
            "progress": "job.progress", "fan_out": "job.fan_out",
            "parent_results": "job.parent_results"}.get(call.name, "job.sleep")  # fmt: skip
    return IncompatibleExtension(
        f"durable execution ({what}) needs pgjobq 0.11.0 in the database: ALTER EXTENSION pgjobq UPDATE"
    )


class Shelf:
    """The connections of a Worker's durable calls: taken by one call at a time, opened on demand (by
    open, the worker's own way of opening a connection), kept while they work, closed with the worker."""

    def __init__(self, open_: Callable[[], psycopg.Connection[Any]]) -> None:
        self._open = open_
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, call: Call[R]) -> R:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed:
            conn = self._open()
        try:
            return client._run(conn, call)
        except psycopg.errors.UndefinedFunction as exc:
            raise _needs_0_11(call) from exc
        finally:
            self._keep(conn)

    def _keep(self, conn: psycopg.Connection[Any]) -> None:
        """Keep conn for the next call, unless it broke (or its statement left a transaction open) or the
        worker has stopped."""
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            with self._lock:
                if not self._closed:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for conn in idle:
            conn.close()


class AsyncShelf:
    """Shelf for the AsyncWorker: its connections are async, used on its event loop."""

    def __init__(
        self,
        open_: Callable[[], Awaitable[psycopg.AsyncConnection[Any]]],
        send: Callable[[psycopg.AsyncConnection[Any], Call[Any]], Awaitable[Any]],
    ) -> None:
        self._open = open_
        self._send = send  # the async client's one way of sending a Call (pgjobq.aio._run)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._closed = False

    async def run(self, call: Call[R]) -> R:
        conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed:
            conn = await self._open()
        try:
            result: R = await self._send(conn, call)
        except psycopg.errors.UndefinedFunction as exc:
            raise _needs_0_11(call) from exc
        finally:
            if self._closed or conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
                await conn.close()
            else:
                self._idle.append(conn)
        return result

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        self._closed = True
        for conn in idle:
            await conn.close()


class OnLoop:
    """The AsyncWorker's durable calls: awaitables for the code that runs on its event loop (coroutine
    handlers and async tasks), blocking calls sent to the loop for the code on its threads (plain
    handlers and sync tasks), each told apart by the thread it is called from."""

    def __init__(
        self, run: Callable[[Call[Any]], Coroutine[Any, Any, Any]], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._on_loop = AsyncDurable(run)
        self._on_thread = Durable(lambda c: asyncio.run_coroutine_threadsafe(run(c), loop).result())
        self._loop_thread = threading.get_ident()  # made on the loop (AsyncWorker.run)

    def _here(self) -> Durable | AsyncDurable:
        return self._on_loop if threading.get_ident() == self._loop_thread else self._on_thread

    def step(self, job: Job, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> Any:  # fmt: skip
        return self._here().step(job, name, fn, args, kwargs)

    def sleep(self, job: Job, delay: Seconds | None, until: datetime | None, name: str | None) -> Any:
        return self._here().sleep(job, delay, until, name)

    def await_signal(self, job: Job, key: str, timeout: Seconds | None) -> Any:
        return self._here().await_signal(job, key, timeout)

    def progress(self, job: Job, value: object) -> Any:
        return self._here().progress(job, value)

    def fan_out(self, job: Job, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None,
                name: str | None) -> Any:  # fmt: skip
        return self._here().fan_out(job, children, then, name)

    def parent_results(self, job: Job) -> Any:
        return self._here().parent_results(job)
