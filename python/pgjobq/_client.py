"""Calls into the extension on the caller's own connection.

Nothing here commits: each function runs on the connection it is given, in
that connection's current transaction, so an application enqueues atomically
with its own writes.  Database errors the extension raises on purpose come
back as pgjobq exceptions.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row, tuple_row

from pgjobq._errors import InvalidArgument, translate
from pgjobq._job import Job
from pgjobq._queries import query

__all__ = [
    "QueueStats",
    "channel",
    "claim",
    "complete",
    "complete_many",
    "enqueue",
    "enqueue_many",
    "fail",
    "heartbeat",
    "reap",
    "release",
    "retry_failed",
    "stats",
]

Conn = psycopg.Connection[Any]


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise the extension's deliberate errors as pgjobq exceptions."""
    try:
        yield
    except psycopg.Error as exc:
        error = translate(exc)
        if error is None:
            raise
        raise error from exc


def _fetch(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Run the named statement on conn and return its rows as tuples, whatever conn's row factory."""
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query(name), params).fetchall()


def dump_payload(payload: Mapping[str, Any], argument: str = "payload") -> str:
    """payload as JSON text; InvalidArgument before any SQL when it is not a JSON object."""
    if not isinstance(payload, Mapping):
        raise InvalidArgument(f"{argument} must be a mapping (a JSON object), got {type(payload).__name__}")
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{argument} is not serialisable as JSON: {exc}") from exc


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

    run_at None means now (the database's clock).
    """
    params = {
        "queue": queue,
        "payload": dump_payload(payload),
        "priority": priority,
        "run_at": run_at,
        "max_attempts": max_attempts,
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
    """Enqueue many jobs in one statement; return their ids in the order of payloads."""
    dumped = [dump_payload(p, f"payloads[{i}]") for i, p in enumerate(payloads, start=1)]
    params = {
        "queue": queue,
        "payloads": dumped,
        "priority": priority,
        "run_at": run_at,
        "max_attempts": max_attempts,
    }
    return [int(i) for i in _fetch(conn, "enqueue_many", params)[0][0]]


def claim(conn: Conn, queue: str, n: int, worker: str) -> list[Job]:
    """Claim up to n runnable jobs of queue for worker."""
    with translated(), conn.cursor(row_factory=class_row(Job)) as cur:
        return cur.execute(query("claim"), {"queue": queue, "n": n, "worker": worker}).fetchall()


def complete(conn: Conn, job_id: int, lease: int) -> None:
    """Mark a running job done; LeaseLost if the lease is no longer current."""
    _fetch(conn, "complete", {"id": job_id, "lease": lease})


def complete_many(conn: Conn, acks: Sequence[tuple[int, int]]) -> set[int]:
    """Acknowledge many (id, lease) pairs in one statement; return the ids accepted.

    Pairs missing from the result had a stale lease (or an unknown id).
    """
    params = {"ids": [a[0] for a in acks], "leases": [a[1] for a in acks]}
    return {int(r[0]) for r in _fetch(conn, "complete_many", params)}


def fail(conn: Conn, job_id: int, error: str, lease: int) -> tuple[str, datetime]:
    """Record a failure; return the job's new status (queued or failed) and run_at."""
    status, run_at = _fetch(conn, "fail", {"id": job_id, "error": error, "lease": lease})[0]
    return str(status), run_at


def heartbeat(conn: Conn, job_id: int, lease: int) -> None:
    """Extend a running job's lease; LeaseLost if it is no longer current."""
    _fetch(conn, "heartbeat", {"id": job_id, "lease": lease})


def release(conn: Conn, job_id: int, lease: int) -> None:
    """Hand a claimed, unstarted job back to its queue without counting the attempt."""
    _fetch(conn, "release", {"id": job_id, "lease": lease})


def reap(conn: Conn, stale: timedelta = timedelta(seconds=60)) -> list[tuple[int, str, str]]:
    """Recover jobs whose lease is older than stale; return (id, queue, new status) of each."""
    if not isinstance(stale, timedelta) or stale <= timedelta(0):
        raise InvalidArgument(f"stale must be a positive timedelta, got {stale!r}")
    return [(int(r[0]), str(r[1]), str(r[2])) for r in _fetch(conn, "reap", {"stale": stale})]


def retry_failed(conn: Conn, queue: str | None = None, ids: Sequence[int] | None = None) -> list[int]:
    """Redrive failed jobs (of queue, among ids, when given) to queued; return their ids."""
    params = {"queue": queue, "ids": list(ids) if ids is not None else None}
    return [int(r[0]) for r in _fetch(conn, "retry_failed", params)]


def channel(conn: Conn, queue: str) -> str:
    """The notification channel of queue."""
    return str(_fetch(conn, "channel", {"queue": queue})[0][0])


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
