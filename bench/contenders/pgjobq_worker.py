"""pgjobq's own Python Worker, one per worker process.

Each process runs ``pgjobq.Worker`` with ``WorkerSettings(batch=<batch>,
concurrency=1)`` and otherwise its defaults: handlers on the worker's own
thread, LISTEN on its own connection with a 1 s poll underneath, the
successes of a batch acknowledged with the next claim
(``jobq.complete_and_claim``, or by the keeper thread's
``jobq.complete_many`` once the oldest has waited ``ack_interval``, 5 ms),
heartbeats and reaping on.  The handler counts the job (and sleeps
``work_seconds`` first, when there is work); the Worker acknowledges it
right after, so the clock may stop one acknowledgement (at most one batch)
before the last commit.

The Worker connects inside ``run()``.  So that its start-up (two
connections and the LISTEN probe) stays out of the timed run, as the other
contenders connect before calling ``ready()``, the Worker here passes the
start barrier right after its first connect, before its first claim: a
subclass wraps the Worker's ``_connect`` (python/pgjobq/_worker/sync.py).  Should
a later Worker have no ``_connect``, the barrier is passed before ``run()``
and the start-up is timed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pgjobq

from ._util import do_work, stop_when
from .base import Target, WorkerHooks
from .pgjobq_sql import QUEUE, PgjobqContender

__all__ = ["PgjobqWorker", "run_until", "worker_settings"]


def worker_settings(batch: int, **overrides: object) -> pgjobq.WorkerSettings:
    """The settings every benchmark Worker uses (overrides for the latency and soak workloads)."""
    options: dict[str, object] = {
        "queue": QUEUE,
        "batch": batch,
        "concurrency": 1,
        "name": f"bench-worker-{os.getpid()}",
    }
    options.update(overrides)
    return pgjobq.WorkerSettings(**options)  # type: ignore[arg-type]


def run_until(worker: pgjobq.Worker, should_stop: Callable[[], bool]) -> None:
    """Run worker in this thread until should_stop() turns true, then stop it gracefully."""
    ended = stop_when(should_stop, worker.stop)
    try:
        worker.run(install_signal_handlers=False)
    finally:
        ended.set()


class _GatedWorker(pgjobq.Worker):
    """pgjobq.Worker that calls ``gate`` once: after its first connect, before its first claim."""

    def __init__(
        self,
        conninfo: str,
        handler: Callable[[pgjobq.Job], object],
        settings: pgjobq.WorkerSettings,
        gate: Callable[[], None],
    ) -> None:
        super().__init__(conninfo, handler, settings)
        self._gate: Callable[[], None] | None = gate

    def _connect(self) -> None:
        super()._connect()
        gate, self._gate = self._gate, None
        if gate is not None:
            gate()


GATED = callable(getattr(pgjobq.Worker, "_connect", None))


class PgjobqWorker(PgjobqContender):
    """pgjobq.Worker, concurrency 1, batch as measured, its defaults otherwise (LISTEN, 1 s poll)."""

    name = "pgjobq_worker"
    label = "pgjobq Worker"

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        processed = hooks.processed

        def handler(job: pgjobq.Job) -> None:
            do_work(work_seconds)
            processed(1)

        settings = worker_settings(batch)
        if GATED:
            worker: pgjobq.Worker = _GatedWorker(target.dsn, handler, settings, hooks.ready)
        else:
            worker = pgjobq.Worker(target.dsn, handler, settings)
            hooks.ready()
        run_until(worker, hooks.should_stop)
