"""Worker: claims jobs of one queue, runs a handler on each, reports the outcome.

The caller's thread owns both database connections and does the talking to
PostgreSQL: claim, acknowledge, heartbeat, reap, release.  Handlers never
touch the worker's connections.  With ``concurrency`` 1 (the default) they run
on the caller's thread itself, one job after another, with no hand-off
between threads; a keeper thread sends, while a handler runs, the
acknowledgements and heartbeats that fall due meanwhile (psycopg serialises
the two threads' use of the connection).  With ``concurrency`` above 1 they
run on a pool of that many threads.  The loop:

- claims up to ``batch`` jobs whenever a handler (thread) is idle;
- acknowledges finished jobs together: successes in one statement, failures
  one ``jobq.fail`` each (with the lease).  Successes go with the next claim
  (``jobq.complete_and_claim``: one round trip and one commit for both), or,
  while handlers are busy, in one ``jobq.complete_many`` once the batch in
  hand is over or the oldest result has waited ``ack_interval``;
- claims each job under a lease of ``lease_timeout``, which the database
  stores on the job; heartbeats the jobs in hand every
  ``heartbeat_interval``, which extends each lease by its own length, so
  the reaper leaves long jobs alone;
- runs ``jobq.reap`` every ``reap_interval``, which recovers the jobs whose
  lease expired, whoever held them (the worker level may reap; a role that
  may not is told so once and leaves reaping to others);
- with nothing to do, registers as waiting (``jobq.wait``: enqueues notify
  the queue's channel only while a worker waits), claims once more, and
  sleeps on LISTEN until a notification, ``poll_interval``, or the run_at of
  the queue's next job in the future, whichever comes first: a lost
  notification costs at most one poll interval, a job due later starts at
  its run_at.  When the registration is refused for the moment (a producer
  of the queue has a transaction in flight), it claims again after a few
  milliseconds.  After a notification it claims at once, before any other
  bookkeeping.  LISTEN is not trusted blindly: after each
  (re)connect the worker sends itself a probe notification and, when it does
  not arrive (a transaction-pooling PgBouncer hands LISTEN to a server
  connection this client never sees again), says so once and only polls
  (and, like a worker with ``listen=False``, does not register: nobody
  would hear the notifications);
- on ``stop()`` (SIGTERM/SIGINT under ``run``): claims nothing more, hands
  claimed-but-unstarted jobs back (``jobq.release``), lets the running ones
  finish, acknowledges them, and returns; a second stop gives up the jobs in
  hand at once (a second signal interrupts a handler running on the
  caller's thread);
- when the database goes away, reconnects with capped exponential backoff
  and carries on; acknowledgements pending meanwhile are sent afterwards
  (the database refuses any whose lease was reaped in between);
- refuses to start on a database whose pgjobq extension this package does
  not support (IncompatibleExtension), and refuses a coroutine function as
  handler (ConfigurationError): its jobs would be marked done without running.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any, TypeGuard

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

from pgjobq import _client
from pgjobq._errors import ConfigurationError, JobNotFound, LeaseLost, PermissionDenied, first_line
from pgjobq._extension import check_extension
from pgjobq._job import Job
from pgjobq._queries import query

__all__ = ["Handler", "Worker", "WorkerSettings"]

logger = logging.getLogger("pgjobq.worker")

Handler = Callable[[Job], object]

# The probe that checks LISTEN works: the listening connection also listens
# on a channel of its own (this prefix and a random token, so that no other
# listener ever sees the probe), the work connection notifies it, and the
# notification must arrive within PROBE_TIMEOUT seconds.
PROBE_CHANNEL_PREFIX = "pgjobq_probe_"
PROBE_TIMEOUT = 1.5

# When jobq.wait could not register (a producer's transaction was in flight),
# listen this long before claiming again.
REGISTER_RETRY = 0.015
# Wake this long after the next job's run_at, so that its claim, whose clock
# is the database's, finds it runnable.
RUN_AT_MARGIN = 0.002


try:  # optional: parses the worker's payloads in a tenth of json's time
    import orjson
except ImportError:  # json then
    orjson = None  # type: ignore[assignment]

_LONG_NUMBER = re.compile(rb"[0-9][0-9.]{17}").search


def _json_loads(data: str | bytes) -> Any:
    """A payload as json.loads reads it, by orjson (when installed) where it reads the same.

    orjson reads an integer beyond 64 bits as a float, where json keeps it
    exact.  jsonb prints every number in full (1e300 as 301 digits), so a
    payload with a run of 18 or more digits and dots goes to json.  A
    module-level function, not a closure: psycopg caches its loaders by it.
    """
    if isinstance(data, bytes) and _LONG_NUMBER(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def _ignore(notify: psycopg.Notify) -> None:
    """A notification handler that drops what it gets."""


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_DAY = 86400  # upper bound of every interval setting


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker claims, waits and recovers.  Times are in seconds.

    ``lease_timeout`` is the length of the leases the worker claims under:
    the database stores each lease's expiry on its job, every heartbeat
    extends it by that length, and ``jobq.reap`` (run by any worker)
    recovers a job only once its own lease has expired, so workers with
    different lease lengths share a queue safely.  ``heartbeat_interval``
    defaults to a quarter of it.

    ``prepared_statements=False`` stops psycopg from preparing the statements
    it runs often (``prepare_threshold=None``).  Turn it off behind PgBouncer
    in transaction pooling mode before version 1.21: a statement prepared on
    one server connection is missing on the next one a transaction gets.

    Nonsense (a count below 1, a non-finite or non-positive interval, a
    heartbeat no shorter than the lease) raises ConfigurationError here,
    before the database is touched.
    """

    queue: str = "default"
    batch: int = 10
    concurrency: int = 1
    poll_interval: float = 1.0
    lease_timeout: float = _client.DEFAULT_LEASE_TIMEOUT.total_seconds()  # the extension's default
    heartbeat_interval: float | None = None
    reap_interval: float = 10.0
    listen: bool = True
    burst: bool = False
    name: str = field(default_factory=default_worker_name)
    reconnect_delay_max: float = 10.0
    ack_interval: float = 0.005
    prepared_statements: bool = True

    def __post_init__(self) -> None:
        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigurationError(message)

        def count(name: str, high: int) -> None:
            value = getattr(self, name)
            require(_is_int(value), f"{name} must be an integer, got {value!r}")
            require(1 <= value <= high, f"{name} must be between 1 and {high}, got {value}")

        def seconds(name: str, value: object, *, zero: bool = False) -> None:
            number = float(value) if _is_number(value) else math.nan
            low_ok = number >= 0 if zero else number > 0
            require(
                low_ok and number <= _DAY,  # NaN fails both comparisons
                f"{name} must be {'at least 0' if zero else 'positive'} and at most {_DAY} seconds, "
                f"got {value!r}",
            )

        require(isinstance(self.queue, str), f"queue must be a string, got {self.queue!r}")
        count("batch", 1000)
        count("concurrency", 1000)
        for name in ("poll_interval", "lease_timeout", "reap_interval", "reconnect_delay_max"):
            seconds(name, getattr(self, name))
        seconds("heartbeat_interval", self.heartbeat_seconds)
        require(
            self.heartbeat_seconds < self.lease_timeout,
            f"heartbeat_interval ({self.heartbeat_seconds}) must be shorter than "
            f"lease_timeout ({self.lease_timeout})",
        )
        seconds("ack_interval", self.ack_interval, zero=True)
        require(self.ack_interval < self.heartbeat_seconds, "ack_interval must be shorter than a heartbeat")
        require(isinstance(self.name, str) and 0 < len(self.name) <= 200, "name must be 1 to 200 characters")

    @property
    def heartbeat_seconds(self) -> float:
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease_timeout / 4


@dataclass
class _Running:
    """A job handed to a handler thread, not yet acknowledged."""

    job: Job
    future: Future[None]


def _is_coroutine_function(handler: object) -> bool:
    """Whether handler is an async def, or an object whose __call__ is one: calling it makes a coroutine."""
    call = type(handler).__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def _name(handler: object) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))


def _call(handler: Handler, job: Job) -> None:
    """Run handler on job; one that hands back something to await fails the job instead of completing it.

    Start-up refuses coroutine functions, but a wrapper (a lambda, a partial)
    can still return a coroutine: its job must not count as done.
    """
    result = handler(job)
    if result is not None and inspect.isawaitable(result):  # most handlers return None: no ABC check
        if inspect.iscoroutine(result):
            result.close()  # never started: no "was never awaited" warning
        raise TypeError(
            f"handler {_name(handler)} returned {type(result).__name__}, an awaitable this Worker cannot "
            "await: the job did not run"
        )


class _GiveUp(BaseException):
    """Raised by a second SIGTERM/SIGINT into a handler running on the worker's own thread."""


class Worker:
    """Runs ``handler`` on the jobs of one queue.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment).
    A handler returns normally to complete its job; any exception (even
    SystemExit) fails it with ``"<ExceptionType>: <message>"``.
    """

    def __init__(self, conninfo: str, handler: Handler, settings: WorkerSettings | None = None) -> None:
        if _is_coroutine_function(handler):
            raise ConfigurationError(
                f"handler {_name(handler)} is a coroutine function (async def): this Worker calls its "
                "handler and would mark each job done without awaiting it; give it a plain function "
                "(one that calls asyncio.run, for instance)"
            )
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings or WorkerSettings()
        self._lease_timeout = timedelta(seconds=self.settings.lease_timeout)
        # The hot statements' parameters, checked once (by WorkerSettings) rather than at every claim.
        self._claim_params: dict[str, Any] = {
            "queue": self.settings.queue,
            "n": self.settings.batch,
            "worker": self.settings.name,
            "lease_timeout": self._lease_timeout,
        }
        self._wait_params: dict[str, Any] = {
            "queue": self.settings.queue,
            "worker": self.settings.name,
            "up_to": timedelta(seconds=self.settings.poll_interval),
        }
        self.processed = 0
        self.abandoned = 0  # jobs left in hand by a forced stop (a second stop())
        self._stop = threading.Event()
        self._stop_requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None  # handler threads (concurrency > 1)
        # Jobs in hand.  Handler threads append to _finished (deque appends are
        # thread-safe).  The keeper thread (concurrency 1) shares _backlog,
        # _current, _ok, _failed, _oldest_unacked, _leased_at, _next_heartbeat,
        # _keeper_due and processed: they change under _lock.  Everything else
        # belongs to the loop's thread.
        self._lock = threading.Lock()
        self._keeper_wake = threading.Condition(self._lock)
        self._keeper: threading.Thread | None = None
        # When the keeper wakes next (monotonic; inf: when notified).  A handler
        # start notifies it only when something falls due before that.
        self._keeper_due = math.inf
        self._closing = False  # tells the keeper to end
        self._backlog: deque[Job] = deque()  # claimed, not started: handed back on stop
        self._current: Job | None = None  # its handler runs on the loop's thread now (concurrency 1)
        self._in_handler = False  # a second signal may interrupt the handler now
        self._running: dict[int, _Running] = {}  # given to a handler thread
        self._finished: deque[tuple[Job, BaseException | None]] = deque()  # handler returned
        self._ok: list[Job] = []  # handlers that returned, collected: to acknowledge
        self._failed: list[tuple[Job, BaseException]] = []  # handlers that raised, collected: to report
        self._oldest_unacked = 0.0  # when the oldest result in _ok and _failed was collected
        self._next_heartbeat = 0.0
        # when this worker took or last extended each lease it holds (monotonic clock)
        self._leased_at: dict[int, float] = {}
        self._next_reap = 0.0
        self._drained = False  # burst mode: the queue had no runnable job
        self._poll_only = False  # the LISTEN probe failed on this connection: poll until reconnected
        self._may_reap = True  # False once jobq.reap was refused to this role
        self._may_wait = True  # False once jobq.wait was refused to this role
        self._started = False  # said so, once connected to a database it supports

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
        if self.settings.concurrency > 1:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="pgjobq-handler")
        else:
            self._keeper = threading.Thread(target=self._keep, name="pgjobq-keeper", daemon=True)
            self._keeper.start()
        try:
            self._work()
        except _GiveUp:
            pass  # a second signal interrupted a handler: its job is abandoned below
        finally:
            self.abandoned = (
                len(self._backlog) + len(self._running) + len(self._finished) + len(self._ok)
                + len(self._failed) + (self._current is not None)
            )  # fmt: skip
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            self._stop_keeper()
            if self._pool is not None:
                self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)
            self._disconnect()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    # -- the loop -------------------------------------------------------------

    def _in_hand(self) -> bool:
        return bool(
            self._backlog or self._current or self._running or self._finished or self._ok or self._failed
        )

    def _work(self) -> None:
        delay = 0.0
        while self._stop_requests < 2 and (self._in_hand() or not (self.stopping or self._drained)):
            try:
                self._connect()
                self._step()
                delay = 0.0  # only a step that worked ends the backoff, not a connection alone
            except psycopg.OperationalError as exc:
                self._disconnect()
                # Doubling from 0.5 s up to the cap, less up to a quarter at
                # random so that a fleet of workers does not retry in step.
                delay = min(self.settings.reconnect_delay_max, max(0.5, delay * 2))
                pause = delay * random.uniform(0.75, 1.0)
                logger.warning("database unavailable (%s); retrying in %.1f s", first_line(exc), pause)
                self._sleep(pause)

    def _step(self) -> None:
        self._collect()
        batch_over = not self._running and not self._backlog
        if not self.stopping:
            self._start_handlers()  # idle handler threads first: the acknowledgement can wait for them
        if self._claiming() and batch_over:
            # the successes ride on the next claim (jobq.complete_and_claim)
            self._report_failures()
        else:
            self._acknowledge(now=self.stopping or batch_over)
        if self.stopping:
            self._release_backlog()
        self._heartbeat()
        now = time.monotonic()
        if now >= self._next_reap:
            self._reap()
            self._next_reap = now + self.settings.reap_interval
        self._start_handlers()
        if self._claiming() and self._claim():
            return
        if self._running:
            self._wait_for_handlers()
        elif not self.stopping and not self._drained:
            self._wait_for_work()

    def _claiming(self) -> bool:
        """Whether to claim now: a handler thread is idle, and the worker is neither stopping nor drained."""
        return not self.stopping and not self._drained and len(self._running) < self.settings.concurrency

    def _claim(self) -> bool:
        """Claim a batch into the backlog; False when the queue had nothing runnable.

        Successes waiting to be acknowledged go with the claim: one statement,
        one round trip and one commit for both (jobq.complete_and_claim).
        """
        conn = self._conn
        assert conn is not None
        successes = self._take_successes()
        try:
            if successes:
                params = {
                    **self._claim_params,
                    "ids": [job.id for job in successes],
                    "leases": [job.lease for job in successes],
                }
                accepted, jobs = _client.complete_and_claim_unchecked(conn, params, prepare=True)
                self._acknowledged(successes, accepted)
            else:
                jobs = _client.claim_unchecked(conn, self._claim_params, prepare=True)
        except BaseException:
            self._restore_successes(successes)
            raise
        if jobs:
            now = time.monotonic()
            with self._lock:
                if self._backlog or self._running or self._current is not None:
                    self._leased_at.update((job.id, now) for job in jobs)
                else:  # nothing else in hand: the lease times of finished jobs can go
                    self._leased_at = {job.id: now for job in jobs}
                    # and no lease in hand needs a heartbeat before one interval from now
                    self._next_heartbeat = max(self._next_heartbeat, now + self.settings.heartbeat_seconds)
                self._backlog.extend(jobs)
            self._start_handlers()
        if not jobs and self.settings.burst and not self._in_hand():
            logger.info("queue %s has no runnable job: burst done", self.settings.queue)
            self._drained = True
        return bool(jobs)

    def _start_handlers(self) -> None:
        """Give backlog jobs to idle handler threads (never more: the rest stays ours to hand back).

        With concurrency 1, run them here instead, one after another, until
        the backlog is empty or stop().
        """
        if self._pool is None:
            self._run_backlog()
            return
        while self._backlog and len(self._running) < self.settings.concurrency:
            job = self._backlog.popleft()
            future = self._pool.submit(self._run_handler, job)
            self._running[job.id] = _Running(job, future)

    def _run_backlog(self) -> None:
        """Run the backlog's handlers on this thread (concurrency 1); the keeper watches meanwhile."""
        while self._backlog and not self.stopping:
            with self._lock:
                job = self._current = self._backlog.popleft()
                due = self._next_heartbeat
                if self._ok:
                    due = min(due, self._oldest_unacked + self.settings.ack_interval)
                if due < self._keeper_due:  # the keeper would sleep through it: wake it to rearm
                    self._keeper_due = due  # once: it may take a while to run, and recomputes anyway
                    self._keeper_wake.notify()
            self._in_handler = True
            try:
                _call(self.handler, job)
            except _GiveUp:
                raise  # a second signal: the job stays _current, to be abandoned
            except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
                error: BaseException | None = exc
            else:
                error = None
            finally:
                self._in_handler = False
            with self._lock:
                self._record(job, error)
                self._current = None

    def _run_handler(self, job: Job) -> None:
        """Runs on a handler thread: records the handler's exception (None on success) in _finished."""
        try:
            _call(self.handler, job)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            self._finished.append((job, exc))
        else:
            self._finished.append((job, None))

    def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, or a poll interval."""
        deadline = min(self._next_heartbeat, time.monotonic() + self.settings.poll_interval)
        if self._ok or self._failed:
            deadline = min(deadline, self._oldest_unacked + self.settings.ack_interval)
        timeout = max(0.0, deadline - time.monotonic())
        wait([r.future for r in self._running.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def _wait_for_work(self) -> None:
        """The claim found nothing: register as waiting, claim once more, then sleep until there is work.

        Sleeps until a notification for our queue arrives (then claims at
        once), the poll interval passes, the queue's next job in the future
        is due, or stop().  Without a listening connection (listen=False, or
        its probe failed) it only sleeps the poll interval: registering
        would make producers notify for nobody.
        """
        deadline = time.monotonic() + self.settings.poll_interval
        conn, listen = self._conn, self._listen_conn
        if listen is None or not self._may_wait:
            self._listen_until(deadline, listen)
            return
        assert conn is not None
        self._acknowledge(now=True)  # nothing in hand is worth holding back while we sleep
        # Notifications that came while the worker was busy are stale: the claim after registering
        # finds their jobs.  Left pending, they would end the sleep below at once.
        for _ in listen.notifies(timeout=0):
            pass
        before = time.monotonic()
        try:
            registered, _, next_run_in = _client.wait_unchecked(conn, self._wait_params, prepare=True)
        except PermissionDenied as exc:
            self._may_wait = False
            logger.warning(
                "not registering as waiting: jobq.wait was refused to this worker's role (%s); enqueues "
                "notify only while another worker waits, so this one mostly polls every %s s",
                first_line(exc),
                self.settings.poll_interval,
            )
            return
        if not registered:  # a producer is in flight: claim again soon (or when another waiter is notified)
            if self._listen_until(time.monotonic() + REGISTER_RETRY, listen):
                self._claim()
            return
        if next_run_in is not None:
            deadline = min(deadline, before + next_run_in.total_seconds() + RUN_AT_MARGIN)
        # Registered: jobs committed from now on notify us; those committed before, this claim finds.
        if self.stopping or self._claim():
            return
        if self._listen_until(deadline, listen):
            # At once, before the loop's bookkeeping.  (On the work connection: claiming on the
            # listening one, whose backend has just run, measured no faster.)
            self._claim()

    def _listen_until(self, deadline: float, listen: psycopg.Connection[Any] | None) -> bool:
        """Sleep until deadline (monotonic), stop(), or a notification on listen (then True).

        The wait is cut in slices of at most 0.1 s so that a stop is noticed promptly.
        """
        while not self.stopping and (remaining := deadline - time.monotonic()) > 0:
            if listen is None:
                self._sleep(remaining)
                return False
            if any(True for _ in listen.notifies(timeout=min(0.1, remaining), stop_after=1)):
                return True
        return False

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- acknowledging ------------------------------------------------------

    def _collect(self) -> None:
        """Move the jobs whose handler thread returned from _running to the results to report."""
        while self._finished:
            job, outcome = self._finished.popleft()
            self._running.pop(job.id, None)
            self._record(job, outcome)

    def _record(self, job: Job, outcome: BaseException | None) -> None:
        """Add a handler's outcome to the results to report."""
        if not self._ok and not self._failed:
            self._oldest_unacked = time.monotonic()
        if outcome is None:
            self._ok.append(job)
        else:
            self._failed.append((job, outcome))

    def _take_successes(self) -> list[Job]:
        """Take the successes collected, to acknowledge (_restore_successes if that fails).

        Taken under the lock, so that the keeper and the loop never send the same one.
        """
        with self._lock:
            successes, self._ok = self._ok, []
        return successes

    def _restore_successes(self, successes: list[Job]) -> None:
        """Put back successes whose acknowledgement failed, to send again."""
        if successes:
            with self._lock:
                if not self._ok and not self._failed:
                    self._oldest_unacked = time.monotonic()
                self._ok[:0] = successes

    def _acknowledge(self, *, now: bool) -> None:
        """Report the results collected: successes in one statement, failures one by one.

        Results wait (at most ack_interval) unless ``now``, so that one
        statement and one commit acknowledge many jobs.  If the connection
        drops meanwhile, what was not reported is sent after reconnecting.
        """
        if not (self._ok or self._failed) or not (
            now or time.monotonic() >= self._oldest_unacked + self.settings.ack_interval
        ):
            return
        self._complete_many()
        self._report_failures()

    def _complete_many(self) -> None:
        """Acknowledge the successes collected in one jobq.complete_many (loop or keeper thread)."""
        conn = self._conn
        assert conn is not None
        successes = self._take_successes()
        if not successes:
            return
        try:
            accepted = _client.complete_many_unchecked(
                conn, [job.id for job in successes], [job.lease for job in successes], prepare=True
            )
        except BaseException:
            self._restore_successes(successes)
            raise
        self._acknowledged(successes, accepted)

    def _acknowledged(self, successes: list[Job], accepted: set[int]) -> None:
        """Log the outcome of acknowledging successes: accepted, or refused as stale."""
        if logger.isEnabledFor(logging.INFO):
            for job in successes:
                if job.id in accepted:
                    logger.info("job %d done (attempt %d)", job.id, job.attempts)
        if len(accepted) < len(successes):
            for job in successes:
                if job.id not in accepted:
                    logger.warning("job %d: lease %d lost; result discarded", job.id, job.lease)
        with self._lock:
            self.processed += len(successes)

    def _report_failures(self) -> None:
        """Report the failures collected, one jobq.fail each (they are rare; each needs its own row)."""
        if not self._failed:
            return
        with self._lock:
            failures = list(self._failed)
        for job, error in failures:
            self._report_failure(job, error)
            with self._lock:
                self.processed += 1
                self._failed.remove((job, error))

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
            with self._lock:
                self._backlog.popleft()

    # -- keeping leases and recovering others' ------------------------------

    def _unfinished(self) -> list[Job]:
        """The jobs in hand whose handler has not returned (call under the lock)."""
        current = [self._current] if self._current is not None else []
        running = [r.job for r in self._running.values() if not r.future.done()]
        return current + running + list(self._backlog)

    def _heartbeat(self) -> None:
        """When a heartbeat is due, extend in one statement the lease of every job in hand not finished.

        A lease this worker took or extended less than a heartbeat ago is left
        alone when two heartbeat intervals fit in the lease timeout: by the
        next sweep it is still at most two intervals old.  Runs on the loop's
        thread or the keeper's.
        """
        conn = self._conn
        assert conn is not None
        with self._lock:
            now = time.monotonic()
            if now < self._next_heartbeat:
                return
            self._next_heartbeat = now + self.settings.heartbeat_seconds
            unfinished = self._unfinished()
            self._leased_at = {job.id: self._leased_at.get(job.id, 0.0) for job in unfinished}
            interval = self.settings.heartbeat_seconds
            if 2 * interval < self.settings.lease_timeout:
                unfinished = [job for job in unfinished if now - self._leased_at[job.id] >= interval]
        if not unfinished:
            return
        held = _client.heartbeat_many_unchecked(
            conn, [job.id for job in unfinished], [job.lease for job in unfinished], prepare=True
        )
        with self._lock:
            for job_id in held:
                self._leased_at[job_id] = now
            # A job whose handler returned meanwhile (perhaps after completing it in its
            # own transaction) is not lost yet: the acknowledgement tells whether the lease held.
            still = {job.id for job in self._unfinished()}
        for job in unfinished:
            if job.id not in held and job.id in still:
                logger.warning("job %d: lease %d lost while in hand; its result will be discarded",
                               job.id, job.lease)  # fmt: skip

    # -- the keeper thread (concurrency 1) -------------------------------------

    def _keep(self) -> None:
        """While a handler runs on the loop's thread, send the acknowledgements and heartbeats that fall due.

        Between handlers the loop sends them itself.  It sleeps until the next
        heartbeat, or the next acknowledgement, falls due; a handler start
        wakes it only when something falls due earlier than that (so a quick
        handler costs the keeper nothing).  A failed statement (the
        connection is gone: the loop reconnects) leaves its work to the loop.
        """
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    now = time.monotonic()
                    due = self._next_heartbeat
                    if self._current is None:
                        # between handlers: the loop's; until the next heartbeat at most, or notified
                        self._keeper_due = due if due > now else math.inf
                    else:
                        if self._ok:
                            due = min(due, self._oldest_unacked + self.settings.ack_interval)
                        if now >= due:
                            break
                        self._keeper_due = due
                    timeout = None if self._keeper_due == math.inf else self._keeper_due - now
                    self._keeper_wake.wait(timeout)
                self._keeper_due = math.inf  # busy: a handler start may notify, unheard and harmless
            conn = self._conn
            failed = "the connection is closed" if conn is None or conn.closed else None
            if failed is None:
                try:
                    self._complete_many_due()
                    self._heartbeat()
                except Exception as exc:  # the loop's next statement meets the same error and handles it
                    failed = first_line(exc)
            if failed is not None:
                # what fell due stays due: wait, or this would spin until the loop reconnects
                logger.debug("keeper: %s; left to the worker's loop", failed)
                with self._lock:
                    if not self._closing:
                        self._keeper_wake.wait(min(1.0, self.settings.heartbeat_seconds))

    def _complete_many_due(self) -> None:
        """Acknowledge the successes collected, if the oldest has waited ack_interval."""
        with self._lock:
            due = time.monotonic() >= self._oldest_unacked + self.settings.ack_interval
        if due:
            self._complete_many()

    def _stop_keeper(self) -> None:
        if self._keeper is not None:
            with self._lock:
                self._closing = True
                self._keeper_wake.notify()
            self._keeper.join()
            self._keeper = None

    def _reap(self) -> None:
        """Recover the jobs whose lease expired (jobq.reap), unless this worker's role was refused it.

        Every level that may claim may reap (jobq.grant_worker and
        grant_admin).  A role that was given less is told so once; other
        workers, or a scheduled ``SELECT jobq.reap()``, must then reap.
        """
        assert self._conn is not None
        if not self._may_reap:
            return
        try:
            reaped = _client.reap(self._conn)
        except PermissionDenied as exc:
            self._may_reap = False
            logger.warning(
                "not reaping: jobq.reap was refused to this worker's role (%s); reaping is left to other "
                "workers or a scheduled SELECT jobq.reap()",
                first_line(exc),
            )
            return
        for job_id, queue, status in reaped:
            logger.warning("reaped job %d of queue %s: its lease expired; now %s", job_id, queue, status)

    # -- connections --------------------------------------------------------

    def _connect(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = self._open("worker")
            version = check_extension(self._conn)
            if not self._started:
                self._started = True
                logger.info(
                    "worker %s started on queue %s (pgjobq %s)",
                    self.settings.name,
                    self.settings.queue,
                    version,
                )
            # Behind a transaction-pooling PgBouncer a LISTEN left on a shared
            # server connection can deliver notifications here; drop them
            # (psycopg would otherwise keep them for a notifies() never called).
            self._conn.add_notify_handler(_ignore)
            self._next_heartbeat = 0.0
        if (
            self.settings.listen
            and not self._poll_only
            and (self._listen_conn is None or self._listen_conn.closed)
        ):
            self._listen_conn = self._open("listen")
            channel = _client.channel(self._listen_conn, self.settings.queue)
            if self._notifications_arrive():
                # Notifications sent before this LISTEN are not missed: a claim follows every connect.
                self._listen_conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            else:
                logger.warning(
                    "notifications do not reach this worker's listening connection (a "
                    "transaction-pooling PgBouncer?); not listening on %s, polling every %s s instead",
                    channel,
                    self.settings.poll_interval,
                )
                self._listen_conn.close()
                self._listen_conn = None
                self._poll_only = True

    def _notifications_arrive(self) -> bool:
        """Whether a probe notification sent from the work connection reaches the listening one.

        The probe goes to a channel of its own, so no other listener sees it.
        """
        assert self._conn is not None and self._listen_conn is not None
        probe = f"{PROBE_CHANNEL_PREFIX}{uuid.uuid4().hex}"
        self._listen_conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(probe)))
        self._conn.execute(query("probe_notify"), {"channel": probe})
        with contextlib.closing(self._listen_conn.notifies(timeout=PROBE_TIMEOUT)) as notifies:
            arrived = any(n.channel == probe for n in notifies)
        # Also when it did not arrive: behind a transaction-pooling PgBouncer the LISTEN stays on a
        # server connection other clients share, and this UNLISTEN may reach it (it is best effort).
        self._listen_conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(probe)))
        if arrived:
            logger.debug("LISTEN works here: the probe notification arrived")
        return arrived

    def _open(self, role: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.conninfo, autocommit=True, application_name=self._app_name(role))
        if not self.settings.prepared_statements:
            conn.prepare_threshold = None
        if orjson is not None:
            set_json_loads(_json_loads, conn)
        return conn

    def _disconnect(self) -> None:
        for conn in (self._conn, self._listen_conn):
            if conn is not None:
                conn.close()
        self._conn = self._listen_conn = None
        self._poll_only = False  # the next connection gets its own probe

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
            if self._stop_requests >= 2 and self._in_handler:
                raise _GiveUp  # out of the handler running on this thread

        return {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
