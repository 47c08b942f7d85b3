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
import contextlib
import json
from collections.abc import AsyncIterator

import asyncpg
import uvloop
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from psycopg.conninfo import conninfo_to_dict

from ._util import chunks, do_work, payload_texts, until_stop
from .base import Contender, Target, WorkerHooks

__all__ = ["PgQueuerContender"]

ENTRYPOINT = "bench"
ENQUEUE_CHUNK = 100_000


@contextlib.asynccontextmanager
async def _queries(dsn: str) -> AsyncIterator[Queries]:
    """PgQueuer's queries over one asyncpg connection (opened from a libpq connection string: asyncpg
    only reads URIs), closed on exit."""
    params = conninfo_to_dict(dsn)
    connection = await asyncpg.connect(
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
    )
    try:
        yield Queries(AsyncpgDriver(connection))
    finally:
        await connection.close()


class PgQueuerContender(Contender):
    name = "pgqueuer"
    label = "PgQueuer (asyncpg)"
    batches = None

    def setup(self, target: Target) -> None:
        uvloop.run(self._setup(target.dsn))

    async def _setup(self, dsn: str) -> None:
        async with _queries(dsn) as queries:
            if not await queries.schema_is_installed():
                await queries.install()
            await queries.optimize_autovacuum()

    def reset(self, target: Target) -> None:
        uvloop.run(self._reset(target.dsn))

    async def _reset(self, dsn: str) -> None:
        async with _queries(dsn) as queries:
            await queries.clear_queue()
            await queries.clear_queue_log()
            await queries.clear_statistics_log()

    def enqueue(self, target: Target, count: int) -> None:
        uvloop.run(self._enqueue(target.dsn, count))

    async def _enqueue(self, dsn: str, count: int) -> None:
        async with _queries(dsn) as queries:
            for numbers in chunks(count, ENQUEUE_CHUNK):
                size = len(numbers)
                texts: list[bytes | None] = [text.encode() for text in payload_texts(numbers)]
                await queries.enqueue([ENTRYPOINT] * size, texts, [0] * size)

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        uvloop.run(self._work(target.dsn, batch, work_seconds, hooks))

    async def _work(self, dsn: str, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        async with _queries(dsn) as queries:
            manager = QueueManager(queries)

            @manager.entrypoint(ENTRYPOINT)
            async def handle(job: Job) -> None:
                _ = json.loads(job.payload or b"{}")["i"]
                do_work(work_seconds)
                hooks.processed(1)

            async def stop_when_told() -> None:
                await until_stop(hooks.should_stop)
                manager.shutdown.set()

            stopper = asyncio.create_task(stop_when_told())
            hooks.ready()
            try:
                await manager.run(batch_size=batch)
            finally:
                stopper.cancel()
