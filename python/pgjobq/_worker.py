"""Worker: claims jobs of one queue, runs a handler on each, reports the outcome.

One thread (the caller's) owns both database connections and does all the
talking to PostgreSQL: claim, acknowledge, heartbeat, reap, release.  Handlers
run on a thread pool of ``concurrency`` threads and never touch the worker's
connections.  The loop:

- claims up to ``batch`` jobs whenever a handler thread is idle;
- acknowledges finished jobs together: successes in one
  ``jobq.complete_many`` statement, failures one ``jobq.fail`` each (with the
  lease), once the batch in hand is over or the oldest result has waited
  ``ack_interval``;
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
from pgjobq._errors import ConfigurationError, JobNotFound, LeaseLost, first_line
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
    ack_interval: float = 0.005

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
        require(
            0 <= self.ack_interval < self.heartbeat_seconds, "ack_interval must be shorter than a heartbeat"
        )

    @property
    def heartbeat_seconds(self) -> float:
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease_timeout / 4


@dataclass
class _Running:
    """A job handed to a handler thread, not yet acknowledged."""

    job: Job
    future: Future[None]


class Worker:
    """Runs ``handler`` on the jobs of one queue.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment).
    A handler returns normally to complete its job; any exception (even
    SystemExit) fails it with ``"<ExceptionType>: <message>"``.
    """

    def __init__(self, conninfo: str, handler: Handler, settings: WorkerSettings | None = None) -> None:
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings or WorkerSettings()
        self.processed = 0
        self.abandoned = 0  # jobs left in hand by a forced stop (a second stop())
        self._stop = threading.Event()
        self._stop_requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None
        # Jobs in hand.  Handler threads append to _finished (deque appends are
        # thread-safe); everything else belongs to the loop's thread.
        self._backlog: deque[Job] = deque()  # claimed, not started: handed back on stop
        self._running: dict[int, _Running] = {}  # given to a handler thread
        self._finished: deque[tuple[Job, BaseException | None]] = deque()  # handler returned
        self._unacked: list[tuple[Job, BaseException | None]] = []  # collected, to report
        self._oldest_unacked = 0.0
        self._next_heartbeat = 0.0
        self._next_reap = 0.0
        self._drained = False  # burst mode: the queue had no runnable job

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
            self.abandoned = (
                len(self._backlog) + len(self._running) + len(self._finished) + len(self._unacked)
            )
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)
            self._disconnect()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    # -- the loop -------------------------------------------------------------

    def _in_hand(self) -> bool:
        return bool(self._backlog or self._running or self._finished or self._unacked)

    def _work(self) -> None:
        delay = 0.0
        while self._stop_requests < 2 and (self._in_hand() or not (self.stopping or self._drained)):
            try:
                self._connect()
                delay = 0.0
                self._step()
            except psycopg.OperationalError as exc:
                self._disconnect()
                delay = min(self.settings.reconnect_delay_max, max(0.5, delay * 2))
                pause = delay * random.uniform(0.8, 1.2)
                logger.warning("database unavailable (%s); retrying in %.1f s", first_line(exc), pause)
                self._sleep(pause)

    def _step(self) -> None:
        self._collect()
        batch_over = not self._running and not self._backlog
        self._acknowledge(now=self.stopping or batch_over)
        if self.stopping:
            self._release_backlog()
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self._heartbeat()
            self._next_heartbeat = now + self.settings.heartbeat_seconds
        if now >= self._next_reap:
            self._reap()
            self._next_reap = now + self.settings.reap_interval
        self._start_handlers()
        idle_threads = len(self._running) < self.settings.concurrency
        if not self.stopping and not self._drained and idle_threads and self._claim():
            return
        if self._running:
            self._wait_for_handlers()
        elif not self.stopping and not self._drained:
            self._wait_for_work()

    def _claim(self) -> bool:
        """Claim a batch into the backlog; False when the queue had nothing runnable."""
        assert self._conn is not None
        jobs = _client.claim(self._conn, self.settings.queue, self.settings.batch, self.settings.name)
        self._backlog.extend(jobs)
        self._start_handlers()
        if not jobs and self.settings.burst and not self._in_hand():
            logger.info("queue %s has no runnable job: burst done", self.settings.queue)
            self._drained = True
        return bool(jobs)

    def _start_handlers(self) -> None:
        """Give backlog jobs to idle handler threads (never more: the rest stays ours to hand back)."""
        assert self._pool is not None
        while self._backlog and len(self._running) < self.settings.concurrency:
            job = self._backlog.popleft()
            future = self._pool.submit(self._run_handler, job)
            self._running[job.id] = _Running(job, future)

    def _run_handler(self, job: Job) -> None:
        """Runs on a handler thread: records the handler's exception (None on success) in _finished."""
        try:
            self.handler(job)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            self._finished.append((job, exc))
        else:
            self._finished.append((job, None))

    def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, or a poll interval."""
        deadline = min(self._next_heartbeat, time.monotonic() + self.settings.poll_interval)
        if self._unacked:
            deadline = min(deadline, self._oldest_unacked + self.settings.ack_interval)
        timeout = max(0.0, deadline - time.monotonic())
        wait([r.future for r in self._running.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def _wait_for_work(self) -> None:
        """Sleep until a notification for our queue arrives, the poll interval passes, or stop().

        The wait is cut in slices of at most 0.1 s so that a stop is noticed promptly.
        """
        deadline = time.monotonic() + self.settings.poll_interval
        while not self.stopping and (remaining := deadline - time.monotonic()) > 0:
            if self._listen_conn is None:
                self._sleep(remaining)
                return
            if any(True for _ in self._listen_conn.notifies(timeout=min(0.1, remaining), stop_after=1)):
                return

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- acknowledging ------------------------------------------------------

    def _collect(self) -> None:
        """Move the jobs whose handler returned from _running to the results to report."""
        while self._finished:
            job, outcome = self._finished.popleft()
            self._running.pop(job.id, None)
            if not self._unacked:
                self._oldest_unacked = time.monotonic()
            self._unacked.append((job, outcome))

    def _acknowledge(self, *, now: bool) -> None:
        """Report the results collected: successes in one statement, failures one by one.

        Results wait (at most ack_interval) unless ``now``, so that one
        statement and one commit acknowledge many jobs.  If the connection
        drops meanwhile, what was not reported is sent after reconnecting.
        """
        assert self._conn is not None
        if not self._unacked or not (
            now or time.monotonic() >= self._oldest_unacked + self.settings.ack_interval
        ):
            return
        successes = [job for job, error in self._unacked if error is None]
        if successes:
            accepted = _client.complete_many(self._conn, [(job.id, job.lease) for job in successes])
            for job in successes:
                if job.id in accepted:
                    logger.info("job %d done (attempt %d)", job.id, job.attempts)
                else:
                    logger.warning("job %d: lease %d lost; result discarded", job.id, job.lease)
            self.processed += len(successes)
            self._unacked = [(job, error) for job, error in self._unacked if error is not None]
        while self._unacked:
            job, error = self._unacked[0]
            assert error is not None
            self._report_failure(job, error)
            self.processed += 1
            self._unacked.pop(0)

    def _report_failure(self, job: Job, error: BaseException) -> None:
        assert self._conn is not None
        message = f"{type(error).__name__}: {error}"
        try:
            status, run_at = _client.fail(self._conn, job.id, message, job.lease)
        except (LeaseLost, JobNotFound):
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

    def _release_backlog(self) -> None:
        """Hand back the jobs claimed but not started: their attempt does not count."""
        assert self._conn is not None
        while self._backlog:
            job = self._backlog[0]
            try:
                _client.release(self._conn, job.id, job.lease)
                logger.info("job %d handed back unstarted", job.id)
            except (LeaseLost, JobNotFound):
                logger.warning("job %d: lease %d lost before hand-back", job.id, job.lease)
            self._backlog.popleft()

    # -- keeping leases and recovering others' ------------------------------

    def _heartbeat(self) -> None:
        """Extend the lease of every job in hand that is not finished."""
        assert self._conn is not None
        unfinished = [r.job for r in self._running.values() if not r.future.done()] + list(self._backlog)
        for job in unfinished:
            try:
                _client.heartbeat(self._conn, job.id, job.lease)
            except (LeaseLost, JobNotFound):
                logger.warning("job %d: lease %d lost while in hand; its result will be discarded",
                               job.id, job.lease)  # fmt: skip

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
                logger.warning("second %s: giving up the jobs in hand", signal.Signals(signum).name)
            else:
                logger.info("received %s: finishing jobs in hand", signal.Signals(signum).name)
            self.stop()

        return {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
