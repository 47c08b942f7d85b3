"""What every contender in the benchmark implements.

A contender is one queue system measured by bench/run.py: pgjobq (SQL API and
Python Worker), the reference article's queue, PgQueuer, Procrastinate, PGMQ,
Redis (LMOVE reliable queue) and RQ.  The driver owns timing, repeats,
interleaving and reporting; a contender only knows how to set itself up, load
jobs and work them.

Rules every implementation keeps, so that figures compare:
- A job's payload is a small JSON object ``{"i": <n>}``; "zero work" means the
  handler does nothing but count the job; "work" means it sleeps
  ``work_seconds``.
- ``work`` runs inside a child process started by the driver (one per worker
  process measured).  It opens its own connections, calls ``ready()`` once it
  is connected and set up, and only then starts taking jobs (the driver
  starts the clock when every process is ready).  It reports each processed
  job exactly once through ``processed(count)`` (batched calls are fine) and
  returns soon after ``should_stop()`` turns true.
- Each contender uses the settings its own documentation recommends for
  throughput, and its docstring says which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Contender", "Target", "WorkerHooks"]


@dataclass(frozen=True)
class Target:
    """Where a contender runs: its own PostgreSQL database, and Redis when it needs one."""

    dsn: str
    redis_url: str | None = None


@dataclass(frozen=True)
class WorkerHooks:
    """How a worker process talks to the driver."""

    ready: Callable[[], None]
    processed: Callable[[int], None]
    should_stop: Callable[[], bool]


class Contender(ABC):
    #: short identifier used on the command line and in file names
    name: ClassVar[str]
    #: label in the report's tables and plots
    label: ClassVar[str]
    #: batch sizes this contender can honour; None means any
    batches: ClassVar[tuple[int, ...] | None] = None
    #: True when the contender needs Redis
    needs_redis: ClassVar[bool] = False

    @abstractmethod
    def setup(self, target: Target) -> None:
        """Create whatever the contender needs (schema, tables, extension) in an empty target."""

    @abstractmethod
    def reset(self, target: Target) -> None:
        """Remove every job, finished or not, so the next run starts from an empty queue."""

    @abstractmethod
    def enqueue(self, target: Target, count: int) -> None:
        """Load count jobs as fast as the contender allows (bulk where it has a bulk path)."""

    @abstractmethod
    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        """The worker loop, run in a child process; see the module docstring."""
