"""Procrastinate 3.10, with the settings its documentation gives for throughput.

Settings, and why (Procrastinate's docs, procrastinate.readthedocs.io:
"Execute multiple jobs at the same time", "Launch a worker", "Delete finished
jobs", "Batch defer multiple jobs", and ``App.run_worker``'s reference):
- One worker per process, ``concurrency = 1`` (the default): the concurrency
  guide's first way to more throughput is "launch multiple workers, each
  using their own process"; its sub-workers are for asynchronous jobs that
  wait on I/O, and ``run_worker``'s reference says "Do not use concurrency if
  you have synchronous blocking tasks" (the work workload blocks in
  ``time.sleep``).  Procrastinate fetches one job per query and has no batch
  knob, so only batch 1 is measured.
- An ``async`` task, so the job runs on the worker's event loop instead of
  through ``sync_to_async`` in a thread.
- ``delete_jobs = "always"``: finished jobs are deleted on completion, as
  the production guide shows, so the jobs table stays at the queue's depth.
- ``listen_notify = True`` (default): LISTEN/NOTIFY wakes the worker as soon
  as a job is deferred; polling every 5 s (default) underneath.
- ``PsycopgConnector`` (psycopg 3, the connector the docs use) with its
  pool defaults; the app opened with ``open_async``.
- Enqueue: ``batch_defer_async``, "more efficient than deferring them one by
  one".
- Stopping: the worker runs as an asyncio task with
  ``install_signal_handlers=False``; ``task.cancel()`` "requests the worker
  to gracefully stop", which it does after its current job.
"""

from __future__ import annotations

import asyncio
import contextlib

import procrastinate
import psycopg
from psycopg import sql

from ._util import chunks, do_work, payloads, until_stop
from .base import Contender, Target, WorkerHooks

__all__ = ["ProcrastinateContender"]

QUEUE = "bench"
TASK = "bench_job"
DEFER_CHUNK = 100_000
TABLES = (
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_jobs",
    "procrastinate_workers",
)


def _app(dsn: str) -> procrastinate.App:
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))


class ProcrastinateContender(Contender):
    name = "procrastinate"
    label = "Procrastinate"
    batches = (1,)

    def setup(self, target: Target) -> None:
        with psycopg.connect(target.dsn) as conn:
            row = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
        if not (row and row[0]):
            asyncio.run(self._apply_schema(target.dsn))

    async def _apply_schema(self, dsn: str) -> None:
        async with _app(dsn).open_async() as app:
            await app.schema_manager.apply_schema_async()

    def reset(self, target: Target) -> None:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(table) for table in TABLES)
                )
            )

    def enqueue(self, target: Target, count: int) -> None:
        asyncio.run(self._enqueue(target.dsn, count))

    async def _enqueue(self, dsn: str, count: int) -> None:
        app = _app(dsn)

        @app.task(name=TASK, queue=QUEUE)
        async def bench_job(i: int) -> None:
            """Defined here only so that jobs of this task can be deferred."""

        async with app.open_async():
            for numbers in chunks(count, DEFER_CHUNK):
                await bench_job.batch_defer_async(*payloads(numbers))

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        asyncio.run(self._work(target.dsn, work_seconds, hooks))

    async def _work(self, dsn: str, work_seconds: float, hooks: WorkerHooks) -> None:
        app = _app(dsn)

        @app.task(name=TASK, queue=QUEUE)
        async def bench_job(i: int) -> None:
            do_work(work_seconds)
            hooks.processed(1)

        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=1,
                    delete_jobs="always",
                    listen_notify=True,
                    install_signal_handlers=False,
                )
            )
            hooks.ready()
            await until_stop(hooks.should_stop, worker.done)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
