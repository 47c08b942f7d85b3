"""Helpers the contenders (and the workloads around them) share; not a contender module.

One definition each of what every contender does alike: the payloads
(``{"i": n}``), the handler's work (sleep, or nothing), loading in chunks,
waiting while idle, noticing the driver's stop, a Redis client from the
target and the Redis contenders' reset, rows inserted straight into a table to build its state,
auto_explain for the plans inside a function, and the one-line description of an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from pgjobq._errors import first_line

from .base import Contender, Target, WorkerHooks

if TYPE_CHECKING:
    import redis

__all__ = [
    "STOP_POLL",
    "RedisContender",
    "chunks",
    "describe",
    "do_work",
    "explain_nested",
    "idle",
    "insert_queued",
    "payload_texts",
    "payloads",
    "redis_client",
    "stop_when",
    "until_stop",
]

STOP_POLL = 0.01  # seconds between two looks at the driver's stop flag, in every contender that polls it

# queued jobs %(first)s..%(last)s of queue %(queue)s, straight into {table}, payloads built by the server
QUEUED_SQL = """
INSERT INTO {table} (queue, payload)
SELECT %(queue)s, jsonb_build_object('i', g) FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""


def payloads(numbers: Iterable[int]) -> list[dict[str, Any]]:
    """The payloads of these jobs: ``{"i": 0}``, ``{"i": 1}``, ..."""
    return [{"i": i} for i in numbers]


def payload_texts(numbers: Iterable[int]) -> list[str]:
    """The same payloads as JSON text."""
    return [json.dumps({"i": i}) for i in numbers]


def chunks(count: int, size: int) -> Iterator[range]:
    """0..count-1 in consecutive ranges of at most size numbers (for loading in several calls)."""
    for start in range(0, count, size):
        yield range(start, min(start + size, count))


def do_work(seconds: float) -> None:
    """A handler's work: sleep seconds ("work"), or nothing at all ("zero work")."""
    if seconds > 0:
        time.sleep(seconds)


def idle(hooks: WorkerHooks, seconds: float, step: float = 0.02) -> None:
    """Sleep up to seconds, in steps, returning early once the driver says stop."""
    deadline = time.monotonic() + seconds
    while not hooks.should_stop() and (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(step, remaining))


def stop_when(should_stop: Callable[[], bool], stop: Callable[[], object]) -> threading.Event:
    """Call stop() from a daemon thread once should_stop() turns true (asked every STOP_POLL).

    Set the event returned once the loop watched has returned on its own: the thread then ends.
    """
    ended = threading.Event()

    def watch() -> None:
        while not ended.wait(STOP_POLL):
            if should_stop():
                stop()
                return

    threading.Thread(target=watch, name="bench-stop-watcher", daemon=True).start()
    return ended


async def until_stop(should_stop: Callable[[], bool], ended: Callable[[], bool] = lambda: False) -> None:
    """Return once should_stop() (or ended()) turns true, asking every STOP_POLL: the asyncio watcher."""
    while not should_stop() and not ended():
        await asyncio.sleep(STOP_POLL)


@contextlib.contextmanager
def redis_client(target: Target, **options: Any) -> Iterator[redis.Redis]:
    """A client of the target's Redis (redis-py's from_url with options), closed on exit."""
    import redis  # only the Redis contenders need the package

    if target.redis_url is None:
        raise RuntimeError("the Redis contenders need Target.redis_url")
    client = redis.Redis.from_url(target.redis_url, **options)
    try:
        yield client
    finally:
        client.close()


class RedisContender(Contender):
    """What the Redis contenders do alike: no setup but a reset, which deletes every key they use."""

    needs_redis = True
    #: the pattern (SCAN MATCH) of every key the contender writes
    keys: ClassVar[str]

    def setup(self, target: Target) -> None:
        self.reset(target)

    def reset(self, target: Target) -> None:
        with redis_client(target) as client:
            found = list(client.scan_iter(match=self.keys, count=1000))
            for start in range(0, len(found), 1000):
                client.delete(*found[start : start + 1000])


def insert_queued(conn: psycopg.Connection[Any], table: str, queue: str, first: int, last: int) -> None:
    """Queued jobs first..last of queue inserted straight into table ("schema.name" or "name"): for
    building a table state fast, not for measuring an enqueue."""
    statement = sql.SQL(QUEUED_SQL).format(table=sql.Identifier(*table.split(".")))
    conn.execute(statement, {"queue": queue, "first": first, "last": last})


def describe(exc: BaseException) -> str:
    """An exception on one line: its type and the first line of its message (pgjobq's first_line)."""
    name, line = type(exc).__name__, first_line(exc)
    return name if line == name else f"{name}: {line}"


def explain_nested(conn: psycopg.Connection[Any]) -> list[str]:
    """auto_explain on for conn's session, nested statements included, as notices; returns their list.

    Every statement conn runs from then on, and every statement a function runs for it, has its plan
    (with ANALYZE and BUFFERS) appended to the list.
    """
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_timing", "on"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
    ):
        conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
    return notices
