"""The asyncio workload's worker (workloads.AsyncioTask runs it): pgjobq.AsyncWorker beside the sync
pgjobq.Worker, one process each.

One worker process drains a backlog with ``asyncio_concurrency`` handlers
at once: the AsyncWorker as that many asyncio tasks of one event loop
(coroutine handlers, ``await asyncio.sleep(work)``), the sync Worker as
that many handler threads (``WorkerSettings(concurrency=N)``,
``time.sleep(work)``), both with ``batch = asyncio_batch`` and their
defaults otherwise.  Zero work and 5 ms of work; the two alternate in
every repeat.  As for the other workloads, each worker passes the start
barrier after its first connect, so its start-up stays out of the timing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pgjobq

from .base import Target, WorkerHooks
from .pgjobq_worker import _GatedWorker, run_until, worker_settings

__all__ = ["KINDS", "run_worker"]

KINDS = ("sync", "async")  # the sync Worker (threads), the AsyncWorker (tasks)
STOP_POLL = 0.01


class _GatedAsyncWorker(pgjobq.AsyncWorker):
    """pgjobq.AsyncWorker that calls gate once: after its first connect, before its first claim."""

    def __init__(self, conninfo: str, handler: Any, settings: pgjobq.WorkerSettings, gate: Any) -> None:
        super().__init__(conninfo, handler, settings)
        self._gate = gate

    async def _connect(self) -> None:
        await super()._connect()
        gate, self._gate = self._gate, None
        if gate is not None:
            gate()


def run_worker(
    kind: str, target: Target, batch: int, concurrency: int, work_seconds: float, hooks: WorkerHooks
) -> None:
    """One worker process: kind "sync" or "async", concurrency handlers at once, work_seconds each."""
    settings = worker_settings(batch, concurrency=concurrency)
    processed, work = hooks.processed, work_seconds
    if kind == "sync":

        def handler(job: pgjobq.Job) -> None:
            if work:
                time.sleep(work)
            processed(1)

        run_until(_GatedWorker(target.dsn, handler, settings, hooks.ready), hooks.should_stop)
        return

    async def coroutine(job: pgjobq.Job) -> None:
        if work:
            await asyncio.sleep(work)
        processed(1)

    async def main() -> None:
        worker = _GatedAsyncWorker(target.dsn, coroutine, settings, hooks.ready)
        running = asyncio.ensure_future(worker.run(install_signal_handlers=False))
        while not running.done():
            if hooks.should_stop():
                worker.stop()
                break
            await asyncio.sleep(STOP_POLL)
        await running

    asyncio.run(main())
