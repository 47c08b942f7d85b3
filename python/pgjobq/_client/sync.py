"""Calls into the extension on the caller's own connection.

Nothing here commits: each function runs on the connection it is given, in
that connection's current transaction, so an application enqueues atomically
with its own writes.  Database errors the extension raises on purpose come
back as pgjobq exceptions.

Each call is a short shell: pgjobq._client.proto checks its arguments and builds
the statement to send and the decoder of its rows (shared with pgjobq.aio,
the same calls on an AsyncConnection); this module sends it on conn.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

import psycopg
from psycopg.pq import TransactionStatus

from pgjobq import _tracing
from pgjobq._client import proto
from pgjobq._client.proto import DEFAULT_LEASE_TIMEOUT as DEFAULT_LEASE_TIMEOUT
from pgjobq._client.proto import DONE_CHANNEL as DONE_CHANNEL
from pgjobq._client.proto import FINISHED as FINISHED
from pgjobq._client.proto import POLL_FIRST as POLL_FIRST
from pgjobq._client.proto import POLL_MAX as POLL_MAX
from pgjobq._client.proto import QUEUE_SETTINGS as QUEUE_SETTINGS
from pgjobq._client.proto import (
    Cancellation,
    Health,
    JobState,
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
from pgjobq._client.proto import OnConflict as OnConflict
from pgjobq._client.proto import OnParentFailure as OnParentFailure
from pgjobq._client.proto import dump_json as dump_json
from pgjobq._client.proto import dump_payload as dump_payload
from pgjobq._client.proto import dump_payloads as dump_payloads
from pgjobq._job import Job
from pgjobq._queries import query

__all__ = [
    "Cancellation",
    "Health",
    "JobState",
    "QueueOverview",
    "QueueSettings",
    "QueueStats",
    "Schedule",
    "Step",
    "cancel",
    "channel",
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

Conn = psycopg.Connection[Any]
R = TypeVar("R")


def _run(conn: Conn, call: proto.Call[R]) -> R:
    """Send call on conn and decode its rows (whatever conn's row factory and JSON loaders).

    The one way a statement of queries.sql reaches a sync connection: the
    client's calls and the Worker's (pgjobq._worker.steps) alike.
    ``call.prepare`` True prepares it at once (the workers' hot statements)
    unless conn's prepare_threshold is None; None leaves it to the threshold.
    """
    with translated(), conn.cursor(row_factory=call.row) as cur:
        if call.json and json_loaders_needed(conn.adapters):
            use_json_loaders(cur.adapters)
        rows = cur.execute(query(call.name), call.params, prepare=call.prepare).fetchall()
    return call.decode(rows)


# -- the public calls ---------------------------------------------------------------


@overload
def enqueue(
    conn: Conn,
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
def enqueue(
    conn: Conn,
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
def enqueue(
    conn: Conn,
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
    """Enqueue one job in conn's current transaction; return its id.

    run_at None means now (the database's clock); otherwise it must be
    timezone-aware.  max_attempts None: the queue's setting
    (configure_queue), else 3.  headers: a JSON object handed to the worker
    with the job.  A job has no timeout of its own: how long it may run once
    claimed is its queue's timeout (configure_queue).

    unique_key: while a job of the queue holding that key is queued or
    running (or done too, with unique_scope "until_done"), nothing is
    inserted and on_conflict decides: "return" the holder's id, "skip"
    None, "raise" UniqueKeyInUse, "replace" the holder gets this job's
    payload and options if it is still queued (its id is returned), or, if it
    is running, keeps running without its key and retries and this job is
    inserted.  A unique enqueue that could not settle raises psycopg's
    SerializationFailure (SQLSTATE 40001): safe to retry.

    concurrency_key (1 to 512 characters): the job counts against its
    queue's key_concurrency (configure_queue) with the other running jobs
    of that key.  depends_on: the ids of parent jobs (JobNotFound for an
    unknown one); the job waits (status "waiting", never claimed) until
    every parent is done, then is queued.  When a parent ends failed or
    cancelled, on_parent_failure decides: "cancel" (the default) cancels
    the job, "run" counts that parent as settled.

    task: the job's task, the named job type a worker of a
    :class:`pgjobq.Tasks` dispatches on (1 to 200 characters of A-Z, a-z,
    0-9, ``_``, ``.``, ``:`` and ``-``, starting with a letter or ``_``; the
    payload holds its keyword arguments); None, a plain job.  Tasks need
    extension 0.9.0: on an older one a call with a task raises
    IncompatibleExtension (one without keeps working).

    hold: the job is enqueued waiting (status "waiting", never claimed, no
    worker woken) until :func:`unhold` releases it; it cannot have a
    unique_key, concurrency_key or depends_on (InvalidArgument, from the
    database).  Held jobs need extension 0.11.0: on 0.10.0 hold=True raises
    IncompatibleExtension (hold=False, the default, keeps working).

    Arguments of the wrong type and payloads or headers jsonb cannot store
    raise InvalidArgument before any SQL is sent; the values' domains are
    the database's to judge.
    """
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
        job_id = _run(
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
def enqueue_many(
    conn: Conn,
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
def enqueue_many(
    conn: Conn,
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
def enqueue_many(
    conn: Conn,
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
    """Enqueue many jobs in one statement; return their ids in the order of payloads.

    All or nothing: a bad element (named payloads[i], counting from 1, as the
    database does) raises before anything is inserted.  The payloads travel
    as one JSON array, which jsonb limits to 256 MB per call.  unique_keys,
    when given, is aligned with payloads (None: that job has no key); the
    options are enqueue's and apply to every job, and the result holds None
    where on_conflict "skip" skipped a job.  Within one call, the first of
    equal keys wins and the later ones meet it as they would an older job.
    concurrency_keys, when given, is aligned with payloads too (None: that
    job has no concurrency key; see enqueue).  task, when given, is every
    job's task (see enqueue).
    """
    params, count = proto.enqueue_many_checked(
        queue, payloads, unique_keys=unique_keys, concurrency_keys=concurrency_keys, task=task
    )
    with (
        _tracing.send(params["queue"], headers, count=count) as sending,
        proto.tasks_needed(task is not None),
    ):
        ids = _run(
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


def enqueue_flow(conn: Conn, queue: str, steps: Sequence[Mapping[str, Any]]) -> list[int]:
    """Enqueue the jobs of a flow in one statement; return their ids in step order.

    Each step is a mapping with the keys jobq.enqueue_flow takes: "payload"
    (a JSON object, required) and, optional, "name" (1 to 200 characters,
    unique within the flow, for later steps to depend on), "queue"
    (default: the queue argument), "priority", "run_at" (a timezone-aware
    datetime, or timestamptz text), "max_attempts", "headers",
    "concurrency_key", "depends_on" (a list mixing the names of earlier
    steps and ids of jobs that exist already), "on_parent_failure"
    ("cancel" or "run", as with enqueue) and "task" (the step's task, as
    with enqueue: extension 0.9.0).  A step with parents waits until
    they are done.  All or nothing: a bad step raises InvalidArgument (or
    JobNotFound for an unknown parent id) naming it as the database does,
    steps[i] counting from 0, and nothing is enqueued.
    """
    with proto.tasks_needed(proto.flow_has_tasks(steps)):
        return _run(conn, proto.enqueue_flow(queue, steps))


def claim(
    conn: Conn, queue: str, n: int, worker: str, *, lease_timeout: timedelta | None = None
) -> list[Job]:
    """Claim up to n runnable jobs of queue for worker, each under a lease that expires after lease_timeout.

    lease_timeout None: the queue's setting (configure_queue), else 60 s.
    Heartbeats extend a lease by its own lease_timeout, never past the job's
    deadline (the claim's time plus the queue's timeout, when it has one: the
    database keeps it, and the claimed Job does not carry it); jobq.reap
    recovers the job once its lease has expired.  A paused queue gives
    nothing.  A queue with limits (configure_queue's concurrency,
    key_concurrency, rate_limit) gives fewer jobs, maybe none, while a limit
    is reached; such a claim must run on an autocommit connection or in a
    READ COMMITTED transaction (IsolationLevelError otherwise).
    """
    return _run(conn, proto.claim(queue, n, worker, lease_timeout))


def claim_any(
    conn: Conn, queues: Sequence[str], n: int, worker: str, *, lease_timeout: timedelta | None = None
) -> list[Job]:
    """Claim up to n runnable jobs of any of queues for worker, in one statement, as claim does for one.

    The jobs are taken by priority (highest first), then run_at, then id,
    across the queues; each queue's pause and limits are respected.
    lease_timeout None: each job's queue's setting, else 60 s.  Each Job
    says its queue.
    """
    return _run(conn, proto.claim_any(queues, n, worker, lease_timeout))


def complete(conn: Conn, job_id: int, lease: int, *, result: Any = None) -> None:
    """Mark a running job done; LeaseLost if the lease is no longer current.

    result, any JSON value (None: no result, so JSON null cannot be one), is
    stored with the job for job(), wait() and watch() to return.
    """
    _run(conn, proto.complete(job_id, lease, result))


def complete_many(
    conn: Conn, acks: Sequence[tuple[int, int]], *, results: Sequence[Any] | None = None
) -> set[int]:
    """Acknowledge many (id, lease) pairs in one statement; return the ids accepted.

    Pairs missing from the result had a stale lease (or an unknown id).
    results, when given, is aligned with acks: each job's result as
    complete takes it (None: none); the database refuses lists of different
    lengths.
    """
    return _run(conn, proto.complete_many(acks, results))


def complete_and_claim(
    conn: Conn,
    acks: Sequence[tuple[int, int]],
    queue: str,
    n: int,
    worker: str,
    *,
    lease_timeout: timedelta | None = None,
    results: Sequence[Any] | None = None,
) -> tuple[set[int], list[Job]]:
    """Acknowledge (id, lease) pairs and claim up to n more jobs of queue, in one statement.

    Returns the ids acknowledged (pairs left out had a stale lease) and the
    jobs claimed, under leases of lease_timeout as with claim.  results, when
    given, is aligned with acks, as with complete_many.  If the claim's
    arguments are refused, nothing is acknowledged either.
    """
    return _run(conn, proto.complete_and_claim(acks, queue, n, worker, lease_timeout, results))


def fail(
    conn: Conn,
    job_id: int,
    error: str,
    lease: int,
    *,
    retry_in: timedelta | None = None,
    retry: bool = True,
) -> tuple[str, datetime]:
    """Record a failure; return the job's new status and run_at.

    The status is queued (retried after the backoff, or after retry_in when
    given, this once), failed (out of attempts) or cancelled (cancel() had
    asked the job to stop: never retried).  retry=False fails the job for
    good at once, whatever attempts it has left; it takes no retry_in and
    needs extension 0.9.0 (on an older one it raises IncompatibleExtension
    and the job is left running).
    """
    call = proto.fail(job_id, error, lease, retry_in, retry)
    with proto.fail_for_good_needed(retry):
        return _run(conn, call)


def snooze(conn: Conn, job_id: int, lease: int, delay: timedelta) -> datetime | None:
    """Put a running job back in its queue to run after delay, the attempt not counted; return the
    new run_at.

    None when cancel() had asked the job to stop: it is then cancelled
    instead (never run again), as a failure would leave it.  Fenced like
    complete (LeaseLost, JobNotFound).
    """
    return _run(conn, proto.snooze(job_id, lease, delay))


def signal(conn: Conn, key: str, payload: Any = None, *, keep: timedelta = timedelta(days=7)) -> int:
    """Send the signal key (1 to 200 characters); return how many waiting jobs it released.

    Every job waiting for key (``job.await_signal(key)``) becomes queued,
    and its wait returns payload (any JSON value; None: JSON null) when it
    runs again.  The first signal of a key wins: it is kept for keep (0 to
    10 years) for the jobs that await key later, which get its payload at
    once; a later signal of the same key changes nothing and returns 0.
    In conn's current transaction, like enqueue: the jobs are released when
    it commits.  Needs extension 0.11.0 (IncompatibleExtension on an older
    one).
    """
    call = proto.signal(key, payload, keep)
    with proto.durable_needed("signals need", "this database has no jobq.signal"):
        return _run(conn, call)


def unhold(conn: Conn, ids: Iterable[int]) -> int:
    """Release held jobs (enqueued with hold=True): each becomes queued, runnable at its run_at; return how
    many it released.  The ids of jobs that are not held (unknown, released already, cancelled) are left
    alone.  Needs extension 0.11.0 (IncompatibleExtension on an older one)."""
    call = proto.unhold(ids)
    with proto.durable_needed("held jobs need", "this database has no jobq.unhold"):
        return _run(conn, call)


def steps(conn: Conn, job_id: int) -> list[Step]:
    """The steps the job recorded (``job.step``), its durable sleeps and the outcomes of its waits for a
    signal, oldest first; JobNotFound when there is no such job.  Readable by the roles that may call
    job().  Needs extension 0.11.0 (IncompatibleExtension on an older one)."""
    call = proto.job_steps(job_id)
    with proto.durable_needed("steps need", "this database has no jobq.steps"):
        return _run(conn, call)


def heartbeat(conn: Conn, job_id: int, lease: int) -> None:
    """Extend a running job's lease (never past its deadline); LeaseLost if it is no longer current,
    JobTimedOut once its deadline (the queue's timeout) has passed."""
    _run(conn, proto.heartbeat(job_id, lease))


def heartbeat_many(conn: Conn, held: Sequence[tuple[int, int]]) -> set[int]:
    """Extend many (id, lease) pairs in one statement; return the ids still held (the rest were lost)."""
    return _run(conn, proto.heartbeat_many(held))


def release(conn: Conn, job_id: int, lease: int) -> None:
    """Hand a claimed, unstarted job back to its queue without counting the attempt."""
    _run(conn, proto.release(job_id, lease))


def reap(conn: Conn, stale: timedelta | None = None) -> list[tuple[int, str, str]]:
    """Recover the running jobs whose lease expired; return (id, queue, new status) of each.

    Each job is judged by its own lease (the lease_timeout it was claimed
    with).  stale, when given, holds reaping back further: a job must also
    have been claimed or extended more than stale ago.
    """
    return _run(conn, proto.reap(stale))


def retry_failed(conn: Conn, queue: str | None = None, ids: Sequence[int] | None = None) -> list[int]:
    """Redrive failed jobs (of queue, among ids, when given) to queued; return their ids."""
    return _run(conn, proto.retry_failed(queue, ids))


def register_waiter(conn: Conn, queue: str, worker: str, up_to: timedelta) -> tuple[bool, datetime | None]:
    """Register worker as waiting on queue for up_to, so that enqueues committed meanwhile notify its channel.

    Returns (registered, next_run_at).  registered False: a producer of
    the queue had a transaction in flight (or another worker was
    registering), nothing was registered; claim again shortly.  True: claim
    once more before sleeping (jobs committed before the registration were
    not notified).  next_run_at is the earliest run_at still in the future
    among the queue's queued jobs (None when none): sleep until then at
    most.  Run it in a transaction of its own (an autocommit connection):
    the registration counts from its commit.  (jobq.register_waiter, which
    extension 0.9.0 names jobq.wait(queue, worker, up_to); pgjobq.wait waits
    for a job's result.)
    """
    return _run(conn, proto.register_waiter(queue, worker, up_to))


def channel(conn: Conn, queue: str) -> str:
    """The notification channel of queue."""
    return _run(conn, proto.channel(queue))


def stats(conn: Conn) -> list[QueueStats]:
    """Counts per queue and status, and the wait of the oldest runnable job."""
    return _run(conn, proto.stats())


def purge(conn: Conn, older_than: timedelta, *, max_rows: int = 100_000, include_failed: bool = False) -> int:
    """Delete done jobs (and failed ones with include_failed) finished more than older_than ago."""
    return _run(conn, proto.purge(older_than, max_rows, include_failed))


def health(conn: Conn) -> Health:
    """One snapshot of jobq.health."""
    return _run(conn, proto.health())


def cancel(conn: Conn, ids: Iterable[int], *, force: bool = False) -> list[Cancellation]:
    """Cancel jobs; return one Cancellation per known id, in id order (unknown ids are left out).

    force: a running job is cancelled at once and its worker's lease is
    refused from then on (LeaseLost); otherwise its worker is asked to stop
    and the job ends cancelled unless the worker completes it.
    """
    return _run(conn, proto.cancel(ids, force))


def pause(conn: Conn, queue: str) -> None:
    """Stop claims from queue, from the commit on (until resume; it survives restarts).

    A queue without settings, jobs or schedules is paused too (its jobs wait from the first one on), and
    the database sends a NOTICE naming it, which conn's notice handlers receive: a mistyped name pauses
    nothing that exists (extension 0.10.0).
    """
    _run(conn, proto.pause(queue))


def resume(conn: Conn, queue: str) -> None:
    """Let claims from queue run again, and wake its workers."""
    _run(conn, proto.resume(queue))


def configure_queue(
    conn: Conn,
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
    """Change queue's settings; return them as they are now, every one effective.

    None leaves a setting as it is; unset names settings to clear back to
    their defaults (max_attempts 3, backoff_base 1 s, backoff_max 300 s,
    backoff_jitter 0, lease_timeout 60 s, no timeout, no limits, key_order
    "priority").  A retry waits
    least(backoff_max, backoff_base * 2^attempts) * (1 - backoff_jitter * random()).

    The limits claims respect (they hand out fewer jobs, never fail, while a
    limit is reached): concurrency (1 to 100,000), the most running jobs of
    the queue; key_concurrency (1 to 100,000), the most running jobs with
    one concurrency_key (enqueue); key_order, "priority" (jobs by priority
    whatever their key) or "round_robin" (keys take turns); rate_limit (1 to
    10,000) claims per rate_interval (above 0, at most a day; 1 s when
    rate_limit is set alone).  Unsetting rate_limit clears rate_interval;
    unsetting rate_interval alone puts it back to 1 s.

    Retention (extension 0.10.0): how long a job that finished done, failed
    or cancelled is kept before the tick every worker runs deletes it:
    retain_done (default 1 day), retain_failed (14 days), retain_cancelled
    (7 days), each from 0 (deleted at the next tick) to 10 years.
    keep_forever names the final states ("done", "failed", "cancelled") kept
    until purged; it replaces the list the queue has (an empty one clears
    it), and a retain_<state> given or unset takes its state off the list.
    A change applies to the queue's finished jobs at the next tick, those
    that finished before it too.  On extension 0.9.0, which has no
    retention, giving any of these (or unsetting one) raises
    IncompatibleExtension and changes nothing.
    """
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
        return _run(conn, call)


def queues(conn: Conn) -> list[QueueSettings]:
    """Every configured queue and every queue with queued or running jobs, with its effective settings."""
    return _run(conn, proto.queues())


def queue_overview(conn: Conn) -> list[QueueOverview]:
    """The queues of queues(), each with its settings, limits, and counts of queued, running and waiting
    jobs."""
    return _run(conn, proto.queue_overview())


def job(conn: Conn, job_id: int) -> JobState:
    """The job's current state (never its payload or headers); JobNotFound when there is none.

    For the worker and admin levels, and producers granted with
    ``jobq.grant_producer(role, see_jobs => true)``, which see every job's
    state and result; other roles get PermissionDenied.  Likewise for
    watch() and wait().
    """
    return _run(conn, proto.job_state("job", proto.job_id_params(job_id)))


def watch(conn: Conn, job_id: int) -> JobState:
    """The job's current state, and one notification on channel "jobq.done" (payload: the id) when it
    ends done, failed or cancelled.  LISTEN "jobq.done" first, and commit the watch: its notification is
    sent from the commit that finishes the job.  wait() does all of this."""
    return _run(conn, proto.job_state("watch", proto.job_id_params(job_id)))


def wait(conn: Conn, job_id: int, timeout: timedelta) -> JobState | None:
    """Wait until the job is done, failed or cancelled and return its state; None after timeout.

    It listens on "jobq.done", then watches the job (so no notification
    can be missed between the two), and waits for the job's notification;
    underneath, it re-reads the job every 50 ms, backing off to every 1 s,
    since a notification is only a hint.  It stops listening to "jobq.done"
    at the end (even if conn listened to it before).
    Unlike jobq.wait, nothing runs in the database while it waits: no
    snapshot is held, and timeout may be longer than a minute.

    conn must not be inside a transaction (InvalidArgument otherwise, before
    any SQL): notifications arrive only between transactions, and watching
    the job locks its row until the transaction ends, so the job could not
    finish while it waited.  An autocommit connection is used as it is;
    one that is not runs each statement in a transaction of its own.  Any
    notification of another channel conn listens on that arrives meanwhile
    is consumed: give wait a connection that listens to nothing else.
    JobNotFound when there is no such job; PermissionDenied for a role not
    given job() (see job()).
    """
    params, seconds = proto.wait_checked(job_id, timeout, conn.info.transaction_status)
    deadline = time.monotonic() + seconds
    _execute(conn, "listen_done")
    try:
        state = _await_finish(conn, params, deadline)
    except BaseException:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                _execute(conn, "unlisten_done")
        raise
    _execute(conn, "unlisten_done")
    return state


def schedule(
    conn: Conn,
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
    """Create the schedule name, or replace it; return it as it is now.

    Each occurrence enqueues one job of queue with payload (None: {}),
    priority, max_attempts (None: the queue's) and headers, to which it adds
    "schedule" (the name) and "occurrence" (its time).  Give cron (five
    fields, read in timezone, an IANA name such as "Europe/Paris") or every
    (a timedelta of whole seconds, 1 second to 366 days), not both.
    tick() enqueues the occurrences due within the minute ahead, each with
    its own run_at; every Worker runs it each reap_interval (or pg_cron can).
    catch_up says what a tick does with occurrences missed while none ran:
    "latest" (enqueue the most recent one, to run now), "all" or "skip".
    Replacing a schedule cancels its occurrences still queued; the new one
    starts with its first occurrence after now.  task, when given, is the
    task of its jobs (see enqueue; extension 0.9.0).
    """
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
        return _run(conn, call)


def unschedule(conn: Conn, name: str) -> bool:
    """Delete the schedule name and cancel its occurrences still queued (running ones finish); False when
    there was no such schedule."""
    return _run(conn, proto.unschedule(name))


def schedules(conn: Conn) -> list[Schedule]:
    """Every schedule, by name."""
    return _run(conn, proto.schedules())


def tick(conn: Conn) -> int:
    """Enqueue the occurrences of every schedule due within the minute ahead (and those missed, as each
    schedule's catch_up says); return how many jobs it enqueued.  Ticks at once share the work."""
    return _run(conn, proto.tick())


def _await_finish(conn: Conn, params: Mapping[str, Any], deadline: float) -> JobState | None:
    state = _own_transaction(conn, "watch", params)
    poll = POLL_FIRST
    while not state.finished:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        woken = _notified(conn, str(params["id"]), min(poll, remaining))
        # notified and still not finished (redriven meanwhile): watch again
        state = _own_transaction(conn, "watch" if woken else "job", params)
        poll = min(2 * poll, POLL_MAX)
    return state


def _notified(conn: Conn, payload: str, seconds: float) -> bool:
    """Whether the job's notification (payload: its id) arrived within seconds."""
    notifications = conn.notifies(timeout=seconds)
    try:
        return any(n.channel == DONE_CHANNEL and n.payload == payload for n in notifications)
    finally:
        notifications.close()


def _own_transaction(conn: Conn, name: str, params: Mapping[str, Any]) -> JobState:
    if conn.autocommit:
        return _run(conn, proto.job_state(name, params))
    with conn.transaction():
        return _run(conn, proto.job_state(name, params))


def _execute(conn: Conn, name: str) -> None:
    """Run a statement that returns nothing, in a transaction of its own (conn is outside one)."""
    with translated(), contextlib.ExitStack() as stack:
        if not conn.autocommit:
            stack.enter_context(conn.transaction())
        conn.execute(query(name))
