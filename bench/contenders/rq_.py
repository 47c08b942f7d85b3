"""RQ 3.0 with its non-forking ``SimpleWorker``, on the throwaway Redis.

Settings, and why (RQ's docs, python-rq.org: "Notes on Performance"
docs/benchmark.md, "Workers", "Results", "Jobs"):
- ``SimpleWorker``: "Notes on Performance" measures it about 6x the default
  forking ``Worker`` because it runs jobs in process, and names jobs of
  single-digit milliseconds as its use.  One worker per process: an RQ
  worker runs one job at a time and has no batch knob, so only batch 1 is
  measured.
- ``result_ttl = 0`` on every job: the return value is not stored and the
  job is deleted when it succeeds (the Results page), so finished jobs do
  not pile up in Redis.
- Worker logging at WARNING with ``log_job_description = False`` (the
  ``--quiet`` and ``--disable-job-desc-logging`` options of ``rq worker``):
  RQ otherwise logs two INFO lines per job.
- Enqueue: ``Queue.enqueue_many`` of ``Queue.prepare_data`` items in one
  pipeline ("Bulk Job Enqueueing" in the docs on queues).
- Stopping: a thread polls ``should_stop`` every 10 ms and sends RQ's
  ``shutdown`` command (``rq.command.send_shutdown_command``), a warm
  shutdown: the worker finishes its current job, then leaves its loop.

The job function is module level, as RQ imports jobs by dotted name; what it
does in this worker process (sleep, count) it finds in a context variable
that ``work`` sets.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass

import redis
from rq import Queue, SimpleWorker
from rq.command import send_shutdown_command
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT

from ._util import RedisContender, chunks, do_work, redis_client, stop_when
from .base import Target, WorkerHooks

__all__ = ["Rq", "bench_job"]

QUEUE = "bench"
ENQUEUE_CHUNK = 10_000


@dataclass(frozen=True)
class _Handler:
    work_seconds: float
    hooks: WorkerHooks


_handler: contextvars.ContextVar[_Handler] = contextvars.ContextVar("rq_bench_handler")


def bench_job(i: int) -> None:
    """The job RQ runs: the work, if any, then count it."""
    handler = _handler.get()
    do_work(handler.work_seconds)
    handler.hooks.processed(1)


class _BenchWorker(SimpleWorker):
    """A SimpleWorker that tells the driver it is ready once RQ has set it up, then watches for stop."""

    def __init__(self, queue: Queue, connection: redis.Redis, hooks: WorkerHooks) -> None:
        super().__init__([queue], connection=connection, log_job_description=False)
        self._hooks = hooks
        self._watching: threading.Event | None = None

    def bootstrap(
        self,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        super().bootstrap(logging_level, date_format, log_format)
        self._watching = stop_when(
            self._hooks.should_stop, lambda: send_shutdown_command(self.connection, self.name)
        )
        self._hooks.ready()

    def run(self) -> None:
        """Work until told to stop (RQ's loop, with the logging of ``rq worker --quiet``)."""
        try:
            self.work(logging_level="WARNING")
        finally:
            if self._watching is not None:
                self._watching.set()


class Rq(RedisContender):
    name = "rq"
    label = "RQ (SimpleWorker)"
    batches = (1,)
    keys = "rq:*"  # every key RQ keeps: queues, jobs, registries, workers

    def enqueue(self, target: Target, count: int) -> None:
        with redis_client(target) as client:
            queue = Queue(QUEUE, connection=client)
            for numbers in chunks(count, ENQUEUE_CHUNK):
                jobs = [Queue.prepare_data(bench_job, args=(i,), result_ttl=0) for i in numbers]
                with client.pipeline() as pipe:
                    queue.enqueue_many(jobs, pipeline=pipe)
                    pipe.execute()

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        with redis_client(target) as client:
            _handler.set(_Handler(work_seconds, hooks))
            _BenchWorker(Queue(QUEUE, connection=client), client, hooks).run()
