"""The benchmark's machinery: the servers, the worker processes, the clock.

- ``Servers`` starts one throwaway PostgreSQL (tools/throwaway_pg.py, durable
  defaults: fsync and synchronous_commit on) for every contender, and one
  Redis (redis_server.py: Debian's redis-server, persistence off, as the
  article ran it) when a contender needs it; each contender gets a fresh
  database of its own.
- ``WorkerPool`` keeps ``size`` worker processes (multiprocessing, spawn)
  for the whole run, so a measured run never pays Python's start-up and
  imports.  A run sends one task to each of k processes; each connects,
  calls ``ready()`` and waits at the start barrier; once all k are ready the
  driver reads the clock and releases them.  Every processed job is added to
  one shared counter; the process whose report brings it to the goal reads
  the clock (CLOCK_MONOTONIC, the same in every process) and that is the end
  of the run.  A run that has not reached its goal after its time limit is
  stopped there and reported as capped, with the jobs processed so far.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import queue
import subprocess
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

from contenders._util import describe
from contenders.base import Contender, Target, WorkerHooks

if TYPE_CHECKING:
    from redis_server import ThrowawayRedis

__all__ = ["ImportTask", "Measured", "Servers", "Task", "WorkTask", "WorkerPool"]

CTX = multiprocessing.get_context("spawn")

USER_TABLES = """
SELECT n.nspname, c.relname
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
"""

READY_TIMEOUT = 120.0  # seconds for every process of a run to connect and set up
FINISH_TIMEOUT = 60.0  # seconds for the processes to return after the stop


# -- servers --------------------------------------------------------------------------


class Servers:
    """One PostgreSQL (and Redis when asked) for the whole benchmark run."""

    def __init__(self, *, redis: bool) -> None:
        self.pg = ThrowawayPostgres(fast=False)
        self._want_redis = redis
        self._redis: ThrowawayRedis | None = None
        self.redis_url: str | None = None
        self.redis_note = ""

    def __enter__(self) -> Servers:
        self.pg.start()
        if self._want_redis:
            self._start_redis()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._redis is not None:
            self._redis.remove()
        self.pg.remove()

    def _start_redis(self) -> None:
        """Start redis_server.ThrowawayRedis (persistence off); if it cannot start, say why in redis_note."""
        try:
            from redis_server import ThrowawayRedis  # needs the redis package (the bench extra)

            server = ThrowawayRedis()
            server.start()
        except (ImportError, RuntimeError) as exc:
            self.redis_note = str(exc).strip().splitlines()[0]
            return
        self._redis = server
        self.redis_url = server.url()
        version = subprocess.run(
            [str(server.program), "--version"], capture_output=True, text=True, check=False
        )
        self.redis_note = version.stdout.strip()

    def admin(self) -> psycopg.Connection[Any]:
        """An autocommit superuser connection to the postgres database."""
        return psycopg.connect(self.pg.dsn(), autocommit=True)

    def create_database(self, name: str) -> Target:
        """A fresh database (dropped first if a previous step left it) and its target."""
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return Target(dsn=self.pg.dsn(name), redis_url=self.redis_url)

    def settle(self, dsn: str, *, checkpoint: bool = True) -> None:
        """ANALYZE the database's own tables, then CHECKPOINT (unless told not to): every run starts
        with fresh statistics and no checkpoint pending, whoever ran before."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            tables = [sql.Identifier(schema, name) for schema, name in conn.execute(USER_TABLES).fetchall()]
            if tables:
                conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(tables)))
            if checkpoint:
                conn.execute("CHECKPOINT")


# -- worker processes -------------------------------------------------------------------


@dataclass
class _Shared:
    """What the driver and every worker process share; created once, before the processes."""

    counter: Synchronized[int]
    goal: Synchronized[int]
    end: Synchronized[float]
    first: ctypes.c_double  # written under counter's lock
    ready: Synchronized[int]
    stop: ctypes.c_int  # read without a lock: one int
    release: Event
    done: Event


def _new_shared() -> _Shared:
    return _Shared(
        counter=CTX.Value(ctypes.c_longlong, 0),
        goal=CTX.Value(ctypes.c_longlong, 0),
        end=CTX.Value(ctypes.c_double, 0.0),
        first=CTX.RawValue(ctypes.c_double, 0.0),
        ready=CTX.Value(ctypes.c_int, 0),
        stop=CTX.RawValue(ctypes.c_int, 0),
        release=CTX.Event(),
        done=CTX.Event(),
    )


def _hooks(shared: _Shared) -> WorkerHooks:
    """The WorkerHooks of a worker process: start barrier, shared counter, stop flag."""

    def ready() -> None:
        with shared.ready.get_lock():
            shared.ready.value += 1
        shared.release.wait()

    def processed(count: int) -> None:
        if count <= 0:
            return
        with shared.counter.get_lock():
            if shared.counter.value == 0:
                shared.first.value = time.perf_counter()
            shared.counter.value += count
            reached = shared.counter.value >= shared.goal.value and shared.end.value == 0.0
            if reached:
                shared.end.value = time.perf_counter()
        if reached:
            shared.done.set()

    def should_stop() -> bool:
        return bool(shared.stop.value)

    return WorkerHooks(ready=ready, processed=processed, should_stop=should_stop)


class Task(ABC):
    """What a worker process runs for one measured run (pickled to it)."""

    @abstractmethod
    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        """Connect, call hooks.ready(), work until hooks.should_stop()."""


@dataclass(frozen=True)
class WorkTask(Task):
    """A contender's worker loop."""

    contender: type[Contender]
    target: Target
    batch: int
    work_seconds: float

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        self.contender().work(self.target, self.batch, self.work_seconds, hooks)


def _child_main(index: int, inbox: Connection, outbox: Queue[tuple[Any, ...]], shared: _Shared) -> None:
    """A worker process: run the tasks the driver sends, one at a time, until it sends None.

    Each task comes with the number of its run; the process answers ("finished", run, index, error),
    error None or the exception on one line, then its traceback.
    """
    hooks = _hooks(shared)
    while True:
        try:
            sent = inbox.recv()
        except EOFError:
            return
        if sent is None:
            return
        run, task = sent
        error: str | None = None
        try:
            task.run(hooks, outbox)
        except BaseException as exc:
            error = f"{describe(exc)}\n{traceback.format_exc()}"
        outbox.put(("finished", run, index, error))


@dataclass(frozen=True)
class ImportTask(Task):
    """Import modules in a worker process ahead of the runs (so no run's start pays for it)."""

    modules: tuple[str, ...]

    def run(self, hooks: WorkerHooks, outbox: Queue[tuple[Any, ...]]) -> None:
        for module in self.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(module)


@dataclass
class Measured:
    """One measured run: jobs processed in seconds, capped by the time limit or not, or an error."""

    processed: int
    seconds: float
    capped: bool = False
    error: str | None = None  # its first line says what failed (``summary``), a traceback may follow
    first_job: float | None = None  # seconds from the release to the first job processed
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent around the run, by phase

    @property
    def rate(self) -> float:
        return self.processed / self.seconds if self.seconds > 0 else 0.0

    @property
    def summary(self) -> str:
        """The error's first line ("" without an error)."""
        return (self.error or "").strip().split("\n", 1)[0]


@dataclass
class _Child:
    process: BaseProcess
    inbox: Connection


@dataclass
class WorkerPool:
    """``size`` long-lived worker processes; see the module docstring."""

    size: int
    shared: _Shared = field(default_factory=_new_shared)
    outbox: Queue[tuple[Any, ...]] = field(default_factory=CTX.Queue)
    children: list[_Child] = field(default_factory=list)
    messages: list[tuple[Any, ...]] = field(default_factory=list)
    _running: int = field(default=0, init=False)  # processes given a task in the current run
    _run_number: int = field(default=0, init=False)
    _finished: dict[int, str | None] = field(default_factory=dict, init=False)  # process -> its error

    def __enter__(self) -> WorkerPool:
        for index in range(self.size):
            self.children.append(self._spawn(index))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for child in self.children:
            with contextlib.suppress(OSError):
                child.inbox.send(None)
        for child in self.children:
            child.process.join(5)
            if child.process.is_alive():
                child.process.kill()
                child.process.join()

    def _spawn(self, index: int) -> _Child:
        receiving, sending = CTX.Pipe(duplex=False)
        process = CTX.Process(
            target=_child_main,
            args=(index, receiving, self.outbox, self.shared),
            name=f"bench-worker-{index}",
            daemon=True,
        )
        process.start()
        receiving.close()
        return _Child(process, sending)

    def preload(self, modules: list[str]) -> None:
        """Have every process import these modules now, in the background (answers are dropped)."""
        self._run_number += 1
        for child in self.children:
            child.inbox.send((self._run_number, ImportTask(tuple(modules))))

    def _replace(self, index: int) -> None:
        """Kill a process that did not return and start a fresh one in its place."""
        old = self.children[index]
        if old.process.is_alive():
            old.process.kill()
        old.process.join()
        self.children[index] = self._spawn(index)

    # -- one run ----------------------------------------------------------------------

    def _receive(self, timeout: float) -> tuple[Any, ...] | None:
        try:
            message = self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if message[0] == "finished":
            _, run, index, error = message
            if run == self._run_number:  # a late answer from an earlier run is dropped
                self._finished[index] = error
        else:
            self.messages.append(message)
        return message

    def take_messages(self, kind: str) -> list[tuple[Any, ...]]:
        """The messages of one kind that tasks sent (besides "finished"), oldest first; forgets them."""
        while self._receive(0) is not None:
            pass
        taken = [m for m in self.messages if m[0] == kind]
        self.messages = [m for m in self.messages if m[0] != kind]
        return taken

    def start(self, tasks: list[Task], goal: int) -> float:
        """Send the tasks, wait until every process is ready, release them; return the start time.

        Raises RuntimeError (after stopping the others) when a process fails before it is ready.
        """
        if len(tasks) > self.size:
            raise ValueError(f"{len(tasks)} tasks for {self.size} worker processes")
        shared = self.shared
        shared.release.clear()
        shared.done.clear()
        shared.stop.value = 0
        shared.counter.value = 0
        shared.goal.value = goal
        shared.end.value = 0.0
        shared.first.value = 0.0
        shared.ready.value = 0
        self._running = len(tasks)
        self._finished = {}
        self._run_number += 1
        for child, task in zip(self.children, tasks, strict=False):
            child.inbox.send((self._run_number, task))
        deadline = time.monotonic() + READY_TIMEOUT
        while shared.ready.value < len(tasks):
            self._receive(0.005)
            if self._finished:
                error = next(iter(self._finished.values())) or "a task returned before calling ready()"
                self.finish()
                raise RuntimeError(f"a worker process failed before it was ready: {error}")
            if time.monotonic() > deadline:
                self.finish()
                raise RuntimeError(f"worker processes not ready after {READY_TIMEOUT:.0f} s")
        started = time.perf_counter()
        shared.release.set()
        return started

    @property
    def processed(self) -> int:
        return int(self.shared.counter.value)

    def wait(self, started: float, limit: float, tick: Callable[[float], None] | None = None) -> Measured:
        """Wait for the goal (or the time limit, or a failure); tick(elapsed) is called every 0.1 s."""
        shared = self.shared
        deadline = started + limit
        while True:
            if shared.done.wait(0.1):
                return self._measured(started, shared.end.value - started)
            now = time.perf_counter()
            if tick is not None:
                tick(now - started)
            while self._receive(0) is not None:
                pass
            failed = [error for error in self._finished.values() if error]
            if failed:
                return self._measured(started, now - started, error=failed[0])
            if len(self._finished) == self._running:
                return self._measured(started, now - started, error="every worker returned before the goal")
            if now >= deadline:
                return self._measured(started, now - started, capped=True)

    def _measured(self, started: float, seconds: float, **outcome: Any) -> Measured:
        first = self.shared.first.value
        return Measured(self.processed, seconds, first_job=first - started if first else None, **outcome)

    def finish(self) -> list[str]:
        """Tell the processes to stop and wait for them to return; return the errors they raised."""
        self.shared.stop.value = 1
        self.shared.release.set()  # a process still waiting at the barrier returns at once
        deadline = time.monotonic() + FINISH_TIMEOUT
        while len(self._finished) < self._running and time.monotonic() < deadline:
            self._receive(0.05)
        errors = [error for error in self._finished.values() if error]
        for index in range(self._running):
            if index not in self._finished:
                errors.append(f"worker process {index} did not return within {FINISH_TIMEOUT:.0f} s; killed")
                self._replace(index)
        self._running = 0
        return errors

    def measure(self, tasks: list[Task], goal: int, limit: float) -> Measured:
        """One run: start, wait for the goal or the limit, stop; the first error, if any, in the result."""
        before = time.perf_counter()
        started = self.start(tasks, goal)
        try:
            measured = self.wait(started, limit)
        finally:
            stopping = time.perf_counter()
            errors = self.finish()
        measured.phases.update(start=started - before, finish=time.perf_counter() - stopping)
        if measured.error is None and errors:
            measured.error = errors[0]
        return measured


@contextlib.contextmanager
def timer() -> Iterator[Callable[[], float]]:
    """``with timer() as elapsed:`` ... ``elapsed()`` is the seconds spent in the block (so far)."""
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


def cpu_count() -> int:
    return os.cpu_count() or 1
