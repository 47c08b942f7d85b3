"""Calls into the extension on the caller's own connection.

Nothing here commits: each function runs on the connection it is given, in
that connection's current transaction, so an application enqueues atomically
with its own writes.  Database errors the extension raises on purpose come
back as pgjobq exceptions.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, tuple_row

from pgjobq._errors import InvalidArgument, translate
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
    "snooze",
    "stats",
    "tick",
    "unschedule",
    "wait",
    "watch",
]

Conn = psycopg.Connection[Any]


class translated:  # lower case: it reads as a function, with translated(): ...
    """Re-raise the extension's deliberate errors as pgjobq exceptions.

    A class, not a @contextmanager generator: it wraps every statement the
    Worker sends, and a generator context costs microseconds per use.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, psycopg.Error):
            error = translate(exc)
            if error is not None:
                raise error from exc


def _fetch(
    conn: Conn, name: str, params: Mapping[str, Any] | None = None, *, prepare: bool | None = None
) -> list[tuple[Any, ...]]:
    """Run the named statement on conn and return its rows as tuples, whatever conn's row factory.

    ``prepare=True`` prepares it at once (the Worker's hot statements) unless
    conn's prepare_threshold is None; None leaves it to the threshold.
    """
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query(name), params, prepare=prepare).fetchall()


def dump_payload(payload: Mapping[str, Any], argument: str = "payload") -> str:
    """payload as JSON text; InvalidArgument, before any SQL, unless jsonb can store it unchanged.

    Refused: anything but a mapping; values json cannot encode (datetime,
    bytes, sets, other objects, NaN and infinities, circular references);
    keys that are not strings (json would silently turn 1 into "1"); the
    character U+0000 and lone surrogates, which PostgreSQL's jsonb cannot
    store.  The size limit (1 MiB of jsonb) is the database's to judge: the
    JSON text's length does not tell it.
    """
    if not isinstance(payload, Mapping):
        raise InvalidArgument(f"{argument} must be a mapping (a JSON object), got {type(payload).__name__}")
    return dump_json(payload, argument)


def dump_json(value: object, argument: str) -> str:
    """Any JSON value (an object, array, string, number, boolean or None) as JSON text; refused,
    before any SQL, as dump_payload refuses, unless jsonb can store it unchanged."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{argument} is not serialisable as JSON: {exc}") from exc
    # json escapes U+0000 as \u0000 and leaves lone surrogates as they are, so
    # the text says cheaply whether any string needs a closer look.
    suspicious = "\\u0000" in text or not _encodable(text)
    problem = _unstorable(value, argument, strings=suspicious)
    if problem is not None:
        raise InvalidArgument(problem)
    return text


def dump_payloads(payloads: Iterable[Mapping[str, Any]]) -> str:
    """payloads as the text of one JSON array, refused as dump_payload would refuse an element.

    The fast path encodes the whole list with one json.dumps and checks it
    by decoding it again: the result equals the list unless some element
    holds what JSON changes (a non-string key, a tuple) or cannot hold.
    Only then is each element checked on its own, to name it
    (``payloads[i]``, counting from 1, as the database does).
    """
    if isinstance(payloads, (Mapping, str, bytes)):
        raise InvalidArgument(f"payloads must be an iterable of mappings, got {type(payloads).__name__}")
    items = list(payloads)
    try:
        text = json.dumps(items, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        exact = (
            all(isinstance(item, Mapping) for item in items)
            and "\\u0000" not in text
            and _encodable(text)
            and json.loads(text) == items
        )
    except (TypeError, ValueError, RecursionError):
        exact = False
    if exact:
        return text
    elements = [dump_payload(item, f"payloads[{i}]") for i, item in enumerate(items, start=1)]
    return f"[{','.join(elements)}]"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unstorable(value: object, path: str, *, strings: bool) -> str | None:
    """Why jsonb would not store value (found at path) as given, or None.

    Object keys are always checked; strings only when ``strings``.  Runs
    after json.dumps accepted value, so it is acyclic and of JSON types.
    """
    if isinstance(value, str):
        if not strings:
            return None
        if "\x00" in value:
            return f"{path} contains the character U+0000, which PostgreSQL's jsonb cannot store"
        if not _encodable(value):
            return f"{path} contains a lone surrogate, which is not valid Unicode"
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a key that is not a string: {key!r} (JSON keys are strings)"
            problem = _unstorable(key, f"a key of {path}", strings=strings) or _unstorable(
                item, f"{path}[{key!r}]", strings=strings
            )
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = _unstorable(item, f"{path}[{index}]", strings=strings)
            if problem is not None:
                return problem
    return None


# Argument checks made before any SQL: a value of the wrong Python type would
# otherwise reach PostgreSQL as a type no jobq function takes, and come back
# as an "function does not exist" error that names nothing.  The values'
# domains (queue names, ranges) are the database's to check.

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _integer(name: str, value: object, bounds: tuple[int, int] = _INT32) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        bits = 32 if bounds == _INT32 else 64
        raise InvalidArgument(f"{name} must be a {bits}-bit integer, got {value}")
    return value


def _bigint(name: str, value: object) -> int:
    return _integer(name, value, _INT64)


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {type(value).__name__}")
    return value


def _moment(name: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{name} must be a datetime or None, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise InvalidArgument(
            f"{name} must be timezone-aware, got the naive {value.isoformat()} "
            "(the database would read it in its own TimeZone)"
        )
    return value


def _timedelta(name: str, value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"{name} must be a timedelta, got {type(value).__name__}")
    return value


def _number(name: str, value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a bool, got {type(value).__name__}")
    return value


T = TypeVar("T")


def _optional(check: Callable[[str, object], T], name: str, value: object) -> T | None:
    """check(name, value), or None when value is None (the database's default then applies)."""
    return None if value is None else check(name, value)


def _many(name: str, values: object) -> list[Any]:
    """values as a list, refused unless it is a sequence or other iterable of several values (a str
    or a mapping would otherwise be taken apart silently)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{name} must be a list (or other iterable), got {type(values).__name__}")
    return list(values)


DEFAULT_LEASE_TIMEOUT = timedelta(seconds=60)  # jobq.claim's own default


def _held(job_id: object, lease: object) -> dict[str, int]:
    """The parameters naming one claim of a job."""
    return {"id": _bigint("id", job_id), "lease": _bigint("lease", lease)}


OnConflict = Literal["return", "skip", "raise", "replace"]
"""What an enqueue does when a job holding its unique key exists (see enqueue)."""

OnParentFailure = Literal["cancel", "run"]
"""What becomes of a job whose parent (depends_on) ends failed or cancelled (see enqueue)."""


def _ids(name: str, values: object) -> list[int] | None:
    """values (job ids) as a list of 64-bit integers; None stays None (no ids)."""
    if values is None:
        return None
    return [_bigint(f"{name}[]", value) for value in _many(name, values)]


def _keys(name: str, values: object) -> list[str | None] | None:
    """values (keys aligned with payloads: strings, or None for none) as a list; None stays None."""
    if values is None:
        return None
    return [_optional(_text, f"{name}[]", value) for value in _many(name, values)]


def _enqueue_options(
    *,
    priority: int,
    run_at: datetime | None,
    max_attempts: int | None,
    unique_scope: str,
    on_conflict: str,
    headers: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The options enqueue and enqueue_many share, checked."""
    return {
        "priority": _integer("priority", priority),
        "run_at": _moment("run_at", run_at),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "unique_scope": _text("unique_scope", unique_scope),
        "on_conflict": _text("on_conflict", on_conflict),
        "headers": None if headers is None else dump_payload(headers, "headers"),
    }


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

    Arguments of the wrong type and payloads or headers jsonb cannot store
    raise InvalidArgument before any SQL is sent; the values' domains are
    the database's to judge.
    """
    params = {
        "queue": _text("queue", queue),
        "payload": dump_payload(payload),
        "unique_key": _optional(_text, "unique_key", unique_key),
        "concurrency_key": _optional(_text, "concurrency_key", concurrency_key),
        "depends_on": _ids("depends_on", depends_on),
        "on_parent_failure": _text("on_parent_failure", on_parent_failure),
        **_enqueue_options(
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_scope=unique_scope,
            on_conflict=on_conflict,
            headers=headers,
        ),
    }
    job_id = _fetch(conn, "enqueue", params)[0][0]
    return None if job_id is None else int(job_id)


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
    job has no concurrency key; see enqueue).
    """
    params = {
        "queue": _text("queue", queue),
        "payloads": dump_payloads(payloads),
        "unique_keys": _keys("unique_keys", unique_keys),
        "concurrency_keys": _keys("concurrency_keys", concurrency_keys),
        **_enqueue_options(
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_scope=unique_scope,
            on_conflict=on_conflict,
            headers=headers,
        ),
    }
    return [None if i is None else int(i) for i in _fetch(conn, "enqueue_many", params)[0][0]]


def enqueue_flow(conn: Conn, queue: str, steps: Sequence[Mapping[str, Any]]) -> list[int]:
    """Enqueue the jobs of a flow in one statement; return their ids in step order.

    Each step is a mapping with the keys jobq.enqueue_flow takes: "payload"
    (a JSON object, required) and, optional, "name" (1 to 200 characters,
    unique within the flow, for later steps to depend on), "queue"
    (default: the queue argument), "priority", "run_at" (a timezone-aware
    datetime, or timestamptz text), "max_attempts", "headers",
    "concurrency_key", "depends_on" (a list mixing the names of earlier
    steps and ids of jobs that exist already) and "on_parent_failure"
    ("cancel" or "run", as with enqueue).  A step with parents waits until
    they are done.  All or nothing: a bad step raises InvalidArgument (or
    JobNotFound for an unknown parent id) naming it as the database does,
    steps[i] counting from 0, and nothing is enqueued.
    """
    items = _many("steps", steps)
    prepared: list[Mapping[str, Any]] = []
    for i, step in enumerate(items):
        if not isinstance(step, Mapping):
            raise InvalidArgument(f"steps[{i}] must be a mapping (a JSON object), got {type(step).__name__}")
        run_at = step.get("run_at")
        if isinstance(run_at, datetime):
            checked = _moment(f"steps[{i}].run_at", run_at)
            assert checked is not None
            step = {**step, "run_at": checked.isoformat()}
        prepared.append(step)
    params = {"queue": _text("queue", queue), "steps": dump_json(prepared, "steps")}
    return [int(i) for i in _fetch(conn, "enqueue_flow", params)[0][0]]


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
    params = {
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
    }
    return claim_unchecked(conn, params)


def claim_any(
    conn: Conn, queues: Sequence[str], n: int, worker: str, *, lease_timeout: timedelta | None = None
) -> list[Job]:
    """Claim up to n runnable jobs of any of queues for worker, in one statement, as claim does for one.

    The jobs are taken by priority (highest first), then run_at, then id,
    across the queues; each queue's pause and limits are respected.
    lease_timeout None: each job's queue's setting, else 60 s.  Each Job
    says its queue.
    """
    names = [_text("queues[]", name) for name in _many("queues", queues)]
    if not names:
        raise InvalidArgument("queues must name at least one queue, got none")
    params = {
        "queues": names,
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
    }
    return claim_any_unchecked(conn, params)


# The Worker's hot path: the same statements with arguments the Worker
# checked once (its settings) or that the database itself returned (ids and
# leases), so nothing is checked again for each job.


def claim_unchecked(conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None) -> list[Job]:
    """claim, its parameters (queue, n, worker, lease_timeout) taken as they are.

    headers, the last column, is left out when NULL: the Job's default {} then.
    """
    rows = _fetch(conn, "claim", params, prepare=prepare)
    return [Job(*row) if row[-1] is not None else Job(*row[:-1]) for row in rows]


def claim_any_unchecked(conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None) -> list[Job]:
    """claim_any, its parameters (queues, n, worker, lease_timeout) taken as they are."""
    rows = _fetch(conn, "claim_any", params, prepare=prepare)
    return [Job(*row) if row[-1] is not None else Job(*row[:-1]) for row in rows]


def complete_and_claim_unchecked(
    conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None
) -> tuple[set[int], list[Job]]:
    """complete_and_claim, its parameters (ids, leases, results and claim's) taken as they are.

    results (a list of JSON texts and None aligned with ids, or None for no
    result at all) may be left out of params.
    """
    if "results" not in params:
        params = {**params, "results": None}
    acknowledged: set[int] = set()
    claimed: list[Job] = []
    for status, *job in _fetch(conn, "complete_and_claim", params, prepare=prepare):
        if status == "done":
            acknowledged.add(job[0])
        else:
            claimed.append(Job(*job) if job[-1] is not None else Job(*job[:-1]))
    return acknowledged, claimed


def complete_many_unchecked(
    conn: Conn,
    ids: list[int],
    leases: list[int],
    *,
    results: list[str | None] | None = None,
    prepare: bool | None = None,
) -> set[int]:
    """complete_many for ids, leases and results (JSON texts or None; lists of one length, or results
    None for none at all) taken as they are."""
    params = {"ids": ids, "leases": leases, "results": results}
    return {r[0] for r in _fetch(conn, "complete_many", params, prepare=prepare)}


def heartbeat_many_unchecked(
    conn: Conn, ids: list[int], leases: list[int], *, prepare: bool | None = None
) -> set[int]:
    """heartbeat_many for ids and leases (lists of one length) taken as they are."""
    return {r[0] for r in _fetch(conn, "heartbeat_many", {"ids": ids, "leases": leases}, prepare=prepare)}


def heartbeat_status_unchecked(
    conn: Conn, ids: list[int], leases: list[int], *, prepare: bool | None = None
) -> list[tuple[int, bool, bool]]:
    """jobq.heartbeat_status for ids and leases (lists of one length) taken as they are: (id,
    cancel_requested, overdue) of each pair still held.  overdue: the job's deadline has passed (its
    lease was left unextended, expiring no later than the statement's own clock, compared in the
    database, never with this client's clock)."""
    rows = _fetch(conn, "heartbeat_status", {"ids": ids, "leases": leases}, prepare=prepare)
    return [(r[0], bool(r[1]), bool(r[2])) for r in rows]


def wait_unchecked(
    conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None
) -> tuple[bool, datetime | None, timedelta | None]:
    """wait, its parameters (queue, worker, up_to) taken as they are; also how far ahead next_run_at is,
    by the database's clock."""
    registered, next_run_at, next_run_in = _fetch(conn, "wait", params, prepare=prepare)[0]
    return bool(registered), next_run_at, next_run_in


def wait_any_unchecked(
    conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None
) -> tuple[bool, datetime | None, timedelta | None]:
    """wait on each of several queues in one statement, its parameters (queues, worker, up_to) taken as
    they are: registered only if on every queue, and the earliest next_run_at among them."""
    registered, next_run_at, next_run_in = _fetch(conn, "wait_any", params, prepare=prepare)[0]
    return bool(registered), next_run_at, next_run_in


def complete(conn: Conn, job_id: int, lease: int, *, result: Any = None) -> None:
    """Mark a running job done; LeaseLost if the lease is no longer current.

    result, any JSON value (None: no result, so JSON null cannot be one), is
    stored with the job for job(), wait() and watch() to return.
    """
    params = {**_held(job_id, lease), "result": None if result is None else dump_json(result, "result")}
    _fetch(conn, "complete", params)


def complete_many(
    conn: Conn, acks: Sequence[tuple[int, int]], *, results: Sequence[Any] | None = None
) -> set[int]:
    """Acknowledge many (id, lease) pairs in one statement; return the ids accepted.

    Pairs missing from the result had a stale lease (or an unknown id).
    results, when given, is aligned with acks: each job's result as
    complete takes it (None: none); the database refuses lists of different
    lengths.
    """
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    return complete_many_unchecked(
        conn, [p["id"] for p in pairs], [p["lease"] for p in pairs], results=_dump_results(results)
    )


def _dump_results(results: Sequence[Any] | None) -> list[str | None] | None:
    """Each result as JSON text (None: no result), refused as complete's result would be."""
    if results is None:
        return None
    return [
        None if r is None else dump_json(r, f"results[{i}]")
        for i, r in enumerate(_many("results", results), 1)
    ]


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
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    params = {
        "ids": [p["id"] for p in pairs],
        "leases": [p["lease"] for p in pairs],
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
        "results": _dump_results(results),
    }
    return complete_and_claim_unchecked(conn, params)


def fail(
    conn: Conn, job_id: int, error: str, lease: int, *, retry_in: timedelta | None = None
) -> tuple[str, datetime]:
    """Record a failure; return the job's new status and run_at.

    The status is queued (retried after the backoff, or after retry_in when
    given, this once), failed (out of attempts) or cancelled (cancel() had
    asked the job to stop: never retried).
    """
    params = {
        **_held(job_id, lease),
        "error": _text("error", error),
        "retry_in": _optional(_timedelta, "retry_in", retry_in),
    }
    status, run_at = _fetch(conn, "fail", params)[0]
    return str(status), run_at


def snooze(conn: Conn, job_id: int, lease: int, delay: timedelta) -> datetime | None:
    """Put a running job back in its queue to run after delay, the attempt not counted; return the
    new run_at.

    None when cancel() had asked the job to stop: it is then cancelled
    instead (never run again), as a failure would leave it.  Fenced like
    complete (LeaseLost, JobNotFound).
    """
    params = {**_held(job_id, lease), "delay": _timedelta("delay", delay)}
    run_at: datetime | None = _fetch(conn, "snooze", params)[0][0]
    return run_at


def heartbeat(conn: Conn, job_id: int, lease: int) -> None:
    """Extend a running job's lease (never past its deadline); LeaseLost if it is no longer current,
    JobTimedOut once its deadline (the queue's timeout) has passed."""
    _fetch(conn, "heartbeat", _held(job_id, lease))


def heartbeat_many(conn: Conn, held: Sequence[tuple[int, int]]) -> set[int]:
    """Extend many (id, lease) pairs in one statement; return the ids still held (the rest were lost)."""
    pairs = [_held(job_id, lease) for job_id, lease in held]
    return heartbeat_many_unchecked(conn, [p["id"] for p in pairs], [p["lease"] for p in pairs])


def release(conn: Conn, job_id: int, lease: int) -> None:
    """Hand a claimed, unstarted job back to its queue without counting the attempt."""
    _fetch(conn, "release", _held(job_id, lease))


def reap(conn: Conn, stale: timedelta | None = None) -> list[tuple[int, str, str]]:
    """Recover the running jobs whose lease expired; return (id, queue, new status) of each.

    Each job is judged by its own lease (the lease_timeout it was claimed
    with).  stale, when given, holds reaping back further: a job must also
    have been claimed or extended more than stale ago.
    """
    if stale is not None and (not isinstance(stale, timedelta) or stale <= timedelta(0)):
        raise InvalidArgument(f"stale must be a positive timedelta or None, got {stale!r}")
    return [(int(r[0]), str(r[1]), str(r[2])) for r in _fetch(conn, "reap", {"stale": stale})]


def retry_failed(conn: Conn, queue: str | None = None, ids: Sequence[int] | None = None) -> list[int]:
    """Redrive failed jobs (of queue, among ids, when given) to queued; return their ids."""
    params = {
        "queue": None if queue is None else _text("queue", queue),
        "ids": None if ids is None else [_bigint("ids[]", i) for i in ids],
    }
    return [int(r[0]) for r in _fetch(conn, "retry_failed", params)]


def register_waiter(conn: Conn, queue: str, worker: str, up_to: timedelta) -> tuple[bool, datetime | None]:
    """Register worker as waiting on queue for up_to, so that enqueues committed meanwhile notify its channel.

    Returns (registered, next_run_at).  registered False: a producer of
    the queue had a transaction in flight (or another worker was
    registering), nothing was registered; claim again shortly.  True: claim
    once more before sleeping (jobs committed before the registration were
    not notified).  next_run_at is the earliest run_at still in the future
    among the queue's queued jobs (None when none): sleep until then at
    most.  Run it in a transaction of its own (an autocommit connection):
    the registration counts from its commit.  (jobq.wait(queue, worker,
    up_to); pgjobq.wait waits for a job's result.)
    """
    params = {
        "queue": _text("queue", queue),
        "worker": _text("worker", worker),
        "up_to": _timedelta("up_to", up_to),
    }
    registered, next_run_at, _ = wait_unchecked(conn, params)
    return registered, next_run_at


def channel(conn: Conn, queue: str) -> str:
    """The notification channel of queue."""
    return str(_fetch(conn, "channel", {"queue": _text("queue", queue)})[0][0])


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's counts, as jobq.stats() reports them (waiting: jobs whose parents are not all done)."""

    queue: str
    queued: int
    runnable: int
    running: int
    done: int
    failed: int
    oldest_queued_age: timedelta | None
    cancelled: int
    waiting: int = 0  # 0.7.0: a default, so that a QueueStats made as in 0.6.0 still is one


def stats(conn: Conn) -> list[QueueStats]:
    """Counts per queue and status, and the wait of the oldest runnable job."""
    with translated(), conn.cursor(row_factory=class_row(QueueStats)) as cur:
        return cur.execute(query("stats")).fetchall()


def purge(conn: Conn, older_than: timedelta, *, max_rows: int = 100_000, include_failed: bool = False) -> int:
    """Delete done jobs (and failed ones with include_failed) finished more than older_than ago."""
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgument(f"older_than must be a non-negative timedelta, got {older_than!r}")
    if not isinstance(include_failed, bool):
        raise InvalidArgument(f"include_failed must be a bool, got {type(include_failed).__name__}")
    params = {
        "older_than": older_than,
        "max_rows": _integer("max_rows", max_rows),
        "include_failed": include_failed,
    }
    return int(_fetch(conn, "purge", params)[0][0])


@dataclass(frozen=True, slots=True)
class Health:
    """The jobq.health view: what to watch to see backlog and bloat coming."""

    queued: int
    runnable: int
    running: int
    failed: int
    oldest_runnable_age: timedelta | None
    live_tuples: int
    dead_tuples: int
    total_bytes: int
    last_vacuum: datetime | None
    last_analyze: datetime | None
    oldest_transaction_age: timedelta | None
    oldest_xmin_age: int | None


def health(conn: Conn) -> Health:
    """One snapshot of jobq.health."""
    with translated(), conn.cursor(row_factory=class_row(Health)) as cur:
        row = cur.execute(query("health")).fetchone()
    assert row is not None  # the view always has exactly one row
    return row


# -- job control ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What cancel() did to one job: its status after the call.

    cancelled (it was waiting or queued, or running and forced, or cancelled already),
    cancel_requested (it is running: its worker is asked to stop), done or
    failed (it had finished: unchanged).
    """

    id: int
    status: str


def cancel(conn: Conn, ids: Iterable[int], *, force: bool = False) -> list[Cancellation]:
    """Cancel jobs; return one Cancellation per known id, in id order (unknown ids are left out).

    force: a running job is cancelled at once and its worker's lease is
    refused from then on (LeaseLost); otherwise its worker is asked to stop
    and the job ends cancelled unless the worker completes it.
    """
    params = {
        "ids": [_bigint("ids[]", i) for i in _many("ids", ids)],
        "force": _flag("force", force),
    }
    return [Cancellation(int(r[0]), str(r[1])) for r in _fetch(conn, "cancel", params)]


def pause(conn: Conn, queue: str) -> None:
    """Stop claims from queue, from the commit on (until resume; it survives restarts)."""
    _fetch(conn, "pause", {"queue": _text("queue", queue)})


def resume(conn: Conn, queue: str) -> None:
    """Let claims from queue run again, and wake its workers."""
    _fetch(conn, "resume", {"queue": _text("queue", queue)})


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """One row of the view jobq.queues: a queue's effective settings.

    configured: the queue has settings of its own (configure_queue or pause);
    otherwise every value is the default.  timeout: how long a job may run
    once claimed (its deadline: heartbeats do not extend its lease past it);
    None: no limit.  The limits (None: no limit): concurrency, the most
    running jobs of the queue; key_concurrency, the most running jobs of one
    concurrency_key; key_order, how claims pick among keys ("priority", by
    the jobs' priority, or "round_robin", key after key); rate_limit, the
    most claims per rate_interval.
    """

    queue: str
    paused: bool
    max_attempts: int
    backoff_base: timedelta
    backoff_max: timedelta
    backoff_jitter: float
    lease_timeout: timedelta
    timeout: timedelta | None
    configured: bool
    # 0.7.0's limits: with defaults (no limit), so that a QueueSettings made as in 0.6.0 still is one
    concurrency: int | None = None
    key_concurrency: int | None = None
    key_order: str = "priority"
    rate_limit: int | None = None
    rate_interval: timedelta | None = None


QUEUE_SETTINGS = (
    "max_attempts",
    "backoff_base",
    "backoff_max",
    "backoff_jitter",
    "lease_timeout",
    "timeout",
    "concurrency",
    "key_concurrency",
    "key_order",
    "rate_limit",
    "rate_interval",
)
"""The settings configure_queue's unset names (rate_limit clears rate_interval too; rate_interval alone
goes back to 1 second)."""

KeyOrder = Literal["priority", "round_robin"]
"""How a queue with key_concurrency picks among concurrency keys (see configure_queue)."""


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
    """
    params = {
        "queue": _text("queue", queue),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "backoff_base": _optional(_timedelta, "backoff_base", backoff_base),
        "backoff_max": _optional(_timedelta, "backoff_max", backoff_max),
        "backoff_jitter": _optional(_number, "backoff_jitter", backoff_jitter),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
        "timeout": _optional(_timedelta, "timeout", timeout),
        "unset": [_text("unset[]", name) for name in _many("unset", unset)],
        "concurrency": _optional(_integer, "concurrency", concurrency),
        "key_concurrency": _optional(_integer, "key_concurrency", key_concurrency),
        "key_order": _optional(_text, "key_order", key_order),
        "rate_limit": _optional(_integer, "rate_limit", rate_limit),
        "rate_interval": _optional(_timedelta, "rate_interval", rate_interval),
    }
    with translated(), conn.cursor(row_factory=class_row(QueueSettings)) as cur:
        row = cur.execute(query("configure_queue"), params).fetchone()
    assert row is not None  # the function returns one row
    return row


def queues(conn: Conn) -> list[QueueSettings]:
    """Every configured queue and every queue with queued or running jobs, with its effective settings."""
    with translated(), conn.cursor(row_factory=class_row(QueueSettings)) as cur:
        return cur.execute(query("queues")).fetchall()


@dataclass(frozen=True, slots=True)
class QueueOverview(QueueSettings):
    """A queue's settings and limits (QueueSettings), and how many of its jobs are queued, running and
    waiting (for their parents)."""

    _: KW_ONLY  # after QueueSettings' defaults: given by name
    queued: int
    running: int
    waiting: int


def queue_overview(conn: Conn) -> list[QueueOverview]:
    """The queues of queues(), each with its settings, limits, and counts of queued, running and waiting
    jobs."""
    with translated(), conn.cursor(row_factory=class_row(QueueOverview)) as cur:
        return cur.execute(query("queue_overview")).fetchall()


# -- looking up and waiting -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobState:
    """One job as jobq.job reports it (the type jobq.job_state).

    status is waiting (its parents, depends_on, are not all done: never
    claimed until they are), queued, running, done, failed or cancelled.
    result is the value the job was completed with (None: none); finished_at
    is set once the job is done, failed or cancelled; cancel_requested once
    cancel() asked its worker to stop.  depends_on: the ids of the job's
    parents (None: it has none).
    """

    id: int
    queue: str
    status: str
    attempts: int
    max_attempts: int  # the queue's (else 3) for a job enqueued without one
    result: Any
    last_error: str | None
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    cancel_requested: bool
    depends_on: list[int] | None = None  # 0.7.0: a default, so that a JobState made as in 0.6.0 still is one

    @property
    def finished(self) -> bool:
        """Whether the job is done, failed or cancelled: it will not run again unless redriven."""
        return self.status in FINISHED


FINISHED = frozenset({"done", "failed", "cancelled"})
"""The statuses a job ends in."""


def _job_state(conn: Conn, name: str, params: Mapping[str, Any]) -> JobState:
    with translated(), conn.cursor(row_factory=class_row(JobState)) as cur:
        row = cur.execute(query(name), params).fetchone()
    assert row is not None  # the function returns one row or raises JQ002
    return row


def job(conn: Conn, job_id: int) -> JobState:
    """The job's current state (never its payload or headers); JobNotFound when there is none.

    For the worker and admin levels, and producers granted with
    ``jobq.grant_producer(role, see_jobs => true)``, which see every job's
    state and result; other roles get PermissionDenied.  Likewise for
    watch() and wait().
    """
    return _job_state(conn, "job", {"id": _bigint("id", job_id)})


def watch(conn: Conn, job_id: int) -> JobState:
    """The job's current state, and one notification on channel "jobq.done" (payload: the id) when it
    ends done, failed or cancelled.  LISTEN "jobq.done" first, and commit the watch: its notification is
    sent from the commit that finishes the job.  wait() does all of this."""
    return _job_state(conn, "watch", {"id": _bigint("id", job_id)})


DONE_CHANNEL = "jobq.done"
POLL_FIRST = 0.05  # seconds: wait() re-reads the job after this long without a notification,
POLL_MAX = 1.0  # then after twice as long each time, up to this


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
    params = {"id": _bigint("id", job_id)}
    seconds = _timedelta("timeout", timeout).total_seconds()
    if seconds < 0:
        raise InvalidArgument(f"timeout must not be negative, got {timeout}")
    status = conn.info.transaction_status
    if status in _IN_TRANSACTION:
        raise InvalidArgument(
            f"wait needs a connection outside a transaction, got one {status.name.lower()} "
            "(notifications arrive only between transactions, and the job could not finish "
            "while this one held its row): commit first, or use an autocommit connection"
        )
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


# (UNKNOWN, a closed or broken connection, is left to fail as psycopg makes it.)
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR, TransactionStatus.ACTIVE)


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
        return _job_state(conn, name, params)
    with conn.transaction():
        return _job_state(conn, name, params)


def _execute(conn: Conn, name: str) -> None:
    """Run a statement that returns nothing, in a transaction of its own (conn is outside one)."""
    with translated(), contextlib.ExitStack() as stack:
        if not conn.autocommit:
            stack.enter_context(conn.transaction())
        conn.execute(query(name))


# -- schedules ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of the view jobq.schedules: jobs enqueued on a cron expression or every period.

    Exactly one of cron (five fields, read in timezone) and every (whole
    seconds; occurrences at its multiples since the Unix epoch) is set.
    next_run is the next occurrence after now; next_at the first occurrence
    not yet enqueued (in the past: missed, and caught up by the next tick as
    catch_up says: "latest", "all" or "skip").
    """

    name: str
    queue: str
    payload: dict[str, Any]
    cron: str | None
    timezone: str
    every: timedelta | None
    priority: int
    max_attempts: int | None
    headers: dict[str, Any] | None
    catch_up: str
    next_at: datetime | None
    next_run: datetime | None
    created_at: datetime
    updated_at: datetime


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
    starts with its first occurrence after now.
    """
    params = {
        "name": _text("name", name),
        "queue": _text("queue", queue),
        "payload": dump_payload({} if payload is None else payload),
        "cron": _optional(_text, "cron", cron),
        "timezone": _text("timezone", timezone),
        "every": _optional(_timedelta, "every", every),
        "priority": _integer("priority", priority),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "headers": None if headers is None else dump_payload(headers, "headers"),
        "catch_up": _text("catch_up", catch_up),
    }
    with translated(), conn.cursor(row_factory=class_row(Schedule)) as cur:
        row = cur.execute(query("schedule"), params).fetchone()
    assert row is not None  # the function returns one row
    return row


def unschedule(conn: Conn, name: str) -> bool:
    """Delete the schedule name and cancel its occurrences still queued (running ones finish); False when
    there was no such schedule."""
    return bool(_fetch(conn, "unschedule", {"name": _text("name", name)})[0][0])


def schedules(conn: Conn) -> list[Schedule]:
    """Every schedule, by name."""
    with translated(), conn.cursor(row_factory=class_row(Schedule)) as cur:
        return cur.execute(query("schedules")).fetchall()


def tick(conn: Conn) -> int:
    """Enqueue the occurrences of every schedule due within the minute ahead (and those missed, as each
    schedule's catch_up says); return how many jobs it enqueued.  Ticks at once share the work."""
    return int(_fetch(conn, "tick")[0][0])
