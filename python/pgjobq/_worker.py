"""Worker: claims jobs of one queue or several, runs a handler on each, reports the outcome.

The caller's thread owns both database connections and does the talking to
PostgreSQL: claim, acknowledge, heartbeat, reap, release.  Handlers never
touch the worker's connections.  With ``concurrency`` 1 (the default) they run
on the caller's thread itself, one job after another, with no hand-off
between threads; a keeper thread sends, while a handler runs, the
acknowledgements and heartbeats that fall due meanwhile (psycopg serialises
the two threads' use of the connection).  With ``concurrency`` above 1 they
run on a pool of that many threads.  The loop:

- claims up to ``batch`` jobs whenever a handler (thread) is idle; with
  several queues (``WorkerSettings(queue=["a", "b"])``), in one
  ``jobq.claim_any`` over them all, by priority, run_at and id across them.
  A queue with limits (``jobq.configure_queue(concurrency => ...,
  key_concurrency => ..., rate_limit => ...)``) hands out fewer jobs while
  a limit is reached: when a claim finds nothing it may take, the worker
  waits as it does for an empty queue (a notification, or poll_interval);
- acknowledges finished jobs together: successes in one statement, failures
  one ``jobq.fail`` each (with the lease).  Successes go with the next claim
  (``jobq.complete_and_claim``: one round trip and one commit for both), or,
  while handlers are busy, in one ``jobq.complete_many`` once the batch in
  hand is over or the oldest result has waited ``ack_interval``.  With
  several queues, successes go in one ``jobq.complete_many`` just before
  the next ``jobq.claim_any``;
- claims each job under a lease of ``lease_timeout`` (by default the
  queue's, set by ``jobq.configure_queue``, else 60 s), which the database
  stores on the job; heartbeats the jobs in hand every
  ``heartbeat_interval`` (by default a quarter of the shortest lease in
  hand, as the claims returned them), which extends each lease by its own
  length, so the reaper leaves long jobs alone.  When the queue has a
  timeout (``jobq.configure_queue(timeout => ...)``), the database keeps
  each claimed job's deadline to itself and never extends its lease past
  it; the worker learns from a heartbeat (``jobq.heartbeat_status``) that
  the deadline has passed, says so once, and heartbeats that job no more:
  the reaper recovers it once the lease runs out;
- stores a handler's return value as its job's result (a value JSON
  cannot encode fails the job instead, as an exception would); a handler
  raising ``Snooze(delay)`` puts its job back for that long, the attempt
  not counted (``jobq.snooze``), and one raising ``Retry(after)`` fails the
  attempt and has it retried after that long (``jobq.fail(retry_in =>
  ...)``);
- sets ``job.cancel_requested`` when ``jobq.cancel`` asks the job to stop:
  it hears the request at once on its listening connection (the
  notification ``cancel:<id>,...`` on the queue's channel, looked for every
  ``CANCEL_CHECK`` seconds while handlers run), and in any case at the next
  heartbeat (``jobq.heartbeat_status``), so also when LISTEN is off or
  does not work.  A job asked to stop before its handler started is
  handed back unstarted, and the database cancels it;
- runs ``jobq.reap`` every ``reap_interval``, which recovers the jobs whose
  lease expired, whoever held them (the worker level may reap; a role that
  may not is told so once and leaves reaping to others), and right after it
  ``jobq.tick``, which enqueues the jobs of the schedules that are due
  (``jobq.schedule``), so schedules advance with no other process (a role
  refused it leaves ticking to others, such as pg_cron);
- with nothing to do, registers as waiting on each of its queues
  (``jobq.wait``: enqueues notify the queue's channel only while a worker
  waits), claims once more, and sleeps on LISTEN (on every queue's channel)
  until a notification, ``poll_interval``, the run_at of the queues' next
  job in the future, or the next reap and tick, whichever comes first: a lost
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
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, TypeGuard

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

from pgjobq import _client
from pgjobq._errors import (
    ConfigurationError,
    Error,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PermissionDenied,
    Retry,
    Snooze,
    first_line,
)
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

# jobq.cancel notifies the queue's channel with this prefix and the ids of the
# running jobs it asked to stop; every other notification there is a wake-up.
CANCEL_PREFIX = "cancel:"
# While handlers run, look this often (seconds) for cancel notifications on
# the listening connection, without waiting on it.
CANCEL_CHECK = 0.1


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
# The lease claim gives when neither the worker nor the queue names one.
DEFAULT_LEASE_SECONDS = _client.DEFAULT_LEASE_TIMEOUT.total_seconds()


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
    different lease lengths share a queue safely.  None (the default) claims
    under the queue's lease_timeout (``jobq.configure_queue``), else 60 s.
    ``heartbeat_interval`` defaults to a quarter of the shortest lease in
    hand, as the claims returned them (also a lease the queue's timeout cut
    short: the worker cannot tell it apart, and heartbeats the job until
    the database says its deadline has passed).  An explicit heartbeat_interval
    must be shorter than an explicit lease_timeout; when it is not shorter
    than a lease the queue gave, the worker says so once and heartbeats
    such jobs at a quarter of their lease.

    ``queue`` is a queue name, or a list of several: the worker then claims
    from all of them at once (``jobq.claim_any``), listens on each one's
    channel and registers as waiting on each.

    ``prepared_statements=False`` stops psycopg from preparing the statements
    it runs often (``prepare_threshold=None``).  Turn it off behind PgBouncer
    in transaction pooling mode before version 1.21: a statement prepared on
    one server connection is missing on the next one a transaction gets.

    Nonsense (a count below 1, a non-finite or non-positive interval, a
    heartbeat no shorter than the lease) raises ConfigurationError here,
    before the database is touched.
    """

    queue: str | Sequence[str] = "default"
    batch: int = 10
    concurrency: int = 1
    poll_interval: float = 1.0
    lease_timeout: float | None = None  # the queue's (jobq.configure_queue), else the extension's 60 s
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

        if not isinstance(self.queue, str):
            names = self.queue
            require(
                isinstance(names, Sequence) and all(isinstance(q, str) for q in names),
                f"queue must be a string or a list of strings, got {names!r}",
            )
            require(len(names) > 0, "queue must name at least one queue, got an empty list")
            repeated = sorted({q for q in names if list(names).count(q) > 1})
            require(not repeated, f"queue names each queue once, got {', '.join(repeated)} more than once")
            # frozen: one name stays a str (as settings.queue always was), several become a tuple
            object.__setattr__(self, "queue", names[0] if len(names) == 1 else tuple(names))
        count("batch", 1000)
        count("concurrency", 1000)
        for name in ("poll_interval", "reap_interval", "reconnect_delay_max"):
            seconds(name, getattr(self, name))
        for name in ("lease_timeout", "heartbeat_interval"):
            if getattr(self, name) is not None:  # None: decided by the leases the queue hands out
                seconds(name, getattr(self, name))
        heartbeat = self.heartbeat_seconds
        if heartbeat is not None and self.lease_timeout is not None:
            require(
                heartbeat < self.lease_timeout,
                f"heartbeat_interval ({heartbeat}) must be shorter than lease_timeout ({self.lease_timeout})",
            )
        seconds("ack_interval", self.ack_interval, zero=True)
        if heartbeat is not None:
            require(self.ack_interval < heartbeat, "ack_interval must be shorter than a heartbeat")
        require(isinstance(self.name, str) and 0 < len(self.name) <= 200, "name must be 1 to 200 characters")

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues the worker claims from: queue, as a tuple of one name or several."""
        return (self.queue,) if isinstance(self.queue, str) else tuple(self.queue)

    @property
    def heartbeat_seconds(self) -> float | None:
        """heartbeat_interval, or a quarter of lease_timeout; None when both are the queue's to decide."""
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return None if self.lease_timeout is None else self.lease_timeout / 4


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


def _call(handler: Handler, job: Job) -> str | None:
    """Run handler on job; return its result as JSON text (None: it returned None, no result).

    One that hands back something to await fails the job instead of
    completing it: start-up refuses coroutine functions, but a wrapper (a
    lambda, a partial) can still return a coroutine, and its job must not
    count as done.  A result JSON cannot encode, or jsonb cannot store
    (NaN, U+0000, keys that are not strings: as ``pgjobq.complete`` refuses
    them), fails the job with InvalidArgument naming its type, rather than
    completing it without its result.
    """
    result = handler(job)
    if result is None:  # most handlers: no ABC check, no encoding
        return None
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never started: no "was never awaited" warning
        raise TypeError(
            f"handler {_name(handler)} returned {type(result).__name__}, an awaitable this Worker cannot "
            "await: the job did not run"
        )
    return _client.dump_json(result, f"the handler's result (a {type(result).__name__})")


class _CancelledUnstarted(Exception):
    """The outcome of a job whose cancel was requested before its handler started: handed back."""


class _GiveUp(BaseException):
    """Raised by a second SIGTERM/SIGINT into a handler running on the worker's own thread."""


def _when(moment: datetime | None) -> str:
    return "?" if moment is None else moment.isoformat(timespec="seconds")


def _warn_overdue(job: Job) -> None:
    logger.warning(
        "job %d is past its deadline (its queue's timeout): no more heartbeats; the reaper recovers it "
        "when its lease ends",
        job.id,
    )


class Worker:
    """Runs ``handler`` on the jobs of one queue or several.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment).
    A handler returns normally to complete its job, and what it returns
    (any JSON value; None for no result) is stored as the job's result.  Any
    exception (even SystemExit) fails it with ``"<ExceptionType>:
    <message>"``, except ``Snooze`` (the job waits, the attempt is given
    back) and ``Retry`` (a failure retried after the time it names).  A job
    whose cancel was requested (``job.cancel_requested``) ends cancelled when
    its handler raises, done when it returns.
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
        lease_timeout = self.settings.lease_timeout
        queues = self.settings.queues
        # Several queues: jobq.claim_any (after complete_many: there is no complete_and_claim_any), and
        # jobq.wait on each queue, in one statement.
        self._several = len(queues) > 1
        self._queue_names = ", ".join(queues)  # for logs
        # The hot statements' parameters, checked once (by WorkerSettings) rather than at every claim.
        where: dict[str, Any] = {"queues": list(queues)} if self._several else {"queue": queues[0]}
        self._claim_params: dict[str, Any] = {
            **where,
            "n": self.settings.batch,
            "worker": self.settings.name,
            "lease_timeout": None if lease_timeout is None else timedelta(seconds=lease_timeout),
        }
        self._wait_params: dict[str, Any] = {
            **where,
            "worker": self.settings.name,
            "up_to": timedelta(seconds=self.settings.poll_interval),
        }
        self.processed = 0
        self.abandoned = 0  # jobs left in hand by a forced stop (a second stop())
        self._stop = threading.Event()
        self._stop_requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        # Held by whoever reads the listening connection: the loop, or the keeper while a handler runs.
        self._listen_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # handler threads (concurrency > 1)
        # Jobs in hand.  Handler threads append to _finished (deque appends are
        # thread-safe).  The keeper thread (concurrency 1) shares _backlog,
        # _current, _ok, _results, _failed, _oldest_unacked, _leased_at,
        # _overdue, _heartbeat_every, _next_heartbeat,
        # _next_listen_check, _keeper_due and processed: they change under
        # _lock.  Everything else belongs to the loop's thread.
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
        # handler returned: (job, exception or None, result as JSON text or None)
        self._finished: deque[tuple[Job, BaseException | None, str | None]] = deque()
        self._ok: list[Job] = []  # handlers that returned, collected: to acknowledge
        self._results: dict[tuple[int, int], str] = {}  # the results of those in _ok that have one
        self._failed: list[tuple[Job, BaseException]] = []  # handlers that raised, collected: to report
        self._oldest_unacked = 0.0  # when the oldest result in _ok and _failed was collected
        # Heartbeats: every _heartbeat_every seconds, from the leases in hand.
        self._heartbeat_every = self.settings.heartbeat_seconds or DEFAULT_LEASE_SECONDS / 4
        self._warned_heartbeat = False  # said once that heartbeat_interval is too long for a lease
        self._next_heartbeat = 0.0
        # when this worker took or last extended each lease it holds (monotonic clock)
        self._leased_at: dict[int, float] = {}
        # jobs in hand past their deadline, as heartbeat_status said: no more heartbeats
        self._overdue: set[int] = set()
        self._next_listen_check = 0.0  # when to look for cancel notifications next, while handlers run
        self._next_reap = 0.0
        self._drained = False  # burst mode: the queue had no runnable job
        self._poll_only = False  # the LISTEN probe failed on this connection: poll until reconnected
        self._may_reap = True  # False once jobq.reap was refused to this role
        self._may_tick = True  # False once jobq.tick was refused to this role
        self._tick_failing = False  # the last tick failed (warned once)
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
        if self._running and self._listen_conn is not None and now >= self._next_listen_check:
            self._look_for_cancels_if_due(keeper=False)  # handler threads run: the keeper's job in effect
        if now >= self._next_reap:
            self._reap()
            self._tick()
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
        """Claim a batch into the backlog; False when the queue had nothing runnable (or nothing its limits
        let this claim take).

        Successes waiting to be acknowledged go with the claim: one statement,
        one round trip and one commit for both (jobq.complete_and_claim), with
        their results when any has one.  When the database refuses the
        results (one over its 1 MiB limit, say), nothing is acknowledged or
        claimed: the jobs are acknowledged one by one (_complete_singly), then
        the claim goes alone.  With several queues the successes go first,
        in one jobq.complete_many (so that the limits no longer count them as
        running), then the claim (jobq.claim_any).
        """
        conn = self._conn
        assert conn is not None
        if self._several:
            self._complete_many()
            jobs = _client.claim_any_unchecked(conn, self._claim_params, prepare=True)
            return self._claimed(jobs)
        successes, results = self._take_successes()
        settled = not successes  # once true, a failure below leaves the successes alone
        try:
            if successes:
                params = {
                    **self._claim_params,
                    "ids": [job.id for job in successes],
                    "leases": [job.lease for job in successes],
                    "results": results,
                }
                try:
                    accepted, jobs = _client.complete_and_claim_unchecked(conn, params, prepare=True)
                except InvalidArgument:
                    if results is None:
                        raise
                    settled = True
                    self._complete_singly(conn, successes, results)
                    jobs = _client.claim_unchecked(conn, self._claim_params, prepare=True)
                else:
                    settled = True
                    self._acknowledged(successes, accepted)
            else:
                jobs = _client.claim_unchecked(conn, self._claim_params, prepare=True)
        except BaseException:
            if not settled:
                self._restore_successes(successes, results)
            raise
        return self._claimed(jobs)

    def _claimed(self, jobs: list[Job]) -> bool:
        """Take the jobs a claim returned in hand; whether there were any."""
        if jobs:
            self._hold(jobs)
            self._start_handlers()
        if not jobs and self.settings.burst and not self._in_hand():
            noun = "queues" if self._several else "queue"
            logger.info("%s %s has no runnable job: burst done", noun, self._queue_names)
            self._drained = True
        return bool(jobs)

    def _hold(self, jobs: list[Job]) -> None:
        """Take the jobs just claimed into the backlog, and schedule their heartbeats from their leases."""
        now = time.monotonic()
        leases = [job._lease_seconds for job in jobs if job._lease_seconds is not None]
        shortest = min(leases, default=math.inf)
        interval = self._interval_for(shortest) if shortest < math.inf else None
        with self._lock:
            if self._backlog or self._running or self._current is not None:
                self._leased_at.update((job.id, now) for job in jobs)
                if interval is not None and interval < self._heartbeat_every:
                    self._heartbeat_every = interval
                    self._next_heartbeat = min(self._next_heartbeat, now + interval)
            else:  # nothing else in hand: the lease times of finished jobs can go
                self._leased_at = {job.id: now for job in jobs}
                self._overdue.clear()
                if interval is not None:
                    self._heartbeat_every = interval
                # and no lease in hand needs a heartbeat before one interval from now
                self._next_heartbeat = now + self._heartbeat_every
            self._backlog.extend(jobs)

    def _interval_for(self, lease: float) -> float:
        """The heartbeat interval that keeps a lease of that many seconds: heartbeat_interval if shorter, or
        a quarter of it."""
        interval = self.settings.heartbeat_interval
        if interval is not None:
            if interval < lease:
                return interval
            if not self._warned_heartbeat:
                self._warned_heartbeat = True
                logger.warning(
                    "heartbeat_interval (%g s) is not shorter than the %.3g s leases of queue %s; "
                    "heartbeating those jobs every %.3g s instead",
                    interval, lease, self._queue_names, lease / 4,
                )  # fmt: skip
        return lease / 4

    def _start_handlers(self) -> None:
        """Give backlog jobs to idle handler threads (never more: the rest stays ours to hand back).

        With concurrency 1, run them here instead, one after another, until
        the backlog is empty or stop().  A job whose cancel was requested
        before it started is not run: it goes back to the database (which
        cancels it).
        """
        if self._pool is None:
            self._run_backlog()
            return
        while self._backlog and len(self._running) < self.settings.concurrency:
            job = self._backlog.popleft()
            if job._cancel_is_set():
                self._record(job, _CancelledUnstarted(), None)
                continue
            future = self._pool.submit(self._run_handler, job)
            self._running[job.id] = _Running(job, future)

    def _run_backlog(self) -> None:
        """Run the backlog's handlers on this thread (concurrency 1); the keeper watches meanwhile."""
        while self._backlog and not self.stopping:
            with self._lock:
                job = self._backlog.popleft()
                if job._cancel is not None and job._cancel.is_set():  # (inline: this runs for every job)
                    self._record(job, _CancelledUnstarted(), None)
                    continue
                self._current = job
                due = self._next_heartbeat
                if self._ok:
                    due = min(due, self._oldest_unacked + self.settings.ack_interval)
                if self._listen_conn is not None and self._next_listen_check < due:
                    due = self._next_listen_check
                if due < self._keeper_due:  # the keeper would sleep through it: wake it to rearm
                    self._keeper_due = due  # once: it may take a while to run, and recomputes anyway
                    self._keeper_wake.notify()
            self._in_handler = True
            try:
                result = _call(self.handler, job)
            except _GiveUp:
                raise  # a second signal: the job stays _current, to be abandoned
            except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
                error: BaseException | None = exc
                result = None
            else:
                error = None
            finally:
                self._in_handler = False
            with self._lock:
                self._record(job, error, result)
                self._current = None

    def _run_handler(self, job: Job) -> None:
        """Runs on a handler thread: records the handler's exception (None on success) in _finished."""
        try:
            result = _call(self.handler, job)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            self._finished.append((job, exc, None))
        else:
            self._finished.append((job, None, result))

    def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, it is time to look for
        cancel notifications, or a poll interval."""
        deadline = min(self._next_heartbeat, time.monotonic() + self.settings.poll_interval)
        if self._ok or self._failed:
            deadline = min(deadline, self._oldest_unacked + self.settings.ack_interval)
        if self._listen_conn is not None:
            deadline = min(deadline, self._next_listen_check)
        timeout = max(0.0, deadline - time.monotonic())
        wait([r.future for r in self._running.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def _wait_for_work(self) -> None:
        """The claim found nothing: register as waiting, claim once more, then sleep until there is work.

        Sleeps until a notification for our queue arrives (then claims at
        once), the poll interval passes, the queue's next job in the future
        is due, or stop().  Without a listening connection (listen=False, or
        its probe failed) it only sleeps the poll interval: registering
        would make producers notify for nobody.  A cancel notification
        (``cancel:<ids>``) is no wake-up: it only concerns jobs in hand.
        """
        # also woken for the next reap and tick: schedules advance every reap_interval
        deadline = min(time.monotonic() + self.settings.poll_interval, self._next_reap)
        conn, listen = self._conn, self._listen_conn
        if listen is None or not self._may_wait:
            self._listen_until(deadline, listen)
            return
        assert conn is not None
        self._acknowledge(now=True)  # nothing in hand is worth holding back while we sleep
        # Wake-ups that came while the worker was busy are stale: the claim after registering
        # finds their jobs.  Left pending, they would end the sleep below at once.
        with self._listen_lock:
            self._read_notifications(listen, 0)
        before = time.monotonic()
        try:
            if self._several:
                registered, _, next_run_in = _client.wait_any_unchecked(conn, self._wait_params, prepare=True)
            else:
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
        """Sleep until deadline (monotonic), stop(), or a wake-up notification on listen (then True).

        The wait is cut in slices of at most 0.1 s so that a stop is noticed promptly.
        """
        while not self.stopping and (remaining := deadline - time.monotonic()) > 0:
            if listen is None:
                self._sleep(remaining)
                return False
            with self._listen_lock:
                woken = self._read_notifications(listen, min(0.1, remaining), stop_after=1)
            if woken:
                return True
        return False

    def _read_notifications(
        self, listen: psycopg.Connection[Any], timeout: float, *, stop_after: int | None = None
    ) -> bool:
        """Read the notifications listen receives within timeout (or until stop_after of them came); True
        when a wake-up was among them.  Call with _listen_lock held.

        Cancel requests among them set the cancel_requested of the jobs in
        hand they name.  The generator is always run to its end: closing it
        early would drop the rest of a packet that holds several.
        """
        woken = False
        for notify in listen.notifies(timeout=timeout, stop_after=stop_after):
            if notify.payload.startswith(CANCEL_PREFIX):
                self._cancels_notified(notify.payload)
            else:
                woken = True
        return woken

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- cancel requests ------------------------------------------------------

    def _look_for_cancels_if_due(self, *, keeper: bool) -> None:
        """Every CANCEL_CHECK seconds while handlers run: read, without waiting, the notifications the
        listening connection holds, for cancel requests.

        The wake-ups read meanwhile are stale (see _wait_for_work).  The
        keeper (concurrency 1) reads only while a handler runs on the loop's
        thread, and never waits for the connection: between handlers it is
        the loop's.
        """
        with self._lock:
            now = time.monotonic()
            if now < self._next_listen_check:
                return
            self._next_listen_check = now + CANCEL_CHECK
        if not self._listen_lock.acquire(blocking=not keeper):
            return
        try:
            listen = self._listen_conn
            if listen is None or listen.closed or (keeper and self._current is None):
                return
            self._read_notifications(listen, 0)
        except psycopg.OperationalError as exc:
            if not keeper:
                raise  # the loop reconnects
            # the loop reconnects it once the handler is over; heartbeats bring cancel requests meanwhile
            logger.debug("keeper: the listening connection failed (%s)", first_line(exc))
        finally:
            self._listen_lock.release()

    def _cancels_notified(self, payload: str) -> None:
        """A notification ``cancel:<id>,<id>,...``: the jobs in hand among those ids are to stop."""
        ids = {int(part) for part in payload[len(CANCEL_PREFIX) :].split(",") if part.strip().isdigit()}
        self._request_cancel(ids, "by notification")

    def _request_cancel(self, ids: Collection[int], how: str) -> None:
        """Set cancel_requested on the jobs in hand, not finished, whose id is in ids."""
        if not ids:
            return
        with self._lock:
            jobs = [job for job in self._unfinished() if job.id in ids and not job._cancel_is_set()]
        for job in jobs:
            job.cancel_requested.set()
            logger.info("job %d: cancel requested (heard %s)", job.id, how)

    # -- acknowledging ------------------------------------------------------

    def _collect(self) -> None:
        """Move the jobs whose handler thread returned from _running to the results to report."""
        while self._finished:
            job, outcome, result = self._finished.popleft()
            self._running.pop(job.id, None)
            self._record(job, outcome, result)

    def _record(self, job: Job, outcome: BaseException | None, result: str | None) -> None:
        """Add a handler's outcome (and result, as JSON text) to the results to report."""
        if not self._ok and not self._failed:
            self._oldest_unacked = time.monotonic()
        if outcome is None:
            self._ok.append(job)
            if result is not None:
                self._results[job.id, job.lease] = result
        else:
            self._failed.append((job, outcome))

    def _take_successes(self) -> tuple[list[Job], list[str | None] | None]:
        """Take the successes collected, and their results aligned with them (None when none has one), to
        acknowledge (_restore_successes if that fails).

        Taken under the lock, so that the keeper and the loop never send the same one.
        """
        with self._lock:
            successes, self._ok = self._ok, []
            if not self._results:
                return successes, None
            results, self._results = self._results, {}
        return successes, [results.get((job.id, job.lease)) for job in successes]

    def _restore_successes(self, successes: list[Job], results: list[str | None] | None) -> None:
        """Put back successes whose acknowledgement failed, to send again."""
        if successes:
            with self._lock:
                if not self._ok and not self._failed:
                    self._oldest_unacked = time.monotonic()
                self._ok[:0] = successes
                if results is not None:
                    for job, result in zip(successes, results, strict=True):
                        if result is not None:
                            self._results[job.id, job.lease] = result

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
        successes, results = self._take_successes()
        if not successes:
            return
        try:
            accepted = _client.complete_many_unchecked(
                conn,
                [job.id for job in successes],
                [job.lease for job in successes],
                results=results,
                prepare=True,
            )
        except InvalidArgument:
            if results is None:
                self._restore_successes(successes, results)
                raise
            self._complete_singly(conn, successes, results)
            return
        except BaseException:
            self._restore_successes(successes, results)
            raise
        self._acknowledged(successes, accepted)

    def _complete_singly(
        self, conn: psycopg.Connection[Any], successes: list[Job], results: list[str | None]
    ) -> None:
        """The database refused a batch of results: acknowledge its jobs one by one.

        A job whose own result is refused (over 1 MiB of jsonb, say) fails
        with the database's reason, and is retried per its policy, rather
        than losing its result or stopping the batch.  If the connection
        breaks meanwhile, the jobs not sent yet are sent again later.
        """
        done: list[Job] = []
        accepted: set[int] = set()
        sent = 0
        try:
            for job, result in zip(successes, results, strict=True):
                try:
                    accepted |= _client.complete_many_unchecked(conn, [job.id], [job.lease], results=[result])
                except InvalidArgument as refused:
                    with self._lock:
                        self._record(job, refused, None)
                else:
                    done.append(job)
                sent += 1
        except BaseException:
            self._restore_successes(successes[sent:], results[sent:])
            raise
        finally:
            self._acknowledged(done, accepted)

    def _acknowledged(self, successes: list[Job], accepted: set[int]) -> None:
        """Log the outcome of acknowledging successes: accepted, or refused as stale."""
        if logger.isEnabledFor(logging.INFO):
            for job in successes:
                if job.id in accepted:
                    logger.info("job %d done (attempt %d)", job.id, job.attempts)
        if len(accepted) < len(successes):
            for job in successes:
                if job.id not in accepted:
                    self._lost(job, "result discarded")
        with self._lock:
            self.processed += len(successes)

    def _lost(self, job: Job, what: str) -> None:
        """Log that the database refused job's lease: a warning, unless the job was cancelled meanwhile."""
        if job._cancel_is_set():  # most likely cancelled by force, which voids the lease
            logger.info("job %d: lease %d void (cancelled meanwhile?); %s", job.id, job.lease, what)
        else:
            logger.warning("job %d: lease %d lost; %s", job.id, job.lease, what)

    def _report_failures(self) -> None:
        """Report the failures collected, one statement each (they are rare; each needs its own row)."""
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
        """Report one outcome other than success: jobq.release for a job cancelled before it started,
        jobq.snooze for Snooze, jobq.fail for the rest (with retry_in for Retry)."""
        assert self._conn is not None
        if isinstance(error, _CancelledUnstarted):
            try:
                _client.release(self._conn, job.id, job.lease)
            except (LeaseLost, JobNotFound):
                self._lost(job, "not started")
                return
            logger.info("job %d: cancel requested before it started; handed back unstarted", job.id)
            return
        if isinstance(error, Snooze):
            try:
                run_at = _client.snooze(self._conn, job.id, job.lease, error.delay)
            except (LeaseLost, JobNotFound):
                self._lost(job, "snooze discarded")
                return
            except InvalidArgument as refused:  # a delay the database does not take: a failure then
                error = refused
            else:
                if run_at is None:  # its cancel was requested: cancelled instead
                    logger.info("job %d cancelled (its handler asked to snooze)", job.id)
                else:
                    logger.info(
                        "job %d snoozed for %s s, until %s (attempt %d given back)",
                        job.id, error.delay.total_seconds(), _when(run_at), job.attempts,
                    )  # fmt: skip
                return
        retry_in = error.after if isinstance(error, Retry) else None
        cause = error.__cause__ if isinstance(error, Retry) else None
        failure = cause if cause is not None else error
        message = f"{type(failure).__name__}: {failure}"
        try:
            status, run_at = _client.fail(self._conn, job.id, message, job.lease, retry_in=retry_in)
        except (LeaseLost, JobNotFound):
            self._lost(job, f"failure discarded ({message})")
            return
        if status == "cancelled":
            logger.info("job %d cancelled (attempt %d): %s", job.id, job.attempts, message)
        elif status == "failed":
            logger.error(
                "job %d failed for good (attempt %d/%d): %s", job.id, job.attempts, job.max_attempts, message
            )
        else:
            logger.warning(
                "job %d failed (attempt %d/%d), retry at %s: %s",
                job.id, job.attempts, job.max_attempts, _when(run_at), message,
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
                self._lost(job, "not handed back")
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

        One jobq.heartbeat_status: it also says which jobs were asked to stop
        (their cancel_requested is set) and which are past their deadline
        (the database left their lease unextended: it expires no later than
        the statement's clock, compared in the database).  A job past its
        deadline gets no more heartbeats, said once in a warning: its lease
        cannot be extended, the reaper recovers the job when the lease runs
        out.  A lease this worker took or extended less than a
        heartbeat ago is left alone when two heartbeat intervals fit in it:
        by the next sweep it is still at most two intervals old.  The
        interval is recomputed from the leases in hand.  Runs on the loop's
        thread or the keeper's.
        """
        conn = self._conn
        assert conn is not None
        with self._lock:
            now = time.monotonic()
            if now < self._next_heartbeat:
                return
            unfinished = self._unfinished()
            self._leased_at = {job.id: self._leased_at.get(job.id, 0.0) for job in unfinished}
            if self._overdue:
                self._overdue.intersection_update(self._leased_at)
            live = [job for job in unfinished if job.id not in self._overdue]
            leases = [job._lease_seconds for job in live if job._lease_seconds is not None]
            if leases:
                self._heartbeat_every = self._interval_for(min(leases))
            interval = self._heartbeat_every
            self._next_heartbeat = now + interval
            due = [
                job
                for job in live
                if now - self._leased_at[job.id] >= interval or 2 * interval >= (job._lease_seconds or 0.0)
            ]
        if not due:
            return
        rows = _client.heartbeat_status_unchecked(
            conn, [job.id for job in due], [job.lease for job in due], prepare=True
        )
        held: set[int] = set()
        cancels: list[int] = []
        overdue: list[int] = []
        for job_id, cancel_requested, past in rows:
            held.add(job_id)
            if cancel_requested:
                cancels.append(job_id)
            if past:
                overdue.append(job_id)
        with self._lock:
            for job_id in held:
                self._leased_at[job_id] = now
            newly_overdue = set(overdue) - self._overdue
            self._overdue.update(newly_overdue)
            # A job whose handler returned meanwhile (perhaps after completing it in its
            # own transaction) is not lost yet: the acknowledgement tells whether the lease held.
            still = {job.id for job in self._unfinished()}
        for job in due:
            if job.id in newly_overdue:
                _warn_overdue(job)
            if job.id not in held and job.id in still:
                if job._cancel_is_set():
                    logger.info("job %d: lease %d void (cancelled meanwhile?)", job.id, job.lease)
                else:
                    logger.warning("job %d: lease %d lost while in hand; its result will be discarded",
                                   job.id, job.lease)  # fmt: skip
                    job.cancel_requested.set()  # its handler may as well stop
        self._request_cancel(cancels, "at a heartbeat")

    # -- the keeper thread (concurrency 1) -------------------------------------

    def _keep(self) -> None:
        """While a handler runs on the loop's thread, send the acknowledgements and heartbeats that fall due,
        and look for cancel notifications.

        Between handlers the loop sends them itself.  It sleeps until the next
        heartbeat, acknowledgement or look at the listening connection
        (every CANCEL_CHECK seconds while listening: between handlers it
        only moves that time on) falls due; a handler start wakes it only
        when something falls due earlier than that (so a quick handler costs
        the keeper nothing).  A failed statement (the connection is gone:
        the loop reconnects) leaves its work to the loop.
        """
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    now = time.monotonic()
                    due = self._next_heartbeat
                    if self._listen_conn is not None:
                        if self._current is None and self._next_listen_check <= now:
                            self._next_listen_check = now + CANCEL_CHECK  # no handler runs: none to stop
                        due = min(due, self._next_listen_check)
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
                    if self._listen_conn is not None:
                        self._look_for_cancels_if_due(keeper=True)
                except Exception as exc:  # the loop's next statement meets the same error and handles it
                    failed = first_line(exc)
            if failed is not None:
                # what fell due stays due: wait, or this would spin until the loop reconnects
                logger.debug("keeper: %s; left to the worker's loop", failed)
                with self._lock:
                    if not self._closing:
                        self._keeper_wake.wait(min(1.0, self._heartbeat_every))

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

    def _tick(self) -> None:
        """Enqueue the occurrences of the schedules that are due (jobq.tick), unless refused to this role.

        Every worker ticks, whatever its queues: a schedule's jobs go to its
        own queue, and ticks by many workers enqueue each occurrence once.
        It runs every reap_interval, so it logs at debug level, but for a
        tick that fails: a warning, once until a tick succeeds again (every
        schedule waits while one fails).  A role refused it leaves ticking to
        others (another worker, or pg_cron); the worker carries on either way.
        """
        assert self._conn is not None
        if not self._may_tick:
            return
        try:
            enqueued = _client.tick(self._conn)
        except PermissionDenied as exc:
            self._may_tick = False
            logger.debug("not ticking: jobq.tick was refused to this worker's role (%s)", first_line(exc))
            return
        except Error as exc:
            log = logger.debug if self._tick_failing else logger.warning
            log("jobq.tick failed, schedules wait: %s", first_line(exc))
            self._tick_failing = True
            return
        self._tick_failing = False
        if enqueued:
            logger.debug("tick: %d scheduled job(s) enqueued", enqueued)

    # -- connections --------------------------------------------------------

    def _connect(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = self._open("worker")
            version = check_extension(self._conn)
            if not self._started:
                self._started = True
                logger.info(
                    "worker %s started on %s %s (pgjobq %s)",
                    self.settings.name,
                    "queues" if self._several else "queue",
                    self._queue_names,
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
            with self._listen_lock:
                self._listen_conn = self._open("listen")
                channels = [_client.channel(self._listen_conn, queue) for queue in self.settings.queues]
                arrive = self._notifications_arrive()
                if arrive:
                    # Wake-ups sent before this LISTEN are not missed: a claim follows every connect.
                    # Cancel requests are not either: the next heartbeat brings them.
                    for channel in channels:
                        self._listen_conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            if not arrive:
                logger.warning(
                    "notifications do not reach this worker's listening connection (a "
                    "transaction-pooling PgBouncer?); not listening on %s, polling every %s s instead",
                    ", ".join(channels),
                    self.settings.poll_interval,
                )
                with self._listen_lock:
                    self._listen_conn.close()
                    self._listen_conn = None
                self._poll_only = True

    def _notifications_arrive(self) -> bool:
        """Whether a probe notification sent from the work connection reaches the listening one.

        The probe goes to a channel of its own, so no other listener sees it,
        and only a notification on that channel counts: LISTEN on the queue's
        channel comes after the probe, but behind a transaction-pooling
        PgBouncer another client's LISTEN can deliver the queue's wake-ups
        and cancel requests here, and they prove nothing.  Call with
        _listen_lock held.
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
        if self._conn is not None:
            self._conn.close()
        with self._listen_lock:
            if self._listen_conn is not None:
                self._listen_conn.close()
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
