"""Worker: claims jobs of one queue, runs a handler on each, reports the outcome.

One thread (the caller's) owns both database connections and does all the
talking to PostgreSQL: claim, acknowledge, heartbeat, reap, release.  Handlers
run on a thread pool of ``concurrency`` threads and never touch the worker's
connections.  The loop:

- claims up to ``batch`` jobs whenever a handler thread is idle;
- acknowledges finished jobs: successes in one ``jobq.complete_many``
  statement, failures one ``jobq.fail`` each (with the lease);
- heartbeats the jobs in hand every ``heartbeat_interval``, so the reaper
  leaves long jobs alone;
- runs ``jobq.reap`` every ``reap_interval``;
- with nothing to do, waits on LISTEN for a notification or
  ``poll_interval``, whichever comes first: a lost notification costs at
  most one poll interval;
- on ``stop()`` (SIGTERM/SIGINT under ``run``): claims nothing more, hands
  claimed-but-unstarted jobs back (``jobq.release``), lets the running ones
  finish, acknowledges them, and returns;
- when the database goes away, reconnects with capped exponential backoff
  and carries on; acknowledgements pending meanwhile are sent afterwards
  (the database refuses any whose lease was reaped in between).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any

import psycopg
from psycopg import sql

from pgjobq import _client
from pgjobq._errors import ConfigurationError, LeaseLost
from pgjobq._job import Job

__all__ = ["Handler", "Worker", "WorkerSettings"]

logger = logging.getLogger("pgjobq.worker")

Handler = Callable[[Job], object]


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker claims, waits and recovers.  Times are in seconds.

    ``lease_timeout`` is the stale interval the worker passes to
    ``jobq.reap``: a running job whose lease is older goes back to its queue.
    ``heartbeat_interval`` defaults to a quarter of it.
    """

    queue: str = "default"
    batch: int = 10
    concurrency: int = 1
    poll_interval: float = 1.0
    lease_timeout: float = 60.0
    heartbeat_interval: float | None = None
    reap_interval: float = 10.0
    listen: bool = True
    burst: bool = False
    name: str = field(default_factory=default_worker_name)
    reconnect_delay_max: float = 30.0

    def __post_init__(self) -> None:
        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigurationError(message)

        require(1 <= self.batch <= 1000, f"batch must be between 1 and 1000, got {self.batch}")
        require(
            1 <= self.concurrency <= 1000, f"concurrency must be between 1 and 1000, got {self.concurrency}"
        )
        require(self.poll_interval > 0, f"poll_interval must be positive, got {self.poll_interval}")
        require(self.lease_timeout > 0, f"lease_timeout must be positive, got {self.lease_timeout}")
        require(
            self.heartbeat_seconds < self.lease_timeout,
            f"heartbeat_interval ({self.heartbeat_seconds}) must be shorter than "
            f"lease_timeout ({self.lease_timeout})",
        )
        require(
            self.heartbeat_seconds > 0, f"heartbeat_interval must be positive, got {self.heartbeat_seconds}"
        )
        require(self.reap_interval > 0, f"reap_interval must be positive, got {self.reap_interval}")
        require(0 < len(self.name) <= 200, "name must be 1 to 200 characters")
        require(self.reconnect_delay_max > 0, "reconnect_delay_max must be positive")

    @property
    def heartbeat_seconds(self) -> float:
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease_timeout / 4


@dataclass
class _Held:
    """A job in hand: claimed by us, not yet acknowledged."""

    job: Job
    future: Future[BaseException | None]
    started: float = field(default_factory=time.monotonic)


class Worker:
    """Runs ``handler`` on the jobs of one queue.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment).
    A handler returns normally to complete its job; any exception fails it
    with ``"<ExceptionType>: <message>"``.
    """

    def __init__(self, conninfo: str, handler: Handler, settings: WorkerSettings | None = None) -> None:
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings or WorkerSettings()
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._held: dict[int, _Held] = {}
        # filled by handler threads (deque appends are thread-safe), drained by the loop
        self._finished: deque[tuple[_Held, BaseException | None]] = deque()
        self._stop_requests = 0
        self._pool: ThreadPoolExecutor | None = None
        self._next_heartbeat = 0.0
        self._next_reap = 0.0
        self._queue_empty = False
        self.processed = 0

    # -- public API -----------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop gracefully (thread- and signal-safe).

        A second call gives up on the jobs in hand (the reaper recovers them).
        """
        self._stop_requests += 1
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Work until stop() (or SIGTERM/SIGINT), or in burst mode until the queue has no runnable job."""
        previous = self._install_signal_handlers() if install_signal_handlers else {}
        self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="pgjobq-handler")
        logger.info("worker %s started on queue %s", self.settings.name, self.settings.queue)
        try:
            self._work()
        finally:
            abandoned = self._stop_requests > 1 and bool(self._held)
            if abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", len(self._held))
            self._pool.shutdown(wait=not abandoned, cancel_futures=True)
            self._disconnect()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    # -- the loop -------------------------------------------------------------

    def _work(self) -> None:
        delay = 0.0
        while self._stop_requests < 2 and (
            self._held or self._finished or not (self.stopping or self._queue_empty)
        ):
            try:
                self._connect()
                delay = 0.0
                self._step()
            except psycopg.OperationalError as exc:
                self._disconnect()
                delay = min(self.settings.reconnect_delay_max, max(0.5, delay * 2))
                pause = delay * random.uniform(0.8, 1.2)
                logger.warning("database unavailable (%s); retrying in %.1f s", _first_line(exc), pause)
                self._sleep(pause)

    def _step(self) -> None:
        self._acknowledge()
        if self.stopping:
            self._release_unstarted()
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self._heartbeat()
            self._next_heartbeat = now + self.settings.heartbeat_seconds
        if now >= self._next_reap:
            self._reap()
            self._next_reap = now + self.settings.reap_interval
        if not self.stopping and len(self._held) < self.settings.concurrency and self._claim():
            return
        if self._held:
            self._wait_for_handlers()
        elif not self.stopping and not self._queue_empty:
            self._wait_for_work()

    def _claim(self) -> bool:
        assert self._conn is not None and self._pool is not None
        jobs = _client.claim(self._conn, self.settings.queue, self.settings.batch, self.settings.name)
        if not jobs:
            if self.settings.burst and not self._held:
                logger.info("queue %s has no runnable job: burst done", self.settings.queue)
                self._queue_empty = True
            return False
        for job in jobs:
            future = self._pool.submit(self._run_handler, job)
            held = _Held(job, future)
            self._held[job.id] = held
            future.add_done_callback(self._on_handler_done(held))
        return True

    def _on_handler_done(self, held: _Held) -> Callable[[Future[BaseException | None]], None]:
        def done(future: Future[BaseException | None]) -> None:
            if not future.cancelled():
                self._finished.append((held, future.result()))

        return done

    def _run_handler(self, job: Job) -> BaseException | None:
        """Runs on a handler thread: the handler's exception, or None on success."""
        try:
            self.handler(job)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            return exc
        return None

    def _wait_for_handlers(self) -> None:
        timeout = max(0.0, min(self._next_heartbeat - time.monotonic(), self.settings.poll_interval))
        wait([h.future for h in self._held.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def _wait_for_work(self) -> None:
        """Sleep until a notification for our queue arrives or the poll interval passes."""
        timeout = self.settings.poll_interval
        if self._listen_conn is None:
            self._sleep(timeout)
            return
        for _ in self._listen_conn.notifies(timeout=timeout, stop_after=1):
            pass

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- acknowledging ------------------------------------------------------

    def _acknowledge(self) -> None:
        """Report every finished job: successes in one statement, failures one by one.

        If the connection drops meanwhile, what was not reported goes back to
        the front of the line, to be sent after reconnecting.
        """
        assert self._conn is not None
        pending: list[tuple[_Held, BaseException | None]] = []
        while self._finished:
            pending.append(self._finished.popleft())
        try:
            successes = [held for held, error in pending if error is None]
            if successes:
                accepted = _client.complete_many(self._conn, [(h.job.id, h.job.lease) for h in successes])
                for held in successes:
                    self._forget(held)
                    if held.job.id in accepted:
                        logger.info("job %d done (attempt %d)", held.job.id, held.job.attempts)
                    else:
                        logger.warning("job %d: lease %d lost; result discarded", held.job.id, held.job.lease)
                pending = [(held, error) for held, error in pending if error is not None]
            while pending:
                held, error = pending[0]
                assert error is not None
                self._report_failure(held, error)
                self._forget(held)
                pending.pop(0)
        except psycopg.OperationalError:
            self._finished.extendleft(reversed(pending))
            raise

    def _report_failure(self, held: _Held, error: BaseException) -> None:
        assert self._conn is not None
        job = held.job
        message = f"{type(error).__name__}: {error}"
        try:
            status, run_at = _client.fail(self._conn, job.id, message, job.lease)
        except LeaseLost:
            logger.warning("job %d: lease %d lost; failure discarded (%s)", job.id, job.lease, message)
            return
        if status == "failed":
            logger.error(
                "job %d failed for good (attempt %d/%d): %s", job.id, job.attempts, job.max_attempts, message
            )
        else:
            logger.warning(
                "job %d failed (attempt %d/%d), retry at %s: %s",
                job.id, job.attempts, job.max_attempts, run_at.isoformat(timespec="seconds"), message,
            )  # fmt: skip

    def _forget(self, held: _Held) -> None:
        self._held.pop(held.job.id, None)
        self.processed += 1

    def _release_unstarted(self) -> None:
        """Hand back the jobs claimed but not started: their attempt does not count."""
        assert self._conn is not None
        for held in list(self._held.values()):
            if held.future.cancel():
                del self._held[held.job.id]
                try:
                    _client.release(self._conn, held.job.id, held.job.lease)
                    logger.info("job %d handed back unstarted", held.job.id)
                except LeaseLost:
                    logger.warning("job %d: lease %d lost before hand-back", held.job.id, held.job.lease)

    # -- keeping leases and recovering others' ------------------------------

    def _heartbeat(self) -> None:
        assert self._conn is not None
        for held in list(self._held.values()):
            if held.future.done():
                continue
            try:
                _client.heartbeat(self._conn, held.job.id, held.job.lease)
            except LeaseLost:
                logger.warning("job %d: lease %d lost while running; its result will be discarded",
                               held.job.id, held.job.lease)  # fmt: skip

    def _reap(self) -> None:
        assert self._conn is not None
        stale = timedelta(seconds=self.settings.lease_timeout)
        for job_id, queue, status in _client.reap(self._conn, stale):
            logger.warning("reaped job %d of queue %s: its lease went stale; now %s", job_id, queue, status)

    # -- connections --------------------------------------------------------

    def _connect(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.conninfo, autocommit=True, application_name=self._app_name())
            self._next_heartbeat = 0.0
        if self.settings.listen and (self._listen_conn is None or self._listen_conn.closed):
            self._listen_conn = psycopg.connect(
                self.conninfo, autocommit=True, application_name=self._app_name("listen")
            )
            channel = _client.channel(self._listen_conn, self.settings.queue)
            self._listen_conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def _disconnect(self) -> None:
        for conn in (self._conn, self._listen_conn):
            if conn is not None:
                conn.close()
        self._conn = self._listen_conn = None

    def _app_name(self, role: str = "worker") -> str:
        return f"pgjobq {role} {self.settings.name}"[:63]

    # -- signals ------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self.stopping:
                logger.warning("still finishing %d job(s)", len(self._held))
            else:
                logger.info("received %s: finishing jobs in hand", signal.Signals(signum).name)
            self.stop()

        return {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
