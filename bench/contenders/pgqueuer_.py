"""PgQueuer 1.6, with the settings its documentation gives for throughput.

Settings, and why (PgQueuer's docs: "Performance Tuning" guide
docs/guides/performance-tuning.md, "Benchmarks" docs/comparisons/benchmarks.md,
and its own benchmark tool tools/benchmark.py):
- The asyncpg driver (``AsyncpgDriver``) on one direct connection per
  worker: the benchmarks page measures asyncpg at about 1.7x psycopg, and the
  tuning guide says to give the ``QueueManager`` a direct asyncpg connection,
  not a pool.  The event loop is uvloop, as ``pgq run`` uses when installed.
- ``batch_size = batch``: "Jobs fetched per dequeue round-trip"; the guide
  says to raise it for short jobs.  Completions are written by PgQueuer's own
  buffer, flushed every ``batch_size`` jobs (and on a timer).
- ``pgq autovac``'s recommended autovacuum and fillfactor settings on its
  tables (``Queries.optimize_autovacuum``), the first item of the guide's
  checklist.
- Durability ``durable`` (the default, all tables logged): the guide's
  faster ``balanced``/``volatile`` levels lose jobs on a crash, and every
  other PostgreSQL contender here is logged.
- One job at a time per worker process: the handler is ``async`` and, for
  the work workload, blocks in ``time.sleep`` as the suite's rules say, so a
  batch's jobs run one after another and 5 ms of work stays 200 jobs/s per
  worker.  No ``max_concurrent_tasks`` or per-entrypoint limit.
- Enqueue: one ``Queries.enqueue`` call with lists (its batch insert).
- Stopping: a task polls ``should_stop`` every 10 ms and sets the manager's
  ``shutdown`` event, the documented way to end ``run``; PgQueuer then
  finishes the jobs it picked and flushes its completion buffer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
import uvloop
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from psycopg.conninfo import conninfo_to_dict

from .base import Contender, Target, WorkerHooks

__all__ = ["PgQueuerContender"]

ENTRYPOINT = "bench"
STOP_POLL = 0.01
ENQUEUE_CHUNK = 100_000


async def _connect(dsn: str) -> Any:
    """An asyncpg connection from a libpq connection string (asyncpg only reads URIs)."""
    params = conninfo_to_dict(dsn)
    return await asyncpg.connect(
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
    )


class PgQueuerContender(Contender):
    name = "pgqueuer"
    label = "PgQueuer (asyncpg)"
    batches = None

    def setup(self, target: Target) -> None:
        uvloop.run(self._setup(target.dsn))

    async def _setup(self, dsn: str) -> None:
        connection = await _connect(dsn)
        try:
            queries = Queries(AsyncpgDriver(connection))
            if not await queries.schema_is_installed():
                await queries.install()
            await queries.optimize_autovacuum()
        finally:
            await connection.close()

    def reset(self, target: Target) -> None:
        uvloop.run(self._reset(target.dsn))

    async def _reset(self, dsn: str) -> None:
        connection = await _connect(dsn)
        try:
            queries = Queries(AsyncpgDriver(connection))
            await queries.clear_queue()
            await queries.clear_queue_log()
            await queries.clear_statistics_log()
        finally:
            await connection.close()

    def enqueue(self, target: Target, count: int) -> None:
        uvloop.run(self._enqueue(target.dsn, count))

    async def _enqueue(self, dsn: str, count: int) -> None:
        connection = await _connect(dsn)
        try:
            queries = Queries(AsyncpgDriver(connection))
            for start in range(0, count, ENQUEUE_CHUNK):
                size = min(ENQUEUE_CHUNK, count - start)
                await queries.enqueue(
                    [ENTRYPOINT] * size,
                    [json.dumps({"i": i}).encode() for i in range(start, start + size)],
                    [0] * size,
                )
        finally:
            await connection.close()

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        uvloop.run(self._work(target.dsn, batch, work_seconds, hooks))

    async def _work(self, dsn: str, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        connection = await _connect(dsn)
        try:
            manager = QueueManager(Queries(AsyncpgDriver(connection)))

            @manager.entrypoint(ENTRYPOINT)
            async def handle(job: Job) -> None:
                _ = json.loads(job.payload or b"{}")["i"]
                if work_seconds:
                    time.sleep(work_seconds)
                hooks.processed(1)

            async def stop_when_told() -> None:
                while not hooks.should_stop():
                    await asyncio.sleep(STOP_POLL)
                manager.shutdown.set()

            stopper = asyncio.create_task(stop_when_told())
            hooks.ready()
            try:
                await manager.run(batch_size=batch)
            finally:
                stopper.cancel()
        finally:
            await connection.close()
