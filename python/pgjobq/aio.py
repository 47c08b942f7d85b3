"""pgjobq.aio: every client call of pgjobq on psycopg's AsyncConnection.

The same names, arguments and results as the sync calls (``pgjobq.enqueue``
and ``await pgjobq.aio.enqueue``), the same checks before any SQL and the
same statements: both are shells over pgjobq._client.proto.  Like the sync calls,
nothing here commits: each runs in conn's current transaction::

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO orders ...")
            job_id = await pgjobq.aio.enqueue(conn, "emails", {"order": 42})

``wait`` listens on the connection (LISTEN "jobq.done") and awaits its
notifications, blocking no event loop.  Run coroutine handlers with
:class:`pgjobq.AsyncWorker`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from pgjobq import _tracing
from pgjobq._client import proto
from pgjobq._client.proto import (
    DONE_CHANNEL,
    POLL_FIRST,
    POLL_MAX,
    Cancellation,
    Health,
    JobState,
    OnParentFailure,
    QueueOverview,
    QueueSettings,
    QueueStats,
    Schedule,
    Step,
    json_loaders_needed,
    translated,
    use_json_loaders,
)
from pgjobq._client.proto import KeyOrder as KeyOrder
from pgjobq._install.check import check_installed
from pgjobq._install.plain import Installed
from pgjobq._job import Job
from pgjobq._queries import query

__all__ = [
    "cancel",
    "channel",
    "check_extension",
    "claim",
    "claim_any",
    "complete",
    "complete_and_claim",
    "complete_many",
    "configure_queue",
    "enqueue",
    "enqueue_flow",
    "enqueue_many",
    "fail",
    "health",
    "heartbeat",
    "heartbeat_many",
    "job",
    "pause",
    "purge",
    "queue_overview",
    "queues",
    "reap",
    "register_waiter",
    "release",
    "resume",
    "retry_failed",
    "schedule",
    "schedules",
    "signal",
    "snooze",
    "stats",
    "steps",
    "tick",
    "unhold",
    "unschedule",
    "wait",
    "watch",
]

AsyncConn = psycopg.AsyncConnection[Any]
R = TypeVar("R")


async def _run(conn: AsyncConn, call: proto.Call[R]) -> R:
    """Send call on conn and decode its rows (whatever conn's row factory and JSON loaders).

    The one way a statement of queries.sql reaches an async connection: the
    client's calls and the AsyncWorker's (pgjobq._worker.steps) alike; as
    pgjobq._client.sync._run, call.prepare included.
    """
    with translated():
        async with conn.cursor(row_factory=call.row) as cur:
            if call.json and json_loaders_needed(conn.adapters):
                use_json_loaders(cur.adapters)
            await cur.execute(query(call.name), call.params, prepare=call.prepare)
            rows = await cur.fetchall()
    return call.decode(rows)


@overload
async def enqueue(
    conn: AsyncConn,
    queue: str,
    payload: Mapping[str, Any],
    *,
    priority: int = ...,
    run_at: datetime | None = ...,
    max_attempts: int | None = ...,
    unique_key: str | None = ...,
    unique_scope: str = ...,
    on_conflict: Literal["return", "raise", "replace"] = ...,
    headers: Mapping[str, Any] | None = ...,
    concurrency_key: str | None = ...,
    depends_on: Sequence[int] | None = ...,
    on_parent_failure: OnParentFailure = ...,
    task: str | None = ...,
    hold: bool = ...,
) -> int: ...
@overload
async def enqueue(
    conn: AsyncConn,
    queue: str,
    payload: Mapping[str, Any],
    *,
    priority: int = ...,
    run_at: datetime | None = ...,
    max_attempts: int | None = ...,
    unique_key: str | None = ...,
    unique_scope: str = ...,
    on_conflict: str = ...,
    headers: Mapping[str, Any] | None = ...,
    concurrency_key: str | None = ...,
    depends_on: Sequence[int] | None = ...,
    on_parent_failure: OnParentFailure = ...,
    task: str | None = ...,
    hold: bool = ...,
) -> int | None: ...
async def enqueue(
    conn: AsyncConn,
    queue: str,
    payload: Mapping[str, Any],
    *,
    priority: int = 0,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    unique_scope: str = "active",
    on_conflict: str = "return",
    headers: Mapping[str, Any] | None = None,
    concurrency_key: str | None = None,
    depends_on: Sequence[int] | None = None,
    on_parent_failure: OnParentFailure = "cancel",
    task: str | None = None,
    hold: bool = False,
) -> int | None:
    """As :func:`pgjobq.enqueue`, on an AsyncConnection."""
    params = proto.enqueue_checked(
        queue,
        payload,
        unique_key=unique_key,
        concurrency_key=concurrency_key,
        depends_on=depends_on,
        on_parent_failure=on_parent_failure,
        task=task,
        hold=hold,
    )
    with (
        _tracing.send(params["queue"], headers) as sending,
        proto.tasks_needed(task is not None),
        proto.durable_needed("held jobs need", "this database's jobq.enqueue takes no hold", hold is True),
    ):
        job_id = await _run(
            conn,
            proto.enqueue_call(
                params,
                priority=priority,
                run_at=run_at,
                max_attempts=max_attempts,
                unique_scope=unique_scope,
                on_conflict=on_conflict,
                headers=sending.headers,
            ),
        )
        if job_id is not None:
            sending.sent([job_id])
    return job_id


@overload
async def enqueue_many(
    conn: AsyncConn,
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    priority: int = ...,
    run_at: datetime | None = ...,
    max_attempts: int | None = ...,
    unique_keys: Sequence[str | None] | None = ...,
    unique_scope: str = ...,
    on_conflict: Literal["return", "raise", "replace"] = ...,
    headers: Mapping[str, Any] | None = ...,
    concurrency_keys: Sequence[str | None] | None = ...,
    task: str | None = ...,
) -> list[int]: ...
@overload
async def enqueue_many(
    conn: AsyncConn,
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    priority: int = ...,
    run_at: datetime | None = ...,
    max_attempts: int | None = ...,
    unique_keys: Sequence[str | None] | None = ...,
    unique_scope: str = ...,
    on_conflict: str = ...,
    headers: Mapping[str, Any] | None = ...,
    concurrency_keys: Sequence[str | None] | None = ...,
    task: str | None = ...,
) -> list[int | None]: ...
async def enqueue_many(
    conn: AsyncConn,
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    priority: int = 0,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    unique_keys: Sequence[str | None] | None = None,
    unique_scope: str = "active",
    on_conflict: str = "return",
    headers: Mapping[str, Any] | None = None,
    concurrency_keys: Sequence[str | None] | None = None,
    task: str | None = None,
) -> list[int | None] | list[int]:
    """As :func:`pgjobq.enqueue_many`, on an AsyncConnection."""
    params, count = proto.enqueue_many_checked(
        queue, payloads, unique_keys=unique_keys, concurrency_keys=concurrency_keys, task=task
    )
    with (
        _tracing.send(params["queue"], headers, count=count) as sending,
        proto.tasks_needed(task is not None),
    ):
        ids = await _run(
            conn,
            proto.enqueue_many_call(
                params,
                priority=priority,
                run_at=run_at,
                max_attempts=max_attempts,
                unique_scope=unique_scope,
                on_conflict=on_conflict,
                headers=sending.headers,
            ),
        )
        sending.sent([i for i in ids if i is not None])
    return ids


async def enqueue_flow(conn: AsyncConn, queue: str, steps: Sequence[Mapping[str, Any]]) -> list[int]:
    """As :func:`pgjobq.enqueue_flow`, on an AsyncConnection."""
    with proto.tasks_needed(proto.flow_has_tasks(steps)):
        return await _run(conn, proto.enqueue_flow(queue, steps))


async def claim(
    conn: AsyncConn, queue: str, n: int, worker: str, *, lease_timeout: timedelta | None = None
) -> list[Job]:
    """As :func:`pgjobq.claim`, on an AsyncConnection."""
    return await _run(conn, proto.claim(queue, n, worker, lease_timeout))


async def claim_any(
    conn: AsyncConn, queues: Sequence[str], n: int, worker: str, *, lease_timeout: timedelta | None = None
) -> list[Job]:
    """As :func:`pgjobq.claim_any`, on an AsyncConnection."""
    return await _run(conn, proto.claim_any(queues, n, worker, lease_timeout))


async def complete(conn: AsyncConn, job_id: int, lease: int, *, result: Any = None) -> None:
    """As :func:`pgjobq.complete`, on an AsyncConnection."""
    await _run(conn, proto.complete(job_id, lease, result))


async def complete_many(
    conn: AsyncConn, acks: Sequence[tuple[int, int]], *, results: Sequence[Any] | None = None
) -> set[int]:
    """As :func:`pgjobq.complete_many`, on an AsyncConnection."""
    return await _run(conn, proto.complete_many(acks, results))


async def complete_and_claim(
    conn: AsyncConn,
    acks: Sequence[tuple[int, int]],
    queue: str,
    n: int,
    worker: str,
    *,
    lease_timeout: timedelta | None = None,
    results: Sequence[Any] | None = None,
) -> tuple[set[int], list[Job]]:
    """As :func:`pgjobq.complete_and_claim`, on an AsyncConnection."""
    return await _run(conn, proto.complete_and_claim(acks, queue, n, worker, lease_timeout, results))


async def fail(
    conn: AsyncConn,
    job_id: int,
    error: str,
    lease: int,
    *,
    retry_in: timedelta | None = None,
    retry: bool = True,
) -> tuple[str, datetime]:
    """As :func:`pgjobq.fail`, on an AsyncConnection."""
    call = proto.fail(job_id, error, lease, retry_in, retry)
    with proto.fail_for_good_needed(retry):
        return await _run(conn, call)


async def snooze(conn: AsyncConn, job_id: int, lease: int, delay: timedelta) -> datetime | None:
    """As :func:`pgjobq.snooze`, on an AsyncConnection."""
    return await _run(conn, proto.snooze(job_id, lease, delay))


async def signal(
    conn: AsyncConn, key: str, payload: Any = None, *, keep: timedelta = timedelta(days=7)
) -> int:
    """As :func:`pgjobq.signal`, on an AsyncConnection."""
    call = proto.signal(key, payload, keep)
    with proto.durable_needed("signals need", "this database has no jobq.signal"):
        return await _run(conn, call)


async def unhold(conn: AsyncConn, ids: Iterable[int]) -> int:
    """As :func:`pgjobq.unhold`, on an AsyncConnection."""
    call = proto.unhold(ids)
    with proto.durable_needed("held jobs need", "this database has no jobq.unhold"):
        return await _run(conn, call)


async def steps(conn: AsyncConn, job_id: int) -> list[Step]:
    """As :func:`pgjobq.steps`, on an AsyncConnection."""
    call = proto.job_steps(job_id)
    with proto.durable_needed("steps need", "this database has no jobq.steps"):
        return await _run(conn, call)


async def heartbeat(conn: AsyncConn, job_id: int, lease: int) -> None:
    """As :func:`pgjobq.heartbeat`, on an AsyncConnection."""
    await _run(conn, proto.heartbeat(job_id, lease))


async def heartbeat_many(conn: AsyncConn, held: Sequence[tuple[int, int]]) -> set[int]:
    """As :func:`pgjobq.heartbeat_many`, on an AsyncConnection."""
    return await _run(conn, proto.heartbeat_many(held))


async def release(conn: AsyncConn, job_id: int, lease: int) -> None:
    """As :func:`pgjobq.release`, on an AsyncConnection."""
    await _run(conn, proto.release(job_id, lease))


async def reap(conn: AsyncConn, stale: timedelta | None = None) -> list[tuple[int, str, str]]:
    """As :func:`pgjobq.reap`, on an AsyncConnection."""
    return await _run(conn, proto.reap(stale))


async def retry_failed(
    conn: AsyncConn, queue: str | None = None, ids: Sequence[int] | None = None
) -> list[int]:
    """As :func:`pgjobq.retry_failed`, on an AsyncConnection."""
    return await _run(conn, proto.retry_failed(queue, ids))


async def register_waiter(
    conn: AsyncConn, queue: str, worker: str, up_to: timedelta
) -> tuple[bool, datetime | None]:
    """As :func:`pgjobq.register_waiter`, on an AsyncConnection."""
    return await _run(conn, proto.register_waiter(queue, worker, up_to))


async def channel(conn: AsyncConn, queue: str) -> str:
    """As :func:`pgjobq.channel`, on an AsyncConnection."""
    return await _run(conn, proto.channel(queue))


async def stats(conn: AsyncConn) -> list[QueueStats]:
    """As :func:`pgjobq.stats`, on an AsyncConnection."""
    return await _run(conn, proto.stats())


async def purge(
    conn: AsyncConn, older_than: timedelta, *, max_rows: int = 100_000, include_failed: bool = False
) -> int:
    """As :func:`pgjobq.purge`, on an AsyncConnection."""
    return await _run(conn, proto.purge(older_than, max_rows, include_failed))


async def health(conn: AsyncConn) -> Health:
    """As :func:`pgjobq.health`, on an AsyncConnection."""
    return await _run(conn, proto.health())


async def cancel(conn: AsyncConn, ids: Iterable[int], *, force: bool = False) -> list[Cancellation]:
    """As :func:`pgjobq.cancel`, on an AsyncConnection."""
    return await _run(conn, proto.cancel(ids, force))


async def pause(conn: AsyncConn, queue: str) -> None:
    """As :func:`pgjobq.pause`, on an AsyncConnection."""
    await _run(conn, proto.pause(queue))


async def resume(conn: AsyncConn, queue: str) -> None:
    """As :func:`pgjobq.resume`, on an AsyncConnection."""
    await _run(conn, proto.resume(queue))


async def configure_queue(
    conn: AsyncConn,
    queue: str,
    *,
    max_attempts: int | None = None,
    backoff_base: timedelta | None = None,
    backoff_max: timedelta | None = None,
    backoff_jitter: float | None = None,
    lease_timeout: timedelta | None = None,
    timeout: timedelta | None = None,
    unset: Iterable[str] = (),
    concurrency: int | None = None,
    key_concurrency: int | None = None,
    key_order: KeyOrder | None = None,
    rate_limit: int | None = None,
    rate_interval: timedelta | None = None,
    retain_done: timedelta | None = None,
    retain_failed: timedelta | None = None,
    retain_cancelled: timedelta | None = None,
    keep_forever: Iterable[str] | None = None,
) -> QueueSettings:
    """As :func:`pgjobq.configure_queue`, on an AsyncConnection."""
    call = proto.configure_queue(
        queue,
        max_attempts=max_attempts,
        backoff_base=backoff_base,
        backoff_max=backoff_max,
        backoff_jitter=backoff_jitter,
        lease_timeout=lease_timeout,
        timeout=timeout,
        unset=unset,
        concurrency=concurrency,
        key_concurrency=key_concurrency,
        key_order=key_order,
        rate_limit=rate_limit,
        rate_interval=rate_interval,
        retain_done=retain_done,
        retain_failed=retain_failed,
        retain_cancelled=retain_cancelled,
        keep_forever=keep_forever,
    )
    with proto.retention_needed(call):
        return await _run(conn, call)


async def queues(conn: AsyncConn) -> list[QueueSettings]:
    """As :func:`pgjobq.queues`, on an AsyncConnection."""
    return await _run(conn, proto.queues())


async def queue_overview(conn: AsyncConn) -> list[QueueOverview]:
    """As :func:`pgjobq.queue_overview`, on an AsyncConnection."""
    return await _run(conn, proto.queue_overview())


async def job(conn: AsyncConn, job_id: int) -> JobState:
    """As :func:`pgjobq.job`, on an AsyncConnection."""
    return await _run(conn, proto.job_state("job", proto.job_id_params(job_id)))


async def watch(conn: AsyncConn, job_id: int) -> JobState:
    """As :func:`pgjobq.watch`, on an AsyncConnection."""
    return await _run(conn, proto.job_state("watch", proto.job_id_params(job_id)))


async def wait(conn: AsyncConn, job_id: int, timeout: timedelta) -> JobState | None:
    """As :func:`pgjobq.wait`, on an AsyncConnection: the wait blocks no event loop."""
    params, seconds = proto.wait_checked(job_id, timeout, conn.info.transaction_status)
    deadline = time.monotonic() + seconds
    await _execute(conn, "listen_done")
    try:
        state = await _await_finish(conn, params, deadline)
    except BaseException:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await _execute(conn, "unlisten_done")
        raise
    await _execute(conn, "unlisten_done")
    return state


async def schedule(
    conn: AsyncConn,
    name: str,
    queue: str,
    payload: Mapping[str, Any] | None = None,
    *,
    cron: str | None = None,
    timezone: str = "UTC",
    every: timedelta | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    headers: Mapping[str, Any] | None = None,
    catch_up: str = "latest",
    task: str | None = None,
) -> Schedule:
    """As :func:`pgjobq.schedule`, on an AsyncConnection."""
    call = proto.schedule(
        name,
        queue,
        payload,
        cron=cron,
        timezone=timezone,
        every=every,
        priority=priority,
        max_attempts=max_attempts,
        headers=headers,
        catch_up=catch_up,
        task=task,
    )
    with proto.tasks_needed(task is not None):
        return await _run(conn, call)


async def unschedule(conn: AsyncConn, name: str) -> bool:
    """As :func:`pgjobq.unschedule`, on an AsyncConnection."""
    return await _run(conn, proto.unschedule(name))


async def schedules(conn: AsyncConn) -> list[Schedule]:
    """As :func:`pgjobq.schedules`, on an AsyncConnection."""
    return await _run(conn, proto.schedules())


async def tick(conn: AsyncConn) -> int:
    """As :func:`pgjobq.tick`, on an AsyncConnection."""
    return await _run(conn, proto.tick())


async def _await_finish(conn: AsyncConn, params: Mapping[str, Any], deadline: float) -> JobState | None:
    state = await _own_transaction(conn, "watch", params)
    poll = POLL_FIRST
    while not state.finished:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        woken = await _notified(conn, str(params["id"]), min(poll, remaining))
        # notified and still not finished (redriven meanwhile): watch again
        state = await _own_transaction(conn, "watch" if woken else "job", params)
        poll = min(2 * poll, POLL_MAX)
    return state


async def _notified(conn: AsyncConn, payload: str, seconds: float) -> bool:
    """Whether the job's notification (payload: its id) arrived within seconds."""
    found = False
    notifications = conn.notifies(timeout=seconds)
    try:
        async for n in notifications:
            if n.channel == DONE_CHANNEL and n.payload == payload:
                found = True
                break
    finally:
        await notifications.aclose()
    return found


async def _own_transaction(conn: AsyncConn, name: str, params: Mapping[str, Any]) -> JobState:
    if conn.autocommit:
        return await _run(conn, proto.job_state(name, params))
    async with conn.transaction():
        return await _run(conn, proto.job_state(name, params))


async def _execute(conn: AsyncConn, name: str) -> None:
    """Run a statement that returns nothing, in a transaction of its own (conn is outside one)."""
    with translated():
        async with contextlib.AsyncExitStack() as stack:
            if not conn.autocommit:
                await stack.enter_async_context(conn.transaction())
            await conn.execute(query(name))


async def check_extension(conn: AsyncConn) -> str:
    """As :func:`pgjobq.check_extension`, on an AsyncConnection."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query("installed_version"))
        row = await cur.fetchone()
        assert row is not None
        extension, recorded = row
        installed: Installed | None = None
        if extension is not None:
            installed = Installed(str(extension), "extension")
        elif recorded:
            await cur.execute(query("plain_install_version"))
            plain = await cur.fetchone()
            installed = None if plain is None else Installed(str(plain[0]), "plain")
    return check_installed(installed)
