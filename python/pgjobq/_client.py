"""Calls into the extension on the caller's own connection.

Nothing here commits: each function runs on the connection it is given, in
that connection's current transaction, so an application enqueues atomically
with its own writes.  Database errors the extension raises on purpose come
back as pgjobq exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row, tuple_row

from pgjobq._errors import InvalidArgument, translate
from pgjobq._job import Job
from pgjobq._queries import query

__all__ = [
    "Health",
    "QueueStats",
    "channel",
    "claim",
    "complete",
    "complete_and_claim",
    "complete_many",
    "enqueue",
    "enqueue_many",
    "fail",
    "health",
    "heartbeat",
    "heartbeat_many",
    "purge",
    "reap",
    "release",
    "retry_failed",
    "stats",
    "wait",
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
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{argument} is not serialisable as JSON: {exc}") from exc
    # json escapes U+0000 as \u0000 and leaves lone surrogates as they are, so
    # the text says cheaply whether any string needs a closer look.
    suspicious = "\\u0000" in text or not _encodable(text)
    problem = _unstorable(payload, argument, strings=suspicious)
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


DEFAULT_LEASE_TIMEOUT = timedelta(seconds=60)  # jobq.claim's own default


def _held(job_id: object, lease: object) -> dict[str, int]:
    """The parameters naming one claim of a job."""
    return {"id": _bigint("id", job_id), "lease": _bigint("lease", lease)}


def enqueue(
    conn: Conn,
    queue: str,
    payload: Mapping[str, Any],
    *,
    priority: int = 0,
    run_at: datetime | None = None,
    max_attempts: int = 3,
) -> int:
    """Enqueue one job in conn's current transaction; return its id.

    run_at None means now (the database's clock); otherwise it must be
    timezone-aware.  Arguments of the wrong type and payloads jsonb cannot
    store raise InvalidArgument before any SQL is sent.
    """
    params = {
        "queue": _text("queue", queue),
        "payload": dump_payload(payload),
        "priority": _integer("priority", priority),
        "run_at": _moment("run_at", run_at),
        "max_attempts": _integer("max_attempts", max_attempts),
    }
    return int(_fetch(conn, "enqueue", params)[0][0])


def enqueue_many(
    conn: Conn,
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    priority: int = 0,
    run_at: datetime | None = None,
    max_attempts: int = 3,
) -> list[int]:
    """Enqueue many jobs in one statement; return their ids in the order of payloads.

    All or nothing: a bad element (named payloads[i], counting from 1, as the
    database does) raises before anything is inserted.  The payloads travel
    as one JSON array, which jsonb limits to 256 MB per call.
    """
    params = {
        "queue": _text("queue", queue),
        "payloads": dump_payloads(payloads),
        "priority": _integer("priority", priority),
        "run_at": _moment("run_at", run_at),
        "max_attempts": _integer("max_attempts", max_attempts),
    }
    return [int(i) for i in _fetch(conn, "enqueue_many", params)[0][0]]


def claim(
    conn: Conn, queue: str, n: int, worker: str, *, lease_timeout: timedelta = DEFAULT_LEASE_TIMEOUT
) -> list[Job]:
    """Claim up to n runnable jobs of queue for worker, each under a lease that expires after lease_timeout.

    Heartbeats extend a lease by its own lease_timeout; jobq.reap recovers
    the job once it has expired.
    """
    params = {
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _timedelta("lease_timeout", lease_timeout),
    }
    return claim_unchecked(conn, params)


# The Worker's hot path: the same statements with arguments the Worker
# checked once (its settings) or that the database itself returned (ids and
# leases), so nothing is checked again for each job.


def claim_unchecked(conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None) -> list[Job]:
    """claim, its parameters (queue, n, worker, lease_timeout) taken as they are."""
    return [Job(*row) for row in _fetch(conn, "claim", params, prepare=prepare)]


def complete_and_claim_unchecked(
    conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None
) -> tuple[set[int], list[Job]]:
    """complete_and_claim, its parameters (ids, leases and claim's) taken as they are."""
    acknowledged: set[int] = set()
    claimed: list[Job] = []
    for status, *job in _fetch(conn, "complete_and_claim", params, prepare=prepare):
        if status == "done":
            acknowledged.add(job[0])
        else:
            claimed.append(Job(*job))
    return acknowledged, claimed


def complete_many_unchecked(
    conn: Conn, ids: list[int], leases: list[int], *, prepare: bool | None = None
) -> set[int]:
    """complete_many for ids and leases (lists of one length) taken as they are."""
    return {r[0] for r in _fetch(conn, "complete_many", {"ids": ids, "leases": leases}, prepare=prepare)}


def heartbeat_many_unchecked(
    conn: Conn, ids: list[int], leases: list[int], *, prepare: bool | None = None
) -> set[int]:
    """heartbeat_many for ids and leases (lists of one length) taken as they are."""
    return {r[0] for r in _fetch(conn, "heartbeat_many", {"ids": ids, "leases": leases}, prepare=prepare)}


def wait_unchecked(
    conn: Conn, params: Mapping[str, Any], *, prepare: bool | None = None
) -> tuple[bool, datetime | None, timedelta | None]:
    """wait, its parameters (queue, worker, up_to) taken as they are; also how far ahead next_run_at is,
    by the database's clock."""
    registered, next_run_at, next_run_in = _fetch(conn, "wait", params, prepare=prepare)[0]
    return bool(registered), next_run_at, next_run_in


def complete(conn: Conn, job_id: int, lease: int) -> None:
    """Mark a running job done; LeaseLost if the lease is no longer current."""
    _fetch(conn, "complete", _held(job_id, lease))


def complete_many(conn: Conn, acks: Sequence[tuple[int, int]]) -> set[int]:
    """Acknowledge many (id, lease) pairs in one statement; return the ids accepted.

    Pairs missing from the result had a stale lease (or an unknown id).
    """
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    return complete_many_unchecked(conn, [p["id"] for p in pairs], [p["lease"] for p in pairs])


def complete_and_claim(
    conn: Conn,
    acks: Sequence[tuple[int, int]],
    queue: str,
    n: int,
    worker: str,
    *,
    lease_timeout: timedelta = DEFAULT_LEASE_TIMEOUT,
) -> tuple[set[int], list[Job]]:
    """Acknowledge (id, lease) pairs and claim up to n more jobs of queue, in one statement.

    Returns the ids acknowledged (pairs left out had a stale lease) and the
    jobs claimed, under leases of lease_timeout as with claim.  If the
    claim's arguments are refused, nothing is acknowledged either.
    """
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    params = {
        "ids": [p["id"] for p in pairs],
        "leases": [p["lease"] for p in pairs],
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _timedelta("lease_timeout", lease_timeout),
    }
    return complete_and_claim_unchecked(conn, params)


def fail(conn: Conn, job_id: int, error: str, lease: int) -> tuple[str, datetime]:
    """Record a failure; return the job's new status (queued or failed) and run_at."""
    params = {**_held(job_id, lease), "error": _text("error", error)}
    status, run_at = _fetch(conn, "fail", params)[0]
    return str(status), run_at


def heartbeat(conn: Conn, job_id: int, lease: int) -> None:
    """Extend a running job's lease; LeaseLost if it is no longer current."""
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


def wait(conn: Conn, queue: str, worker: str, up_to: timedelta) -> tuple[bool, datetime | None]:
    """Register worker as waiting on queue for up_to, so that enqueues committed meanwhile notify its channel.

    Returns (registered, next_run_at).  registered False: a producer of
    the queue had a transaction in flight (or another worker was
    registering), nothing was registered; claim again shortly.  True: claim
    once more before sleeping (jobs committed before the registration were
    not notified).  next_run_at is the earliest run_at still in the future
    among the queue's queued jobs (None when none): sleep until then at
    most.  Run it in a transaction of its own (an autocommit connection):
    the registration counts from its commit.
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
    """One queue's counts, as jobq.stats() reports them."""

    queue: str
    queued: int
    runnable: int
    running: int
    done: int
    failed: int
    oldest_queued_age: timedelta | None


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
