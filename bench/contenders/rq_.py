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
import time
from dataclasses import dataclass

import redis
from rq import Queue, SimpleWorker
from rq.command import send_shutdown_command
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT

from .base import Contender, Target, WorkerHooks

__all__ = ["Rq", "bench_job"]

QUEUE = "bench"
STOP_POLL = 0.01
ENQUEUE_CHUNK = 10_000


@dataclass(frozen=True)
class _Handler:
    work_seconds: float
    hooks: WorkerHooks


_handler: contextvars.ContextVar[_Handler] = contextvars.ContextVar("rq_bench_handler")


def bench_job(i: int) -> None:
    """The job RQ runs: the work, if any, then count it."""
    handler = _handler.get()
    if handler.work_seconds:
        time.sleep(handler.work_seconds)
    handler.hooks.processed(1)


class _BenchWorker(SimpleWorker):
    """A SimpleWorker that tells the driver it is ready once RQ has set it up, then watches for stop."""

    def __init__(self, queue: Queue, connection: redis.Redis, hooks: WorkerHooks) -> None:
        super().__init__([queue], connection=connection, log_job_description=False)
        self._hooks = hooks
        self._finished = threading.Event()

    def bootstrap(
        self,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        super().bootstrap(logging_level, date_format, log_format)
        threading.Thread(target=self._stop_when_told, name="stop-watch", daemon=True).start()
        self._hooks.ready()

    def _stop_when_told(self) -> None:
        while not self._finished.is_set():
            if self._hooks.should_stop():
                send_shutdown_command(self.connection, self.name)
                return
            time.sleep(STOP_POLL)

    def run(self) -> None:
        """Work until told to stop (RQ's loop, with the logging of ``rq worker --quiet``)."""
        try:
            self.work(logging_level="WARNING")
        finally:
            self._finished.set()


def _client(target: Target) -> redis.Redis:
    if target.redis_url is None:
        raise RuntimeError("the Redis contenders need Target.redis_url")
    return redis.Redis.from_url(target.redis_url)


class Rq(Contender):
    name = "rq"
    label = "RQ (SimpleWorker)"
    batches = (1,)
    needs_redis = True

    def setup(self, target: Target) -> None:
        self.reset(target)

    def reset(self, target: Target) -> None:
        """Delete every key RQ keeps (queues, jobs, registries, workers)."""
        client = _client(target)
        try:
            keys = list(client.scan_iter(match="rq:*", count=1000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])
        finally:
            client.close()

    def enqueue(self, target: Target, count: int) -> None:
        client = _client(target)
        try:
            queue = Queue(QUEUE, connection=client)
            for start in range(0, count, ENQUEUE_CHUNK):
                jobs = [
                    Queue.prepare_data(bench_job, args=(i,), result_ttl=0)
                    for i in range(start, min(start + ENQUEUE_CHUNK, count))
                ]
                with client.pipeline() as pipe:
                    queue.enqueue_many(jobs, pipeline=pipe)
                    pipe.execute()
        finally:
            client.close()

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        client = _client(target)
        try:
            _handler.set(_Handler(work_seconds, hooks))
            _BenchWorker(Queue(QUEUE, connection=client), client, hooks).run()
        finally:
            client.close()
